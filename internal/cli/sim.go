package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/sim/plot"
	"github.com/pipeshard/pipeshard/sim/scale"
	"github.com/pipeshard/pipeshard/sim/scenario"
	"github.com/pipeshard/pipeshard/swarm"
)

// startNetwork builds the emulated network `sim run` starts its hosts
// in. It is nil until a WAN emulator (sim/netem) is wired in:
//
//	startNetwork = func(ctx context.Context, s scenario.NetSpec) (scenario.Network, error) { ... }
var startNetwork func(ctx context.Context, spec scenario.NetSpec) (scenario.Network, error)

// errNoEmulator is what `sim run` says while startNetwork is nil.
var errNoEmulator = errors.New("sim: WAN emulator not built: this pipeshard has no network emulator to run scenarios in")

func init() {
	register(&Command{
		Name:     "sim",
		Short:    "simulate swarms: at scale (sim/scale) or for real under an emulated WAN",
		Usage:    "scale|run ...",
		Examples: []string{"pipeshard sim scale --nodes 1000 --minutes 30 --seed 1", "sudo pipeshard sim run sim/scenarios/four-node-50ms.yaml --out results"},
		Sub: []*Command{
			{
				Name: "scale", Short: "simulate 1,000s of nodes with churn, comparing routing and placement policies",
				Usage: "[--nodes 1000] [--minutes 30] [--seed 1] [--policy all] [--config FILE] [--json] [--out DIR]",
				Long: `Runs sim/scale's discrete-event simulation of a swarm serving llama3-70b
(by default) to a stream of sessions, with churn, once per routing ×
placement policy (the same seed, so the same swarm, churn and sessions), and
prints a Markdown table of throughput, per-token latency, failures,
failovers and coverage. A run is a pure function of its config and seed.

--config reads a JSON file over the default config of --nodes and --minutes
(see docs/sim.md); unknown fields are errors. --policy is "all" or a comma
list of ROUTING[/PLACEMENT] (min-latency, random, throughput-aware; even,
balanced, dynamic). --out writes results.json, tokens.svg and coverage.svg.`,
				Examples: []string{
					"pipeshard sim scale --nodes 1000 --minutes 30 --seed 1",
					"pipeshard sim scale --policy throughput-aware/even,random/even --config fresh-status.json --out results/",
				},
				Flags: func(fs *flag.FlagSet) {
					fs.Int("nodes", 1000, "swarm size")
					fs.Float64("minutes", 30, "simulated minutes of arriving sessions")
					fs.Uint64("seed", 1, "seed (0: pick one from the clock, and print it)")
					fs.String("policy", "all", "all, or ROUTING[/PLACEMENT],... ")
					fs.String("config", "", "JSON file read over the default config")
					fs.Bool("json", false, "print the results as JSON")
					fs.String("out", "", "directory for results.json and plots")
				},
				Run: simScale,
			},
			{
				Name: "run", Short: "run the real swarm under a scenario file in an emulated WAN",
				Usage: "SCENARIO.yaml [--out DIR] [--backend auto|netem|delayline] [--json] [--dry-run]",
				Long: `Reads a scenario (YAML or JSON; see docs/sim.md, "Scenario files"): nodes
with their cores, memory and layer ranges, the network between them
(latency, RTTs between regions, bandwidth, jitter, loss), churn, clients and
their load, and bounds. Starts one 'pipeshard node' process per node inside
its own emulated host, applies the churn, runs the clients' phases, and
writes results.json, throughput.svg and inflight.svg to --out (logs under
--out/work/logs). Progress goes to stderr, a summary to stdout.

--dry-run only parses and checks the file and prints its hosts and links.`,
				Examples: []string{
					"pipeshard sim run sim/scenarios/four-node-50ms.yaml --out results/four-node",
					"pipeshard sim run my.yaml --dry-run",
				},
				Flags: func(fs *flag.FlagSet) {
					fs.String("out", "", "results directory (default: sim-results/NAME)")
					fs.String("backend", "auto", "emulator: auto, netem or delayline")
					fs.Bool("json", false, "print the results as JSON instead of a summary")
					fs.Bool("dry-run", false, "check the file and print its hosts and links; run nothing")
					fs.String("log-level", "info", "progress on stderr: debug, info, warn or error")
					fs.String("node-log-level", "warn", "the nodes' and clients' --log-level (their logs go to --out/work/logs)")
				},
				Run: simRun,
			},
			{
				Name: "client", Short: "internal: the load generator 'sim run' starts in each client host",
				Examples: []string{`pipeshard sim client --bootstrap /ip4/10.99.0.2/tcp/4001/p2p/12D3KooW... --model bafk... --in-flight 4 --requests 8 -n 64 --prompt "Once upon a time"`},
				Usage:    "--bootstrap MA --model CID (--prompt T | --prompt-ids IDS) [--in-flight K] [--requests N] [--duration D]",
				Long: `Joins the swarm once, then keeps --in-flight requests going until it has
made --requests of them or --duration has passed, each finding its own route
and opening its own session; a slot whose request failed waits a second
before its next. Prints one JSON line when ready and one per
request that ended: its start, when each token arrived, its route and the
per-hop compute and queue times, or its error (scenario.ClientRecord).`,
				Flags: func(fs *flag.FlagSet) {
					genFlags(fs)
					fs.String("bootstrap", "", "comma-separated full multiaddrs of swarm peers")
					fs.String("home", filepath.Join(models.Home(), "client"), "client home: cached manifests and tokenizers")
					fs.String("listen", "", "comma-separated multiaddrs for results to arrive on")
					fs.Duration("timeout", 60*time.Second, "how long one request may look for a route")
					fs.String("log-level", "warn", "debug, info, warn or error")
					fs.Bool("f16", false, "send hidden states as fp16")
					fs.Int("in-flight", 1, "concurrent requests")
					fs.Int("requests", 0, "requests to make (0: until --duration)")
					fs.Duration("duration", 0, "stop starting requests after this long (0: until --requests)")
					fs.String("trace", "", "append one JSON line per traversal of every request to `FILE` (as swarm generate --trace, with the request's index)")
				},
				Run: simClient,
			},
		},
	})
}

