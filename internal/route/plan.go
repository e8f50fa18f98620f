package route

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// Plan chooses a route through the model over the usable servers: not
// Draining, not Banned, not in opts.Exclude, with an ID, and with a range
// inside the model that a chain can use. Under MinLatency and ThroughputAware the route is
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
	g := graphs.Get().(*graph)
	defer graphs.Put(g)
	g.build(m, servers, &o)
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
// its edges are the hops. A graph is scratch space for one call of Plan;
// graphs are pooled, so that planning over a large swarm does not
// allocate a graph's worth of memory every time.
type graph struct {
	m     Model
	hops  []hop
	rows  []int32   // head rows > 0 at which some hop starts or ends, and Vocab, sorted
	final int32     // the number of the end position, Layers+Vocab
	out   csr       // hops by start position
	in    csr       // hops by end position
	reach []bool    // position → some chain from 0 gets there
	tail  []float64 // position → a lower bound on the Cost from it to the end

	// shortest's state, by hop.
	cost              []float64 // the least Cost of a chain from the client through the hop
	prev              []int32   // the hop before it on that chain, -1 for the client
	depth             []int32   // the chain's length
	ret               []float64 // the hop's return link, if it ends at the end; -1 until known
	est               []float64 // descend's estimates, by position
	first             []float64 // the Cost of the hops starting at 0 (only those)
	preds, bufA, bufB []int32
}

var graphs = sync.Pool{New: func() any { return new(graph) }}

// resize returns s with length n, reusing its array if it can; the
// contents are undefined.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// csr lists, for each position number p, the hops list[off[p]:off[p+1]].
type csr struct{ off, list, next []int32 }

func (c *csr) at(p int32) []int32 { return c.list[c.off[p]:c.off[p+1]] }

// build groups the hops by their start positions, or by their end
// positions, keeping their order.
func (c *csr) build(n int32, hops []hop, byEnd bool) {
	c.off = resize(c.off, int(n)+1)
	clear(c.off)
	c.list = resize(c.list, len(hops))
	key := func(h *hop) int32 {
		if byEnd {
			return h.ei
		}
		return h.si
	}
	for i := range hops {
		c.off[key(&hops[i])+1]++
	}
	for p := range n {
		c.off[p+1] += c.off[p]
	}
	c.next = append(c.next[:0], c.off[:n]...)
	for i := range hops {
		k := key(&hops[i])
		c.list[c.next[k]] = int32(i)
		c.next[k]++
	}
}

// build makes g the graph of the servers usable under o.
func (g *graph) build(m Model, servers []Server, o *Options) {
	g.m = m
	g.hops = usable(g.hops[:0], m, servers, o)
	L := int32(m.Layers)
	g.rows = g.rows[:0]
	for i := range g.hops {
		h := &g.hops[i]
		if h.sp > L {
			g.rows = append(g.rows, h.sp-L)
		}
		if h.ep > L {
			g.rows = append(g.rows, h.ep-L)
		}
	}
	g.rows = append(g.rows, int32(m.Vocab))
	slices.Sort(g.rows)
	g.rows = slices.Compact(g.rows)
	n := L + 1 + int32(len(g.rows))
	g.final = n - 1
	for i := range g.hops {
		h := &g.hops[i]
		h.si, h.ei = g.number(h.sp), g.number(h.ep)
	}
	g.out.build(n, g.hops, false)
	g.in.build(n, g.hops, true)
}

// number returns the number of position p, which must be a node.
func (g *graph) number(p int32) int32 {
	L := int32(g.m.Layers)
	if p <= L {
		return p
	}
	i, _ := slices.BinarySearch(g.rows, p-L)
	return L + 1 + int32(i)
}

// position is the inverse of number.
func (g *graph) position(n int32) int {
	L := g.m.Layers
	if int(n) <= L {
		return int(n)
	}
	return L + int(g.rows[int(n)-L-1])
}

// connect marks the positions chains from 0 reach. It returns a
// *NoRouteError naming the furthest of them if none reaches the end.
func (g *graph) connect() error {
	n := g.final + 1
	g.reach = resize(g.reach, int(n))
	clear(g.reach)
	g.reach[0] = true
	furthest := int32(0)
	for p := range n {
		if !g.reach[p] {
			continue
		}
		furthest = p
		for _, h := range g.out.at(p) {
			g.reach[g.hops[h].ei] = true
		}
	}
	if !g.reach[g.final] {
		return g.m.noRoute(g.position(furthest))
	}
	g.lowerBounds()
	return nil
}

