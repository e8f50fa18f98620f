package netem

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// These tests drive the delay line's model directly, on a made-up clock;
// they need no root.

func TestAdmitRate(t *testing.T) {
	p := newPair(0, 1, Link{Delay: 10 * time.Millisecond, Rate: 1_000_000}, 1)
	for k := range int64(10) {
		due, v := p.admit(1000, 0)
		want := (k+1)*int64(time.Millisecond) + int64(10*time.Millisecond)
		if v != pass || due != want {
			t.Fatalf("packet %d: due %v, %v; want %v", k, time.Duration(due), v, time.Duration(want))
		}
	}
	// After the link has been idle, a packet waits for nothing but itself.
	due, _ := p.admit(500, int64(time.Second))
	if want := int64(time.Second + 500*time.Microsecond + 10*time.Millisecond); due != want {
		t.Errorf("after idle: due %v, want %v", time.Duration(due), time.Duration(want))
	}
}

func TestAdmitQueue(t *testing.T) {
	p := newPair(0, 1, Link{Rate: 1_000_000, Queue: 3000}, 1)
	var got []verdict
	for range 5 {
		_, v := p.admit(1000, 0)
		got = append(got, v)
	}
	want := []verdict{pass, pass, pass, queueFull, queueFull}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("verdicts %v, want %v", got, want)
		}
	}
	// 1.5 ms later 1.5 packets have left: one more fits.
	if _, v := p.admit(1000, 1_500_000); v != pass {
		t.Errorf("after draining: %v, want pass", v)
	}
	if q := newPair(0, 1, Link{Rate: 2_000_000}, 1).queue; q != DefaultQueue(2_000_000) || q != 400_000 {
		t.Errorf("default queue %d, want 400000", q)
	}
}

func TestAdmitJitter(t *testing.T) {
	const delay, jitter = 10 * time.Millisecond, 5 * time.Millisecond
	p := newPair(0, 1, Link{Delay: delay, Jitter: jitter}, 7)
	var last, sum int64
	lo, hi := int64(1<<62), int64(0)
	const n = 2000
	for k := range int64(n) {
		now := k * int64(3*jitter) // far apart: order never binds
		due, v := p.admit(100, now)
		if v != pass || due < last {
			t.Fatalf("packet %d: due %v after %v (%v): reordered", k, due, last, v)
		}
		last = due
		d := due - now
		lo, hi, sum = min(lo, d), max(hi, d), sum+d
	}
	mean := time.Duration(sum / n)
	t.Logf("delay %v ± %v: min %v max %v mean %v", delay, jitter, time.Duration(lo), time.Duration(hi), mean)
	if time.Duration(lo) < delay-jitter || time.Duration(hi) > delay+jitter {
		t.Errorf("delays in [%v, %v], want within [%v, %v]", time.Duration(lo), time.Duration(hi), delay-jitter, delay+jitter)
	}
	if mean < delay-jitter/10 || mean > delay+jitter/10 {
		t.Errorf("mean delay %v, want %v (uniform jitter)", mean, delay)
	}

	// Packets closer than the jitter keep their order.
	p = newPair(0, 1, Link{Delay: delay, Jitter: jitter}, 7)
	last = 0
	for k := range int64(1000) {
		due, _ := p.admit(100, k*int64(100*time.Microsecond))
		if due < last {
			t.Fatalf("packet %d reordered", k)
		}
		last = due
	}
}

func TestAdmitLossSeeded(t *testing.T) {
	run := func(seed int64) (lostAt []int) {
		p := newPair(2, 3, Link{Loss: 0.1}, seed)
		for k := range 10000 {
			if _, v := p.admit(100, int64(k)); v == lost {
				lostAt = append(lostAt, k)
			}
		}
		return lostAt
	}
	a, b, c := run(1), run(1), run(2)
	if len(a) != len(b) || a[0] != b[0] || a[len(a)-1] != b[len(b)-1] {
		t.Error("one seed, two different loss patterns")
	}
	if len(a) == len(c) && a[0] == c[0] {
		t.Error("two seeds, one loss pattern")
	}
	// 10000 draws at p = 0.1: σ = 30.
	if len(a) < 900 || len(a) > 1100 {
		t.Errorf("%d of 10000 lost, want 1000 ± 100", len(a))
	}
}

