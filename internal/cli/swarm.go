package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

func init() {
	// clientFlags declares a client's flags, its libp2p listen addresses
	// as listen (serve keeps --listen for its HTTP address).
	clientFlags := func(fs *flag.FlagSet, listen string) {
		fs.String("bootstrap", "", "comma-separated full multiaddrs of swarm peers")
		fs.String("home", filepath.Join(models.Home(), "client"), "client home: cached manifests and tokenizers")
		fs.String(listen, "", "comma-separated multiaddrs for results to arrive on (default: any port)")
		fs.Duration("timeout", 60*time.Second, "how long to look for a route")
		fs.String("log-level", "warn", "debug, info, warn or error")
		privateFlags(fs)
		identityFlag(fs)
	}
	client := func(fs *flag.FlagSet) { clientFlags(fs, "listen") }
	register(&Command{
		Name:  "swarm",
		Short: "use a swarm: generate through it, list its nodes, show a route",
		Usage: "generate|serve|ls|route --bootstrap MA --model CID ... | keygen | id",
		Examples: []string{`pipeshard swarm generate --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --model bafk... --prompt "Once upon a time"`,
			"pipeshard swarm serve --listen 127.0.0.1:8080 --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --model bafk..."},
		Sub: []*Command{
			{
				Name: "generate", Short: "generate text through the swarm",
				Usage: "--bootstrap MA --model CID (--prompt TEXT | --prompt-ids 1,2,3) [flags]",
				Long: `Knowing only a bootstrap address and the model CID, finds the providers of
every layer range in the DHT, picks the route of least expected latency, and
streams each token's hidden state through it. Takes the same generation flags
as run; --json adds the route and per-hop timings.`,
				Examples: []string{`pipeshard swarm generate --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --model bafk... --prompt "Once upon a time"`},
				Flags: func(fs *flag.FlagSet) {
					genFlags(fs)
					client(fs)
					fs.Bool("f16", false, "send hidden states as fp16 (half the bytes; may change rare tokens)")
					fs.Int("batch", 1, "run N sequences of the prompt at once on the route, one session each (the stages batch them); sequence i samples with --seed + i")
					fs.String("verify", fmt.Sprint(swarm.DefaultVerifyRate), "check this fraction of steps against other providers of the same shards (all: every step, 0: off; not with --batch); nodes that lie are banned")
					fs.String("trace", "", "append one JSON line per traversal to `FILE`: rows sent, the round trip, and each hop's queue and compute time (not with --batch)")
				},
				Run: swarmGenerate,
			},
			serveCommand(func(fs *flag.FlagSet) { clientFlags(fs, "p2p-listen") }),
			{
				Name: "ls", Short: "list the nodes serving a model and its layer coverage",
				Examples: []string{`pipeshard swarm ls --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --model bafk...`},
				Usage:    "--bootstrap MA --model CID",
				Flags:    func(fs *flag.FlagSet) { client(fs); fs.String("model", "", "model CID") },
				Run:      swarmLs,
			},
			{
				Name: "route", Short: "show the route the client would take",
				Examples: []string{`pipeshard swarm route --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --model bafk...`},
				Usage:    "--bootstrap MA --model CID",
				Flags:    func(fs *flag.FlagSet) { client(fs); fs.String("model", "", "model CID") },
				Run:      swarmRoute,
			},
			{
				Name: "keygen", Short: "print a new swarm key for a private swarm",
				Usage: "> swarm.key",
				Long: `Prints a fresh random swarm key in the format ipfs uses
(/key/swarm/psk/1.0.0/, /base16/, 64 hex digits). Give the file to every
node and client of the private swarm with --swarm-key; peers without it
cannot connect. A private swarm runs over TCP only (libp2p's QUIC cannot
use a pre-shared key). Keep the file secret (mode 0600).`,
				Examples: []string{"pipeshard swarm keygen > swarm.key && chmod 600 swarm.key"},
				Run:      swarmKeygen,
			},
			{
				Name: "id", Short: "print the peer ID of a home's identity (for --allow lists)",
				Usage: "[HOME...] [--home DIR | --identity FILE]",
				Long: `Prints the peer ID of the identity key of each HOME given (HOME/identity.key,
made if missing), one a line; without any, of --home's or --identity's. A
node's home gives the node's ID; the client's home (the default) gives the
ID a client uses in a private swarm. Put these IDs in the --allow lists of
the swarm's nodes.`,
				Examples: []string{"pipeshard swarm id", "pipeshard swarm id ~/.cache/pipeshard ~/node2 ~/.cache/pipeshard/client > peers.txt"},
				Flags: func(fs *flag.FlagSet) {
					fs.String("home", filepath.Join(models.Home(), "client"), "home whose identity.key to read")
					fs.String("identity", "", "identity key `FILE` (instead of --home)")
				},
				Run: swarmID,
			},
		},
	})
}