// --- sim scale ------------------------------------------------------

func simScale(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	nodes, minutes := flagInt(fs, "nodes"), flagFloat(fs, "minutes")
	if nodes < 1 || minutes <= 0 {
		return usagef("--nodes %d --minutes %v: want at least one node and a positive time", nodes, minutes)
	}
	cfg := scale.DefaultConfig(nodes, minutes)
	if path := flagString(fs, "config"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	policies, err := parsePolicies(flagString(fs, "policy"), cfg.Placement)
	if err != nil {
		return err
	}
	seed := fs.Lookup("seed").Value.(flag.Getter).Get().(uint64)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	fmt.Fprintf(env.Stderr, "seed %d: %d nodes, %v simulated, mean lifetime %v, %.2f sessions/s, %d policies\n",
		seed, cfg.Swarm.Nodes, cfg.Duration, cfg.Swarm.MeanLifetime, cfg.Workload.SessionsPerSec, len(policies))
	start := time.Now()
	done := make(chan struct{})
	var rs []scale.Results
	go func() {
		defer close(done)
		rs, err = scale.Compare(cfg, seed, policies)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err() // the runs are pure computation; exiting ends them
	}
	if err != nil {
		return err
	}
	wall := time.Since(start)
	var events uint64
	for _, r := range rs {
		events += r.Events
	}
	fmt.Fprintf(env.Stderr, "%d runs, %d events, %.1f s of wall time\n", len(rs), events, wall.Seconds())
	if dir := flagString(fs, "out"); dir != "" {
		if err := writeScale(dir, cfg, seed, rs); err != nil {
			return err
		}
		fmt.Fprintf(env.Stderr, "wrote %s\n", filepath.Join(dir, "results.json"))
	}
	if flagBool(fs, "json") {
		enc := json.NewEncoder(env.Stdout)
		return enc.Encode(map[string]any{"seed": seed, "config": cfg, "results": rs})
	}
	fmt.Fprintf(env.Stdout, "seed %d\n", seed)
	fmt.Fprint(env.Stdout, scale.Table(rs))
	return nil
}

// parsePolicies reads --policy.
func parsePolicies(s string, placement scale.Placement) ([]scale.Policy, error) {
	if s == "" || s == "all" {
		return scale.Matrix(), nil
	}
	var out []scale.Policy
	for _, f := range splitList(s) {
		r, p, hasP := strings.Cut(f, "/")
		pol := scale.Policy{Placement: placement}
		if err := pol.Routing.UnmarshalText([]byte(r)); err != nil {
			return nil, usagef("--policy %q: %v", f, err)
		}
		if hasP {
			if err := pol.Placement.UnmarshalText([]byte(p)); err != nil {
				return nil, usagef("--policy %q: %v", f, err)
			}
		}
		out = append(out, pol)
	}
	if len(out) == 0 {
		return nil, usagef("--policy %q: no policy", s)
	}
	return out, nil
}

// writeScale writes results.json, tokens.svg (tokens/s per policy) and
// coverage.svg (least-served coverage over time per policy).
func writeScale(dir string, cfg scale.Config, seed uint64, rs []scale.Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(map[string]any{"seed": seed, "config": cfg, "results": rs}, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	title := fmt.Sprintf("%d nodes, %v, seed %d", cfg.Swarm.Nodes, cfg.Duration, seed)
	bar := plot.Bar{Title: "tokens/s: " + title, YLabel: "tokens/s", Width: max(720, 90*len(rs))}
	// Coverage depends on placement and churn, not on routing: one line
	// per placement.
	cov := plot.Line{Title: "least-served coverage: " + title, XLabel: "minute", YLabel: "tokens/s"}
	seen := map[scale.Placement]bool{}
	for _, r := range rs {
		name := r.Routing.String() + "/" + r.Placement.String()
		bar.Labels = append(bar.Labels, name)
		bar.Values = append(bar.Values, r.TokensPerSec)
		if seen[r.Placement] {
			continue
		}
		seen[r.Placement] = true
		s := plot.Series{Name: r.Placement.String() + " placement"}
		for _, c := range r.Coverage.Samples {
			s.X, s.Y = append(s.X, c.Minute), append(s.Y, c.Min)
		}
		cov.Series = append(cov.Series, s)
	}
	for name, c := range map[string]interface{ WriteSVG(io.Writer) error }{"tokens.svg": bar, "coverage.svg": cov} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = c.WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, plot.ErrNoData) {
			os.Remove(filepath.Join(dir, name))
		} else if err != nil {
			return err
		}
	}
	return nil
}

