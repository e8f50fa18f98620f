// Package scenario runs the real swarm under a scenario file: `pipeshard
// node` processes, each inside its own host of an emulated WAN, clients
// with a given load, and churn, and measures what the clients see.
//
// Where sim/scale simulates thousands of nodes with a model of their
// behaviour, this package runs the actual binaries on one machine, a few
// to a few dozen hosts, so that the protocol, the route planner, the
// batching executor and libp2p itself meet latency, bandwidth, jitter,
// loss and crashes as they would on the Internet.
//
// # Scenario files
//
// A scenario is YAML (or JSON, which is YAML). Parse is strict: an
// unknown field, a duplicate key, a value of the wrong type or a second
// document is an error, with its line. Validate then checks the whole
// scenario and names the entry (and line) at fault; every Parse error
// wraps ErrParse and every Validate error ErrInvalid.
//
//	name: four-node-50ms             # names the results
//	seed: 1                          # the emulator's randomness
//	model:
//	  name: stories15M               # a known model, or a path `shards import` reads
//	  quant: f32                     # f32 (default), q8 or q4
//	  layouts: ["0:2,2:4,4:6"]       # explicit cuts (optional)
//	  stages: [3]                    # cost-balanced cuts, for layers: auto (optional)
//	nodes:
//	  - name: n                      # n0, n1, ... when count > 1
//	    count: 4
//	    cores: 1                     # --threads and GOMAXPROCS
//	    memory: 512MiB               # --max-memory
//	    layers: "0:3,3:6/0:3200,6:6/3200:17600,6:6/17600:32000"  # one per node, one for all, or auto
//	    region: eu                   # optional
//	    uplink: 20Mbit               # caps every link out of these nodes (optional)
//	    fetch: false                 # true: start empty, fetch the shard over the network
//	    standby: false               # true: not started with the swarm; churn starts it
//	network:
//	  delay: 50ms                    # one-way, every link
//	  jitter: 0s
//	  loss: 0                        # fraction of packets
//	  bandwidth: 100Mbit             # per link and direction; 0: unlimited
//	  transport: tcp                 # or quic
//	  regions:                       # RTTs between regions (one entry per pair)
//	    eu: {eu: 10ms, us: 80ms}
//	    us: {us: 10ms}
//	  latency: [[0s, 20ms], [20ms, 0s]]  # one-way, host by host (nodes then clients)
//	  links:                         # overrides, later over earlier
//	    - {between: [c, n0], delay: 30ms}     # hosts, groups, regions or "*"
//	    - {from: n1, to: "*", loss: 0.01}
//	churn:
//	  - {at: 20s, kill: n1}          # SIGKILL: a crash
//	  - {at: 30s, stop: n2}          # SIGTERM: a graceful leave
//	  - {at: 25s, start: spare}      # a standby or stopped node (same identity and store)
//	clients:
//	  - name: c
//	    count: 1                     # client hosts
//	    in_flight: [1, 4]            # concurrent requests per client; a list is a sweep of phases
//	    requests: 8                  # per client and phase ...
//	    duration: 60s                # ... and/or start no new request after this long
//	    prompt: Once upon a time     # or prompt_ids: [1, 450]
//	    tokens: 64
//	    ignore_eos: true
//	    sampling: {temp: 0.8, top_p: 0.95, top_k: 0, seed: 5}  # request k uses seed+k
//	    timeout: 60s                 # to find a route, per request
//	bounds:
//	  max_duration: 10m              # the whole run, start-up included
//	  max_traffic: 1GB               # the emulator enforces it; 0: none
//
// Durations are Go durations ("50ms", "2m"); a bare number is seconds,
// so `delay: 50` is 50 s, which Validate rejects as a delay. Rates take
// bit units (100Mbit, 1Gbit/s, 20Mbps) or byte units (10MB/s, 1MiB/s); a
// bare number is bytes/s. Sizes are like 512MiB or 2GB.
//
// A link's one-way delay is, from the most specific rule to the least:
// the last links entry that matches, the latency matrix, half the RTT
// between the two hosts' regions, delay. Jitter, loss and bandwidth come
// from the network's defaults and the links entries; a host's uplink
// caps the links out of it. Scenario.Link(from, to) gives the result
// per pair, as the emulator wants it; Scenario.NetSpec bundles it with
// the host count, the seed and the bounds.
//
// Every node's range must be a shard of some layout of the model. Run
// cuts Model.Layouts and Model.Stages, then, for ranges in none of those,
// chains of the nodes' ranges that cover the model (Scenario.Layouts);
// a range no chain can complete is an error.
//
// # Running
//
//	sc, err := scenario.Load("sim/scenarios/four-node-50ms.yaml")
//	err = sc.Validate()
//	spec := sc.NetSpec("auto", log) // hosts, Link(from, to), seed, bounds
//	var net scenario.Network = ...  // an emulator built from spec (sim/netem)
//	res, err := scenario.Run(ctx, sc, scenario.Env{Net: net, WorkDir: "out/work"})
//	err = res.WriteDir("out")       // results.json, throughput.svg, inflight.svg
//
// Run:
//
//  1. imports the model and cuts its layouts with `pipeshard shards import`
//     and `shards split` into Env.CacheDir, once per model and set of
//     layouts;
//  2. gives each node a home whose store holds the model (hard links into
//     the cache) unless it fetches, and starts the first node holding the
//     model alone, then the others through it, each with `pipeshard node
//     --json` inside its host (Network.Command), listening on its host's
//     address; a node is up when it prints its start line;
//  3. from then on (t = 0 in the results) applies the churn at its times,
//     a started node joining through every live node;
//  4. runs the phases one after another: in each, every client host runs
//     one `pipeshard sim client` process that joins the swarm once and
//     keeps its in-flight requests going, each finding a route and opening
//     a session of its own, and prints a JSON line per request
//     (ClientRecord): when it began, when each token arrived, its route
//     with the per-hop compute and queue times, or its error;
//  5. stops every node (SIGTERM, then SIGKILL) and closes the network.
//
// Clients are processes, not the swarm library in this process, because
// a process is what an emulator can put inside a host: a network
// namespace belongs to a thread, and the Go runtime and libp2p move work
// between threads. Requests share their client's libp2p host, as a real
// client's sessions do.
//
// # Results
//
// Results hold, per request, tokens/s (decode: tokens after the first
// over the time from the first to the last), time to first token (route
// search included), per-token latency quantiles, route and per-hop
// timings, or the error; per phase, the aggregate tokens/s over the
// phase's window, failures and latency quantiles; per node, its peer,
// range, start and stop times and how it ended; churn as applied; and the
// errors outside requests (nodes that died unasked, clients that could
// not run, the bound that stopped the run). A run stopped by
// bounds.max_duration returns what it had, with an error.
//
// The package's tests run the runner end to end with the real binary
// (built by TestMain) on an unimpaired loopback Network.
package scenario
