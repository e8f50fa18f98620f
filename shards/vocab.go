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

// VocabOf returns t's vocabulary in GGUF's conventions (▁ for spaces,
// <0xNN> byte tokens, token types), ready for a GGUF file.
func VocabOf(t *tokenizer.Tokenizer) gguf.Vocab {
	pieces, scores, kinds := t.Vocab()
	v := gguf.Vocab{Model: "llama", Tokens: make([]string, len(pieces)), Scores: scores, Types: make([]int32, len(kinds)),
		BOS: t.BOS(), EOS: t.EOS(), UNK: t.Unk()}
	for i := range pieces {
		v.Tokens[i] = string(pieces[i])
		v.Types[i] = int32(kinds[i])
	}
	return v
}

// TokenizerFromVocab builds a tokenizer from a GGUF vocabulary. Only
// SentencePiece ("llama") vocabularies are supported so far.
func TokenizerFromVocab(v gguf.Vocab) (*tokenizer.Tokenizer, error) {
	if v.Model != "llama" {
		return nil, fmt.Errorf("shards: tokenizer model %q is not supported yet (only llama/SentencePiece)", v.Model)
	}
	pieces := make([][]byte, len(v.Tokens))
	kinds := make([]tokenizer.Kind, len(v.Tokens))
	for i, s := range v.Tokens {
		pieces[i] = []byte(s)
		kinds[i] = tokenizer.Normal
		if v.Types != nil {
			kinds[i] = tokenizer.Kind(v.Types[i])
		}
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
