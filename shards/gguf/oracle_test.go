package gguf

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
)

// The oracle's gqa_a model (Hugging Face checkpoint: GQA 8/2 heads, llama3
// rope scaling with original context 64) converted to GGUF and loaded back
// reproduces the oracle's logits, both with pipeshard's exact scaling keys
// and with the scaling recovered from rope_freqs.weight alone, the way a
// llama.cpp-converted Llama 3 file carries it.
func TestOracleGQAThroughGGUF(t *testing.T) {
	dir := filepath.Join(testmodel.OracleDir(t), "gqa_a")
	src, err := checkpoint.LoadHF(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c := src.Config
	if c.RopeScaling == nil || c.RopeScaling.OriginalContext != 64 {
		t.Fatalf("gqa_a config %+v", c)
	}
	path := writeModel(t, src, synthVocab(c.Vocab))
	f := parseFile(t, path)
	inferred := writeBytes(t, rewrite(t, f,
		[]string{keyScalingType, keyScalingFactor, keyScalingLow, keyScalingHigh, keyScalingOrigCtx}, nil))

	var ref struct {
		Prompts []struct {
			Name       string  `json:"name"`
			IDs        []int32 `json:"ids"`
			LogitsFile string  `json:"logits_file"`
		} `json:"prompts"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, path string }{{"exact keys", path}, {"rope_freqs only", inferred}} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := LoadLlama(tc.path, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			checkWeights(t, w, src)
			got := w.Config
			if tc.path == path && !reflect.DeepEqual(got, c) {
				t.Errorf("config:\n got %+v\nwant %+v", got, c)
			}
			if s := got.RopeScaling; s == nil || s.Factor != c.RopeScaling.Factor {
				t.Fatalf("rope scaling %+v", s)
			}
			m, err := ovrt.Compile(w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, p := range ref.Prompts {
				want := readF32(t, filepath.Join(dir, p.LogitsFile))
				res, err := m.NewRequest().Infer(ovrt.Step{Pos: 0, Tokens: p.IDs, Want: ovrt.WantAll})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Logits) != len(want) {
					t.Fatalf("%s: %d logits, want %d", p.Name, len(res.Logits), len(want))
				}
				worst := 0.0
				for i := range want {
					worst = max(worst, math.Abs(float64(res.Logits[i]-want[i])))
				}
				if worst > 1e-3 {
					t.Errorf("%s: max |Δ logit| %g > 1e-3", p.Name, worst)
				}
			}
		})
	}
}

func readF32(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
