package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/internal/idle"
	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/node"
)

func init() {
	register(&Command{
		Name:  "node",
		Short: "run a volunteer node: join the DHT, host a shard, serve activations",
		Usage: "(--shard CID | --model CID --layers auto) [--bootstrap MA,...] [--home DIR] [--max-memory SIZE] [--json]",
		Long: `Joins the pipeshard DHT through --bootstrap (the first node needs none),
hosts one shard, announces it and its model, and serves the stage protocol
until interrupted. A shard missing from --home is fetched from peers by
CID, every block checked. On start it prints its peer ID and full addresses
(with --json: one object with peer_id and addrs) for others to bootstrap from.

On SIGTERM or Ctrl-C it drains: it stops taking sessions, announces that it
is draining, lets its sessions finish for --drain-timeout, hands the rest
over to other nodes (their clients move and replay), and exits; a second
signal exits at once. With --idle-only it does the same whenever other
processes keep more than half the CPUs busy for 10 s or the machine runs on
battery, and serves again after 60 s of idleness.`,
		Examples: []string{
			"pipeshard node --shard bafy... --listen /ip4/0.0.0.0/tcp/4001,/ip4/0.0.0.0/udp/4001/quic-v1",
			"pipeshard node --home ~/.pipeshard-2 --shard bafy... --bootstrap /ip4/192.0.2.7/tcp/4001/p2p/12D3KooW...",
			"pipeshard node --model bafk... --layers auto --max-memory 6GiB --bootstrap /ip4/192.0.2.7/tcp/4001/p2p/12D3KooW...",
			"pipeshard node --shard bafy... --swarm-key swarm.key --allow peers.txt --listen /ip4/0.0.0.0/tcp/4001",
			"pipeshard node --shard bafy... --ui 127.0.0.1:9090   # dashboard at http://127.0.0.1:9090/, metrics at /metrics",
		},
		Flags: func(fs *flag.FlagSet) {
			fs.String("home", models.Home(), "node home: identity key and block store")
			fs.String("shard", "", "CID of the shard to host")
			fs.String("model", "", "model CID: with --layers auto, host the shard the swarm needs most")
			fs.String("layers", "", "auto: choose the layer range from the swarm's coverage and throughput")
			fs.String("bootstrap", "", "comma-separated full multiaddrs of peers to join through")
			fs.String("listen", "", "comma-separated multiaddrs to listen on (default: TCP and QUIC, any port)")
			fs.Int("threads", 0, "runtime threads (0: all cores)")
			fs.String("max-memory", "", "bound on shard and KV cache bytes, e.g. 2GiB")
			fs.Bool("json", false, "print the start line as JSON")
			fs.String("addr-file", "", "also write the start line's JSON to this file (for scripts)")
			fs.String("log-level", "info", "debug, info, warn or error")
			fs.Duration("drain-timeout", 10*time.Second, "on SIGTERM or Ctrl-C: how long to let sessions finish before handing them over")
			fs.Bool("idle-only", false, "host only while the machine is idle: drain when other processes load it or it runs on battery, serve again when idle")
			privateFlags(fs)
			fs.Int("peer-max-sessions", 0, "sessions one peer (client) may hold here (0: 16; -1: no limit)")
			fs.String("peer-max-kv", "", "KV cache one peer's sessions may grow to, each counted at its full context, e.g. 512MiB (default: no limit)")
			fs.Float64("peer-rate", 0, "requests (opens and forwards) a second one peer may send (0: no limit)")
			observeFlags(fs)
		},
		Run: runNode,
	})
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func logger(env *Env, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q", level)
	}
	return slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func runNode(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	log, err := logger(env, flagString(fs, "log-level"))
	if err != nil {
		return err
	}
	stopDebug, err := serveDebug(log)
	if err != nil {
		return err
	}
	defer stopDebug()
	mem, err := parseBytes(flagString(fs, "max-memory"))
	if err != nil {
		return usagef("--max-memory: %v", err)
	}
	peerKV, err := parseBytes(flagString(fs, "peer-max-kv"))
	if err != nil {
		return usagef("--peer-max-kv: %v", err)
	}
	priv, err := readPrivacy(fs)
	if err != nil {
		return err
	}
	cfg := node.Config{
		SwarmKey: priv.key,
		Allow:    priv.allow,
		Stage: node.StageOptions{MaxSessionsPerPeer: flagInt(fs, "peer-max-sessions"), MaxKVBytesPerPeer: peerKV,
			RatePerPeer: flagFloat(fs, "peer-rate")},
		Home:      flagString(fs, "home"),
		Shard:     flagString(fs, "shard"),
		Model:     flagString(fs, "model"),
		Bootstrap: splitList(flagString(fs, "bootstrap")),
		Listen:    splitList(flagString(fs, "listen")),
		Threads:   flagInt(fs, "threads"),
		MaxMemory: mem,
		Log:       log,
		Progress:  newProgress(env.Stderr, "fetching shard").update,
	}
	obs := newNodeObs(fs)
	cfg.Stage.Observer = obs.observer()
	switch l := flagString(fs, "layers"); {
	case cfg.Shard == "" && cfg.Model == "":
		return usagef("--shard CID, or --model CID --layers auto, is required")
	case cfg.Shard != "" && cfg.Model != "":
		return usagef("give --shard or --model, not both")
	case cfg.Model != "" && l != "auto":
		return usagef("--model needs --layers auto")
	case l != "" && l != "auto":
		return usagef("--layers %q: only auto is supported (use --shard for a given range)", l)
	}
	n, err := node.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	stopObs, err := obs.start(ctx, env.Stderr, n, log)
	if err != nil {
		return err
	}
	defer stopObs()
	info, _ := json.Marshal(map[string]any{"peer_id": n.ID().String(), "addrs": n.Addrs(),
		"shard": cfg.Shard, "model_id": n.Header.ModelID, "layers": []int{n.Header.Start, n.Header.End}})
	if f := flagString(fs, "addr-file"); f != "" {
		tmp := f + ".tmp"
		if err := os.WriteFile(tmp, append(info, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, f); err != nil {
			return err
		}
	}
	if flagBool(fs, "json") {
		fmt.Fprintf(env.Stdout, "%s\n", info)
	} else {
		fmt.Fprintf(env.Stdout, "peer %s layers %d:%d addrs %s\n", n.ID(), n.Header.Start, n.Header.End, strings.Join(n.Addrs(), " "))
	}
	if f, ok := env.Stdout.(interface{ Sync() error }); ok {
		f.Sync()
	}
	// Serve until interrupted, then drain (a second signal ends the
	// drain at once: main stops catching signals when ctx ends).
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- n.Run(runCtx) }()
	if flagBool(fs, "idle-only") {
		go n.ServeWhenIdle(runCtx, idle.Proc{}, idle.Config{}, 2*time.Second)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(env.Stderr, "draining: no new sessions; open ones finish or move")
	handed := n.Drain(context.Background(), fs.Lookup("drain-timeout").Value.(flag.Getter).Get().(time.Duration))
	fmt.Fprintf(env.Stderr, "drained: %d session(s) handed over\n", handed)
	stop()
	<-done
	return ctx.Err()
}

// parseBytes reads sizes like 512MiB, 2GiB, 1.5GB or a plain byte count.
func parseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			var v float64
			if _, err := fmt.Sscan(strings.TrimSuffix(s, u.suffix), &v); err != nil || v < 0 {
				return 0, fmt.Errorf("%q is not a size", s)
			}
			return int64(v * u.mult), nil
		}
	}
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return v, nil
}
