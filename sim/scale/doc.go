// Package scale is pipeshard's swarm-scale simulator: a deterministic
// discrete-event simulation of 1,000 to 10,000 volunteer nodes serving a
// model to a stream of client sessions, with churn, driven by the same
// routing and placement code the real node and client run
// (internal/route's Plan, Replan and Choose) and by the cost model of
// package shards (CostsOf, EvenSplit, BalancedSplit, Profile).
//
// It answers questions the real swarm is too small or too slow to: how
// the routing policies (min-latency, random, throughput-aware) and the
// placement policies (even, balanced, dynamic) compare at scale, what
// churn costs in failovers and replays, and how well the model stays
// covered while nodes come and go.
//
// # Use
//
//	cfg := scale.DefaultConfig(1000, 30) // 1,000 nodes, 30 simulated minutes
//	cfg.Routing = scale.ThroughputAware
//	res, err := scale.Run(cfg, seed, nil)
//	fmt.Println(res.Seed, res.TokensPerSec, res.Latency.P50, res.Latency.P99)
//
//	rs, err := scale.Compare(cfg, seed, nil) // routing × placement, in parallel
//	fmt.Print(scale.Table(rs))
//
// A run is a pure function of its Config and seed: no goroutines inside a
// run, no wall clock (the optional progress callback of Run is told the
// wall time, but nothing reads it back), no map iteration that decides
// anything, and an event queue (container/heap) whose ties go to the
// event scheduled first. Randomness comes from math/rand/v2 PCG streams
// of the seed, one per purpose (the swarm and its churn, the clients,
// the Random routing policy, the rebalancing timers), so that runs of one
// seed under different policies see the same nodes, the same deaths and
// joins and the same sessions. Results carry the seed; print it, as the
// tests do, so that any run can be repeated.
//
// Config reads and writes JSON (durations as "30m", policies by name); a
// scenario file is read over DefaultConfig, so it names only what it
// changes:
//
//	cfg := scale.DefaultConfig(1000, 30)
//	err := json.Unmarshal(data, &cfg) // {"routing": "random", "swarm": {"nodes": 5000}}
//
// # The model
//
// The served model is a synthetic shape of shards.SynthConfig (by default
// llama3-70b at q4, its embedding and head at q8) cut into layouts of
// Model.Stages stages each: shards.EvenSplit cuts under Even placement,
// shards.BalancedSplit cuts (on shards.DefaultProfile, the head split by
// rows) under Balanced and Dynamic. A stage costs, per token, the
// shards.Work of its layers and head rows, and needs memory for its
// weights (the whole embedding table on the first stage) plus one
// full-context KV cache, as the real node reserves.
//
// Nodes. The swarm starts with Swarm.Nodes nodes, each with a memory
// limit (log-uniform, 8–32 GB by default), a roofline profile (bytes/s
// and MACs/s, each log-normal around shards.DefaultProfile, or drawn from
// measured profiles the caller passes in Speed.Measured), a region, a
// last-mile RTT and an uplink. A node picks its stage as the real node's
// --layers auto does: route.Choose over the stages of every layout that
// fit its memory, listed largest first, given the swarm's coverage. The
// initial nodes join one after another at time 0 and serve at once;
// later ones serve after loading their shard (its bytes at
// Swarm.LoadBytesPerSec). A node reports what the real node's status
// does: its range, its compute time for one token (ComputeMicros), its
// queued tokens and open sessions, and whether it is draining; it reports
// no measured throughput, so route counts its batch-1 rate.
//
// Churn. Each node lives an exponential lifetime (mean
// Swarm.MeanLifetime, 30 min by default) and new nodes arrive as a
// Poisson process of rate Nodes/MeanLifetime, which keeps the population
// around Nodes. A node dies without warning: its queue and its sessions
// are lost.
//
// Placement. Even and Balanced place a node once, when it joins. Under
// Dynamic, serving nodes also check every Rebalance.Period on average:
// when the swarm's least-served layer or head row has less than
// Rebalance.Imbalance × the mean coverage, the node asks route.Choose
// (over the swarm without itself) for the stage it should serve, and if
// that stage is served less than Rebalance.Gain × its own would be
// without it, it drains (takes no new sessions) for at most
// Rebalance.DrainTimeout, fails its remaining sessions over, loads the
// new stage and serves it. Choose and Coverage depend only on capacity
// summed by position, so placement asks them over one server per stage
// carrying that stage's summed capacity, which gives exactly the answers
// every node's status would (a test checks it) at a cost that does not
// grow with the swarm.
//
// Nodes compute. A node schedules the requests queued at it with the real
// node's scheduler (internal/sched: round robin between sessions, the
// gathering window, a budget of Swarm.MaxBatchTokens tokens a batch),
// and a batch is one forward pass that costs the roofline time
//
//	max((weights + KV × sequences) / bytes_per_s, MACs × tokens / MACs_per_s)
//
// the weights read once per pass, each sequence's KV cache once and the
// multiply-adds once per token; one token alone costs exactly
// Profile.Seconds(Work). Decoding is memory-bound up to the batch where
// the two terms meet. (With shards.DefaultProfile, q4 decoding is
// already compute-bound at batch 1: q4 weights are 0.56 bytes per
// multiply-add, and the profile does 0.8 multiply-adds per byte; so
// batching buys nothing there and a prefill of n tokens costs n tokens.)
//
// The network. Nodes and clients are in regions (five by default, 10 ms
// RTT within one, 65–150 ms between) and each has a last-mile RTT (2–20
// ms). The one-way delay between two endpoints is half their regions' RTT
// plus half of each last-mile RTT. A hidden state (Dim × 4 bytes per
// token) that a node sends to the next hop also waits for the node's
// uplink (10–200 Mbit/s), which sends one message after another; the
// client's token ids and the last hop's result are a few bytes and cost
// only the delay.
//
// Sessions. Sessions arrive as a Poisson process (Workload.SessionsPerSec;
// scripted ones at given times), each from a client in a random region.
// A session plans a route with route.Plan under the Routing policy over
// the swarm as its status shows it: membership (joins, deaths, drains) at
// once, loads (queued tokens, sessions) as of the last status period
// (StatusPeriod, 2 s), and links priced by an RTT function that gives
// route one-way delays (what the real client passes: half its ping) plus,
// between nodes, one hidden state's time on the sender's uplink. The
// session then prefills its prompt (Workload.PromptTokens, one pass of
// that many tokens on every hop), which yields its first token, and
// decodes the rest (Workload.Tokens in all) one at a time, each token
// going client → hop 1 → … → hop k → client. A session is planned when
// it starts and when it fails over, never per token.
//
// Failover. When a node on a session's route dies (or moves), the session
// notices after Network.FailureDetect and calls route.Replan without it.
// If no route is left the session fails. Otherwise it replays its prefix
// (the prompt and every token generated so far) on the hops of the new
// route that do not hold its KV cache; the hops that do (old hops still
// alive) compute only the token that was in flight and pass on the hidden
// states they produced for the prefix when the next hop is new (the
// model assumes hops keep their outputs for open sessions). The replay
// yields the token that was in flight, whose latency includes the stall.
// A session still open after Workload.Timeout fails too (the client gives
// up); with Drain ≥ Timeout every session ends, completed or failed.
//
// # What is measured
//
// Results: aggregate throughput (tokens delivered per second over
// [Warmup, Duration)), per-token latency (mean, p50, p99, max; every
// token after the first, from the client sending the previous token to
// receiving this one) and time to first token, sessions started,
// completed, failed (with no route at start, with none at failover, or
// timed out), failovers and replayed positions, the mean route length,
// coverage (route.Coverage's least-served and mean throughput, sampled
// every CoverageEvery), joins, deaths, moves, and the busy fraction of
// serving nodes. Results marshal to JSON; Table formats a Markdown table.
//
// # What is not modeled
//
//   - Memory for sessions' KV caches (only the reserve for one), so a node
//     never refuses a session; there is no admission control.
//   - Sharing the uplink fairly between streams (it is first come, first
//     served), the downlink, packet loss, jitter, and congestion between
//     regions; the client's own link is free.
//   - Status propagation delay beyond StatusPeriod, the DHT, discovery,
//     pings, verification, banned nodes, and the time to plan.
//   - Nodes that leave gracefully (every death is a crash), correlated
//     failures, and diurnal patterns.
//   - Prefill chunking or priorities: a long replay delays every request
//     queued behind it at that node.
//   - Sampling: every session generates exactly Workload.Tokens tokens.
//   - Planners know every link between nodes; today's real client knows
//     only its own pings and prices links between servers at
//     route.DefaultRTTMicros.
//
// # Speed
//
// Events are per hop per request (arrival, end of the batch) and per
// token delivered; a run of 1,000 nodes for 30 simulated minutes with
// churn processes 100,000 to 300,000 events and plans a few thousand
// routes in about half a second on one core. At 10,000 nodes route.Plan
// over the whole swarm dominates (about 1.3 ms a plan), and a run takes
// about a minute. Measure with
//
//	go test -run '^$' -bench . ./sim/scale
package scale
