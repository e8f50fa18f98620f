package link_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/pipeshard/pipeshard/sim/link"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// hosts starts hosts 0..k-1 on nw and closes them at the end of the test.
func hosts(t *testing.T, nw *link.Network, k int) []host.Host {
	t.Helper()
	var hs []host.Host
	for i := range k {
		h, err := nw.Host(i, nil)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

func connect(t *testing.T, a, b host.Host) {
	t.Helper()
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// pings returns n round trips from a to b.
func pings(t *testing.T, a, b host.Host, n int) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out []time.Duration
	for r := range ping.Ping(ctx, a, b.ID()) {
		if r.Error != nil {
			t.Fatal(r.Error)
		}
		out = append(out, r.RTT)
		if len(out) == n {
			break
		}
	}
	return out
}

func TestPingFollowsMatrix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := [][]link.Link{
			{{}, {Latency: ms(10)}, {Latency: ms(35)}},
			{{Latency: ms(10)}, {}, {Latency: ms(80)}},
			{{Latency: ms(5)}, {Latency: ms(20)}, {}}, // asymmetric: 2→0 and 2→1 are faster
		}
		nw := link.New(1, link.Matrix(m))
		defer nw.Close()
		hs := hosts(t, nw, 3)
		for i := range hs {
			for j := range hs {
				if i >= j {
					continue
				}
				connect(t, hs[i], hs[j])
				want := m[i][j].Latency + m[j][i].Latency
				for k, rtt := range pings(t, hs[i], hs[j], 5) {
					t.Logf("%d→%d ping %d: %v (want %v)", i, j, k, rtt, want)
					if rtt != want {
						t.Errorf("%d→%d: RTT %v, want %v", i, j, rtt, want)
					}
				}
			}
		}
	})
}

const bulkProto = "/link-test/bulk/1"

// serveBulk makes h answer a bulk stream with the SHA-256 of all it read.
func serveBulk(h host.Host) {
	h.SetStreamHandler(bulkProto, func(s network.Stream) {
		defer s.Close()
		sum := sha256.New()
		if _, err := io.Copy(sum, s); err != nil {
			s.Reset()
			return
		}
		s.Write(sum.Sum(nil))
	})
}

// bulk sends size pseudo-random bytes from a to b and returns how long
// it took until b's checksum came back, checking it.
func bulk(t *testing.T, a, b host.Host, size int) time.Duration {
	t.Helper()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(data)
	want := sha256.Sum256(data)
	t0 := time.Now()
	s, err := a.NewStream(context.Background(), b.ID(), bulkProto)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[:]) {
		t.Fatalf("checksum %x, want %x", got, want)
	}
	return time.Since(t0)
}

// TestRealClock runs outside testing/synctest, as benchmarks do: delays
// are real waits.
func TestRealClock(t *testing.T) {
	nw := link.New(1, link.Uniform(link.Link{Latency: ms(15)}))
	defer nw.Close()
	hs := hosts(t, nw, 2)
	connect(t, hs[0], hs[1])
	for _, rtt := range pings(t, hs[0], hs[1], 3) {
		if rtt < ms(30) || rtt > ms(30)+ms(40) {
			t.Errorf("RTT %v, want 30 ms and a little", rtt)
		}
	}
}

func TestBandwidth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bw, size = 1 << 20, 4 << 20 // 1 MiB/s, 4 MiB
		nw := link.New(1, link.Uniform(link.Link{Latency: ms(10), Bandwidth: bw}))
		defer nw.Close()
		hs := hosts(t, nw, 2)
		serveBulk(hs[1])
		connect(t, hs[0], hs[1])
		d := bulk(t, hs[0], hs[1], size)
		ideal := time.Duration(size) * time.Second / bw
		st := nw.Stats(0, 1)
		t.Logf("%d bytes in %v (%.0f%% of the link's rate); %+v", size, d, 100*float64(ideal)/float64(d), st)
		// QUIC's headers and acknowledgments, and slow start, cost a few
		// percent.
		if d < ideal || d > ideal*115/100 {
			t.Fatalf("%d bytes at %d bytes/s took %v, want %v to %v", size, bw, d, ideal, ideal*115/100)
		}
	})
}

func TestLossIsRecovered(t *testing.T) {
	const bw, size = 1 << 20, 2 << 20
	run := func(loss float64) (time.Duration, link.Stats) {
		var d time.Duration
		var st link.Stats
		synctest.Test(t, func(t *testing.T) {
			nw := link.New(1, link.Uniform(link.Link{Latency: ms(20), Loss: loss, Bandwidth: bw}))
			defer nw.Close()
			hs := hosts(t, nw, 2)
			serveBulk(hs[1])
			connect(t, hs[0], hs[1])
			d = bulk(t, hs[0], hs[1], size) // checks every byte
			st = nw.Stats(0, 1)
		})
		return d, st
	}
	clean, cs := run(0)
	lossy, ls := run(0.02)
	t.Logf("no loss: %v, %+v", clean, cs)
	t.Logf("2%% loss: %v, %+v", lossy, ls)
	if ls.Lost == 0 || cs.Lost != 0 {
		t.Fatalf("lost %d packets at 2%%, %d at 0%%", ls.Lost, cs.Lost)
	}
	if lossy < clean*11/10 {
		t.Fatalf("2%% loss took %v, no loss %v: loss should slow QUIC down", lossy, clean)
	}
}

// TestSameSeedSameJitter: the round trips a host measures through
// jittery links repeat exactly from run to run with the same seed.
func TestSameSeedSameJitter(t *testing.T) {
	l := link.Link{Latency: ms(20), Jitter: ms(8)}
	run := func(seed uint64) []time.Duration {
		var rtts []time.Duration
		synctest.Test(t, func(t *testing.T) {
			nw := link.New(seed, link.Uniform(l))
			defer nw.Close()
			hs := hosts(t, nw, 2)
			connect(t, hs[0], hs[1])
			rtts = pings(t, hs[0], hs[1], 30)
		})
		return rtts
	}
	a, b, c := run(5), run(5), run(6)
	t.Logf("seed 5: %v", a)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 5 twice:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatal("seeds 5 and 6 gave the same round trips")
	}
	lo, hi := 2*(l.Latency-l.Jitter), 2*(l.Latency+l.Jitter)
	var sum time.Duration
	for _, r := range append(a, c...) {
		if r < lo || r > hi {
			t.Fatalf("RTT %v outside [%v, %v]", r, lo, hi)
		}
		sum += r
	}
	if mean := sum / time.Duration(len(a)+len(c)); mean < ms(37) || mean > ms(43) {
		t.Fatalf("mean RTT %v, want about 40ms", mean)
	}
	if slices.Min(a) == slices.Max(a) {
		t.Fatal("no jitter")
	}
}
