package ovrt

// Request is the state of one sequence in one model's layer range: its
// key/value cache and its length. It plays the part of an OpenVINO
// InferRequest with its VariableState.
//
// A Request is not safe for concurrent use, and must not appear twice in
// one Forward call.
type Request struct {
	m   *Model
	n   int // positions held in the cache
	cap int // positions allocated

	// k and v hold, per layer of the range, [KVHeads][cap][HeadSize]
	// floats: each KV head's positions are contiguous, so the scores of a
	// head are one matrix-vector product over its keys.
	k, v [][]float32

	out      []float32 // logits buffer reused across forwards
	hidden   []float32 // hidden-state buffer reused across forwards
	deferred []float32 // final-normed rows of the last forward, when it deferred its logits
	rows     []float32 // Logits' input rows
}

// NewRequest returns an empty request for m. Its cache grows as positions
// are written, up to the context length.
func (m *Model) NewRequest() *Request {
	nl := m.w.End - m.w.Start
	return &Request{m: m, k: make([][]float32, nl), v: make([][]float32, nl)}
}

// Len returns the number of positions the request's cache holds.
func (r *Request) Len() int { return r.n }

// Reset empties the cache, keeping its memory.
func (r *Request) Reset() { r.n = 0 }

// Truncate drops cached positions >= n. It is what the next forward at
// position n would do anyway; callers use it to give memory accounting an
// exact length. n greater than Len is ignored.
func (r *Request) Truncate(n int) {
	if n >= 0 && n < r.n {
		r.n = n
	}
}

// KVBytes returns the bytes of cache memory the request holds.
func (r *Request) KVBytes() int64 {
	var b int64
	for i := range r.k {
		b += int64(4 * (cap(r.k[i]) + cap(r.v[i])))
	}
	return b
}

// KVBytesPerPosition returns the cache bytes one position costs in m.
func (m *Model) KVBytesPerPosition() int64 {
	return int64(2 * 4 * m.cfg.KVDim() * (m.w.End - m.w.Start))
}

// grow makes room for n positions, keeping the first r.n.
func (r *Request) grow(n int) {
	if n <= r.cap {
		return
	}
	c := r.m.cfg
	newCap := max(n, 2*r.cap, 16)
	newCap = min(newCap, c.Context)
	hd := c.HeadSize()
	for l := range r.k {
		r.k[l] = regrow(r.k[l], c.KVHeads, r.cap, newCap, hd, r.n)
		r.v[l] = regrow(r.v[l], c.KVHeads, r.cap, newCap, hd, r.n)
	}
	r.cap = newCap
}

func regrow(old []float32, heads, oldCap, newCap, hd, keep int) []float32 {
	nw := make([]float32, heads*newCap*hd)
	for h := 0; h < heads && keep > 0; h++ {
		copy(nw[h*newCap*hd:h*newCap*hd+keep*hd], old[h*oldCap*hd:h*oldCap*hd+keep*hd])
	}
	return nw
}
