package bench_test

import (
	"fmt"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
)

// BenchmarkPrefillQuant measures a 128-token prompt (the prompt `pipeshard
// bench engine` uses) for every weight type, so that the quantized prefill
// can be profiled (ovrt's BenchmarkPrefill covers f32 only); b.N counts
// prompts.
//
//	go test ./internal/bench -run '^$' -bench 'PrefillQuant/q4_0/threads=1' -cpuprofile /tmp/prefill.pprof
func BenchmarkPrefillQuant(b *testing.B) {
	path, _ := testmodel.Stories15M(b)
	w, err := checkpoint.LoadLlama2C(path, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	prompt := make([]int32, 128)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 1) % w.Config.Vocab)
	}
	for _, q := range []ovrt.DType{ovrt.F32, ovrt.Q8_0, ovrt.Q4_0} {
		qw, err := w.Quantize(q)
		if err != nil {
			b.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/threads=%d", q, threads), func(b *testing.B) {
				m, err := ovrt.Compile(qw, ovrt.WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				r := m.NewRequest()
				for b.Loop() {
					if _, err := r.Infer(ovrt.Step{Tokens: prompt}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