// connect starts a client and resolves the model.
func connect(ctx context.Context, env *Env, fs *flag.FlagSet) (*swarm.Client, cid.Cid, error) {
	log, err := logger(env, flagString(fs, "log-level"))
	if err != nil {
		return nil, cid.Undef, err
	}
	boot := splitList(flagString(fs, "bootstrap"))
	if len(boot) == 0 {
		return nil, cid.Undef, usagef("--bootstrap is required")
	}
	stopDebug, err := serveDebug(log)
	if err != nil {
		return nil, cid.Undef, err
	}
	context.AfterFunc(ctx, stopDebug)
	mc, err := cid.Decode(flagString(fs, "model"))
	if err != nil {
		return nil, cid.Undef, usagef("--model must be a model CID: %v", err)
	}
	priv, err := readPrivacy(fs)
	if err != nil {
		return nil, cid.Undef, err
	}
	listen := splitList(flagString(fs, "listen"))
	if fs.Lookup("p2p-listen") != nil { // swarm serve: --listen is HTTP
		listen = splitList(flagString(fs, "p2p-listen"))
	}
	if priv.key != nil {
		if err := node.CheckPrivateAddrs(append(listen, boot...)); err != nil {
			return nil, cid.Undef, usagef("%v", err)
		}
	}
	key, err := clientIdentity(fs, flagString(fs, "home"), priv)
	if err != nil {
		return nil, cid.Undef, err
	}
	c, err := swarm.New(ctx, swarm.Config{Home: flagString(fs, "home"), Bootstrap: boot, Listen: listen, Log: log,
		Key: key, SwarmKey: priv.key, Allow: priv.allow})
	return c, mc, err
}

