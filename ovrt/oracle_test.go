package ovrt_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// The oracle's logits come from Hugging Face transformers in float32; a
// float32 implementation differs from them only by summation order.
const logitTol = 1e-3

func loadStories(t testing.TB) *ovrt.Weights {
	t.Helper()
	path, _ := testmodel.Stories15M(t)
	w, err := checkpoint.LoadLlama2C(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func loadGQA(t testing.TB) *ovrt.Weights {
	t.Helper()
	w, err := checkpoint.LoadHF(filepath.Join(testmodel.OracleDir(t), "gqa_a"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func compile(t testing.TB, w *ovrt.Weights, opts ...ovrt.Option) *ovrt.Model {
	t.Helper()
	m, err := ovrt.Compile(w, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func readF32(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func ids32(ids []int) []int32 {
	r := make([]int32, len(ids))
	for i, v := range ids {
		r[i] = int32(v)
	}
	return r
}

// greedy decodes n tokens after prompt on a fresh request.
func greedy(t testing.TB, m *ovrt.Model, prompt []int, n int) []int {
	t.Helper()
	r := m.NewRequest()
	res, err := r.Infer(ovrt.Step{Pos: 0, Tokens: ids32(prompt)})
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	pos := len(prompt)
	for len(out) < n {
		next := sample.Argmax(res.Logits)
		out = append(out, next)
		if res, err = r.Infer(ovrt.Step{Pos: pos, Tokens: []int32{int32(next)}}); err != nil {
			t.Fatal(err)
		}
		pos++
	}
	return out
}

func checkOracle(t *testing.T, name string, w *ovrt.Weights) {
	ref, dir := testmodel.LoadRef(t, name)
	m := compile(t, w)
	for _, p := range ref.Prompts {
		t.Run(p.Name, func(t *testing.T) {
			want := readF32(t, filepath.Join(dir, p.LogitsFile))
			res, err := m.NewRequest().Infer(ovrt.Step{Pos: 0, Tokens: ids32(p.IDs), Want: ovrt.WantAll})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Logits) != len(want) {
				t.Fatalf("%d logits, oracle has %d", len(res.Logits), len(want))
			}
			var worst float64
			at := 0
			for i := range want {
				if d := math.Abs(float64(res.Logits[i] - want[i])); d > worst {
					worst, at = d, i
				}
			}
			t.Logf("max |Δ logit| = %.3g (position %d, id %d)", worst, at/w.Config.Vocab, at%w.Config.Vocab)
			if worst > logitTol {
				t.Errorf("max |Δ logit| = %g at position %d id %d, tolerance %g", worst, at/w.Config.Vocab, at%w.Config.Vocab, logitTol)
			}
			got := greedy(t, m, p.IDs, len(p.Greedy))
			for i := range p.Greedy {
				if got[i] != p.Greedy[i] {
					t.Fatalf("greedy token %d = %d, oracle %d\n got %v\nwant %v", i, got[i], p.Greedy[i], got, p.Greedy)
				}
			}
		})
	}
}

func TestOracleStories15M(t *testing.T) { checkOracle(t, "stories15M", loadStories(t)) }
func TestOracleGQA(t *testing.T)        { checkOracle(t, "gqa_a", loadGQA(t)) }
