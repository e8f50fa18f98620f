package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/bench"
	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/shards"
)

func init() {
	register(&Command{
		Name:     "bench",
		Short:    "measure the engine and pipelines",
		Usage:    "engine|pipeline [flags]",
		Examples: []string{"pipeshard bench engine --quants f32,q8", "sudo pipeshard bench pipeline --tables a,b,c --out tables.md --svg img"},
		Sub: []*Command{{
			Name:  "engine",
			Short: "decode and prefill tokens/s and peak memory of the local runtime",
			Usage: "[--model stories15M] [--quants f32,q8,q4] [--threads-list 1,2] [--tokens 256] [--reps 5]",
			Long: `Runs each configuration in its own child process (so peak RSS is its own),
repeats it --reps times and prints medians as a Markdown table.`,
			Examples: []string{"pipeshard bench engine", "pipeshard bench engine --quants f32 --threads-list 1 --reps 3"},
			Flags: func(fs *flag.FlagSet) {
				fs.String("model", "stories15M", "model to measure")
				fs.String("quants", "f32,q8,q4", "weight types to measure")
				fs.String("threads-list", "1,2", "thread counts to measure")
				fs.Int("tokens", 256, "tokens to decode from BOS per repetition")
				fs.Int("prefill", 128, "prompt tokens for the prefill measurement")
				fs.Int("reps", 5, "repetitions (the median is reported)")
				fs.Bool("child", false, "internal: measure one configuration and print JSON")
				fs.String("quant", "f32", "internal: the child's weight type")
				fs.Int("threads", 1, "internal: the child's thread count")
			},
			Run: benchEngine,
		}, benchPipelineCommand()},
	})
}

func benchEngine(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	src := flagString(fs, "model")
	open := func(q ovrt.DType, threads int) (*ovrt.Model, func(), error) {
		lm, err := openModel(ctx, env, src, q, threads)
		if err != nil {
			return nil, nil, err
		}
		return lm.models[0], lm.Close, nil
	}
	if flagBool(fs, "child") {
		r, err := bench.MeasureEngine(ctx, open, bench.EngineConfig{Quant: flagString(fs, "quant"), Threads: flagInt(fs, "threads")},
			flagInt(fs, "tokens"), flagInt(fs, "prefill"), flagInt(fs, "reps"))
		if err != nil {
			return err
		}
		return json.NewEncoder(env.Stdout).Encode(r)
	}
	if _, ok := models.Known[src]; ok && src == "stories15M" {
		// Measure what nodes run: precompiled shards from the store.
		mc, err := benchModel(ctx, env)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stderr, "measuring stories15M from the store: model %s (whole-model shards in f32, q8 and q4)\n", mc)
		src = mc
	}
	var cfgs []bench.EngineConfig
	for _, q := range strings.Split(flagString(fs, "quants"), ",") {
		for _, t := range strings.Split(flagString(fs, "threads-list"), ",") {
			var n int
			if _, err := fmtSscan(t, &n); err != nil || n < 1 {
				return usagef("--threads-list: %q", t)
			}
			cfgs = append(cfgs, bench.EngineConfig{Quant: q, Threads: n})
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	argv := []string{self, "bench", "engine", "--model", src, "--tokens", flagString(fs, "tokens"),
		"--prefill", flagString(fs, "prefill"), "--reps", flagString(fs, "reps")}
	_, err = bench.RunEngineTable(ctx, env.Stdout, argv, cfgs)
	return err
}

// benchModel imports stories15M and stores whole-model shards of each
// weight type once, returning the model CID.
func benchModel(ctx context.Context, env *Env) (string, error) {
	dir := models.Home()
	state := filepath.Join(dir, "bench-stories15M.json")
	if b, err := os.ReadFile(state); err == nil {
		mc := strings.TrimSpace(string(b))
		if st, err := shards.Open(dir); err == nil {
			c, err := cid.Decode(mc)
			if err == nil {
				if m, err := st.Manifest(ctx, c); err == nil && len(m.Layouts) >= 3 {
					st.Close()
					return mc, nil
				}
			}
			st.Close()
		}
	}
	mdir, err := pullModel(ctx, env, "stories15M")
	if err != nil {
		return "", err
	}
	w, err := checkpoint.LoadLlama2C(filepath.Join(mdir, "stories15M.bin"), 0, 0)
	if err != nil {
		return "", err
	}
	defer w.Close()
	st, err := shards.Open(dir)
	if err != nil {
		return "", err
	}
	defer st.Close()
	_, mc, err := st.Import(ctx, shards.Source{Name: "stories15M", Weights: w, Origin: shards.Artifact{Format: "llama2c"}}, nil)
	if err != nil {
		return "", err
	}
	for _, q := range []ovrt.DType{ovrt.Q8_0, ovrt.Q4_0} {
		if _, mc, err = st.Split(ctx, mc, []shards.Stage{{Start: 0, End: w.Config.Layers}}, q, "whole", nil); err != nil {
			return "", err
		}
	}
	return mc.String(), os.WriteFile(state, []byte(mc.String()), 0o644)
}
