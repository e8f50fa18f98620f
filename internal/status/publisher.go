package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultPublishEvery and DefaultTTL are the timing the package documents:
// a record every 2 s, forgotten 10 s after the last one arrived, so that
// a live node survives three lost records in a row.
const (
	DefaultPublishEvery = 2 * time.Second
	DefaultTTL          = 10 * time.Second
)

// Publisher publishes the local node's signed status on its model's topic.
//
// Run's goroutine alone publishes and touches seq; Poke may be called from
// any goroutine.
type Publisher struct {
	modelID  string
	every    time.Duration
	snapshot func() Record
	clock    Clock
	key      crypto.PrivKey
	self     peer.ID
	addrs    func() []string
	send     func(context.Context, []byte) error
	release  func() // releases the topic handle; nil without pubsub
	log      *slog.Logger

	poke    chan struct{}
	running atomic.Bool
	seq     uint64
}

// NewPublisher returns a Publisher of h's status for modelID on ps, every
// period. snapshot is called from Run's goroutine before each publication
// and returns the fields the node knows; the Publisher fills PeerID,
// ModelID, Seq and Time, and Addrs from h when snapshot leaves it empty.
// A nil clock is RealClock.
func NewPublisher(ps *pubsub.PubSub, h host.Host, modelID string, every time.Duration, snapshot func() Record, clock Clock) (*Publisher, error) {
	key := h.Peerstore().PrivKey(h.ID())
	if key == nil {
		return nil, fmt.Errorf("status: no private key for host %s", h.ID())
	}
	addrs := func() []string {
		var out []string
		for _, a := range h.Addrs() {
			if len(out) == MaxAddrs {
				break
			}
			if b := a.Bytes(); len(b) > 0 && len(b) <= MaxAddrLen {
				out = append(out, a.String())
			}
		}
		return out
	}
	p, err := newPublisher(key, modelID, every, snapshot, clock, addrs, nil)
	if err != nil {
		return nil, err
	}
	t, release, err := joinTopic(ps, Topic(modelID))
	if err != nil {
		return nil, fmt.Errorf("status: join %s: %w", Topic(modelID), err)
	}
	p.send = func(ctx context.Context, b []byte) error { return t.Publish(ctx, b) }
	p.release = release
	return p, nil
}

func newPublisher(key crypto.PrivKey, modelID string, every time.Duration, snapshot func() Record, clock Clock,
	addrs func() []string, send func(context.Context, []byte) error) (*Publisher, error) {
	switch {
	case modelID == "" || len(modelID) > MaxIDLen:
		return nil, fmt.Errorf("%w: model ID %q", ErrBadRecord, modelID)
	case every <= 0:
		return nil, fmt.Errorf("status: publish period %v", every)
	case snapshot == nil:
		return nil, errors.New("status: nil snapshot func")
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("status: signing key: %w", err)
	}
	clock = clockOr(clock)
	return &Publisher{
		modelID: modelID, every: every, snapshot: snapshot, clock: clock,
		key: key, self: self, addrs: addrs, send: send,
		log:  logger().With("peer", self, "model", modelID),
		poke: make(chan struct{}, 1),
		// Seq starts at the clock's Unix nanoseconds, so that a restarted
		// node's records are newer than those it sent before (as with
		// go-libp2p's peer records).
		seq: uint64(max(clock.Now().UnixNano(), 0)),
	}, nil
}

// Poke asks Run to publish now, without waiting for the next period; for
// example when the node starts draining. Pokes that arrive while one is
// pending coalesce.
func (p *Publisher) Poke() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// Run publishes at once, then every period and on each Poke, until ctx
// ends; then it leaves the topic and returns ctx's error. A failure to
// publish is logged and retried at the next period. Run may be called
// once (ErrRunning after).
func (p *Publisher) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	if p.release != nil {
		defer p.release()
	}
	tick := p.clock.NewTicker(p.every)
	defer tick.Stop()
	for {
		if err := p.publish(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("publish status", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C():
		case <-p.poke:
		}
	}
}

// next returns the record to publish now.
func (p *Publisher) next() Record {
	r := p.snapshot()
	now := p.clock.Now()
	p.seq = max(p.seq+1, uint64(max(now.UnixNano(), 0)))
	r.Seq = p.seq
	r.PeerID, r.ModelID, r.Time = p.self, p.modelID, now
	if len(r.Addrs) == 0 && p.addrs != nil {
		r.Addrs = p.addrs()
	}
	return r
}

func (p *Publisher) publish(ctx context.Context) error {
	r := p.next()
	b, err := Encode(r, p.key)
	if err != nil {
		return err
	}
	return p.send(ctx, b)
}
