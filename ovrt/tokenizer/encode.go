package tokenizer

import (
	"math"
	"unicode/utf8"
)

// Encode turns text into token ids, with the BOS id first when bos is true.
//
// For a SentencePiece tokenizer (Model "llama") it is SentencePiece's BPE
// with byte fallback, as Llama 2's tokenizer and llama2.c run it: a space
// is prepended to non-empty text (the dummy prefix); the text is split into
// UTF-8 characters (each byte of invalid UTF-8 is a character of its own);
// then, repeatedly, the adjacent pair whose concatenation is a Normal piece
// of highest score is merged, the leftmost pair winning ties, until no pair
// merges. A resulting symbol that is not a piece (a character outside the
// vocabulary) becomes the byte tokens of its UTF-8 bytes, or the unknown
// token for a byte without one.
//
// For a byte-level BPE tokenizer (Model "gpt2", Llama 3) the text is cut
// into pieces by Llama 3's pre-tokenizer (words with their leading space,
// numbers of up to three digits, punctuation runs, whitespace; see the
// package documentation). A piece that is a whole Normal token becomes
// that token; otherwise each of its bytes becomes its single-byte token,
// and, repeatedly, the adjacent pair with the best (lowest) merge rank is
// merged, the leftmost pair winning ties, until no merge rule applies. No
// dummy prefix is added. Invalid UTF-8 is encoded byte for byte.
//
// Either way, control text such as "<s>" or "<|eot_id|>" is encoded as
// plain text, never as a control token. Encode runs in O(n log n) time for
// n bytes; it panics if text is 2 GiB or longer.
func (t *Tokenizer) Encode(text string, bos bool) []int {
	var ids []int
	if t.bpe != nil {
		ids, _ = t.encodeBPE(text, bos)
	} else {
		ids, _ = t.encodeSP(text, bos)
	}
	return ids
}

// encodeSP is Encode for a SentencePiece tokenizer. steps counts heap
// operations, for tests of the running time.
func (t *Tokenizer) encodeSP(text string, bos bool) (ids []int, steps int) {
	ids = make([]int, 0, 2+len(text)/3)
	if bos {
		ids = append(ids, t.bos)
	}
	if text == "" {
		return ids, 0
	}
	s := " " + text
	if len(s) > math.MaxInt32 {
		// Symbol offsets are int32 to halve the working set; text this
		// long (2 GiB) is far beyond any model's context anyway.
		panic("tokenizer: Encode: text longer than 2 GiB")
	}
	n := utf8.RuneCountInString(s) // counts each invalid byte as one

	// Symbols form a doubly linked list over s; symbol i starts at start[i]
	// and is size[i] bytes long (0 once merged into its left neighbour).
	// Indices follow text order, so a smaller left index is further left.
	sym := make([]symbol, n)
	i := int32(0)
	for off := 0; off < len(s); i++ {
		_, w := utf8.DecodeRuneInString(s[off:])
		sym[i] = symbol{start: int32(off), size: int32(w), prev: i - 1, next: i + 1}
		off += w
	}
	sym[n-1].next = -1

	candidate := func(l, r int32) (pair, bool) {
		size := sym[l].size + sym[r].size
		if int(size) > t.maxLen {
			return pair{}, false
		}
		start := sym[l].start
		id, ok := t.merge[s[start:start+size]]
		return pair{score: t.scores[id], left: l, right: r, size: size}, ok
	}
	text1 := func(i int32) string { return s[sym[i].start : sym[i].start+sym[i].size] }

	// Merging is independent on either side of a boundary that no piece
	// spans (one between two characters never adjacent in any piece, such
	// as most word ends), so each segment between such boundaries is merged
	// on its own, with a small heap that stays in cache.
	h := pairHeap(make([]pair, 0, 64))
	for a := int32(0); a < int32(n); {
		b := a
		for b+1 < int32(n) && t.adjacent(text1(b), text1(b+1)) {
			b++
		}
		h = h[:0]
		for i := a; i < b; i++ {
			if p, ok := candidate(i, i+1); ok {
				h = append(h, p)
			}
		}
		h.init()
		steps += len(h)
		for len(h) > 0 {
			p := h.pop()
			steps++
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
			// Neither new pair can cross the segment's ends: it would
			// be a piece spanning them.
			if l.prev >= 0 {
				if q, ok := candidate(l.prev, p.left); ok {
					h.push(q)
					steps++
				}
			}
			if l.next >= 0 {
				if q, ok := candidate(p.left, l.next); ok {
					h.push(q)
					steps++
				}
			}
		}
		a = b + 1
	}

	for i := int32(0); i >= 0; i = sym[i].next {
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
	return ids, steps
}

// adjacent reports whether characters a and b (each one UTF-8 character,
// or one byte of invalid UTF-8) occur next to each other in some piece.
func (t *Tokenizer) adjacent(a, b string) bool {
	_, ok := t.adj[charKey(a)<<32|charKey(b)]
	return ok
}

// charKey packs a character's (at most 4) bytes into 32 bits. UTF-8 is
// self-delimiting, so distinct characters and lone invalid bytes get
// distinct keys.
func charKey(c string) uint64 {
	var k uint64
	for j := range 4 {
		k <<= 8
		if j < len(c) {
			k |= uint64(c[j])
		}
	}
	return k
}

// indexAdjacent records every pair of adjacent characters in the merge
// pieces, for adjacent.
func (t *Tokenizer) indexAdjacent() {
	t.adj = make(map[uint64]struct{})
	for p := range t.merge {
		prev := ""
		for len(p) > 0 {
			_, w := utf8.DecodeRuneInString(p)
			if prev != "" {
				t.adj[charKey(prev)<<32|charKey(p[:w])] = struct{}{}
			}
			prev, p = p[:w], p[w:]
		}
	}
}

type symbol struct {
	start, size int32
	prev, next  int32 // -1 at the ends
}

// pair is a queued merge candidate: symbols left and right, whose
// concatenation (size bytes) is a piece with this score. 16 bytes, so a
// node's four children share a cache line.
type pair struct {
	score       float32
	left, right int32
	size        int32
}

// before orders the heap: higher score first, then leftmost.
func (a *pair) before(b *pair) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// pairHeap holds SentencePiece merge candidates, best first.
type pairHeap = heap[pair, *pair]
