package kernels

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"testing"
)

// Benchmarks report the weight bytes streamed per call as b.SetBytes, so
// the MB/s column is the weight bandwidth. Each shape runs on every backend
// the CPU supports:
//
//	go test -run '^$' -bench . ./ovrt/internal/kernels
//
// On Linux they also report the benchmark thread's CPU time (cpu-ns/op) and
// the bandwidth over it (cpu-GB/s), which stay meaningful when other
// processes compete for the cores (wall time then includes waiting).
var benchShapes = []struct {
	rows, cols, ntok int
}{
	{32000, 288, 1}, // stories15M LM head, decode
	{768, 288, 1},   // FFN w1/w3, decode
	{288, 768, 1},   // FFN w2, decode
	{768, 288, 16},  // FFN w1/w3, 16-token prefill
}

func benchInputs(rows, cols, ntok int) (wf []float32, w8, w4 []byte, x, out []float32) {
	rng := rand.New(rand.NewSource(1))
	wf = make([]float32, rows*cols)
	for i := range wf {
		wf[i] = float32(rng.NormFloat64()) * 0.05
	}
	w8 = make([]byte, rows*cols/QK*Q8_0BlockBytes)
	w4 = make([]byte, rows*cols/QK*Q4_0BlockBytes)
	for r := 0; r < rows; r++ {
		QuantizeRowQ8_0(w8[r*cols/QK*Q8_0BlockBytes:], wf[r*cols:(r+1)*cols])
		QuantizeRowQ4_0(w4[r*cols/QK*Q4_0BlockBytes:], wf[r*cols:(r+1)*cols])
	}
	x = make([]float32, ntok*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	out = make([]float32, ntok*rows)
	return
}

func benchmarkMatMul(b *testing.B, format string) {
	for _, s := range benchShapes {
		wf, w8, w4, x, out := benchInputs(s.rows, s.cols, s.ntok)
		for _, be := range backends() {
			name := fmt.Sprintf("%dx%d/ntok=%d/%s", s.rows, s.cols, s.ntok, be.name)
			b.Run(name, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c0, cpuOK := threadCPUTime()
				var bytes int
				defer func() {
					c1, _ := threadCPUTime()
					if cpuOK && b.N > 0 {
						ns := float64(c1-c0) / float64(b.N)
						b.ReportMetric(ns, "cpu-ns/op")
						b.ReportMetric(float64(bytes)/ns, "cpu-GB/s")
					}
				}()
				switch format {
				case "f32":
					bytes = len(wf) * 4
					b.SetBytes(int64(bytes))
					for b.Loop() {
						be.f32(out, s.rows, wf, s.cols, x, s.cols, s.ntok, 0, s.rows)
					}
				case "q8":
					bytes = len(w8)
					b.SetBytes(int64(bytes))
					for b.Loop() {
						be.q8(out, s.rows, w8, s.cols, x, s.cols, s.ntok, 0, s.rows)
					}
				case "q4":
					bytes = len(w4)
					b.SetBytes(int64(bytes))
					for b.Loop() {
						be.q4(out, s.rows, w4, s.cols, x, s.cols, s.ntok, 0, s.rows)
					}
				}
			})
		}
	}
}

func BenchmarkMatMulF32(b *testing.B)  { benchmarkMatMul(b, "f32") }
func BenchmarkMatMulQ8_0(b *testing.B) { benchmarkMatMul(b, "q8") }
func BenchmarkMatMulQ4_0(b *testing.B) { benchmarkMatMul(b, "q4") }

// TestThroughputTable prints, for every benchmark shape, format and SIMD
// backend, the median of 15 batches of calls measured in thread CPU time:
// the least noisy figure on a shared machine. It is how BENCH.md was made:
//
//	KERNELS_TABLE=1 go test -run TestThroughputTable -v ./ovrt/internal/kernels
func TestThroughputTable(t *testing.T) {
	if os.Getenv("KERNELS_TABLE") == "" {
		t.Skip("set KERNELS_TABLE=1 to print the throughput table")
	}
	if _, ok := threadCPUTime(); !ok {
		t.Skip("no thread CPU clock on this system")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t.Logf("%-5s %-10s %-5s %-8s %10s %9s", "fmt", "shape", "ntok", "isa", "us/call", "GB/s")
	for _, s := range benchShapes {
		wf, w8, w4, x, out := benchInputs(s.rows, s.cols, s.ntok)
		for _, f := range []string{"f32", "q8_0", "q4_0"} {
			for _, be := range backends()[1:] {
				var bytes int
				var call func()
				switch f {
				case "f32":
					bytes = len(wf) * 4
					call = func() { be.f32(out, s.rows, wf, s.cols, x, s.cols, s.ntok, 0, s.rows) }
				case "q8_0":
					bytes = len(w8)
					call = func() { be.q8(out, s.rows, w8, s.cols, x, s.cols, s.ntok, 0, s.rows) }
				case "q4_0":
					bytes = len(w4)
					call = func() { be.q4(out, s.rows, w4, s.cols, x, s.cols, s.ntok, 0, s.rows) }
				}
				iters := max(1, 3_000_000/bytes/s.ntok)
				var per [15]int64
				for rep := range per {
					t0, _ := threadCPUTime()
					for i := 0; i < iters; i++ {
						call()
					}
					t1, _ := threadCPUTime()
					per[rep] = (t1 - t0) / int64(iters)
				}
				slices.Sort(per[:])
				med := per[len(per)/2]
				t.Logf("%-5s %-10s %-5d %-8s %10.1f %9.1f", f, fmt.Sprintf("%dx%d", s.rows, s.cols), s.ntok, be.name,
					float64(med)/1e3, float64(bytes)/float64(med))
			}
		}
	}
}
