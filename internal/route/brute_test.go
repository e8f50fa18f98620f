package route

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: a new one, printed)")

// testRand returns the randomized tests' source and logs its seed, so a
// failure can be replayed with -seed.
func testRand(t testing.TB) (*rand.Rand, uint64) {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0x726f757465)), seed
}

// swarm is a random small swarm.
type swarm struct {
	m       Model
	servers []Server
	rtt     Matrix
	opts    Options
}

func (s swarm) String() string {
	out := fmt.Sprintf("model %+v, options %+v\n", s.m, s.opts)
	for _, v := range s.servers {
		out += fmt.Sprintf("  %+v\n", v)
	}
	return out + fmt.Sprintf("  rtt %v", s.rtt)
}

var peers = []string{"p", "q", "r", "s", "t"}

// randomSwarm builds up to maxServers servers from the stages of a few
// random cuts of a random small model (so that routes usually exist, often
// several), plus some ranges that are random (often unusable or
// malformed). With integral set, every cost is an integer, so sums are
// exact and ties frequent.
func randomSwarm(r *rand.Rand, maxServers int, integral bool) swarm {
	m := Model{Layers: 1 + r.IntN(6), Vocab: 1 + r.IntN(12)}
	L, end := m.Layers, m.Layers+m.Vocab
	var ranges []Range
	for range 1 + r.IntN(3) {
		lo := 0
		for p := 1; p <= end; p++ {
			if p != end && (p == L || r.IntN(5) >= 2) {
				continue
			}
			var rg Range
			switch {
			case p < L:
				rg = Range{lo, p, 0, 0}
			case lo < L:
				rg = Range{lo, L, 0, p - L}
			default:
				rg = Range{L, L, lo - L, p - L}
			}
			if rg.End == L && rg.HeadLo == 0 && rg.HeadHi == m.Vocab && r.IntN(2) == 0 {
				rg.HeadHi = 0
			}
			ranges = append(ranges, rg)
			lo = p
		}
	}
	for range r.IntN(4) {
		a := r.IntN(L + 1)
		ranges = append(ranges, Range{a, a + r.IntN(L+1-a), r.IntN(m.Vocab + 1), r.IntN(m.Vocab + 1)})
	}
	r.Shuffle(len(ranges), func(i, j int) { ranges[i], ranges[j] = ranges[j], ranges[i] })

	// Integral swarms have costs in a narrow range half the time, where
	// ties are everywhere.
	narrow := integral && r.IntN(2) == 0
	num := func(scale float64) float64 {
		switch {
		case narrow:
			return float64(r.IntN(3))
		case integral:
			return float64(r.IntN(int(scale)))
		}
		return r.Float64() * scale
	}
	s := swarm{m: m, rtt: Matrix{}}
	type key struct {
		id string
		Range
	}
	seen := map[key]bool{}
	for _, rg := range ranges {
		for range 1 + r.IntN(2) {
			if len(s.servers) == maxServers {
				break
			}
			id := peers[r.IntN(len(peers))]
			if seen[key{id, rg}] {
				continue
			}
			seen[key{id, rg}] = true
			v := Server{
				ID: id, Start: rg.Start, End: rg.End, HeadLo: rg.HeadLo, HeadHi: rg.HeadHi,
				ComputeMicros: num(100),
				QueuedTokens:  r.IntN(10),
				Sessions:      r.IntN(4),
				Draining:      r.IntN(10) == 0,
				Banned:        r.IntN(15) == 0,
			}
			if r.IntN(3) > 0 {
				v.TokensPerSec = 1 + r.Float64()*1000
			}
			s.servers = append(s.servers, v)
		}
	}
	ends := append([]string{""}, peers...)
	for _, a := range ends {
		for _, b := range ends {
			if a != b && r.IntN(7) > 0 {
				s.rtt[[2]string{a, b}] = num(50)
			}
		}
	}
	s.opts.DefaultRTTMicros = 1 + num(60)
	if integral {
		s.opts.Batch = 1
	} else {
		s.opts.Batch = 1 + r.Float64()*10
		s.opts.LoadWeight = r.Float64() * 2
		if r.IntN(2) == 0 {
			s.opts.Policy = ThroughputAware
		}
	}
	if r.IntN(4) == 0 {
		s.opts.Exclude = map[string]bool{peers[r.IntN(len(peers))]: true}
	}
	return s
}

func sameHops(a, b []Server) bool { return slices.Equal(a, b) }

