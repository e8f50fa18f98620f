package spec

import (
	"context"
	"slices"
)

// NGram is the prompt-lookup drafter: it needs no model. It looks for the
// most recent earlier occurrence of the sequence's last n tokens, trying
// n = MaxN first and down to MinN, and proposes the tokens that followed
// that occurrence. The copy may run into the tokens it proposes itself
// (as an LZ77 match does), so a sequence stuck in a loop is continued
// around the loop. It is deterministic and stateless.
//
// With a History it also looks the suffix up in earlier sequences: the
// longest match in either wins (MaxN defaults to 6 then), and when
// several occurrences match that long, the draft follows the majority of
// their continuations, token by token, the context's breaking ties.
type NGram struct {
	MaxN    int      // longest suffix tried (default 3; 6 with a History)
	MinN    int      // shortest suffix tried (default 1)
	Window  int      // look only at the last Window tokens of the context (0: all of them)
	History *History // earlier sequences to draft from too (nil: the context only)
}

// Draft implements Drafter. Its drafts are point masses.
func (g NGram) Draft(ctx context.Context, seq []int, k int) ([]int, [][]float64, error) {
	return g.Lookup(seq, k), nil, nil
}

// Lookup returns up to k tokens to follow seq: empty when no suffix of
// seq of at least MinN tokens occurred earlier in it.
func (g NGram) Lookup(seq []int, k int) []int {
	if g.History != nil {
		return g.lookupHistory(seq, k)
	}
	if c := g.Candidates(seq, k, 1); len(c) > 0 {
		return c[0]
	}
	return nil
}

// Candidates returns up to w distinct drafts of k tokens to follow seq,
// in the order Lookup prefers them: longer suffix matches first, more
// recent ones first. The first is Lookup's.
func (g NGram) Candidates(seq []int, k, w int) [][]int {
	maxN, minN := g.MaxN, g.MinN
	if maxN <= 0 {
		maxN = 3
	}
	if minN <= 0 {
		minN = 1
	}
	L := len(seq)
	if k <= 0 || w <= 0 || L < 2 {
		return nil
	}
	lo := 0
	if g.Window > 0 && L > g.Window {
		lo = L - g.Window
	}
	var out [][]int
	for n := min(maxN, L-1); n >= minN; n-- {
		pat := seq[L-n:]
		// The occurrence must end before the sequence does: j+n <= L-1.
		for j := L - n - 1; j >= lo; j-- {
			if !equal(seq[j:j+n], pat) {
				continue
			}
			d := make([]int, k)
			src := j + n
			for i := range d {
				if at := src + i; at < L {
					d[i] = seq[at]
				} else {
					d[i] = d[at-L] // at-L < i: already proposed
				}
			}
			if !slices.ContainsFunc(out, func(o []int) bool { return slices.Equal(o, d) }) {
				if out = append(out, d); len(out) == w {
					return out
				}
			}
		}
	}
	return out
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lookupHistory is Lookup with a History: the continuations of the
// longest suffix match in the context or the history, merged by vote.
func (g NGram) lookupHistory(seq []int, k int) []int {
	maxN, minN := g.MaxN, max(g.MinN, 1)
	if maxN <= 0 {
		maxN = 6
	}
	L := len(seq)
	if k <= 0 || L < 1 {
		return nil
	}
	lo := 0
	if g.Window > 0 && L > g.Window {
		lo = L - g.Window
	}
	// The longest suffix that occurred earlier in the context, and where.
	var ctxAt []int // positions right after the occurrences
	best := 0
	for n := min(maxN, L-1); n >= minN && len(ctxAt) == 0; n-- {
		pat := seq[L-n:]
		for j := L - n - 1; j >= lo; j-- {
			if equal(seq[j:j+n], pat) {
				ctxAt = append(ctxAt, j+n)
			}
		}
		if len(ctxAt) > 0 {
			best = n
		}
	}
	ctxN := best
	h := g.History
	h.mu.RLock()
	defer h.mu.RUnlock()
	type hit struct{ at, n int }
	var hist []hit
	h.matches(seq, maxN, func(at, n int) {
		if n >= max(best, minN) {
			hist = append(hist, hit{at, n})
			best = max(best, n)
		}
	})
	if best < minN {
		return nil
	}
	var conts [][]int32
	if len(ctxAt) > 0 && best == ctxN {
		for _, at := range ctxAt {
			c := make([]int32, k) // copied as Candidates does, into itself past the end
			for i := range c {
				if at+i < L {
					c[i] = int32(seq[at+i])
				} else {
					c[i] = c[at+i-L]
				}
			}
			conts = append(conts, c)
		}
	}
	for _, m := range hist {
		if m.n < best {
			continue
		}
		end := m.at
		for end < len(h.toks) && end-m.at < k && h.toks[end] != histSep {
			end++
		}
		conts = append(conts, h.toks[m.at:end])
	}
	return vote(conts, k)
}

// vote builds a draft token by token: at each depth, the token most of
// the continuations that agree with the draft so far have next (the
// first such to reach the highest count wins a tie).
func vote(conts [][]int32, k int) []int {
	var d []int
	alive := slices.Clone(conts)
	counts := map[int32]int{}
	for depth := 0; depth < k; depth++ {
		clear(counts)
		var pick int32
		top := 0
		for _, c := range alive {
			if len(c) > depth {
				counts[c[depth]]++
				if n := counts[c[depth]]; n > top {
					pick, top = c[depth], n
				}
			}
		}
		if top == 0 {
			break
		}
		d = append(d, int(pick))
		kept := alive[:0]
		for _, c := range alive {
			if len(c) > depth && c[depth] == pick {
				kept = append(kept, c)
			}
		}
		alive = kept
	}
	return d
}
