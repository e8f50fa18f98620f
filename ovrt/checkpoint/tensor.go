package checkpoint

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/pipeshard/pipeshard/ovrt"
)

// littleEndian reports whether the host stores float32 in the files' byte
// order, which zero-copy views require.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f32View returns the n little-endian float32 values at the start of b
// (len(b) >= 4n). When b is 4-byte aligned and the host is little-endian,
// the result aliases b (no copy; it is read-only memory when b is a
// mapping); otherwise it is a decoded copy, and copied is true.
func f32View(b []byte, n int) (v []float32, copied bool) {
	if v, ok := aliasF32(b, n); ok {
		return v, false
	}
	v = make([]float32, n)
	decodeF32(v, b[:4*n])
	return v, true
}

// aliasF32 reinterprets the first 4n bytes of b as float32 values, if the
// host is little-endian and b is 4-byte aligned.
func aliasF32(b []byte, n int) ([]float32, bool) {
	if n == 0 {
		return []float32{}, true
	}
	b = b[:4*n]
	p := unsafe.Pointer(unsafe.SliceData(b))
	if !littleEndian || uintptr(p)%unsafe.Alignof(float32(0)) != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(p), n), true
}

// decode converts len(dst) values of a safetensors dtype (F32, F16 or
// BF16) from src.
func decode(dtype string, dst []float32, src []byte) {
	switch dtype {
	case "F32":
		if v, ok := aliasF32(src, len(dst)); ok {
			copy(dst, v)
		} else {
			decodeF32(dst, src)
		}
	case "F16":
		decodeF16(dst, src)
	case "BF16":
		decodeBF16(dst, src)
	default:
		panic("checkpoint: decode " + dtype)
	}
}

func decodeF32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func decodeF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func decodeBF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

// f16ToF32 widens an IEEE 754 binary16 value exactly (NaN payloads kept).
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: mant * 2^-24. Normalise so that bit 10 is the
		// implicit one; 2^-14 has biased float32 exponent 113.
		e := uint32(113)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// f32Matrix wraps a float32 slice as a [rows, cols] matrix.
func f32Matrix(v []float32, rows, cols int) ovrt.Matrix {
	return ovrt.Matrix{DType: ovrt.F32, Rows: rows, Cols: cols, F32: v}
}

// interleavedSource maps a row of a Q or K projection in Meta's
// interleaved-pair RoPE layout to the row holding the same weights in the
// Hugging Face rotate-half layout, for heads of size hd (even).
//
// Meta's export to Hugging Face (permute in convert_llama_weights_to_hf.py)
// views each head's rows as [hd/2, 2], transposes to [2, hd/2] and
// flattens: Meta row 2i+j becomes HF row j*hd/2 + i. Here the inverse is
// needed: Meta row 2i is HF row i, Meta row 2i+1 is HF row i + hd/2.
func interleavedSource(row, hd int) int {
	head, j := row/hd*hd, row%hd
	return head + j%2*(hd/2) + j/2
}
