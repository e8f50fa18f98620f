package status

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	ma "github.com/multiformats/go-multiaddr"
)

// Domain is the signature domain of status envelopes: a signature made
// for another libp2p record type never verifies as a status record.
const Domain = "pipeshard-status"

// codec is the envelope payload type of status records: the uvarint of
// 0x307374, a code in the multicodec private-use range.
var codec = binary.AppendUvarint(nil, 0x307374)

// EncodingVersion is the first byte of every payload this package writes.
const EncodingVersion = 1

// Bounds the decoder enforces; Encode refuses records outside them too.
const (
	MaxMessageSize = 16 << 10 // a whole signed envelope, in bytes
	MaxPeerIDLen   = 128      // bytes of the binary peer ID
	MaxIDLen       = 128      // bytes of ModelID and ShardCID
	MaxQuantLen    = 32       // bytes of Quant
	MaxVersionLen  = 64       // bytes of Version
	MaxAddrs       = 32       // entries of Addrs
	MaxAddrLen     = 256      // bytes of one binary multiaddr
	MaxLayer       = math.MaxUint16
	MaxHeadRow     = math.MaxUint32
)

// TopicPrefix is the prefix of every status topic.
const TopicPrefix = "/pipeshard/status/1/"

// Topic returns the GossipSub topic on which the status of modelID's
// servers is published.
func Topic(modelID string) string { return TopicPrefix + modelID }

func init() {
	record.RegisterType(&Record{})
}

// Record is one node's signed statement of what it serves of one model and
// how busy and how fast it is. The load and speed figures are the node's
// own claims; see the package documentation for what a receiver can and
// cannot trust.
type Record struct {
	PeerID   peer.ID // the publisher; must be the envelope's signer
	ModelID  string  // the model's identity CID
	ShardCID string  // the shard served; may be empty while loading
	Start    int     // layers [Start, End)
	End      int
	HeadLo   int // output head rows [HeadLo, HeadHi); 0, 0 = whole head if End is the last layer
	HeadHi   int
	Quant    string

	QueuedTokens   int     // tokens waiting for a forward pass
	ActiveSessions int     // open sessions holding KV cache
	FreeKVBytes    int64   // KV cache memory still free
	TokensPerSec   float64 // measured throughput
	ComputeMicros  float64 // measured compute per token of one forward at batch 1, µs

	Version  string    // software version
	Draining bool      // accepts no new sessions
	Seq      uint64    // strictly increasing per peer
	Time     time.Time // the publisher's clock when signed
	Addrs    []string  // multiaddrs the peer is reachable at
}

// Domain implements record.Record.
func (r *Record) Domain() string { return Domain }

// Codec implements record.Record.
func (r *Record) Codec() []byte { return codec }

// Validate reports, wrapping ErrBadRecord, the first field of r that is
// out of bounds.
func (r *Record) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadRecord}, args...)...)
	}
	switch {
	case r.PeerID == "":
		return bad("empty peer ID")
	case len(r.PeerID) > MaxPeerIDLen:
		return bad("peer ID of %d bytes", len(r.PeerID))
	case r.ModelID == "":
		return bad("empty model ID")
	case r.Start < 0 || r.End < r.Start || r.End > MaxLayer:
		return bad("layers [%d, %d)", r.Start, r.End)
	case r.HeadLo < 0 || r.HeadHi > MaxHeadRow || r.HeadLo > r.HeadHi ||
		(r.HeadHi != 0 && r.HeadLo == r.HeadHi):
		return bad("head rows [%d, %d)", r.HeadLo, r.HeadHi)
	case r.QueuedTokens < 0 || r.QueuedTokens > math.MaxInt32:
		return bad("queued tokens %d", r.QueuedTokens)
	case r.ActiveSessions < 0 || r.ActiveSessions > math.MaxInt32:
		return bad("active sessions %d", r.ActiveSessions)
	case r.FreeKVBytes < 0:
		return bad("free KV bytes %d", r.FreeKVBytes)
	case !nonNegative(r.TokensPerSec):
		return bad("tokens per second %v", r.TokensPerSec)
	case !nonNegative(r.ComputeMicros):
		return bad("compute micros %v", r.ComputeMicros)
	case r.Seq == 0:
		return bad("zero sequence number")
	case !encodableTime(r.Time):
		return bad("time %v", r.Time)
	case len(r.Addrs) > MaxAddrs:
		return bad("%d addresses", len(r.Addrs))
	}
	for _, f := range []struct {
		name, s string
		max     int
	}{{"model ID", r.ModelID, MaxIDLen}, {"shard CID", r.ShardCID, MaxIDLen},
		{"quant", r.Quant, MaxQuantLen}, {"version", r.Version, MaxVersionLen}} {
		if len(f.s) > f.max {
			return bad("%s of %d bytes", f.name, len(f.s))
		}
		if !plain(f.s) {
			return bad("%s %q is not printable UTF-8", f.name, f.s)
		}
	}
	for _, a := range r.Addrs {
		if _, err := addrBytes(a); err != nil {
			return err
		}
	}
	return nil
}

func nonNegative(f float64) bool { return f >= 0 && !math.IsInf(f, 1) }

// encodableTime reports whether t is after the Unix epoch and exactly
// representable as int64 Unix nanoseconds.
func encodableTime(t time.Time) bool {
	if !t.After(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
		return false
	}
	return true
}

// plain reports whether s is valid UTF-8 free of control characters, so
// that it is safe in logs.
func plain(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

func addrBytes(s string) ([]byte, error) {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %w", ErrBadRecord, s, err)
	}
	b := a.Bytes()
	if len(b) == 0 || len(b) > MaxAddrLen {
		return nil, fmt.Errorf("%w: address %q of %d bytes", ErrBadRecord, s, len(b))
	}
	return b, nil
}

