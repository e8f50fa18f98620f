package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Tracker follows one model's status topic and keeps the latest live
// record of each peer.
//
// NewTracker joins the topic, registers the topic's validator and
// subscribes; Run consumes the subscription until its context ends and
// then undoes all three. The validator runs on pubsub's goroutines, Run on
// the caller's; mu guards table and changed; the counters are atomic. All
// methods are safe for concurrent use.
type Tracker struct {
	modelID string
	ttl     time.Duration
	clock   Clock
	log     *slog.Logger

	ps      *pubsub.PubSub // nil in tests that feed receive directly
	sub     *pubsub.Subscription
	release func()

	running                     atomic.Bool
	accepted, rejected, ignored atomic.Uint64

	mu      sync.Mutex
	table   *Table
	changed chan struct{} // closed and replaced when a record is accepted
}

// Stats counts what a Tracker did with the messages it saw.
type Stats struct {
	Accepted uint64 // records stored
	Rejected uint64 // messages the validator rejected: malformed, badly signed, for another peer or model
	Ignored  uint64 // valid messages not stored: replayed, skewed, unknown version, table full
}

// NewTracker returns a Tracker of modelID's status topic on ps whose
// records live for ttl after they arrive. It registers ps's validator of
// that topic, so there can be one Tracker per model per PubSub. A nil clock
// is RealClock. Call Run.
func NewTracker(ps *pubsub.PubSub, modelID string, ttl time.Duration, clock Clock) (*Tracker, error) {
	t, err := newTracker(modelID, ttl, clock)
	if err != nil {
		return nil, err
	}
	name := Topic(modelID)
	topic, release, err := joinTopic(ps, name)
	if err != nil {
		return nil, fmt.Errorf("status: join %s: %w", name, err)
	}
	if err := ps.RegisterTopicValidator(name, t.validate); err != nil {
		release()
		return nil, fmt.Errorf("status: validator for %s: %w", name, err)
	}
	sub, err := topic.Subscribe()
	if err != nil {
		_ = ps.UnregisterTopicValidator(name)
		release()
		return nil, fmt.Errorf("status: subscribe %s: %w", name, err)
	}
	t.ps, t.sub, t.release = ps, sub, release
	return t, nil
}

func newTracker(modelID string, ttl time.Duration, clock Clock) (*Tracker, error) {
	switch {
	case modelID == "" || len(modelID) > MaxIDLen:
		return nil, fmt.Errorf("%w: model ID %q", ErrBadRecord, modelID)
	case ttl <= 0:
		return nil, fmt.Errorf("status: ttl %v", ttl)
	}
	return &Tracker{
		modelID: modelID, ttl: ttl, clock: clockOr(clock),
		log:     logger().With("model", modelID),
		table:   NewTable(ttl),
		changed: make(chan struct{}),
	}, nil
}

// Run stores the records the subscription delivers until ctx ends, then
// unsubscribes, unregisters the validator, leaves the topic and returns
// ctx's error. Run may be called once (ErrRunning after).
func (t *Tracker) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	if t.sub == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	defer func() {
		t.sub.Cancel()
		_ = t.ps.UnregisterTopicValidator(t.sub.Topic())
		t.release()
	}()
	for {
		msg, err := t.sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("status: subscription: %w", err)
		}
		if rec, ok := msg.ValidatorData.(Record); ok {
			_ = t.observe(rec)
		} else {
			_ = t.receive(msg.Data, peer.ID(msg.GetFrom()))
		}
	}
}

// validate is the topic validator: it rejects messages that do not
// decode, verify, or match their author and model, so that they are not
// propagated, and ignores valid ones that the table would not store. It
// hands the decoded record to Run in ValidatorData.
func (t *Tracker) validate(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	rec, err := t.check(msg.Data, peer.ID(msg.GetFrom()))
	if err != nil {
		return t.verdict(err)
	}
	msg.ValidatorData = rec
	return pubsub.ValidationAccept
}

// check decodes data, published by author (empty if pubsub does not sign
// messages), and reports whether the table would store it.
func (t *Tracker) check(data []byte, author peer.ID) (Record, error) {
	rec, err := Decode(data)
	if err != nil {
		return Record{}, err
	}
	if rec.ModelID != t.modelID {
		return Record{}, fmt.Errorf("%w: %q on the topic of %q", ErrWrongModel, rec.ModelID, t.modelID)
	}
	if author != "" && author != rec.PeerID {
		return Record{}, fmt.Errorf("%w: record of %s published by %s", ErrWrongSender, rec.PeerID, author)
	}
	t.mu.Lock()
	err = t.table.Check(&rec, t.clock.Now())
	t.mu.Unlock()
	return rec, err
}

// verdict counts err and maps it to a validation result.
func (t *Tracker) verdict(err error) pubsub.ValidationResult {
	if errors.Is(err, ErrReplay) || errors.Is(err, ErrClockSkew) ||
		errors.Is(err, ErrTableFull) || errors.Is(err, ErrUnsupportedVersion) {
		t.ignored.Add(1)
		t.log.Debug("ignoring status", "err", err)
		return pubsub.ValidationIgnore
	}
	t.rejected.Add(1)
	t.log.Debug("rejecting status", "err", err)
	return pubsub.ValidationReject
}

// receive checks and stores one message: the path of messages that did
// not pass the validator, and of tests without pubsub.
func (t *Tracker) receive(data []byte, author peer.ID) error {
	rec, err := t.check(data, author)
	if err != nil {
		t.verdict(err)
		return err
	}
	return t.observe(rec)
}

func (t *Tracker) observe(rec Record) error {
	t.mu.Lock()
	err := t.table.Observe(rec, t.clock.Now())
	if err == nil {
		close(t.changed)
		t.changed = make(chan struct{})
	}
	t.mu.Unlock()
	if err != nil {
		t.verdict(err)
		return err
	}
	t.accepted.Add(1)
	return nil
}

// Records returns the live records, sorted by PeerID.
func (t *Tracker) Records() []Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.table.Live(t.clock.Now())
}

// Get returns id's live record.
func (t *Tracker) Get(id peer.ID) (Record, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.table.Get(id, t.clock.Now())
}

// Changed returns a channel that is closed when the next record is
// stored. Expiry does not close it; Wait sees expiry too.
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// Stats returns the counts of accepted, rejected and ignored messages.
func (t *Tracker) Stats() Stats {
	return Stats{Accepted: t.accepted.Load(), Rejected: t.rejected.Load(), Ignored: t.ignored.Load()}
}

// Wait blocks until pred holds for the live records, re-evaluating it
// whenever a record is stored or expires, or until ctx ends (returning
// ctx's error). pred runs on the caller's goroutine without the Tracker's
// lock held, and gets a copy of the records.
func (t *Tracker) Wait(ctx context.Context, pred func([]Record) bool) error {
	for {
		t.mu.Lock()
		now := t.clock.Now()
		recs := t.table.Live(now)
		next, expires := t.table.NextExpiry(now)
		changed := t.changed
		t.mu.Unlock()
		if pred(recs) {
			return nil
		}
		var expired <-chan time.Time
		var timer Timer
		if expires {
			timer = t.clock.NewTimer(next.Sub(now))
			expired = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-expired:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
