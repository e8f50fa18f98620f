package status

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// sent collects what a Publisher under test publishes, with the bubble's
// time of each.
type sent struct {
	mu   sync.Mutex
	recs []Record
	at   []time.Time
}

func (s *sent) send(_ context.Context, b []byte) error {
	r, err := Decode(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	s.at = append(s.at, time.Now())
	return nil
}

func (s *sent) times(t0 time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, at := range s.at {
		out = append(out, at.Sub(t0))
	}
	return out
}

func testPublisher(tb testing.TB, key crypto.PrivKey, every time.Duration, snapshot func() Record,
	send func(context.Context, []byte) error) *Publisher {
	tb.Helper()
	p, err := newPublisher(key, "bafymodel", every, snapshot, nil,
		func() []string { return []string{"/ip4/127.0.0.1/tcp/4001"} }, send)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestPublisherTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key, id := testKey(t, 1)
		var s sent
		p := testPublisher(t, key, 2*time.Second, func() Record { return Record{Start: 0, End: 4} }, s.send)
		t0 := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		for range 3 {
			p.Poke() // pending pokes coalesce into one publication
		}
		go func() { done <- p.Run(ctx) }()

		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		p.Poke()
		synctest.Wait()
		time.Sleep(4*time.Second - 500*time.Millisecond)
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}

		want := []time.Duration{0, 0, 500 * time.Millisecond, 2 * time.Second, 4 * time.Second}
		if got := s.times(t0); !slices.Equal(got, want) {
			t.Fatalf("published at %v, want %v", got, want)
		}
		for i, r := range s.recs {
			if r.PeerID != id || r.ModelID != "bafymodel" || !r.Time.Equal(s.at[i]) ||
				len(r.Addrs) != 1 || r.End != 4 {
				t.Errorf("record %d: %+v", i, r)
			}
			if i > 0 && r.Seq <= s.recs[i-1].Seq {
				t.Errorf("seq %d after %d", r.Seq, s.recs[i-1].Seq)
			}
		}
		if err := p.Run(t.Context()); !errors.Is(err, ErrRunning) {
			t.Fatalf("second Run: %v", err)
		}
	})
}

// A restarted publisher's Seq continues above the old one's, since both
// start from the clock.
func TestPublisherSeqAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key, _ := testKey(t, 1)
		var s sent
		for range 2 {
			p := testPublisher(t, key, time.Hour, func() Record { return Record{} }, s.send)
			ctx, cancel := context.WithCancel(t.Context())
			go p.Run(ctx)
			synctest.Wait()
			cancel()
			synctest.Wait()
			time.Sleep(time.Millisecond)
		}
		if len(s.recs) != 2 || s.recs[1].Seq <= s.recs[0].Seq {
			t.Fatalf("seqs across a restart: %v", s.recs)
		}
	})
}

// A snapshot that does not validate is not published, and the next one is.
func TestPublisherBadSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key, _ := testKey(t, 1)
		var s sent
		var calls atomic.Int32
		p := testPublisher(t, key, time.Second, func() Record {
			if calls.Add(1) == 1 {
				return Record{Start: 5, End: 4}
			}
			return Record{}
		}, s.send)
		t0 := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		go p.Run(ctx)
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		if got, want := s.times(t0), []time.Duration{time.Second}; !slices.Equal(got, want) {
			t.Fatalf("published at %v, want %v", got, want)
		}
	})
}

func TestNewPublisherRefuses(t *testing.T) {
	key, _ := testKey(t, 1)
	snap := func() Record { return Record{} }
	for _, tc := range []struct {
		name  string
		model string
		every time.Duration
		snap  func() Record
	}{{"no model", "", time.Second, snap}, {"no period", "m", 0, snap}, {"no snapshot", "m", time.Second, nil}} {
		if _, err := newPublisher(key, tc.model, tc.every, tc.snap, nil, nil, nil); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
