// Package route is pipeshard's routing core: given what a client knows
// about the swarm (which peers serve which part of a model, how fast and
// how loaded they are, and the round-trip times between them), it decides
// which chain of servers a session should use, and which part of the model
// a joining node should serve.
//
// Like etcd's raft, the package does no I/O, starts no goroutines and
// reads no clock: every input is an argument and every decision a return
// value. The node, the client and the simulator (10,000 simulated nodes)
// call the same functions and, given the same inputs (and, for the Random
// policy, the same *rand.Rand), get the same answers. The functions keep
// no state between calls (Plan pools its scratch space), never modify
// their arguments, and are safe for concurrent use; a *rand.Rand in
// Options is not, so concurrent callers each need their own.
//
// # The model's axis
//
// A model of [Model.Layers] blocks and a [Model.Vocab]-row output head is
// cut into ranges ([Range], the same fields as shards.Stage): layers
// [Start, End) plus head rows [HeadLo, HeadHi), where 0, 0 means the whole
// head on a range that ends at the last layer and none on any other. A
// swarm may serve several cuts of one model at once, so servers' ranges
// overlap arbitrarily.
//
// A route is a chain of servers that computes the model once, in order:
// the first hop starts at layer 0, each next hop starts exactly where the
// previous one ended (a layer, or once every layer is done, a head row),
// and the last ends at the last head row. Every hop computes its whole
// range, so a server whose range starts in the middle of what is already
// computed cannot be used. A range that ends at the last layer and then
// holds head rows [HeadLo, HeadHi) with HeadLo > 0 can never be used, since
// nothing may compute rows [0, HeadLo) after it; neither can a head-only
// range starting at row 0, since every range with the last layer holds
// some rows. [Check] tells whether given hops chain.
//
// # The latency model
//
// A token's trip is a daisy chain: the client sends to the first hop, each
// hop to the next, and the last hop replies straight to the client. Its
// expected latency, Route.ExpectedMicros, is
//
//	RTT("", s1) + Σ [compute(si) + queue(si) + RTT(si, si+1)] + RTT(sk, "")
//
// where compute(s) is s.ComputeMicros (one forward of one token at batch
// 1) and queue(s) = s.QueuedTokens × s.ComputeMicros / Options.Batch: a
// busy server decodes its queue Batch tokens per forward pass, and a pass
// costs about what one token does because decoding is memory-bound. The
// model is deliberately simple: it grows with the queue and with compute,
// never the other way. RTTs come from the caller's [RTT] function, where
// "" is the client, unknown links cost Options.DefaultRTTMicros, and a peer
// to itself costs 0 (a peer serving two consecutive ranges passes the
// hidden state in process). Negative or NaN inputs count as 0 (RTTs as
// unknown) and every term is capped at 10^15 µs, so costs stay finite.
//
// # Planning
//
// [Plan] excludes Draining and Banned servers and those in
// Options.Exclude, then finds a route of least cost exactly: a shortest
// path in the DAG whose nodes are positions on the model's axis and whose
// edges are servers. Because the link between two hops depends on both, it
// is a dynamic program over servers in the order of their start position
// (the least cost of a chain ending with each server). To keep from
// pricing every link between servers that meet at a position, a greedy
// descent first finds a good route, and the program then skips every
// server and link whose lower bound (links after it counted as free)
// cannot beat that route; see graph.shortest. The bounds are compared
// with slack for rounding, so the answer is the exact optimum: tests check
// it against [BruteForce] on thousands of random swarms. Ties go to fewer
// hops, then to the chain whose hops come
// first in (peer ID, range) order, hop by hop, so the answer does not
// depend on the order of the servers slice. When no chain exists, the
// error is a *NoRouteError (errors.Is [ErrNoRoute]) naming the furthest
// layer or head row any chain reaches.
//
// [Replan] is Plan without a peer that has just failed: the failover a
// client performs before replaying its session's tokens on the new route.
// [BruteForce] enumerates every chain and is the reference Plan is tested
// against; it is exponential and for tests only. [Evaluate] totals any
// chain the way Plan does, so a simulator can re-cost a route as loads
// change.
//
// # Policies
//
//   - [MinLatency] (the default) minimizes ExpectedMicros.
//   - [ThroughputAware] minimizes ExpectedMicros plus, for each hop, a
//     load penalty of LoadWeight × Sessions / Capacity seconds: the time
//     between a session's tokens on a server whose capacity its sessions
//     share fairly. Idle servers cost nothing extra, so an idle swarm is
//     routed as under MinLatency; as sessions accumulate on the fastest
//     chain, clients planning on the same view move to the next one.
//     Route.Cost is the minimized sum; Route.ExpectedMicros stays the
//     plain latency, and each Leg says what its hop contributed.
//   - [Random] walks from layer 0 choosing uniformly among the usable
//     servers that start at each position and lie on some complete chain,
//     using Options.Rand. It never dead-ends, and is the baseline the
//     simulator compares the others against. (It is not uniform over
//     routes: a route through a crowded position is less likely.)
//
// [Capacity] is a server's TokensPerSec, or 1e6/ComputeMicros (its batch-1
// rate) if it reported none.
//
// # Placement
//
// [Coverage] lists, for each run of layers and of head rows, the summed
// Capacity of the live servers that compute it: what `swarm ls` and the
// dashboard show. [Choose] picks, from the ranges a joining node could
// serve, the one whose least-served layer or head row is least served,
// so the newcomer relieves the bottleneck (Petals' block selection, but
// counting throughput rather than servers). An uncovered position counts
// as 0, so a swarm with a gap fills the gap first.
//
// # Use
//
//	r, err := route.Plan(model, servers, rtt, opts)
//	if errors.Is(err, route.ErrNoRoute) {
//		// wait for announcements, or tell the user which layer is missing
//	}
//	// ... open a session along r.Hops; if hop i fails:
//	r, err = route.Replan(model, servers, rtt, opts, r.Hops[i].ID)
//
//	i, _ := route.Choose(model, servers, candidates) // on joining
//	serve(candidates[i])
//
// # Speed
//
// Plan reads every server once and prices a link (calls RTT) only where
// the bounds cannot rule it out: on the benchmark swarms (1,000 and 10,000
// random servers over an 80-layer model, WAN-like links), about a third of
// a link per server. Its worst case, for swarms built so that no bound
// helps, is every link between servers ending and starting at the same
// position, quadratic in the servers per position. Run the benchmarks
// with
//
//	go test -run '^$' -bench . ./internal/route
//
// which report the RTT calls per plan and the CPU time (cpu-ns/op) along
// with the wall time.
package route
