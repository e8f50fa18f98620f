package gguf

import (
	"fmt"
	"math"
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// Vocab is the tokenizer embedded in a GGUF file (the tokenizer.ggml.*
// keys).
type Vocab struct {
	// Model is tokenizer.ggml.model: "llama" (SentencePiece: Tokens with
	// Scores) or "gpt2" (byte-level BPE: Tokens with Merges).
	Model string
	// Pre is tokenizer.ggml.pre, the pre-tokenizer name of a gpt2 model
	// (e.g. "llama-bpe"); empty when absent.
	Pre    string
	Tokens []string
	Scores []float32 // per token, or nil
	Types  []int32   // per token (TokenNormal, ...), or nil
	Merges []string  // "a b" pairs, for gpt2
	// Special token ids, -1 for none.
	BOS, EOS, UNK int
}

// Validate checks v the way llama.cpp will when it loads the file: a
// known model, per-token arrays of the right length, special ids in range,
// and no token string twice (llama.cpp refuses duplicates).
func (v *Vocab) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadVocab}, args...)...)
	}
	n := len(v.Tokens)
	switch v.Model {
	case "llama", "gpt2":
	default:
		return fmt.Errorf("%w: tokenizer model %q (want llama or gpt2)", ErrUnsupported, v.Model)
	}
	if n == 0 {
		return bad("no tokens")
	}
	if v.Scores != nil && len(v.Scores) != n {
		return bad("%d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return bad("%d token types for %d tokens", len(v.Types), n)
	}
	for _, id := range []struct {
		name string
		v    int
	}{{"BOS", v.BOS}, {"EOS", v.EOS}, {"UNK", v.UNK}} {
		if id.v < -1 || id.v >= n {
			return bad("%s id %d outside [0, %d)", id.name, id.v, n)
		}
	}
	seen := make(map[string]int, n)
	for i, t := range v.Tokens {
		if j, dup := seen[t]; dup {
			return bad("tokens %d and %d are both %q", j, i, t)
		}
		seen[t] = i
	}
	return nil
}

// ReadVocab reads the tokenizer embedded in f: tokenizer.ggml.model
// "llama" (tokens, scores, token_type) or "gpt2" (tokens, merges,
// token_type, pre). Absent special ids are -1, except that a llama
// tokenizer defaults to llama.cpp's UNK 0, BOS 1, EOS 2.
func ReadVocab(f *File) (Vocab, error) {
	var v Vocab
	var err error
	if v.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		return v, err
	}
	if v.Model != "llama" && v.Model != "gpt2" {
		return v, fmt.Errorf("%w: tokenizer.ggml.model %q (want llama or gpt2)", ErrUnsupported, v.Model)
	}
	if v.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return v, err
	}
	n := len(v.Tokens)
	if f.Has("tokenizer.ggml.scores") {
		s, err := f.Floats("tokenizer.ggml.scores")
		if err != nil {
			return v, err
		}
		if len(s) != n {
			return v, fmt.Errorf("%w: tokenizer.ggml.scores has %d entries for %d tokens", ErrBadVocab, len(s), n)
		}
		v.Scores = make([]float32, n)
		for i, x := range s {
			v.Scores[i] = float32(x)
		}
	}
	if f.Has("tokenizer.ggml.token_type") {
		t, err := f.Ints("tokenizer.ggml.token_type")
		if err != nil {
			return v, err
		}
		if len(t) != n {
			return v, fmt.Errorf("%w: tokenizer.ggml.token_type has %d entries for %d tokens", ErrBadVocab, len(t), n)
		}
		v.Types = make([]int32, n)
		for i, x := range t {
			if x < math.MinInt32 || x > math.MaxInt32 {
				return v, fmt.Errorf("%w: tokenizer.ggml.token_type[%d] is %d", ErrBadVocab, i, x)
			}
			v.Types[i] = int32(x)
		}
	}
	if f.Has("tokenizer.ggml.merges") || v.Model == "gpt2" {
		if v.Merges, err = f.Strings("tokenizer.ggml.merges"); err != nil {
			return v, err
		}
	}
	if f.Has("tokenizer.ggml.pre") {
		if v.Pre, err = f.String("tokenizer.ggml.pre"); err != nil {
			return v, err
		}
	}
	v.UNK, v.BOS, v.EOS = -1, -1, -1
	if v.Model == "llama" {
		v.UNK, v.BOS, v.EOS = 0, 1, 2
	}
	for _, id := range []struct {
		key string
		dst *int
	}{
		{"tokenizer.ggml.bos_token_id", &v.BOS},
		{"tokenizer.ggml.eos_token_id", &v.EOS},
		{"tokenizer.ggml.unknown_token_id", &v.UNK},
	} {
		if !f.Has(id.key) {
			continue
		}
		x, err := f.Uint(id.key)
		if err != nil {
			return v, err
		}
		if x >= uint64(n) {
			return v, fmt.Errorf("%w: %s %d outside the %d tokens", ErrBadVocab, id.key, x, n)
		}
		*id.dst = int(x)
	}
	for _, id := range []int{v.BOS, v.EOS, v.UNK} {
		if id >= n {
			return v, fmt.Errorf("%w: default special id %d outside the %d tokens", ErrBadVocab, id, n)
		}
	}
	return v, nil
}

// addVocab declares v's tokenizer.ggml.* keys.
func addVocab(w *Writer, v *Vocab) error {
	type entry struct {
		key string
		val any
	}
	kvs := []entry{{"tokenizer.ggml.model", v.Model}}
	if v.Pre != "" {
		kvs = append(kvs, entry{"tokenizer.ggml.pre", v.Pre})
	}
	kvs = append(kvs, entry{"tokenizer.ggml.tokens", v.Tokens})
	if v.Scores != nil {
		kvs = append(kvs, entry{"tokenizer.ggml.scores", v.Scores})
	}
	if v.Types != nil {
		kvs = append(kvs, entry{"tokenizer.ggml.token_type", v.Types})
	}
	if v.Merges != nil || v.Model == "gpt2" {
		m := v.Merges
		if m == nil {
			m = []string{}
		}
		kvs = append(kvs, entry{"tokenizer.ggml.merges", m})
	}
	for _, id := range []entry{
		{"tokenizer.ggml.bos_token_id", v.BOS},
		{"tokenizer.ggml.eos_token_id", v.EOS},
		{"tokenizer.ggml.unknown_token_id", v.UNK},
	} {
		if n := id.val.(int); n >= 0 {
			kvs = append(kvs, entry{id.key, uint32(n)})
		}
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.key, kv.val); err != nil {
			return err
		}
	}
	return nil
}
