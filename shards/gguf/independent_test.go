package gguf

import (
	"math"
	"reflect"
	"strings"
	"testing"

	ggufparser "github.com/gpustack/gguf-parser-go"

	"github.com/pipeshard/pipeshard/ovrt"
)

// crossCheck reads path with gguf-parser-go, an independent GGUF parser,
// and compares its view with ours.
func crossCheck(t *testing.T, path string, c ovrt.Config) {
	t.Helper()
	gf, err := ggufparser.ParseGGUFFile(path)
	if err != nil {
		t.Fatalf("gguf-parser-go: %v", err)
	}
	f := parseFile(t, path)
	if uint32(gf.Header.Version) != f.Version || gf.Header.TensorCount != uint64(len(f.Tensors)) ||
		gf.Header.MetadataKVCount != uint64(len(f.KVs)) {
		t.Errorf("header: theirs v%d %d tensors %d kvs; ours v%d %d tensors %d kvs", gf.Header.Version,
			gf.Header.TensorCount, gf.Header.MetadataKVCount, f.Version, len(f.Tensors), len(f.KVs))
	}
	if gf.TensorDataStartOffset != f.DataOffset {
		t.Errorf("data offset: theirs %d, ours %d", gf.TensorDataStartOffset, f.DataOffset)
	}

	a := gf.Architecture()
	want := map[string][2]uint64{
		"block count":      {a.BlockCount, uint64(c.Layers)},
		"embedding length": {a.EmbeddingLength, uint64(c.Dim)},
		"head count":       {a.AttentionHeadCount, uint64(c.Heads)},
		"kv head count":    {a.AttentionHeadCountKV, uint64(c.KVHeads)},
		"context length":   {a.MaximumContextLength, uint64(c.Context)},
		"vocabulary":       {a.VocabularyLength, uint64(c.Vocab)},
		"rope dimensions":  {a.RoPEDimensionCount, uint64(c.HeadSize())},
		"key length":       {uint64(a.AttentionKeyLength), uint64(c.HeadSize())},
	}
	for what, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s: gguf-parser-go says %d, want %d", what, v[0], v[1])
		}
	}
	if a.Architecture != "llama" {
		t.Errorf("architecture %q", a.Architecture)
	}
	if len(a.FeedForwardLength) == 0 || a.FeedForwardLength[0] != uint64(c.HiddenDim) {
		t.Errorf("feed forward length %v, want %d", a.FeedForwardLength, c.HiddenDim)
	}
	if a.AttentionLayerNormRMSEpsilon != float32(c.NormEps) || a.RoPEFrequencyBase != float32(c.RopeTheta) {
		t.Errorf("eps %g theta %g", a.AttentionLayerNormRMSEpsilon, a.RoPEFrequencyBase)
	}

	tok := gf.Tokenizer()
	v, err := ReadVocab(f)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Model != v.Model || tok.TokensLength != uint64(len(v.Tokens)) || tok.BOSTokenID != int64(v.BOS) ||
		tok.EOSTokenID != int64(v.EOS) || tok.MergesLength != uint64(len(v.Merges)) {
		t.Errorf("tokenizer: theirs %+v; ours model %s, %d tokens, bos %d eos %d", tok, v.Model, len(v.Tokens), v.BOS, v.EOS)
	}

	// Every metadata entry has the same type and value.
	for _, kv := range f.KVs {
		their, ok := gf.Header.MetadataKV.Get(kv.Key)
		if !ok {
			t.Errorf("gguf-parser-go lacks key %s", kv.Key)
			continue
		}
		if uint32(their.ValueType) != uint32(kv.Type) {
			t.Errorf("%s: type %v, ours %v", kv.Key, their.ValueType, kv.Type)
			continue
		}
		if arr, isArr := kv.Value.(Array); isArr {
			ta := their.ValueArray()
			if uint32(ta.Type) != uint32(arr.Elem) || ta.Len != uint64(arr.Len()) {
				t.Errorf("%s: array of %d %v, ours %d %v", kv.Key, ta.Len, ta.Type, arr.Len(), arr.Elem)
			}
			switch vals := arr.Values.(type) {
			case []string:
				// gguf-parser-go trims white space off every string it
				// reads (tokens such as ";\r" included); we keep the
				// bytes, as llama.cpp does.
				theirs := ta.ValuesString()
				for i := range vals {
					if theirs[i] != strings.TrimSpace(vals[i]) {
						t.Errorf("%s[%d]: %q, ours %q", kv.Key, i, theirs[i], vals[i])
						break
					}
				}
			case []float32:
				if !sameF32(ta.ValuesFloat32(), vals) {
					t.Errorf("%s: float arrays differ", kv.Key)
				}
			case []int32:
				if !reflect.DeepEqual(ta.ValuesInt32(), vals) {
					t.Errorf("%s: int32 arrays differ", kv.Key)
				}
			}
			continue
		}
		if str, ok := kv.Value.(string); ok {
			kv.Value = strings.TrimSpace(str)
		}
		if !reflect.DeepEqual(their.Value, kv.Value) {
			t.Errorf("%s: %v (%T), ours %v (%T)", kv.Key, their.Value, their.Value, kv.Value, kv.Value)
		}
	}

	// Every tensor has the same name, type, shape and place.
	if len(gf.TensorInfos) != len(f.Tensors) {
		t.Fatalf("%d tensors, ours %d", len(gf.TensorInfos), len(f.Tensors))
	}
	for i, ti := range gf.TensorInfos {
		ours := f.Tensors[i]
		if ti.Name != ours.Name || uint32(ti.Type) != uint32(ours.Type) || !reflect.DeepEqual(ti.Dimensions, ours.Dims) ||
			uint64(gf.TensorDataStartOffset)+ti.Offset != ours.Offset || ti.Bytes() != ours.Size {
			t.Errorf("tensor %d: theirs %s %v %v at +%d (%d bytes); ours %s %v %v at %d (%d bytes)", i,
				ti.Name, ti.Type, ti.Dimensions, ti.Offset, ti.Bytes(), ours.Name, ours.Type, ours.Dims, ours.Offset, ours.Size)
		}
	}
	if gf.ModelParameters == 0 || math.IsNaN(float64(gf.ModelBitsPerWeight)) {
		t.Errorf("parameters %v bits/weight %v", gf.ModelParameters, gf.ModelBitsPerWeight)
	}
}

func TestIndependentParser(t *testing.T) {
	tied := tinyConfig()
	tied.TiedHead = true
	scaled := tinyConfig()
	scaled.Dim, scaled.Heads, scaled.KVHeads, scaled.HeadDim, scaled.RopeTheta = 256, 4, 1, 64, 500000
	scaled.RopeScaling = &ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	for _, tc := range []struct {
		name string
		c    ovrt.Config
		dt   dtypes
	}{
		{"f32", tinyConfig(), allOf(ovrt.F32)},
		{"q8_0", tinyConfig(), allOf(ovrt.Q8_0)},
		{"q4_0 tied", tied, allOf(ovrt.Q4_0)},
		{"mixed rope scaling", scaled, dtypes{ovrt.F32, ovrt.Q8_0, ovrt.Q4_0, ovrt.Q8_0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crossCheck(t, writeModel(t, synthModel(4, tc.c, tc.dt), synthVocab(tc.c.Vocab)), tc.c)
		})
	}
}
