package bench_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/internal/bench"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
)

// TestQuantQuality reports what q8 and q4 cost in accuracy on stories15M
// against the oracle (Hugging Face float32): the logit error at every
// prompt position, and how long a 96-token greedy continuation stays the
// same as the f32 engine's. It only logs: the figures are judged in
// docs/benchmarks.md, not asserted. Print the table with
//
//	go test ./internal/bench -run TestQuantQuality -v
func TestQuantQuality(t *testing.T) {
	path, _ := testmodel.Stories15M(t)
	ref, dir := testmodel.LoadRef(t, "stories15M")
	w, err := checkpoint.LoadLlama2C(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var prompts []bench.QualityPrompt
	for _, p := range ref.Prompts {
		prompts = append(prompts, bench.QualityPrompt{Name: p.Name, IDs: p.IDs, Greedy: p.Greedy, Logits: readF32(t, filepath.Join(dir, p.LogitsFile))})
	}
	rows, err := bench.QuantQuality(w, prompts, []ovrt.DType{ovrt.F32, ovrt.Q8_0, ovrt.Q4_0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	bench.PrintQualityTable(&sb, rows)
	t.Logf("stories15M, %d oracle prompts, kernels %s:\n%s", len(prompts), ovrt.KernelISA(), sb.String())
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
