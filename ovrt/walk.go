package ovrt

import "fmt"

// Logits computes the head's rows for the given positions of the
// request's last forward, which must have been run with WantDeferred by
// a model with the head. Positions count from the forward's first token.
// The result holds len(rows) rows of HeadHi-HeadLo floats, each bit for
// bit what WantAll would have returned for it, and stays valid until the
// request's next forward or Logits call. The head's weights are read
// once per call, so a caller that knows several rows it needs asks for
// them together.
func (r *Request) Logits(rows ...int) ([]float32, error) {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cfg
	if !m.w.HasHead() {
		return nil, fmt.Errorf("%w: layers %d..%d have no output head", ErrBadInput, m.w.Start, m.w.End)
	}
	n := len(r.deferred) / c.Dim
	if n == 0 {
		return nil, fmt.Errorf("%w: the last forward did not defer its logits", ErrBadInput)
	}
	r.rows = grow(r.rows, len(rows)*c.Dim)
	for i, row := range rows {
		if row < 0 || row >= n {
			return nil, fmt.Errorf("%w: row %d of a %d-token forward", ErrBadInput, row, n)
		}
		copy(r.rows[i*c.Dim:(i+1)*c.Dim], r.deferred[row*c.Dim:(row+1)*c.Dim])
	}
	V := m.w.Head.Rows
	r.out = grow(r.out, len(rows)*V)
	if len(rows) > 0 {
		m.matmul(r.out, &m.w.Head, r.rows, len(rows))
	}
	return r.out, nil
}

// Walk follows a speculative step's outputs down its tree of drafts, and
// returns the output token of every row it visits, -1 for the others.
//
// The step's tokens are ids, with parents as in Step.Tree (nil: a
// sequence, each token following the one before). The walk starts at row
// from; at each row, next chooses the row's output token (from its
// logits: argmax or a draw), and the walk goes on to the row's child
// whose token that is, until no child has it. These are exactly the rows
// a speculative decoder reads, so a last stage that computes the head
// for them alone (WantDeferred, Logits) answers as if it had computed
// them all.
func Walk(ids, parents []int32, from int, next func(row int) (int, error)) ([]int, error) {
	n := len(ids)
	if parents != nil && len(parents) != n {
		return nil, fmt.Errorf("%w: %d parents for %d tokens", ErrBadInput, len(parents), n)
	}
	if from < 0 || from >= n {
		return nil, fmt.Errorf("%w: walk from row %d of %d", ErrBadInput, from, n)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = -1
	}
	parent := func(i int) int {
		if parents == nil {
			return i - 1
		}
		return int(parents[i])
	}
	for cur := from; ; {
		tok, err := next(cur)
		if err != nil {
			return nil, err
		}
		out[cur] = tok
		child := -1
		// Children come after their parent; the first with the token wins,
		// as in the decoder's walk.
		for k := cur + 1; k < n; k++ {
			if parent(k) == cur && int(ids[k]) == tok {
				child = k
				break
			}
		}
		if child < 0 {
			return out, nil
		}
		cur = child
	}
}

// walkBatch is the most rows WalkHead computes in one product.
const walkBatch = 16

// WalkHead is Walk over the request's last forward, run with
// WantDeferred, computing the head for the rows the walk needs. A row's
// output is choose(row, its logits). Each time the walk reaches a row not
// yet computed, the row and its leading chain below it (each node's first
// child, which a best-first drafter makes its likeliest) go through the
// head together: on a memory-bound head, one read of the weights answers
// a walk that stays on the drafter's first choices, and a walk costs a
// read per branch it takes off them. Rows computed but not walked are
// not returned.
func (r *Request) WalkHead(ids, parents []int32, from int, choose func(row int, logits []float32) (int, error)) ([]int, error) {
	n := len(ids)
	if parents != nil && len(parents) != n {
		return nil, fmt.Errorf("%w: %d parents for %d tokens", ErrBadInput, len(parents), n)
	}
	first := make([]int, n) // first child of each row, or -1
	for i := range first {
		first[i] = -1
	}
	for k := n - 1; k > 0; k-- {
		p := k - 1
		if parents != nil {
			p = int(parents[k])
		}
		if p >= 0 && p < k {
			first[p] = k
		}
	}
	got := make(map[int]int)
	return Walk(ids, parents, from, func(row int) (int, error) {
		if tok, ok := got[row]; ok {
			return tok, nil
		}
		rows := []int{row}
		for c := first[row]; c >= 0 && len(rows) < walkBatch; c = first[c] {
			rows = append(rows, c)
		}
		logits, err := r.Logits(rows...)
		if err != nil {
			return 0, err
		}
		V := len(logits) / len(rows)
		for i, x := range rows {
			tok, err := choose(x, logits[i*V:(i+1)*V])
			if err != nil {
				return 0, err
			}
			got[x] = tok
		}
		return got[row], nil
	})
}