// lowerBounds fills g.tail: tail[p] is the least, over chains from
// position p to the end, of the hops' objective weights (links counted as
// 0), or +Inf if no chain from p reaches the end.
func (g *graph) lowerBounds() {
	g.tail = resize(g.tail, int(g.final)+1)
	g.tail[g.final] = 0
	for p := g.final - 1; p >= 0; p-- {
		best := math.Inf(1)
		for _, h := range g.out.at(p) {
			best = min(best, g.hops[h].obj+g.tail[g.hops[h].ei])
		}
		g.tail[p] = best
	}
}

// alive reports whether hop h lies on some chain from 0 to the end.
func (g *graph) alive(h int32) bool {
	return g.reach[g.hops[h].si] && !math.IsInf(g.tail[g.hops[h].ei], 1)
}

// shortest returns a chain of least Cost (with Plan's tie-breaks) as
// indices into servers. The graph must be connected.
//
// It is a dynamic program over hops in the order of their start
// positions: cost[h] is the least Cost of a chain from the client through
// h, and the link between two hops depends on both, so each hop looks at
// every hop ending where it starts. Bounds keep that from being quadratic
// in practice, and keep most links from being asked about at all:
//
//   - A greedy descent first finds some route: from each position it
//     takes the hop with the least link, weight and tail bound. Its Cost
//     is an upper bound on the optimum.
//   - A hop whose best conceivable chain (the cheapest hop into its
//     start, its own weight, the tail bound after it) costs more than
//     that route is never costed: no route through it can win.
//   - The hops ending where a hop starts are tried in order of cost,
//     stopping once cost alone is too much (links are never negative).
//
// Every bound is compared with some slack, so rounding never prunes a
// route that ties the optimum: the answer is the exact one.
func (g *graph) shortest(servers []Server, rtt RTT, o *Options) []int32 {
	nh := len(g.hops)
	g.ret = resize(g.ret, nh)
	for i := range g.ret {
		g.ret[i] = -1
	}
	ret := func(h int32) float64 {
		if g.ret[h] < 0 {
			g.ret[h] = o.link(rtt, servers[g.hops[h].idx].ID, "")
		}
		return g.ret[h]
	}
	// The first hops' costs, and the typical link they show.
	g.first = resize(g.first, nh)
	links := g.bufB[:0]
	for _, h := range g.out.at(0) {
		if g.alive(h) {
			g.first[h] = g.step(servers, rtt, o, -1, 0, h)
			links = append(links, int32(min(g.first[h]-g.hops[h].obj, math.MaxInt32)))
		}
	}
	slices.Sort(links)
	lambda := float64(links[len(links)/2])
	g.bufB = links
	upper := min(g.descend(servers, rtt, o, ret, lambda), g.descend(servers, rtt, o, ret, lambda/4))
	limit := upper*(1+1e-9) + 1e-9

	g.cost = resize(g.cost, nh)
	g.prev = resize(g.prev, nh)
	g.depth = resize(g.depth, nh)
	cost, prev, depth := g.cost, g.prev, g.depth
	for i := range cost {
		cost[i] = math.Inf(1)
	}
	for p := range g.final {
		if !g.reach[p] {
			continue
		}
		preds := g.preds[:0]
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
		g.preds = preds
		for _, h := range g.out.at(p) {
			if !g.alive(h) {
				continue
			}
			obj, atEnd := g.hops[h].obj, g.hops[h].ei == g.final
			if p == 0 {
				c := g.first[h]
				if atEnd && c+ret(h) > limit || !atEnd && c+g.tail[g.hops[h].ei] > limit {
					continue
				}
				cost[h], prev[h], depth[h] = c, -1, 1
				continue
			}
			after := g.tail[g.hops[h].ei]
			if cost[preds[0]]+obj+after > limit {
				continue
			}
			if atEnd {
				if after = ret(h); cost[preds[0]]+obj+after > limit {
					continue
				}
			}
			best, bestT := math.Inf(1), int32(-1)
			for _, t := range preds {
				lb := cost[t] + obj
				if lb > best || lb+after > limit {
					break
				}
				c := g.step(servers, rtt, o, t, cost[t], h)
				if bestT >= 0 && !g.better(servers, c, t, best, bestT) {
					continue
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
		c := cost[h] + ret(h)
		if bestH < 0 || g.better(servers, c, h, best, bestH) {
			best, bestH = c, h
		}
	}
	return g.chain(&g.bufA, bestH)
}

// better reports whether a chain ending with hop a and costing ca beats
// one ending with hop b and costing cb: less Cost, then fewer hops, then
// the earlier hops in (ID, range) order.
func (g *graph) better(servers []Server, ca float64, a int32, cb float64, b int32) bool {
	switch {
	case ca != cb:
		return ca < cb
	case g.depth[a] != g.depth[b]:
		return g.depth[a] < g.depth[b]
	}
	return compareChains(servers, g.chain(&g.bufA, a), g.chain(&g.bufB, b)) < 0
}

// descend returns the Cost of a route found greedily: from each
// position, the hop with the least link, weight and estimated cost of the
// rest. The estimate is tail with every hop after this one charged
// lambda for its link in. g.first must hold the first hops' costs.
func (g *graph) descend(servers []Server, rtt RTT, o *Options, ret func(int32) float64, lambda float64) float64 {
	// est[p]: the estimated cost from position p to the end.
	g.est = resize(g.est, int(g.final)+1)
	est := g.est
	est[g.final] = 0
	for p := g.final - 1; p >= 0; p-- {
		best := math.Inf(1)
		for _, h := range g.out.at(p) {
			best = min(best, lambda+g.hops[h].obj+est[g.hops[h].ei])
		}
		est[p] = best
	}
	c, t := 0.0, int32(-1)
	for p := int32(0); p != g.final; {
		best, bestH, bestC := math.Inf(1), int32(-1), 0.0
		for _, h := range g.out.at(p) {
			if !g.alive(h) {
				continue
			}
			var ch float64
			if p == 0 {
				ch = g.first[h]
			} else {
				ch = g.step(servers, rtt, o, t, c, h)
			}
			v := ch + est[g.hops[h].ei]
			if g.hops[h].ei == g.final {
				v = ch + ret(h)
			}
			if bestH < 0 || v < best {
				best, bestH, bestC = v, h, ch
			}
		}
		c, t, p = bestC, bestH, g.hops[bestH].ei
	}
	return c + ret(t)
}

// step is the Cost of a chain to hop t costing ct (or of nothing, for the
// client, if t < 0) extended by hop h, added up as Evaluate does.
func (g *graph) step(servers []Server, rtt RTT, o *Options, t int32, ct float64, h int32) float64 {
	from := ""
	if t >= 0 {
		from = servers[g.hops[t].idx].ID
	}
	return ct + o.link(rtt, from, servers[g.hops[h].idx].ID) + g.hops[h].obj
}

// chain writes the chain ending at hop h, as indices into servers, into
// *buf and returns it.
func (g *graph) chain(buf *[]int32, h int32) []int32 {
	b := (*buf)[:0]
	for ; h >= 0; h = g.prev[h] {
		b = append(b, g.hops[h].idx)
	}
	slices.Reverse(b)
	*buf = b
	return b
}

// walk returns a random chain: from position 0, a hop chosen uniformly
// among the hops starting there that lie on some complete chain, in
// (ID, range) order, until the end. The result is in g.bufA.
func (g *graph) walk(servers []Server, r *rand.Rand) []int32 {
	chain := g.bufA[:0]
	for p := int32(0); p != g.final; {
		choice := g.preds[:0]
		for _, h := range g.out.at(p) {
			if g.alive(h) {
				choice = append(choice, h)
			}
		}
		slices.SortFunc(choice, func(a, b int32) int { return lessServer(servers, g.hops[a].idx, g.hops[b].idx) })
		h := choice[r.IntN(len(choice))]
		chain = append(chain, g.hops[h].idx)
		p = g.hops[h].ei
		g.preds = choice
	}
	g.bufA = chain
	return chain
}
