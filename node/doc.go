// Package node is pipeshard's volunteer daemon: a libp2p host in the
// pipeshard DHT that hosts one shard and serves activation streams.
//
// [New] starts the host (TCP and QUIC, Noise, yamux, the resource
// manager's limits) with the identity key kept in its home, joins the
// Kademlia DHT in server mode under the /pipeshard prefix through the
// bootstrap peers, starts bitswap over its block store (serving every
// block it holds, each re-hashed as it is read), and loads its shard:
// from the store, fetched from peers by CID if missing, or — with
// Config.Model and no shard — the shard of the model the swarm serves
// least well by measured throughput that fits Config.MaxMemory. It then
// measures one decode step so its first status is honest.
//
// [Node.Run] announces the shard, the model's descriptor, manifests and
// tokenizer (provide: retried soon while the node is alone, announced
// again each time its routing table doubles and at doubling intervals
// from 30 s, then every 12 h), publishes a signed status every 2 s on the model's GossipSub
// topic (internal/status), and serves the stage protocol
// (internal/wire) until its context ends.
//
// [Stage] is the stage service: per upstream stream one reader goroutine,
// per session one relay goroutine for what comes back from the next hop,
// one executor that takes every waiting Forward of every session and runs
// them as one batched ovrt forward, and a janitor that closes idle
// sessions and evicts the least recently used past the KV budget. Bad
// input gets a typed error frame (and, for stream-level faults, the
// stream closed) without disturbing other sessions. The executor is driven
// by internal/sched, which forms fair batches across clients, holds a short
// gathering window, and gives each session credits of queued forwards.
// Three details make batching and pipelining work on a node with one P
// (--threads 1): the executor yields once after a reader wakes it, so that
// forwards that arrived together are all read before the batch forms; it
// yields again after each batch, so that the stream multiplexer's writer
// puts the batch's outputs on the wire before the next batch holds the P
// (otherwise they waited for the runtime's 10 ms preemption while the next
// stage idled); and a batch takes at most the open sessions over their
// route's hops, so that streams pipeline over the stages instead of
// travelling as one convoy.
//
// [Node.Close] closes its parts in turn, each within 15 s (CloseParts): a
// node asked to stop stops, and names a part that hung.
//
// A private swarm (Config.SwarmKey: libp2p pnet, TCP only) and an
// allow-list of peer IDs (Config.Allow: a connection gater, checked again
// when a session opens) keep strangers out; per-peer limits (sessions, KV
// bytes, request rate) keep members in check (limits.go, docs/security.md).
//
// [Node.Drain] takes a node out of service without failing anyone: it
// stops admitting sessions, announces it, lets open ones finish for a
// while and hands the rest over (their clients fail over and replay).
// [Node.ServeWhenIdle] drains while the machine's owner needs it
// (internal/idle) and serves again when it is idle.
package node
