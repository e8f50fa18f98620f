package checkpoint

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"unsafe"
)

func TestF16ToF32(t *testing.T) {
	for h := range 1 << 16 {
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		exp, mant := h>>10&0x1f, h&0x3ff
		var want float64
		switch exp {
		case 0:
			want = sign * math.Ldexp(float64(mant), -24)
		case 0x1f:
			want = math.Inf(int(sign))
			if mant != 0 {
				want = math.NaN()
			}
		default:
			want = sign * math.Ldexp(float64(1024+mant), exp-25)
		}
		got := f16ToF32(uint16(h))
		switch {
		case math.IsNaN(want):
			if !math.IsNaN(float64(got)) {
				t.Fatalf("%#04x: %v, want NaN", h, got)
			}
			if math.Float32bits(got)&0x7fffff != uint32(mant)<<13 {
				t.Fatalf("%#04x: NaN payload %#x lost", h, math.Float32bits(got))
			}
		case float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want):
			t.Fatalf("%#04x: %v, want %v", h, got, want)
		}
	}
	for _, c := range []struct {
		h uint16
		f float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 5.960464477539063e-08}, {0x0400, 6.103515625e-05}, {0x3555, 0.33325195}} {
		if got := f16ToF32(c.h); got != c.f {
			t.Errorf("%#04x: %v, want %v", c.h, got, c.f)
		}
	}
}

func TestDecode(t *testing.T) {
	vals := []float32{0, 1, -2.5, 0.1, 3e-5, -65504}
	for _, dtype := range []string{"F32", "BF16"} {
		got := make([]float32, len(vals))
		decode(dtype, got, encode(dtype, vals))
		for i, v := range vals {
			want := v
			if dtype == "BF16" {
				want = bf16Value(v)
			}
			if got[i] != want {
				t.Errorf("%s %v: got %v, want %v", dtype, v, got[i], want)
			}
		}
	}
	if got := math.Float32frombits(uint32(bf16RNE(1.00390625)) << 16); got != 1 { // halfway: to even
		t.Errorf("bf16 rounding: %v", got)
	}
	exact := []float32{0, 1, -2.5, 0.125, 1024, -0.0009765625}
	got := make([]float32, len(exact))
	decode("F16", got, encode("F16", exact))
	if !slices.Equal(got, exact) {
		t.Errorf("F16: %v, want %v", got, exact)
	}
	// Misaligned F32 source: still decoded correctly.
	b := append([]byte{0}, encode("F32", vals)...)
	got = make([]float32, len(vals))
	decode("F32", got, b[1:])
	if !slices.Equal(got, vals) {
		t.Errorf("misaligned F32: %v", got)
	}
}

func TestF32View(t *testing.T) {
	vals := []float32{1, 2, 3, -4}
	words := make([]uint64, 3)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 24)
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[4+4*i:], math.Float32bits(v))
	}
	v, copied := f32View(buf[4:], 4)
	if copied || !slices.Equal(v, vals) || unsafe.Pointer(&v[0]) != unsafe.Pointer(&buf[4]) {
		t.Errorf("aligned: copied %v, %v", copied, v)
	}
	copy(buf[5:], buf[4:20])
	v, copied = f32View(buf[5:], 4)
	if !copied || !slices.Equal(v, vals) {
		t.Errorf("misaligned: copied %v, %v", copied, v)
	}
	if v, copied := f32View(nil, 0); copied || v == nil || len(v) != 0 {
		t.Errorf("empty: %v %v", v, copied)
	}
}

