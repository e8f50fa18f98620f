package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

var le = binary.LittleEndian

// littleEndian reports whether the host stores numbers little-endian, so
// that F32 tensor bytes can be viewed as []float32 in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Tensor returns the directory entry of the tensor called name.
func (f *File) Tensor(name string) (TensorInfo, error) {
	i, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("%w: %q", ErrTensorNotFound, name)
	}
	return f.Tensors[i], nil
}

// TensorBytes returns the raw data of the tensor called name, for the
// decodable types (F32, F16, BF16, Q8_0, Q4_0); any other type is an
// ErrUnsupported. For a File from ParseBytes the result is a slice of the
// file's memory (do not modify it); otherwise it is read into a new buffer.
func (f *File) TensorBytes(name string) ([]byte, error) {
	t, err := f.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !t.Type.Decodable() {
		return nil, fmt.Errorf("%w: tensor %q has type %s (readable types: F32, F16, BF16, Q8_0, Q4_0)", ErrUnsupported, name, t.Type)
	}
	return f.raw(&t)
}

func (f *File) raw(t *TensorInfo) ([]byte, error) {
	if f.mem != nil {
		return f.mem[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
	}
	b := make([]byte, t.Size) // Parse checked Size fits in the file
	if err := f.readAt(b, t); err != nil {
		return nil, err
	}
	return b, nil
}

func (f *File) readAt(b []byte, t *TensorInfo) error {
	n, err := f.r.ReadAt(b, int64(t.Offset))
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("short read")
	}
	return fmt.Errorf("%w: tensor %q: reading %d bytes at offset %d: %v", ErrTruncated, t.Name, len(b), t.Offset, err)
}

// TensorF32 returns the data of the tensor called name converted to
// float32: F32 is copied, F16 and BF16 are widened, Q8_0 and Q4_0 are
// dequantized. Other types are an ErrUnsupported.
func (f *File) TensorF32(name string) ([]float32, error) {
	t, err := f.Tensor(name)
	if err != nil {
		return nil, err
	}
	return f.tensorF32(&t)
}

func (f *File) tensorF32(t *TensorInfo) ([]float32, error) {
	if !t.Type.Decodable() {
		return nil, fmt.Errorf("%w: tensor %q has type %s (readable types: F32, F16, BF16, Q8_0, Q4_0)", ErrUnsupported, t.Name, t.Type)
	}
	n := t.Elements()
	if t.Type == TypeF32 && f.mem == nil && littleEndian {
		// Read straight into the result: no second buffer.
		out := make([]float32, n)
		if err := f.readAt(f32Bytes(out), t); err != nil {
			return nil, err
		}
		return out, nil
	}
	b, err := f.raw(t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	decodeF32(out, b, t.Type)
	return out, nil
}

// decodeF32 converts len(dst) elements of type typ from src.
func decodeF32(dst []float32, src []byte, typ GGMLType) {
	switch typ {
	case TypeF32:
		if littleEndian {
			copy(f32Bytes(dst), src)
			return
		}
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case TypeF16:
		for i := range dst {
			dst[i] = HalfToFloat32(le.Uint16(src[2*i:]))
		}
	case TypeBF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(le.Uint16(src[2*i:])) << 16)
		}
	case TypeQ8_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[34*b : 34*b+34]
			d := HalfToFloat32(le.Uint16(blk))
			for j := range 32 {
				dst[32*b+j] = d * float32(int8(blk[2+j]))
			}
		}
	case TypeQ4_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[18*b : 18*b+18]
			d := HalfToFloat32(le.Uint16(blk))
			for j := range 16 {
				q := blk[2+j]
				dst[32*b+j] = d * float32(int(q&0x0F)-8)
				dst[32*b+j+16] = d * float32(int(q>>4)-8)
			}
		}
	}
}

// f32Bytes views v as bytes (host order).
func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// bytesF32 views b as float32s when it is 4-byte aligned and the host is
// little-endian; ok is false otherwise.
func bytesF32(b []byte) ([]float32, bool) {
	if len(b) == 0 {
		return []float32{}, true
	}
	if !littleEndian || len(b)%4 != 0 || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), true
}

// HalfToFloat32 converts an IEEE 754 binary16 value to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1F
	man := uint32(h) & 0x3FF
	switch {
	case exp == 0x1F: // Inf, NaN
		return math.Float32frombits(sign | 0xFF<<23 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0: // zero
		return math.Float32frombits(sign)
	}
	// Subnormal: value man * 2^-24; normalize.
	e := uint32(127 - 15 + 1)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3FF)<<13)
}

// Float32ToHalf converts f to the nearest binary16 value (round to nearest
// even; overflow gives ±Inf, NaN stays NaN).
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xFF
	man := b & 0x7FFFFF
	if exp == 0xFF {
		if man != 0 {
			return sign | 0x7E00
		}
		return sign | 0x7C00
	}
	e := exp - 127 + 15
	if e >= 0x1F {
		return sign | 0x7C00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1FFF
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to Inf: correct
	}
	return sign | uint16(r)
}
