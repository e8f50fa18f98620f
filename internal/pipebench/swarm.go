package pipebench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/sim/plot"
	"github.com/pipeshard/pipeshard/sim/scenario"
)

// phase is one phase of a scenario run: a client load.
type phase struct {
	key      string // the contender this phase measures
	rep      int
	inFlight int
	args     []string // client flags besides --requests
}

// stat is what one phase measured.
type stat struct {
	agg       float64 // decode tokens/s of all streams over the phase's decode window
	perStream float64 // mean of the streams' decode tokens/s
	accept    float64 // accepted/drafted (NaN without drafts)
	perTrav   float64 // generated tokens per traversal after the prompt's
	meanK     float64 // drafts per traversal
	ids       [][]int
	failed    int
}

// twoStages is the cost-balanced 2-stage cut of stories15M, as
// `shards split --stages 2` makes it.
func twoStages(path string) ([]shards.Stage, error) {
	w, err := checkpoint.LoadLlama2C(path, 0, 0)
	if err != nil {
		return nil, err
	}
	cfg := w.Config
	w.Close()
	return shards.BalancedSplit(shards.CostsOf(cfg, ovrt.F32, ovrt.F32), shards.DefaultProfile, 2)
}

// runSwarm runs phases on a 2-node swarm of the model (stories15M, or
// c.Model) whose every link has delay one way, in sim/netem's emulated
// network, or on plain loopback when delay is loopbackDelay; cpus, if
// set, pins node i to cpus[i]. prepared, if set, is told the model's CID
// and store before the nodes start.
func runSwarm(ctx context.Context, c Config, name string, delay time.Duration, cpus []string, phases []phase,
	before func(ctx context.Context, p int) error, prepared func(model, store string)) ([]stat, error) {
	sc := &scenario.Scenario{Name: name, Seed: 1}
	cl := scenario.Client{Name: "c", Count: 1, Requests: 1, Prompt: c.Prompt, Tokens: c.Tokens, IgnoreEOS: true,
		Timeout: scenario.Duration(2 * time.Minute)}
	var stages []shards.Stage
	var err error
	if cfg, q, ok := c.synth(); ok {
		if stages, err = shards.BalancedSplit(shards.CostsOf(cfg, q, ovrt.Q8_0), shards.DefaultProfile, 2); err != nil {
			return nil, err
		}
		sc.Model = scenario.Model{Name: c.Model, Quant: c.Quant}
		cl.Prompt, cl.PromptIDs = "", bigPrompt
		cl.Timeout = scenario.Duration(30 * time.Minute)
	} else {
		if stages, err = twoStages(c.ModelPath); err != nil {
			return nil, err
		}
		sc.Model = scenario.Model{Name: "stories15M", Quant: "f32"}
	}
	sc.Model.Layouts = []string{scenario.FormatLayout(stages)}
	for i, st := range stages {
		n := scenario.Node{Name: fmt.Sprintf("n%d", i), Count: 1, Cores: 1, Layers: st.String()}
		if i < len(cpus) {
			n.CPUs = cpus[i]
		}
		sc.Nodes = append(sc.Nodes, n)
	}
	ss, _, err := runScenario(ctx, c, sc, cl, delay, phases, before, prepared)
	return ss, err
}

