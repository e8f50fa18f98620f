package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/internal/pipebench"
	"github.com/pipeshard/pipeshard/sim/netem"
)

func benchPipelineCommand() *Command {
	return &Command{
		Name:  "pipeline",
		Short: "the paper's pipeline tables on this machine (parity, micro-batching, WAN, K sweep)",
		Usage: "[--tables a,b,c,d] [--repeats 3] [--out FILE.md] [--svg DIR]",
		Long: `Measures the tables of issue 6 with stories15M and writes them as Markdown:
  a  shard parity: unsplit vs 1, 2 and 3 stages chained in one process, same threads;
  b  micro-batching: 2 nodes pinned to one core each, 1..8 streams, vs the unsplit
     model on one core;
  c  WAN: naive (1 stream, no speculation) vs the full stack (--streams streams
     with n-gram speculation) at each --delays one-way delay per link;
  d  K sweep: n-gram and draft-model drafters at fixed K and auto at --k-delays.
Tables b, c and d run real node and client processes inside sim/netem's emulated
network (delayed packets on real streams) and need root; table b runs its node
processes on plain loopback. Each table's figures are
medians over --repeats, its contenders alternating within one run; ratios are
medians of per-repeat ratios.`,
		Examples: []string{
			"sudo pipeshard bench pipeline --tables a,c,d --repeats 3 --out docs/benchmarks-pipeline.md --svg docs/img/",
			"pipeshard bench pipeline --tables a --repeats 1 --tokens 32",
		},
		Flags: func(fs *flag.FlagSet) {
			fs.String("tables", "a,b,c,d", "tables to measure: a, b, c, d, e")
			fs.Int("repeats", 3, "repeats per contender (medians are reported)")
			fs.Int("tokens", 64, "tokens generated per sequence")
			fs.Int("threads", 1, "table a: threads of every contender")
			fs.Int("streams", 16, "table c: streams in flight of the full stack")
			fs.String("delays", "0,10,50,100", "table c: one-way delays per link, ms")
			fs.String("k-delays", "0,50,100", "table d: one-way delays per link, ms")
			fs.String("ks", "1,3,6,10", "table d: fixed K values (auto is always measured)")
			fs.String("batch", "1,2,4,8", "table b: streams")
			fs.String("draft-quant", "q4", "table d: weight type of the draft model (stories15M)")
			fs.Int("history-stories", 400, "table c: earlier answers (to other prompts) in the n-gram history of its n-gram + history contender; 0: none")
			fs.String("model", "", "tables a and b: synth:SHAPE measures a synthetic model with a real model's shapes instead of stories15M (e.g. synth:llama3-1b)")
			fs.String("quant", "q4", "tables a and b with --model synth:SHAPE: its weight type")
			fs.String("big-shape", "llama3-8b", "table e: shape of the synthetic q4 model (pipeshard shards synth --shape)")
			fs.Int("big-nodes", 4, "table e: node processes, one stage each")
			fs.String("big-memory", "2GiB", "table e: each node's --max-memory, smaller than the model")
			fs.Int("big-tokens", 16, "table e: tokens per stream")
			fs.String("big-streams", "1,4", "table e: streams in flight")
			fs.String("out", "", "write the Markdown here (default: stdout)")
			fs.String("svg", "", "write one SVG plot per table into this directory")
			fs.String("work", "", "keep the swarm runs' node and client logs here (default: temporary)")
			fs.String("log-level", "info", "progress on stderr: debug, info, warn or error")
		},
		Run: benchPipeline,
	}
}

