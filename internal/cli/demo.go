package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/shards"
)

func init() {
	register(&Command{
		Name:  "demo",
		Short: "stream a story through a local multi-node swarm",
		Usage: "[--nodes 3] [--prompt TEXT] [-n N]",
		Long: `Pulls stories15M if needed, imports it and cuts it into --nodes stages
(cost-balanced), starts that many node processes on loopback, each with its
own identity and store (the first holds the model, the others fetch their
shards from it over bitswap), and has a client that knows only the first
node's address and the model CID find a route through the DHT and generate a
story. Prints the route and per-hop times.`,
		Examples: []string{"pipeshard demo", "pipeshard demo --nodes 4 --prompt 'The dragon' -n 200 --temp 0.8 --seed 3",
			"pipeshard demo --serve 127.0.0.1:8080   # the OpenAI API over the demo swarm (docs/api.md)"},
		Flags: func(fs *flag.FlagSet) {
			genFlags(fs)
			fs.Int("nodes", 3, "number of node processes (stages)")
			fs.String("bootstrap", "", "internal")
			fs.String("home", "", "internal")
			fs.String("listen", "/ip4/127.0.0.1/tcp/0", "client listen address")
			fs.Duration("timeout", 2*time.Minute, "how long to wait for the swarm")
			fs.String("log-level", "warn", "debug, info, warn or error")
			fs.Bool("f16", false, "send hidden states as fp16")
			fs.String("serve", "", "instead of a story, serve the OpenAI API on this HTTP `ADDR`ess (host:port) over the demo swarm until interrupted (see swarm serve)")
			privateFlags(fs)
			fs.Lookup("prompt").DefValue = "Once upon a time"
			fs.Set("prompt", "Once upon a time")
			fs.Set("n", "200")
		},
		Run: runDemo,
	})
}

// demoState is what a previous demo prepared, so a rerun starts at once.
type demoState struct {
	Model  string   `json:"model"`
	Nodes  int      `json:"nodes"`
	Shards []string `json:"shards"`
}

func runDemo(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	n := flagInt(fs, "nodes")
	if n < 1 || n > 16 {
		return usagef("--nodes %d: want 1 to 16", n)
	}
	dir := filepath.Join(models.Home(), "demo")
	st, err := prepareDemo(ctx, env, dir, n)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "model %s, %d shards; starting %d nodes\n", st.Model, len(st.Shards), n)
	var boot []string
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				p.Process.Kill()
			}
		}
	}()
	for i, shard := range st.Shards {
		home := dir
		if i > 0 {
			home = filepath.Join(dir, fmt.Sprintf("node%d", i))
		}
		args := []string{"node", "--home", home, "--shard", shard, "--listen", "/ip4/127.0.0.1/tcp/0", "--json", "--log-level", "warn", "--threads", "1"}
		for _, f := range []string{"swarm-key", "allow"} { // a private demo swarm
			if v := flagString(fs, f); v != "" {
				args = append(args, "--"+f, v)
			}
		}
		if i > 0 {
			args = append(args, "--bootstrap", strings.Join(boot, ","))
		}
		cmd := exec.CommandContext(ctx, self, args...)
		// Each node's own messages (warnings, its drain at the end) go to
		// a log file, so that the story is what the terminal shows.
		logPath := filepath.Join(dir, fmt.Sprintf("node%d.log", i))
		logf, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer logf.Close()
		cmd.Stderr = logf
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			msg, _ := os.ReadFile(logPath)
			return fmt.Errorf("node %d did not start: %w (its log, %s: %s)", i, err, logPath, strings.TrimSpace(string(msg)))
		}
		var info struct {
			PeerID string   `json:"peer_id"`
			Addrs  []string `json:"addrs"`
			Layers []int    `json:"layers"`
		}
		if err := json.Unmarshal([]byte(line), &info); err != nil {
			return fmt.Errorf("node %d: %q: %w", i, line, err)
		}
		fmt.Fprintf(env.Stderr, "node %d: %s layers %v (log: %s)\n", i, info.PeerID, info.Layers, logPath)
		if i == 0 {
			boot = info.Addrs
		}
	}
	fs.Set("bootstrap", strings.Join(boot, ","))
	fs.Set("model", st.Model)
	fs.Set("home", filepath.Join(dir, "client"))
	if addr := flagString(fs, "serve"); addr != "" {
		return serveAPI(ctx, env, fs, addr)
	}
	return swarmGenerate(ctx, env, fs)
}

// prepareDemo imports and splits stories15M into dir's store once.
func prepareDemo(ctx context.Context, env *Env, dir string, n int) (*demoState, error) {
	statePath := filepath.Join(dir, fmt.Sprintf("demo-%d.json", n))
	var st demoState
	if b, err := os.ReadFile(statePath); err == nil && json.Unmarshal(b, &st) == nil && st.Nodes == n {
		store, err := shards.Open(dir)
		if err == nil {
			ok := true
			for _, c := range append([]string{st.Model}, st.Shards...) {
				if has, err := store.Blocks.Has(ctx, cid.MustParse(c)); err != nil || !has {
					ok = false
				}
			}
			store.Close()
			if ok {
				return &st, nil
			}
		}
	}
	mdir, err := pullModel(ctx, env, "stories15M")
	if err != nil {
		return nil, err
	}
	w, err := checkpoint.LoadLlama2C(filepath.Join(mdir, "stories15M.bin"), 0, 0)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	tok, err := os.ReadFile(filepath.Join(mdir, "tokenizer.bin"))
	if err != nil {
		return nil, err
	}
	store, err := shards.Open(dir)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	fmt.Fprintln(env.Stderr, "importing stories15M")
	m, mc, err := store.Import(ctx, shards.Source{Name: "stories15M", Weights: w, Tokenizer: tok, TokFormat: "llama2c", Origin: shards.Artifact{Format: "llama2c"}}, nil)
	if err != nil {
		return nil, err
	}
	layout := m.Layouts[0]
	if n > 1 {
		cs := shards.CostsOf(m.Config, ovrt.F32, ovrt.F32)
		stages, err := shards.BalancedSplit(cs, shards.DefaultProfile, n)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(env.Stderr, "cutting it into %d stages\n", n)
		if m, mc, err = store.Split(ctx, mc, stages, ovrt.F32, "balanced", nil); err != nil {
			return nil, err
		}
		layout = m.Layouts[len(m.Layouts)-1]
	}
	st = demoState{Model: mc.String(), Nodes: n}
	for _, s := range layout.Shards {
		st.Shards = append(st.Shards, s.CID)
	}
	if len(st.Shards) != n {
		return nil, errors.New("demo: the split did not give one shard per node")
	}
	b, _ := json.Marshal(st)
	return &st, os.WriteFile(statePath, b, 0o644)
}
