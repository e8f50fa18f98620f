package tokenizer

// heap is a 4-ary heap of merge candidates whose first element is the one
// that goes before all others (shallower than a binary heap, and a node's
// children are adjacent in memory). Both tokenizer models use it.
type heap[T any, P interface {
	*T
	before(*T) bool
}] []T

func (h heap[T, P]) init() {
	if len(h) < 2 {
		return
	}
	for i := (len(h) - 2) / 4; i >= 0; i-- {
		h.down(i)
	}
}

func (h *heap[T, P]) push(p T) {
	*h = append(*h, p)
	q := *h
	// Sift up by swapping in place: comparing through pointers into the
	// slice keeps the candidates off the heap (a pointer to a local
	// would escape through the generic method call).
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 4
		if !P(&q[i]).before(&q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *heap[T, P]) pop() T {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	*h = q
	if last > 0 {
		q.down(0)
	}
	return top
}

// down sifts q[i] towards the leaves.
func (q heap[T, P]) down(i int) {
	for {
		c := 4*i + 1
		if c >= len(q) {
			return
		}
		best := c
		for j := c + 1; j < c+4 && j < len(q); j++ {
			if P(&q[j]).before(&q[best]) {
				best = j
			}
		}
		if !P(&q[best]).before(&q[i]) {
			return
		}
		q[i], q[best] = q[best], q[i]
		i = best
	}
}