// runScenario runs phases, one after another, on sc's nodes (its model
// and nodes set; its network, bounds and client are set here), with
// client cl, and returns what each phase measured and the run's results.
func runScenario(ctx context.Context, c Config, sc *scenario.Scenario, cl scenario.Client, delay time.Duration, phases []phase,
	before func(ctx context.Context, p int) error, prepared func(model, store string)) ([]stat, *scenario.Results, error) {
	if c.StartNetwork == nil && delay != loopbackDelay {
		return nil, nil, fmt.Errorf("%w: no network emulator", ErrConfig)
	}
	name := sc.Name
	sc.Network = scenario.Topology{Delay: scenario.Duration(max(delay, 0))}
	sc.Bounds = scenario.Bounds{MaxDuration: scenario.Duration(2 * time.Hour)}
	for _, p := range phases {
		cl.InFlight = append(cl.InFlight, p.inFlight)
		cl.Args = append(cl.Args, append([]string{"--requests", strconv.Itoa(p.inFlight)}, p.args...))
	}
	sc.Clients = []scenario.Client{cl}
	// Through the file format, so that the scenario gets its defaults.
	y, err := sc.Marshal()
	if err != nil {
		return nil, nil, err
	}
	if sc, err = scenario.Parse(y); err != nil {
		return nil, nil, err
	}
	work := c.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "pipebench-"); err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(work)
	}
	var net scenario.Network = scenario.Loopback{}
	if delay != loopbackDelay {
		if net, err = c.StartNetwork(ctx, sc.NetSpec("auto", c.Log)); err != nil {
			return nil, nil, err
		}
	}
	env := scenario.Env{Net: net, Binary: c.Binary, WorkDir: filepath.Join(work, name), Log: c.Log,
		BeforePhase: func(ctx context.Context, p int) error {
			c.Log.Info(name, "phase", p+1, "of", len(phases), "contender", phases[p].key, "repeat", phases[p].rep+1)
			if before != nil {
				return before(ctx, p)
			}
			return nil
		},
		Prepared: prepared}
	res, err := scenario.Run(ctx, sc, env)
	if err != nil {
		return nil, nil, err
	}
	if c.WorkDir != "" {
		// Every request's record (token times, route, counts) beside the logs.
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(env.WorkDir, "results.json"), b, 0o644)
		}
		if err != nil {
			c.Log.Warn(name, "results", err)
		}
	}
	out := make([]stat, len(phases))
	for p := range phases {
		out[p] = phaseStat(res, p)
		if out[p].failed > 0 {
			return nil, res, fmt.Errorf("%s: phase %d (%s): %d requests failed (logs in %s)", name, p, phases[p].key, out[p].failed, env.WorkDir)
		}
		c.Log.Info(name, "phase", p+1, "contender", phases[p].key, "tok/s", f1(out[p].agg), "per stream", f1(out[p].perStream))
	}
	return out, res, nil
}

func phaseStat(res *scenario.Results, p int) stat {
	s := stat{accept: math.NaN(), perTrav: math.NaN(), meanK: math.NaN()}
	first, last := math.Inf(1), math.Inf(-1)
	tokens, n := 0, 0
	drafted, accepted, travs, gen := 0, 0, 0, 0
	for _, q := range res.Requests {
		if q.Phase != p {
			continue
		}
		if q.Error != "" || len(q.TokenTimes) < 2 {
			s.failed++
			continue
		}
		first, last = min(first, q.TokenTimes[0]), max(last, q.TokenTimes[len(q.TokenTimes)-1])
		tokens += len(q.TokenTimes) - 1
		s.perStream += q.TokensPerSec
		n++
		s.ids = append(s.ids, q.IDs)
		drafted, accepted = drafted+q.Drafted, accepted+q.Accepted
		if q.Traversals > 1 {
			travs += q.Traversals - 1
			gen += len(q.IDs) - 1
		}
	}
	if n == 0 {
		s.agg, s.perStream = math.NaN(), math.NaN()
		return s
	}
	s.agg = float64(tokens) / (last - first)
	s.perStream /= float64(n)
	if drafted > 0 {
		s.accept = float64(accepted) / float64(drafted)
	}
	if travs > 0 {
		s.perTrav = float64(gen) / float64(travs)
		s.meanK = float64(drafted) / float64(travs)
	}
	return s
}

// sameOutput reports whether every stream of every stat generated the
// same ids (greedy decoding of one prompt).
func sameOutput(ss ...stat) bool {
	var want []int
	for _, s := range ss {
		for _, ids := range s.ids {
			if want == nil {
				want = ids
			} else if !slices.Equal(want, ids) {
				return false
			}
		}
	}
	return true
}

// byKey gathers a value of the phases per contender.
func byKey(phases []phase, ss []stat, f func(stat) float64) map[string][]float64 {
	m := map[string][]float64{}
	for i, p := range phases {
		m[p.key] = append(m[p.key], f(ss[i]))
	}
	return m
}

// ratios returns, per repeat, the contender's value over the base's.
func ratios(phases []phase, ss []stat, key, base string, f func(stat) float64) []float64 {
	num, den := map[int]float64{}, map[int]float64{}
	for i, p := range phases {
		switch p.key {
		case key:
			num[p.rep] = f(ss[i])
		case base:
			den[p.rep] = f(ss[i])
		}
	}
	var out []float64
	for r, v := range num {
		if d, ok := den[r]; ok && d > 0 {
			out = append(out, v/d)
		}
	}
	return out
}

func agg(s stat) float64 { return s.agg }

