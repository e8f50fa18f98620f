package route

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// star is an RTT where every link to or from the client costs client[id]
// and every link between servers costs between[{a, b}] (either order), or
// is unknown.
type star struct {
	client  map[string]float64
	between map[[2]string]float64
}

func (s star) rtt(a, b string) (float64, bool) {
	switch {
	case a == "":
		v, ok := s.client[b]
		return v, ok
	case b == "":
		v, ok := s.client[a]
		return v, ok
	}
	if v, ok := s.between[[2]string{a, b}]; ok {
		return v, true
	}
	v, ok := s.between[[2]string{b, a}]
	return v, ok
}

func srv(id string, r Range, compute float64) Server {
	return Server{ID: id, Start: r.Start, End: r.End, HeadLo: r.HeadLo, HeadHi: r.HeadHi, ComputeMicros: compute}
}

func TestPlan(t *testing.T) {
	m6 := Model{Layers: 6, Vocab: 100}
	all := func(v float64, ids ...string) map[string]float64 {
		c := map[string]float64{}
		for _, id := range ids {
			c[id] = v
		}
		return c
	}
	tests := []struct {
		name    string
		m       Model
		servers []Server
		rtt     star
		opts    Options
		want    []string // hop IDs
		micros  float64  // ExpectedMicros
	}{
		{
			name: "two full servers, the nearer wins",
			m:    m6,
			servers: []Server{
				srv("a", Range{0, 6, 0, 0}, 100),
				srv("b", Range{0, 6, 0, 0}, 100),
			},
			rtt:    star{client: map[string]float64{"a": 10, "b": 5}},
			want:   []string{"b"},
			micros: 5 + 100 + 5,
		},
		{
			name: "three stages beat two",
			m:    m6,
			servers: []Server{
				srv("a", Range{0, 2, 0, 0}, 10),
				srv("b", Range{2, 4, 0, 0}, 10),
				srv("c", Range{4, 6, 0, 0}, 10),
				srv("d", Range{0, 3, 0, 0}, 20),
				srv("e", Range{3, 6, 0, 0}, 20),
			},
			rtt: star{
				client:  all(10, "a", "b", "c", "d", "e"),
				between: map[[2]string]float64{{"a", "b"}: 5, {"b", "c"}: 5, {"d", "e"}: 30},
			},
			want:   []string{"a", "b", "c"},
			micros: 10 + 10 + 5 + 10 + 5 + 10 + 10,
		},
		{
			name: "two stages beat three",
			m:    m6,
			servers: []Server{
				srv("a", Range{0, 2, 0, 0}, 10),
				srv("b", Range{2, 4, 0, 0}, 10),
				srv("c", Range{4, 6, 0, 0}, 10),
				srv("d", Range{0, 3, 0, 0}, 20),
				srv("e", Range{3, 6, 0, 0}, 20),
			},
			rtt: star{
				client:  all(10, "a", "b", "c", "d", "e"),
				between: map[[2]string]float64{{"a", "b"}: 50, {"b", "c"}: 5, {"d", "e"}: 30},
			},
			want:   []string{"d", "e"},
			micros: 10 + 20 + 30 + 20 + 10,
		},
		{
			name: "a tie goes to fewer hops",
			m:    m6,
			servers: []Server{
				srv("a", Range{0, 2, 0, 0}, 10),
				srv("b", Range{2, 4, 0, 0}, 10),
				srv("c", Range{4, 6, 0, 0}, 10),
				srv("d", Range{0, 3, 0, 0}, 20),
				srv("e", Range{3, 6, 0, 0}, 20),
			},
			rtt: star{
				client:  all(10, "a", "b", "c", "d", "e"),
				between: map[[2]string]float64{{"a", "b"}: 5, {"b", "c"}: 5, {"d", "e"}: 0},
			},
			want:   []string{"d", "e"},
			micros: 60,
		},
		{
			name: "a tie of equal length goes to the smaller IDs",
			m:    m6,
			servers: []Server{
				srv("y", Range{0, 3, 0, 0}, 5),
				srv("x", Range{3, 6, 0, 0}, 5),
				srv("w", Range{0, 3, 0, 0}, 5),
			},
			rtt:    star{client: all(10, "w", "x", "y"), between: map[[2]string]float64{{"w", "x"}: 0, {"y", "x"}: 0}},
			want:   []string{"w", "x"},
			micros: 30,
		},
		{
			name: "the head split two ways",
			m:    Model{Layers: 2, Vocab: 100},
			servers: []Server{
				srv("a", Range{0, 2, 0, 50}, 10),
				srv("b", Range{2, 2, 50, 100}, 5),
				srv("c", Range{0, 2, 0, 0}, 30),
				// Unusable: rows [0, 50) would come after the layers.
				srv("d", Range{0, 2, 50, 100}, 1),
				// Unusable: every range with the last layer holds rows.
				srv("e", Range{2, 2, 0, 50}, 1),
			},
			rtt: star{
				client:  all(10, "a", "b", "c", "d", "e"),
				between: map[[2]string]float64{{"a", "b"}: 2, {"e", "d"}: 0},
			},
			want:   []string{"a", "b"},
			micros: 10 + 10 + 2 + 5 + 10,
		},
		{
			name: "the head split three ways",
			m:    Model{Layers: 4, Vocab: 90},
			servers: []Server{
				srv("a", Range{0, 4, 0, 30}, 40),
				srv("b", Range{4, 4, 30, 60}, 10),
				srv("c", Range{4, 4, 60, 90}, 10),
				srv("d", Range{4, 4, 30, 90}, 25),
			},
			rtt: star{
				client:  all(10, "a", "b", "c", "d"),
				between: map[[2]string]float64{{"a", "b"}: 1, {"b", "c"}: 1, {"a", "d"}: 1},
			},
			want:   []string{"a", "b", "c"},
			micros: 10 + 40 + 1 + 10 + 1 + 10 + 10,
		},
		{
			name: "draining, banned, excluded and nameless servers are skipped",
			m:    m6,
			servers: []Server{
				{ID: "a", Start: 0, End: 6, ComputeMicros: 1, Draining: true},
				{ID: "b", Start: 0, End: 6, ComputeMicros: 2, Banned: true},
				{ID: "c", Start: 0, End: 6, ComputeMicros: 3},
				{ID: "d", Start: 0, End: 6, ComputeMicros: 4},
				{ID: "", Start: 0, End: 6, ComputeMicros: 0},
			},
			rtt:    star{client: all(0, "a", "b", "c", "d")},
			opts:   Options{Exclude: map[string]bool{"c": true}},
			want:   []string{"d"},
			micros: 4,
		},
		{
			name: "queues cost compute over the batch",
			m:    m6,
			servers: []Server{
				{ID: "a", Start: 0, End: 6, ComputeMicros: 100, QueuedTokens: 16}, // 100 + 16*100/8
				{ID: "b", Start: 0, End: 6, ComputeMicros: 250},
			},
			rtt:    star{client: all(10, "a", "b")},
			want:   []string{"b"},
			micros: 270,
		},
		{
			name: "a larger batch drains queues faster",
			m:    m6,
			servers: []Server{
				{ID: "a", Start: 0, End: 6, ComputeMicros: 100, QueuedTokens: 16}, // 100 + 16*100/32
				{ID: "b", Start: 0, End: 6, ComputeMicros: 250},
			},
			rtt:    star{client: all(10, "a", "b")},
			opts:   Options{Batch: 32},
			want:   []string{"a"},
			micros: 170,
		},
		{
			name: "unknown links cost the default",
			m:    m6,
			servers: []Server{
				srv("a", Range{0, 6, 0, 0}, 100),
				srv("b", Range{0, 6, 0, 0}, 70),
			},
			rtt:    star{client: map[string]float64{"a": 30}},
			opts:   Options{DefaultRTTMicros: 50},
			want:   []string{"a"},
			micros: 160,
		},
		{
			name: "one peer serving two ranges talks to itself for free",
			m:    m6,
			servers: []Server{
				srv("a", Range{0, 3, 0, 0}, 10),
				srv("a", Range{3, 6, 0, 0}, 10),
				srv("b", Range{3, 6, 0, 0}, 5),
			},
			rtt:    star{client: all(10, "a", "b"), between: map[[2]string]float64{{"a", "b"}: 10}},
			want:   []string{"a", "a"},
			micros: 10 + 10 + 0 + 10 + 10,
		},
		{
			name: "throughput-aware routing avoids the crowd",
			m:    m6,
			servers: []Server{
				{ID: "a", Start: 0, End: 6, ComputeMicros: 1000, Sessions: 10, TokensPerSec: 100},
				{ID: "b", Start: 0, End: 6, ComputeMicros: 5000},
			},
			rtt:    star{client: all(10, "a", "b")},
			opts:   Options{Policy: ThroughputAware},
			want:   []string{"b"},
			micros: 5020,
		},
		{
			name: "min-latency routing ignores the crowd",
			m:    m6,
			servers: []Server{
				{ID: "a", Start: 0, End: 6, ComputeMicros: 1000, Sessions: 10, TokensPerSec: 100},
				{ID: "b", Start: 0, End: 6, ComputeMicros: 5000},
			},
			rtt:    star{client: all(10, "a", "b")},
			want:   []string{"a"},
			micros: 1020,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, plan := range []struct {
				name string
				f    func(Model, []Server, RTT, Options) (Route, error)
			}{{"Plan", Plan}, {"BruteForce", BruteForce}} {
				r, err := plan.f(tt.m, tt.servers, tt.rtt.rtt, tt.opts)
				if err != nil {
					t.Fatalf("%s: %v", plan.name, err)
				}
				if got := r.IDs(); !slices.Equal(got, tt.want) {
					t.Errorf("%s: route %v, want %v", plan.name, r, tt.want)
				}
				if r.ExpectedMicros != tt.micros {
					t.Errorf("%s: expected %vµs, want %vµs", plan.name, r.ExpectedMicros, tt.micros)
				}
				if err := Check(tt.m, r.Hops); err != nil {
					t.Errorf("%s: %v", plan.name, err)
				}
			}
		})
	}
}