func swarmGenerate(ctx context.Context, env *Env, fs *flag.FlagSet) (err error) {
	c, mc, err := connect(ctx, env, fs)
	if err != nil {
		return err
	}
	defer c.Close()
	fctx, cancel := context.WithTimeout(ctx, fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration))
	defer cancel()
	m, err := c.Resolve(fctx, mc)
	if err != nil {
		return err
	}
	tok, err := c.Tokenizer(fctx, m)
	if err != nil && flagString(fs, "prompt") != "" {
		return err
	}
	g, err := parseGen(fs, m.Config, "", tok)
	if err != nil {
		return err
	}
	g.openHistory(env, flagString(fs, "home"), m.ModelID)
	batch := 1
	if fs.Lookup("batch") != nil { // demo calls this without --batch
		batch = flagInt(fs, "batch")
	}
	switch {
	case batch < 1:
		return usagef("--batch %d: want at least 1", batch)
	case batch > 1 && g.logitsOut != "":
		return usagef("--logits-out takes one sequence, not --batch %d", batch)
	case batch > 1 && flagString(fs, "trace") != "":
		return usagef("--trace takes one sequence, not --batch %d", batch)
	}
	hops, plan, provs, err := c.FindRoute(fctx, m, nil)
	if err != nil {
		return err
	}
	sopts := swarm.SessionOptions{ModelID: m.ModelID, Sampling: g.sampling, Vocab: m.Config.Vocab,
		Logits: g.logitsOut != "" || g.draftLogits(hops), F16: flagBool(fs, "f16"), MaxLen: m.Config.Context}
	// The sequence survives nodes that leave: it fails over to another
	// route and replays what it has.
	vo, err := verifyFlag(fs)
	if err != nil {
		return err
	}
	if batch > 1 {
		return swarmBatch(ctx, env, c, m, provs, hops, sopts, vo, g, batch, map[string]any{"route": routeJSON(hops), "expected_ms_per_token": plan.ExpectedMicros / 1e3})
	}
	r, err := c.OpenResilient(ctx, m, provs, hops, sopts, swarm.FailoverOptions{Verify: vo})
	if err != nil {
		return err
	}
	defer r.Close()
	tb := newTimed(r, r.Session, len(hops))
	if fs.Lookup("trace") != nil { // demo calls this without --trace
		if tb.trace, err = openTrace(flagString(fs, "trace")); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, tb.trace.Close()) }()
	}
	if vo != nil {
		// Sampled checks may take back tokens already returned: run
		// again from the last honest one, and hold back output that
		// cannot be taken back (a pipe) until it is verified.
		g.rewinding = swarm.Generate
		if vo.Rate < 1 {
			g.verified = func() int { return r.Settled(len(g.promptIDs)) }
		}
	}
	extra := map[string]any{"route": routeJSON(hops), "expected_ms_per_token": plan.ExpectedMicros / 1e3,
		"hops": tb.summary(), "failovers": jsonFunc(func() any { return failoversJSON(r.Failovers()) })}
	if vo != nil {
		extra["verification"] = jsonFunc(func() any { return r.Verification() })
	}
	err = g.run(ctx, env, tb, extra)
	if vo != nil && !g.json {
		v := r.Verification()
		fmt.Fprintf(env.Stderr, "verified %d of %d steps (%d rows): %d mismatches, %d peers banned %v\n",
			v.Checked, v.Steps, v.Rows, v.Mismatches, len(v.Banned), bannedIDs(v.Banned))
	}
	if err == nil && !g.json {
		printRoute(env, r.Session().Route, tb)
		for _, f := range r.Failovers() {
			fmt.Fprintf(env.Stderr, "failover at position %d: routed around %s, replayed %d tokens, recovered in %v (%s)\n",
				f.Pos, strings.Join(shortIDs(f.Dropped), ", "), f.Replayed, f.Recovery.Round(time.Millisecond), f.Cause)
		}
	}
	return err
}

// verifyFlag reads --verify: all, 0 (off) or a fraction of steps.
func verifyFlag(fs *flag.FlagSet) (*swarm.VerifyOptions, error) {
	if fs.Lookup("verify") == nil { // demo calls this without --verify
		return nil, nil
	}
	v := flagString(fs, "verify")
	rate := 1.0
	if v != "all" {
		var err error
		if rate, err = strconv.ParseFloat(v, 64); err != nil || !(rate >= 0 && rate <= 1) {
			return nil, usagef("--verify %q: want all, 0 or a fraction of steps in (0, 1]", v)
		}
	}
	if rate == 0 {
		return nil, nil
	}
	return &swarm.VerifyOptions{Rate: rate}, nil
}

func bannedIDs(bs []swarm.Ban) []string {
	var out []string
	for _, b := range bs {
		out = append(out, shortID(b.Peer))
	}
	return out
}

// failoversJSON describes a sequence's route changes.
func failoversJSON(fs []swarm.Failover) []map[string]any {
	out := []map[string]any{}
	for _, f := range fs {
		out = append(out, map[string]any{"pos": f.Pos, "cause": f.Cause, "dropped": f.Dropped, "replayed": f.Replayed,
			"detect_ms": float64(f.Detect.Microseconds()) / 1e3, "recovery_ms": float64(f.Recovery.Microseconds()) / 1e3, "route": routeJSON(f.Route)})
	}
	return out
}

func shortIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = shortID(id)
	}
	return out
}