// Flag bits of the flags byte.
const flagDraining = 1 << 0

// MarshalRecord implements record.Record: it returns the payload encoding
// of r (see the package documentation), or an error wrapping ErrBadRecord
// if r does not Validate.
func (r *Record) MarshalRecord() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.appendPayload(make([]byte, 0, 128+len(r.Addrs)*32))
}

// appendPayload appends the encoding of r, valid or not, to b.
func (r *Record) appendPayload(b []byte) ([]byte, error) {
	b = append(b, EncodingVersion)
	b = appendString(b, string(r.PeerID))
	b = appendString(b, r.ModelID)
	b = appendString(b, r.ShardCID)
	for _, v := range []int{r.Start, r.End, r.HeadLo, r.HeadHi} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = appendString(b, r.Quant)
	b = binary.AppendUvarint(b, uint64(r.QueuedTokens))
	b = binary.AppendUvarint(b, uint64(r.ActiveSessions))
	b = binary.AppendUvarint(b, uint64(r.FreeKVBytes))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.TokensPerSec))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.ComputeMicros))
	b = appendString(b, r.Version)
	var flags byte
	if r.Draining {
		flags |= flagDraining
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, r.Seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Time.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(r.Addrs)))
	for _, a := range r.Addrs {
		ab, err := addrBytes(a)
		if err != nil {
			return nil, err
		}
		b = appendString(b, string(ab))
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalRecord implements record.Record: it decodes a payload strictly
// (minimal varints, bounded lengths, no unknown flags, no trailing bytes)
// into r. Errors wrap ErrBadRecord, or ErrUnsupportedVersion.
func (r *Record) UnmarshalRecord(data []byte) error {
	if len(data) > MaxMessageSize {
		return fmt.Errorf("%w: payload of %d bytes", ErrTooLarge, len(data))
	}
	if len(data) == 0 {
		return fmt.Errorf("%w: empty payload", ErrBadRecord)
	}
	if data[0] != EncodingVersion {
		return fmt.Errorf("%w: version %d", ErrUnsupportedVersion, data[0])
	}
	d := decoder{b: data[1:]}
	var out Record
	id := d.bytes("peer ID", MaxPeerIDLen)
	out.ModelID = d.string("model ID", MaxIDLen)
	out.ShardCID = d.string("shard CID", MaxIDLen)
	out.Start = d.int("start", MaxLayer)
	out.End = d.int("end", MaxLayer)
	out.HeadLo = d.int("head low", MaxHeadRow)
	out.HeadHi = d.int("head high", MaxHeadRow)
	out.Quant = d.string("quant", MaxQuantLen)
	out.QueuedTokens = d.int("queued tokens", math.MaxInt32)
	out.ActiveSessions = d.int("active sessions", math.MaxInt32)
	out.FreeKVBytes = int64(d.uvarint("free KV bytes", math.MaxInt64))
	out.TokensPerSec = math.Float64frombits(d.u64("tokens per second"))
	out.ComputeMicros = math.Float64frombits(d.u64("compute micros"))
	out.Version = d.string("version", MaxVersionLen)
	flags := d.byte("flags")
	out.Draining = flags&flagDraining != 0
	out.Seq = d.uvarint("seq", math.MaxUint64)
	ns := int64(d.u64("time"))
	n := d.int("address count", MaxAddrs)
	for i := 0; i < n && d.err == nil; i++ {
		ab := d.bytes("address", MaxAddrLen)
		if d.err != nil {
			break
		}
		a, err := ma.NewMultiaddrBytes([]byte(ab))
		if err != nil || len(a) == 0 {
			d.fail(fmt.Errorf("%w: address %d: %v", ErrBadRecord, i, err))
			break
		}
		out.Addrs = append(out.Addrs, a.String())
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadRecord, len(d.b))
	}
	if flags&^flagDraining != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrBadRecord, flags)
	}
	pid, err := peer.IDFromBytes([]byte(id))
	if err != nil {
		return fmt.Errorf("%w: peer ID: %w", ErrBadRecord, err)
	}
	out.PeerID = pid
	if ns <= 0 {
		return fmt.Errorf("%w: time %d", ErrBadRecord, ns)
	}
	out.Time = time.Unix(0, ns)
	if err := out.Validate(); err != nil {
		return err
	}
	*r = out
	return nil
}

// decoder reads the payload, remembering the first error; later reads
// return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) uvarint(what string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.fail(fmt.Errorf("%w: truncated at %s", ErrBadRecord, what))
		return 0
	case n < 0:
		d.fail(fmt.Errorf("%w: %s overflows", ErrBadRecord, what))
		return 0
	case n != uvarintLen(v):
		d.fail(fmt.Errorf("%w: %s is not minimally encoded", ErrBadRecord, what))
		return 0
	case v > max:
		d.fail(fmt.Errorf("%w: %s %d exceeds %d", ErrBadRecord, what, v, max))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func (d *decoder) int(what string, max uint64) int { return int(d.uvarint(what, max)) }

func (d *decoder) bytes(what string, max int) string {
	n := d.int(what+" length", uint64(max))
	if d.err != nil {
		return ""
	}
	if len(d.b) < n {
		d.fail(fmt.Errorf("%w: truncated at %s", ErrBadRecord, what))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) string(what string, max int) string {
	s := d.bytes(what, max)
	if d.err == nil && !plain(s) {
		d.fail(fmt.Errorf("%w: %s %q is not printable UTF-8", ErrBadRecord, what, s))
	}
	return s
}

func (d *decoder) u64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail(fmt.Errorf("%w: truncated at %s", ErrBadRecord, what))
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(fmt.Errorf("%w: truncated at %s", ErrBadRecord, what))
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}
