package route

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// Plan chooses a route through the model over the usable servers: not
// Draining, not Banned, not in opts.Exclude, with a range inside the model
// that a chain can use. Under MinLatency and ThroughputAware the route is
// one of least Cost, exactly; among equals, the one with fewer hops, then
// the one whose hops come first in (ID, range) order, hop by hop. Under
// Random it is a random walk (see Policy). The result depends on servers'
// contents, not their order, except between two entries with the same ID
// and range.
//
// It returns a *NoRouteError (errors.Is ErrNoRoute) when no chain covers
// the model, ErrBadModel or ErrBadOptions for bad arguments.
func Plan(m Model, servers []Server, rtt RTT, opts Options) (Route, error) {
	if err := m.validate(); err != nil {
		return Route{}, err
	}
	if err := opts.Validate(); err != nil {
		return Route{}, err
	}
	o := opts.withDefaults()
	g := newGraph(m, usable(m, servers, &o))
	if err := g.connect(); err != nil {
		return Route{}, err
	}
	var chain []int32
	if o.Policy == Random {
		chain = g.walk(servers, o.Rand)
	} else {
		chain = g.shortest(servers, rtt, &o)
	}
	hops := make([]Server, len(chain))
	for i, c := range chain {
		hops[i] = servers[c]
	}
	return Evaluate(hops, rtt, opts), nil
}

// Replan is Plan without the peer that failed: what a client calls when
// a hop of its route stops answering, to route around it. opts.Exclude is
// not modified.
func Replan(m Model, servers []Server, rtt RTT, opts Options, failed string) (Route, error) {
	ex := make(map[string]bool, len(opts.Exclude)+1)
	for id, v := range opts.Exclude {
		ex[id] = v
	}
	ex[failed] = true
	opts.Exclude = ex
	return Plan(m, servers, rtt, opts)
}

// graph is the DAG routes live on. Its nodes are the positions hops start
// and end at, numbered in order along the model (the layer positions
// 0..Layers are numbered as themselves, the head positions after them);
// its edges are the hops.
type graph struct {
	m     Model
	hops  []hop
	rows  []int     // head rows > 0 at which some hop starts or ends, and Vocab, sorted
	final int32     // the number of Layers+Vocab
	out   csr       // hops by start position
	in    csr       // hops by end position
	si    []int32   // hop → its start position's number
	ei    []int32   // hop → its end position's number
	reach []bool    // position → some chain from 0 gets there
	tail  []float64 // position → a lower bound on the Cost from it to the client
}

// csr lists, for each position number p, the hops list[off[p]:off[p+1]].
type csr struct{ off, list []int32 }

func (c *csr) at(p int32) []int32 { return c.list[c.off[p]:c.off[p+1]] }

func newGraph(m Model, hops []hop) *graph {
	g := &graph{m: m, hops: hops}
	L := m.Layers
	for _, h := range hops {
		if h.sp > L {
			g.rows = append(g.rows, h.sp-L)
		}
		if h.ep > L {
			g.rows = append(g.rows, h.ep-L)
		}
	}
	g.rows = append(g.rows, m.Vocab)
	slices.Sort(g.rows)
	g.rows = slices.Compact(g.rows)
	n := int32(L + 1 + len(g.rows))
	g.final = n - 1
	g.si = make([]int32, len(hops))
	g.ei = make([]int32, len(hops))
	for i, h := range hops {
		g.si[i], g.ei[i] = g.number(h.sp), g.number(h.ep)
	}
	g.out = newCSR(n, g.si)
	g.in = newCSR(n, g.ei)
	return g
}

// number returns the number of position p, which must be a node.
func (g *graph) number(p int) int32 {
	L := g.m.Layers
	if p <= L {
		return int32(p)
	}
	i, _ := slices.BinarySearch(g.rows, p-L)
	return int32(L + 1 + i)
}

// position is the inverse of number.
func (g *graph) position(n int32) int {
	L := g.m.Layers
	if int(n) <= L {
		return int(n)
	}
	return L + g.rows[int(n)-L-1]
}

