package status

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// These tests run real hosts on loopback; time is real, so they only wait
// for conditions (bounded by the test's context), never assert durations.

func newHost(tb testing.TB) host.Host {
	tb.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

func newGossipSub(tb testing.TB, h host.Host) *pubsub.PubSub {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	params := pubsub.DefaultGossipSubParams()
	params.HeartbeatInitialDelay = 10 * time.Millisecond
	params.HeartbeatInterval = 100 * time.Millisecond
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithGossipSubParams(params))
	if err != nil {
		tb.Fatal(err)
	}
	return ps
}

func connect(tb testing.TB, ctx context.Context, a, b host.Host) {
	tb.Helper()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		tb.Fatal(err)
	}
}

// eventually polls cond until it holds or ctx ends.
func eventually(tb testing.TB, ctx context.Context, what string, cond func() bool) {
	tb.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// runBg runs f in a goroutine and returns a func that waits for it and
// checks that it ended with context.Canceled.
func runBg(tb testing.TB, f func() error) func() {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return func() {
		tb.Helper()
		if err := <-done; !errors.Is(err, context.Canceled) {
			tb.Errorf("Run: %v", err)
		}
	}
}

func has(id peer.ID, pred func(Record) bool) func([]Record) bool {
	return func(rs []Record) bool {
		i := slices.IndexFunc(rs, func(r Record) bool { return r.PeerID == id })
		return i >= 0 && (pred == nil || pred(rs[i]))
	}
}

// Three hosts in a line, h0 — h1 — h2. h0 has no validator and publishes
// forged records; h1's validator must reject them so that h2, reachable
// only through h1, never sees them. Valid records, a draining flag and
// h2's own record (its Publisher and Tracker share one PubSub) go through.
func TestGossip(t *testing.T) {
	const model = "bafymodel"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	h0, h1, h2 := newHost(t), newHost(t), newHost(t)
	ps0, ps1, ps2 := newGossipSub(t, h0), newGossipSub(t, h1), newGossipSub(t, h2)
	connect(t, ctx, h0, h1)
	connect(t, ctx, h1, h2)

	runCtx, stop := context.WithCancel(ctx)
	tr1, err := NewTracker(ps1, model, DefaultTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := NewTracker(ps2, model, DefaultTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTracker(ps2, model, DefaultTTL, nil); err == nil {
		t.Fatal("a second Tracker of one model on one PubSub")
	}
	pub2, err := NewPublisher(ps2, h2, model, 100*time.Millisecond, func() Record { return Record{End: 2} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	waits := []func(){runBg(t, func() error { return tr1.Run(runCtx) }),
		runBg(t, func() error { return tr2.Run(runCtx) }), runBg(t, func() error { return pub2.Run(runCtx) })}

	raw, release, err := joinTopic(ps0, Topic(model))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	eventually(t, ctx, "h0 to see h1 on the topic", func() bool { return slices.Contains(raw.ListPeers(), h1.ID()) })
	eventually(t, ctx, "h1 to see h2 on the topic", func() bool { return slices.Contains(ps1.ListPeers(Topic(model)), h2.ID()) })

	key0 := h0.Peerstore().PrivKey(h0.ID())
	now := time.Now()
	claim := sample(h2.ID()) // h0 announcing for h2
	claim.ModelID, claim.Time, claim.Seq = model, now, uint64(now.UnixNano())*2
	if err := raw.Publish(ctx, seal(t, claim, key0)); err != nil {
		t.Fatal(err)
	}
	keyX, idX := testKey(t, 9) // a genuine record of X, published by h0
	relayed := sample(idX)
	relayed.ModelID, relayed.Time = model, now
	b, err := Encode(relayed, keyX)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Publish(ctx, b); err != nil {
		t.Fatal(err)
	}

	var draining atomic.Bool
	pub0, err := NewPublisher(ps0, h0, model, 100*time.Millisecond, func() Record {
		return Record{Start: 0, End: 2, Draining: draining.Load()}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waits = append(waits, runBg(t, func() error { return pub0.Run(runCtx) }))

	for _, tr := range []*Tracker{tr1, tr2} {
		for _, id := range []peer.ID{h0.ID(), h2.ID()} {
			if err := tr.Wait(ctx, has(id, nil)); err != nil {
				t.Fatalf("waiting for %s: %v", id, err)
			}
		}
	}
	eventually(t, ctx, "h1 to reject both forgeries", func() bool { return tr1.Stats().Rejected >= 2 })
	if r, _ := tr2.Get(h2.ID()); r.Seq == claim.Seq || r.End != 2 {
		t.Errorf("h2's record at h2 is the forgery: %+v", r)
	}
	if r, _ := tr1.Get(h2.ID()); r.Seq == claim.Seq || r.End != 2 {
		t.Errorf("h2's record at h1 is the forgery: %+v", r)
	}
	for i, tr := range []*Tracker{tr1, tr2} {
		if _, ok := tr.Get(idX); ok {
			t.Errorf("tracker %d stored X's relayed record", i+1)
		}
	}
	if s := tr2.Stats(); s.Rejected != 0 {
		t.Errorf("h2 rejected %d messages: h1 propagated forgeries", s.Rejected)
	}

	draining.Store(true)
	pub0.Poke()
	if err := tr2.Wait(ctx, has(h0.ID(), func(r Record) bool { return r.Draining })); err != nil {
		t.Fatalf("waiting for h0 to drain: %v", err)
	}

	// A genuine but old record of h0 is ignored, not stored.
	old := sample(h0.ID())
	old.ModelID, old.Time, old.Seq = model, time.Now(), 1
	if b, err = Encode(old, key0); err != nil {
		t.Fatal(err)
	}
	ignored := tr1.Stats().Ignored
	if err := raw.Publish(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "h1 to ignore the replay", func() bool { return tr1.Stats().Ignored > ignored })
	if r, ok := tr1.Get(h0.ID()); !ok || r.Seq == 1 {
		t.Errorf("h0's record at h1 after the replay: %+v, %v", r, ok)
	}

	stop()
	for _, w := range waits {
		w()
	}
	release()
	// Every component left the topic, so it can be joined afresh.
	for _, ps := range []*pubsub.PubSub{ps0, ps1, ps2} {
		topic, err := ps.Join(Topic(model))
		if err != nil {
			t.Fatalf("topic not released: %v", err)
		}
		topic.Close()
	}
}
