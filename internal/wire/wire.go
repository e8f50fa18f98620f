package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Protocol IDs.
const (
	StageProtocol  = "/pipeshard/stage/1.0.0"
	ResultProtocol = "/pipeshard/result/1.0.0"
)

// DefaultMaxFrame bounds a frame: 64 MiB holds a 2,048-token prefill of an
// 8,192-wide model in fp32.
const DefaultMaxFrame = 64 << 20

// Type is a message's type byte.
type Type uint8

const (
	TypeOpen Type = iota + 1
	TypeOpened
	TypeForward
	TypeResult
	TypeError
	TypeClose
	TypeCredit
)

func (t Type) String() string {
	names := [...]string{"", "open", "opened", "forward", "result", "error", "close", "credit"}
	if int(t) < len(names) && t > 0 {
		return names[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// SessionID names a session on every hop.
type SessionID [16]byte

func (s SessionID) String() string { return fmt.Sprintf("%x", s[:8]) }

// Message is any stage-protocol message.
type Message interface {
	Type() Type
	encode(b *buf)
	decode(r *rd)
}

// Hop is one stage of a route.
type Hop struct {
	Peer   []byte // peer ID bytes
	Addrs  []string
	Shard  string // shard CID
	Start  uint16 // layers [Start, End)
	End    uint16
	HeadLo uint32 // output head rows [HeadLo, HeadHi); 0, 0 = whole head at the last layer
	HeadHi uint32
}

// DType of hidden states on the wire.
type DType uint8

const (
	F16 DType = 1
	F32 DType = 2
)

// Output is what the last hop returns.
type Output uint8

const (
	OutArgmax Output = 1 // one id per row
	OutSample Output = 2 // one id per row, drawn with the client's uniforms
	OutTopK   Output = 3 // K (id, logit) pairs per row
	OutLogits Output = 4 // all logits (big: for --logits-out and tests)
)

// Open starts a session along Route; the receiving hop is Route[Hop].
type Open struct {
	Session SessionID
	ModelID string
	Hop     uint8
	Route   []Hop
	Client  []byte // client peer ID
	Addrs   []string
	DType   DType
	Output  Output
	TopK    uint16
	Temp    float32
	TopP    float32
	MaxLen  uint32 // positions the client may use (KV reservation)
}

// Opened acknowledges Open for the chain from Hop on.
type Opened struct {
	Session SessionID
	Hop     uint8
}

// Payload kinds of a Forward.
const (
	KindTokens    uint8 = 1
	KindHiddenF16 uint8 = 2
	KindHiddenF32 uint8 = 3
)

// Cand is a candidate token of a partial or top-k output.
type Cand struct {
	ID    uint32
	Logit float32
}

// Timing is one hop's time for a Forward, in microseconds.
type Timing struct {
	Hop     uint8
	Queue   uint32
	Compute uint32
}

// Forward advances a session by NTok tokens at positions Pos...
type Forward struct {
	Session SessionID
	Seq     uint64
	Pos     uint32
	NTok    uint32
	All     bool  // outputs for every position, not only the last
	Kind    uint8 // KindTokens or a hidden-state kind
	Data    []byte
	// Partial holds, per output row, the best candidates of the head rows
	// that earlier hops computed (head split between hops).
	PartialK uint16
	Partial  []Cand
	// Uniform holds one number in [0, 1) per output row for OutSample.
	Uniform []float64
	Trace   []Timing
	// Tree, when set, makes the tokens a tree of drafts (ovrt.Step.Tree):
	// token i follows token Tree[i], or position Pos-1 when it is -1.
	// It is encoded last and only when set, so a frame without it is the
	// same bytes as before trees existed.
	Tree []int32
	// Walk, when set, lets the last hop compute the output rows of one
	// path only (ovrt.Walk), encoded after Tree.
	Walk *Walk
}

// Walk asks the last hop for the output rows that a speculative decoder
// reads, and no others: from row From, each row's output token leads to
// the row's child (in Tree, or the next row without a tree) that has that
// token in IDs, until no child does. IDs are the step's token ids, which
// hops after the first do not otherwise see. Rows off the walk come back
// as NoID. A hop that outputs logits or top-k, or holds only part of the
// head, computes every row instead, as it would without Walk.
type Walk struct {
	From uint32
	IDs  []uint32
}

// NoID marks a Result row that the last hop did not compute (Walk).
const NoID = ^uint32(0)

// Result kinds.
const (
	ResultIDs    uint8 = 1
	ResultTopK   uint8 = 2
	ResultLogits uint8 = 3
)

// Result is the last hop's answer to a Forward, sent to the client.
type Result struct {
	Session SessionID
	Seq     uint64
	Pos     uint32
	Rows    uint32
	Kind    uint8
	IDs     []uint32
	K       uint16
	Cands   []Cand
	Logits  []float32
	Trace   []Timing
}

// Close ends a session; each hop passes it on and frees the session.
type Close struct {
	Session SessionID
	Reason  uint8
}

// Credit grants a sender permission for N more Forwards (backpressure).
type Credit struct {
	Session SessionID
	N       uint32
}

func (*Open) Type() Type    { return TypeOpen }
func (*Opened) Type() Type  { return TypeOpened }
func (*Forward) Type() Type { return TypeForward }
func (*Result) Type() Type  { return TypeResult }
func (*Error) Type() Type   { return TypeError }
func (*Close) Type() Type   { return TypeClose }
func (*Credit) Type() Type  { return TypeCredit }

// Limits enforced while decoding, beyond the frame size.
const (
	maxHops   = 64
	maxAddrs  = 32
	maxString = 4096
	maxTrace  = 64
)

// ErrBadFrame is wrapped by every decoding error.
var ErrBadFrame = errors.New("wire: malformed frame")

// ErrFrameTooLarge is returned for a frame over the reader's limit.
var ErrFrameTooLarge = errors.New("wire: frame too large")

// Encode appends m's frame to dst.
func Encode(dst []byte, m Message) []byte {
	b := buf{b: dst}
	start := len(b.b)
	b.u32(0)
	b.u8(uint8(m.Type()))
	m.encode(&b)
	binary.LittleEndian.PutUint32(b.b[start:], uint32(len(b.b)-start-4))
	return b.b
}

// Write writes m as one frame.
func Write(w io.Writer, m Message) error {
	_, err := w.Write(Encode(nil, m))
	return err
}

// Decode decodes one frame body (type byte and fields).
func Decode(body []byte) (Message, error) {
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrBadFrame)
	}
	var m Message
	switch Type(body[0]) {
	case TypeOpen:
		m = new(Open)
	case TypeOpened:
		m = new(Opened)
	case TypeForward:
		m = new(Forward)
	case TypeResult:
		m = new(Result)
	case TypeError:
		m = new(Error)
	case TypeClose:
		m = new(Close)
	case TypeCredit:
		m = new(Credit)
	default:
		return nil, fmt.Errorf("%w: unknown message type %d", ErrBadFrame, body[0])
	}
	r := rd{b: body[1:]}
	m.decode(&r)
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v: %v", ErrBadFrame, m.Type(), r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %v: %d trailing bytes", ErrBadFrame, m.Type(), len(r.b))
	}
	return m, nil
}