// --- table c --------------------------------------------------------

func wanTable(ctx context.Context, c Config) (*Table, error) {
	if len(c.Delays) == 0 {
		c.Delays = []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}
	}
	full := fmt.Sprintf("%d streams + n-gram", c.Streams)
	streams := fmt.Sprintf("%d streams", c.Streams)
	t := &Table{ID: "c", Title: fmt.Sprintf("WAN: naive vs full stack, stories15M f32 on 2 nodes (1 core each), %d tokens per stream", c.Tokens),
		Header: []string{"one-way delay per link", "naive tok/s", "n-gram, 1 stream", "n-gram/naive"}}
	line := plot.Line{Title: "table c: full stack / naive", XLabel: "one-way delay per link (ms)", YLabel: "× naive", Points: true}
	series := []plot.Series{{Name: "n-gram, 1 stream"}}
	// The n-gram drafter with a history of earlier answers, as a client
	// that has served other requests has (HOME/history).
	var histArgs []string
	if c.HistoryStories > 0 {
		dir := c.WorkDir
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "pipebench-history-"); err != nil {
				return nil, err
			}
			defer os.RemoveAll(dir)
		}
		path := filepath.Join(dir, "history.ngram")
		n, err := buildHistory(ctx, c, path)
		if err != nil {
			return nil, fmt.Errorf("n-gram history: %w", err)
		}
		histArgs = []string{"--speculate", "ngram", "--history", path}
		t.Header = append(t.Header, "n-gram + history, 1 stream", "n-gram + history/naive")
		series = append(series, plot.Series{Name: "n-gram + history, 1 stream"})
		t.Notes = append(t.Notes, fmt.Sprintf("n-gram + history: the client's n-gram history holds %d earlier answers to other prompts (%d tokens, greedy, up to 200 tokens each), as `swarm generate --speculate ngram` keeps them in HOME/history; it never holds this prompt's answer.", c.HistoryStories, n))
	}
	t.Header = append(t.Header, streams, streams+"/naive", "full: "+full, "full/naive", "full tok/s per stream", "n-gram acceptance")
	series = append(series, plot.Series{Name: streams}, plot.Series{Name: full})
	same := true
	for _, d := range c.Delays {
		var ph []phase
		for r := range c.Repeats {
			ph = append(ph,
				phase{key: "naive", rep: r, inFlight: 1},
				phase{key: "ngram", rep: r, inFlight: 1, args: []string{"--speculate", "ngram"}})
			if histArgs != nil {
				ph = append(ph, phase{key: "hist", rep: r, inFlight: 1, args: histArgs})
			}
			ph = append(ph,
				phase{key: "streams", rep: r, inFlight: c.Streams},
				phase{key: "full", rep: r, inFlight: c.Streams, args: []string{"--speculate", "ngram"}})
		}
		ss, err := runSwarm(ctx, c, fmt.Sprintf("wan-%dms", d.Milliseconds()), d, nil, ph, nil, nil)
		if err != nil {
			return nil, err
		}
		same = same && sameOutput(ss...)
		a := byKey(ph, ss, agg)
		per := byKey(ph, ss, func(s stat) float64 { return s.perStream })
		acc := byKey(ph, ss, func(s stat) float64 { return s.accept })
		rn := median(ratios(ph, ss, "ngram", "naive", agg))
		rs := median(ratios(ph, ss, "streams", "naive", agg))
		rf := median(ratios(ph, ss, "full", "naive", agg))
		row := []string{fmt.Sprintf("%d ms", d.Milliseconds()), f1(median(a["naive"])), f1(median(a["ngram"])), ratio(rn)}
		vs := []float64{rn}
		if histArgs != nil {
			rh := median(ratios(ph, ss, "hist", "naive", agg))
			row = append(row, f1(median(a["hist"])), ratio(rh))
			vs = append(vs, rh)
			pt := byKey(ph, ss, func(s stat) float64 { return s.perTrav })["hist"]
			mk := byKey(ph, ss, func(s stat) float64 { return s.meanK })["hist"]
			t.Notes = append(t.Notes, fmt.Sprintf("At %d ms, n-gram + history generated %.2f tokens per traversal, verifying %.1f drafts (tree nodes) per traversal (medians).",
				d.Milliseconds(), median(pt), median(mk)))
		}
		t.Rows = append(t.Rows, append(row, f1(median(a["streams"])), ratio(rs), f1(median(a["full"])), ratio(rf), f1(median(per["full"])), pct(median(acc["full"]))))
		x := float64(d.Milliseconds())
		for i, v := range append(vs, rs, rf) {
			series[i].X, series[i].Y = append(series[i].X, x), append(series[i].Y, v)
		}
	}
	line.Series = series
	t.Plot = line
	t.Notes = append(t.Notes, fmt.Sprintf("Route: client → n0 → n1 → client, so a traversal crosses 3 delayed links. %d repeats per delay, the contenders alternating in one run per delay; ratios are medians of per-repeat ratios. Greedy output identical across all contenders and streams: %v.", c.Repeats, same))
	return t, nil
}

