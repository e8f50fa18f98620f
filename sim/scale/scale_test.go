package scale

import (
	"encoding/json"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized simulations (0: draw one; it is printed)")

// testSeed returns the seed of a randomized test, and prints it so that a
// failure can be replayed with -seed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()%1_000_000 + 1
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	return seed
}

// simulate runs cfg and checks the simulator's bookkeeping afterwards.
func simulate(t testing.TB, cfg Config, seed uint64) (*sim, Results) {
	t.Helper()
	s, err := newSim(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := s.run()
	if err := s.check(); err != nil {
		t.Fatalf("after the run: %v", err)
	}
	return s, r
}

func ms(x float64) Duration { return Duration(x * float64(time.Millisecond)) }

func TestDeterminism(t *testing.T) {
	seed := testSeed(t)
	cfg := DefaultConfig(300, 10)
	cfg.Routing, cfg.Placement = Random, Dynamic
	cfg.Rebalance.Imbalance, cfg.Rebalance.Gain = 1, 1 // move often
	_, a := simulate(t, cfg, seed)
	_, b := simulate(t, cfg, seed)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of seed %d differ:\n%+v\n%+v", seed, a, b)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("the JSON of two runs differs")
	}
	if a.Sessions == 0 || a.Failovers == 0 || a.Moves == 0 || a.Deaths == 0 {
		t.Fatalf("the run exercised too little: %+v", a)
	}
	_, c := simulate(t, cfg, seed+1)
	if reflect.DeepEqual(a, c) {
		t.Fatalf("seeds %d and %d gave the same results", seed, seed+1)
	}
	// Compare's parallel runs are the same runs.
	rs, err := Compare(cfg, seed, []Policy{{Random, Dynamic}, {MinLatency, Even}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rs[0], a) {
		t.Fatalf("Compare's run differs from Run's:\n%+v\n%+v", rs[0], a)
	}
	if rs[1].Routing != MinLatency || rs[1].Placement != Even {
		t.Fatalf("Compare ran %v/%v", rs[1].Routing, rs[1].Placement)
	}
}

// handConfig is one client and two nodes in two regions, 10 ms apart
// within one and 80 ms between them, no last mile, no churn: a scenario
// whose timings follow from the cost model by hand.
func handConfig() Config {
	c := DefaultConfig(0, 1)
	c.Swarm.MeanLifetime = 0
	c.Network.Regions = []Region{{"a", 1}, {"b", 1}}
	c.Network.RTT = [][]Duration{{ms(10), ms(80)}, {ms(80), ms(10)}}
	c.Network.FailureDetect = Duration(time.Second)
	c.Workload.SessionsPerSec = 0
	c.Workload.PromptTokens = 1
	c.Workload.Tokens = 4
	c.Workload.Scripted = []SessionSpec{{At: 0, Region: 0}}
	c.Warmup = 0
	prof := shards.DefaultProfile
	c.Swarm.Fixed = []NodeSpec{
		{Region: 0, Profile: prof, UplinkMbps: 100, MemoryGB: 64, Stage: &shards.Stage{Start: 0, End: 40}},
		{Region: 1, Profile: prof, UplinkMbps: 100, MemoryGB: 64, Stage: &shards.Stage{Start: 40, End: 80}},
	}
	return c
}

// hand is the arithmetic of handConfig's model, in seconds.
type hand struct {
	costs   shards.Costs
	kvLayer float64 // KV bytes one sequence reads per layer (CostsOf's)
	xfer    float64 // one hidden state (8192 float32s) at 100 Mbit/s
}

func newHand(t *testing.T) hand {
	conf, err := shards.SynthConfig("llama3-70b", 0)
	if err != nil {
		t.Fatal(err)
	}
	return hand{
		costs:   shards.CostsOf(conf, ovrt.Q4_0, ovrt.Q8_0),
		kvLayer: float64(2 * 4 * conf.KVDim() * shards.AvgContext(conf)),
		xfer:    8192 * 4 / (100e6 / 8),
	}
}

// svc is one forward of tokens tokens from seqs sequences over layers
// [lo, hi) on p: the weights read once, each sequence's KV once, the
// multiply-adds once per token. With one token of one sequence it is
// p.Seconds(costs.Work(stage)).
func (h hand) svc(p shards.Profile, lo, hi, tokens, seqs int) float64 {
	w := h.costs.Work(shards.Stage{Start: lo, End: hi})
	bytes := float64(w.Bytes) + float64(seqs-1)*h.kvLayer*float64(hi-lo)
	return max(bytes/p.BytesPerSec, float64(w.MACs)*float64(tokens)/p.MACsPerSec)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 5e-6 } // ms: 5 ns of rounding

func TestHandChecked(t *testing.T) {
	h := newHand(t)
	p := shards.DefaultProfile
	svcA, svcB := p.Seconds(h.costs.Work(shards.Stage{Start: 0, End: 40})), p.Seconds(h.costs.Work(shards.Stage{Start: 40, End: 80}))
	// Client → A: 10 ms / 2; A → B: 80 ms / 2 plus the hidden state on
	// A's uplink; B → client: 80 ms / 2.
	perToken := 1e3 * (0.005 + svcA + h.xfer + 0.040 + svcB + 0.040) // ms

	t.Run("one client", func(t *testing.T) {
		_, r := simulate(t, handConfig(), 1)
		t.Logf("per token: %.6f ms (A %.3f ms, B %.3f ms)", perToken, 1e3*svcA, 1e3*svcB)
		if r.Latency.N != 3 || r.TTFT.N != 1 || r.Tokens != 4 || r.Completed != 1 {
			t.Fatalf("results %+v", r)
		}
		for _, got := range []float64{r.TTFT.P50, r.Latency.P50, r.Latency.P99, r.Latency.Max, r.Latency.Mean} {
			if !near(got, perToken) {
				t.Errorf("latency %.6f ms, want %.6f by hand", got, perToken)
			}
		}
		if r.MeanRouteHops != 2 || r.TokensPerSec != 4.0/60 {
			t.Errorf("hops %v, %v tokens/s", r.MeanRouteHops, r.TokensPerSec)
		}
	})

	t.Run("prompt", func(t *testing.T) {
		// A prompt of 5 is one forward of 5 tokens on each hop and 5
		// hidden states on the link; later tokens cost what they did.
		cfg := handConfig()
		cfg.Workload.PromptTokens = 5
		_, r := simulate(t, cfg, 1)
		want := 1e3 * (0.005 + h.svc(p, 0, 40, 5, 1) + 5*h.xfer + 0.040 + h.svc(p, 40, 80, 5, 1) + 0.040)
		if !near(r.TTFT.P50, want) || !near(r.Latency.Max, perToken) {
			t.Errorf("TTFT %.6f ms, want %.6f; per token %.6f, want %.6f", r.TTFT.P50, want, r.Latency.Max, perToken)
		}
	})

	t.Run("batch", func(t *testing.T) {
		// Three clients at once. A takes the first request alone, the
		// two that queued behind it in one batch; its uplink sends their
		// hidden states one after the other. B is idle when the second
		// arrives (a batch of two outlasts B's forward of one), so the
		// third waits for it.
		cfg := handConfig()
		cfg.Workload.Tokens = 1
		cfg.Workload.Scripted = []SessionSpec{{}, {}, {}}
		_, r := simulate(t, cfg, 1)
		svc2 := h.svc(p, 0, 40, 2, 2)
		if !(svc2 > svcB && svcA > h.xfer) {
			t.Fatalf("the scenario's premises fail: batch of 2 on A %.3f s, B %.3f s", svc2, svcB)
		}
		end := 0.005 + svcA + svc2 // A's batch of two ends
		want := []float64{
			perToken,
			1e3 * (end + h.xfer + 0.040 + svcB + 0.040),
			1e3 * (end + h.xfer + 0.040 + 2*svcB + 0.040),
		}
		if r.TTFT.N != 3 || !near(r.TTFT.Max, want[2]) || !near(r.TTFT.Mean, (want[0]+want[1]+want[2])/3) {
			t.Errorf("TTFTs %+v, want %v", r.TTFT, want)
		}
	})
}

func TestFailover(t *testing.T) {
	h := newHand(t)
	p := shards.DefaultProfile
	slow := shards.Profile{BytesPerSec: p.BytesPerSec, MACsPerSec: p.MACsPerSec / 2}
	svcA, svcB := p.Seconds(h.costs.Work(shards.Stage{Start: 0, End: 40})), p.Seconds(h.costs.Work(shards.Stage{Start: 40, End: 80}))
	L := 0.005 + svcA + h.xfer + 0.040 + svcB + 0.040 // s per token
	dieAt := Duration(2.5 * L * 1e9)                  // B dies computing the third token

	t.Run("replacement", func(t *testing.T) {
		cfg := handConfig()
		cfg.Swarm.Fixed[1].DieAt = dieAt
		// C serves what B did, at half B's speed: routes avoid it until B dies.
		c := cfg.Swarm.Fixed[1]
		c.Profile, c.DieAt = slow, 0
		cfg.Swarm.Fixed = append(cfg.Swarm.Fixed, c)
		_, r := simulate(t, cfg, 1)
		if r.Completed != 1 || r.Failed != 0 || r.Failovers != 1 || r.Tokens != 4 || r.Deaths != 1 {
			t.Fatalf("results %+v", r)
		}
		// Two tokens were delivered: the replay prefills the prompt and
		// them on C, the new hop. A still holds the session: it computes
		// the token in flight and sends C the three hidden states.
		if r.ReplayedTokens != 3 {
			t.Errorf("replayed %d positions, want 3", r.ReplayedTokens)
		}
		failover := 2.5*L + 1 // s: B's death, noticed a second later
		svcC3 := h.svc(slow, 40, 80, 3, 1)
		stalled := failover + 0.005 + svcA + 3*h.xfer + 0.040 + svcC3 + 0.040 - 2*L
		if !near(r.Latency.Max, 1e3*stalled) {
			t.Errorf("the stalled token took %.6f ms, want %.6f by hand", r.Latency.Max, 1e3*stalled)
		}
	})

	t.Run("no replacement", func(t *testing.T) {
		cfg := handConfig()
		cfg.Swarm.Fixed[1].DieAt = dieAt
		_, r := simulate(t, cfg, 1)
		if r.Completed != 0 || r.Failed != 1 || r.Failovers != 0 || r.FailedTokens != 2 || r.Tokens != 2 || r.FailedAtStart != 0 {
			t.Fatalf("results %+v", r)
		}
	})

	t.Run("churn", func(t *testing.T) {
		seed := testSeed(t)
		cfg := DefaultConfig(300, 20)
		cfg.Routing = ThroughputAware
		_, r := simulate(t, cfg, seed)
		if r.Deaths == 0 || r.Failovers == 0 || r.ReplayedTokens == 0 || r.Completed == 0 {
			t.Fatalf("churn caused no failovers: %+v", r)
		}
		cfg.Swarm.MeanLifetime = 0
		_, r = simulate(t, cfg, seed)
		if r.Deaths != 0 || r.Failovers != 0 || r.ReplayedTokens != 0 {
			t.Fatalf("failovers without churn: %+v", r)
		}
	})
}

func TestMinLatencyBeatsRandom(t *testing.T) {
	// A heterogeneous swarm (speeds, regions, uplinks, last miles) under
	// light load, so that routes do not queue behind each other.
	seed := testSeed(t)
	cfg := DefaultConfig(300, 20)
	cfg.Swarm.MeanLifetime = 0
	cfg.Workload.SessionsPerSec = 0.02
	rs, err := Compare(cfg, seed, []Policy{{MinLatency, Even}, {Random, Even}})
	if err != nil {
		t.Fatal(err)
	}
	ml, rnd := rs[0], rs[1]
	t.Logf("mean per-token latency: min-latency %.0f ms, random %.0f ms (%d and %d tokens)", ml.Latency.Mean, rnd.Latency.Mean, ml.Latency.N, rnd.Latency.N)
	if ml.Latency.N == 0 || ml.Sessions != rnd.Sessions {
		t.Fatalf("results %+v %+v", ml, rnd)
	}
	if !(ml.Latency.Mean < rnd.Latency.Mean) {
		t.Fatalf("min-latency %.0f ms is not below random %.0f ms", ml.Latency.Mean, rnd.Latency.Mean)
	}
}

func TestConservation(t *testing.T) {
	seed := testSeed(t)
	cfg := DefaultConfig(300, 15)
	cfg.Workload.SessionsPerSec = 0.5 // heavy, so that some sessions fail
	cfg.Workload.Timeout = Duration(10 * time.Minute)
	for _, p := range Matrix() {
		cfg.Routing, cfg.Placement = p.Routing, p.Placement
		_, r := simulate(t, cfg, seed)
		switch {
		case r.Unfinished != 0:
			t.Errorf("%v: %d sessions unfinished though Drain ≥ Timeout", p, r.Unfinished)
		case r.Sessions != r.Completed+r.Failed+r.Unfinished:
			t.Errorf("%v: %d sessions = %d completed + %d failed + %d unfinished", p, r.Sessions, r.Completed, r.Failed, r.Unfinished)
		case r.Tokens != int64(r.Completed*cfg.Workload.Tokens)+r.FailedTokens+r.UnfinishedTokens:
			t.Errorf("%v: %d tokens, %d completed, %d of failed sessions, %d unfinished", p, r.Tokens, r.Completed, r.FailedTokens, r.UnfinishedTokens)
		case int64(r.Latency.N+r.TTFT.N) != r.WindowTokens || r.WindowTokens > r.Tokens:
			t.Errorf("%v: %d+%d latencies of %d tokens in the window (%d in all)", p, r.Latency.N, r.TTFT.N, r.WindowTokens, r.Tokens)
		case r.FailedAtStart+r.TimedOut > r.Failed:
			t.Errorf("%v: %d failed, %d at start, %d timed out", p, r.Failed, r.FailedAtStart, r.TimedOut)
		}
		t.Logf("%v: %d sessions, %d completed, %d failed (%d timed out), %d failovers", p, r.Sessions, r.Completed, r.Failed, r.TimedOut, r.Failovers)
	}
}

// TestCoverageView checks the fast path placement uses (one server per
// stage with summed capacity) against the plain one (every node's status)
// through a run with churn and moves.
func TestCoverageView(t *testing.T) {
	seed := testSeed(t)
	cfg := DefaultConfig(200, 10)
	cfg.Placement = Dynamic
	cfg.Rebalance.Imbalance, cfg.Rebalance.Gain = 1, 1
	cfg.Swarm.CountLoading = true
	s, err := newSim(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	checks := 0
	s.progress = func(time.Duration) {
		for _, pending := range []bool{false, true} {
			var full []route.Server
			for _, n := range s.nodes {
				st := n.stage
				switch {
				case n.state == stServing:
				case pending && n.state == stLoading:
				case pending && n.state == stDraining:
					st = n.target
				default:
					continue
				}
				r := s.m.stages[st].rng
				full = append(full, route.Server{ID: n.id, Start: r.Start, End: r.End, HeadLo: r.HeadLo, HeadHi: r.HeadHi,
					ComputeMicros: s.m.stages[st].service(n.prof, 1, 1) * 1e6})
			}
			agg := s.coverageView(pending, nil)
			// The same throughput everywhere (server counts differ: one
			// per stage against one per node).
			a, b := throughput(route.Coverage(s.m.rm, agg)), throughput(route.Coverage(s.m.rm, full))
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("at %v: coverage %v, want %v", s.now, a, b)
			}
			var rs []route.Range
			for _, st := range s.m.stages {
				rs = append(rs, st.rng)
			}
			for k := range rs {
				// Every suffix, so that the chosen index varies.
				i, sa := route.Choose(s.m.rm, agg, rs[k:])
				j, sb := route.Choose(s.m.rm, full, rs[k:])
				if i != j || !slices.Equal(sa, sb) {
					t.Fatalf("at %v: Choose %d %v, want %d %v", s.now, i, sa, j, sb)
				}
			}
			checks++
		}
		if err := s.check(); err != nil {
			t.Fatalf("at %v: %v", s.now, err)
		}
	}
	r := s.run()
	if checks < 10 || r.Moves == 0 {
		t.Fatalf("%d checks, %d moves", checks, r.Moves)
	}
}

// throughput is spans without their server counts, runs of equal
// throughput merged.
func throughput(spans []route.Span) []route.Span {
	var out []route.Span
	for _, sp := range spans {
		sp.Servers = 0
		if k := len(out) - 1; k >= 0 && out[k].Head == sp.Head && out[k].Hi == sp.Lo && out[k].TokensPerSec == sp.TokensPerSec {
			out[k].Hi = sp.Hi
			continue
		}
		out = append(out, sp)
	}
	return out
}

func TestDynamicFillsGap(t *testing.T) {
	// Twenty nodes serve the first half of the model and two the second:
	// the second half is the bottleneck, and dynamic placement moves
	// nodes there.
	conf, _ := shards.SynthConfig("llama3-70b", 0)
	cut, err := shards.BalancedSplit(shards.CostsOf(conf, ovrt.Q4_0, ovrt.Q8_0), shards.DefaultProfile, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(0, 30)
	cfg.Swarm.MeanLifetime = 0
	cfg.Workload.SessionsPerSec = 0.01
	for i := range 22 {
		st := cut[0]
		if i >= 20 {
			st = cut[1]
		}
		cfg.Swarm.Fixed = append(cfg.Swarm.Fixed, NodeSpec{Region: i % 5, MemoryGB: 32, Stage: &st})
	}
	seed := testSeed(t)
	for _, p := range []Placement{Balanced, Dynamic} {
		cfg.Placement = p
		_, r := simulate(t, cfg, seed)
		first, last := r.Coverage.Samples[0], r.Coverage.Samples[len(r.Coverage.Samples)-1]
		t.Logf("%v: coverage min %.2f → %.2f tokens/s (mean %.2f → %.2f), %d moves", p, first.Min, last.Min, first.Mean, last.Mean, r.Moves)
		switch {
		case p == Balanced && (r.Moves != 0 || last.Min != first.Min):
			t.Errorf("balanced placement moved nodes")
		case p == Dynamic && (r.Moves < 5 || !(last.Min > 2*first.Min)):
			t.Errorf("dynamic placement did not fill the gap: %d moves, min %.2f → %.2f", r.Moves, first.Min, last.Min)
		}
	}
}

func TestConfigJSON(t *testing.T) {
	cfg := DefaultConfig(1000, 30)
	cfg.Swarm.Fixed = []NodeSpec{{Region: 1, Stage: &shards.Stage{Start: 0, End: 8}, DieAt: Duration(time.Minute)}}
	cfg.Routing, cfg.Placement = ThroughputAware, Dynamic
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip:\n%s\ngave %+v", b, back)
	}

	// A scenario file read over the defaults sets what it names.
	scenario := `{"routing": "random", "placement": "balanced", "duration": "10m", "warmup": 60,
		"swarm": {"nodes": 5000, "mean_lifetime": "1h"}, "model": {"shape": "llama3-8b"}}`
	got := DefaultConfig(1000, 30)
	if err := json.Unmarshal([]byte(scenario), &got); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig(1000, 30)
	want.Routing, want.Placement = Random, Balanced
	want.Duration, want.Warmup = Duration(10*time.Minute), Duration(time.Minute)
	want.Swarm.Nodes, want.Swarm.MeanLifetime = 5000, Duration(time.Hour)
	want.Model.Shape = "llama3-8b"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("scenario read as %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []string{
		`{"routing": "fastest"}`, `{"placement": "anywhere"}`, `{"duration": "soon"}`,
	} {
		c := DefaultConfig(10, 1)
		if err := json.Unmarshal([]byte(bad), &c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", bad, err)
		}
	}
	for name, f := range map[string]func(*Config){
		"shape":    func(c *Config) { c.Model.Shape = "gpt-5" },
		"stages":   func(c *Config) { c.Model.Stages = []int{0} },
		"nodes":    func(c *Config) { c.Swarm.Nodes = 0 },
		"rtt":      func(c *Config) { c.Network.RTT = c.Network.RTT[:2] },
		"tokens":   func(c *Config) { c.Workload.Tokens = 0 },
		"warmup":   func(c *Config) { c.Warmup = c.Duration },
		"region":   func(c *Config) { c.Workload.Scripted = []SessionSpec{{Region: 9}} },
		"stage":    func(c *Config) { c.Swarm.Fixed = []NodeSpec{{Stage: &shards.Stage{Start: 70, End: 90}}} },
		"batch":    func(c *Config) { c.RouteBatch = 0.5 },
		"speed":    func(c *Config) { c.Swarm.Speed.BytesPerSec = 0 },
		"lifetime": func(c *Config) { c.Swarm.MeanLifetime = -1 },
	} {
		c := DefaultConfig(10, 1)
		f(&c)
		if _, err := Run(c, 1, nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
}

func TestProgress(t *testing.T) {
	var sims []time.Duration
	_, err := Run(DefaultConfig(50, 5), 1, func(sim, wall time.Duration) { sims = append(sims, sim) })
	if err != nil {
		t.Fatal(err)
	}
	if len(sims) < 5 || !slices.IsSorted(sims) {
		t.Fatalf("progress at %v", sims)
	}
}
