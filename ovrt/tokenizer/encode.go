package tokenizer

import "unicode/utf8"

// Encode turns text into token ids, with the BOS id first when bos is true.
//
// It is SentencePiece's BPE with byte fallback, as Llama 2's tokenizer and
// llama2.c run it: a space is prepended to non-empty text (the dummy
// prefix); the text is split into UTF-8 characters (each byte of invalid
// UTF-8 is a character of its own); then, repeatedly, the adjacent pair
// whose concatenation is a Normal piece of highest score is merged, the
// leftmost pair winning ties, until no pair merges. A resulting symbol that
// is not a piece (a character outside the vocabulary) becomes the byte
// tokens of its UTF-8 bytes, or the unknown token for a byte without one.
//
// Control text such as "<s>" is encoded as plain text, never as a control
// token. Encode runs in O(n log n) time for n characters.
func (t *Tokenizer) Encode(text string, bos bool) []int {
	ids := make([]int, 0, 2+len(text)/3)
	if bos {
		ids = append(ids, t.bos)
	}
	if text == "" {
		return ids
	}
	s := " " + text
	n := utf8.RuneCountInString(s) // counts each invalid byte as one

	// Symbols form a doubly linked list over s; symbol i starts at start[i]
	// and is size[i] bytes long (0 once merged into its left neighbour).
	// Indices follow text order, so a smaller left index is further left.
	sym := make([]symbol, n)
	i := 0
	for off := 0; off < len(s); i++ {
		_, w := utf8.DecodeRuneInString(s[off:])
		sym[i] = symbol{start: off, size: w, prev: i - 1, next: i + 1}
		off += w
	}
	sym[n-1].next = -1

	h := pairHeap(make([]pair, 0, n))
	push := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		size := sym[l].size + sym[r].size
		if size > t.maxLen {
			return
		}
		start := sym[l].start
		if id, ok := t.merge[s[start:start+size]]; ok {
			h.push(pair{score: t.scores[id], left: l, right: r, size: size})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(i, i+1)
	}
	for len(h) > 0 {
		p := h.pop()
		l, r := &sym[p.left], &sym[p.right]
		if l.size == 0 || r.size == 0 || l.next != p.right || l.size+r.size != p.size {
			continue // stale: one side has merged since this pair was queued
		}
		l.size = p.size
		r.size = 0
		l.next = r.next
		if r.next >= 0 {
			sym[r.next].prev = p.left
		}
		push(l.prev, p.left)
		push(p.left, l.next)
	}

	for i := 0; i >= 0; i = sym[i].next {
		piece := s[sym[i].start : sym[i].start+sym[i].size]
		if id, ok := t.merge[piece]; ok {
			ids = append(ids, int(id))
			continue
		}
		for j := 0; j < len(piece); j++ {
			if id := t.byteID[piece[j]]; id >= 0 {
				ids = append(ids, int(id))
			} else {
				ids = append(ids, t.unk)
			}
		}
	}
	return ids
}

type symbol struct {
	start, size int
	prev, next  int // -1 at the ends
}

// pair is a queued merge candidate: symbols left and right, whose
// concatenation (size bytes) is a piece with this score.
type pair struct {
	score       float32
	left, right int
	size        int
}

// before orders the heap: higher score first, then leftmost.
func (a pair) before(b pair) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// pairHeap is a binary max-heap of pairs.
type pairHeap []pair

func (h *pairHeap) push(p pair) {
	*h = append(*h, p)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q[i].before(q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *pairHeap) pop() pair {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		best, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q[l].before(q[best]) {
			best = l
		}
		if r < len(q) && q[r].before(q[best]) {
			best = r
		}
		if best == i {
			break
		}
		q[i], q[best] = q[best], q[i]
		i = best
	}
	*h = q
	return top
}
