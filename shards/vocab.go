package shards

import (
	"bytes"
	"fmt"

	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards/gguf"
)

func init() {
	tokenizerDecoders["gguf"] = func(b []byte, vocab int) (*tokenizer.Tokenizer, error) {
		v, err := gguf.ParseVocab(b)
		if err != nil {
			return nil, err
		}
		t, err := TokenizerFromVocab(v)
		if err != nil {
			return nil, err
		}
		if t.VocabSize() != vocab {
			return nil, fmt.Errorf("shards: the tokenizer has %d tokens, the model %d", t.VocabSize(), vocab)
		}
		return t, nil
	}
}

// VocabOf returns t's vocabulary in GGUF's conventions, ready for a GGUF
// file. A SentencePiece tokenizer gives model "llama" (▁ for spaces,
// <0xNN> byte tokens, scores, token types); a byte-level BPE one gives model
// "gpt2" with its pre-tokenizer, tokens in GPT-2's byte alphabet, token
// types and merges, no scores and no unknown token.
func VocabOf(t *tokenizer.Tokenizer) gguf.Vocab {
	pieces, scores, kinds := t.Vocab()
	v := gguf.Vocab{Model: t.Model(), Tokens: make([]string, len(pieces)), Scores: scores, Types: make([]int32, len(kinds)),
		BOS: t.BOS(), EOS: t.EOS(), UNK: t.Unk()}
	for i := range pieces {
		v.Tokens[i] = string(pieces[i])
		v.Types[i] = int32(kinds[i])
	}
	if v.Model == tokenizer.ModelGPT2 {
		v.Pre = t.Pre()
		v.Merges = t.Merges()
		v.Scores = nil // byte-level BPE ranks merges; its scores are all 0
	}
	return v
}

// TokenizerFromVocab builds a tokenizer from a GGUF vocabulary:
// SentencePiece ("llama": Llama 1 and 2) or byte-level BPE ("gpt2") with
// Llama 3's pre-tokenizer ("llama-bpe", or none named, as in files
// written before tokenizer.ggml.pre existed). A gpt2 vocabulary's scores
// and unknown-token id are not used: byte-level BPE ranks merges and can
// spell every byte.
func TokenizerFromVocab(v gguf.Vocab) (*tokenizer.Tokenizer, error) {
	switch v.Model {
	case tokenizer.ModelLlama, tokenizer.ModelGPT2:
	default:
		return nil, fmt.Errorf("shards: tokenizer model %q is not supported (only llama, SentencePiece, and gpt2, byte-level BPE)", v.Model)
	}
	if v.Types != nil && len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("shards: %d token types for %d tokens", len(v.Types), len(v.Tokens))
	}
	kinds := make([]tokenizer.Kind, len(v.Tokens))
	for i := range v.Tokens {
		kinds[i] = tokenizer.Normal
		if v.Types != nil {
			kinds[i] = tokenizer.Kind(v.Types[i])
		}
	}
	if v.Model == tokenizer.ModelGPT2 {
		if v.Pre != "" && v.Pre != tokenizer.PreLlama3 {
			return nil, fmt.Errorf("shards: gpt2 tokenizer with pre-tokenizer %q is not supported (only %q, Llama 3's)", v.Pre, tokenizer.PreLlama3)
		}
		return tokenizer.NewBPE(v.Tokens, v.Merges, kinds, v.BOS, v.EOS, v.Pre)
	}
	pieces := make([][]byte, len(v.Tokens))
	for i, s := range v.Tokens {
		pieces[i] = []byte(s)
	}
	scores := v.Scores
	if scores == nil {
		scores = make([]float32, len(v.Tokens))
	}
	return tokenizer.New(pieces, scores, kinds, v.BOS, v.EOS, v.UNK)
}

// VocabArtifact returns the bytes of a tokenizer artifact in the "gguf"
// format.
func VocabArtifact(v gguf.Vocab) ([]byte, error) {
	var b bytes.Buffer
	if err := gguf.WriteVocab(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
