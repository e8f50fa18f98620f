package status

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestTable(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0)
	_, a := testKey(t, 1)
	_, b := testKey(t, 2)
	rec := func(id peer.ID, seq uint64, at time.Duration) Record {
		r := sample(id)
		r.Seq, r.Time = seq, t0.Add(at)
		return r
	}
	type step struct {
		at   time.Duration // the receiver's clock, from t0
		rec  *Record       // observed at `at`, if not nil
		err  error         // Observe's error
		live []peer.ID     // Live at `at`, after the observation
	}
	ptr := func(r Record) *Record { return &r }
	tests := []struct {
		name  string
		steps []step
	}{
		{"stored and listed in peer order", []step{
			{0, ptr(rec(b, 1, 0)), nil, []peer.ID{b}},
			{time.Second, ptr(rec(a, 1, time.Second)), nil, sorted(a, b)},
		}},
		{"expires after ttl", []step{
			{0, ptr(rec(a, 1, 0)), nil, []peer.ID{a}},
			{ttl - 1, nil, nil, []peer.ID{a}},
			{ttl, nil, nil, nil},
		}},
		{"a newer record renews", []step{
			{0, ptr(rec(a, 1, 0)), nil, []peer.ID{a}},
			{ttl - time.Second, ptr(rec(a, 2, ttl-time.Second)), nil, []peer.ID{a}},
			{ttl, nil, nil, []peer.ID{a}},
			{2*ttl - time.Second, nil, nil, nil},
		}},
		{"replay of the same seq", []step{
			{0, ptr(rec(a, 5, 0)), nil, []peer.ID{a}},
			{time.Second, ptr(rec(a, 5, 0)), ErrReplay, []peer.ID{a}},
		}},
		{"older seq", []step{
			{0, ptr(rec(a, 5, 0)), nil, []peer.ID{a}},
			{time.Second, ptr(rec(a, 4, time.Second)), ErrReplay, []peer.ID{a}},
		}},
		{"replay cannot revive an expired peer", []step{
			{0, ptr(rec(a, 5, 0)), nil, []peer.ID{a}},
			{ttl + time.Second, ptr(rec(a, 5, 0)), ErrReplay, nil},
		}},
		{"seq is per peer", []step{
			{0, ptr(rec(a, 5, 0)), nil, []peer.ID{a}},
			{0, ptr(rec(b, 1, 0)), nil, sorted(a, b)},
		}},
		{"clock skew", []step{
			{0, ptr(rec(a, 1, MaxClockSkew+1)), ErrClockSkew, nil},
			{0, ptr(rec(a, 2, -MaxClockSkew-1)), ErrClockSkew, nil},
			{0, ptr(rec(a, 3, MaxClockSkew)), nil, []peer.ID{a}},
		}},
		{"forgotten seq: an old replay is refused as skewed", []step{
			{0, ptr(rec(a, 5, MaxClockSkew)), nil, []peer.ID{a}},
			{ttl + 2*MaxClockSkew, ptr(rec(b, 1, ttl+2*MaxClockSkew)), nil, []peer.ID{b}},
			{ttl + 2*MaxClockSkew + 1, ptr(rec(a, 5, MaxClockSkew)), ErrClockSkew, []peer.ID{b}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := NewTable(ttl)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.rec != nil {
					if err := tab.Observe(*s.rec, now); !errors.Is(err, s.err) {
						t.Fatalf("step %d: Observe: %v, want %v", i, err, s.err)
					}
				}
				var got []peer.ID
				for _, r := range tab.Live(now) {
					got = append(got, r.PeerID)
				}
				if !slices.Equal(got, s.live) {
					t.Fatalf("step %d: live %v, want %v", i, got, s.live)
				}
				for _, id := range []peer.ID{a, b} {
					_, ok := tab.Get(id, now)
					if want := slices.Contains(s.live, id); ok != want {
						t.Fatalf("step %d: Get(%s) ok=%v, want %v", i, id, ok, want)
					}
				}
			}
		})
	}
}

func sorted(ids ...peer.ID) []peer.ID {
	slices.Sort(ids)
	return ids
}

func TestTableNextExpiry(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0)
	tab := NewTable(ttl)
	if _, ok := tab.NextExpiry(t0); ok {
		t.Fatal("empty table has an expiry")
	}
	_, a := testKey(t, 1)
	_, b := testKey(t, 2)
	for i, id := range []peer.ID{a, b} {
		r := sample(id)
		r.Time = t0
		if err := tab.Observe(r, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		now  time.Duration
		want time.Duration
		ok   bool
	}{{0, ttl, true}, {ttl - 1, ttl, true}, {ttl, ttl + time.Second, true}, {ttl + time.Second, 0, false}} {
		got, ok := tab.NextExpiry(t0.Add(tc.now))
		if ok != tc.ok || (ok && !got.Equal(t0.Add(tc.want))) {
			t.Errorf("NextExpiry(t0+%v) = t0+%v, %v; want t0+%v, %v", tc.now, got.Sub(t0), ok, tc.want, tc.ok)
		}
	}
}

// The table holds at most MaxTracked peers; forgotten ones make room.
func TestTableFull(t *testing.T) {
	const ttl = time.Second
	t0 := time.Unix(1_700_000_000, 0)
	tab := NewTable(ttl)
	r := sample("")
	r.Time = t0
	for i := range MaxTracked {
		r.PeerID = peer.ID(fmt.Sprint(i))
		if err := tab.Observe(r, t0); err != nil {
			t.Fatal(err)
		}
	}
	r.PeerID = "one too many"
	if err := tab.Observe(r, t0); !errors.Is(err, ErrTableFull) {
		t.Fatalf("Observe past MaxTracked: %v", err)
	}
	later := t0.Add(ttl + 2*MaxClockSkew)
	r.Time = later
	if err := tab.Observe(r, later); err != nil {
		t.Fatalf("Observe after the others are forgotten: %v", err)
	}
	if tab.Len() != 1 {
		t.Fatalf("Len %d after forgetting, want 1", tab.Len())
	}
}
