package kernels

import (
	"encoding/binary"
	"math"
)

// This file is the portable reference implementation: the definition of
// the canonical summation order in plain Go. Every SIMD path must agree
// with it bit for bit (see doc.go).

// fma32 returns a*b + c rounded once to float32 (round to nearest even):
// the result of the FMA instruction on float32 operands.
//
// math.FMA is a float64 operation, and float32(math.FMA(a, b, c)) rounds
// twice (to float64, then to float32), which is wrong whenever the first
// rounding lands exactly on a float32 tie: for a = b = 1+2^-12 and
// c = 2^-80 it gives 1+2^-11 instead of 1+2^-11+2^-23. So instead:
//
//   - p = a*b is exact in float64 (24+24 significand bits < 53),
//   - s = p + c is rounded to float64 and the rounding error e is recovered
//     exactly with Knuth's TwoSum,
//   - if e != 0 and s is even, s is moved one ulp toward the exact value,
//     which turns round-to-nearest into round-to-odd,
//   - and a round-to-odd result with at least two extra bits (53 >= 24+2)
//     rounds to float32 exactly as the exact value would.
//
// Most of the time none of this is needed: if s = RN64(p + c) is not a
// float32 rounding boundary (a midpoint between two adjacent float32 values),
// then s and the exact sum lie strictly on the same side of every boundary,
// because boundaries are float64 values and rounding is monotonic, so they
// round to the same float32. A boundary in the normal float32 range has its
// 29 low significand bits equal to 1<<28; that is checked first, and only
// those values, float32-subnormal results and non-finite values take the
// slow path.
//
// No step can be fused or reassociated by the compiler: the conversions are
// explicit and the remaining operations are additions.
func fma32(a, b, c float32) float32 {
	if r, ok := fma32Fast(a, b, c); ok {
		return r
	}
	return fma32Slow(a, b, c)
}

// fma32Fast is the fast path of fma32; ok is false when the slow path is
// needed. The hot loops call it directly (fma32 itself is over the
// inlining budget).
func fma32Fast(a, b, c float32) (r float32, ok bool) {
	s := float64(float64(a)*float64(b)) + float64(c)
	bits := math.Float64bits(s)
	// exp-897 wraps around below float32's normal range (2^-126).
	ok = bits&(1<<29-1) != 1<<28 && (bits>>52&0x7ff)-(1023-126) < 0x7ff-(1023-126)
	return float32(s), ok
}

// fma32Slow is fma32 by rounding to odd. It is kept out of line so that
// fma32 inlines.
//
//go:noinline
func fma32Slow(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b)) // exact
	cc := float64(c)
	s := p + cc
	bb := s - p
	e := (p - (s - bb)) + (cc - bb)
	if e != 0 && !math.IsNaN(e) { // inexact; e is NaN only when s is not finite
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// reduce16 sums the 16 lane accumulators with the canonical tree.
func reduce16(acc *[16]float32) float32 {
	var s8 [8]float32
	for i := range s8 {
		s8[i] = acc[i] + acc[i+8]
	}
	var s4 [4]float32
	for i := range s4 {
		s4[i] = s8[i] + s8[i+4]
	}
	s20 := s4[0] + s4[2]
	s21 := s4[1] + s4[3]
	return s20 + s21
}

// dotF32 is the canonical float32 dot product of w and x[:len(w)].
func dotF32(w, x []float32) float32 {
	x = x[:len(w)]
	var acc [16]float32
	n := len(w) &^ 15
	for k := 0; k < n; k += 16 {
		wk := w[k : k+16]
		xk := x[k : k+16]
		for i := range acc {
			// acc[i] = fma32(wk[i], xk[i], acc[i]), expanded so it inlines.
			r, ok := fma32Fast(wk[i], xk[i], acc[i])
			if !ok {
				r = fma32Slow(wk[i], xk[i], acc[i])
			}
			acc[i] = r
		}
	}
	s := reduce16(&acc)
	for j := n; j < len(w); j++ {
		s = fma32(w[j], x[j], s)
	}
	return s
}

// dotQ8 is the canonical dot product of one Q8_0 row (len(x)/32 blocks
// from w) with x.
func dotQ8(w []byte, x []float32) float32 {
	var acc [16]float32
	for b := 0; b < len(x)/QK; b++ {
		blk := w[b*Q8_0BlockBytes : b*Q8_0BlockBytes+Q8_0BlockBytes]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		q := blk[2 : 2+QK]
		xb := x[b*QK : b*QK+QK]
		for i := range acc {
			// tmp = e[i]*x[i]; tmp = fma(e[i+16], x[i+16], tmp);
			// acc = fma(tmp, d, acc), with fma32 expanded so it inlines.
			t := float32(float32(int8(q[i])) * xb[i])
			t2, ok := fma32Fast(float32(int8(q[i+16])), xb[i+16], t)
			if !ok {
				t2 = fma32Slow(float32(int8(q[i+16])), xb[i+16], t)
			}
			r, ok := fma32Fast(t2, d, acc[i])
			if !ok {
				r = fma32Slow(t2, d, acc[i])
			}
			acc[i] = r
		}
	}
	return reduce16(&acc)
}

// dotQ4 is the canonical dot product of one Q4_0 row (len(x)/32 blocks
// from w) with x.
func dotQ4(w []byte, x []float32) float32 {
	var acc [16]float32
	for b := 0; b < len(x)/QK; b++ {
		blk := w[b*Q4_0BlockBytes : b*Q4_0BlockBytes+Q4_0BlockBytes]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		qs := blk[2 : 2+QK/2]
		xb := x[b*QK : b*QK+QK]
		for i := range acc {
			lo := float32(int(qs[i]&15) - 8)
			hi := float32(int(qs[i]>>4) - 8)
			// The same steps as dotQ8, with fma32 expanded.
			t := float32(lo * xb[i])
			t2, ok := fma32Fast(hi, xb[i+16], t)
			if !ok {
				t2 = fma32Slow(hi, xb[i+16], t)
			}
			r, ok := fma32Fast(t2, d, acc[i])
			if !ok {
				r = fma32Slow(t2, d, acc[i])
			}
			acc[i] = r
		}
	}
	return reduce16(&acc)
}

func genericF32(out []float32, outStride int, w []float32, cols int, x []float32, xStride, ntok, r0, r1 int) {
	for t := 0; t < ntok; t++ {
		xt := x[t*xStride : t*xStride+cols]
		o := out[t*outStride:]
		for r := r0; r < r1; r++ {
			o[r] = dotF32(w[r*cols:(r+1)*cols], xt)
		}
	}
}

func genericQ8(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
	rb := cols / QK * Q8_0BlockBytes
	for t := 0; t < ntok; t++ {
		xt := x[t*xStride : t*xStride+cols]
		o := out[t*outStride:]
		for r := r0; r < r1; r++ {
			o[r] = dotQ8(w[r*rb:(r+1)*rb], xt)
		}
	}
}

func genericQ4(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
	rb := cols / QK * Q4_0BlockBytes
	for t := 0; t < ntok; t++ {
		xt := x[t*xStride : t*xStride+cols]
		o := out[t*outStride:]
		for r := r0; r < r1; r++ {
			o[r] = dotQ4(w[r*rb:(r+1)*rb], xt)
		}
	}
}

var genericBackend = &backend{
	name: "generic",
	f32:  genericF32,
	q8:   genericQ8,
	q4:   genericQ4,
}
