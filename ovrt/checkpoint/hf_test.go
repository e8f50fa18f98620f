package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/internal/mmapfile"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
)

var rawFiles = map[string][]byte{}

// rawTensor reads a float32 tensor from a safetensors file with nothing
// but encoding/json and encoding/binary, as an independent reference.
func rawTensor(t *testing.T, path, name string) ([]float32, []int) {
	t.Helper()
	b, ok := rawFiles[path]
	if !ok {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		rawFiles[path] = b
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]struct {
		DType       string `json:"dtype"`
		Shape       []int  `json:"shape"`
		DataOffsets [2]int `json:"data_offsets"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "__metadata__")
	rb, _ := json.Marshal(raw)
	if err := json.Unmarshal(rb, &hdr); err != nil {
		t.Fatal(err)
	}
	info, ok := hdr[name]
	if !ok || info.DType != "F32" {
		t.Fatalf("%s: no F32 tensor %q", path, name)
	}
	data := b[8+int(n)+info.DataOffsets[0] : 8+int(n)+info.DataOffsets[1]]
	v := make([]float32, len(data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return v, info.Shape
}

func TestLoadHFOracle(t *testing.T) {
	dir := filepath.Join(testmodel.OracleDir(t), "gqa_a")
	file := filepath.Join(dir, "model.safetensors")
	w, err := LoadHF(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	want := ovrt.Config{Dim: 128, HiddenDim: 352, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 16, Vocab: 512, Context: 512,
		NormEps: 1e-5, RopeTheta: 500000, TiedHead: false, BOS: 1, EOS: 2,
		RopeScaling: &ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 64}}
	if !sameConfig(w.Config, want) {
		t.Fatalf("config %+v (scaling %+v)\nwant   %+v", w.Config, w.Config.RopeScaling, want)
	}
	if sameStorage(w.Head.F32, w.Embed.F32) {
		t.Error("untied head shares the embedding")
	}
	f, ok := w.Closer.(*mmapfile.File)
	if !ok {
		t.Fatalf("Closer is %T", w.Closer)
	}

	// Q and K are permuted copies; everything else is a view equal to the
	// file's tensor.
	for l := range 4 {
		ly := &w.Layers[l]
		for _, c := range []struct {
			name  string
			got   []float32
			heads int
		}{
			{"self_attn.q_proj", ly.Wq.F32, 8},
			{"self_attn.k_proj", ly.Wk.F32, 2},
			{"self_attn.v_proj", ly.Wv.F32, 0},
			{"self_attn.o_proj", ly.Wo.F32, 0},
			{"mlp.gate_proj", ly.W1.F32, 0},
			{"mlp.down_proj", ly.W2.F32, 0},
			{"mlp.up_proj", ly.W3.F32, 0},
			{"input_layernorm", ly.AttnNorm, 0},
			{"post_attention_layernorm", ly.FFNNorm, 0},
		} {
			name := hfLayer(l, c.name)
			raw, shape := rawTensor(t, file, name)
			if c.heads == 0 {
				if !within(f, c.got) {
					t.Errorf("%s is not a view of the mapping", name)
				}
				if !equalFloats(c.got, raw) {
					t.Errorf("%s differs from the file", name)
				}
				continue
			}
			if within(f, c.got) {
				t.Errorf("%s aliases the file but must be permuted", name)
			}
			cols := shape[1]
			for h := range c.heads {
				for i := range 8 { // hd/2
					for j := range 2 {
						meta := c.got[(h*16+2*i+j)*cols : (h*16+2*i+j+1)*cols]
						hf := raw[(h*16+j*8+i)*cols : (h*16+j*8+i+1)*cols]
						if !equalFloats(meta, hf) {
							t.Fatalf("%s: Meta row %d of head %d is not HF row %d", name, 2*i+j, h, j*8+i)
						}
					}
				}
			}
		}
	}
	raw, _ := rawTensor(t, file, "lm_head.weight")
	if !equalFloats(w.Head.F32, raw) || !within(f, w.Head.F32) {
		t.Error("head differs from lm_head.weight or is a copy")
	}
	ones := true
	for _, x := range w.FinalNorm {
		ones = ones && x == 1
	}
	if ones {
		t.Error("final norm is all ones; the oracle's norms are randomised")
	}

	t.Run("ranges", func(t *testing.T) {
		for _, r := range [][2]int{{0, 2}, {2, 4}, {1, 3}, {3, 0}, {0, 1}} {
			s, err := LoadHF(dir, r[0], r[1])
			if err != nil {
				t.Fatalf("%v: %v", r, err)
			}
			end := r[1]
			if end <= 0 {
				end = 4
			}
			if err := s.Validate(); err != nil {
				t.Error(err)
			}
			equalWeights(t, s, sub(w, r[0], end), nil)
			if (s.Embed.F32 != nil) != (r[0] == 0) || (s.Head.F32 != nil) != (end == 4) {
				t.Errorf("%v: embed %v, head %v", r, s.Embed.F32 != nil, s.Head.F32 != nil)
			}
			s.Close()
		}
		for _, r := range [][2]int{{4, 0}, {-1, 2}, {0, 5}, {2, 1}} {
			_, err := LoadHF(dir, r[0], r[1])
			wantErr(t, err, []error{ErrLayerRange}, dir)
		}
	})
}

// writeHF writes a Hugging Face directory for the whole-model weights w.
// shards > 1 splits the tensors into that many files with an index.
func writeHF(t *testing.T, dir string, w *ovrt.Weights, dtype string, transform func(float32) float32, shards int) {
	t.Helper()
	writeFile(t, dir, "config.json", hfConfigJSON(w.Config))
	ts := hfTensors(w, dtype, transform)
	if shards <= 1 {
		writeFile(t, dir, "model.safetensors", safetensorsBytes(ts, map[string]string{"format": "pt"}))
		return
	}
	weightMap := map[string]string{}
	per := (len(ts) + shards - 1) / shards
	for s := range shards {
		part := ts[min(s*per, len(ts)):min((s+1)*per, len(ts))]
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		for _, x := range part {
			weightMap[x.name] = name
		}
		writeFile(t, dir, name, safetensorsBytes(part, nil))
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	writeFile(t, dir, "model.safetensors.index.json", idx)
}

// TestHFFromStories15M writes stories15M as a Hugging Face checkpoint, as
// Meta's conversion script would (Q/K rows permuted to rotate-half), and
// checks that LoadHF gives back exactly the llama2.c weights.
func TestHFFromStories15M(t *testing.T) {
	path, _ := testmodel.Stories15M(t)
	ref, err := LoadLlama2C(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ref.Config.NormEps = 1e-5 // config.json carries it explicitly

	t.Run("F32", func(t *testing.T) {
		dir := t.TempDir()
		writeHF(t, dir, ref, "F32", nil, 1)
		w, err := LoadHF(dir, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		equalWeights(t, w, ref, nil)
		if !sameStorage(w.Head.F32, w.Embed.F32) {
			t.Error("tied head is not the embedding")
		}
		// A shard without the embedding still gets the tied head.
		s, err := LoadHF(dir, 4, 6)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		equalWeights(t, s, sub(ref, 4, 6), nil)
	})
	t.Run("BF16 sharded", func(t *testing.T) {
		dir := t.TempDir()
		writeHF(t, dir, ref, "BF16", nil, 4)
		w, err := LoadHF(dir, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		equalWeights(t, w, ref, bf16Value)
		if w.Closer != nil {
			t.Errorf("all tensors were converted, yet Closer is %T", w.Closer)
		}
		w.Close()

		// A layer range opens only the shards holding its tensors.
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
		json.Unmarshal(b, &idx)
		keep := map[string]bool{}
		for l := 2; l < 4; l++ {
			for name, file := range idx.WeightMap {
				if strings.HasPrefix(name, fmt.Sprintf("model.layers.%d.", l)) {
					keep[file] = true
				}
			}
		}
		ents, _ := os.ReadDir(dir)
		var removed string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "model-") && !keep[e.Name()] {
				removed = filepath.Join(dir, e.Name())
				os.Remove(removed)
			}
		}
		if removed == "" {
			t.Fatal("every shard holds layers 2-3; the test needs more shards")
		}
		s, err := LoadHF(dir, 2, 4)
		if err != nil {
			t.Fatalf("after removing the other shards: %v", err)
		}
		equalWeights(t, s, sub(ref, 2, 4), bf16Value)
		s.Close()
		_, err = LoadHF(dir, 0, 0)
		wantErr(t, err, []error{fs.ErrNotExist}, "model-")
	})
}

// synthetic returns small GQA weights with an untied head whose values are
// exact in binary16.
func synthetic(t *testing.T) *ovrt.Weights {
	t.Helper()
	h := llama2cHeader{Dim: 32, HiddenDim: 48, Layers: 3, Heads: 4, KVHeads: 2, Vocab: -20, SeqLen: 16}
	b := llama2cBytes(h, func(i int) float32 { return float32(i%201-100) / 64 })
	w, err := LoadLlama2C(writeFile(t, t.TempDir(), "syn.bin", b), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestHFSynthetic(t *testing.T) {
	ref := synthetic(t)
	for _, dtype := range []string{"F32", "F16", "BF16"} {
		t.Run(dtype, func(t *testing.T) {
			dir := t.TempDir()
			writeHF(t, dir, ref, dtype, nil, 1)
			w, err := LoadHF(dir, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.Config.TiedHead || sameStorage(w.Head.F32, w.Embed.F32) {
				t.Error("head is tied")
			}
			equalWeights(t, w, ref, nil)
		})
	}
	t.Run("misaligned F32", func(t *testing.T) {
		// A 2-byte tensor first shifts every F32 tensor off 4-byte
		// alignment: the loader must copy them.
		dir := t.TempDir()
		writeFile(t, dir, "config.json", hfConfigJSON(ref.Config))
		ts := append([]stTensor{{"odd", "F16", []int64{1}, []byte{0, 0x3c}}}, hfTensors(ref, "F32", nil)...)
		writeFile(t, dir, "model.safetensors", safetensorsBytes(ts, nil))
		w, err := LoadHF(dir, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		equalWeights(t, w, ref, nil)
		if w.Closer != nil {
			t.Errorf("every tensor was copied, yet Closer is %T", w.Closer)
		}
		w.Close()
	})
	t.Run("tie_word_embeddings wins over lm_head", func(t *testing.T) {
		dir := t.TempDir()
		writeHF(t, dir, ref, "F32", nil, 1)
		cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		writeFile(t, dir, "config.json", editJSON(cfg, func(m map[string]any) { m["tie_word_embeddings"] = true }))
		w, err := LoadHF(dir, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if !w.Config.TiedHead || !sameStorage(w.Head.F32, w.Embed.F32) {
			t.Error("head not tied")
		}
	})
}

func TestHFErrors(t *testing.T) {
	ref := synthetic(t)
	base := t.TempDir()
	writeHF(t, base, ref, "F32", nil, 1)
	baseCfg, _ := os.ReadFile(filepath.Join(base, "config.json"))
	baseTensors := hfTensors(ref, "F32", nil)

	// mk copies the base directory with edits.
	mk := func(t *testing.T, cfg func(m map[string]any), tensors func([]stTensor) []stTensor) string {
		dir := t.TempDir()
		c := baseCfg
		if cfg != nil {
			c = editJSON(c, cfg)
		}
		writeFile(t, dir, "config.json", c)
		ts := append([]stTensor(nil), baseTensors...)
		if tensors != nil {
			ts = tensors(ts)
		}
		writeFile(t, dir, "model.safetensors", safetensorsBytes(ts, nil))
		return dir
	}
	drop := func(name string) func([]stTensor) []stTensor {
		return func(ts []stTensor) []stTensor {
			var out []stTensor
			for _, x := range ts {
				if x.name != name {
					out = append(out, x)
				}
			}
			return out
		}
	}
	del := func(key string) func(m map[string]any) { return func(m map[string]any) { delete(m, key) } }
	set := func(key string, v any) func(m map[string]any) { return func(m map[string]any) { m[key] = v } }

	cases := []struct {
		name     string
		cfg      func(m map[string]any)
		tensors  func([]stTensor) []stTensor
		targets  []error
		mentions []string
	}{
		{"no hidden_size", del("hidden_size"), nil, []error{ErrConfig, ovrt.ErrBadConfig}, []string{"config.json", "hidden_size is missing"}},
		{"no intermediate_size", del("intermediate_size"), nil, []error{ErrConfig}, []string{"intermediate_size is missing"}},
		{"no num_hidden_layers", del("num_hidden_layers"), nil, []error{ErrConfig}, []string{"num_hidden_layers is missing"}},
		{"no num_attention_heads", del("num_attention_heads"), nil, []error{ErrConfig}, []string{"num_attention_heads is missing"}},
		{"no vocab_size", del("vocab_size"), nil, []error{ErrConfig}, []string{"vocab_size is missing"}},
		{"zero layers", set("num_hidden_layers", 0), nil, []error{ErrConfig}, []string{"num_hidden_layers 0"}},
		{"string size", set("hidden_size", "32"), nil, []error{ErrConfig}, []string{"hidden_size"}},
		{"kv heads do not divide", set("num_key_value_heads", 3), nil, []error{ErrConfig}, []string{"num_key_value_heads 3"}},
		{"odd head_dim", set("head_dim", 7), nil, []error{ErrConfig}, []string{"head_dim 7"}},
		{"eos outside vocab", set("eos_token_id", 20), nil, []error{ErrConfig}, []string{"eos_token_id 20"}},
		{"eos not a number", set("eos_token_id", "x"), nil, []error{ErrConfig}, []string{"eos_token_id"}},
		{"negative eps", set("rms_norm_eps", -1), nil, []error{ErrConfig}, []string{"rms_norm_eps -1"}},
		{"mistral", set("model_type", "mistral"), nil, []error{ErrUnsupported, ovrt.ErrUnsupported}, []string{`"mistral"`}},
		{"other architecture", func(m map[string]any) {
			delete(m, "model_type")
			m["architectures"] = []string{"MistralForCausalLM"}
		}, nil, []error{ErrUnsupported}, []string{"MistralForCausalLM"}},
		{"no architecture", func(m map[string]any) { delete(m, "model_type"); delete(m, "architectures") }, nil, []error{ErrConfig}, []string{"model_type"}},
		{"gelu", set("hidden_act", "gelu"), nil, []error{ErrUnsupported}, []string{"gelu"}},
		{"attention bias", set("attention_bias", true), nil, []error{ErrUnsupported}, []string{"attention_bias"}},
		{"yarn", set("rope_parameters", map[string]any{"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}), nil,
			[]error{ErrUnsupported, ovrt.ErrUnsupported}, []string{`"yarn"`, "rope_parameters"}},
		{"linear legacy", set("rope_scaling", map[string]any{"type": "linear", "factor": 2.0}), nil,
			[]error{ErrUnsupported}, []string{`"linear"`, "rope_scaling"}},
		{"unknown rope key", set("rope_parameters", map[string]any{"rope_type": "default", "rope_theta": 10000.0, "mscale": 1.0}), nil,
			[]error{ErrUnsupported}, []string{"mscale"}},
		{"theta conflict", set("rope_parameters", map[string]any{"rope_type": "default", "rope_theta": 500000.0}), nil,
			[]error{ErrConfig}, []string{"rope_theta 10000 disagrees"}},
		{"llama3 without factor", set("rope_scaling", map[string]any{"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), nil,
			[]error{ErrConfig}, []string{"without factor"}},
		{"llama3 bad factors", set("rope_scaling", map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}), nil,
			[]error{ErrConfig}, []string{"low_freq_factor 4"}},
		{"shape mismatch", set("intermediate_size", 50), nil, []error{ErrTensorShape, ovrt.ErrBadWeights},
			[]string{"model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[48 32]", "[50 32]"}},
		{"missing tensor", nil, drop("model.layers.1.self_attn.v_proj.weight"), []error{ErrMissingTensor, ovrt.ErrBadWeights},
			[]string{"model.safetensors", `"model.layers.1.self_attn.v_proj.weight"`}},
		{"missing final norm", nil, drop("model.norm.weight"), []error{ErrMissingTensor}, []string{`"model.norm.weight"`}},
		{"integer weight", nil, func(ts []stTensor) []stTensor {
			for i := range ts {
				if ts[i].name == "model.layers.2.mlp.up_proj.weight" {
					ts[i].dtype = "I32"
				}
			}
			return ts
		}, []error{ErrUnsupported}, []string{"model.layers.2.mlp.up_proj.weight", "I32"}},
		{"f16 shape mismatch", nil, func(ts []stTensor) []stTensor {
			for i := range ts {
				if ts[i].name == "model.layers.0.self_attn.k_proj.weight" {
					ts[i].dtype = "F16"
					ts[i].shape = []int64{16, 32, 2}
				}
			}
			return ts
		}, []error{ErrTensorShape}, []string{"k_proj", "[16 32 2]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := mk(t, tc.cfg, tc.tensors)
			_, err := LoadHF(dir, 0, 0)
			wantErr(t, err, tc.targets, append(tc.mentions, dir)...)
		})
	}

	t.Run("missing directory", func(t *testing.T) {
		_, err := LoadHF(filepath.Join(base, "nope"), 0, 0)
		wantErr(t, err, []error{fs.ErrNotExist}, "nope")
	})
	t.Run("invalid config JSON", func(t *testing.T) {
		dir := mk(t, nil, nil)
		writeFile(t, dir, "config.json", []byte(`{"hidden_size": 32,`))
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{ErrConfig}, "config.json")
	})
	t.Run("missing tensor outside the range", func(t *testing.T) {
		dir := mk(t, nil, drop("model.norm.weight"))
		w, err := LoadHF(dir, 0, 2)
		if err != nil {
			t.Fatalf("layers [0, 2) need no final norm: %v", err)
		}
		w.Close()
	})
	t.Run("no safetensors", func(t *testing.T) {
		dir := mk(t, nil, nil)
		os.Remove(filepath.Join(dir, "model.safetensors"))
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{fs.ErrNotExist}, "model.safetensors.index.json")
	})
	t.Run("truncated safetensors", func(t *testing.T) {
		dir := mk(t, nil, nil)
		p := filepath.Join(dir, "model.safetensors")
		b, _ := os.ReadFile(p)
		for _, cut := range []int{0, 7, 8, 100, len(b) / 2, len(b) - 1} {
			writeFile(t, dir, "model.safetensors", b[:cut])
			_, err := LoadHF(dir, 0, 0)
			wantErr(t, err, []error{ErrTruncated}, p)
		}
	})
	t.Run("trailing bytes", func(t *testing.T) {
		dir := mk(t, nil, nil)
		p := filepath.Join(dir, "model.safetensors")
		b, _ := os.ReadFile(p)
		writeFile(t, dir, "model.safetensors", append(b, 0, 0, 0, 0))
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{ErrTrailingData}, p)
	})

	// Sharded checkpoints.
	sharded := func(t *testing.T, edit func(wm map[string]string)) string {
		dir := t.TempDir()
		writeHF(t, dir, ref, "F32", nil, 2)
		p := filepath.Join(dir, "model.safetensors.index.json")
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		b, _ := os.ReadFile(p)
		json.Unmarshal(b, &idx)
		edit(idx.WeightMap)
		b, _ = json.Marshal(idx)
		writeFile(t, dir, "model.safetensors.index.json", b)
		return dir
	}
	t.Run("index escapes the directory", func(t *testing.T) {
		dir := sharded(t, func(wm map[string]string) { wm["model.norm.weight"] = "../model-00001-of-00002.safetensors" })
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{ErrFormat}, "model.norm.weight", "../")
	})
	t.Run("index lacks a tensor", func(t *testing.T) {
		dir := sharded(t, func(wm map[string]string) { delete(wm, "model.layers.2.mlp.down_proj.weight") })
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{ErrMissingTensor}, "model.safetensors.index.json", "model.layers.2.mlp.down_proj.weight")
	})
	t.Run("index names the wrong shard", func(t *testing.T) {
		dir := sharded(t, func(wm map[string]string) {
			if wm[hfEmbed] == "model-00001-of-00002.safetensors" {
				wm[hfEmbed] = "model-00002-of-00002.safetensors"
			} else {
				wm[hfEmbed] = "model-00001-of-00002.safetensors"
			}
		})
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{ErrMissingTensor}, hfEmbed, "model-0000")
	})
	t.Run("empty index", func(t *testing.T) {
		dir := sharded(t, func(wm map[string]string) { clear(wm) })
		_, err := LoadHF(dir, 0, 0)
		wantErr(t, err, []error{ErrFormat}, "weight_map")
	})
	t.Run("sharded loads", func(t *testing.T) {
		dir := sharded(t, func(map[string]string) {})
		w, err := LoadHF(dir, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		equalWeights(t, w, ref, nil)
		if _, ok := w.Closer.(multiCloser); !ok {
			t.Errorf("Closer is %T, want both shards kept", w.Closer)
		}
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
}

func TestParseHFConfig(t *testing.T) {
	minimal := `{"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
		"num_attention_heads": 4, "vocab_size": 200000`
	llama3 := ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	tests := []struct {
		name  string
		json  string
		check func(m hfModel) string
	}{
		{"defaults", minimal + `}`, func(m hfModel) string {
			want := ovrt.Config{Dim: 64, HiddenDim: 96, Layers: 2, Heads: 4, KVHeads: 4, HeadDim: 16, Vocab: 200000,
				Context: 2048, NormEps: 1e-6, RopeTheta: 10000, BOS: 1, EOS: 2}
			if !sameConfig(m.Config, want) || m.TieWordEmbeddings {
				return fmt.Sprintf("%+v", m)
			}
			return ""
		}},
		{"llama 3.1 style", minimal + `, "num_key_value_heads": 1, "rope_theta": 500000.0, "bos_token_id": 128000,
			"eos_token_id": [128001, 128008, 128009], "tie_word_embeddings": true, "max_position_embeddings": 131072,
			"rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
			"original_max_position_embeddings": 8192, "rope_type": "llama3"}}`, func(m hfModel) string {
			c := m.Config
			if c.KVHeads != 1 || c.RopeTheta != 500000 || c.BOS != 128000 || c.EOS != 128001 || !m.TieWordEmbeddings ||
				!c.TiedHead || c.Context != 131072 || c.RopeScaling == nil || *c.RopeScaling != llama3 {
				return fmt.Sprintf("%+v %+v", c, c.RopeScaling)
			}
			return ""
		}},
		{"older type key", minimal + `, "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}`, func(m hfModel) string {
			if s := m.RopeScaling; s == nil || *s != llama3 {
				return fmt.Sprint(s)
			}
			return ""
		}},
		{"transformers 5", minimal + `, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
			"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}`, func(m hfModel) string {
			if s := m.RopeScaling; s == nil || *s != llama3 || m.RopeTheta != 500000 {
				return fmt.Sprint(m.RopeTheta, s)
			}
			return ""
		}},
		{"both places agree", minimal + `, "rope_theta": 500000.0, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
			"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
			"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
			"original_max_position_embeddings": 8192}}`, func(m hfModel) string {
			if s := m.RopeScaling; s == nil || *s != llama3 || m.RopeTheta != 500000 {
				return fmt.Sprint(m.RopeTheta, s)
			}
			return ""
		}},
		{"default type", minimal + `, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "rope_scaling": null}`,
			func(m hfModel) string {
				if m.RopeScaling != nil || m.RopeTheta != 1e6 {
					return fmt.Sprint(m.RopeTheta, m.RopeScaling)
				}
				return ""
			}},
		{"explicit head_dim", minimal + `, "head_dim": 32, "num_key_value_heads": 2, "bos_token_id": null, "eos_token_id": 7}`,
			func(m hfModel) string {
				if m.HeadDim != 32 || m.QDim() != 128 || m.KVDim() != 64 || m.BOS != 1 || m.EOS != 7 {
					return fmt.Sprintf("%+v", m.Config)
				}
				return ""
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseHFConfig("config.json", []byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(m); msg != "" {
				t.Error(msg)
			}
		})
	}
	bad := []struct {
		name, json string
		target     error
		mention    string
	}{
		{"scaling disagreement", minimal + `, "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "rope_scaling": {"rope_type": "llama3", "factor": 16.0,
			"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}`, ErrConfig, "disagrees"},
		{"type disagreement", minimal + `, "rope_scaling": {"rope_type": "llama3", "type": "linear"}}`, ErrConfig, "disagrees"},
		{"factors without type", minimal + `, "rope_scaling": {"factor": 2.0}}`, ErrConfig, "without a rope_type"},
		{"empty eos list", minimal + `, "eos_token_id": []}`, ErrConfig, "eos_token_id"},
		{"heads do not divide", minimal + `, "num_attention_heads": 5}`, ErrConfig, "not divisible"},
		{"not an object", `[1, 2]`, ErrConfig, "config.json"},
		{"huge layers", minimal + `, "num_hidden_layers": 1000000000000}`, ErrConfig, "num_hidden_layers"},
		{"huge context", minimal + `, "max_position_embeddings": 1000000000}`, ErrConfig, "max_position_embeddings"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHFConfig("config.json", []byte(tc.json))
			wantErr(t, err, []error{tc.target}, tc.mention)
		})
	}
}