// newCSR groups hop indices 0..len(key)-1 by key, keeping index order.
func newCSR(n int32, key []int32) csr {
	c := csr{off: make([]int32, n+1), list: make([]int32, len(key))}
	for _, k := range key {
		c.off[k+1]++
	}
	for p := range n {
		c.off[p+1] += c.off[p]
	}
	next := slices.Clone(c.off[:n])
	for i, k := range key {
		c.list[next[k]] = int32(i)
		next[k]++
	}
	return c
}

// connect marks the positions chains from 0 reach. It returns a
// *NoRouteError naming the furthest of them if none reaches the end.
func (g *graph) connect() error {
	n := g.final + 1
	g.reach = make([]bool, n)
	g.reach[0] = true
	furthest := int32(0)
	for p := range n {
		if !g.reach[p] {
			continue
		}
		furthest = p
		for _, h := range g.out.at(p) {
			g.reach[g.ei[h]] = true
		}
	}
	if !g.reach[g.final] {
		return g.m.noRoute(g.position(furthest))
	}
	return nil
}

// alive reports whether hop h lies on some chain from 0 to the end.
func (g *graph) alive(h int32) bool {
	return g.reach[g.si[h]] && (g.ei[h] == g.final || !math.IsInf(g.tail[g.ei[h]], 1))
}

// lowerBounds fills g.tail: tail[p] is the least, over chains from
// position p to the end, of the hops' objective weights plus the last
// hop's return link (links between hops counted as 0), or +Inf if no chain
// from p reaches the end. ret[h] is hop h's return link if it ends at the
// end.
func (g *graph) lowerBounds(ret []float64) {
	g.tail = make([]float64, g.final+1)
	for p := g.final; p >= 0; p-- {
		best := math.Inf(1)
		if p == g.final {
			best = 0
		}
		for _, h := range g.out.at(p) {
			var t float64
			if g.ei[h] == g.final {
				t = g.hops[h].obj + ret[h]
			} else {
				t = g.hops[h].obj + g.tail[g.ei[h]]
			}
			best = min(best, t)
		}
		g.tail[p] = best
	}
}

