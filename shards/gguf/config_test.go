package gguf

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
)

// editKVs rewrites f with its metadata changed: set replaces or appends
// entries, drop removes keys.
func editKVs(t testing.TB, f *File, set map[string]any, drop ...string) *File {
	t.Helper()
	g := *f
	g.KVs = nil
	gone := map[string]bool{}
	for _, k := range drop {
		gone[k] = true
	}
	done := map[string]bool{}
	for _, kv := range f.KVs {
		if gone[kv.Key] {
			continue
		}
		if v, ok := set[kv.Key]; ok {
			kv.Value, done[kv.Key] = v, true
		}
		g.KVs = append(g.KVs, kv)
	}
	for k, v := range set {
		if !done[k] {
			g.KVs = append(g.KVs, KV{Key: k, Value: v})
		}
	}
	return mustParseBytes(t, rewrite(t, &g, nil, nil))
}

func TestReadLlamaConfigVariants(t *testing.T) {
	c := tinyConfig()
	f := parseFile(t, writeModel(t, synthModel(1, c, allOf(ovrt.F32)), synthVocab(c.Vocab)))
	for _, tc := range []struct {
		name    string
		set     map[string]any
		drop    []string
		want    error  // nil: success
		mention string // in the error
		check   func(ovrt.Config) bool
	}{
		{name: "per-layer arrays", set: map[string]any{
			"llama.feed_forward_length":     []uint32{96, 96},
			"llama.attention.head_count_kv": []int32{2, 2},
		}, check: func(g ovrt.Config) bool { return g.HiddenDim == 96 && g.KVHeads == 2 }},
		{name: "varying per-layer", set: map[string]any{"llama.feed_forward_length": []uint32{96, 128}},
			want: ErrUnsupported, mention: "llama.feed_forward_length"},
		{name: "empty per-layer", set: map[string]any{"llama.feed_forward_length": []uint32{}},
			want: ErrWrongType, mention: "llama.feed_forward_length"},
		{name: "u64 and f64 values", set: map[string]any{
			"llama.block_count": uint64(2), "llama.rope.freq_base": float64(10000),
		}, check: func(g ovrt.Config) bool { return g.Layers == 2 && g.RopeTheta == 10000 }},
		{name: "huge block count", set: map[string]any{"llama.block_count": uint64(1 << 40)},
			want: ovrt.ErrBadConfig, mention: "llama.block_count"},
		{name: "invalid config", set: map[string]any{"llama.attention.head_count_kv": uint32(3)},
			want: ovrt.ErrBadConfig, mention: "kv_heads"},
		{name: "explicit head dim", set: map[string]any{
			"llama.attention.key_length": uint32(32), "llama.attention.value_length": uint32(32),
			"llama.rope.dimension_count": uint32(32),
		}, check: func(g ovrt.Config) bool { return g.HeadDim == 32 && g.QDim() == 128 }},
		{name: "value length", set: map[string]any{"llama.attention.value_length": uint32(32)},
			want: ErrUnsupported, mention: "value_length"},
		{name: "partial rotary", set: map[string]any{"llama.rope.dimension_count": uint32(8)},
			want: ErrUnsupported, mention: "dimension_count"},
		{name: "rope scaling none", set: map[string]any{"llama.rope.scaling.type": "none"},
			check: func(g ovrt.Config) bool { return g.RopeScaling == nil }},
		{name: "rope scaling factor 1", set: map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(1)},
			check: func(g ovrt.Config) bool { return g.RopeScaling == nil }},
		{name: "linear scaling", set: map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(4)},
			want: ErrUnsupported, mention: "linear"},
		{name: "yarn", set: map[string]any{"llama.rope.scaling.type": "yarn"}, want: ErrUnsupported, mention: "yarn"},
		{name: "vocab from tokens", drop: []string{"llama.vocab_size"},
			check: func(g ovrt.Config) bool { return g.Vocab == 100 }},
		{name: "vocab from embedding", drop: []string{"llama.vocab_size", "tokenizer.ggml.tokens"},
			check: func(g ovrt.Config) bool { return g.Vocab == 100 }},
		{name: "gpt2 without ids", set: map[string]any{"tokenizer.ggml.model": "gpt2"},
			drop:  []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"},
			check: func(g ovrt.Config) bool { return g.BOS == -1 && g.EOS == -1 }},
		{name: "eps as string", set: map[string]any{"llama.attention.layer_norm_rms_epsilon": "1e-5"},
			want: ErrWrongType, mention: "layer_norm_rms_epsilon"},
		{name: "negative heads", set: map[string]any{"llama.attention.head_count": int32(-4)},
			want: ErrWrongType, mention: "head_count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ReadLlamaConfig(editKVs(t, f, tc.set, tc.drop...))
			if tc.want == nil {
				if err != nil || !tc.check(g) {
					t.Errorf("got %+v, %v", g, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("got %v, want %v mentioning %q", err, tc.want, tc.mention)
			}
		})
	}
}