// Reader reads frames from a stream.
type Reader struct {
	r   io.Reader
	max int
}

// NewReader returns a reader refusing frames over max bytes (0: default).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	return &Reader{r: r, max: max}
}

// Read reads and decodes the next frame. io.EOF means the stream ended
// cleanly between frames.
func (r *Reader) Read() (Message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if n > r.max || n < 0 {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, r.max)
	}
	// A fresh buffer per frame: decoded messages keep slices of it.
	body := make([]byte, n)
	if _, err := io.ReadFull(r.r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return Decode(body)
}

// buf is an append-only encoder.
type buf struct{ b []byte }

func (b *buf) u8(v uint8)    { b.b = append(b.b, v) }
func (b *buf) u16(v uint16)  { b.b = binary.LittleEndian.AppendUint16(b.b, v) }
func (b *buf) u32(v uint32)  { b.b = binary.LittleEndian.AppendUint32(b.b, v) }
func (b *buf) u64(v uint64)  { b.b = binary.LittleEndian.AppendUint64(b.b, v) }
func (b *buf) f32(v float32) { b.u32(math.Float32bits(v)) }
func (b *buf) f64(v float64) { b.u64(math.Float64bits(v)) }
func (b *buf) bytes16(v []byte) {
	b.u16(uint16(len(v)))
	b.b = append(b.b, v...)
}
func (b *buf) str(v string) { b.bytes16([]byte(v)) }
func (b *buf) bool(v bool) {
	if v {
		b.u8(1)
	} else {
		b.u8(0)
	}
}
func (b *buf) strs(v []string) {
	b.u8(uint8(len(v)))
	for _, s := range v {
		b.str(s)
	}
}
func (b *buf) sess(s SessionID) { b.b = append(b.b, s[:]...) }
func (b *buf) trace(t []Timing) {
	b.u8(uint8(len(t)))
	for _, x := range t {
		b.u8(x.Hop)
		b.u32(x.Queue)
		b.u32(x.Compute)
	}
}
func (b *buf) cands(c []Cand) {
	for _, x := range c {
		b.u32(x.ID)
		b.f32(x.Logit)
	}
}

