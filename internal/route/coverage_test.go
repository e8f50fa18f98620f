package route

import (
	"math"
	"slices"
	"testing"
)

func tps(id string, r Range, tokensPerSec float64) Server {
	return Server{ID: id, Start: r.Start, End: r.End, HeadLo: r.HeadLo, HeadHi: r.HeadHi, TokensPerSec: tokensPerSec}
}

func TestCoverage(t *testing.T) {
	m := Model{Layers: 4, Vocab: 100}
	servers := []Server{
		tps("a", Range{0, 2, 0, 0}, 10),
		tps("b", Range{0, 4, 0, 0}, 5),
		tps("c", Range{2, 4, 0, 40}, 20),
		tps("d", Range{4, 4, 40, 100}, 30),
		{ID: "e", Start: 0, End: 4, TokensPerSec: 1000, Draining: true},
		{ID: "f", Start: 0, End: 4, TokensPerSec: 1000, Banned: true},
		{ID: "g", Start: 0, End: 4, ComputeMicros: 500}, // 2000 tok/s at batch 1
		tps("h", Range{3, 9, 0, 0}, 1000),               // not a range of the model
	}
	want := []Span{
		{Lo: 0, Hi: 2, TokensPerSec: 2015, Servers: 3},
		{Lo: 2, Hi: 4, TokensPerSec: 2025, Servers: 3},
		{Head: true, Lo: 0, Hi: 40, TokensPerSec: 2025, Servers: 3},
		{Head: true, Lo: 40, Hi: 100, TokensPerSec: 2035, Servers: 3},
	}
	if got := Coverage(m, servers); !slices.Equal(got, want) {
		t.Errorf("Coverage:\n got %+v\nwant %+v", got, want)
	}
	want = []Span{
		{Lo: 0, Hi: 4, TokensPerSec: 0, Servers: 0},
		{Head: true, Lo: 0, Hi: 100, TokensPerSec: 0, Servers: 0},
	}
	if got := Coverage(m, nil); !slices.Equal(got, want) {
		t.Errorf("Coverage of nothing:\n got %+v\nwant %+v", got, want)
	}
	if got := Coverage(Model{}, servers); got != nil {
		t.Errorf("Coverage of no model: %+v", got)
	}
}

func TestChoose(t *testing.T) {
	m := Model{Layers: 8, Vocab: 100}
	halves := []Range{{0, 4, 0, 0}, {4, 8, 0, 0}}
	quarters := []Range{{0, 2, 0, 0}, {2, 4, 0, 0}, {4, 6, 0, 0}, {6, 8, 0, 0}}
	headSplit := []Range{{0, 8, 0, 50}, {8, 8, 50, 100}}
	tests := []struct {
		name       string
		servers    []Server
		candidates []Range
		want       int
		scores     []float64
	}{
		{
			name:       "an empty swarm: the first candidate",
			candidates: halves,
			want:       0,
			scores:     []float64{0, 0},
		},
		{
			name:       "fill the gap",
			servers:    []Server{tps("a", halves[0], 100)},
			candidates: halves,
			want:       1,
			scores:     []float64{100, 0},
		},
		{
			name: "throughput, not presence",
			servers: []Server{
				tps("a", halves[0], 10), tps("b", halves[0], 10),
				tps("c", halves[1], 50),
			},
			candidates: halves,
			want:       0,
			scores:     []float64{20, 50},
		},
		{
			name: "the bottleneck inside a wide range",
			servers: []Server{
				tps("a", Range{0, 8, 0, 0}, 10),
				tps("b", quarters[0], 100), tps("c", quarters[1], 100), tps("d", quarters[3], 100),
			},
			candidates: quarters,
			want:       2,
			scores:     []float64{110, 110, 10, 110},
		},
		{
			name: "the head is a bottleneck too",
			servers: []Server{
				tps("a", Range{0, 8, 0, 50}, 40),
				tps("b", Range{0, 8, 0, 0}, 10),
				tps("c", Range{8, 8, 50, 100}, 20),
			},
			candidates: append(slices.Clone(headSplit), Range{0, 4, 0, 0}),
			want:       1,
			scores:     []float64{50, 30, 50},
		},
		{
			name: "draining servers do not count",
			servers: []Server{
				tps("a", halves[0], 10),
				{ID: "b", Start: 4, End: 8, TokensPerSec: 100, Draining: true},
				tps("c", halves[1], 5),
			},
			candidates: halves,
			want:       1,
			scores:     []float64{10, 5},
		},
		{
			name:       "a tie goes to the earlier candidate",
			servers:    []Server{tps("a", halves[0], 10), tps("b", halves[1], 10)},
			candidates: []Range{halves[1], halves[0]},
			want:       0,
			scores:     []float64{10, 10},
		},
		{
			name:       "invalid candidates are never chosen",
			servers:    []Server{tps("a", halves[0], 10)},
			candidates: []Range{{4, 9, 0, 0}, halves[0], {3, 3, 0, 0}},
			want:       1,
			scores:     []float64{math.NaN(), 10, math.NaN()},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, scores := Choose(m, tt.servers, tt.candidates)
			eq := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
			if i != tt.want || !slices.EqualFunc(scores, tt.scores, eq) {
				t.Errorf("Choose = %d, %v; want %d, %v", i, scores, tt.want, tt.scores)
			}
		})
	}
	if i, _ := Choose(m, nil, []Range{{9, 9, 0, 0}}); i != -1 {
		t.Errorf("Choose among invalid candidates = %d, want -1", i)
	}
	if i, _ := Choose(m, nil, nil); i != -1 {
		t.Errorf("Choose among no candidates = %d, want -1", i)
	}
}

// A swarm that keeps adding the node Choose picks ends up balanced.
func TestChooseBalances(t *testing.T) {
	m := Model{Layers: 32, Vocab: 1000}
	var candidates []Range
	for _, n := range []int{2, 4, 8} {
		for i := range n {
			candidates = append(candidates, Range{i * 32 / n, (i + 1) * 32 / n, 0, 0})
		}
	}
	var servers []Server
	for range 64 {
		i, _ := Choose(m, servers, candidates)
		servers = append(servers, tps("x", candidates[i], 10))
	}
	spans := Coverage(m, servers)
	lo, hi := math.Inf(1), 0.0
	for _, s := range spans {
		lo, hi = min(lo, s.TokensPerSec), max(hi, s.TokensPerSec)
	}
	if lo == 0 || hi > 2*lo {
		t.Errorf("after 64 joins, throughput ranges from %v to %v: %+v", lo, hi, spans)
	}
}
