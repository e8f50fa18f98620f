package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block geometry of the GGUF quantized formats.
const (
	// QK is the number of weights in one Q8_0 or Q4_0 block.
	QK = 32
	// Q8_0BlockBytes is the size of one Q8_0 block: f16 scale + 32 int8.
	Q8_0BlockBytes = 2 + QK
	// Q4_0BlockBytes is the size of one Q4_0 block: f16 scale + 16 bytes
	// holding 32 nibbles.
	Q4_0BlockBytes = 2 + QK/2
)

func checkQuantLen(op string, n, blockBytes, bytes int) {
	if n%QK != 0 {
		panic(fmt.Sprintf("kernels: %s: %d values is not a multiple of %d", op, n, QK))
	}
	if need := n / QK * blockBytes; bytes < need {
		panic(fmt.Sprintf("kernels: %s: %d bytes for %d values, need %d", op, bytes, n, need))
	}
}

// QuantizeRowQ8_0 quantizes src (len a multiple of 32) into len(src)/32
// Q8_0 blocks in dst, exactly as ggml's reference quantize_row_q8_0_ref:
// per block amax = max|x|, d = amax/127, id = 1/d (0 when d == 0),
// q = round(x*id) with halves away from zero, and d stored as f16.
func QuantizeRowQ8_0(dst []byte, src []float32) {
	checkQuantLen("QuantizeRowQ8_0", len(src), Q8_0BlockBytes, len(dst))
	for b := 0; b < len(src)/QK; b++ {
		x := src[b*QK : b*QK+QK]
		y := dst[b*Q8_0BlockBytes : b*Q8_0BlockBytes+Q8_0BlockBytes]
		var amax float32
		for _, v := range x {
			av := float32(math.Abs(float64(v)))
			// MAX(amax, av) written as ggml's macro: a > b ? a : b.
			if !(amax > av) {
				amax = av
			}
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y, F32ToF16(d))
		for j, v := range x {
			x0 := float32(v * id)
			y[2+j] = byte(int8(math.Round(float64(x0))))
		}
	}
}

// QuantizeRowQ4_0 quantizes src (len a multiple of 32) into len(src)/32
// Q4_0 blocks in dst, exactly as ggml's reference quantize_row_q4_0_ref:
// per block max is the value of largest magnitude (keeping its sign, the
// first one on ties), d = max / -8, id = 1/d (0 when d == 0),
// q = min(15, int8(x*id + 8.5)) with truncation toward zero; element i of
// the block goes to the low nibble of byte i, element i+16 to its high
// nibble.
func QuantizeRowQ4_0(dst []byte, src []float32) {
	checkQuantLen("QuantizeRowQ4_0", len(src), Q4_0BlockBytes, len(dst))
	for b := 0; b < len(src)/QK; b++ {
		x := src[b*QK : b*QK+QK]
		y := dst[b*Q4_0BlockBytes : b*Q4_0BlockBytes+Q4_0BlockBytes]
		var amax, max float32
		for _, v := range x {
			av := float32(math.Abs(float64(v)))
			if amax < av {
				amax = av
				max = v
			}
		}
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y, F32ToF16(d))
		for j := 0; j < QK/2; j++ {
			x0 := float32(x[j] * id)
			x1 := float32(x[j+QK/2] * id)
			y[2+j] = q4Nibble(x0) | q4Nibble(x1)<<4
		}
	}
}

// q4Nibble is ggml's MIN(15, (int8_t)(x + 8.5f)).
func q4Nibble(x float32) byte {
	q := int8(float32(x + 8.5))
	if q > 15 {
		q = 15
	}
	return byte(q)
}

// DequantizeRowQ8_0 expands the Q8_0 blocks in src into dst (len a
// multiple of 32): dst[i] = d * q[i], one float32 multiply each.
func DequantizeRowQ8_0(dst []float32, src []byte) {
	checkQuantLen("DequantizeRowQ8_0", len(dst), Q8_0BlockBytes, len(src))
	for b := 0; b < len(dst)/QK; b++ {
		blk := src[b*Q8_0BlockBytes : b*Q8_0BlockBytes+Q8_0BlockBytes]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		y := dst[b*QK : b*QK+QK]
		for j := range y {
			y[j] = float32(int8(blk[2+j])) * d
		}
	}
}

// DequantizeRowQ4_0 expands the Q4_0 blocks in src into dst (len a
// multiple of 32): element i = (qs[i]&15 - 8) * d, element i+16 =
// (qs[i]>>4 - 8) * d.
func DequantizeRowQ4_0(dst []float32, src []byte) {
	checkQuantLen("DequantizeRowQ4_0", len(dst), Q4_0BlockBytes, len(src))
	for b := 0; b < len(dst)/QK; b++ {
		blk := src[b*Q4_0BlockBytes : b*Q4_0BlockBytes+Q4_0BlockBytes]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		y := dst[b*QK : b*QK+QK]
		for j := 0; j < QK/2; j++ {
			q := blk[2+j]
			y[j] = float32(int(q&15)-8) * d
			y[j+QK/2] = float32(int(q>>4)-8) * d
		}
	}
}
