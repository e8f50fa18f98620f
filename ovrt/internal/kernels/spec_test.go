package kernels

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

// The functions below transcribe the canonical order from doc.go literally,
// with refFMA32 (exact arithmetic in math/big, one rounding) as the fused
// multiply-add. TestGenericMatchesSpec holds the portable code to them, and
// TestBitIdentical holds every SIMD path to the portable code.

func specReduce(acc [16]float32) float32 {
	var s8 [8]float32
	var s4 [4]float32
	var s2 [2]float32
	for i := 0; i < 8; i++ {
		s8[i] = acc[i] + acc[i+8]
	}
	for i := 0; i < 4; i++ {
		s4[i] = s8[i] + s8[i+4]
	}
	for i := 0; i < 2; i++ {
		s2[i] = s4[i] + s4[i+2]
	}
	return s2[0] + s2[1]
}

func specF32(w, x []float32) float32 {
	var acc [16]float32
	k := 0
	for ; k+16 <= len(w); k += 16 {
		for i := 0; i < 16; i++ {
			acc[i] = refFMA32(w[k+i], x[k+i], acc[i])
		}
	}
	s := specReduce(acc)
	for j := k; j < len(w); j++ {
		s = refFMA32(w[j], x[j], s)
	}
	return s
}

// specQ takes the blocks already split into element values and scales.
func specQ(e [][32]int, d []float32, x []float32) float32 {
	var acc [16]float32
	for b := range e {
		for i := 0; i < 16; i++ {
			tmp := float32(float32(e[b][i]) * x[32*b+i])
			tmp = refFMA32(float32(e[b][i+16]), x[32*b+i+16], tmp)
			acc[i] = refFMA32(tmp, d[b], acc[i])
		}
	}
	return specReduce(acc)
}

func TestGenericMatchesSpec(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	for it := 0; it < 300; it++ {
		cols := 1 + rng.Intn(200)
		w := randomX(rng, cols)
		x := randomX(rng, cols)
		if got, want := dotF32(w, x), specF32(w, x); !sameBits(got, want) {
			t.Fatalf("f32 cols=%d: %v, spec %v", cols, got, want)
		}
		nb := 1 + rng.Intn(10)
		x = randomX(rng, 32*nb)
		q8 := randomQ(rng, nb, Q8_0BlockBytes)
		q4 := randomQ(rng, nb, Q4_0BlockBytes)
		e8 := make([][32]int, nb)
		e4 := make([][32]int, nb)
		d8 := make([]float32, nb)
		d4 := make([]float32, nb)
		for b := 0; b < nb; b++ {
			d8[b] = F16ToF32(binary.LittleEndian.Uint16(q8[b*34:]))
			d4[b] = F16ToF32(binary.LittleEndian.Uint16(q4[b*18:]))
			for i := 0; i < 32; i++ {
				e8[b][i] = int(int8(q8[b*34+2+i]))
			}
			for i := 0; i < 16; i++ {
				e4[b][i] = int(q4[b*18+2+i]&15) - 8
				e4[b][i+16] = int(q4[b*18+2+i]>>4) - 8
			}
		}
		if got, want := dotQ8(q8, x), specQ(e8, d8, x); !sameBits(got, want) {
			t.Fatalf("q8 blocks=%d: %v, spec %v", nb, got, want)
		}
		if got, want := dotQ4(q4, x), specQ(e4, d4, x); !sameBits(got, want) {
			t.Fatalf("q4 blocks=%d: %v, spec %v", nb, got, want)
		}
	}
}