// swarmBatch runs n sequences of g's prompt at once on hops, one session
// each (the stages batch their forwards); sequence i samples with seed +
// i. It prints each sequence, or with --json one object with every
// sequence's result and the aggregate tokens/s.
//
// Each sequence fails over on its own, and with vo each is verified on its
// own (sharing one set of bans), as a single `swarm generate` would be.
func swarmBatch(ctx context.Context, env *Env, c *swarm.Client, m *shards.Manifest, provs []swarm.Provider, hops []swarm.Hop,
	o swarm.SessionOptions, vo *swarm.VerifyOptions, g *genRequest, n int, extra map[string]any) error {
	type seqResult struct {
		seed uint64
		res  generate.Result
		text string
		err  error
		fo   []swarm.Failover
		vs   swarm.VerifyStats
	}
	if vo != nil && vo.Bans == nil {
		vo.Bans = &swarm.Bans{}
	}
	sessions := make([]*swarm.Resilient, n)
	for i := range sessions {
		so := o
		so.Sampling.Seed = g.sampling.Seed + uint64(i)
		var fo swarm.FailoverOptions
		if vo != nil {
			v := *vo // each sequence draws its own checks
			fo.Verify = &v
		}
		s, err := c.OpenResilient(ctx, m, provs, hops, so, fo)
		if err != nil {
			for _, s := range sessions[:i] {
				s.Close()
			}
			return fmt.Errorf("session %d of %d: %w", i, n, err)
		}
		defer s.Close()
		sessions[i] = s
	}
	out := make([]seqResult, n)
	var wg sync.WaitGroup
	var active atomic.Int64 // sequences still generating share draft tree budgets
	active.Store(int64(n))
	streams := func() int { return int(active.Load()) }
	t0 := time.Now()
	for i, s := range sessions {
		wg.Go(func() {
			defer active.Add(-1)
			r := &out[i]
			r.seed = g.sampling.Seed + uint64(i)
			opts := g.opts
			opts.Seed, opts.OnToken, opts.OnPromptLogits = r.seed, nil, nil
			switch {
			case g.speculate != "none":
				// Each sequence drafts on its own: a draft model keeps
				// the sequence's cache and draws with its seed.
				gi := *g
				gi.sampling.Seed = r.seed
				d, closeDraft, err := gi.drafter(ctx, env)
				if err != nil {
					r.err = err
					break
				}
				r.res, r.err = generate.RunSpeculative(ctx, s, d, g.promptIDs, opts, generate.SpecOptions{K: g.specK, Sampling: gi.sampling, Tree: g.specTree, Streams: streams})
				closeDraft()
			case vo != nil:
				r.res, r.err = swarm.Generate(ctx, s, g.promptIDs, opts, nil)
			default:
				r.res, r.err = generate.Run(ctx, s, g.promptIDs, opts)
			}
			r.fo, r.vs = s.Failovers(), s.Verification()
			if g.tok != nil {
				dec := g.tok.NewDecoder()
				for _, id := range g.promptIDs {
					dec.Next(id)
				}
				var text strings.Builder
				for _, id := range r.res.IDs {
					text.WriteString(dec.Next(id))
				}
				text.WriteString(dec.Flush())
				r.text = text.String()
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	total := 0
	var errs []error
	for i, r := range out {
		total += len(r.res.IDs)
		if r.err != nil {
			errs = append(errs, fmt.Errorf("sequence %d: %w", i, r.err))
		} else {
			g.remember(env, r.res.IDs)
		}
	}
	rate := 0.0
	if wall > 0 {
		rate = float64(total) / wall.Seconds()
	}
	if !g.json {
		prompt := ""
		if g.tok != nil {
			dec := g.tok.NewDecoder()
			for _, id := range g.promptIDs {
				prompt += dec.Next(id)
			}
		}
		for i, r := range out {
			if g.tok == nil {
				fmt.Fprintf(env.Stdout, "[%d] %v\n", i, r.res.IDs)
				continue
			}
			fmt.Fprintf(env.Stdout, "[%d] %s%s\n", i, prompt, r.text)
		}
		fmt.Fprintf(env.Stderr, "%d sequences, %d tokens in %.2f s: %.1f tok/s together\n", n, total, wall.Seconds(), rate)
		for i, r := range out {
			for _, f := range r.fo {
				fmt.Fprintf(env.Stderr, "sequence %d: failover at position %d: routed around %s, replayed %d tokens, recovered in %v (%s)\n",
					i, f.Pos, strings.Join(shortIDs(f.Dropped), ", "), f.Replayed, f.Recovery.Round(time.Millisecond), f.Cause)
			}
			if vo != nil && (r.vs.Mismatches > 0 || len(r.vs.Banned) > 0) {
				fmt.Fprintf(env.Stderr, "sequence %d: verified %d of %d steps: %d mismatches, peers banned %v\n",
					i, r.vs.Checked, r.vs.Steps, r.vs.Mismatches, bannedIDs(r.vs.Banned))
			}
		}
		return errors.Join(errs...)
	}
	var seqs []map[string]any
	for i, r := range out {
		e := map[string]any{"seq": i, "seed": r.seed, "ids": nonNil(r.res.IDs), "text": r.text, "stopped": r.res.Stopped,
			"prefill_tokens_per_s": r.res.PrefillRate(len(g.promptIDs)), "decode_tokens_per_s": r.res.DecodeRate()}
		if r.err != nil {
			e["error"] = r.err.Error()
		}
		e["failovers"] = failoversJSON(r.fo)
		e["traversals"] = r.res.Traversals
		if g.speculate != "none" {
			e["speculative"] = map[string]any{"mode": g.speculate, "drafted": r.res.Drafted, "accepted": r.res.Accepted,
				"acceptance_rate": r.res.AcceptanceRate(), "tokens_per_traversal": r.res.TokensPerTraversal()}
		}
		if vo != nil {
			e["verification"] = r.vs
		}
		seqs = append(seqs, e)
	}
	res := map[string]any{"prompt_ids": g.promptIDs, "sequences": seqs, "tokens": total,
		"wall_s": wall.Seconds(), "aggregate_tokens_per_s": rate}
	for k, v := range extra {
		res[k] = v
	}
	if err := json.NewEncoder(env.Stdout).Encode(res); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// timedBackend keeps per-hop timings over a generation.
type timedBackend struct {
	b       generate.Backend
	cur     func() *swarm.Session // the session of the last step (failover may change it)
	hops    int
	steps   int
	queue   []float64
	compute []float64
	wall    time.Duration
	// trace, if set, gets every step, as the request-th request's.
	trace   *traceFile
	request int
	traced  int // steps traced
}

func newTimed(b generate.Backend, cur func() *swarm.Session, hops int) *timedBackend {
	return &timedBackend{b: b, cur: cur, hops: hops}
}

// Trees implements generate.TreeBackend for the backend it wraps.
func (t *timedBackend) Trees() bool {
	tb, ok := t.b.(generate.TreeBackend)
	return ok && tb.Trees()
}

func (t *timedBackend) Step(ctx context.Context, st generate.Step) (generate.StepResult, error) {
	r, err := t.b.Step(ctx, st)
	if err != nil {
		return r, err
	}
	if t.queue == nil {
		t.queue, t.compute = make([]float64, t.hops), make([]float64, t.hops)
	}
	s := t.cur()
	if t.trace != nil {
		t.trace.write(newStepTrace(t.request, t.traced, st, s))
		t.traced++
	}
	if len(st.IDs) == 1 { // decode steps only
		t.steps++
		t.wall += s.StepRTT
		for _, tr := range s.Trace {
			if int(tr.Hop) < t.hops {
				t.queue[tr.Hop] += float64(tr.Queue)
				t.compute[tr.Hop] += float64(tr.Compute)
			}
		}
	}
	return r, nil
}

// summary returns a function's worth of per-hop means, filled in lazily
// (the JSON is written after generation).
func (t *timedBackend) summary() jsonFunc {
	return func() any {
		var out []map[string]any
		for i := 0; i < t.hops && t.steps > 0; i++ {
			out = append(out, map[string]any{"hop": i, "compute_ms": t.compute[i] / float64(t.steps) / 1e3, "queue_ms": t.queue[i] / float64(t.steps) / 1e3})
		}
		return out
	}
}

// jsonFunc is a JSON field computed when the output is written.
type jsonFunc func() any

func routeJSON(hops []swarm.Hop) []map[string]any {
	var out []map[string]any
	for _, h := range hops {
		e := map[string]any{"peer": h.Peer.ID.String(), "layers": []int{h.Start, h.End}, "shard": h.Shard, "rtt_ms": float64(h.RTT.Microseconds()) / 1e3}
		if h.HeadHi > 0 {
			e["head"] = []int{h.HeadLo, h.HeadHi}
		}
		out = append(out, e)
	}
	return out
}

func printRoute(env *Env, hops []swarm.Hop, t *timedBackend) {
	tw := tabwriter.NewWriter(env.Stderr, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOP\tPEER\tLAYERS\tRTT ms\tCOMPUTE ms/token\tQUEUE ms/token")
	for i, h := range hops {
		layers := fmt.Sprintf("%d:%d", h.Start, h.End)
		if h.HeadHi > 0 {
			layers += fmt.Sprintf(" head %d:%d", h.HeadLo, h.HeadHi)
		}
		var comp, q float64
		if t.steps > 0 {
			comp, q = t.compute[i]/float64(t.steps)/1e3, t.queue[i]/float64(t.steps)/1e3
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%.2f\t%.2f\n", i, shortID(h.Peer.ID.String()), layers, float64(h.RTT.Microseconds())/1e3, comp, q)
	}
	tw.Flush()
	if t.steps > 0 {
		fmt.Fprintf(env.Stderr, "mean step (client to client): %.2f ms\n", float64(t.wall.Microseconds())/float64(t.steps)/1e3)
	}
}

func swarmLs(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	c, mc, err := connect(ctx, env, fs)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := c.Resolve(ctx, mc)
	if err != nil {
		return err
	}
	// Status records arrive every few seconds: give them a moment.
	if tr, err := c.Status(m.ModelID); err == nil {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		tr.Wait(wctx, func(rs []status.Record) bool { return len(rs) > 0 })
		cancel()
		time.Sleep(500 * time.Millisecond)
	}
	provs, err := c.Discover(ctx, m)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "model %s (%s): %d layers\n", mc, m.Name, m.Config.Layers)
	fmt.Fprintln(tw, "PEER\tLAYERS\tQUANT\tRTT ms\tSESSIONS\tQUEUED\tMS/TOKEN\tTOK/S\tSTATE")
	covered := make([]int, m.Config.Layers)
	for _, p := range provs {
		st := p.Shard.Stage()
		load := "-\t-\t-\t-\tno status"
		if r := p.Status; r != nil {
			state := "serving"
			if r.Draining {
				state = "draining"
			}
			load = fmt.Sprintf("%d\t%d\t%.2f\t%.0f\t%s", r.ActiveSessions, r.QueuedTokens, r.ComputeMicros/1e3, r.TokensPerSec, state)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\n", shortID(p.Peer.ID.String()), st, p.Shard.Quant, float64(p.RTT.Microseconds())/1e3, load)
		for l := st.Start; l < st.End; l++ {
			covered[l]++
		}
	}
	tw.Flush()
	fmt.Fprint(env.Stdout, "coverage (providers per layer):")
	for _, n := range covered {
		fmt.Fprintf(env.Stdout, " %d", n)
	}
	fmt.Fprintln(env.Stdout)
	return nil
}

func swarmRoute(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	c, mc, err := connect(ctx, env, fs)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := c.Resolve(ctx, mc)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration))
	defer cancel()
	hops, plan, _, err := c.FindRoute(fctx, m, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "expected %.2f ms per token\n", plan.ExpectedMicros/1e3)
	printRoute(&Env{Stdout: env.Stdout, Stderr: env.Stdout}, hops, &timedBackend{hops: len(hops)})
	return nil
}

// shortID abbreviates a peer ID for tables.
func shortID(id string) string {
	if len(id) <= 12 {
		return id
	}
	return id[:4] + "…" + id[len(id)-6:]
}