// Plan must find a route exactly as good as the best of all chains, on
// thousands of random swarms; with integer costs (where sums are exact),
// the very same route.
func TestPlanMatchesBruteForce(t *testing.T) {
	r, seed := testRand(t)
	n := 3000
	if testing.Short() {
		n = 300
	}
	routes := 0
	for i := range 2 * n {
		integral := i%2 == 0
		s := randomSwarm(r, 12, integral)
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("seed %d, swarm %d: %s\n%v", seed, i, fmt.Sprintf(format, a...), s)
		}
		got, err := Plan(s.m, s.servers, s.rtt.RTT, s.opts)
		want, werr := BruteForce(s.m, s.servers, s.rtt.RTT, s.opts)
		if err != nil || werr != nil {
			var a, b *NoRouteError
			if !errors.As(err, &a) || !errors.As(werr, &b) || *a != *b {
				fail("Plan: %v; BruteForce: %v", err, werr)
			}
			continue
		}
		routes++
		if got.Cost != want.Cost {
			fail("Plan %v cost %v; BruteForce %v cost %v", got, got.Cost, want, want.Cost)
		}
		if sameHops(got.Hops, want.Hops) && got.ExpectedMicros != want.ExpectedMicros {
			fail("same hops, expected %v and %v", got.ExpectedMicros, want.ExpectedMicros)
		}
		if integral && !sameHops(got.Hops, want.Hops) {
			fail("Plan %v; BruteForce %v: the same cost, but the tie went differently", got, want)
		}
		if err := Check(s.m, got.Hops); err != nil {
			fail("Plan %v: %v", got, err)
		}
		for _, h := range got.Hops {
			if h.Draining || h.Banned || s.opts.Exclude[h.ID] {
				fail("Plan %v uses %+v", got, h)
			}
		}
		// The servers' order does not matter.
		shuffled := slices.Clone(s.servers)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, _ := Plan(s.m, shuffled, s.rtt.RTT, s.opts); !sameHops(again.Hops, got.Hops) {
			fail("Plan %v, but %v after shuffling the servers", got, again)
		}
		// A random route is a route, and no cheaper than the best.
		opts := s.opts
		opts.Policy, opts.Rand = Random, r
		rnd, err := Plan(s.m, s.servers, s.rtt.RTT, opts)
		if err != nil || Check(s.m, rnd.Hops) != nil {
			fail("random route %v: %v", rnd, err)
		}
		if s.opts.Policy == MinLatency && rnd.Cost < got.Cost {
			fail("random route %v beats %v", rnd, got)
		}
	}
	t.Logf("%d swarms, %d with a route", 2*n, routes)
	if routes < n/2 {
		t.Errorf("only %d of %d random swarms had a route: the generator is too sparse to test much", routes, 2*n)
	}
}

// Coverage must agree with counting, position by position.
func TestCoverageMatchesCounting(t *testing.T) {
	r, seed := testRand(t)
	for i := range 2000 {
		s := randomSwarm(r, 12, false)
		m := s.m
		spans := Coverage(m, s.servers)
		at := 0 // position on the model's axis
		for j, sp := range spans {
			lo, hi := sp.Lo, sp.Hi
			if sp.Head {
				lo, hi = lo+m.Layers, hi+m.Layers
			}
			if lo != at || hi <= lo || sp.Head != (lo >= m.Layers) || hi > m.Layers && lo < m.Layers {
				t.Fatalf("seed %d, swarm %d: span %d %+v after position %d: %+v\n%v", seed, i, j, sp, at, spans, s)
			}
			if j > 0 && spans[j-1].Head == sp.Head && spans[j-1].TokensPerSec == sp.TokensPerSec && spans[j-1].Servers == sp.Servers {
				t.Fatalf("seed %d, swarm %d: spans %d and %d should be one: %+v", seed, i, j-1, j, spans)
			}
			for p := lo; p < hi; p++ {
				var tps int64
				var n int
				for _, v := range s.servers {
					rg, err := m.Normalize(v.Range())
					if err != nil || v.Draining || v.Banned {
						continue
					}
					if rg.Start <= p && p < rg.End || rg.End == m.Layers && m.Layers+rg.HeadLo <= p && p < m.Layers+rg.HeadHi {
						tps += milli(Capacity(v))
						n++
					}
				}
				if n != sp.Servers || float64(tps)/1000 != sp.TokensPerSec {
					t.Fatalf("seed %d, swarm %d: position %d: %d servers, %v tok/s; span %+v\n%v", seed, i, p, n, tps, sp, s)
				}
			}
			at = hi
		}
		if at != m.Layers+m.Vocab {
			t.Fatalf("seed %d, swarm %d: spans end at %d: %+v", seed, i, at, spans)
		}
	}
}