func TestF16Table(t *testing.T) {
	inf := float32(math.Inf(1))
	toF16 := []struct {
		f float32
		h uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.333251953125, 0x3555},
		{65504, 0x7bff},
		{65519.996, 0x7bff},
		{65520, 0x7c00}, // tie between 65504 and 2^16 rounds to even: infinity
		{1e6, 0x7c00},
		{-1e6, 0xfc00},
		{6.103515625e-05, 0x0400}, // 2^-14, smallest normal
		{6.1e-5, 0x03ff},          // subnormal, 1023.4 units of 2^-24
		{5.9604645e-08, 0x0001},   // 2^-24, smallest subnormal
		{2.9802322e-08, 0x0000},   // 2^-25: tie, rounds to even (0)
		{2.9802326e-08, 0x0001},   // just above 2^-25
		{8.940697e-08, 0x0002},    // 1.5 units: tie, rounds to even (2)
		{1e-10, 0x0000},
		{-1e-10, 0x8000},
		{1 + 1.0/2048, 0x3c00},               // tie, even
		{1 + 3.0/2048, 0x3c02},               // tie, even
		{1 + 1.0/2048 + 1.0/(1<<20), 0x3c01}, // above the tie
		{inf, 0x7c00},
		{-inf, 0xfc00},
		{float32(math.NaN()), 0x7e00},
		{math.Float32frombits(0x00000001), 0x0000}, // float32 subnormal
	}
	for _, c := range toF16 {
		if got := F32ToF16(c.f); got != c.h {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	toF32 := []struct {
		h uint16
		f float32
	}{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x7bff, 65504},
		{0x0400, 6.103515625e-05},
		{0x03ff, 6.097555e-05},
		{0x0001, 5.9604645e-08},
		{0x8001, -5.9604645e-08},
		{0x3555, 0.333251953125},
		{0x7c00, inf},
		{0xfc00, -inf},
	}
	for _, c := range toF32 {
		if got := F16ToF32(c.h); got != c.f {
			t.Errorf("F16ToF32(%#04x) = %v, want %v", c.h, got, c.f)
		}
	}
	if got := F16ToF32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToF32(0x8000) = %v, want -0", got)
	}
	for _, h := range []uint16{0x7e00, 0x7c01, 0xfe00, 0x7fff} {
		if got := F16ToF32(h); got == got {
			t.Errorf("F16ToF32(%#04x) = %v, want NaN", h, got)
		}
	}
}

// TestF16RoundTrip: every binary16 value survives f16 -> f32 -> f16.
func TestF16RoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		back := F32ToF16(f)
		if f != f {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

// checkNearestF16 verifies that F32ToF16(f) is the binary16 value nearest
// to f, ties to even, by comparing with its neighbours.
func checkNearestF16(t *testing.T, f float32) {
	t.Helper()
	if f != f {
		return
	}
	h := F32ToF16(f)
	if math.Signbit(float64(f)) != (h&0x8000 != 0) {
		t.Fatalf("F32ToF16(%v) = %#04x: wrong sign", f, h)
	}
	mag := h & 0x7fff
	af := math.Abs(float64(f))
	val := func(m uint16) float64 {
		if m >= 0x7c00 {
			return 65536 // the rounding boundary treats infinity as 2^16
		}
		return float64(F16ToF32(m))
	}
	d := math.Abs(val(mag) - af)
	for _, nb := range []uint16{mag - 1, mag + 1} {
		if nb > 0x7c00 || (mag == 0 && nb == 0xffff) {
			continue
		}
		dn := math.Abs(val(nb) - af)
		if dn < d || (dn == d && mag&1 == 1) {
			t.Fatalf("F32ToF16(%v) = %#04x (%v), but %#04x (%v) is nearer or the even tie", f, h, val(mag), nb, val(nb))
		}
	}
}

func TestF32ToF16Nearest(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for i := 0; i < 300000; i++ {
		checkNearestF16(t, math.Float32frombits(rng.Uint32()))
	}
	// Around every binary16 value and midpoint.
	for i := 0; i < 0x7c00; i++ {
		v := F16ToF32(uint16(i))
		next := F16ToF32(uint16(i + 1))
		if i+1 == 0x7c00 {
			next = 65536
		}
		mid := float32((float64(v) + float64(next)) / 2)
		for _, c := range []float32{v, mid} {
			b := math.Float32bits(c)
			for _, bb := range []uint32{b - 1, b, b + 1} {
				checkNearestF16(t, math.Float32frombits(bb))
				checkNearestF16(t, -math.Float32frombits(bb))
			}
		}
	}
}

func TestBF16(t *testing.T) {
	cases := map[uint16]float32{0x3f80: 1, 0xc000: -2, 0x0000: 0, 0x7f80: float32(math.Inf(1)), 0x3e80: 0.25}
	for h, f := range cases {
		if got := BF16ToF32(h); got != f {
			t.Errorf("BF16ToF32(%#04x) = %v, want %v", h, got, f)
		}
	}
	if v := BF16ToF32(0x7fc0); v == v {
		t.Error("BF16 NaN")
	}
}
