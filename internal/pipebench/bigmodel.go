package pipebench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/sim/plot"
	"github.com/pipeshard/pipeshard/sim/scenario"
)

// bigPrompt is table e's prompt: ids, since a synthetic model has no
// tokenizer.
var bigPrompt = []int{1, 42, 77, 300}

// bigModel is table e: a synthetic model with a real model's shapes
// (c.BigShape, q4) that no node may hold whole (each node's --max-memory
// is c.BigMemory), served by c.BigNodes node processes, one stage each,
// against the same shards chained in one process.
func bigModel(ctx context.Context, c Config) (*Table, error) {
	cfg, err := shards.SynthConfig(c.BigShape, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	costs := shards.CostsOf(cfg, ovrt.Q4_0, ovrt.Q8_0)
	stages, err := shards.BalancedSplit(costs, shards.DefaultProfile, c.BigNodes)
	if err != nil {
		return nil, err
	}
	if len(bigPrompt)+c.BigTokens > cfg.Context {
		return nil, fmt.Errorf("%w: %d tokens exceed the context", ErrConfig, c.BigTokens)
	}
	sc := &scenario.Scenario{Name: "bigmodel", Seed: 1,
		Model: scenario.Model{Name: scenario.SynthPrefix + c.BigShape, Quant: "q4", Layouts: []string{scenario.FormatLayout(stages)}}}
	for i, st := range stages {
		sc.Nodes = append(sc.Nodes, scenario.Node{Name: fmt.Sprintf("n%d", i), Count: 1, Cores: 1, Layers: st.String(),
			Memory: scenario.Size(c.BigMemory)})
	}
	cl := scenario.Client{Name: "c", Count: 1, Requests: 1, PromptIDs: bigPrompt, Tokens: c.BigTokens, IgnoreEOS: true,
		Timeout: scenario.Duration(30 * time.Minute)}
	var ph []phase
	for r := range c.Repeats {
		for _, n := range c.BigStreams {
			ph = append(ph, phase{key: strconv.Itoa(n), rep: r, inFlight: n})
		}
	}
	ss, res, err := runScenario(ctx, c, sc, cl, loopbackDelay, ph, nil, nil)
	if err != nil {
		return nil, err
	}

	// The same shards chained in one process, and the whole model's size.
	tool := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, c.Binary, args...)
		cmd.Env = append(os.Environ(), "PIPESHARD_HOME="+res.Store, "GOMAXPROCS=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("pipeshard %s: %w: %s", strings.Join(args[:1], " "), err, stderr.String())
		}
		return out, nil
	}
	var manifest struct {
		Layouts []struct {
			Split  string `json:"split"`
			Shards []struct {
				CID   string `json:"cid"`
				Bytes int64  `json:"bytes"`
			} `json:"shards"`
		} `json:"layouts"`
	}
	out, err := tool("shards", "show", res.Model)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(out, &manifest); err != nil {
		return nil, fmt.Errorf("shards show: %w", err)
	}
	var whole int64
	stageBytes := map[string]int64{}
	for _, l := range manifest.Layouts {
		for _, s := range l.Shards {
			stageBytes[s.CID] = s.Bytes
			if l.Split == "whole" {
				whole = s.Bytes
			}
		}
	}
	var chain []string
	var largest int64
	for _, n := range res.Nodes {
		chain = append(chain, n.Shard)
		largest = max(largest, stageBytes[n.Shard])
	}
	ids := make([]string, len(bigPrompt))
	for i, id := range bigPrompt {
		ids[i] = strconv.Itoa(id)
	}
	c.Log.Info("table e", "in-process chain", strings.Join(chain, ","))
	out, err = tool("run", "--model", res.Model, "--shards", strings.Join(chain, ","), "--quant", "q4", "--threads", "1",
		"--prompt-ids", strings.Join(ids, ","), "-n", strconv.Itoa(c.BigTokens), "--ignore-eos", "--json")
	if err != nil {
		return nil, err
	}
	var local struct {
		IDs    []int   `json:"ids"`
		Decode float64 `json:"decode_tokens_per_s"`
	}
	if err := json.Unmarshal(out, &local); err != nil {
		return nil, fmt.Errorf("run --shards: %w", err)
	}
	same := true
	for _, s := range ss {
		for _, got := range s.ids {
			same = same && slices.Equal(got, local.IDs)
		}
	}

	t := &Table{ID: "e", Title: fmt.Sprintf("A model no node can hold: synthetic %s q4 (%s) on %d node processes with --max-memory %s each, %d tokens per stream",
		c.BigShape, gib(whole), c.BigNodes, gib(c.BigMemory), c.BigTokens),
		Header: []string{"contender", "aggregate tok/s", "per stream tok/s", "tokens equal the in-process chain"}}
	t.Rows = append(t.Rows, []string{"shards chained in one process (1 thread)", f1(local.Decode), f1(local.Decode), "–"})
	a := byKey(ph, ss, agg)
	per := byKey(ph, ss, func(s stat) float64 { return s.perStream })
	bar := plot.Bar{Title: fmt.Sprintf("table e: %s q4 on %d nodes, tokens/s", c.BigShape, c.BigNodes), YLabel: "tokens/s"}
	bar.Labels, bar.Values = append(bar.Labels, "one process"), append(bar.Values, local.Decode)
	for _, n := range c.BigStreams {
		k := strconv.Itoa(n)
		eq := true
		for i, p := range ph {
			if p.key == k {
				for _, got := range ss[i].ids {
					eq = eq && slices.Equal(got, local.IDs)
				}
			}
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%d nodes, %d stream(s)", c.BigNodes, n), f1(median(a[k])), f1(median(per[k])), strconv.FormatBool(eq)})
		bar.Labels, bar.Values = append(bar.Labels, k+" stream(s)"), append(bar.Values, median(a[k]))
	}
	t.Plot = bar
	var layout []string
	for _, st := range stages {
		layout = append(layout, st.String())
	}
	t.Notes = append(t.Notes,
		fmt.Sprintf("The whole model is %s; each node's --max-memory is %s, so no node may load it (node.ErrTooLarge), and its largest stage is %s. Stages %s, cost-balanced as `shards split --stages %d` cuts them.",
			gib(whole), gib(c.BigMemory), gib(largest), strings.Join(layout, ", "), c.BigNodes),
		fmt.Sprintf("Plain loopback; %d node processes with --threads 1 and GOMAXPROCS=1 share this machine's cores with the client. The in-process chain is `pipeshard run --shards` over the same shard CIDs, on 1 thread. Prompt ids %v, greedy. %d repeats. Every stream's tokens equal the chain's: %v.",
			c.BigNodes, bigPrompt, c.Repeats, same))
	if !same {
		return t, fmt.Errorf("table e: the swarm's tokens differ from the in-process chain's %v", local.IDs)
	}
	return t, nil
}

// gib formats a size in binary units.
func gib(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
}
