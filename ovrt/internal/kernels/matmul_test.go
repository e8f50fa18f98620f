package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"strings"
	"testing"
)

// testFormats abstracts over the three weight formats so each test runs on
// all of them.
type testFormat struct {
	name     string
	colMult  int // cols must be a multiple of this
	rowBytes func(cols int) int
	// make returns a random matrix; f32 weights in wf, quantized in wq.
	make func(rng *rand.Rand, rows, cols int) (wf []float32, wq []byte)
	// run calls backend b.
	run func(b *backend, out []float32, outStride int, wf []float32, wq []byte, cols int, x []float32, xStride, ntok, r0, r1 int)
	// row64 returns row r dequantized, for the float64 reference.
	row64 func(wf []float32, wq []byte, cols, r int) []float32
}

var testFormats = []testFormat{
	{
		name: "f32", colMult: 1,
		rowBytes: func(cols int) int { return 4 * cols },
		make: func(rng *rand.Rand, rows, cols int) ([]float32, []byte) {
			w := make([]float32, rows*cols)
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			return w, nil
		},
		run: func(b *backend, out []float32, outStride int, wf []float32, wq []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
			if checkArgs("test", len(out), outStride, len(wf), cols, cols, 1, len(x), xStride, ntok, r0, r1) {
				b.f32(out, outStride, wf, cols, x, xStride, ntok, r0, r1)
			}
		},
		row64: func(wf []float32, _ []byte, cols, r int) []float32 { return wf[r*cols : (r+1)*cols] },
	},
	{
		name: "q8_0", colMult: QK,
		rowBytes: func(cols int) int { return cols / QK * Q8_0BlockBytes },
		make: func(rng *rand.Rand, rows, cols int) ([]float32, []byte) {
			return nil, randomQ(rng, rows*cols/QK, Q8_0BlockBytes)
		},
		run: func(b *backend, out []float32, outStride int, wf []float32, wq []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
			if checkArgs("test", len(out), outStride, len(wq), cols, cols/QK*Q8_0BlockBytes, QK, len(x), xStride, ntok, r0, r1) {
				b.q8(out, outStride, wq, cols, x, xStride, ntok, r0, r1)
			}
		},
		row64: func(_ []float32, wq []byte, cols, r int) []float32 {
			rb := cols / QK * Q8_0BlockBytes
			row := make([]float32, cols)
			DequantizeRowQ8_0(row, wq[r*rb:(r+1)*rb])
			return row
		},
	},
	{
		name: "q4_0", colMult: QK,
		rowBytes: func(cols int) int { return cols / QK * Q4_0BlockBytes },
		make: func(rng *rand.Rand, rows, cols int) ([]float32, []byte) {
			return nil, randomQ(rng, rows*cols/QK, Q4_0BlockBytes)
		},
		run: func(b *backend, out []float32, outStride int, wf []float32, wq []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
			if checkArgs("test", len(out), outStride, len(wq), cols, cols/QK*Q4_0BlockBytes, QK, len(x), xStride, ntok, r0, r1) {
				b.q4(out, outStride, wq, cols, x, xStride, ntok, r0, r1)
			}
		},
		row64: func(_ []float32, wq []byte, cols, r int) []float32 {
			rb := cols / QK * Q4_0BlockBytes
			row := make([]float32, cols)
			DequantizeRowQ4_0(row, wq[r*rb:(r+1)*rb])
			return row
		},
	},
}

// randomQ returns n random blocks with finite scales of varied magnitude.
func randomQ(rng *rand.Rand, n, blockBytes int) []byte {
	w := make([]byte, n*blockBytes)
	rng.Read(w)
	for b := 0; b < n; b++ {
		d := float32(math.Ldexp(rng.Float64()+0.5, -rng.Intn(12))) // 2^-12 .. 1.5
		if rng.Intn(2) == 0 {
			d = -d
		}
		binary.LittleEndian.PutUint16(w[b*blockBytes:], F32ToF16(d))
	}
	return w
}

func randomX(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		if rng.Intn(50) == 0 {
			x[i] = float32(math.Ldexp(rng.NormFloat64(), rng.Intn(40)-20)) // wide exponents
		}
	}
	return x
}

const canary = -12345.678

func newOut(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = canary
	}
	return out
}

