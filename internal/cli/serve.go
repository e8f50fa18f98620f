package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/internal/openai"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/swarm"
)

// serveCommand is `swarm serve`; client declares the client flags, with
// libp2p's listen addresses as --p2p-listen.
func serveCommand(client func(fs *flag.FlagSet)) *Command {
	return &Command{
		Name: "serve", Short: "serve an OpenAI-compatible HTTP API over the swarm",
		Usage: "--listen ADDR --bootstrap MA --model CID [flags]",
		Long: `Serves GET /v1/models, POST /v1/completions and POST /v1/chat/completions
(OpenAI's API, streamed or not) for the model, generating through the swarm.
Every sequence gets its own session on a shared route, so the stages batch
concurrent requests; a sequence fails over when a node of its route leaves,
and --verify checks steps against other providers (streamed text is sent once
a check has covered it). A request whose client disconnects is cancelled.
The same address serves Prometheus metrics at /metrics and the live swarm
dashboard at / (docs/operations.md). The model is listed under its name; requests may name it or its CID. Chat
prompts are the messages' contents joined by newlines (stories15M has no
chat template). --listen is the HTTP address; --p2p-listen the client's
libp2p addresses. See docs/api.md.`,
		Examples: []string{
			`pipeshard swarm serve --listen 127.0.0.1:8080 --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --model bafk...`,
			`curl -s http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' -d '{"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 40}'`,
		},
		Flags: func(fs *flag.FlagSet) {
			client(fs)
			fs.String("model", "", "model CID")
			fs.String("listen", "127.0.0.1:8080", "HTTP `ADDR`ess to serve the API on (host:port)")
			fs.Bool("f16", false, "send hidden states as fp16 (half the bytes; may change rare tokens)")
			fs.String("verify", fmt.Sprint(swarm.DefaultVerifyRate), "check this fraction of steps against other providers of the same shards (all: every step, 0: off); nodes that lie are banned")
			fs.String("speculate", "none", "speculative decoding of every request: none, or ngram (drafts from the context and from earlier answers in --history; needs --verify 0)")
			fs.String("spec-k", "auto", "with --speculate ngram: drafts verified per traversal, auto or 1 to 64")
			fs.String("spec-tree", "auto", "with --speculate ngram: draft nodes verified per traversal as a tree, auto, off or 1 to 512")
			fs.String("history", "", "with --speculate ngram: the n-gram history file, or off (default: HOME/history/MODEL.ngram)")
			fs.Int("max-n", 16, "largest n a request may ask for")
			fs.Int64("max-body", 1<<20, "largest request body in bytes")
		},
		Run: swarmServe,
	}
}

func swarmServe(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	return serveAPI(ctx, env, fs, flagString(fs, "listen"))
}

// serveAPI serves the API on addr for the swarm and model of fs's client
// flags (demo --serve calls it too, without serve's own flags).
func serveAPI(ctx context.Context, env *Env, fs *flag.FlagSet, addr string) error {
	log, err := logger(env, flagString(fs, "log-level"))
	if err != nil {
		return err
	}
	vo, err := verifyFlag(fs)
	if err != nil {
		return err
	}
	c, mc, err := connect(ctx, env, fs)
	if err != nil {
		return err
	}
	defer c.Close()
	wait := fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration)
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	m, err := c.Resolve(fctx, mc)
	if err != nil {
		return err
	}
	tok, err := c.Tokenizer(fctx, m)
	if err != nil {
		return err
	}
	gen := &openai.Swarm{Client: c, Model: m, F16: flagBool(fs, "f16"), FindTimeout: wait, Log: log}
	var maxN int
	var maxBody int64
	if fs.Lookup("max-n") != nil {
		maxN, maxBody = flagInt(fs, "max-n"), fs.Lookup("max-body").Value.(flag.Getter).Get().(int64)
	}
	if vo != nil {
		gen.Verify, gen.Bans = vo.Rate, &swarm.Bans{}
	}
	if fs.Lookup("speculate") != nil {
		if err := serveSpeculation(env, fs, gen, vo != nil); err != nil {
			return err
		}
	}
	api := openai.New(openai.Config{Model: m.Name, Aliases: []string{mc.String()}, Tokenizer: tok, Context: m.Config.Context,
		MaxN: maxN, MaxBody: maxBody, Log: log}, gen)
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)

	// Beside the API: Prometheus /metrics (internal/metrics) and the
	// dashboard at / with its /api/swarm (internal/dashboard).
	if err := observeClient(ctx, mux, c, m); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("HTTP address %q: %v", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	fmt.Fprintf(env.Stdout, "serving the OpenAI API for %s (%s) on http://%s/v1\n", m.Name, mc, ln.Addr())
	// Plan the shared route now, so that the first request need not.
	go func() {
		if _, _, err := gen.Route(ctx); err != nil && ctx.Err() == nil {
			log.Warn("no route yet; requests will look again", "err", err)
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return ctx.Err()
}

// serveSpeculation sets gen up for --speculate: the n-gram drafter, with
// the history of earlier answers, which every finished answer joins.
func serveSpeculation(env *Env, fs *flag.FlagSet, gen *openai.Swarm, verified bool) error {
	switch strings.ToLower(flagString(fs, "speculate")) {
	case "", "none":
		return nil
	case "ngram":
	default:
		return usagef("--speculate %q: want none or ngram", flagString(fs, "speculate"))
	}
	if verified {
		return usagef("--speculate ngram needs --verify 0: verified sequences do not speculate")
	}
	k, err := spec.ParseK(flagString(fs, "spec-k"))
	if err != nil {
		return usagef("--spec-k: %v", err)
	}
	hist := openHistoryFile(env, flagString(fs, "history"), flagString(fs, "home"), gen.Model.ModelID, gen.Model.Config.Vocab)
	gen.SpecK = k
	if gen.SpecTree, err = spec.ParseTree(flagString(fs, "spec-tree")); err != nil {
		return usagef("--spec-tree: %v", err)
	}
	gen.Drafter = func() spec.Drafter { return hist.drafter() }
	if hist != nil {
		gen.Remember = func(seq []int) { hist.add(env, seq) }
	}
	return nil
}
