package status

import "errors"

// Sentinel errors. Every error this package returns about a record wraps
// one of them, so callers test with errors.Is.
var (
	// ErrBadRecord reports bytes that do not decode to a valid record, or
	// a Record whose fields are out of bounds.
	ErrBadRecord = errors.New("status: malformed record")
	// ErrUnsupportedVersion reports a well-signed record in an encoding
	// version this package does not know (a newer publisher).
	ErrUnsupportedVersion = errors.New("status: unsupported record version")
	// ErrTooLarge reports a message longer than MaxMessageSize.
	ErrTooLarge = errors.New("status: message too large")
	// ErrBadSignature reports an envelope whose signature does not verify
	// for the status domain.
	ErrBadSignature = errors.New("status: bad signature")
	// ErrWrongSigner reports a record signed by a key other than the one
	// of the peer it names: a node announcing for another.
	ErrWrongSigner = errors.New("status: record signed by another peer")
	// ErrWrongSender reports a pubsub message whose author is not the
	// peer its record names.
	ErrWrongSender = errors.New("status: record published by another peer")
	// ErrWrongModel reports a record for another model than the topic's.
	ErrWrongModel = errors.New("status: record for another model")
	// ErrReplay reports a record whose Seq is not above the last one seen
	// from its peer.
	ErrReplay = errors.New("status: sequence number not newer than last seen")
	// ErrClockSkew reports a record whose Time is further than
	// MaxClockSkew from the receiver's clock.
	ErrClockSkew = errors.New("status: record time too far from local clock")
	// ErrTableFull reports a record from a new peer when MaxTracked peers
	// are already tracked.
	ErrTableFull = errors.New("status: too many tracked peers")
	// ErrRunning reports a second call of Run.
	ErrRunning = errors.New("status: already running")
)