func TestPlanBreakdown(t *testing.T) {
	m := Model{Layers: 4, Vocab: 10}
	servers := []Server{
		{ID: "a", Start: 0, End: 2, ComputeMicros: 100, QueuedTokens: 4},
		{ID: "b", Start: 2, End: 4, ComputeMicros: 200, Sessions: 2, TokensPerSec: 50},
	}
	rtt := Matrix{{"", "a"}: 7, {"a", "b"}: 11, {"b", ""}: 13}
	r, err := Plan(m, servers, rtt.RTT, Options{Policy: ThroughputAware, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []Leg{
		{RTTMicros: 7, ComputeMicros: 100, QueueMicros: 200},
		{RTTMicros: 11, ComputeMicros: 200, LoadMicros: 40_000},
	}
	if !slices.Equal(r.Legs, want) || r.ReturnMicros != 13 {
		t.Errorf("legs %+v, return %v; want %+v, 13", r.Legs, r.ReturnMicros, want)
	}
	if r.ExpectedMicros != 7+300+11+200+13 || r.Cost != r.ExpectedMicros+40_000 {
		t.Errorf("expected %v, cost %v", r.ExpectedMicros, r.Cost)
	}
}

func TestPlanNoRoute(t *testing.T) {
	m := Model{Layers: 6, Vocab: 100}
	tests := []struct {
		name    string
		servers []Server
		want    NoRouteError
	}{
		{"nothing", nil, NoRouteError{Layer: 0}},
		{"a gap at layer 3", []Server{srv("a", Range{0, 3, 0, 0}, 1), srv("b", Range{4, 6, 0, 0}, 1)}, NoRouteError{Layer: 3}},
		{"misaligned", []Server{srv("a", Range{0, 3, 0, 0}, 1), srv("b", Range{2, 6, 0, 0}, 1)}, NoRouteError{Layer: 3}},
		{"the furthest stop", []Server{
			srv("a", Range{0, 3, 0, 0}, 1), srv("b", Range{0, 2, 0, 0}, 1), srv("c", Range{2, 4, 0, 0}, 1),
		}, NoRouteError{Layer: 4}},
		{"only a draining server continues", []Server{
			srv("a", Range{0, 3, 0, 0}, 1), {ID: "b", Start: 3, End: 6, Draining: true},
		}, NoRouteError{Layer: 3}},
		{"half a head", []Server{srv("a", Range{0, 6, 0, 50}, 1)}, NoRouteError{InHead: true, Layer: 6, HeadRow: 50}},
		{"no head row 0", []Server{srv("a", Range{0, 6, 50, 100}, 1), srv("b", Range{6, 6, 0, 50}, 1)}, NoRouteError{Layer: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, f := range map[string]func(Model, []Server, RTT, Options) (Route, error){"Plan": Plan, "BruteForce": BruteForce} {
				_, err := f(m, tt.servers, nil, Options{})
				var nr *NoRouteError
				if !errors.Is(err, ErrNoRoute) || !errors.As(err, &nr) || *nr != tt.want {
					t.Fatalf("%s: %v, want %v", name, err, &tt.want)
				}
			}
		})
	}
	_, err := Plan(m, []Server{srv("a", Range{0, 3, 0, 0}, 1)}, nil, Options{})
	if want := "route: no route covers the model: no live server continues from layer 3"; err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	_, err = Plan(m, []Server{srv("a", Range{0, 6, 0, 40}, 1)}, nil, Options{})
	if want := "head row 40"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %q, want it to end in %q", err, want)
	}
}

func TestPlanBadArguments(t *testing.T) {
	s := []Server{srv("a", Range{0, 6, 0, 0}, 1)}
	for _, m := range []Model{{0, 10}, {6, 0}, {-1, 10}} {
		if _, err := Plan(m, s, nil, Options{}); !errors.Is(err, ErrBadModel) {
			t.Errorf("model %+v: %v", m, err)
		}
	}
	for _, o := range []Options{
		{Policy: Random},
		{Policy: Policy(7)},
		{DefaultRTTMicros: -1},
		{Batch: 0.5},
		{LoadWeight: -1},
	} {
		if _, err := Plan(Model{6, 10}, s, nil, o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("options %+v: %v", o, err)
		}
	}
}

func TestNormalize(t *testing.T) {
	m := Model{Layers: 4, Vocab: 10}
	good := []struct{ in, want Range }{
		{Range{0, 4, 0, 0}, Range{0, 4, 0, 10}},
		{Range{0, 2, 0, 0}, Range{0, 2, 0, 0}},
		{Range{0, 2, 3, 7}, Range{0, 2, 0, 0}}, // as shards.Stage reads it
		{Range{1, 4, 0, 5}, Range{1, 4, 0, 5}},
		{Range{4, 4, 5, 10}, Range{4, 4, 5, 10}},
		{Range{4, 4, 0, 0}, Range{4, 4, 0, 10}},
	}
	for _, g := range good {
		if got, err := m.Normalize(g.in); err != nil || got != g.want {
			t.Errorf("Normalize(%v) = %v, %v; want %v", g.in, got, err, g.want)
		}
	}
	for _, r := range []Range{{-1, 2, 0, 0}, {0, 5, 0, 0}, {3, 2, 0, 0}, {2, 2, 0, 0}, {0, 4, 5, 5}, {0, 4, 0, 11}, {4, 4, 7, 3}, {0, 4, 3, 0}} {
		if _, err := m.Normalize(r); !errors.Is(err, ErrBadRange) {
			t.Errorf("Normalize(%v): %v, want ErrBadRange", r, err)
		}
	}
}

func TestCheck(t *testing.T) {
	m := Model{Layers: 4, Vocab: 10}
	ok := [][]Server{
		{srv("a", Range{0, 4, 0, 0}, 0)},
		{srv("a", Range{0, 2, 0, 0}, 0), srv("b", Range{2, 4, 0, 3}, 0), srv("c", Range{4, 4, 3, 10}, 0)},
	}
	for _, hops := range ok {
		if err := Check(m, hops); err != nil {
			t.Errorf("Check(%v): %v", hops, err)
		}
	}
	bad := [][]Server{
		nil,
		{srv("a", Range{1, 4, 0, 0}, 0)},
		{srv("a", Range{0, 2, 0, 0}, 0)},
		{srv("a", Range{0, 4, 0, 3}, 0)},
		{srv("a", Range{0, 2, 0, 0}, 0), srv("b", Range{1, 4, 0, 0}, 0)},
		{srv("a", Range{0, 4, 0, 3}, 0), srv("b", Range{4, 4, 4, 10}, 0)},
	}
	for _, hops := range bad {
		if err := Check(m, hops); !errors.Is(err, ErrBadChain) {
			t.Errorf("Check(%v): %v, want ErrBadChain", hops, err)
		}
	}
}

func TestReplan(t *testing.T) {
	m := Model{Layers: 6, Vocab: 10}
	servers := []Server{srv("a", Range{0, 6, 0, 0}, 1), srv("b", Range{0, 6, 0, 0}, 2), srv("c", Range{0, 6, 0, 0}, 3)}
	ex := map[string]bool{"a": true}
	r, err := Replan(m, servers, nil, Options{Exclude: ex}, "b")
	if err != nil || !slices.Equal(r.IDs(), []string{"c"}) {
		t.Fatalf("Replan = %v, %v; want c", r, err)
	}
	if len(ex) != 1 {
		t.Errorf("Replan modified the caller's Exclude: %v", ex)
	}
	if _, err := Replan(m, servers[2:], nil, Options{}, "c"); !errors.Is(err, ErrNoRoute) {
		t.Errorf("Replan without the only server: %v", err)
	}
}

func TestRandom(t *testing.T) {
	m := Model{Layers: 4, Vocab: 10}
	servers := []Server{
		srv("a", Range{0, 4, 0, 0}, 1),
		srv("b", Range{0, 2, 0, 0}, 1),
		srv("c", Range{2, 4, 0, 0}, 1),
		srv("d", Range{2, 4, 0, 5}, 1),
		srv("e", Range{4, 4, 5, 10}, 1),
		srv("f", Range{0, 3, 0, 0}, 1), // a dead end: nothing starts at 3
		srv("g", Range{0, 1, 0, 0}, 1), // a dead end: nothing starts at 1
	}
	seen := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		r, err := Plan(m, servers, nil, Options{Policy: Random, Rand: rng})
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(m, r.Hops); err != nil {
			t.Fatal(err)
		}
		seen[strings.Join(r.IDs(), ",")]++
	}
	// From layer 0, a or b (f and g lead nowhere); from layer 2, c or d.
	want := map[string]float64{"a": 1. / 2, "b,c": 1. / 4, "b,d,e": 1. / 4}
	if len(seen) != len(want) {
		t.Fatalf("routes %v, want %v", seen, want)
	}
	for k, p := range want {
		if f := float64(seen[k]) / 1000; f < p-0.05 || f > p+0.05 {
			t.Errorf("route %s taken %.3f of the time, want about %.3f", k, f, p)
		}
	}
	// The same seed gives the same routes, whatever the servers' order.
	walk := func(servers []Server) (ids []string) {
		rng := rand.New(rand.NewPCG(3, 4))
		for range 20 {
			r, _ := Plan(m, servers, nil, Options{Policy: Random, Rand: rng})
			ids = append(ids, strings.Join(r.IDs(), ","))
		}
		return ids
	}
	rev := slices.Clone(servers)
	slices.Reverse(rev)
	if a, b := walk(servers), walk(rev); !slices.Equal(a, b) {
		t.Errorf("random routes depend on the servers' order:\n%v\n%v", a, b)
	}
}