// --- sim run --------------------------------------------------------

func simRun(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return usagef("sim run takes one scenario file")
	}
	backend := flagString(fs, "backend")
	switch backend {
	case "auto", "netem", "delayline":
	default:
		return usagef("--backend %q: want auto, netem or delayline", backend)
	}
	log, err := logger(env, flagString(fs, "log-level"))
	if err != nil {
		return err
	}
	if _, err := logger(env, flagString(fs, "node-log-level")); err != nil {
		return usagef("--node-log-level %q", flagString(fs, "node-log-level"))
	}
	sc, err := scenario.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(fs.Arg(0)), filepath.Ext(fs.Arg(0)))
	}
	if err := sc.Validate(); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if flagBool(fs, "dry-run") {
		printScenario(env.Stdout, sc)
		return nil
	}
	if startNetwork == nil {
		return errNoEmulator
	}
	out := flagString(fs, "out")
	if out == "" {
		out = filepath.Join("sim-results", sc.Name)
	}
	net, err := startNetwork(ctx, sc.NetSpec(backend, log))
	if err != nil {
		return fmt.Errorf("sim: starting the emulated network: %w", err)
	}
	log.Info("network up", "backend", net.Backend(), "hosts", len(sc.Hosts()))
	res, runErr := scenario.Run(ctx, sc, scenario.Env{Net: net, Binary: selfBinary(), WorkDir: filepath.Join(out, "work"), Log: log,
		NodeLogLevel: flagString(fs, "node-log-level")})
	if res != nil {
		if err := res.WriteDir(out); err != nil {
			return errors.Join(runErr, err)
		}
		if flagBool(fs, "json") {
			if err := json.NewEncoder(env.Stdout).Encode(res); err != nil {
				return err
			}
		} else {
			res.Summary(env.Stdout)
		}
		fmt.Fprintf(env.Stderr, "wrote %s\n", out)
	}
	return runErr
}

