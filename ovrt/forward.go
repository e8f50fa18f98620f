package ovrt

import (
	"fmt"
	"math"
	"slices"

	"github.com/pipeshard/pipeshard/ovrt/internal/kernels"
)

// Want selects which logits a forward returns from a model that has the
// output head. Models without the head always return the hidden states of
// every position, since the next stage needs them all.
type Want uint8

const (
	WantLast Want = iota // logits of the step's last position
	WantAll              // logits of every position (verifying drafts, --logits-out)
	WantNone             // no logits: only advance the cache (replay)
	// WantDeferred computes no logits yet but keeps every position's
	// final hidden state, so that Request.Logits computes the rows the
	// caller turns out to need (Walk: the accepted path of a draft tree).
	WantDeferred
)

// Step is one request's share of a Forward call: n tokens at positions
// Pos, Pos+1, ..., Pos+n-1.
//
// With Tree set, the tokens are a tree of candidate continuations (a
// speculative decoder's draft tree) rather than one sequence: token i
// follows token Tree[i] of the step, or the cached prefix when Tree[i]
// is -1, and parents come first (Tree[i] < i). Token i is stored in
// cache slot Pos+i but sits at position Pos+depth(i) (its RoPE angle)
// and attends to the Pos cached positions and its own ancestors only, so
// each root-to-node path computes exactly what that path alone would,
// bit for bit. Afterwards the cache holds Pos+n slots, of which only
// the prefix up to the first slot off the path the caller keeps is a
// sequence: the next forward starts there (a rewind, as always).
type Step struct {
	Req *Request
	Pos int // absolute position of the first token; <= Req.Len()

	// Exactly one of Tokens and Hidden is set: token ids when the model
	// has the embedding, else hidden states, n*Dim floats.
	Tokens []int32
	Hidden []float32

	Want Want
	Tree []int32 // parent of each token within the step; nil: a sequence
}

// Result is the output of one Step. Its slices point into the request's
// output buffers and stay valid until the request's next forward.
type Result struct {
	Hidden []float32 // [n][Dim], from every range but the last
	Logits []float32 // [rows][HeadHi-HeadLo], from a range with the head
	Err    error     // why this step was not run; other steps are unaffected
}

// Infer runs a single step and returns its result.
func (r *Request) Infer(s Step) (Result, error) {
	s.Req = r
	res := r.m.Forward([]Step{s})
	return res[0], res[0].Err
}

// parallelMACs is the work (multiply-adds) below which a product runs on
// the calling goroutine: handing smaller work to other threads costs more
// than doing it, even with the pool's spinning workers (for stories15M:
// every product but the smallest is split).
const parallelMACs = 1 << 16