// rd is a bounds-checked decoder; the first error sticks.
type rd struct {
	b   []byte
	err error
}

func (r *rd) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *rd) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("needs %d bytes, %d left", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *rd) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}
func (r *rd) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}
func (r *rd) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}
func (r *rd) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}
func (r *rd) f32() float32 { return math.Float32frombits(r.u32()) }
func (r *rd) f64() float64 { return math.Float64frombits(r.u64()) }
func (r *rd) bytes16(max int) []byte {
	n := int(r.u16())
	if n > max {
		r.fail("string of %d bytes exceeds %d", n, max)
		return nil
	}
	return r.take(n)
}
func (r *rd) str(max int) string { return string(r.bytes16(max)) }
func (r *rd) bool() bool {
	switch r.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("bad boolean")
	return false
}
func (r *rd) strs() []string {
	n := int(r.u8())
	if n > maxAddrs {
		r.fail("%d addresses exceeds %d", n, maxAddrs)
		return nil
	}
	var out []string
	for range n {
		out = append(out, r.str(maxString))
	}
	return out
}
func (r *rd) sess() (s SessionID) {
	copy(s[:], r.take(16))
	return s
}
func (r *rd) trace() []Timing {
	n := int(r.u8())
	if n > maxTrace {
		r.fail("trace of %d hops exceeds %d", n, maxTrace)
		return nil
	}
	var out []Timing
	for range n {
		out = append(out, Timing{Hop: r.u8(), Queue: r.u32(), Compute: r.u32()})
	}
	return out
}
func (r *rd) cands(n int) []Cand {
	if n < 0 || n*8 > len(r.b) {
		r.fail("%d candidates, %d bytes left", n, len(r.b))
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]Cand, n)
	for i := range out {
		out[i] = Cand{ID: r.u32(), Logit: r.f32()}
	}
	return out
}

func (m *Open) encode(b *buf) {
	b.sess(m.Session)
	b.str(m.ModelID)
	b.u8(m.Hop)
	b.u8(uint8(len(m.Route)))
	for _, h := range m.Route {
		b.bytes16(h.Peer)
		b.strs(h.Addrs)
		b.str(h.Shard)
		b.u16(h.Start)
		b.u16(h.End)
		b.u32(h.HeadLo)
		b.u32(h.HeadHi)
	}
	b.bytes16(m.Client)
	b.strs(m.Addrs)
	b.u8(uint8(m.DType))
	b.u8(uint8(m.Output))
	b.u16(m.TopK)
	b.f32(m.Temp)
	b.f32(m.TopP)
	b.u32(m.MaxLen)
}