func TestOddInputs(t *testing.T) {
	m := Model{Layers: 2, Vocab: 10}
	inf := math.Inf(1)
	servers := []Server{
		{ID: "a", Start: 0, End: 2, ComputeMicros: inf, QueuedTokens: 1 << 40},
		{ID: "b", Start: 0, End: 2, ComputeMicros: -5, TokensPerSec: 1e-320, Sessions: 3},
		{ID: "c", Start: 0, End: 2, ComputeMicros: math.NaN()},
	}
	rtt := func(a, b string) (float64, bool) { return -1, true }
	for _, p := range []Policy{MinLatency, ThroughputAware} {
		r, err := Plan(m, servers, rtt, Options{Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		if r.Cost > 1e300 || r.Cost < 0 {
			t.Errorf("%v: cost %v", p, r.Cost)
		}
		b, _ := BruteForce(m, servers, rtt, Options{Policy: p})
		if b.Cost != r.Cost {
			t.Errorf("%v: Plan %v, BruteForce %v", p, r, b)
		}
	}
}

// Plans made concurrently (sharing the pooled scratch space) are the
// plans made one at a time.
func TestPlanConcurrent(t *testing.T) {
	type job struct {
		s    swarm
		want Route
		err  error
	}
	r, _ := testRand(t)
	var jobs []job
	for range 200 {
		s := randomSwarm(r, 12, false)
		want, err := Plan(s.m, s.servers, s.rtt.RTT, s.opts)
		jobs = append(jobs, job{s, want, err})
	}
	m, servers, rtt := bigSwarm(2, 3000)
	big, _ := Plan(m, servers, rtt, Options{})
	done := make(chan error)
	for w := range 4 {
		go func() {
			var err error
			for i := w; i < len(jobs); i += 4 {
				j := jobs[i]
				got, gerr := Plan(j.s.m, j.s.servers, j.s.rtt.RTT, j.s.opts)
				if !sameHops(got.Hops, j.want.Hops) || (gerr == nil) != (j.err == nil) {
					err = fmt.Errorf("swarm %d: %v, %v; alone %v, %v", i, got, gerr, j.want, j.err)
				}
				if got, _ := Plan(m, servers, rtt, Options{}); !sameHops(got.Hops, big.Hops) {
					err = fmt.Errorf("big swarm: %v; alone %v", got, big)
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
