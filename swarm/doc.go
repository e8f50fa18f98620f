// Package swarm is pipeshard's client: it finds the nodes that serve a
// model, picks a route through its layers, opens a session along it and
// streams tokens through.
//
// A [Client] knows only a model CID and a bootstrap address. It joins the
// DHT as a client, resolves the model CID to its manifest (fetched by CID
// from a provider and checked against its hash), finds the providers of
// every shard of every layout, reads their status, measures round trips
// with libp2p ping, and plans the route of least expected latency
// (internal/route). A [Session] is one sequence along that route; it
// implements generate.Backend, so generation code runs unchanged over a
// local model or a swarm.
//
// The wire protocol is internal/wire's; see docs/protocol.md.
package swarm
