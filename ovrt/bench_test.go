package ovrt_test

import (
	"fmt"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// BenchmarkDecode measures greedy decoding of 256 tokens from BOS, as
// llama2.c's run.c is usually measured; b.N counts tokens.
func BenchmarkDecode(b *testing.B) {
	w := loadStories(b)
	for _, q := range []ovrt.DType{ovrt.F32, ovrt.Q8_0, ovrt.Q4_0} {
		qw, err := w.Quantize(q)
		if err != nil {
			b.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/threads=%d", q, threads), func(b *testing.B) {
				m := compile(b, qw, ovrt.WithThreads(threads))
				r := m.NewRequest()
				next := int32(1)
				pos := 0
				for b.Loop() {
					if pos == 256 {
						pos = 0
					}
					res, err := r.Infer(ovrt.Step{Pos: pos, Tokens: []int32{next}})
					if err != nil {
						b.Fatal(err)
					}
					next = int32(sample.Argmax(res.Logits))
					pos++
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkPrefill measures a 128-token prompt; b.N counts prompts.
func BenchmarkPrefill(b *testing.B) {
	w := loadStories(b)
	prompt := make([]int32, 128)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 1) % w.Config.Vocab)
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("f32/threads=%d", threads), func(b *testing.B) {
			m := compile(b, w, ovrt.WithThreads(threads))
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

// BenchmarkBatchedDecode measures one decode step of B sequences in one
// Forward call, against B=1, on one thread: what a stage gains from
// gathering the forwards of B sessions. b.N counts steps; tok/s counts
// the B tokens of each.
func BenchmarkBatchedDecode(b *testing.B) {
	w := loadStories(b)
	m := compile(b, w, ovrt.WithThreads(1))
	for _, batch := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("B=%d", batch), func(b *testing.B) {
			reqs := make([]*ovrt.Request, batch)
			for i := range reqs {
				reqs[i] = m.NewRequest()
			}
			steps := make([]ovrt.Step, batch)
			pos := 0
			for b.Loop() {
				if pos == 128 {
					pos = 0
				}
				for i, r := range reqs {
					steps[i] = ovrt.Step{Req: r, Pos: pos, Tokens: []int32{int32(1 + i)}}
				}
				for _, res := range m.Forward(steps) {
					if res.Err != nil {
						b.Fatal(res.Err)
					}
				}
				pos++
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
