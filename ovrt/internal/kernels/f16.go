package kernels

import "math"

// F16ToF32 converts an IEEE 754 binary16 value to float32. The conversion
// is exact for every finite value, including subnormals; infinities keep
// their sign; a NaN stays a NaN with its payload shifted into place and the
// quiet bit set, which is what the x86 VCVTPH2PS instruction does.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: mant * 2^-24, exact in float32.
		f := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	case 0x1f:
		if mant == 0 {
			return math.Float32frombits(sign | 0x7f800000)
		}
		return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 converts a float32 to IEEE 754 binary16, rounding to nearest
// with ties to even. Values whose magnitude rounds past 65504 become
// infinities, tiny values become subnormals or signed zeros, and a NaN stays
// a NaN (quiet bit set, payload truncated), like the x86 VCVTPS2PH
// instruction in round-to-nearest mode.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	he := exp - 127 + 15 // biased binary16 exponent
	if he >= 0x1f {
		return sign | 0x7c00
	}
	if he >= 1 {
		// Normal range: keep 10 mantissa bits, round the 13 dropped ones.
		h := uint32(he)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, up to 0x7c00 (infinity)
		}
		return sign | uint16(h)
	}
	if exp == 0 {
		// float32 subnormals are far below half the smallest binary16
		// subnormal (2^-25).
		return sign
	}
	// Result is a binary16 subnormal (or rounds up to the smallest normal):
	// count units of 2^-24. The value is m * 2^(exp-150) with m the 24-bit
	// significand, so units = m >> (126 - exp), rounded.
	m := mant | 0x800000
	shift := uint(126 - exp) // >= 14 because he <= 0
	if shift >= 32 {
		return sign
	}
	q := m >> shift
	rest := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || (rest == half && q&1 == 1) {
		q++
	}
	return sign | uint16(q)
}

// BF16ToF32 converts a bfloat16 value (the upper half of a float32) to
// float32. It is exact.
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}
