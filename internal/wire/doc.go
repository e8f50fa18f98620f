// Package wire defines the messages of pipeshard's stage protocol,
// /pipeshard/stage/1.0.0, and their binary encoding. It does no I/O of its
// own beyond reading and writing frames on a stream it is given.
//
// # Frames
//
// Every message is one frame: a little-endian uint32 length, then that
// many bytes: a one-byte message type and the message's fields. Integers
// are little-endian and fixed-size; strings and byte strings carry a
// uint16 length; lists a count whose width each message documents. A
// frame longer than the reader's limit (DefaultMaxFrame unless configured)
// is refused before its body is read.
//
// # The path of a session
//
//	client ──Open──▶ hop 0 ──Open──▶ hop 1 ──Open──▶ hop 2
//	client ◀─Opened─ hop 0 ◀─Opened─ hop 1 ◀─Opened─ hop 2
//	client ──Forward▶ hop 0 ─Forward▶ hop 1 ─Forward▶ hop 2 ─Result─▶ client
//
// The client opens one stream to the first hop and sends Open, which
// lists the whole route. Each hop checks that it serves its part, opens a
// stream to the next hop and passes Open on; the last hop dials the
// client on /pipeshard/result/1.0.0. Opened travels back hop by hop once
// the whole chain stands. Each Forward carries token ids (hop 0) or hidden
// states, and the last hop sends only what the client asked for (argmax
// ids, a sample, top-k, or logits) straight back to the client, not back
// through the chain. An Error travels upstream hop by hop to the client and
// names the hop that raised it; a hop that cannot go on also resets its
// streams.
//
// Errors map to codes and back to the same sentinel values (see
// [ErrorCode]), so a remote error is errors.Is-able on the client.
package wire