func TestInterleavedSource(t *testing.T) {
	// hd = 4: Meta rows (0,1) rotate together, as do (2,3); in HF those
	// pairs are rows (0,2) and (1,3).
	for hd, want := range map[int][]int{
		2: {0, 1, 2, 3},
		4: {0, 2, 1, 3, 4, 6, 5, 7},
		8: {0, 4, 1, 5, 2, 6, 3, 7},
	} {
		var got []int
		for r := range want {
			got = append(got, interleavedSource(r, hd))
		}
		if !slices.Equal(got, want) {
			t.Errorf("hd %d: %v, want %v", hd, got, want)
		}
	}
	// Undoing Meta's permute restores every row, for several head counts
	// and sizes (including GQA-like K with few heads).
	for _, c := range []struct{ heads, hd, cols int }{{1, 2, 3}, {3, 4, 2}, {8, 16, 5}, {2, 64, 1}, {6, 48, 3}} {
		rows := c.heads * c.hd
		meta := make([]float32, rows*c.cols)
		for i := range meta {
			meta[i] = float32(i)
		}
		hf := hfPermute(meta, c.heads, c.hd, c.cols)
		if slices.Equal(hf, meta) && c.hd > 2 {
			t.Fatalf("%+v: permute is the identity", c)
		}
		back := make([]float32, len(meta))
		seen := make(map[int]bool)
		for r := range rows {
			s := interleavedSource(r, c.hd)
			if s < 0 || s >= rows || seen[s] || s/c.hd != r/c.hd {
				t.Fatalf("%+v: row %d from %d (not a per-head permutation)", c, r, s)
			}
			seen[s] = true
			copy(back[r*c.cols:(r+1)*c.cols], hf[s*c.cols:(s+1)*c.cols])
		}
		if !slices.Equal(back, meta) {
			t.Errorf("%+v: round trip differs", c)
		}
	}
}

// TestRopeLayouts checks the meaning of the permutation rather than its
// formula: with Q/K rows in Meta order and interleaved RoPE (what ovrt
// runs), attention scores equal those of HF order with rotate-half RoPE.
func TestRopeLayouts(t *testing.T) {
	const heads, hd, cols, theta = 2, 8, 5, 10000.0
	rows := heads * hd
	wMeta := make([]float32, rows*cols)
	x := make([]float32, cols)
	for i := range wMeta {
		wMeta[i] = float32(math.Sin(float64(i)*1.7 + 0.3))
	}
	for i := range x {
		x[i] = float32(math.Cos(float64(i) * 0.9))
	}
	wHF := hfPermute(wMeta, heads, hd, cols)
	// Recover Meta order from HF order the way LoadHF does.
	wBack := make([]float32, rows*cols)
	for r := range rows {
		s := interleavedSource(r, hd)
		copy(wBack[r*cols:(r+1)*cols], wHF[s*cols:(s+1)*cols])
	}
	matvec := func(w []float32) []float64 {
		out := make([]float64, rows)
		for r := range rows {
			for c := range cols {
				out[r] += float64(w[r*cols+c]) * float64(x[c])
			}
		}
		return out
	}
	freq := func(i int) float64 { return math.Pow(theta, -2*float64(i)/hd) }
	interleaved := func(v []float64, pos int) []float64 { // Meta / llama2.c
		out := slices.Clone(v)
		for h := range heads {
			for i := range hd / 2 {
				a, b := h*hd+2*i, h*hd+2*i+1
				s, c := math.Sincos(float64(pos) * freq(i))
				out[a], out[b] = v[a]*c-v[b]*s, v[a]*s+v[b]*c
			}
		}
		return out
	}
	rotateHalf := func(v []float64, pos int) []float64 { // Hugging Face
		out := slices.Clone(v)
		for h := range heads {
			for i := range hd / 2 {
				a, b := h*hd+i, h*hd+i+hd/2
				s, c := math.Sincos(float64(pos) * freq(i))
				out[a], out[b] = v[a]*c-v[b]*s, v[b]*c+v[a]*s
			}
		}
		return out
	}
	dot := func(a, b []float64, h int) float64 {
		var s float64
		for i := h * hd; i < (h+1)*hd; i++ {
			s += a[i] * b[i]
		}
		return s
	}
	qMeta, qHF := matvec(wBack), matvec(wHF)
	for _, p := range [][2]int{{0, 0}, {3, 1}, {7, 7}, {50, 2}} {
		a, b := interleaved(qMeta, p[0]), interleaved(qMeta, p[1])
		c, d := rotateHalf(qHF, p[0]), rotateHalf(qHF, p[1])
		for h := range heads {
			if s1, s2 := dot(a, b, h), dot(c, d, h); math.Abs(s1-s2) > 1e-9 {
				t.Errorf("positions %v head %d: interleaved score %v, rotate-half %v", p, h, s1, s2)
			}
		}
	}
	// And the un-permuted rows must not agree (the test has teeth).
	a, b := interleaved(matvec(wHF), 3), interleaved(matvec(wHF), 1)
	c, d := rotateHalf(qHF, 3), rotateHalf(qHF, 1)
	if math.Abs(dot(a, b, 0)-dot(c, d, 0)) < 1e-6 {
		t.Error("scores agree without the permutation")
	}
}
