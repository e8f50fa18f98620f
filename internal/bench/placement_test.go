package bench_test

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// BenchmarkWeightPlacement decodes stories15M f32 from the same weights
// placed differently in memory, alternately token by token in one run:
//
//   - mmap: as checkpoint.LoadLlama2C returns them, views of the mapped
//     file. llama2.c's header is 28 bytes, so every tensor (and, since a
//     row is 1152 = 18*64 bytes, every row) starts 28 bytes past a
//     64-byte boundary, and each 64-byte vector load spans two cache lines;
//   - heap@N: the tensors copied into the heap, each starting N bytes past
//     a 64-byte boundary (heap@0 is what a stored shard gives: its tensors
//     are aligned); heap@0' is a second aligned copy, the control.
//
// It reports tok/s for each and each one's rate relative to heap@0. b.N
// counts tokens of each placement.
//
//	go test ./internal/bench -run '^$' -bench WeightPlacement -benchtime 1024x -count 5
func BenchmarkWeightPlacement(b *testing.B) {
	path, _ := testmodel.Stories15M(b)
	w, err := checkpoint.LoadLlama2C(path, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	// heap@0' is a second aligned copy: the control for what merely
	// being another allocation changes.
	names := []string{"heap@0", "mmap", "heap@28", "heap@32", "heap@0'"}
	ws := []*ovrt.Weights{relocate(w, 0), w, relocate(w, 28), relocate(w, 32), relocate(w, 0)}
	if got := misalignment(w.Layers[0].W1.F32); got != 28 {
		b.Logf("note: the mapped checkpoint's w1 starts %d bytes past a 64-byte boundary", got)
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("f32/threads=%d", threads), func(b *testing.B) {
			ms := make([]*ovrt.Model, len(ws))
			rs := make([]*ovrt.Request, len(ws))
			for i, w := range ws {
				m, err := ovrt.Compile(w, ovrt.WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				ms[i], rs[i] = m, m.NewRequest()
			}
			spent := make([]time.Duration, len(ws))
			next, pos, turn := int32(1), 0, 0
			ctxLen := w.Config.Context
			for b.Loop() {
				if pos == ctxLen {
					pos, next = 0, 1
				}
				var chosen int32 = -1
				for k := range ms {
					i := (k + turn) % len(ms) // rotate who goes first
					t0 := time.Now()
					res, err := rs[i].Infer(ovrt.Step{Pos: pos, Tokens: []int32{next}})
					spent[i] += time.Since(t0)
					if err != nil {
						b.Fatal(err)
					}
					id := int32(sample.Argmax(res.Logits))
					if chosen >= 0 && id != chosen {
						b.Fatalf("position %d: placements disagree (%d, %d)", pos, chosen, id)
					}
					chosen = id
				}
				next = chosen
				pos++
				turn++
			}
			n := float64(b.N)
			for i, name := range names {
				b.ReportMetric(n/spent[i].Seconds(), name+"-tok/s")
				if i > 0 {
					b.ReportMetric(spent[0].Seconds()/spent[i].Seconds(), name+"/heap@0")
				}
			}
		})
	}
}

// relocate copies w's tensors into one heap buffer, each starting off
// bytes (a multiple of 4) past a 64-byte boundary. A tied head shares
// the embedding's copy.
func relocate(w *ovrt.Weights, off int) *ovrt.Weights {
	total := len(w.Embed.F32) + len(w.FinalNorm) + 32
	if !w.Config.TiedHead {
		total += len(w.Head.F32) + 16
	}
	for _, l := range w.Layers {
		total += len(l.AttnNorm) + len(l.FFNNorm) + len(l.Wq.F32) + len(l.Wk.F32) + len(l.Wv.F32) + len(l.Wo.F32) +
			len(l.W1.F32) + len(l.W2.F32) + len(l.W3.F32) + 9*16
	}
	buf := make([]float32, total+32)
	at := 0
	for misalignment(buf[at:]) != 0 {
		at++
	}
	at += off / 4
	place := func(v []float32) []float32 {
		for misalignment(buf[at:]) != off {
			at++
		}
		c := buf[at : at+len(v) : at+len(v)]
		copy(c, v)
		at += len(v)
		return c
	}
	r := *w
	r.Closer = nil
	r.Layers = make([]ovrt.Layer, len(w.Layers))
	r.Embed.F32 = place(w.Embed.F32)
	for i := range w.Layers {
		l, rl := &w.Layers[i], &r.Layers[i]
		*rl = *l
		rl.AttnNorm, rl.FFNNorm = place(l.AttnNorm), place(l.FFNNorm)
		rl.Wq.F32, rl.Wk.F32, rl.Wv.F32, rl.Wo.F32 = place(l.Wq.F32), place(l.Wk.F32), place(l.Wv.F32), place(l.Wo.F32)
		rl.W1.F32, rl.W2.F32, rl.W3.F32 = place(l.W1.F32), place(l.W2.F32), place(l.W3.F32)
	}
	r.FinalNorm = place(w.FinalNorm)
	if w.Config.TiedHead {
		r.Head = r.Embed
	} else {
		r.Head.F32 = place(w.Head.F32)
	}
	return &r
}

func misalignment(v []float32) int { return int(uintptr(unsafe.Pointer(unsafe.SliceData(v))) % 64) }