// --- table d --------------------------------------------------------

func kSweep(ctx context.Context, c Config) (*Table, error) {
	if len(c.KDelays) == 0 {
		c.KDelays = []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond}
	}
	if len(c.Ks) == 0 {
		c.Ks = []int{1, 3, 6, 10}
	}
	t := &Table{ID: "d", Title: fmt.Sprintf("K sweep: one stream of stories15M f32 on 2 nodes, %d tokens", c.Tokens),
		Header: []string{"delay", "drafter", "K", "paper's K", "tok/s", "× no speculation", "acceptance", "tokens/traversal", "drafts/traversal"}}
	line := plot.Line{Title: "table d: speed-up over no speculation by K", XLabel: "K", YLabel: "× no speculation", Points: true}
	for _, d := range c.KDelays {
		paper := 6
		if d >= 50*time.Millisecond {
			paper = 10
		}
		var ph []phase
		var drafters = []struct {
			name, key string
			args      []string
		}{
			{"n-gram", "ngram", []string{"--speculate", "ngram"}},
			{"draft: stories15M " + c.DraftQuant, "draft", []string{"--speculate", "draft", "--draft-model", c.DraftModel, "--draft-quant", c.DraftQuant}},
		}
		ks := append(slices.Clone(c.Ks), 0)
		for r := range c.Repeats {
			ph = append(ph, phase{key: "none", rep: r, inFlight: 1})
			for _, dr := range drafters {
				for _, k := range ks {
					kk := "auto"
					if k > 0 {
						kk = strconv.Itoa(k)
					}
					ph = append(ph, phase{key: dr.key + "/" + kk, rep: r, inFlight: 1, args: append(slices.Clone(dr.args), "--spec-k", kk)})
				}
			}
		}
		ss, err := runSwarm(ctx, c, fmt.Sprintf("ksweep-%dms", d.Milliseconds()), d, nil, ph, nil, nil)
		if err != nil {
			return nil, err
		}
		if !sameOutput(ss...) {
			return nil, fmt.Errorf("delay %v: speculative output differs from plain greedy output", d)
		}
		a := byKey(ph, ss, agg)
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%d ms", d.Milliseconds()), "none", "–", "–", f1(median(a["none"])), "1", "–", "1", "–"})
		for _, dr := range drafters {
			s := plot.Series{Name: fmt.Sprintf("%s, %d ms", dr.key, d.Milliseconds())}
			for _, k := range ks {
				kk := "auto"
				if k > 0 {
					kk = strconv.Itoa(k)
				}
				key := dr.key + "/" + kk
				r := median(ratios(ph, ss, key, "none", agg))
				acc := byKey(ph, ss, func(s stat) float64 { return s.accept })[key]
				pt := byKey(ph, ss, func(s stat) float64 { return s.perTrav })[key]
				mk := byKey(ph, ss, func(s stat) float64 { return s.meanK })[key]
				pk := ""
				if k == paper {
					pk = "← paper"
				}
				t.Rows = append(t.Rows, []string{fmt.Sprintf("%d ms", d.Milliseconds()), dr.name, kk, pk, f1(median(a[key])), ratio(r), pct(median(acc)), f2(median(pt)), f2(median(mk))})
				if k > 0 {
					s.X, s.Y = append(s.X, float64(k)), append(s.Y, r)
				}
			}
			line.Series = append(line.Series, s)
		}
	}
	t.Plot = line
	t.Notes = append(t.Notes, fmt.Sprintf("Paper's rule: K = 6 (5–7) on a LAN, 10 at ≥ 50 ms per hop. \"auto\" is spec.Tuner (--spec-k auto); its drafts/traversal is the mean K it chose. %d repeats; within a delay all rows alternate in one run; × is the median of per-repeat ratios. Greedy output of every row equals the plain run's.", c.Repeats))
	return t, nil
}