// scratch holds a Forward call's activations, reused across calls.
type scratch struct {
	x, xb, q, k, v, att, h1, h3, tmp []float32
	logits                           []float32 // the head rows of a batch of steps
	pos                              []int     // absolute position of each token (its RoPE angle)
	slot                             []int     // cache slot of each token: its position but in a tree
	tok                              []int     // step index of each token
	anc                              [][]int32 // a tree token's path's slots, root first; nil for a sequence's
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// check validates a step against the model and the request's state.
func (m *Model) check(s *Step, seen map[*Request]bool) (n int, err error) {
	c := m.cfg
	if s.Req == nil || s.Req.m != m {
		return 0, ErrWrongModel
	}
	if seen[s.Req] {
		return 0, fmt.Errorf("%w: request appears twice in one batch", ErrBadInput)
	}
	if m.w.HasEmbed() {
		if s.Hidden != nil || len(s.Tokens) == 0 {
			return 0, fmt.Errorf("%w: the first stage takes token ids", ErrBadInput)
		}
		n = len(s.Tokens)
		for _, t := range s.Tokens {
			if t < 0 || int(t) >= c.Vocab {
				return 0, fmt.Errorf("%w: token %d, vocabulary %d", ErrTokenRange, t, c.Vocab)
			}
		}
	} else {
		if s.Tokens != nil || len(s.Hidden) == 0 || len(s.Hidden)%c.Dim != 0 {
			return 0, fmt.Errorf("%w: want hidden states of n*%d floats, got %d floats and %d tokens", ErrBadInput, c.Dim, len(s.Hidden), len(s.Tokens))
		}
		n = len(s.Hidden) / c.Dim
	}
	if s.Pos < 0 || s.Pos > s.Req.n {
		return 0, fmt.Errorf("%w: position %d with %d cached", ErrPosition, s.Pos, s.Req.n)
	}
	if s.Pos+n > c.Context {
		return 0, fmt.Errorf("%w: positions %d..%d, context %d", ErrContextFull, s.Pos, s.Pos+n-1, c.Context)
	}
	if s.Want > WantDeferred {
		return 0, fmt.Errorf("%w: want %d", ErrBadInput, s.Want)
	}
	if s.Tree != nil {
		if len(s.Tree) != n {
			return 0, fmt.Errorf("%w: tree of %d parents for %d tokens", ErrBadInput, len(s.Tree), n)
		}
		for i, p := range s.Tree {
			if p < -1 || int(p) >= i {
				return 0, fmt.Errorf("%w: token %d's parent is %d: parents must come first", ErrBadInput, i, p)
			}
		}
	}
	return n, nil
}

// Forward advances every step's request by its tokens, reading each weight
// matrix once for the whole batch. A step that fails validation gets an
// error in its Result and leaves its request unchanged; the others run.
func (m *Model) Forward(steps []Step) []Result {
	m.mu.Lock()
	defer m.mu.Unlock()

	c := m.cfg
	res := make([]Result, len(steps))
	seen := make(map[*Request]bool, len(steps))
	ns := make([]int, len(steps))
	T := 0
	for i := range steps {
		n, err := m.check(&steps[i], seen)
		if err != nil {
			res[i].Err = err
			continue
		}
		seen[steps[i].Req] = true
		ns[i] = n
		T += n
	}
	if T == 0 {
		return res
	}

	sc := &m.sc
	sc.x = grow(sc.x, T*c.Dim)
	sc.xb = grow(sc.xb, T*c.Dim)
	sc.tmp = grow(sc.tmp, T*c.Dim)
	sc.q = grow(sc.q, T*c.QDim())
	sc.att = grow(sc.att, T*c.QDim())
	sc.k = grow(sc.k, T*c.KVDim())
	sc.v = grow(sc.v, T*c.KVDim())
	sc.h1 = grow(sc.h1, T*c.HiddenDim)
	sc.h3 = grow(sc.h3, T*c.HiddenDim)
	sc.pos = sc.pos[:0]
	sc.slot = sc.slot[:0]
	sc.tok = sc.tok[:0]
	sc.anc = sc.anc[:0]

	// Inputs.
	off := 0
	for i, s := range steps {
		if ns[i] == 0 {
			continue
		}
		s.Req.grow(s.Pos + ns[i])
		for t := 0; t < ns[i]; t++ {
			sc.slot = append(sc.slot, s.Pos+t)
			sc.tok = append(sc.tok, i)
			if s.Tree == nil {
				sc.pos = append(sc.pos, s.Pos+t)
				sc.anc = append(sc.anc, nil)
				continue
			}
			// The slots of the token's path, root first.
			var path []int32
			for a := int32(t); a >= 0; a = s.Tree[a] {
				path = append(path, int32(s.Pos)+a)
			}
			slices.Reverse(path)
			sc.pos = append(sc.pos, s.Pos+len(path)-1)
			sc.anc = append(sc.anc, path)
		}
		dst := sc.x[off*c.Dim : (off+ns[i])*c.Dim]
		if m.w.HasEmbed() {
			for t, id := range s.Tokens {
				m.w.Embed.row(dst[t*c.Dim:(t+1)*c.Dim], int(id))
			}
		} else {
			copy(dst, s.Hidden)
		}
		off += ns[i]
	}

	for l := range m.w.Layers {
		m.layer(l, steps, T)
	}

	// Outputs. The head's rows of every step go through one product, so
	// the head's weights are read once for the batch (each row's sums
	// are the same as alone: the kernels' order does not depend on the
	// tile).
	off = 0
	type headRows struct{ step, from, rows int }
	var heads []headRows
	H := 0
	for i, s := range steps {
		n := ns[i]
		if n == 0 {
			continue
		}
		r := s.Req
		x := sc.x[off*c.Dim : (off+n)*c.Dim]
		off += n
		r.n = s.Pos + n
		r.deferred = r.deferred[:0]
		if !m.w.IsLast() {
			r.hidden = grow(r.hidden, n*c.Dim)
			copy(r.hidden, x)
			res[i].Hidden = r.hidden
		}
		if !m.w.HasHead() {
			continue
		}
		switch s.Want {
		case WantNone:
			continue
		case WantDeferred:
			r.deferred = grow(r.deferred, n*c.Dim)
			for t := 0; t < n; t++ {
				rmsnorm(r.deferred[t*c.Dim:(t+1)*c.Dim], x[t*c.Dim:(t+1)*c.Dim], m.w.FinalNorm, c.NormEps)
			}
			continue
		case WantLast:
			x = x[(n-1)*c.Dim:]
		}
		rows := len(x) / c.Dim
		// xb (T rows) holds them all: a step wants at most its n rows.
		xb := sc.xb[H*c.Dim : (H+rows)*c.Dim]
		for t := 0; t < rows; t++ {
			rmsnorm(xb[t*c.Dim:(t+1)*c.Dim], x[t*c.Dim:(t+1)*c.Dim], m.w.FinalNorm, c.NormEps)
		}
		heads = append(heads, headRows{i, H, rows})
		H += rows
	}
	if H == 0 {
		return res
	}
	V := m.w.Head.Rows
	if len(heads) == 1 {
		// One step: straight into its request's buffer.
		h := heads[0]
		r := steps[h.step].Req
		r.out = grow(r.out, h.rows*V)
		m.matmul(r.out, &m.w.Head, sc.xb[:H*c.Dim], H)
		res[h.step].Logits = r.out
		return res
	}
	sc.logits = grow(sc.logits, H*V)
	m.matmul(sc.logits, &m.w.Head, sc.xb[:H*c.Dim], H)
	for _, h := range heads {
		r := steps[h.step].Req
		r.out = grow(r.out, h.rows*V)
		copy(r.out, sc.logits[h.from*V:(h.from+h.rows)*V])
		res[h.step].Logits = r.out
	}
	return res
}

// layer runs transformer block l of the range over the T stacked tokens.
func (m *Model) layer(l int, steps []Step, T int) {
	c := m.cfg
	sc := &m.sc
	L := &m.w.Layers[l]
	D, qd, kvd, hd := c.Dim, c.QDim(), c.KVDim(), c.HeadSize()

	for t := 0; t < T; t++ {
		rmsnorm(sc.xb[t*D:(t+1)*D], sc.x[t*D:(t+1)*D], L.AttnNorm, c.NormEps)
	}
	m.matmulMany([]mmJob{{&L.Wq, sc.q}, {&L.Wk, sc.k}, {&L.Wv, sc.v}}, sc.xb, T)
	for t := 0; t < T; t++ {
		m.rope(sc.q[t*qd:(t+1)*qd], sc.pos[t])
		m.rope(sc.k[t*kvd:(t+1)*kvd], sc.pos[t])
	}
	// Write this layer's keys and values into each request's cache.
	for t := 0; t < T; t++ {
		r := steps[sc.tok[t]].Req
		p := sc.slot[t]
		for h := 0; h < c.KVHeads; h++ {
			o := (h*r.cap + p) * hd
			copy(r.k[l][o:o+hd], sc.k[t*kvd+h*hd:t*kvd+(h+1)*hd])
			copy(r.v[l][o:o+hd], sc.v[t*kvd+h*hd:t*kvd+(h+1)*hd])
		}
	}
	m.attention(l, steps, T)
	m.matmul(sc.tmp, &L.Wo, sc.att, T)
	add(sc.x[:T*D], sc.tmp[:T*D])

	for t := 0; t < T; t++ {
		rmsnorm(sc.xb[t*D:(t+1)*D], sc.x[t*D:(t+1)*D], L.FFNNorm, c.NormEps)
	}
	m.matmulMany([]mmJob{{&L.W1, sc.h1}, {&L.W3, sc.h3}}, sc.xb, T)
	swiglu(sc.h1[:T*c.HiddenDim], sc.h3[:T*c.HiddenDim])
	m.matmul(sc.tmp, &L.W2, sc.h1, T)
	add(sc.x[:T*D], sc.tmp[:T*D])
}

// attention computes, for every token and query head, softmax(q·K/√d)·V
// over the positions up to the token's own.
func (m *Model) attention(l int, steps []Step, T int) {
	c := m.cfg
	sc := &m.sc
	items := T * c.KVHeads
	work := 0
	for t := 0; t < T; t++ {
		work += (sc.slot[t] + 1) * c.QDim() * 2
	}
	do := func(lo, hi int) {
		var scores []float32
		for it := lo; it < hi; it++ {
			t, kh := it/c.KVHeads, it%c.KVHeads
			scores = m.attendGroup(l, steps[sc.tok[t]].Req, t, kh, scores)
		}
	}
	if work < m.parMACs || m.threads == 1 {
		do(0, items)
		return
	}
	m.pool.parallel(items, 1, do)
}

// attendGroup computes the attention of token t's query heads that share
// KV head kh. It returns the scores buffer for reuse.
func (m *Model) attendGroup(l int, r *Request, t, kh int, scores []float32) []float32 {
	c := m.cfg
	sc := &m.sc
	hd := c.HeadSize()
	G := c.Heads / c.KVHeads
	n := sc.slot[t] + 1
	if cap(scores) < G*n {
		scores = make([]float32, G*c.Context)
	}
	scores = scores[:G*n]
	keys := r.k[l][kh*r.cap*hd : (kh*r.cap+n)*hd]
	vals := r.v[l][kh*r.cap*hd : (kh*r.cap+n)*hd]
	q := sc.q[t*c.QDim()+kh*G*hd:]
	kernels.MatMulF32(scores, n, keys, hd, q, hd, G, 0, n)
	// A tree token sees the prefix and its path: keep those scores, in
	// order, so that the softmax and the sum below are the ones its path
	// alone would compute (each score is the same dot product wherever it
	// sits). Rows move left only, so the compaction can be done in place.
	anc := sc.anc[t]
	m0 := n
	prefix := sc.pos[t] + 1 - len(anc) // the step's Pos, for a tree token
	if anc != nil {
		m0 = prefix + len(anc)
		for g := 0; g < G; g++ {
			copy(scores[g*m0:g*m0+prefix], scores[g*n:g*n+prefix])
			for j, a := range anc {
				scores[g*m0+prefix+j] = scores[g*n+int(a)]
			}
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	for g := 0; g < G; g++ {
		s := scores[g*m0 : (g+1)*m0]
		softmax(s, scale)
		o := sc.att[t*c.QDim()+(kh*G+g)*hd:][:hd]
		clear(o)
		for j, a := range s {
			if anc != nil && j >= prefix {
				j = int(anc[j-prefix])
			}
			vj := vals[j*hd : (j+1)*hd]
			for d := range o {
				o[d] += float32(a * vj[d])
			}
		}
	}
	return scores
}

type mmJob struct {
	w   *Matrix
	out []float32
}

// matmul computes out[t] = w·x[t] for ntok stacked vectors.
func (m *Model) matmul(out []float32, w *Matrix, x []float32, ntok int) {
	m.matmulMany([]mmJob{{w, out}}, x, ntok)
}

// matmulMany runs several products over the same input as one parallel
// region: their rows are split between threads as if concatenated.
func (m *Model) matmulMany(jobs []mmJob, x []float32, ntok int) {
	total, macs := 0, 0
	for _, j := range jobs {
		total += j.w.Rows
		macs += j.w.Rows * j.w.Cols * ntok
	}
	run := func(lo, hi int) {
		base := 0
		for _, j := range jobs {
			a, b := max(lo-base, 0), min(hi-base, j.w.Rows)
			if a < b {
				j.w.mul(j.out, x, ntok, a, b)
			}
			base += j.w.Rows
		}
	}
	if macs < m.parMACs || m.threads == 1 {
		run(0, total)
		return
	}
	m.pool.parallel(total, 16, run)
}

// mul computes rows [r0, r1) of out[t] = w·x[t].
func (w *Matrix) mul(out, x []float32, ntok, r0, r1 int) {
	switch w.DType {
	case F32:
		kernels.MatMulF32(out, w.Rows, w.F32, w.Cols, x, w.Cols, ntok, r0, r1)
	case Q8_0:
		kernels.MatMulQ8_0(out, w.Rows, w.Q, w.Cols, x, w.Cols, ntok, r0, r1)
	case Q4_0:
		kernels.MatMulQ4_0(out, w.Rows, w.Q, w.Cols, x, w.Cols, ntok, r0, r1)
	}
}

// row writes row i of w, dequantized, into dst.
func (w *Matrix) row(dst []float32, i int) {
	switch w.DType {
	case F32:
		copy(dst, w.F32[i*w.Cols:(i+1)*w.Cols])
	case Q8_0:
		rb := w.DType.RowBytes(w.Cols)
		kernels.DequantizeRowQ8_0(dst, w.Q[i*rb:(i+1)*rb])
	case Q4_0:
		rb := w.DType.RowBytes(w.Cols)
		kernels.DequantizeRowQ4_0(dst, w.Q[i*rb:(i+1)*rb])
	}
}
