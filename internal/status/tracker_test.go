package status

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

func testTracker(tb testing.TB, ttl time.Duration) *Tracker {
	tb.Helper()
	tr, err := newTracker("bafymodel", ttl, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// A publisher feeding a tracker directly: the record appears, the
// draining flag follows a Poke at once, and the peer disappears exactly
// ttl after its last record once it falls silent.
func TestTrackerExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every, ttl = 2 * time.Second, 10 * time.Second
		key, id := testKey(t, 1)
		tr := testTracker(t, ttl)
		var draining atomic.Bool
		var last atomic.Int64 // bubble time of the last publication
		p := testPublisher(t, key, every, func() Record {
			return Record{End: 4, Draining: draining.Load()}
		}, func(_ context.Context, b []byte) error {
			last.Store(time.Now().UnixNano())
			return tr.receive(b, id)
		})
		ctx, cancel := context.WithCancel(t.Context())
		go p.Run(ctx)

		has := func(rs []Record) bool { return len(rs) == 1 && rs[0].PeerID == id }
		if err := tr.Wait(t.Context(), has); err != nil {
			t.Fatal(err)
		}
		if r, ok := tr.Get(id); !ok || r.Draining || r.End != 4 {
			t.Fatalf("Get: %+v, %v", r, ok)
		}

		time.Sleep(5 * time.Second)
		t0 := time.Now()
		draining.Store(true)
		p.Poke()
		if err := tr.Wait(t.Context(), func(rs []Record) bool { return has(rs) && rs[0].Draining }); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d != 0 {
			t.Fatalf("draining seen after %v, want at once", d)
		}

		time.Sleep(3 * time.Second)
		cancel()
		synctest.Wait()
		silent := time.Unix(0, last.Load())
		if err := tr.Wait(t.Context(), func(rs []Record) bool { return len(rs) == 0 }); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(silent); d != ttl {
			t.Fatalf("gone %v after the last record, want %v", d, ttl)
		}
		if _, ok := tr.Get(id); ok {
			t.Fatal("Get finds an expired record")
		}
		if s := tr.Stats(); s.Accepted < 5 || s.Rejected != 0 || s.Ignored != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestTrackerWaitContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := testTracker(t, time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		t0 := time.Now()
		if err := tr.Wait(ctx, func(rs []Record) bool { return len(rs) > 0 }); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait: %v", err)
		}
		if d := time.Since(t0); d != time.Minute {
			t.Fatalf("Wait returned after %v", d)
		}
	})
}

func TestTrackerChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key, id := testKey(t, 1)
		tr := testTracker(t, time.Minute)
		ch := tr.Changed()
		r := sample(id)
		r.ModelID, r.Time = "bafymodel", time.Now()
		b, err := Encode(r, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.receive(b, id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		default:
			t.Fatal("Changed not closed by a new record")
		}
		ch = tr.Changed()
		if err := tr.receive(b, id); !errors.Is(err, ErrReplay) {
			t.Fatalf("replay: %v", err)
		}
		select {
		case <-ch:
			t.Fatal("Changed closed by a replay")
		default:
		}
	})
}

// The topic validator's verdict on each kind of message.
func TestTrackerValidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keyA, a := testKey(t, 1)
		_, b := testKey(t, 2)
		tr := testTracker(t, time.Minute)
		now := time.Now()
		rec := func(id peer.ID, seq uint64, mut ...func(*Record)) Record {
			r := sample(id)
			r.ModelID, r.Seq, r.Time = "bafymodel", seq, now
			for _, m := range mut {
				m(&r)
			}
			return r
		}
		enc := func(r Record) []byte {
			data, err := Encode(r, keyA)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
		first := enc(rec(a, 10))
		if err := tr.receive(first, a); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name   string
			data   []byte
			author peer.ID
			want   pubsub.ValidationResult
		}{
			{"newer", enc(rec(a, 11)), a, pubsub.ValidationAccept},
			{"unsigned pubsub message", enc(rec(a, 12)), "", pubsub.ValidationAccept},
			{"replay", first, a, pubsub.ValidationIgnore},
			{"older", enc(rec(a, 9)), a, pubsub.ValidationIgnore},
			{"skewed", enc(rec(a, 13, func(r *Record) { r.Time = now.Add(time.Hour) })), a, pubsub.ValidationIgnore},
			{"signed by A, claims B", seal(t, rec(b, 1), keyA), a, pubsub.ValidationReject},
			{"A's record relayed as B's message", enc(rec(a, 14)), b, pubsub.ValidationReject},
			{"another model", enc(rec(a, 15, func(r *Record) { r.ModelID = "bafyother" })), a, pubsub.ValidationReject},
			{"garbage", []byte("garbage"), a, pubsub.ValidationReject},
		}
		var wantRejected, wantIgnored uint64
		for _, tt := range tests {
			msg := &pubsub.Message{Message: &pb.Message{Data: tt.data, From: []byte(tt.author)}}
			if got := tr.validate(t.Context(), a, msg); got != tt.want {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
			switch tt.want {
			case pubsub.ValidationAccept:
				if _, ok := msg.ValidatorData.(Record); !ok {
					t.Errorf("%s: no record in ValidatorData", tt.name)
				}
			case pubsub.ValidationReject:
				wantRejected++
			case pubsub.ValidationIgnore:
				wantIgnored++
			}
		}
		if s := tr.Stats(); s.Rejected != wantRejected || s.Ignored != wantIgnored || s.Accepted != 1 {
			t.Fatalf("stats %+v, want %d rejected and %d ignored", s, wantRejected, wantIgnored)
		}
	})
}
