package wire

import (
	"errors"
	"fmt"
)

// ErrorCode identifies a stage error on the wire.
type ErrorCode uint16

// Sentinel errors a stage reports. Each has a code; a decoded Error
// matches the sentinel of its code with errors.Is.
var (
	ErrUnknownSession = errors.New("stage: unknown session")
	ErrPosition       = errors.New("stage: wrong position")
	ErrShape          = errors.New("stage: wrong payload shape or dtype")
	ErrTooLarge       = errors.New("stage: frame too large")
	ErrWrongShard     = errors.New("stage: this node does not serve that shard")
	ErrOverloaded     = errors.New("stage: node overloaded")
	ErrEvicted        = errors.New("stage: session evicted under memory pressure")
	ErrIdle           = errors.New("stage: session closed after idling")
	ErrContextFull    = errors.New("stage: position past the context length")
	ErrTokenRange     = errors.New("stage: token id outside the vocabulary")
	ErrDraining       = errors.New("stage: node is draining")
	ErrNextHop        = errors.New("stage: next hop unreachable")
	ErrInternal       = errors.New("stage: internal error")
	ErrClosed         = errors.New("stage: session closed")
	ErrProtocol       = errors.New("stage: protocol violation")
	ErrForbidden      = errors.New("stage: peer not allowed")
	ErrLimit          = errors.New("stage: per-peer limit reached")
)

var codes = []struct {
	code ErrorCode
	err  error
}{
	{1, ErrBadFrame}, {2, ErrUnknownSession}, {3, ErrPosition}, {4, ErrShape},
	{5, ErrTooLarge}, {6, ErrWrongShard}, {7, ErrOverloaded}, {8, ErrEvicted},
	{9, ErrIdle}, {10, ErrContextFull}, {11, ErrTokenRange}, {12, ErrDraining},
	{13, ErrNextHop}, {14, ErrInternal}, {15, ErrClosed}, {16, ErrProtocol},
	{17, ErrForbidden}, {18, ErrLimit},
}

// CodeOf returns the code of the first sentinel err wraps (ErrInternal's
// when none).
func CodeOf(err error) ErrorCode {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	if errors.Is(err, ErrFrameTooLarge) {
		return 5
	}
	return 14
}

// Sentinel returns the error of code c.
func (c ErrorCode) Sentinel() error {
	for _, x := range codes {
		if x.code == c {
			return x.err
		}
	}
	return ErrInternal
}

// Error is a stage's error report: which hop, what kind, and its message.
type Error struct {
	Session SessionID
	Seq     uint64
	Hop     uint8
	Code    ErrorCode
	Msg     string
}

// NewError wraps err for the wire. An error that is already a stage's
// report (a later hop's, passed back) keeps its hop, code and message, so
// the client learns which hop failed, not which one told it.
func NewError(s SessionID, seq uint64, hop uint8, err error) *Error {
	if e, ok := err.(*Error); ok {
		out := *e
		out.Session, out.Seq = s, seq
		return &out
	}
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return &Error{Session: s, Seq: seq, Hop: hop, Code: CodeOf(err), Msg: msg}
}

func (e *Error) Error() string { return fmt.Sprintf("hop %d: %s", e.Hop, e.Msg) }

// Is makes a remote error match its sentinel.
func (e *Error) Is(target error) bool { return target == e.Code.Sentinel() }

func (e *Error) encode(b *buf) {
	b.sess(e.Session)
	b.u64(e.Seq)
	b.u8(e.Hop)
	b.u16(uint16(e.Code))
	b.str(e.Msg)
}

func (e *Error) decode(r *rd) {
	e.Session = r.sess()
	e.Seq = r.u64()
	e.Hop = r.u8()
	e.Code = ErrorCode(r.u16())
	e.Msg = r.str(maxString)
}