func TestSchedule(t *testing.T) {
	var armed []int64
	s := schedule{arm: func(d int64) { armed = append(armed, d) }}
	for _, due := range []int64{50, 10, 30, 10, 20} {
		if !s.push(&item{due: due, pkt: make([]byte, 100)}) {
			t.Fatal("push refused")
		}
	}
	if want := []int64{50, 10}; len(armed) != 2 || armed[0] != want[0] || armed[1] != want[1] {
		t.Errorf("armed %v, want %v (only when the head changes)", armed, want)
	}
	batch, closed := s.popDue(25, nil)
	if closed || len(batch) != 3 || batch[0].due != 10 || batch[1].due != 10 || batch[2].due != 20 || batch[0].seq > batch[1].seq {
		t.Fatalf("popDue(25) = %v", batch)
	}
	if armed[len(armed)-1] != 30 || s.inFlight != 200 {
		t.Errorf("after pop: armed %d, in flight %d; want 30, 200", armed[len(armed)-1], s.inFlight)
	}
	if !s.push(&item{due: 1, pkt: make([]byte, maxInFlight-200)}) || s.push(&item{due: 1, pkt: make([]byte, 1)}) {
		t.Error("maxInFlight not enforced")
	}
	s.close()
	if _, closed := s.popDue(100, nil); !closed || s.push(&item{}) {
		t.Error("closed schedule still works")
	}
}

func TestIngress(t *testing.T) {
	links := make([]Link, 9)
	links[0*3+1] = Link{Delay: time.Millisecond}
	l := newLine(3, links, 1, 3000, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.sched.arm = func(int64) {}
	capped := 0
	l.onCap = func() { capped++ }
	a := hostAddr
	l.ingress(0, ipv4(a(0), a(1), 5, 980), 0) // forwarded
	l.ingress(0, []byte{0x60, 1, 2, 3}, 0)    // not IPv4
	l.ingress(0, ipv4(a(0), a(0), 5, 10), 0)  // to itself
	l.ingress(0, ipv4(a(0), a(5), 5, 10), 0)  // no such host
	l.ingress(1, ipv4(a(1), a(2), 5, 980), 0) // forwarded, no impairment
	l.ingress(2, ipv4(a(2), a(0), 5, 980), 0) // 3000 offered: the cap
	l.ingress(2, ipv4(a(2), a(0), 5, 10), 0)  // past it: capped
	l.ingress(1, ipv4(a(1), a(0), 5, 10), 0)  // capped
	if got := len(l.sched.h); got != 3 {
		t.Errorf("%d packets queued, want 3", got)
	}
	st := l.stats()
	if st.Invalid.Packets != 3 || st.Capped.Packets != 2 || capped != 1 || !l.capped.Load() {
		t.Errorf("stats %+v, onCap called %d times", st, capped)
	}
	if len(st.Pairs) != 3 || st.Pairs[0].From != 0 || st.Pairs[0].To != 1 || st.Pairs[1].From != 1 || st.Pairs[2].From != 2 {
		t.Errorf("pairs %+v", st.Pairs)
	}
	batch, _ := l.sched.popDue(int64(time.Millisecond), nil)
	if len(batch) != 3 || batch[0].to != 2 || batch[1].to != 0 || batch[2].to != 1 || len(batch[2].pkt) != 1000 {
		for _, it := range batch {
			t.Logf("released %+v", *it)
		}
		t.Error("want 1→2 and 2→0 at once, 0→1 after its 1 ms")
	}
}
