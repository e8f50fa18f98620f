package spec

import (
	"cmp"
	"slices"
)

// Tree is a tree of drafted tokens to follow a sequence: node i holds
// Tokens[i] and follows node Parent[i], or the sequence's last token
// when Parent[i] is -1. Parents come before their children, and the
// nodes are in depth-first order with the likelier child first, so the
// likeliest path is nodes 0, 1, 2, ...
type Tree struct {
	Tokens []int
	Parent []int
}

// Len returns the number of nodes.
func (t Tree) Len() int { return len(t.Tokens) }

// Chain reports whether the tree is one path: nodes 0, 1, 2, ...
func (t Tree) Chain() bool {
	for i, p := range t.Parent {
		if p != i-1 {
			return false
		}
	}
	return true
}

// TreeDrafter drafts a tree of candidate continuations, so that one
// traversal verifies several guesses at once (as in SpecInfer, Miao et
// al. 2024): the target accepts the longest root-to-node path that
// agrees with its own choices.
type TreeDrafter interface {
	// DraftTree returns at most budget nodes, none deeper than depth.
	DraftTree(seq []int, depth, budget int) Tree
}

// DraftTree implements TreeDrafter. It gathers the continuations of every
// earlier occurrence of the sequence's suffix, for suffixes of MinN to
// MaxN tokens, in the context and in the History, and merges them into a
// trie. An occurrence weighs 2^n for a suffix of n tokens (twice that in
// the context: the text at hand predicts itself better than other text),
// and a node weighs the sum over the continuations through it, an
// estimate of how likely its path is. The tree is the budget heaviest
// nodes, which is a tree because a node never weighs more than its
// parent.
func (g NGram) DraftTree(seq []int, depth, budget int) Tree {
	maxN, minN := g.MaxN, max(g.MinN, 1)
	if maxN <= 0 {
		maxN = 3
		if g.History != nil {
			maxN = 6
		}
	}
	L := len(seq)
	if depth <= 0 || budget <= 0 || L < 1 {
		return Tree{}
	}
	tr := newTrie()
	lo := 0
	if g.Window > 0 && L > g.Window {
		lo = L - g.Window
	}
	c := make([]int32, depth)
	for n := min(maxN, L-1); n >= minN; n-- {
		pat := seq[L-n:]
		for j := L - n - 1; j >= lo; j-- {
			if !equal(seq[j:j+n], pat) {
				continue
			}
			at := j + n
			for i := range c {
				if at+i < L {
					c[i] = int32(seq[at+i])
				} else {
					c[i] = c[at+i-L] // copied into itself, as Candidates does
				}
			}
			tr.add(c, float64(uint64(2)<<n))
		}
	}
	if h := g.History; h != nil {
		h.mu.RLock()
		h.matches(seq, maxN, func(at, n int) {
			if n < minN {
				return
			}
			end := at
			for end < len(h.toks) && end-at < depth && h.toks[end] != histSep {
				end++
			}
			tr.add(h.toks[at:end], float64(uint64(1)<<n))
		})
		h.mu.RUnlock()
	}
	return tr.top(budget)
}

// trie merges continuations; node 0 is the root.
type trie struct {
	tok    []int32
	parent []int
	w      []float64
	kids   []map[int32]int
}

func newTrie() *trie {
	return &trie{tok: []int32{-1}, parent: []int{-1}, w: []float64{0}, kids: []map[int32]int{nil}}
}

func (t *trie) add(cont []int32, w float64) {
	cur := 0
	for _, x := range cont {
		nx, ok := t.kids[cur][x]
		if !ok {
			nx = len(t.tok)
			t.tok = append(t.tok, x)
			t.parent = append(t.parent, cur)
			t.w = append(t.w, 0)
			t.kids = append(t.kids, nil)
			if t.kids[cur] == nil {
				t.kids[cur] = map[int32]int{}
			}
			t.kids[cur][x] = nx
		}
		t.w[nx] += w
		cur = nx
	}
}

// top returns the budget heaviest nodes (ties: the earlier made) in
// depth-first order, heavier children first.
func (t *trie) top(budget int) Tree {
	idx := make([]int, 0, len(t.tok)-1)
	for i := 1; i < len(t.tok); i++ {
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(t.w[b], t.w[a]) })
	keep := make(map[int]bool, budget)
	for _, i := range idx[:min(budget, len(idx))] {
		keep[i] = true
	}
	var out Tree
	var visit func(n, parent int)
	visit = func(n, parent int) {
		var kids []int
		for _, k := range t.kids[n] {
			if keep[k] {
				kids = append(kids, k)
			}
		}
		slices.SortFunc(kids, func(a, b int) int {
			if c := cmp.Compare(t.w[b], t.w[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, k := range kids {
			out.Tokens = append(out.Tokens, int(t.tok[k]))
			out.Parent = append(out.Parent, parent)
			visit(k, len(out.Tokens)-1)
		}
	}
	visit(0, -1)
	return out
}

// DefaultMaxTree bounds the nodes of a draft tree chosen automatically.
const DefaultMaxTree = 128

// treeShare is the share of a traversal's fixed time that verifying a
// tree's nodes may add: a node's chance of being on the accepted path
// falls fast with its rank, so past this share more nodes slow a
// traversal more than they lengthen it.
const treeShare = 8

// TreeBudget returns how many draft nodes a traversal should verify: as
// many as cost at most 1/8 of the traversal's fixed time (its round trips,
// on a WAN), and never fewer than the chain k the tuner would draft, nor
// more than maxTree (0: DefaultMaxTree).
func TreeBudget(c Costs, k, maxTree int) int {
	if maxTree <= 0 {
		maxTree = DefaultMaxTree
	}
	b := k
	if per := c.PerToken + c.Draft; per > 0 {
		b = max(b, int(c.Fixed/(treeShare*per)))
	}
	return max(1, min(b, maxTree))
}
