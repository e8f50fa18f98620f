//go:build amd64 && !purego

package kernels

// f16Table maps every binary16 bit pattern to its float32 value (as
// F16ToF32, which is exact). The quantized assembly kernels look block
// scales up here instead of converting them with VPBROADCASTW+VCVTPH2PS:
// two loads instead of two vector instructions per block and row. 256 KiB,
// of which a model's scales touch a few KiB.
var f16Table = newF16Table()

func newF16Table() *[1 << 16]float32 {
	if !hasAVX2 {
		return nil
	}
	t := new([1 << 16]float32)
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return t
}