// --- table b --------------------------------------------------------

// unsplitRate runs `pipeshard run` on the whole model pinned to CPU 0
// with one thread and returns its decode tokens/s.
func unsplitRate(ctx context.Context, c Config, model, store string) (float64, error) {
	args := []string{"-c", "0", c.Binary, "run", "--threads", "1", "-n", strconv.Itoa(c.Tokens), "--ignore-eos", "--json"}
	env := append(os.Environ(), "GOMAXPROCS=1")
	if _, _, ok := c.synth(); ok {
		// The whole model, from the store the swarm's shards were cut in.
		ids := make([]string, len(bigPrompt))
		for i, id := range bigPrompt {
			ids[i] = strconv.Itoa(id)
		}
		args = append(args, "--model", model, "--quant", c.Quant, "--prompt-ids", strings.Join(ids, ","))
		env = append(env, "PIPESHARD_HOME="+store)
	} else {
		args = append(args, "--model", c.ModelPath, "--prompt", c.Prompt)
	}
	cmd := exec.CommandContext(ctx, "taskset", args...)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("unsplit run: %w", err)
	}
	var r struct {
		Rate float64 `json:"decode_tokens_per_s"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("unsplit run: %w", err)
	}
	return r.Rate, nil
}

// loopbackDelay asks runSwarm for plain loopback: no emulator, whose
// userspace forwarding would share the nodes' two cores.
const loopbackDelay = -1

func microBatch(ctx context.Context, c Config) (*Table, error) {
	var ph []phase
	for r := range c.Repeats {
		for _, b := range c.Batch {
			ph = append(ph, phase{key: strconv.Itoa(b), rep: r, inFlight: b})
		}
	}
	var base []float64
	var model, store string
	before := func(ctx context.Context, p int) error {
		if p%len(c.Batch) != 0 {
			return nil
		}
		v, err := unsplitRate(ctx, c, model, store)
		if err == nil {
			base = append(base, v)
			c.Log.Info("table b", "unsplit tok/s", f1(v))
		}
		return err
	}
	ss, err := runSwarm(ctx, c, "microbatch", loopbackDelay, []string{"0", "1"}, ph, before, func(m, s string) { model, store = m, s })
	if err != nil {
		return nil, err
	}
	t := &Table{ID: c.tableID("b"), Title: fmt.Sprintf("Micro-batching: 2 nodes pinned to one core each (--threads 1, GOMAXPROCS=1, taskset) vs the unsplit model on one core, %s, %d tokens per stream", c.modelName(), c.Tokens),
		Header: []string{"streams", "aggregate tok/s", "per stream tok/s", "× unsplit (1 core, 1 user)", "× 1 stream on the route"}}
	a := byKey(ph, ss, agg)
	per := byKey(ph, ss, func(s stat) float64 { return s.perStream })
	bar := plot.Bar{Title: "table b: aggregate tokens/s over the unsplit model on 1 core", YLabel: "× unsplit"}
	ub := median(base)
	t.Rows = append(t.Rows, []string{"unsplit, 1 core", f1(ub), f1(ub), "1", "–"})
	for _, b := range c.Batch {
		k := strconv.Itoa(b)
		var vsBase []float64
		for i, p := range ph {
			if p.key == k && p.rep < len(base) {
				vsBase = append(vsBase, ss[i].agg/base[p.rep])
			}
		}
		r1 := median(ratios(ph, ss, k, strconv.Itoa(c.Batch[0]), agg))
		t.Rows = append(t.Rows, []string{k, f1(median(a[k])), f1(median(per[k])), ratio(median(vsBase)), ratio(r1)})
		bar.Labels = append(bar.Labels, k+" streams")
		bar.Values = append(bar.Values, median(vsBase))
	}
	t.Plot = bar
	t.Notes = append(t.Notes, fmt.Sprintf("Plain loopback, no emulator (its userspace forwarding would compete with the nodes for the two cores). Node n0 on CPU 0, n1 on CPU 1; the client is not pinned and shares both. The unsplit run (`pipeshard run --threads 1`, GOMAXPROCS=1, taskset -c 0) runs before each repeat's phases; × unsplit divides each phase by its repeat's unsplit rate. %d repeats. Greedy output identical across streams: %v.", c.Repeats, sameOutput(ss...)))
	return t, nil
}
