package ovrt

import (
	"encoding/binary"

	"github.com/pipeshard/pipeshard/ovrt/internal/kernels"
)

// EncodeF16 writes src as little-endian IEEE half floats into dst, which
// must hold 2*len(src) bytes. Rounding is to nearest, ties to even. The
// stage protocol sends hidden states this way by default.
func EncodeF16(dst []byte, src []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], kernels.F32ToF16(v))
	}
}

// DecodeF16 reads len(dst) little-endian half floats from src.
func DecodeF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = kernels.F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}
