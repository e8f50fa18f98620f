package gguf

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
)

func TestLlamaRoundTrip(t *testing.T) {
	tied := tinyConfig()
	tied.TiedHead = true
	for _, tc := range []struct {
		name string
		cfg  ovrt.Config
		dt   dtypes
	}{
		{"f32", tinyConfig(), allOf(ovrt.F32)},
		{"q8_0", tinyConfig(), allOf(ovrt.Q8_0)},
		{"q4_0", tinyConfig(), allOf(ovrt.Q4_0)},
		{"mixed", tinyConfig(), dtypes{embed: ovrt.F32, attn: ovrt.Q8_0, ffn: ovrt.Q4_0, head: ovrt.Q8_0}},
		{"tied_f32", tied, allOf(ovrt.F32)},
		{"tied_q4_0", tied, dtypes{embed: ovrt.Q4_0, attn: ovrt.Q8_0, ffn: ovrt.F32, head: ovrt.Q4_0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := synthModel(7, tc.cfg, tc.dt)
			if err := want.Validate(); err != nil {
				t.Fatal(err)
			}
			vocab := synthVocab(tc.cfg.Vocab)
			path := writeModel(t, want, vocab)

			f := parseFile(t, path)
			cfg, err := ReadLlamaConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, tc.cfg) {
				t.Errorf("config:\n got %+v\nwant %+v", cfg, tc.cfg)
			}
			v, err := ReadVocab(f)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, vocab) {
				t.Errorf("vocab differs:\n got %+v\nwant %+v", v, vocab)
			}
			if _, err := f.Tensor(nameHead); (err == nil) == tc.cfg.TiedHead {
				t.Errorf("output.weight present = %v with TiedHead %v", err == nil, tc.cfg.TiedHead)
			}

			for _, r := range [][2]int{{0, 0}, {0, 2}, {0, 1}, {1, 2}, {1, 0}} {
				got, err := LoadLlama(path, r[0], r[1])
				if err != nil {
					t.Fatalf("LoadLlama%v: %v", r, err)
				}
				if err := got.Validate(); err != nil {
					t.Fatalf("LoadLlama%v: Validate: %v", r, err)
				}
				if !reflect.DeepEqual(got.Config, tc.cfg) {
					t.Errorf("LoadLlama%v config differs", r)
				}
				end := r[1]
				if end <= 0 {
					end = tc.cfg.Layers
				}
				if got.Start != r[0] || got.End != end {
					t.Errorf("LoadLlama%v: range [%d, %d)", r, got.Start, got.End)
				}
				checkWeights(t, got, want)
				if err := got.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// The file's tensors carry the stored types and GGUF-order shapes.
func TestWriteLlamaTensorDirectory(t *testing.T) {
	c := tinyConfig()
	w := synthModel(3, c, dtypes{embed: ovrt.F32, attn: ovrt.Q8_0, ffn: ovrt.Q4_0, head: ovrt.Q8_0})
	f := parseFile(t, writeModel(t, w, synthVocab(c.Vocab)))
	want := map[string]struct {
		typ  GGMLType
		dims []uint64
	}{
		"token_embd.weight":        {TypeF32, []uint64{64, 100}},
		"blk.0.attn_norm.weight":   {TypeF32, []uint64{64}},
		"blk.1.attn_q.weight":      {TypeQ8_0, []uint64{64, 64}},
		"blk.1.attn_k.weight":      {TypeQ8_0, []uint64{64, 32}},
		"blk.1.attn_v.weight":      {TypeQ8_0, []uint64{64, 32}},
		"blk.1.attn_output.weight": {TypeQ8_0, []uint64{64, 64}},
		"blk.0.ffn_gate.weight":    {TypeQ4_0, []uint64{64, 96}},
		"blk.0.ffn_down.weight":    {TypeQ4_0, []uint64{96, 64}},
		"blk.0.ffn_up.weight":      {TypeQ4_0, []uint64{64, 96}},
		"output_norm.weight":       {TypeF32, []uint64{64}},
		"output.weight":            {TypeQ8_0, []uint64{64, 100}},
	}
	if len(f.Tensors) != 2+9*c.Layers+1 {
		t.Errorf("%d tensors", len(f.Tensors))
	}
	for name, w := range want {
		ti, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if ti.Type != w.typ || !reflect.DeepEqual(ti.Dims, w.dims) {
			t.Errorf("%s: %s %v, want %s %v", name, ti.Type, ti.Dims, w.typ, w.dims)
		}
		if ti.Offset%32 != 0 || int64(ti.Offset) < f.DataOffset {
			t.Errorf("%s: offset %d (data at %d)", name, ti.Offset, f.DataOffset)
		}
	}
	for _, k := range []string{"general.architecture", "general.name", "general.alignment", "llama.context_length",
		"llama.embedding_length", "llama.block_count", "llama.feed_forward_length", "llama.attention.head_count",
		"llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base",
		"llama.rope.dimension_count", "llama.vocab_size", "tokenizer.ggml.model", "tokenizer.ggml.tokens",
		"tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"} {
		if !f.Has(k) {
			t.Errorf("missing key %s", k)
		}
	}
	if ft, _ := f.Uint("general.file_type"); ft != 7 {
		t.Errorf("general.file_type %d, want 7 (mostly Q8_0)", ft)
	}
}

func TestLoadLlamaConvertsHalfTensors(t *testing.T) {
	c := tinyConfig()
	want := synthModel(11, c, allOf(ovrt.F32))
	f := parseFile(t, writeModel(t, want, synthVocab(c.Vocab)))
	conv := map[string]GGMLType{
		"blk.0.attn_q.weight":    TypeF16,
		"blk.1.ffn_down.weight":  TypeBF16,
		"blk.0.attn_norm.weight": TypeF16,
		"output_norm.weight":     TypeBF16,
		"token_embd.weight":      TypeF16,
	}
	b := rewrite(t, f, nil, func(ti TensorInfo, data []byte) (GGMLType, []uint64, []byte, bool) {
		typ, ok := conv[ti.Name]
		if !ok {
			return ti.Type, ti.Dims, data, true
		}
		out := make([]byte, len(data)/2)
		for i := range len(data) / 4 {
			x := math.Float32frombits(le.Uint32(data[4*i:]))
			var h uint16
			if typ == TypeF16 {
				h = Float32ToHalf(x)
			} else {
				h = uint16(math.Float32bits(x) >> 16) // truncate to bf16
			}
			le.PutUint16(out[2*i:], h)
		}
		return typ, ti.Dims, out, true
	})
	got, err := LoadLlama(writeBytes(t, b), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := func(v []float32) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = HalfToFloat32(Float32ToHalf(x))
		}
		return out
	}
	bf := func(v []float32) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = math.Float32frombits(math.Float32bits(x) &^ 0xFFFF)
		}
		return out
	}
	checkVec(t, "wq f16", got.Layers[0].Wq.F32, half(want.Layers[0].Wq.F32))
	checkVec(t, "w2 bf16", got.Layers[1].W2.F32, bf(want.Layers[1].W2.F32))
	checkVec(t, "attn_norm f16", got.Layers[0].AttnNorm, half(want.Layers[0].AttnNorm))
	checkVec(t, "final norm bf16", got.FinalNorm, bf(want.FinalNorm))
	checkVec(t, "embed f16", got.Embed.F32, half(want.Embed.F32))
	checkVec(t, "wk f32", got.Layers[0].Wk.F32, want.Layers[0].Wk.F32)
	if got.Layers[0].Wq.DType != ovrt.F32 {
		t.Errorf("f16 matrix loaded as %v", got.Layers[0].Wq.DType)
	}
}

