package status

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxClockSkew is how far a record's Time may be from the receiver's
// clock, either way, before the record is ignored (ErrClockSkew).
const MaxClockSkew = 5 * time.Minute

// MaxTracked is the number of peers a Table remembers at most; records
// from further peers are ignored (ErrTableFull) until some are forgotten.
const MaxTracked = 10000

// Table is the deterministic core of Tracker: the latest record of each
// peer, when it arrived, and which are live at a given time. It does no
// I/O and reads no clock; every method takes the current time. It is not
// safe for concurrent use.
//
// A record is live while younger than ttl by its arrival time. After it
// expires its peer's last Seq is still remembered, so that a replay of an
// old record cannot bring a silent peer back, until the record is older
// than ttl + 2·MaxClockSkew: by then any replay of it is refused as
// skewed.
type Table struct {
	ttl       time.Duration
	memory    time.Duration
	entries   map[peer.ID]*entry
	lastPrune time.Time
}

type entry struct {
	rec      Record
	received time.Time
}

// NewTable returns an empty Table whose records live for ttl.
func NewTable(ttl time.Duration) *Table {
	return &Table{ttl: ttl, memory: ttl + 2*MaxClockSkew, entries: make(map[peer.ID]*entry)}
}

// Check reports whether Observe(r, now) would accept r, without storing
// it (it may forget long-silent peers): ErrReplay, ErrClockSkew,
// ErrTableFull, or nil. It does not
// Validate r or check signatures; that is Decode's job.
func (t *Table) Check(r *Record, now time.Time) error {
	if e, ok := t.entries[r.PeerID]; ok && r.Seq <= e.rec.Seq {
		return fmt.Errorf("%w: seq %d from %s, last %d", ErrReplay, r.Seq, r.PeerID, e.rec.Seq)
	}
	if d := r.Time.Sub(now); d > MaxClockSkew || d < -MaxClockSkew {
		return fmt.Errorf("%w: %s is %v off", ErrClockSkew, r.PeerID, d)
	}
	if _, ok := t.entries[r.PeerID]; !ok && len(t.entries) >= MaxTracked {
		t.prune(now)
		if len(t.entries) >= MaxTracked {
			return fmt.Errorf("%w: %d", ErrTableFull, len(t.entries))
		}
	}
	return nil
}

// Observe records r as received at now, or returns why not (see Check).
func (t *Table) Observe(r Record, now time.Time) error {
	if err := t.Check(&r, now); err != nil {
		return err
	}
	r.Addrs = slices.Clone(r.Addrs)
	t.entries[r.PeerID] = &entry{rec: r, received: now}
	if now.Sub(t.lastPrune) >= t.ttl {
		t.prune(now)
	}
	return nil
}

// prune forgets peers whose last record is older than the Seq memory.
func (t *Table) prune(now time.Time) {
	t.lastPrune = now
	for id, e := range t.entries {
		if now.Sub(e.received) >= t.memory {
			delete(t.entries, id)
		}
	}
}

func (t *Table) live(e *entry, now time.Time) bool { return now.Sub(e.received) < t.ttl }

// Live returns the live records at now, sorted by PeerID.
func (t *Table) Live(now time.Time) []Record {
	var out []Record
	for _, e := range t.entries {
		if t.live(e, now) {
			r := e.rec
			r.Addrs = slices.Clone(r.Addrs)
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(string(a.PeerID), string(b.PeerID)) })
	return out
}

// Get returns id's record if it is live at now.
func (t *Table) Get(id peer.ID, now time.Time) (Record, bool) {
	e, ok := t.entries[id]
	if !ok || !t.live(e, now) {
		return Record{}, false
	}
	r := e.rec
	r.Addrs = slices.Clone(r.Addrs)
	return r, true
}

// NextExpiry returns when the first of the records live at now expires,
// and false if none is live.
func (t *Table) NextExpiry(now time.Time) (time.Time, bool) {
	var next time.Time
	found := false
	for _, e := range t.entries {
		if !t.live(e, now) {
			continue
		}
		if exp := e.received.Add(t.ttl); !found || exp.Before(next) {
			next, found = exp, true
		}
	}
	return next, found
}

// Len returns how many peers the table remembers, live or not.
func (t *Table) Len() int { return len(t.entries) }
