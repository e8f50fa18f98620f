package gguf

import (
	"bytes"
	"io"
)

// WriteVocab writes a vocabulary-only GGUF file (no tensors): how
// pipeshard stores a GGUF model's tokenizer as its own content-addressed
// artifact. llama.cpp writes such files too (its "vocab-only" models).
func WriteVocab(out io.Writer, v Vocab) error {
	if err := v.Validate(); err != nil {
		return err
	}
	w := NewWriter(out)
	if err := addVocab(w, &v); err != nil {
		return err
	}
	return w.Close()
}

// ParseVocab reads a file written by WriteVocab (or any GGUF file's
// tokenizer).
func ParseVocab(b []byte) (Vocab, error) {
	f, err := Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return Vocab{}, err
	}
	return ReadVocab(f)
}
