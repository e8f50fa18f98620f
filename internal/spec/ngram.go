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
type NGram struct {
	MaxN   int // longest suffix tried (default 3)
	MinN   int // shortest suffix tried (default 1)
	Window int // look only at the last Window tokens (0: all of them)
}

// Draft implements Drafter. Its drafts are point masses.
func (g NGram) Draft(ctx context.Context, seq []int, k int) ([]int, [][]float64, error) {
	return g.Lookup(seq, k), nil, nil
}

// Lookup returns up to k tokens to follow seq: empty when no suffix of
// seq of at least MinN tokens occurred earlier in it.
func (g NGram) Lookup(seq []int, k int) []int {
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