func (m *Open) decode(r *rd) {
	m.Session = r.sess()
	m.ModelID = r.str(maxString)
	m.Hop = r.u8()
	n := int(r.u8())
	if n == 0 || n > maxHops {
		r.fail("route of %d hops", n)
		return
	}
	for range n {
		h := Hop{Peer: r.bytes16(maxString), Addrs: r.strs(), Shard: r.str(maxString),
			Start: r.u16(), End: r.u16(), HeadLo: r.u32(), HeadHi: r.u32()}
		m.Route = append(m.Route, h)
	}
	m.Client = r.bytes16(maxString)
	m.Addrs = r.strs()
	m.DType = DType(r.u8())
	m.Output = Output(r.u8())
	m.TopK = r.u16()
	m.Temp = r.f32()
	m.TopP = r.f32()
	m.MaxLen = r.u32()
	switch {
	case int(m.Hop) >= len(m.Route) && r.err == nil:
		r.fail("hop %d of a %d-hop route", m.Hop, len(m.Route))
	case m.DType != F16 && m.DType != F32:
		r.fail("dtype %d", m.DType)
	case m.Output < OutArgmax || m.Output > OutLogits:
		r.fail("output %d", m.Output)
	}
}

func (m *Opened) encode(b *buf) { b.sess(m.Session); b.u8(m.Hop) }
func (m *Opened) decode(r *rd)  { m.Session = r.sess(); m.Hop = r.u8() }

func (m *Forward) encode(b *buf) {
	b.sess(m.Session)
	b.u64(m.Seq)
	b.u32(m.Pos)
	b.u32(m.NTok)
	b.bool(m.All)
	b.u8(m.Kind)
	b.u32(uint32(len(m.Data)))
	b.b = append(b.b, m.Data...)
	b.u16(m.PartialK)
	b.u32(uint32(len(m.Partial)))
	b.cands(m.Partial)
	b.u32(uint32(len(m.Uniform)))
	for _, u := range m.Uniform {
		b.f64(u)
	}
	b.trace(m.Trace)
	if len(m.Tree) > 0 || m.Walk != nil {
		b.u32(uint32(len(m.Tree))) // 0: no tree, but a walk follows
		for _, p := range m.Tree {
			b.u32(uint32(p + 1))
		}
	}
	if m.Walk != nil {
		b.u32(m.Walk.From)
		b.u32(uint32(len(m.Walk.IDs)))
		for _, id := range m.Walk.IDs {
			b.u32(id)
		}
	}
}

func (m *Forward) decode(r *rd) {
	m.Session = r.sess()
	m.Seq = r.u64()
	m.Pos = r.u32()
	m.NTok = r.u32()
	m.All = r.bool()
	m.Kind = r.u8()
	m.Data = r.take(int(r.u32()))
	m.PartialK = r.u16()
	m.Partial = r.cands(int(r.u32()))
	nu := int(r.u32())
	if nu*8 > len(r.b) {
		r.fail("%d uniforms, %d bytes left", nu, len(r.b))
		return
	}
	for range nu {
		m.Uniform = append(m.Uniform, r.f64())
	}
	m.Trace = r.trace()
	if r.err == nil && len(r.b) > 0 {
		nt := int(r.u32())
		if nt == 0 && len(r.b) == 0 || nt*4 > len(r.b) {
			r.fail("tree of %d parents, %d bytes left", nt, len(r.b))
			return
		}
		if nt > 0 {
			m.Tree = make([]int32, nt)
		}
		for i := range m.Tree {
			p := int64(r.u32()) - 1
			if p >= int64(i) {
				r.fail("tree node %d's parent is %d: parents come first", i, p)
				return
			}
			m.Tree[i] = int32(p)
		}
	}
	if r.err == nil && len(r.b) > 0 {
		m.Walk = &Walk{From: r.u32()}
		n := int(r.u32())
		if n*4 > len(r.b) {
			r.fail("walk of %d ids, %d bytes left", n, len(r.b))
			return
		}
		m.Walk.IDs = make([]uint32, n)
		for i := range m.Walk.IDs {
			m.Walk.IDs[i] = r.u32()
		}
	}
	if r.err != nil {
		return
	}
	rows := 1
	if m.All {
		rows = int(m.NTok)
	}
	switch {
	case m.NTok == 0:
		r.fail("no tokens")
	case m.Kind == KindTokens && len(m.Data) != 4*int(m.NTok):
		r.fail("%d bytes for %d token ids", len(m.Data), m.NTok)
	case m.Kind != KindTokens && m.Kind != KindHiddenF16 && m.Kind != KindHiddenF32:
		r.fail("payload kind %d", m.Kind)
	case len(m.Partial) != rows*int(m.PartialK):
		r.fail("%d partial candidates for %d rows of %d", len(m.Partial), rows, m.PartialK)
	case len(m.Uniform) != 0 && len(m.Uniform) != rows:
		r.fail("%d uniforms for %d rows", len(m.Uniform), rows)
	case m.Tree != nil && len(m.Tree) != int(m.NTok):
		r.fail("tree of %d parents for %d tokens", len(m.Tree), m.NTok)
	case m.Walk != nil && (!m.All || len(m.Walk.IDs) != int(m.NTok) || m.Walk.From >= m.NTok):
		r.fail("walk from row %d with %d ids for %d tokens (all rows: %v)", m.Walk.From, len(m.Walk.IDs), m.NTok, m.All)
	}
}