// selfBinary is the pipeshard the user ran, for the node and client
// processes: os.Args[0] as the shell found it (so a test harness's
// command name still dispatches), else os.Executable.
func selfBinary() string {
	if p, err := exec.LookPath(os.Args[0]); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	p, _ := os.Executable()
	return p
}

// printScenario prints a checked scenario's hosts and links.
func printScenario(w io.Writer, sc *scenario.Scenario) {
	hosts := sc.Hosts()
	fmt.Fprintf(w, "scenario %s: %d nodes and clients, model %s (%s)\n", sc.Name, len(hosts), sc.Model.Name, sc.Model.Quant)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAME\tKIND\tREGION\tLAYERS")
	for _, h := range hosts {
		kind, layers := "node", h.Layers
		if h.Client {
			kind, layers = "client", "-"
		} else if g := sc.Nodes[h.GroupIndex]; g.Standby {
			kind = "node (standby)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", h.Index, h.Name, kind, h.Region, layers)
	}
	tw.Flush()
	fmt.Fprintln(w, "links (one way):")
	if len(hosts) <= 16 {
		for _, a := range hosts {
			for _, b := range hosts {
				if a.Index != b.Index {
					fmt.Fprintf(w, "  %s -> %s: %v\n", a.Name, b.Name, sc.Link(a.Index, b.Index))
				}
			}
		}
	} else {
		// Too many pairs to list: each distinct link once, with a count.
		count := map[scenario.LinkParams]int{}
		var order []scenario.LinkParams
		example := map[scenario.LinkParams]string{}
		for _, a := range hosts {
			for _, b := range hosts {
				if a.Index == b.Index {
					continue
				}
				l := sc.Link(a.Index, b.Index)
				if count[l] == 0 {
					order = append(order, l)
					example[l] = a.Name + " -> " + b.Name
				}
				count[l]++
			}
		}
		for _, l := range order {
			fmt.Fprintf(w, "  %d links (e.g. %s): %v\n", count[l], example[l], l)
		}
	}
	for _, e := range sc.Churn {
		n, action := e.Node()
		fmt.Fprintf(w, "churn: at %v %s %s\n", e.At, action, n)
	}
}

// --- sim client -----------------------------------------------------