// shortest returns a chain of least Cost (with Plan's tie-breaks) as
// indices into servers. The graph must be connected.
//
// It is a dynamic program over hops in the order of their start
// positions: cost[h] is the least Cost of a chain from the client through
// h, and the link between two hops depends on both, so each hop looks at
// every hop ending where it starts. Two bounds keep that from being
// quadratic in practice: the hops ending at p are scanned in order of
// cost, stopping once cost alone (links are never negative) is too much;
// and a hop whose best conceivable chain (the cheapest hop into p, its own
// weight, the tail bound after it) is worse than a known route's Cost is
// never costed at all. The known route comes from a first, greedy pass
// that links each hop to the cheapest hop before it.
func (g *graph) shortest(servers []Server, rtt RTT, o *Options) []int32 {
	nh := len(g.hops)
	ret := make([]float64, nh)
	for _, h := range g.in.at(g.final) {
		ret[h] = o.link(rtt, servers[g.hops[h].idx].ID, "")
	}
	g.lowerBounds(ret)

	// The greedy pass: an upper bound on the optimum.
	cost := make([]float64, nh)
	for i := range cost {
		cost[i] = math.Inf(1)
	}
	upper := math.Inf(1)
	for p := range g.final {
		if !g.reach[p] {
			continue
		}
		pred := int32(-1)
		if p > 0 {
			for _, t := range g.in.at(p) {
				if !math.IsInf(cost[t], 1) && (pred < 0 || cost[t] < cost[pred]) {
					pred = t
				}
			}
			if pred < 0 {
				continue
			}
		}
		for _, h := range g.out.at(p) {
			if !g.alive(h) {
				continue
			}
			cost[h] = g.step(servers, rtt, o, pred, cost, h)
			if g.ei[h] == g.final {
				upper = min(upper, cost[h]+ret[h])
			}
		}
	}
	// Bounds are sums in other orders than a route's Cost; the slack
	// keeps rounding from pruning a route that ties the optimum.
	limit := upper*(1+1e-9) + 1e-9

	// The exact pass.
	prev := make([]int32, nh)
	depth := make([]int32, nh)
	for i := range cost {
		cost[i] = math.Inf(1)
	}
	var preds []int32
	var bufA, bufB []int32
	for p := range g.final {
		if !g.reach[p] {
			continue
		}
		preds = preds[:0]
		if p > 0 {
			for _, t := range g.in.at(p) {
				if cost[t] <= limit {
					preds = append(preds, t)
				}
			}
			if len(preds) == 0 {
				continue
			}
			slices.SortFunc(preds, func(a, b int32) int { return cmp.Compare(cost[a], cost[b]) })
		}
		for _, h := range g.out.at(p) {
			if !g.alive(h) {
				continue
			}
			obj := g.hops[h].obj
			after := g.tail[g.ei[h]]
			if g.ei[h] == g.final {
				after = ret[h]
			}
			if p == 0 {
				cost[h], prev[h], depth[h] = g.step(servers, rtt, o, -1, cost, h), -1, 1
				continue
			}
			if cost[preds[0]]+obj+after > limit {
				continue
			}
			best, bestT := math.Inf(1), int32(-1)
			for _, t := range preds {
				lb := cost[t] + obj
				if lb > best || lb+after > limit {
					break
				}
				c := g.step(servers, rtt, o, t, cost, h)
				switch {
				case bestT < 0 || c < best:
				case c > best:
					continue
				case depth[t] != depth[bestT]:
					if depth[t] > depth[bestT] {
						continue
					}
				default:
					bufA = g.chain(bufA, prev, t)
					bufB = g.chain(bufB, prev, bestT)
					if compareChains(servers, bufA, bufB) >= 0 {
						continue
					}
				}
				best, bestT = c, t
			}
			if bestT >= 0 {
				cost[h], prev[h], depth[h] = best, bestT, depth[bestT]+1
			}
		}
	}

	best, bestH := math.Inf(1), int32(-1)
	for _, h := range g.in.at(g.final) {
		if math.IsInf(cost[h], 1) {
			continue
		}
		c := cost[h] + ret[h]
		switch {
		case bestH < 0 || c < best:
		case c > best:
			continue
		case depth[h] != depth[bestH]:
			if depth[h] > depth[bestH] {
				continue
			}
		default:
			bufA = g.chain(bufA, prev, h)
			bufB = g.chain(bufB, prev, bestH)
			if compareChains(servers, bufA, bufB) >= 0 {
				continue
			}
		}
		best, bestH = c, h
	}
	return slices.Clone(g.chain(nil, prev, bestH))
}

// step is the Cost of the chain to hop t (the client if t < 0) extended
// by hop h, added up as Evaluate does.
func (g *graph) step(servers []Server, rtt RTT, o *Options, t int32, cost []float64, h int32) float64 {
	if t < 0 {
		return 0 + o.link(rtt, "", servers[g.hops[h].idx].ID) + g.hops[h].obj
	}
	return cost[t] + o.link(rtt, servers[g.hops[t].idx].ID, servers[g.hops[h].idx].ID) + g.hops[h].obj
}

// chain writes the chain ending at hop h, as indices into servers, into
// buf.
func (g *graph) chain(buf []int32, prev []int32, h int32) []int32 {
	buf = buf[:0]
	for ; h >= 0; h = prev[h] {
		buf = append(buf, g.hops[h].idx)
	}
	slices.Reverse(buf)
	return buf
}

// walk returns a random chain: from position 0, a hop chosen uniformly
// among the hops starting there that lie on some complete chain, in
// (ID, range) order, until the end.
func (g *graph) walk(servers []Server, r *rand.Rand) []int32 {
	// Only which positions can finish matters here, not the bounds.
	ret := make([]float64, len(g.hops))
	g.lowerBounds(ret)
	var chain, choice []int32
	for p := int32(0); p != g.final; {
		choice = choice[:0]
		for _, h := range g.out.at(p) {
			if g.alive(h) {
				choice = append(choice, h)
			}
		}
		slices.SortFunc(choice, func(a, b int32) int { return lessServer(servers, g.hops[a].idx, g.hops[b].idx) })
		h := choice[r.IntN(len(choice))]
		chain = append(chain, g.hops[h].idx)
		p = g.ei[h]
	}
	return chain
}
