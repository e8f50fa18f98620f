package spec

import (
	"container/heap"
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

// DraftTree implements TreeDrafter, best first: it estimates the next
// token's distribution after the sequence, puts the likeliest candidates
// in a queue by path probability, and repeatedly takes the likeliest
// candidate as a node and queues its own continuations, estimated after
// the sequence and the node's path, until the budget is spent. The
// distribution after a context counts every earlier occurrence of its
// suffixes of MinN to MaxN tokens (the newest treeScan in the History),
// an occurrence of n tokens weighing 2^n, twice that in the context
// itself: the text at hand predicts itself better than other text. Each
// node's estimate so conditions on its whole path, which a trie of the
// root's matches would not (a path soon outruns the few matches that
// share it).
func (g NGram) DraftTree(seq []int, depth, budget int) Tree {
	maxN, minN := g.MaxN, max(g.MinN, 1)
	if maxN <= 0 {
		maxN = 3
		if g.History != nil {
			maxN = 6
		}
	}
	if depth <= 0 || budget <= 0 || len(seq) < 1 {
		return Tree{}
	}
	if g.History != nil {
		g.History.mu.RLock()
		defer g.History.mu.RUnlock()
	}
	type node struct{ tok, parent, depth int }
	var nodes []node
	dist := map[int]float64{}
	ctx := slices.Clone(seq)
	q := &candQueue{}
	expand := func(parent int, p float64) {
		ctx = ctx[:len(seq)]
		at := len(ctx)
		for a := parent; a >= 0; a = nodes[a].parent {
			ctx = append(ctx, nodes[a].tok)
		}
		slices.Reverse(ctx[at:])
		total := g.nextCounts(ctx, maxN, minN, dist)
		for t, w := range dist {
			heap.Push(q, cand{p * w / total, parent, t})
		}
	}
	expand(-1, 1)
	for len(nodes) < budget && q.Len() > 0 {
		c := heap.Pop(q).(cand)
		d := 1
		if c.parent >= 0 {
			d = nodes[c.parent].depth + 1
		}
		nodes = append(nodes, node{c.tok, c.parent, d})
		if d < depth {
			expand(len(nodes)-1, c.p)
		}
	}
	// Depth first, the likelier sibling first: siblings were taken in
	// the order of their probability.
	kids := make([][]int, len(nodes)+1)
	for i, n := range nodes {
		kids[n.parent+1] = append(kids[n.parent+1], i)
	}
	var out Tree
	var visit func(n, at int)
	visit = func(n, at int) {
		for _, k := range kids[n+1] {
			out.Tokens = append(out.Tokens, nodes[k].tok)
			out.Parent = append(out.Parent, at)
			visit(k, len(out.Tokens)-1)
		}
	}
	visit(-1, -1)
	return out
}

// treeScan bounds the History occurrences one estimate counts: the
// newest ones (a tree makes up to a budget of estimates per traversal).
const treeScan = 256

// nextCounts sets into to the weighted counts of the tokens that followed
// earlier occurrences of ctx's suffixes, and returns their sum (0: none).
// Called with the History (if any) locked for reading.
func (g NGram) nextCounts(ctx []int, maxN, minN int, into map[int]float64) float64 {
	clear(into)
	L := len(ctx)
	total := 0.0
	lo := 0
	if g.Window > 0 && L > g.Window {
		lo = L - g.Window
	}
	for n := min(maxN, L-1); n >= minN; n-- {
		pat := ctx[L-n:]
		for j := L - n - 1; j >= lo; j-- {
			if equal(ctx[j:j+n], pat) {
				w := float64(uint64(2) << n)
				into[ctx[j+n]] += w
				total += w
			}
		}
	}
	if h := g.History; h != nil {
		seen := 0
		h.matches(ctx, maxN, func(at, n int) {
			if n < minN || seen >= treeScan || at >= len(h.toks) || h.toks[at] == histSep {
				return
			}
			seen++
			w := float64(uint64(1) << n)
			into[int(h.toks[at])] += w
			total += w
		})
	}
	return total
}

// cand is a queued candidate node: its path's estimated probability.
type cand struct {
	p      float64
	parent int // a node's index, or -1: the sequence's last token
	tok    int
}

// candQueue is a max-heap of candidates by probability (container/heap).
type candQueue []cand

func (q candQueue) Len() int { return len(q) }
func (q candQueue) Less(i, j int) bool {
	if q[i].p != q[j].p {
		return q[i].p > q[j].p
	}
	if q[i].tok != q[j].tok {
		return q[i].tok < q[j].tok // deterministic whatever the map's order
	}
	return q[i].parent < q[j].parent
}
func (q candQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *candQueue) Push(x any)   { *q = append(*q, x.(cand)) }
func (q *candQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// DefaultMaxTree bounds the nodes of a draft tree chosen automatically.
const DefaultMaxTree = 128

// treeShare is the share of a traversal's fixed time that verifying a
// tree's nodes may add: a node's chance of being on the accepted path
// falls fast with its rank, so past this share more nodes slow a
// traversal more than they lengthen it. Measured on stories15M at 100 ms
// a link (docs/benchmarks.md, stop 15), trees of 31 and 91 nodes carried
// 2.13 and 2.37 tokens a traversal and ran 2.08x and 2.12x naive, while
// the 100 to 110 nodes of a 1/8 share ran 1.9x: the curve is flat well
// before 1/8.
const treeShare = 16

// TreeBudget returns how many draft nodes a traversal should verify: as
// many as cost at most 1/16 of the traversal's fixed time (its round trips,
// on a WAN), and never fewer than k (the chain the tuner would draft), nor
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