func TestLoadLlamaUnsupportedType(t *testing.T) {
	c := tinyConfig()
	w := synthModel(5, c, allOf(ovrt.F32))
	f := parseFile(t, writeModel(t, w, synthVocab(c.Vocab)))
	const victim = "blk.1.ffn_up.weight"
	b := rewrite(t, f, nil, func(ti TensorInfo, data []byte) (GGMLType, []uint64, []byte, bool) {
		if ti.Name != victim {
			return ti.Type, ti.Dims, data, true
		}
		// Q4_K: 256 weights per 144-byte block; the rows of 64 are too
		// short, so reshape to a legal [256, 24] of junk.
		return TypeQ4_K, []uint64{256, 24}, make([]byte, 24*144), true
	})
	path := writeBytes(t, b)
	g, err := Parse(strings.NewReader(string(b)), int64(len(b)))
	if err != nil {
		t.Fatalf("a Q4_K tensor must parse: %v", err)
	}
	if _, err := g.TensorBytes(victim); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "Q4_K") {
		t.Errorf("TensorBytes: %v", err)
	}
	if _, err := g.TensorF32(victim); !errors.Is(err, ErrUnsupported) {
		t.Errorf("TensorF32: %v", err)
	}
	// Layer 0 alone does not touch it; layer 1 reports shape first
	// (the junk has the wrong shape), so fix the shape to reach the type.
	if _, err := LoadLlama(path, 0, 1); err != nil {
		t.Errorf("layer 0 only: %v", err)
	}
	if _, err := LoadLlama(path, 1, 2); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), victim) {
		t.Errorf("layer 1: %v", err)
	}

	// A well-shaped k-quant needs 256-wide rows: a model with dim 256.
	c2 := tinyConfig()
	c2.Dim, c2.HiddenDim, c2.HeadDim = 256, 256, 64
	w2 := synthModel(5, c2, allOf(ovrt.F32))
	f2 := parseFile(t, writeModel(t, w2, synthVocab(c2.Vocab)))
	b2 := rewrite(t, f2, nil, func(ti TensorInfo, data []byte) (GGMLType, []uint64, []byte, bool) {
		if ti.Name != victim {
			return ti.Type, ti.Dims, data, true
		}
		return TypeQ4_K, ti.Dims, make([]byte, ti.Dims[1]*144), true
	})
	_, err = LoadLlama(writeBytes(t, b2), 0, 0)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "Q4_K") {
		t.Errorf("Q4_K matrix: %v", err)
	}
}