func simClient(ctx context.Context, env *Env, fs *flag.FlagSet) (err error) {
	inflight, requests := flagInt(fs, "in-flight"), flagInt(fs, "requests")
	duration := fs.Lookup("duration").Value.(flag.Getter).Get().(time.Duration)
	timeout := fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration)
	switch {
	case inflight < 1:
		return usagef("--in-flight %d: want at least 1", inflight)
	case requests < 0 || duration < 0 || requests == 0 && duration == 0:
		return usagef("give --requests N, --duration D or both")
	}
	c, mc, err := connect(ctx, env, fs)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := c.Resolve(rctx, mc)
	if err != nil {
		return err
	}
	tok, err := c.Tokenizer(rctx, m)
	if err != nil && flagString(fs, "prompt") != "" {
		return err
	}
	g, err := parseGen(fs, m.Config, "", tok)
	if err != nil {
		return err
	}
	// A sim client drafts from a history only when given one, and never
	// adds to it: it measures, and its repeats must not draft from each
	// other.
	if g.historyFlag != "" {
		g.openHistory(env, "", m.ModelID)
	}
	trace, err := openTrace(flagString(fs, "trace"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, trace.Close()) }()
	var mu sync.Mutex
	enc := json.NewEncoder(env.Stdout)
	emit := func(rec *scenario.ClientRecord) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(rec)
	}
	emit(&scenario.ClientRecord{Event: "ready", UnixNano: time.Now().UnixNano()})
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var active atomic.Int64 // requests in flight: they share draft tree budgets
	g.streams = func() int { return int(active.Load()) }
	for slot := range inflight {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if requests > 0 && i >= requests || duration > 0 && time.Since(start) >= duration {
					return
				}
				active.Add(1)
				rec := oneRequest(ctx, env, c, m, g, i, slot, timeout, flagBool(fs, "f16"), trace)
				active.Add(-1)
				emit(rec)
				if rec.Error != "" {
					// Back off, as a user would, rather than spin on a
					// swarm that has no route.
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

// oneRequest finds a route, opens a session and generates, timing every
// token.
func oneRequest(ctx context.Context, env *Env, c *swarm.Client, m *shards.Manifest, g *genRequest, i, slot int, timeout time.Duration, f16 bool, trace *traceFile) *scenario.ClientRecord {
	start := time.Now()
	us := func() int64 { return time.Since(start).Microseconds() }
	rec := &scenario.ClientRecord{Event: "request", UnixNano: start.UnixNano(), Index: i, Slot: slot, PromptTokens: len(g.promptIDs), TokenMicros: []int64{}, IDs: []int{}}
	defer func() { rec.EndMicros = us() }()
	fctx, cancel := context.WithTimeout(ctx, timeout)
	hops, plan, provs, err := c.FindRoute(fctx, m, nil)
	cancel()
	if err != nil {
		rec.RouteMicros, rec.Error = us(), err.Error()
		return rec
	}
	sp := g.sampling
	sp.Seed += uint64(i)
	s, err := c.OpenResilient(ctx, m, provs, hops, swarm.SessionOptions{ModelID: m.ModelID, Sampling: sp, Vocab: m.Config.Vocab, F16: f16, MaxLen: m.Config.Context}, swarm.FailoverOptions{})
	rec.RouteMicros = us()
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	defer s.Close()
	rec.ExpectedMs = plan.ExpectedMicros / 1e3
	tb := newTimed(s, s.Session, len(hops))
	tb.trace, tb.request = trace, i
	opts := g.opts
	opts.Seed = sp.Seed
	opts.OnPromptLogits = nil
	opts.OnToken = func(id int) {
		rec.TokenMicros = append(rec.TokenMicros, us())
		rec.IDs = append(rec.IDs, id)
	}
	var res generate.Result
	if g.speculate != "none" {
		// Greedy or point-mass drafts only: a draft model's own
		// distributions would need the route's logits.
		gi := *g
		gi.sampling.Seed, gi.pointMass = sp.Seed, true
		var d spec.Drafter
		var closeDraft func()
		if d, closeDraft, err = gi.drafter(ctx, env); err == nil {
			res, err = generate.RunSpeculative(ctx, tb, d, g.promptIDs, opts, generate.SpecOptions{K: g.specK, Sampling: gi.sampling, Tree: g.specTree, Streams: g.streams})
			closeDraft()
		}
	} else {
		res, err = generate.Run(ctx, tb, g.promptIDs, opts)
	}
	rec.Stopped = res.Stopped
	rec.Traversals, rec.Drafted, rec.Accepted = res.Traversals, res.Drafted, res.Accepted
	if err != nil {
		rec.Error = err.Error()
	}
	for k, h := range hops {
		hop := scenario.RouteHop{Peer: h.Peer.ID.String(), RTTms: float64(h.RTT.Microseconds()) / 1e3,
			Layers: shards.Stage{Start: h.Start, End: h.End, HeadLo: h.HeadLo, HeadHi: h.HeadHi}.String()}
		if tb.steps > 0 {
			hop.ComputeMs = tb.compute[k] / float64(tb.steps) / 1e3
			hop.QueueMs = tb.queue[k] / float64(tb.steps) / 1e3
		}
		rec.Route = append(rec.Route, hop)
	}
	return rec
}
