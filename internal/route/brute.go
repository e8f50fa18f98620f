package route

// BruteForce is Plan's reference: it enumerates every chain of usable
// servers through the model and returns one of least Cost, with Plan's
// tie-breaks. Its time is exponential in the number of servers; it is
// meant for tests with a dozen or so. It has no random mode: under Random
// it minimizes what MinLatency does.
func BruteForce(m Model, servers []Server, rtt RTT, opts Options) (Route, error) {
	if err := m.validate(); err != nil {
		return Route{}, err
	}
	if err := opts.Validate(); err != nil {
		return Route{}, err
	}
	if opts.Policy == Random {
		opts.Policy, opts.Rand = MinLatency, nil
	}
	o := opts.withDefaults()
	hs := usable(nil, m, servers, &o)
	end := m.Layers + m.Vocab

	var (
		best     []int32 // indices into servers
		bestCost float64
		chain    []int32
		furthest int
	)
	// extend tries every hop that continues the chain, whose Cost so far
	// is cost, from position at.
	var extend func(at int, prevID string, cost float64)
	extend = func(at int, prevID string, cost float64) {
		furthest = max(furthest, at)
		if at == end {
			c := cost + o.link(rtt, prevID, "")
			if best == nil || c < bestCost ||
				c == bestCost && (len(chain) < len(best) ||
					len(chain) == len(best) && compareChains(servers, chain, best) < 0) {
				best, bestCost = append(best[:0], chain...), c
			}
			return
		}
		for _, h := range hs {
			if int(h.sp) != at {
				continue
			}
			s := &servers[h.idx]
			chain = append(chain, h.idx)
			extend(int(h.ep), s.ID, cost+o.link(rtt, prevID, s.ID)+h.obj)
			chain = chain[:len(chain)-1]
		}
	}
	extend(0, "", 0)
	if best == nil {
		return Route{}, m.noRoute(furthest)
	}
	hops := make([]Server, len(best))
	for i, c := range best {
		hops[i] = servers[c]
	}
	return Evaluate(hops, rtt, opts), nil
}
