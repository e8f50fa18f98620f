package pipebench

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/sim/plot"
)

// parity is table a: stories15M unsplit (the checkpoint compiled whole)
// against the same model from stored shards cut into 1, 2 and 3 stages
// (the paper's even rule) and chained in this process, all with the same
// threads. Each repeat decodes Tokens greedy tokens from BOS on every
// contender, in an order that rotates by repeat; every contender must
// produce the unsplit model's tokens.
func parity(ctx context.Context, c Config) (*Table, error) {
	q, src := ovrt.F32, shards.Source{Name: "stories15M", Origin: shards.Artifact{Format: "llama2c"}}
	var w *ovrt.Weights
	var err error
	if cfg, sq, ok := c.synth(); ok {
		q, src = sq, shards.Source{Name: c.Model, Origin: shards.Artifact{Format: "synthetic"}}
		c.Log.Info("table a", "generating", c.Model, "quant", q)
		w, err = shards.Synth(cfg, q, 1)
	} else {
		w, err = checkpoint.LoadLlama2C(c.ModelPath, 0, 0)
	}
	if err != nil {
		return nil, err
	}
	defer w.Close()
	src.Weights = w
	dir, err := os.MkdirTemp("", "pipebench-store-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := shards.Open(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	_, mc, err := st.Import(ctx, src, nil)
	if err != nil {
		return nil, err
	}
	type contender struct {
		name   string
		models []*ovrt.Model
		rates  []float64
		ratios []float64
	}
	whole, err := ovrt.Compile(w, ovrt.WithThreads(c.Threads))
	if err != nil {
		return nil, err
	}
	cs := []*contender{{name: "unsplit", models: []*ovrt.Model{whole}}}
	defer func() {
		for _, k := range cs {
			for _, m := range k.models {
				m.Close()
			}
		}
	}()
	for _, n := range []int{1, 2, 3} {
		stages, err := shards.EvenSplit(w.Config.Layers, n)
		if err != nil {
			return nil, err
		}
		m, _, err := st.Split(ctx, mc, stages, q, "even", nil)
		if err != nil {
			return nil, err
		}
		l, ok := m.Layout(q.String(), "even", n)
		if !ok {
			return nil, fmt.Errorf("no %d-stage %s layout", n, q)
		}
		k := &contender{name: fmt.Sprintf("%d stage%s", n, map[bool]string{true: "s"}[n > 1])}
		cs = append(cs, k)
		var ranges []string
		for _, s := range l.Shards {
			sw, _, err := st.LoadShard(ctx, cid.MustParse(s.CID))
			if err != nil {
				return nil, err
			}
			sm, err := ovrt.Compile(sw, ovrt.WithThreads(c.Threads))
			if err != nil {
				return nil, err
			}
			k.models = append(k.models, sm)
			a, b := sm.Range()
			ranges = append(ranges, fmt.Sprintf("%d:%d", a, b))
		}
		k.name += " (" + fmt.Sprint(ranges) + ")"
	}
	opts := generate.Options{MaxTokens: c.Tokens, EOS: w.Config.EOS, IgnoreEOS: true, Context: w.Config.Context}
	for rep := range c.Repeats {
		var want []int
		rates := make([]float64, len(cs))
		for j := range cs {
			i := (j + rep) % len(cs)
			k := cs[i]
			loc, err := generate.NewLocal(sample.Params{}, k.models...)
			if err != nil {
				return nil, err
			}
			res, err := generate.Run(ctx, loc, []int{w.Config.BOS}, opts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.name, err)
			}
			if want == nil {
				want = res.IDs
			} else if !slices.Equal(want, res.IDs) {
				return nil, fmt.Errorf("%s: output differs from the other contenders'", k.name)
			}
			rates[i] = res.DecodeRate()
		}
		for i, k := range cs {
			k.rates = append(k.rates, rates[i])
			k.ratios = append(k.ratios, rates[i]/rates[0])
		}
		c.Log.Info("table a", "repeat", rep+1, "of", c.Repeats, "unsplit", f1(rates[0]), "1 stage", f1(rates[1]), "2", f1(rates[2]), "3", f1(rates[3]))
	}
	t := &Table{ID: c.tableID("a"), Title: fmt.Sprintf("Shard parity: %s, %d thread(s), %d greedy tokens from BOS, in one process", c.modelName(), c.Threads, c.Tokens),
		Header: []string{"contender", "decode tok/s (median)", "range", "× unsplit (median of per-repeat ratios)"}}
	bar := plot.Bar{Title: "table a: shard parity (× unsplit)", YLabel: "× unsplit tok/s"}
	for _, k := range cs {
		t.Rows = append(t.Rows, []string{k.name, f1(median(k.rates)), span(k.rates, "%.0f"), ratio(median(k.ratios))})
		bar.Labels = append(bar.Labels, k.name)
		bar.Values = append(bar.Values, median(k.ratios))
	}
	t.Notes = append(t.Notes, fmt.Sprintf("%d repeats, contenders in rotating order; every contender produced the unsplit model's tokens.", c.Repeats))
	t.Plot = bar
	return t, nil
}
