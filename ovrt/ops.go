package ovrt

import "math"

// The element-wise operations below are written so that Go may not fuse
// a multiply and an add (an explicit float32 conversion forbids it), and
// sums run in a fixed order: results are the same on every platform.

// rmsnorm writes w * x / sqrt(mean(x²) + eps) into dst.
func rmsnorm(dst, x, w []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v) // exact product: fusion-proof
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+eps))
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = w[i] * float32(v*inv)
	}
}

// rope rotates each head's interleaved pairs (2i, 2i+1) of v by the angles
// of position p.
func (m *Model) rope(v []float32, p int) {
	hd := m.cfg.HeadSize()
	half := hd / 2
	cos := m.cos[p*half : (p+1)*half]
	sin := m.sin[p*half : (p+1)*half]
	for h := 0; h+hd <= len(v); h += hd {
		x := v[h : h+hd]
		for i := 0; i < half; i++ {
			a, b := x[2*i], x[2*i+1]
			x[2*i] = float32(a*cos[i]) - float32(b*sin[i])
			x[2*i+1] = float32(a*sin[i]) + float32(b*cos[i])
		}
	}
}

// softmax scales s and replaces it with its softmax.
func softmax(s []float32, scale float32) {
	mx := float32(math.Inf(-1))
	for i := range s {
		s[i] *= scale
		mx = max(mx, s[i])
	}
	var sum float64
	for i, v := range s {
		e := float32(math.Exp(float64(v - mx)))
		s[i] = e
		sum += float64(e)
	}
	for i, v := range s {
		s[i] = float32(float64(v) / sum)
	}
}

// swiglu writes silu(gate) * up into gate.
func swiglu(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		sig := float32(1 / (1 + math.Exp(-float64(g))))
		gate[i] = float32(g*sig) * up[i]
	}
}

func add(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
