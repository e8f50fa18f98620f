// Package status publishes and tracks the signed status of the nodes that
// serve a model: which layers each serves, how loaded and how fast it is,
// and where to reach it. Every few seconds a volunteer node publishes a
// Record on its model's GossipSub topic; clients and other nodes keep the
// latest record of each peer with a Tracker and forget peers that fall
// silent.
//
// # Records
//
// A Record names its publisher (PeerID), the model (ModelID, the model's
// identity CID) and the shard it serves (ShardCID, Quant): layers
// [Start, End) and output head rows [HeadLo, HeadHi), where 0, 0 means
// the whole head when End is the last layer and no head otherwise. It
// reports load (QueuedTokens, ActiveSessions, FreeKVBytes), measured speed
// (TokensPerSec; ComputeMicros, the per-token compute of one forward at
// batch 1), the software Version, whether the node is Draining (taking no
// new sessions), and the multiaddrs it listens on (Addrs). Seq increases
// strictly with every record of a peer; Time is the publisher's clock when
// it signed.
//
// # Wire encoding
//
// The payload is binary, version 1:
//
//	u8       version (1)
//	bytes    peer ID (binary multihash, ≤ 128)
//	string   model ID (≤ 128)
//	string   shard CID (≤ 128)
//	uvarint  start, end (≤ 65535), head low, head high (≤ 2³²-1)
//	string   quant (≤ 32)
//	uvarint  queued tokens, active sessions (≤ 2³¹-1), free KV bytes (≤ 2⁶³-1)
//	f64      tokens per second, compute micros (IEEE 754, little-endian; finite, ≥ 0)
//	string   version (≤ 64)
//	u8       flags: bit 0 draining; the other bits must be 0
//	uvarint  seq (≥ 1)
//	u64      time, Unix nanoseconds, little-endian (> 0)
//	uvarint  address count (≤ 32), then each address as bytes (binary multiaddr, ≤ 256)
//
// bytes and string are a uvarint length then that many bytes; strings are
// UTF-8 without control characters. The decoder is strict: varints must
// be minimal, every bound above is enforced, the fields must satisfy
// Record.Validate (Start ≤ End; HeadLo < HeadHi unless both are 0), and
// no byte may follow the last address. A record in an unknown version
// fails with ErrUnsupportedVersion; a newer encoding comes with a new
// version byte, and an incompatible one with a new topic.
//
// # Signatures
//
// The payload travels in a libp2p signed envelope (record.Seal,
// record.ConsumeEnvelope) of domain "pipeshard-status" and payload type
// 0x307374 (a private-use multicodec; *Record is registered for it). The
// envelope carries the signer's public key; Decode derives the peer ID
// from it and refuses the record with ErrWrongSigner unless it equals
// Record.PeerID, so no node can announce for another. Encode refuses to
// sign with a key that is not the record's peer's. A whole envelope is at
// most MaxMessageSize (16 KiB); longer input is refused before parsing.
//
// GossipSub signs its messages too (by default). The Tracker's topic
// validator also requires the message's author to be the record's peer
// (ErrWrongSender): a node may not relay another's record as a message of
// its own; it forwards the original message instead.
//
// # Topics and timing
//
// Records of model M go on the topic Topic(M) = "/pipeshard/status/1/" + M.
// A Publisher publishes as soon as it runs, then every period (2 s,
// DefaultPublishEvery) and at once on Poke, which a node calls when it
// starts draining or its shard changes. A Tracker keeps each peer's latest
// record for a ttl (10 s, DefaultTTL) after it arrived, by the Tracker's
// own clock, so a node that goes silent disappears within ttl while a
// live one survives three lost records in a row. Both take a Clock; tests
// of timing run the real one inside a testing/synctest bubble.
//
// The bookkeeping is Table, which does no I/O and reads no clock: records
// go in with their arrival time and Live(now) says which are current. The
// Tracker wraps a Table with a mutex, a subscription and a validator.
//
// # Use
//
//	ps, _ := pubsub.NewGossipSub(ctx, h)
//	tr, err := status.NewTracker(ps, modelID, status.DefaultTTL, nil)
//	go tr.Run(ctx)
//	pub, err := status.NewPublisher(ps, h, modelID, status.DefaultPublishEvery, node.Snapshot, nil)
//	go pub.Run(ctx)
//	...
//	err = tr.Wait(ctx, func(rs []status.Record) bool { return covers(rs) })
//	for _, r := range tr.Records() { ... }
//
// A Publisher and a Tracker of the same model may share one PubSub; the
// package shares the topic handle between them, so code elsewhere must not
// Join status topics on that PubSub itself. There can be one Tracker per
// model per PubSub, since it owns the topic's validator. Run returns when
// its context ends, after leaving the topic.
//
// # Validation and replay
//
// NewTracker registers a topic validator. It rejects, so that GossipSub
// neither delivers nor propagates them (and peer scoring, where enabled,
// penalises the sender), messages that do not decode, whose signature
// fails, whose signer or author is not the record's peer, or whose model is
// not the topic's; Stats().Rejected counts them for metrics. It ignores
// (drops without penalty) valid records that are not news: a Seq not above
// the last seen from that peer (a replay), a Time further than
// MaxClockSkew (5 min) from the local clock, an unknown encoding version,
// or a new peer when MaxTracked peers are already tracked. A peer's last
// Seq is remembered for ttl + 2·MaxClockSkew after its last record, longer
// than any replay of that record could pass the skew check, so a replay
// cannot revive a silent node. A Publisher starts Seq at its clock's Unix
// nanoseconds, so a restarted node's records are newer than its old ones.
//
// # Threats
//
// The signature binds a record to its peer, and Seq and the skew check
// bound replays, but a node can still lie about anything it measures or
// decides itself: QueuedTokens, ActiveSessions, FreeKVBytes, TokensPerSec
// and ComputeMicros may be inflated to attract work or deflated to shed
// it; Addrs may point elsewhere (a dial then fails the peer ID check of
// the transport); ShardCID and the layer range are claims that only a
// request to the node confirms. Clients must treat load and speed as
// hints, measure each node's actual latency and throughput on the
// sessions they run, and prefer measurement when the two disagree. A node
// whose clock is more than MaxClockSkew off is not tracked. A node may
// create many identities; MaxTracked bounds the memory they cost, not
// their number (a GossipSub peer score would).
package status