func TestReadVocabErrors(t *testing.T) {
	c := tinyConfig()
	f := parseFile(t, writeModel(t, synthModel(1, c, allOf(ovrt.F32)), synthVocab(c.Vocab)))
	for _, tc := range []struct {
		name string
		set  map[string]any
		drop []string
		want error
	}{
		{"no model", nil, []string{"tokenizer.ggml.model"}, ErrKeyNotFound},
		{"bert", map[string]any{"tokenizer.ggml.model": "bert"}, nil, ErrUnsupported},
		{"no tokens", nil, []string{"tokenizer.ggml.tokens"}, ErrKeyNotFound},
		{"short scores", map[string]any{"tokenizer.ggml.scores": []float32{1}}, nil, ErrBadVocab},
		{"short types", map[string]any{"tokenizer.ggml.token_type": []int32{1}}, nil, ErrBadVocab},
		{"bos out of range", map[string]any{"tokenizer.ggml.bos_token_id": uint32(100)}, nil, ErrBadVocab},
		{"gpt2 without merges", map[string]any{"tokenizer.ggml.model": "gpt2"}, nil, ErrKeyNotFound},
		{"scores of strings", map[string]any{"tokenizer.ggml.scores": []string{"x"}}, nil, ErrWrongType},
	} {
		if _, err := ReadVocab(editKVs(t, f, tc.set, tc.drop...)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Defaults of a llama tokenizer without special ids.
	v, err := ReadVocab(editKVs(t, f, nil, "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
		"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"))
	if err != nil || v.BOS != 1 || v.EOS != 2 || v.UNK != 0 || v.Scores != nil || v.Types != nil {
		t.Errorf("defaults: %+v %v", v, err)
	}
}

func TestVocabFile(t *testing.T) {
	v := synthVocab(300)
	var buf bytes.Buffer
	if err := WriteVocab(&buf, v); err != nil {
		t.Fatal(err)
	}
	got, err := ParseVocab(buf.Bytes())
	if err != nil || !reflect.DeepEqual(got, v) {
		t.Errorf("vocab-only file: %v", err)
	}
	v.Tokens[5] = v.Tokens[6]
	if err := WriteVocab(&buf, v); !errors.Is(err, ErrBadVocab) {
		t.Errorf("duplicate tokens: %v", err)
	}
}

func TestTypeNames(t *testing.T) {
	for typ, want := range map[GGMLType]string{TypeQ4_K: "Q4_K", TypeBF16: "BF16", GGMLType(4): "ggml_type(4)"} {
		if typ.String() != want {
			t.Errorf("%d: %s", typ, typ)
		}
	}
	if !TypeQ6_K.Known() || GGMLType(31).Known() || TypeQ6_K.Decodable() || !TypeBF16.Decodable() {
		t.Errorf("Known/Decodable")
	}
	if TypeQ8_0.BlockSize() != 32 || TypeQ8_0.TypeSize() != 34 || TypeQ4_K.BlockSize() != 256 {
		t.Errorf("layouts")
	}
	if ValueFloat64.String() != "float64" || ValueType(99).String() != "value_type(99)" {
		t.Errorf("value type names")
	}
}

// Tensors ovrt would ignore (biases, experts) make LoadLlama refuse the
// layers that carry them rather than run them wrongly.
func TestLoadLlamaForeignTensors(t *testing.T) {
	c := tinyConfig()
	f := parseFile(t, writeModel(t, synthModel(1, c, allOf(ovrt.F32)), synthVocab(c.Vocab)))
	add := func(name string, dims ...uint64) string {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, kv := range f.KVs {
			w.AddKV(kv.Key, kv.Value)
		}
		for _, ti := range f.Tensors {
			w.AddTensor(ti.Name, ti.Type, ti.Dims...)
		}
		w.AddTensor(name, TypeF32, dims...)
		for _, ti := range f.Tensors {
			data, _ := f.raw(&ti)
			w.WriteTensor(ti.Name, data)
		}
		w.WriteTensorF32(name, make([]float32, dims[0]))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return writeBytes(t, buf.Bytes())
	}
	bias := add("blk.1.attn_q.bias", 64)
	if _, err := LoadLlama(bias, 0, 0); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "blk.1.attn_q.bias") {
		t.Errorf("bias: %v", err)
	}
	if _, err := LoadLlama(bias, 0, 1); err != nil {
		t.Errorf("layer 0 has no bias: %v", err)
	}
	if _, err := LoadLlama(add("blk.7.attn_q.weight", 64), 0, 0); !errors.Is(err, ErrMalformed) {
		t.Errorf("block 7 of 2: %v", err)
	}
	if _, err := LoadLlama(add("token_embd_norm.weight", 64), 1, 2); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown global tensor: %v", err)
	}
	if _, err := LoadLlama(add("blk.0.attn_rot_embd", 64), 0, 0); err != nil {
		t.Errorf("legacy attn_rot_embd: %v", err)
	}
	moe := editKVs(t, f, map[string]any{"llama.expert_count": uint32(8)})
	if _, err := ReadLlamaConfig(moe); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "expert") {
		t.Errorf("mixture of experts: %v", err)
	}
}
