package kernels

import (
	"encoding/binary"
	"math"
	"testing"
)

// fuzzX is a fixed activation vector with varied magnitudes and signs.
func fuzzX(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Ldexp(float64(i%13)-6.5, i%7-3))
	}
	return x
}

// fuzzQuant checks arbitrary bytes as blocks: dequantization must not panic
// and must match the block formula, and every backend's matmul over them
// (as 1 to 3 rows) must match the portable code.
func fuzzQuant(t *testing.T, data []byte, blockBytes int, deq func([]float32, []byte), elem func(blk []byte, i int) int, run func(b *backend, out []float32, w []byte, cols int, x []float32, ntok, rows int)) {
	nb := len(data) / blockBytes
	if nb == 0 {
		return
	}
	data = data[:nb*blockBytes]
	dst := make([]float32, nb*QK)
	deq(dst, data)
	for b := 0; b < nb; b++ {
		blk := data[b*blockBytes : (b+1)*blockBytes]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		for i := 0; i < QK; i++ {
			if want := float32(elem(blk, i)) * d; !sameBits(dst[b*QK+i], want) {
				t.Fatalf("block %d element %d: %v, want %v", b, i, dst[b*QK+i], want)
			}
		}
	}
	rows := 1
	for _, r := range []int{3, 2} {
		if nb%r == 0 {
			rows = r
			break
		}
	}
	cols := nb / rows * QK
	ntok := 1 + nb%4
	x := fuzzX(ntok * cols)
	want := make([]float32, ntok*rows)
	run(genericBackend, want, data, cols, x, ntok, rows)
	for _, be := range backends()[1:] {
		got := make([]float32, ntok*rows)
		run(be, got, data, cols, x, ntok, rows)
		for i := range got {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("%s: out[%d] = %v, generic %v", be.name, i, got[i], want[i])
			}
		}
	}
}

func FuzzDequantizeQ8_0(f *testing.F) {
	f.Add(make([]byte, Q8_0BlockBytes))
	f.Add(blockQ8(0x3c00, 1, -1, 127, -128))
	f.Add(append(blockQ8(0x7c00, 1), blockQ8(0x0001, -5)...))
	f.Add(blockQ8(0x7e00, 3))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzQuant(t, data, Q8_0BlockBytes, DequantizeRowQ8_0,
			func(blk []byte, i int) int { return int(int8(blk[2+i])) },
			func(b *backend, out []float32, w []byte, cols int, x []float32, ntok, rows int) {
				b.q8(out, rows, w, cols, x, cols, ntok, 0, rows)
			})
	})
}

func FuzzDequantizeQ4_0(f *testing.F) {
	f.Add(make([]byte, Q4_0BlockBytes))
	f.Add([]byte{0x00, 0x3c, 0x0f, 0xf0, 0x88, 0x77, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add(make([]byte, 3*Q4_0BlockBytes))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzQuant(t, data, Q4_0BlockBytes, DequantizeRowQ4_0,
			func(blk []byte, i int) int {
				if i < 16 {
					return int(blk[2+i]&15) - 8
				}
				return int(blk[2+i-16]>>4) - 8
			},
			func(b *backend, out []float32, w []byte, cols int, x []float32, ntok, rows int) {
				b.q4(out, rows, w, cols, x, cols, ntok, 0, rows)
			})
	})
}

// FuzzMatMulF32 feeds arbitrary float32 bit patterns (NaN, infinities,
// subnormals) to every backend.
func FuzzMatMulF32(f *testing.F) {
	f.Add(make([]byte, 4*40), uint8(2))
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0x80, 0xff, 1, 0, 0, 0, 0xff, 0xff, 0x7f, 0x7f}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, shape uint8) {
		vals := make([]float32, len(data)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		rows := 1 + int(shape%5)
		cols := len(vals) / (rows + 1)
		if cols == 0 {
			return
		}
		w := vals[:rows*cols]
		x := vals[rows*cols : rows*cols+cols]
		want := make([]float32, rows)
		genericF32(want, rows, w, cols, x, cols, 1, 0, rows)
		for _, be := range backends()[1:] {
			got := make([]float32, rows)
			be.f32(got, rows, w, cols, x, cols, 1, 0, rows)
			for i := range got {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s: row %d = %v, generic %v", be.name, i, got[i], want[i])
				}
			}
		}
	})
}

func FuzzF32ToF16(f *testing.F) {
	f.Add(uint32(0x3f800000))
	f.Add(uint32(0x477ff000))
	f.Add(uint32(0x33000000))
	f.Fuzz(func(t *testing.T, bits uint32) {
		checkNearestF16(t, math.Float32frombits(bits))
	})
}
