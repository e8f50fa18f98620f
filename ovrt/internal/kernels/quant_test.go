package kernels

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

func blockQ8(d uint16, q ...int8) []byte {
	b := make([]byte, Q8_0BlockBytes)
	binary.LittleEndian.PutUint16(b, d)
	for i, v := range q {
		b[2+i] = byte(v)
	}
	return b
}

func fill(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func TestQuantizeQ8_0Known(t *testing.T) {
	rep := func(v int8) []int8 {
		q := make([]int8, 32)
		for i := range q {
			q[i] = v
		}
		return q
	}
	large := fill(32, 0.1)
	large[5] = 1000
	qLarge := make([]int8, 32)
	qLarge[5] = 127
	half := fill(32, 0)
	half[0], half[1], half[2] = 1, 0.5, -0.5 // 0.5*127 = 63.5 rounds away from zero
	qHalf := make([]int8, 32)
	qHalf[0], qHalf[1], qHalf[2] = 127, 64, -64
	cases := []struct {
		name string
		x    []float32
		want []byte
	}{
		{"zeros", fill(32, 0), blockQ8(0)},
		{"ones", fill(32, 1), blockQ8(0x2008, rep(127)...)}, // d = 1/127
		{"minus ones", fill(32, -1), blockQ8(0x2008, rep(-127)...)},
		{"one large", large, blockQ8(0x47e0, qLarge...)}, // d = 1000/127
		{"halves", half, blockQ8(0x2008, qHalf...)},
	}
	for _, c := range cases {
		got := make([]byte, Q8_0BlockBytes)
		QuantizeRowQ8_0(got, c.x)
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: got % x\nwant % x", c.name, got, c.want)
		}
	}
}

func TestQuantizeQ4_0Known(t *testing.T) {
	q4 := func(d uint16, e [32]int) []byte {
		b := make([]byte, Q4_0BlockBytes)
		binary.LittleEndian.PutUint16(b, d)
		for i := 0; i < 16; i++ {
			b[2+i] = byte(e[i]) | byte(e[i+16])<<4
		}
		return b
	}
	var all8 [32]int
	for i := range all8 {
		all8[i] = 8
	}
	// Negative max: max = -8, d = 1, x*id+8.5 truncated.
	neg := fill(32, 0)
	neg[0], neg[1], neg[2], neg[17] = -8, 1, 2, -3.4
	eNeg := all8
	eNeg[0], eNeg[1], eNeg[2], eNeg[17] = 0, 9, 10, 5 // -3.4+8.5 = 5.1 -> 5
	// Positive max first: d = -1; the later -8 maps to 16.5 -> clamped 15.
	pos := fill(32, 0)
	pos[0], pos[20] = 8, -8
	ePos := all8
	ePos[0], ePos[20] = 0, 15
	cases := []struct {
		name string
		x    []float32
		want []byte
	}{
		{"zeros", fill(32, 0), q4(0x8000, all8)}, // d = 0 / -8 = -0, as in ggml
		{"negative max", neg, q4(0x3c00, eNeg)},
		{"positive max, clamp", pos, q4(0xbc00, ePos)},
	}
	for _, c := range cases {
		got := make([]byte, Q4_0BlockBytes)
		QuantizeRowQ4_0(got, c.x)
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: got % x\nwant % x", c.name, got, c.want)
		}
	}
}

func TestDequantizeKnown(t *testing.T) {
	q := make([]int8, 32)
	for i := range q {
		q[i] = int8(i*8 - 128)
	}
	dst := make([]float32, 32)
	DequantizeRowQ8_0(dst, blockQ8(0x3800, q...)) // d = 0.5
	for i, v := range dst {
		if want := float32(q[i]) * 0.5; v != want {
			t.Fatalf("q8 [%d] = %v, want %v", i, v, want)
		}
	}
	b := make([]byte, Q4_0BlockBytes)
	binary.LittleEndian.PutUint16(b, 0x4000) // d = 2
	for i := 0; i < 16; i++ {
		b[2+i] = byte(i) | byte(15-i)<<4
	}
	DequantizeRowQ4_0(dst, b)
	for i := 0; i < 16; i++ {
		if dst[i] != float32(i-8)*2 || dst[i+16] != float32(7-i)*2 {
			t.Fatalf("q4 [%d] = %v, [%d] = %v", i, dst[i], i+16, dst[i+16])
		}
	}
}

func TestQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	for it := 0; it < 200; it++ {
		n := 32 * (1 + rng.Intn(8))
		scale := math.Ldexp(1, rng.Intn(20)-10)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		q8 := make([]byte, n/QK*Q8_0BlockBytes)
		q4 := make([]byte, n/QK*Q4_0BlockBytes)
		QuantizeRowQ8_0(q8, x)
		QuantizeRowQ4_0(q4, x)
		y8 := make([]float32, n)
		y4 := make([]float32, n)
		DequantizeRowQ8_0(y8, q8)
		DequantizeRowQ4_0(y4, q4)
		for b := 0; b < n/QK; b++ {
			var amax float64
			for _, v := range x[b*QK : b*QK+QK] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			for i := b * QK; i < b*QK+QK; i++ {
				// Half a step, plus the f16 rounding of d (relative 2^-11,
				// absolute 2^-25 in the subnormal range) times the largest
				// code.
				f16err := func(d float64) float64 { return math.Max(d/2048, math.Ldexp(1, -25)) }
				if e := math.Abs(float64(y8[i] - x[i])); e > amax/127*0.5+127*f16err(amax/127) {
					t.Fatalf("q8 element %d: %v -> %v (amax %v)", i, x[i], y8[i], amax)
				}
				// Q4 may clamp the element opposite to max by one step.
				if e := math.Abs(float64(y4[i] - x[i])); e > amax/8+16*f16err(amax/8) {
					t.Fatalf("q4 element %d: %v -> %v (amax %v)", i, x[i], y4[i], amax)
				}
			}
		}
		// Quantizing the dequantized row again is stable for Q8_0.
		q8b := make([]byte, len(q8))
		QuantizeRowQ8_0(q8b, y8)
		y8b := make([]float32, n)
		DequantizeRowQ8_0(y8b, q8b)
		var rowMax float64
		for _, v := range x {
			rowMax = math.Max(rowMax, math.Abs(float64(v)))
		}
		for i := range y8 {
			// At most one step of the (f16-rounded) scale.
			if math.Abs(float64(y8b[i]-y8[i])) > rowMax/127*1.01+math.Ldexp(1, -24) {
				t.Fatalf("q8 requantize element %d: %v -> %v", i, y8[i], y8b[i])
			}
		}
	}
}