func TestLoadLlamaLayerRange(t *testing.T) {
	c := tinyConfig()
	path := writeModel(t, synthModel(1, c, allOf(ovrt.F32)), synthVocab(c.Vocab))
	for _, r := range [][2]int{{-1, 1}, {2, 0}, {2, 3}, {1, 1}, {1, 3}, {0, 5}, {5, 0}} {
		_, err := LoadLlama(path, r[0], r[1])
		if !errors.Is(err, ErrLayerRange) {
			t.Errorf("LoadLlama%v: %v, want ErrLayerRange", r, err)
		}
	}
}

func TestReadLlamaConfigMissingKeys(t *testing.T) {
	c := tinyConfig()
	f := parseFile(t, writeModel(t, synthModel(1, c, allOf(ovrt.F32)), synthVocab(c.Vocab)))
	for _, key := range []string{
		"general.architecture", "llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
		"llama.attention.head_count", "llama.context_length", "llama.attention.layer_norm_rms_epsilon",
	} {
		g, err := ParseBytes(rewrite(t, f, []string{key}, nil))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ReadLlamaConfig(g)
		if !errors.Is(err, ErrKeyNotFound) || !strings.Contains(err.Error(), key) {
			t.Errorf("without %s: %v", key, err)
		}
	}
	// Optional keys take their defaults.
	g, err := ParseBytes(rewrite(t, f, []string{"llama.rope.freq_base", "llama.attention.head_count_kv",
		"llama.attention.key_length", "llama.attention.value_length", "llama.rope.dimension_count",
		"llama.vocab_size", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadLlamaConfig(g)
	if err != nil {
		t.Fatal(err)
	}
	want := c
	want.KVHeads = want.Heads // no GQA without head_count_kv
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	// Wrong types are named.
	h, err := ParseBytes(func() []byte {
		var kvs []KV
		for _, kv := range f.KVs {
			if kv.Key == "llama.block_count" {
				kv.Type, kv.Value = ValueString, "two"
			}
			kvs = append(kvs, kv)
		}
		g := *f
		g.KVs = kvs
		return rewrite(t, &g, nil, nil)
	}())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLlamaConfig(h); !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), "llama.block_count") {
		t.Errorf("string block_count: %v", err)
	}
	// A non-llama architecture.
	arch := *f
	arch.KVs = append([]KV(nil), f.KVs...)
	for i := range arch.KVs {
		if arch.KVs[i].Key == "general.architecture" {
			arch.KVs[i].Value = "gpt2"
		}
	}
	a, err := ParseBytes(rewrite(t, &arch, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLlamaConfig(a); !errors.Is(err, ErrUnsupported) {
		t.Errorf("gpt2 architecture: %v", err)
	}
}

func TestLoadLlamaShapeMismatch(t *testing.T) {
	c := tinyConfig()
	f := parseFile(t, writeModel(t, synthModel(1, c, allOf(ovrt.F32)), synthVocab(c.Vocab)))
	b := rewrite(t, f, nil, func(ti TensorInfo, data []byte) (GGMLType, []uint64, []byte, bool) {
		if ti.Name == "blk.0.attn_k.weight" { // transpose: [32, 64] instead of [64, 32]
			return ti.Type, []uint64{ti.Dims[1], ti.Dims[0]}, data, true
		}
		return ti.Type, ti.Dims, data, true
	})
	_, err := LoadLlama(writeBytes(t, b), 0, 0)
	if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "blk.0.attn_k.weight") {
		t.Errorf("transposed wk: %v", err)
	}
	b = rewrite(t, f, nil, func(ti TensorInfo, data []byte) (GGMLType, []uint64, []byte, bool) {
		return ti.Type, ti.Dims, data, ti.Name != "blk.1.ffn_up.weight"
	})
	_, err = LoadLlama(writeBytes(t, b), 0, 0)
	if !errors.Is(err, ErrTensorNotFound) || !strings.Contains(err.Error(), "blk.1.ffn_up.weight") {
		t.Errorf("missing ffn_up: %v", err)
	}
}

func TestRopeScalingLlama3(t *testing.T) {
	c := tinyConfig()
	c.Dim, c.Heads, c.KVHeads, c.HeadDim = 256, 4, 2, 64 // head size 64, as Llama 3.2 1B
	c.RopeTheta = 500000
	c.Context = 1024
	c.RopeScaling = &ovrt.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	w := synthModel(2, c, allOf(ovrt.Q8_0))
	f := parseFile(t, writeModel(t, w, synthVocab(c.Vocab)))
	got, err := ReadLlamaConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("config:\n got %+v %+v\nwant %+v %+v", got, got.RopeScaling, c, c.RopeScaling)
	}
	rf, err := f.TensorF32(nameRopeFreqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rf) != 32 || rf[0] != 1 || rf[31] != 32 {
		t.Errorf("rope_freqs %v", rf)
	}

	// Without the private keys the parameters are recovered from
	// rope_freqs.weight alone.
	g, err := ParseBytes(rewrite(t, f, []string{keyScalingType, keyScalingFactor, keyScalingLow, keyScalingHigh, keyScalingOrigCtx}, nil))
	if err != nil {
		t.Fatal(err)
	}
	inf, err := ReadLlamaConfig(g)
	if err != nil {
		t.Fatal(err)
	}
	s := inf.RopeScaling
	if s == nil || s.Type != "llama3" || s.Factor != 32 || s.OriginalContext != 8192 ||
		math.Abs(s.LowFreqFactor-1) > 1e-3 || math.Abs(s.HighFreqFactor-4) > 1e-3 {
		t.Errorf("inferred %+v", s)
	}
}

// inferLlama3 reproduces the factors of real Llama 3 configurations,
// including bands with fewer than two blended frequencies.
func TestInferLlama3(t *testing.T) {
	for _, tc := range []struct {
		head  int
		theta float64
		s     ovrt.RopeScaling
	}{
		{128, 500000, ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
		{64, 500000, ovrt.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
		{16, 500000, ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
		{16, 10000, ovrt.RopeScaling{Type: "llama3", Factor: 4, LowFreqFactor: 2, HighFreqFactor: 3, OriginalContext: 100}},
		{32, 10000, ovrt.RopeScaling{Type: "llama3", Factor: 2, LowFreqFactor: 1, HighFreqFactor: 8, OriginalContext: 4096}},
	} {
		want := Llama3RopeFactors(tc.s, tc.head, tc.theta)
		got, err := inferLlama3(want, tc.head, tc.theta, 8192)
		if err != nil {
			t.Errorf("%+v: %v", tc, err)
			continue
		}
		re := Llama3RopeFactors(*got, tc.head, tc.theta)
		for i := range re {
			if math.Abs(float64(re[i]-want[i])) > 1e-4*float64(want[i]) {
				t.Errorf("%+v: inferred %+v gives factor %d = %g, want %g", tc, *got, i, re[i], want[i])
			}
		}
		if err := (ovrt.Config{Dim: tc.head, HiddenDim: 1, Layers: 1, Heads: 1, KVHeads: 1, Vocab: 1, Context: 1,
			NormEps: 1e-5, RopeTheta: tc.theta, RopeScaling: got}).Validate(); err != nil {
			t.Errorf("%+v: inferred scaling invalid: %v", tc, err)
		}
	}
	ones := make([]float32, 32)
	for i := range ones {
		ones[i] = 1
	}
	if s, err := inferLlama3(ones, 64, 10000, 8192); s != nil || err != nil {
		t.Errorf("all ones: %v %v", s, err)
	}
	ones[3] = 5
	if _, err := inferLlama3(ones, 64, 10000, 8192); !errors.Is(err, ErrUnsupported) {
		t.Errorf("non-monotone factors: %v", err)
	}
}

func TestWriteLlamaRefuses(t *testing.T) {
	c := tinyConfig()
	w := synthModel(1, c, allOf(ovrt.F32))
	v := synthVocab(c.Vocab)
	var sink strings.Builder
	dup := synthVocab(c.Vocab)
	dup.Tokens[50] = dup.Tokens[40]
	short := synthVocab(c.Vocab - 1)
	bos := synthVocab(c.Vocab)
	bos.BOS = 3
	model := synthVocab(c.Vocab)
	model.Model = "bert"
	part := *w
	part.End = 1
	part.Layers = part.Layers[:1]
	part.FinalNorm, part.Head = nil, ovrt.Matrix{}
	headPart, err := w.Slice(0, c.Layers, 10, c.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		w    *ovrt.Weights
		v    Vocab
		err  error
	}{
		{"duplicate token", w, dup, ErrBadVocab},
		{"vocab size", w, short, ErrBadVocab},
		{"bos mismatch", w, bos, ErrBadVocab},
		{"tokenizer model", w, model, ErrUnsupported},
		{"partial model", &part, v, ErrLayerRange},
		{"partial head", headPart, v, ErrLayerRange},
	} {
		if err := WriteLlama(&sink, "x", tc.w, tc.v); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	bad := *w
	bad.Layers = append([]ovrt.Layer(nil), w.Layers...)
	bad.Layers[1].Wq.Rows = 3
	if err := WriteLlama(&sink, "x", &bad, v); !errors.Is(err, ovrt.ErrBadWeights) {
		t.Errorf("bad weights: %v", err)
	}
}

func TestReadVocabGPT2(t *testing.T) {
	c := tinyConfig()
	c.BOS, c.EOS = 98, 99
	w := synthModel(1, c, allOf(ovrt.F32))
	v := Vocab{Model: "gpt2", Pre: "llama-bpe", BOS: 98, EOS: 99, UNK: -1}
	for i := range c.Vocab {
		v.Tokens = append(v.Tokens, string(rune('a'+i%26))+strings.Repeat("Ġ", i/26))
		v.Types = append(v.Types, TokenNormal)
	}
	v.Merges = []string{"a b", "Ġ Ġ", "ab c"}
	f := parseFile(t, writeModel(t, w, v))
	got, err := ReadVocab(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Errorf("gpt2 vocab:\n got %+v\nwant %+v", got, v)
	}
	cfg, err := ReadLlamaConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BOS != 98 || cfg.EOS != 99 {
		t.Errorf("bos/eos %d/%d", cfg.BOS, cfg.EOS)
	}
}