// sameBits reports whether a and b are the same float32, treating all NaNs
// as equal (NaN payloads are not part of the canonical result).
func sameBits(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestBitIdentical compares every backend with the portable Go code on
// random shapes, strides and row ranges, bit for bit, and checks that
// nothing outside the requested outputs is written.
func TestBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	colsList := []int{16, 32, 288, 768, 352, 128, 64, 96}
	f32Extra := []int{40, 300, 1, 8, 15, 17, 33, 47, 100}
	iters := 6
	if testing.Short() {
		iters = 2
	}
	for _, tf := range testFormats {
		cl := colsList
		if tf.name == "f32" {
			cl = append(append([]int{}, colsList...), f32Extra...)
		}
		for _, cols := range cl {
			if cols%tf.colMult != 0 {
				continue
			}
			for it := 0; it < iters; it++ {
				rows := 1 + rng.Intn(70)
				if it == 0 {
					rows = 64 + rng.Intn(40)
				}
				ntok := 1 + rng.Intn(9)
				r0 := rng.Intn(rows)
				r1 := r0 + 1 + rng.Intn(rows-r0)
				xStride := cols + 1 + rng.Intn(20)
				outStride := rows + rng.Intn(10) + 1
				wf, wq := tf.make(rng, rows, cols)
				x := randomX(rng, (ntok-1)*xStride+cols)
				want := newOut((ntok-1)*outStride + rows + 3)
				tf.run(genericBackend, want, outStride, wf, wq, cols, x, xStride, ntok, r0, r1)
				for i, v := range want {
					t0, r := i/outStride, i%outStride
					inside := t0 < ntok && r >= r0 && r < r1
					if inside == (v == canary) {
						t.Fatalf("generic %s: out[%d] (t=%d r=%d) inside=%v value=%v", tf.name, i, t0, r, inside, v)
					}
				}
				for _, b := range backends()[1:] {
					got := newOut(len(want))
					tf.run(b, got, outStride, wf, wq, cols, x, xStride, ntok, r0, r1)
					for i := range got {
						if !sameBits(got[i], want[i]) {
							t.Fatalf("%s %s cols=%d rows=%d ntok=%d r=[%d,%d) strides x=%d out=%d: out[%d] = %v (%#x), generic %v (%#x)",
								b.name, tf.name, cols, rows, ntok, r0, r1, xStride, outStride, i,
								got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
			}
		}
	}
}

// TestBatchIndependence checks that a row's result does not depend on the
// other tokens or rows in the call: 1 token vs 7 tokens, and one call vs
// the row range split at random points.
func TestBatchIndependence(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, tf := range testFormats {
		for _, cols := range []int{32, 288, 768} {
			rows := 101
			wf, wq := tf.make(rng, rows, cols)
			x := randomX(rng, 7*cols)
			for _, b := range backends() {
				all := newOut(7 * rows)
				tf.run(b, all, rows, wf, wq, cols, x, cols, 7, 0, rows)
				for tok := 0; tok < 7; tok++ {
					one := newOut(rows)
					tf.run(b, one, rows, wf, wq, cols, x[tok*cols:], cols, 1, 0, rows)
					for r := 0; r < rows; r++ {
						if !sameBits(one[r], all[tok*rows+r]) {
							t.Fatalf("%s %s cols=%d: token %d row %d: alone %v, in a batch of 7 %v", b.name, tf.name, cols, tok, r, one[r], all[tok*rows+r])
						}
					}
				}
				split := newOut(7 * rows)
				for r0 := 0; r0 < rows; {
					r1 := min(rows, r0+1+rng.Intn(13))
					tf.run(b, split, rows, wf, wq, cols, x, cols, 7, r0, r1)
					r0 = r1
				}
				for i := range split {
					if !sameBits(split[i], all[i]) {
						t.Fatalf("%s %s cols=%d: out[%d]: split rows %v, one call %v", b.name, tf.name, cols, i, split[i], all[i])
					}
				}
			}
		}
	}
}

// TestLargeCalls crosses the drivers' row blocking (1024 rows per call for
// one token tile, byte-sized blocks for several).
func TestLargeCalls(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for _, tf := range testFormats {
		cols, rows := 32, 2500
		wf, wq := tf.make(rng, rows, cols)
		for _, ntok := range []int{1, 6} {
			x := randomX(rng, ntok*cols)
			want := newOut(ntok * rows)
			tf.run(genericBackend, want, rows, wf, wq, cols, x, cols, ntok, 3, rows)
			for _, b := range backends()[1:] {
				got := newOut(ntok * rows)
				tf.run(b, got, rows, wf, wq, cols, x, cols, ntok, 3, rows)
				for i := range got {
					if !sameBits(got[i], want[i]) {
						t.Fatalf("%s %s ntok=%d: out[%d] = %v, generic %v", b.name, tf.name, ntok, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestAgainstFloat64 is a sanity check of the values: every backend is
// within a small relative error of a float64 dot product.
func TestAgainstFloat64(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, tf := range testFormats {
		for _, cols := range []int{32, 288, 768} {
			rows, ntok := 20, 3
			wf, wq := tf.make(rng, rows, cols)
			x := make([]float32, ntok*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for _, b := range backends() {
				out := newOut(ntok * rows)
				tf.run(b, out, rows, wf, wq, cols, x, cols, ntok, 0, rows)
				for tok := 0; tok < ntok; tok++ {
					for r := 0; r < rows; r++ {
						w := tf.row64(wf, wq, cols, r)
						var dot, mag float64
						for j := 0; j < cols; j++ {
							p := float64(w[j]) * float64(x[tok*cols+j])
							dot += p
							mag += math.Abs(p)
						}
						got := float64(out[tok*rows+r])
						if err := math.Abs(got - dot); err > 1e-5*mag+1e-30 {
							t.Errorf("%s %s cols=%d t=%d r=%d: %v, float64 %v (error %g, scale %g)", b.name, tf.name, cols, tok, r, got, dot, err, mag)
						}
					}
				}
			}
		}
	}
}

// TestSpecialScales runs every f16 scale value (subnormals, infinities,
// NaNs) through every backend.
func TestSpecialScales(t *testing.T) {
	for _, tf := range testFormats[1:] {
		bb := Q8_0BlockBytes
		if tf.name == "q4_0" {
			bb = Q4_0BlockBytes
		}
		rows, cols := 1<<16, 32
		wq := make([]byte, rows*bb)
		rng := rand.New(rand.NewSource(5))
		rng.Read(wq)
		for r := 0; r < rows; r++ {
			binary.LittleEndian.PutUint16(wq[r*bb:], uint16(r))
		}
		x := randomX(rng, 2*cols)
		want := newOut(2 * rows)
		tf.run(genericBackend, want, rows, nil, wq, cols, x, cols, 2, 0, rows)
		for _, b := range backends()[1:] {
			got := newOut(2 * rows)
			tf.run(b, got, rows, nil, wq, cols, x, cols, 2, 0, rows)
			for i := range got {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s %s scale %#04x: %v, generic %v", b.name, tf.name, i%rows, got[i], want[i])
				}
			}
		}
	}
}

// TestCanonicalOrder pins the order itself, not just agreement between
// backends: with values chosen so that any other association rounds
// differently, the result must be the one the documented tree gives.
func TestCanonicalOrder(t *testing.T) {
	// Lane 0 gets 2^24 then +1 twice (fma keeps each +1 separately
	// rounded: 2^24+1 rounds to 2^24); lane 8 gets 1. The tree adds lane 0
	// and lane 8 first: 2^24 + 1 = 2^24 (tie to even), so the result is
	// 2^24; summing lanes 1..15 first would give 2^24+2.
	cols := 48
	w := make([]float32, cols)
	x := make([]float32, cols)
	for i := range x {
		x[i] = 1
	}
	w[0] = 1 << 24
	w[16] = 1
	w[32] = 1
	w[8] = 1
	w[1] = 1
	for _, b := range backends() {
		out := []float32{0}
		b.f32(out, 1, w, cols, x, cols, 1, 0, 1)
		if out[0] != 1<<24 {
			t.Errorf("%s: got %v, want 2^24", b.name, out[0])
		}
	}
	// Tail order: 16 lanes sum to 2^24 exactly, then the tail adds +1
	// three times, each rounding back to 2^24.
	cols = 19
	w = make([]float32, cols)
	x = make([]float32, cols)
	for i := range x {
		x[i] = 1
	}
	w[0] = 1 << 24
	w[16], w[17], w[18] = 1, 1, 1
	for _, b := range backends() {
		out := []float32{0}
		b.f32(out, 1, w, cols, x, cols, 1, 0, 1)
		if out[0] != 1<<24 {
			t.Errorf("%s tail: got %v, want 2^24", b.name, out[0])
		}
	}
}

func TestFMA32(t *testing.T) {
	// float32(math.FMA(...)) double-rounds this one.
	a := float32(1 + 1.0/4096)
	c := float32(math.Ldexp(1, -80))
	want := float32(1 + 1.0/2048 + math.Ldexp(1, -23))
	if got := fma32(a, a, c); got != want {
		t.Fatalf("fma32 double rounding: got %v want %v", got, want)
	}
	// Why fma32 exists: math.FMA is exact in float64, so converting its
	// result rounds a second time and lands on the wrong side of the tie.
	if dr := float32(math.FMA(float64(a), float64(a), float64(c))); dr == want {
		t.Fatalf("float32(math.FMA) = %v did not double-round; the example in fma32's comment is wrong", dr)
	}
	rng := rand.New(rand.NewSource(11))
	rnd := func() float32 {
		switch rng.Intn(6) {
		case 0:
			return math.Float32frombits(rng.Uint32()) // anything, incl. subnormals, inf, NaN
		case 1:
			return float32(math.Ldexp(rng.Float64(), -rng.Intn(150)))
		default:
			return float32(rng.NormFloat64())
		}
	}
	for i := 0; i < 200000; i++ {
		a, b, c := rnd(), rnd(), rnd()
		if i%3 == 0 {
			// Force near-cancellation and ties.
			c = -float32(float64(a) * float64(b))
		}
		got := fma32(a, b, c)
		want := refFMA32(a, b, c)
		if !sameBits(got, want) {
			t.Fatalf("fma32(%v, %v, %v) = %v (%#x), want %v (%#x)", a, b, c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// refFMA32 computes a*b+c exactly with math/big and rounds once.
func refFMA32(a, b, c float32) float32 {
	fa, fb, fc := float64(a), float64(b), float64(c)
	if math.IsNaN(fa) || math.IsNaN(fb) || math.IsNaN(fc) || math.IsInf(fa, 0) || math.IsInf(fb, 0) || math.IsInf(fc, 0) {
		return float32(fa*fb + fc)
	}
	x := new(big.Float).SetPrec(2000).SetFloat64(fa)
	x.Mul(x, new(big.Float).SetFloat64(fb))
	x.Add(x, new(big.Float).SetFloat64(fc))
	if x.Sign() == 0 {
		// Exact zero: +0 unless both addends are -0 (IEEE rule).
		return float32(fa*fb + fc)
	}
	f, _ := x.Float32()
	return f
}

func TestPanics(t *testing.T) {
	w := make([]float32, 64)
	x := make([]float32, 32)
	out := make([]float32, 4)
	q := make([]byte, 4*Q8_0BlockBytes)
	cases := map[string]func(){
		"short w":        func() { MatMulF32(out, 4, w, 32, x, 32, 1, 0, 3) },
		"short x":        func() { MatMulF32(out, 2, w, 32, x, 32, 2, 0, 2) },
		"short out":      func() { MatMulF32(out[:1], 2, w, 32, x, 32, 1, 0, 2) },
		"bad range":      func() { MatMulF32(out, 4, w, 32, x, 32, 1, 2, 1) },
		"overlap":        func() { MatMulF32(make([]float32, 10), 1, w, 32, make([]float32, 64), 32, 2, 0, 2) },
		"q8 cols":        func() { MatMulQ8_0(out, 4, q, 48, x, 48, 1, 0, 1) },
		"q4 short w":     func() { MatMulQ4_0(out, 4, q[:10], 32, x, 32, 1, 0, 1) },
		"quantize len":   func() { QuantizeRowQ8_0(make([]byte, 34), make([]float32, 31)) },
		"quantize dst":   func() { QuantizeRowQ4_0(make([]byte, 17), make([]float32, 32)) },
		"dequantize src": func() { DequantizeRowQ8_0(make([]float32, 64), make([]byte, 67)) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("no panic")
				}
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "kernels: ") {
					t.Fatalf("panic %v: want a kernels: message", r)
				}
			}()
			f()
		})
	}
	// No work is not an error.
	MatMulF32(nil, 0, nil, 32, nil, 0, 0, 0, 0)
	MatMulQ4_0(nil, 0, nil, 32, nil, 0, 1, 5, 5)
	// cols == 0 yields zeros.
	o := []float32{1, 2}
	MatMulF32(o, 1, nil, 0, nil, 0, 2, 0, 1)
	if o[0] != 0 || o[1] != 0 {
		t.Fatalf("cols=0: %v", o)
	}
}

func TestExportedUsesActive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	w := make([]float32, 10*64)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	x := randomX(rng, 64)
	a := make([]float32, 10)
	b := make([]float32, 10)
	MatMulF32(a, 10, w, 64, x, 64, 1, 0, 10)
	genericF32(b, 10, w, 64, x, 64, 1, 0, 10)
	for i := range a {
		if !sameBits(a[i], b[i]) {
			t.Fatalf("row %d", i)
		}
	}
	found := false
	for _, be := range backends() {
		found = found || be.name == ISA()
	}
	if !found || !strings.Contains("avx512 avx2 generic", ISA()) {
		t.Fatalf("ISA() = %q", ISA())
	}
	t.Logf("ISA %s; backends %v", ISA(), fmt.Sprint(len(backends())))
}

func TestChooseBackend(t *testing.T) {
	for _, b := range backends() {
		if got := chooseBackend(b.name); got != b {
			t.Errorf("chooseBackend(%q) = %s", b.name, got.name)
		}
	}
	if got := chooseBackend(""); got != bestBackend() {
		t.Errorf("default: %s", got.name)
	}
	if got := chooseBackend("neon"); got != bestBackend() {
		t.Errorf("unsupported: %s", got.name)
	}
}