// Rows returns how many output rows the Forward asks for.
func (m *Forward) Rows() int {
	if m.All {
		return int(m.NTok)
	}
	return 1
}

// Tokens returns the token ids of a KindTokens payload.
func (m *Forward) Tokens() []int32 {
	ids := make([]int32, m.NTok)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint32(m.Data[4*i:]))
	}
	return ids
}

// SetTokens sets a KindTokens payload.
func (m *Forward) SetTokens(ids []int32) {
	m.Kind = KindTokens
	m.NTok = uint32(len(ids))
	m.Data = make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(m.Data[4*i:], uint32(id))
	}
}

func (m *Result) encode(b *buf) {
	b.sess(m.Session)
	b.u64(m.Seq)
	b.u32(m.Pos)
	b.u32(m.Rows)
	b.u8(m.Kind)
	switch m.Kind {
	case ResultIDs:
		for _, id := range m.IDs {
			b.u32(id)
		}
	case ResultTopK:
		b.u16(m.K)
		b.cands(m.Cands)
	case ResultLogits:
		b.u32(uint32(len(m.Logits)))
		for _, v := range m.Logits {
			b.f32(v)
		}
	}
	b.trace(m.Trace)
}

func (m *Result) decode(r *rd) {
	m.Session = r.sess()
	m.Seq = r.u64()
	m.Pos = r.u32()
	m.Rows = r.u32()
	m.Kind = r.u8()
	rows := int(m.Rows)
	switch m.Kind {
	case ResultIDs:
		if rows*4 > len(r.b) {
			r.fail("%d ids, %d bytes left", rows, len(r.b))
			return
		}
		m.IDs = make([]uint32, rows)
		for i := range m.IDs {
			m.IDs[i] = r.u32()
		}
	case ResultTopK:
		m.K = r.u16()
		m.Cands = r.cands(rows * int(m.K))
	case ResultLogits:
		n := int(r.u32())
		if n*4 > len(r.b) || (rows > 0 && n%rows != 0) {
			r.fail("%d logits for %d rows, %d bytes left", n, rows, len(r.b))
			return
		}
		m.Logits = make([]float32, n)
		for i := range m.Logits {
			m.Logits[i] = r.f32()
		}
	default:
		r.fail("result kind %d", m.Kind)
	}
	m.Trace = r.trace()
}

func (m *Close) encode(b *buf)  { b.sess(m.Session); b.u8(m.Reason) }
func (m *Close) decode(r *rd)   { m.Session = r.sess(); m.Reason = r.u8() }
func (m *Credit) encode(b *buf) { b.sess(m.Session); b.u32(m.N) }
func (m *Credit) decode(r *rd)  { m.Session = r.sess(); m.N = r.u32() }
