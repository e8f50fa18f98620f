package link

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// fates sends a fixed pattern of packets (one every 300 µs, 1200 and 80
// bytes alternately) into the link 0→1 of a network seeded with seed, and
// returns each packet's delay, or -1 when it was dropped.
func fates(seed uint64, l Link, count int) ([]time.Duration, Stats) {
	n := New(seed, Uniform(l))
	defer n.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.pipeLocked(0, 1)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []time.Duration
	for k := range count {
		now := t0.Add(time.Duration(k) * 300 * time.Microsecond)
		size := 1200
		if k%2 == 1 {
			size = 80
		}
		if at, ok := p.draw(seed, now, size); ok {
			out = append(out, at.Sub(now))
		} else {
			out = append(out, -1)
		}
	}
	return out, p.stats
}

func TestSameSeedSameDraws(t *testing.T) {
	l := Link{Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.05, Bandwidth: 2 << 20}
	a, sa := fates(42, l, 5000)
	b, sb := fates(42, l, 5000)
	c, _ := fates(43, l, 5000)
	if !slices.Equal(a, b) || sa != sb {
		t.Fatal("seed 42 gave two different sequences")
	}
	if slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 gave the same sequence")
	}
	t.Logf("seed 42: %v...; %+v", a[:8], sa)
}

func TestDrawStatistics(t *testing.T) {
	const count = 20000
	l := Link{Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.02}
	d, st := fates(7, l, count)
	if st.Packets != count || st.Overflow != 0 {
		t.Fatalf("stats %+v", st)
	}
	// 2% of 20000 is 400, with a standard deviation of about 20.
	if st.Lost < 320 || st.Lost > 480 {
		t.Errorf("lost %d of %d packets at 2%%", st.Lost, count)
	}
	var sum float64
	var kept []time.Duration
	last := time.Duration(-1 << 62)
	for k, x := range d {
		if x < 0 {
			continue
		}
		// Packets keep their order: arrival = send + x never goes back.
		at := time.Duration(k)*300*time.Microsecond + x
		if at < last {
			t.Fatalf("packet %d arrives before the one before it", k)
		}
		last = at
		kept = append(kept, x)
		sum += float64(x)
	}
	lo, hi := slices.Min(kept), slices.Max(kept)
	mean := time.Duration(sum / float64(len(kept)))
	t.Logf("delay: min %v, mean %v, max %v", lo, mean, hi)
	if lo < l.Latency-l.Jitter || hi > l.Latency+l.Jitter {
		t.Errorf("delays in [%v, %v], want within [%v, %v]", lo, hi, l.Latency-l.Jitter, l.Latency+l.Jitter)
	}
	if math.Abs(float64(mean-l.Latency)) > float64(l.Jitter)/20 {
		t.Errorf("mean delay %v, want about %v", mean, l.Latency)
	}
}

func TestBandwidthSerializes(t *testing.T) {
	// 1000 bytes/s: a 100-byte packet takes 100 ms on the wire, and the
	// queue holds 250 ms of them.
	l := Link{Latency: 10 * time.Millisecond, Bandwidth: 1000, Queue: 250 * time.Millisecond}
	n := New(1, Uniform(l))
	defer n.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.pipeLocked(0, 1)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []string
	for range 5 {
		if at, ok := p.draw(1, t0, 100); ok {
			got = append(got, at.Sub(t0).String())
		} else {
			got = append(got, "drop")
		}
	}
	// Waits of 0, 100 and 200 ms are queued; 300 ms is more than the
	// queue, for the 4th packet and the 5th.
	if want := "[110ms 210ms 310ms drop drop]"; fmt.Sprint(got) != want {
		t.Fatalf("arrivals %v, want %v", got, want)
	}
	if p.stats.Overflow != 2 {
		t.Fatalf("stats %+v", p.stats)
	}
}

func TestEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1, Uniform(Link{Latency: 10 * time.Millisecond}))
		defer n.Close()
		var eps []*endpoint
		for i := range 2 {
			if _, err := n.addHost(i); err != nil {
				t.Fatal(err)
			}
			e, err := n.listen(i, &net.UDPAddr{IP: net.IPv4zero})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, e)
		}
		if _, err := n.listen(0, net.UDPAddrFromAddrPort(netip.AddrPortFrom(IP(1), 5))); err == nil {
			t.Fatal("host 0 listened on host 1's address")
		}
		a, b := eps[0], eps[1]
		t0 := time.Now()
		if _, err := a.WriteTo([]byte("hello"), b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		k, from, err := b.ReadFrom(buf)
		if err != nil || string(buf[:k]) != "hello" || from.String() != a.LocalAddr().String() {
			t.Fatalf("read %q from %v: %v", buf[:k], from, err)
		}
		if d := time.Since(t0); d != 10*time.Millisecond {
			t.Fatalf("arrived after %v, want 10ms", d)
		}
		// A deadline moved while a read waits ends the read (quic-go
		// stops its reader so).
		go func() {
			time.Sleep(time.Second)
			b.SetReadDeadline(time.Now())
		}()
		if _, _, err := b.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after deadline: %v", err)
		}
		b.SetReadDeadline(time.Time{})
		go func() {
			time.Sleep(time.Second)
			b.Close()
		}()
		if _, _, err := b.ReadFrom(buf); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v", err)
		}
		if _, err := b.WriteTo([]byte("x"), a.LocalAddr()); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after close: %v", err)
		}
	})
}
