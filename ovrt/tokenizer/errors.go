package tokenizer

import "errors"

// Sentinel errors. Every error this package returns wraps exactly one of
// them (test with errors.Is); the message after the sentinel names the file,
// the token, the byte offset and the offending value.
var (
	// ErrTruncated: the tokenizer file ends inside a record, or a length
	// field points past its end.
	ErrTruncated = errors.New("tokenizer: truncated tokenizer file")

	// ErrMalformed: the tokenizer file is complete but its contents are
	// invalid (negative or inconsistent lengths, non-finite scores, too few
	// tokens, a file too large to be a tokenizer).
	ErrMalformed = errors.New("tokenizer: malformed tokenizer file")

	// ErrMismatch: the tokenizer's vocabulary size differs from the model's.
	ErrMismatch = errors.New("tokenizer: tokenizer does not match the model")

	// ErrVocab: an explicit vocabulary given to New is inconsistent.
	ErrVocab = errors.New("tokenizer: invalid vocabulary")

	// ErrUnsupported: a vocabulary asks for a feature this package does
	// not implement, such as a byte-level BPE pre-tokenizer other than
	// Llama 3's.
	ErrUnsupported = errors.New("tokenizer: unsupported tokenizer")

	// ErrTokenID: a token id lies outside the vocabulary.
	ErrTokenID = errors.New("tokenizer: bad token id")
)