func intList(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, usagef("--%s: %q is not a non-negative integer", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func msList(flagName, s string) ([]time.Duration, error) {
	ns, err := intList(flagName, s)
	var out []time.Duration
	for _, n := range ns {
		out = append(out, time.Duration(n)*time.Millisecond)
	}
	return out, err
}

func benchPipeline(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	tables, err := pipebench.ParseTables(flagString(fs, "tables"))
	if err != nil {
		return usagef("--tables: %v", err)
	}
	c := pipebench.Config{Tables: tables, Repeats: flagInt(fs, "repeats"), Tokens: flagInt(fs, "tokens"),
		Threads: flagInt(fs, "threads"), Streams: flagInt(fs, "streams"), HistoryStories: historyStories(flagInt(fs, "history-stories")), DraftQuant: flagString(fs, "draft-quant"),
		WorkDir: flagString(fs, "work"), Binary: selfBinary()}
	if c.Delays, err = msList("delays", flagString(fs, "delays")); err != nil {
		return err
	}
	if c.KDelays, err = msList("k-delays", flagString(fs, "k-delays")); err != nil {
		return err
	}
	if c.Ks, err = intList("ks", flagString(fs, "ks")); err != nil {
		return err
	}
	if c.Batch, err = intList("batch", flagString(fs, "batch")); err != nil {
		return err
	}
	if c.Model = flagString(fs, "model"); c.Model != "" {
		c.Quant = flagString(fs, "quant")
	}
	c.BigShape, c.BigNodes, c.BigTokens = flagString(fs, "big-shape"), flagInt(fs, "big-nodes"), flagInt(fs, "big-tokens")
	if c.BigStreams, err = intList("big-streams", flagString(fs, "big-streams")); err != nil {
		return err
	}
	if c.BigMemory, err = parseBytes(flagString(fs, "big-memory")); err != nil {
		return usagef("--big-memory: %v", err)
	}
	if c.Repeats < 1 || c.Tokens < 2 {
		return usagef("--repeats %d --tokens %d: want at least 1 and 2", c.Repeats, c.Tokens)
	}
	needNet := false
	for _, t := range tables {
		needNet = needNet || t == "c" || t == "d" // a runs in process, b on loopback
	}
	if needNet {
		if os.Geteuid() != 0 {
			return fmt.Errorf("tables %s need the emulated network, which needs root: %w (run table a alone without it)",
				strings.Join(tables, ","), netem.ErrNotRoot)
		}
		c.StartNetwork = startNetwork
	}
	if c.Log, err = logger(env, flagString(fs, "log-level")); err != nil {
		return err
	}
	dir, err := pullModel(ctx, env, "stories15M")
	if err != nil {
		return err
	}
	c.ModelPath = filepath.Join(dir, "stories15M.bin")
	c.DraftModel = c.ModelPath
	var md bytes.Buffer
	fmt.Fprintf(&md, "```\n$ pipeshard bench pipeline %s\n```\n\n", strings.Join(os.Args[3:], " "))
	fmt.Fprintf(&md, "- CPU: %s, %d CPUs (GOMAXPROCS %d); load average at the start: %s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAvg())
	start := time.Now()
	fmt.Fprintf(&md, "- started %s\n", start.UTC().Format("2006-01-02 15:04 MST"))
	ts, runErr := pipebench.Run(ctx, c)
	fmt.Fprintf(&md, "- finished after %v; load average at the end: %s\n\n", time.Since(start).Round(time.Second), loadAvg())
	svg := map[string]string{}
	outPath := flagString(fs, "out")
	for _, t := range ts {
		p, err := t.WriteSVG(flagString(fs, "svg"))
		if err != nil {
			return err
		}
		if p != "" {
			rel := p
			if outPath != "" {
				if r, err := filepath.Rel(filepath.Dir(outPath), p); err == nil {
					rel = r
				}
			}
			svg[t.ID] = rel
		}
	}
	pipebench.WriteMarkdown(&md, ts, svg)
	if runErr != nil {
		fmt.Fprintf(&md, "**Stopped by an error:** %v\n", runErr)
	}
	if outPath != "" {
		if err := os.WriteFile(outPath, md.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(env.Stderr, "wrote %s\n", outPath)
	} else {
		env.Stdout.Write(md.Bytes())
	}
	return runErr
}

// cpuModel is /proc/cpuinfo's first model name.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg is /proc/loadavg's three averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// historyStories maps --history-stories to pipebench's setting: 0 (none)
// is negative there, where 0 is the default.
func historyStories(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
