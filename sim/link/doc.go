// Package link runs real libp2p hosts over a simulated packet network in
// one process, for tests and benchmarks: every ordered pair of hosts has
// its own latency, jitter, loss and bandwidth, and the randomness is
// seeded.
//
// # Use
//
//	nw := link.New(seed, link.Matrix(m)) // or link.Uniform(l), or any func(i, j int) link.Link
//	defer nw.Close()                     // closes the hosts too
//	h0, _ := nw.Host(0, nil)             // key nil: nw.Key(0), derived from the seed
//	h1, _ := nw.Host(1, nil)
//	h0.Connect(ctx, peer.AddrInfo{ID: h1.ID(), Addrs: h1.Addrs()})
//
// A pipeshard node or client runs on such a host through node.Config.Host
// and swarm.Config.Host (which then own it: their Close closes it). Give
// nodes Threads: 1 under testing/synctest (see below).
//
// # What it rests on, and why
//
// go-libp2p v0.51.0 offers two tools. mocknet (p2p/net/mock) joins hosts
// with in-memory streams whose writes a link delays and throttles
// (LinkOptions{Latency, Bandwidth}, no jitter): it cannot lose anything,
// a stream being reliable by construction, and its hosts run no
// transport, security handshake or muxer. x/simlibp2p runs libp2p's real QUIC
// transport over github.com/marcopolo/simnet's simulated UDP sockets, by
// overriding two hooks of the QUIC connection manager
// (quicreuse.OverrideListenUDP and OverrideSourceIPSelector); simnet is
// built for testing/synctest. (There is no p2p/net/simconn in v0.51.0.)
// But simnet's bandwidth is per host (one uplink, one downlink), its
// latency one function for the whole network, it has no loss, and its
// packets hide their payload from a custom router, so a router of ours
// could not even size them.
//
// This package takes simlibp2p's approach and its two hooks, not simnet:
// hosts are made by libp2p.New with libp2p's QUIC transport (TLS 1.3,
// streams, flow and congestion control, loss recovery: all quic-go's
// real code), and only their UDP sockets are ours. A lost packet is
// really lost, and QUIC really detects and retransmits it: that is the
// honest way to have loss on a libp2p connection.
//
// # Hosts
//
// Host i is IP(i) (10.0.0.1 for host 0, counting up), listens on
// /ip4/IP(i)/udp/4001/quic-v1 and has no other transport. Its identity is
// Key(i), derived from the seed, so that peer IDs, and with them the DHT's
// distances, repeat from run to run. Identify's address discovery is off
// (it would learn nothing new, and its timers stall synctest). Extra
// libp2p options are passed on (a resource manager, say); ones that change
// transports or listen addresses break the host.
//
// # The link model
//
// A packet from host i to host j goes through Link(i, j), in this order:
//
//  1. the queue: with a Bandwidth, a packet that would wait longer than
//     Queue (default 100 ms) for the link to be free is dropped, as a
//     router's full buffer drops it (Stats.Overflow);
//  2. transmission at Bandwidth bytes per second (0: instant);
//  3. loss, with probability Loss (Stats.Lost): a lost packet has still
//     used the link;
//  4. propagation: Latency plus jitter. The jitter is a continuous,
//     piecewise-linear function of the time the packet leaves, between
//     random values in [-Jitter, +Jitter] drawn every max(1 ms, 2·Jitter).
//     So the delay never falls faster than time passes, packets on a link
//     keep their order (as behind a queue, not as netem's independent
//     draws, which reorder), and the mean delay is Latency however dense
//     the traffic is;
//  5. delivery into j's socket, whose buffer is unbounded (the sender's
//     congestion window bounds it).
//
// The two directions of a pair are independent links, so asymmetric
// paths are expressible. Not modelled: a host's shared access link (two
// peers of a host do not compete for its bandwidth), MTU, bursty loss,
// reordering, NAT, TCP.
//
// # Randomness and reproducibility
//
// Jitter and loss come from a PCG generator (math/rand/v2) reseeded per
// draw from the network's seed, the directed pair, and: for jitter, the
// knot of the packet's departure time; for loss, the millisecond the
// packet is sent in and its index within it. Neither depends on traffic
// on other links, nor on a packet added or removed earlier: the same seed
// gives the same draws for the same traffic.
//
// The traffic itself is only as repeatable as the code above the
// network. Under testing/synctest, sparse traffic (pings, a token stream
// through pipeshard stages) repeats exactly from run to run, jitter
// included. A bulk transfer that fills the queue or loses packets does
// not: within one instant of simulated time the Go scheduler orders
// goroutines differently from run to run, and TLS's random bytes vary
// packet sizes by a few bytes (testing/cryptotest.SetGlobalRandom fixes
// the latter, not the former); QUIC's reaction to a loss then differs.
// On the real clock, only the draws are reproducible.
//
// # testing/synctest
//
// The network works on the real clock (benchmarks) and in a synctest
// bubble, where its delays cost no real time and are exact: a test of
// minutes of network time runs in milliseconds, and a 20 ms link gives
// ping times of exactly 40 ms. Call New inside the bubble: its delivery
// goroutine and timers must belong to it. Everything started in the
// bubble must stop before it ends; Network.Close closes the hosts.
//
// In a bubble computation takes no time at all. A pipeshard node's
// measured decode time (Stage.Calibrate, the status records' compute
// time, the trace) is 0, and a token's time is its network crossings
// alone. Code that spins on the clock never lets the bubble's time
// advance: ovrt's thread pool does (its workers spin until time.Since
// says 200 µs), so nodes in a bubble need Threads: 1, which starts no
// workers.
package link
