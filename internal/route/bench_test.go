package route

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Benchmarks report, besides wall time, the benchmark thread's CPU time
// per operation where the OS tells it (cpu-ns/op): on a shared machine
// wall time includes waiting for a core.
//
//	go test -run '^$' -bench . ./internal/route

// measureCPU reports cpu-ns/op when the benchmark returns.
func measureCPU(b *testing.B) func() {
	runtime.LockOSThread()
	c0, ok := threadCPU()
	return func() {
		c1, _ := threadCPU()
		if ok && b.N > 0 {
			b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
		}
		runtime.UnlockOSThread()
	}
}

// bigSwarm is n servers on an 80-layer, 32,000-row model: 70% serve a
// stage of one of several even cuts (some splitting the head in two), 30%
// a random run of layers. Peers sit on a 100 ms-wide plane, the client
// too, and a link costs 1 ms plus the distance.
func bigSwarm(seed uint64, n int) (Model, []Server, RTT) {
	r := rand.New(rand.NewPCG(seed, 1))
	m := Model{Layers: 80, Vocab: 32000}
	cuts := []int{1, 2, 4, 5, 8, 10, 16, 20}
	type point struct{ x, y float64 }
	at := map[string]point{"": {r.Float64() * 100e3, r.Float64() * 100e3}}
	servers := make([]Server, 0, n)
	for i := range n {
		var rg Range
		if r.IntN(10) < 7 {
			k := cuts[r.IntN(len(cuts))]
			j := r.IntN(k)
			rg = Range{j * m.Layers / k, (j + 1) * m.Layers / k, 0, 0}
			if rg.End == m.Layers && r.IntN(3) == 0 {
				if r.IntN(2) == 0 {
					rg.HeadHi = m.Vocab / 2
				} else {
					rg = Range{m.Layers, m.Layers, m.Vocab / 2, m.Vocab}
				}
			}
		} else {
			s := r.IntN(m.Layers)
			rg = Range{s, s + 1 + r.IntN(m.Layers-s), 0, 0}
		}
		rows := 0
		if nr, err := m.Normalize(rg); err == nil {
			rows = nr.HeadHi - nr.HeadLo
		}
		compute := (0.5 + 2.5*r.Float64()) * (300*float64(rg.End-rg.Start) + 0.02*float64(rows))
		id := fmt.Sprintf("peer%05d", i)
		at[id] = point{r.Float64() * 100e3, r.Float64() * 100e3}
		servers = append(servers, Server{
			ID: id, Start: rg.Start, End: rg.End, HeadLo: rg.HeadLo, HeadHi: rg.HeadHi,
			ComputeMicros: compute,
			QueuedTokens:  r.IntN(32),
			Sessions:      r.IntN(8),
			TokensPerSec:  4e6 / compute,
			Draining:      r.IntN(50) == 0,
		})
	}
	rtt := func(a, b string) (float64, bool) {
		p, ok1 := at[a]
		q, ok2 := at[b]
		if !ok1 || !ok2 {
			return 0, false
		}
		return 1000 + math.Hypot(p.x-q.x, p.y-q.y), true
	}
	return m, servers, rtt
}

func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		m, servers, rtt := bigSwarm(1, n)
		calls := 0
		counted := func(a, b string) (float64, bool) {
			calls++
			return rtt(a, b)
		}
		for _, p := range []Policy{MinLatency, ThroughputAware, Random} {
			b.Run(fmt.Sprintf("servers=%d/%v", n, p), func(b *testing.B) {
				opts := Options{Policy: p, Rand: rand.New(rand.NewPCG(1, 2))}
				calls = 0
				defer measureCPU(b)()
				for b.Loop() {
					if _, err := Plan(m, servers, counted, opts); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(calls)/float64(b.N), "rtts/op")
			})
		}
	}
}

func BenchmarkChoose(b *testing.B) {
	m, servers, _ := bigSwarm(1, 10000)
	var candidates []Range
	for _, k := range []int{2, 4, 8} {
		for j := range k {
			candidates = append(candidates, Range{j * 80 / k, (j + 1) * 80 / k, 0, 0})
		}
	}
	defer measureCPU(b)()
	for b.Loop() {
		Choose(m, servers, candidates)
	}
}
