package gguf

import "errors"

// Sentinel errors. Every error this package returns wraps one of these (with
// %w), so callers can test with errors.Is; the message around it names the
// key, tensor or file offset at fault.
var (
	// ErrNotGGUF: the file does not start with the "GGUF" magic.
	ErrNotGGUF = errors.New("gguf: not a GGUF file")
	// ErrVersion: a GGUF version other than 2 or 3 (or a big-endian file).
	ErrVersion = errors.New("gguf: unsupported GGUF version")
	// ErrTruncated: the file ends inside the header, the metadata, the
	// tensor infos or a tensor's data.
	ErrTruncated = errors.New("gguf: file truncated")
	// ErrMalformed: a structural error: a count or length larger than the
	// rest of the file, an unknown value type, a duplicate key or tensor
	// name, a bad alignment, an overflowing shape, a misaligned or
	// overlapping tensor.
	ErrMalformed = errors.New("gguf: malformed file")
	// ErrUnknownType: a tensor of a ggml type this package does not know.
	ErrUnknownType = errors.New("gguf: unknown ggml type")
	// ErrUnsupported: something well-formed that this package cannot use:
	// the data of a tensor of a type it cannot decode (k-quants, ...), a
	// non-llama architecture, a tokenizer model other than llama and gpt2,
	// a rope scaling other than llama3.
	ErrUnsupported = errors.New("gguf: unsupported")
	// ErrKeyNotFound: a metadata key is absent.
	ErrKeyNotFound = errors.New("gguf: metadata key not found")
	// ErrWrongType: a metadata value is not of the requested type.
	ErrWrongType = errors.New("gguf: metadata value has the wrong type")
	// ErrTensorNotFound: a tensor is absent.
	ErrTensorNotFound = errors.New("gguf: tensor not found")
	// ErrShape: a tensor's shape or type does not fit the model.
	ErrShape = errors.New("gguf: tensor shape does not match the model")
	// ErrLayerRange: LoadLlama was asked for a layer range the model does
	// not have.
	ErrLayerRange = errors.New("gguf: invalid layer range")
	// ErrBadVocab: a vocabulary that llama.cpp would refuse (duplicate
	// strings, lengths that disagree, ids out of range).
	ErrBadVocab = errors.New("gguf: invalid vocabulary")
	// ErrWrite: a Writer used out of order or given invalid input.
	ErrWrite = errors.New("gguf: invalid write")
)
