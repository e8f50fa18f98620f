package cli

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

func init() {
	register(&Command{
		Name:  "run",
		Short: "generate text with a model in this process",
		Usage: "--model PATH (--prompt TEXT | --prompt-ids 1,2,3) [flags]",
		Long: `Runs the whole model here and streams the text to stdout. PATH is a
llama2.c checkpoint (its tokenizer.bin beside it), a Hugging Face directory
(config.json + safetensors), or a GGUF file.`,
		Examples: []string{
			`pipeshard run --model ~/.cache/pipeshard/models/stories15M/stories15M.bin --prompt "Once upon a time"`,
			`pipeshard run --model stories15M --prompt-ids 1,9038 -n 32 --json`,
			`pipeshard run --model stories15M --prompt "The dragon" --temp 0.8 --top-p 0.9 --seed 7 --quant q8`,
		},
		Flags: genFlags,
		Run:   runLocal,
	})
}

// genFlags declares the generation flags shared by run and swarm generate.
func genFlags(fs *flag.FlagSet) {
	fs.String("model", "", "model: a file or directory, a known name (stories15M) or a model CID")
	fs.String("shards", "", "run these stored shards, chained in order (CID,CID,...)")
	fs.String("tokenizer", "", "tokenizer file (default: tokenizer.bin beside the model)")
	fs.String("prompt", "", "prompt text")
	fs.String("prompt-ids", "", "prompt as comma-separated token ids (no BOS is added)")
	fs.Int("n", 128, "number of tokens to generate")
	fs.Float64("temp", 0, "sampling temperature; 0 is greedy")
	fs.Float64("top-p", 0, "nucleus sampling threshold (0 or 1: off)")
	fs.Int("top-k", 0, "top-k sampling cut (0: off)")
	fs.Uint64("seed", 0, "sampling seed")
	fs.Bool("ignore-eos", false, "keep generating after the end-of-sequence token")
	fs.Int("threads", 0, "threads for large matrices (0: all cores)")
	fs.String("quant", "f32", "weight type to run: f32, q8 or q4")
	fs.Bool("json", false, "print one JSON object instead of streaming text")
	fs.String("logits-out", "", "write the logits of every prompt position to FILE (float32 LE, [prompt, vocab])")
	fs.String("speculate", "none", "speculative decoding: none, ngram (drafts looked up in the context) or draft (drafts from --draft-model)")
	fs.String("draft-model", "", "the draft model of --speculate draft, run here: a file, a known name or a model CID; same vocabulary as the model")
	fs.String("draft-quant", "", "weight type of the draft model: f32, q8 or q4 (default: --quant)")
	fs.String("spec-k", "auto", "drafts verified per traversal: auto or 1 to 64")
	fs.String("spec-tree", "auto", "--speculate ngram: draft nodes verified per traversal as a tree, auto (sized from measured costs when --spec-k is auto; chains otherwise), off, or 1 to 512")
	fs.String("history", "", "--speculate ngram also drafts from earlier prompts and answers kept in this file, and adds this one; off: the context only (default: HOME/history/MODEL.ngram)")
}

// genRequest is what the generation flags ask for.
type genRequest struct {
	promptIDs []int
	tok       *tokenizer.Tokenizer // nil when none was found
	opts      generate.Options
	sampling  sample.Params
	json      bool
	logitsOut string

	// Speculative decoding: "none", "ngram" or "draft".
	speculate  string
	draftModel string
	draftQuant ovrt.DType
	specK      int // 0: auto
	specTree   int // draft tree nodes: 0 auto, -1 off
	// streams, if set, counts the sequences in flight that share the
	// route (generate.SpecOptions.Streams).
	streams   func() int
	pointMass bool // a draft model proposes its argmax even when sampling
	threads   int
	vocab     int

	// The n-gram drafter's history: the --history flag, and the history
	// it opened (nil: none).
	historyFlag string
	hist        *historyFile

	// rewinding, if set, runs plain generation on a backend that may take
	// tokens back (sampled verification): it tells onRewind how many
	// generated tokens it kept. verified, if set, counts the generated
	// tokens verification has covered, for output that cannot be taken
	// back.
	rewinding func(ctx context.Context, b generate.Backend, prompt []int, o generate.Options, onRewind func(kept int)) (generate.Result, error)
	verified  func() int
}

// draftLogits reports whether a session along hops must return logits
// for verifying: it must for a draft model's own distributions, when
// sampling. A route whose last hop holds only part of the output head
// cannot return them; the draft model then proposes its argmax as point
// masses, which the last hop's sampled ids verify.
func (g *genRequest) draftLogits(hops []swarm.Hop) bool {
	if g.speculate != "draft" || g.sampling.Greedy() {
		return false
	}
	if len(hops) > 0 && hops[len(hops)-1].HeadLo != 0 {
		g.pointMass = true
		return false
	}
	return true
}

// parseSpec reads the speculative decoding flags.
func (g *genRequest) parseSpec(fs *flag.FlagSet) error {
	g.speculate, g.draftModel = strings.ToLower(flagString(fs, "speculate")), flagString(fs, "draft-model")
	if g.draftModel != "" && (g.speculate == "none" || g.speculate == "") {
		g.speculate = "draft"
	}
	switch g.speculate {
	case "", "none":
		g.speculate = "none"
	case "ngram":
	case "draft":
		if g.draftModel == "" {
			return usagef("--speculate draft needs --draft-model")
		}
	default:
		return usagef("--speculate %q: want none, ngram or draft", g.speculate)
	}
	k, err := spec.ParseK(flagString(fs, "spec-k"))
	if err != nil {
		return usagef("--spec-k: %v", err)
	}
	g.specK = k
	if g.specTree, err = spec.ParseTree(flagString(fs, "spec-tree")); err != nil {
		return usagef("--spec-tree: %v", err)
	}
	g.historyFlag = flagString(fs, "history")
	q := flagString(fs, "draft-quant")
	if q == "" {
		q = flagString(fs, "quant")
	}
	if g.draftQuant, err = ovrt.ParseDType(q); err != nil {
		return usagef("--draft-quant: %v", err)
	}
	g.threads = flagInt(fs, "threads")
	return nil
}

// historyFile is an n-gram history and the file it is kept in.
type historyFile struct {
	h    *spec.History
	path string
}

// openHistoryFile opens the n-gram history of model that flag (--history)
// names: a file, off (nil), or "" for HOME/history/MODEL.ngram. A history
// that cannot be read is reported and not used (nil): it only ever
// changes the speed.
func openHistoryFile(env *Env, flag, home, model string, vocab int) *historyFile {
	if flag == "off" {
		return nil
	}
	path := flag
	if path == "" {
		path = filepath.Join(home, "history", strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(model)+".ngram")
	}
	h, err := spec.LoadHistory(path, vocab, 0)
	if err != nil {
		fmt.Fprintf(env.Stderr, "warning: n-gram history not used: %v\n", err)
		return nil
	}
	return &historyFile{h: h, path: path}
}

// add remembers seq in the history and its file; a failure is reported.
// A nil history remembers nothing.
func (f *historyFile) add(env *Env, seq []int) {
	if f == nil {
		return
	}
	if err := f.h.Append(f.path, seq); err != nil {
		fmt.Fprintf(env.Stderr, "warning: n-gram history: %v\n", err)
	}
}

// drafter returns the n-gram drafter over the history (the context only
// when f is nil).
func (f *historyFile) drafter() spec.NGram {
	if f == nil {
		return spec.NGram{}
	}
	return spec.NGram{History: f.h}
}

// openHistory opens the history --speculate ngram drafts from.
func (g *genRequest) openHistory(env *Env, home, model string) {
	if g.speculate == "ngram" {
		g.hist = openHistoryFile(env, g.historyFlag, home, model, g.vocab)
	}
}

// historyPath is f's file, "" for none.
func historyPath(f *historyFile) string {
	if f == nil {
		return ""
	}
	return f.path
}

// remember adds a prompt's answer to the n-gram history, if one is open.
func (g *genRequest) remember(env *Env, ids []int) {
	if len(ids) > 0 {
		g.hist.add(env, append(slices.Clone(g.promptIDs), ids...))
	}
}

// drafter loads what --speculate asks for; close releases it.
func (g *genRequest) drafter(ctx context.Context, env *Env) (d spec.Drafter, close func(), err error) {
	switch g.speculate {
	case "ngram":
		return g.hist.drafter(), func() {}, nil
	case "draft":
		lm, err := openModel(ctx, env, g.draftModel, g.draftQuant, g.threads)
		if err != nil {
			return nil, nil, fmt.Errorf("draft model: %w", err)
		}
		if len(lm.models) != 1 || lm.cfg.Vocab != g.vocab {
			lm.Close()
			return nil, nil, fmt.Errorf("%w: %s has a vocabulary of %d, the model %d", spec.ErrDraftModel, g.draftModel, lm.cfg.Vocab, g.vocab)
		}
		r := rand.New(rand.NewPCG(g.sampling.Seed, 0x6a09e667f3bcc909))
		dm, err := spec.NewDraftModel(lm.models[0], spec.ModelOptions{Sampling: g.sampling, PointMass: g.pointMass, Uniform: r.Float64})
		if err != nil {
			lm.Close()
			return nil, nil, err
		}
		return dm, lm.Close, nil
	}
	return nil, func() {}, nil
}

// parseGen reads the generation flags. vocab and bos/eos describe the
// model; tokenizerPath may be "" when none is known.
func parseGen(fs *flag.FlagSet, cfg ovrt.Config, tokenizerPath string, tok *tokenizer.Tokenizer) (*genRequest, error) {
	g := &genRequest{json: flagBool(fs, "json"), logitsOut: flagString(fs, "logits-out"), tok: tok, vocab: cfg.Vocab}
	if p := flagString(fs, "tokenizer"); p != "" {
		tokenizerPath = p
	}
	if tokenizerPath != "" && g.tok == nil {
		if _, err := os.Stat(tokenizerPath); err == nil || flagString(fs, "tokenizer") != "" {
			t, err := tokenizer.LoadFor(tokenizerPath, cfg.Vocab)
			if err != nil {
				return nil, err
			}
			g.tok = t
		}
	}
	text, idText := flagString(fs, "prompt"), flagString(fs, "prompt-ids")
	switch {
	case text != "" && idText != "":
		return nil, usagef("give --prompt or --prompt-ids, not both")
	case idText != "":
		for _, f := range strings.Split(idText, ",") {
			id, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, usagef("--prompt-ids: %q is not a token id", f)
			}
			if id < 0 || id >= cfg.Vocab {
				return nil, fmt.Errorf("%w: --prompt-ids: token id %d outside the vocabulary of %d", ovrt.ErrTokenRange, id, cfg.Vocab)
			}
			g.promptIDs = append(g.promptIDs, id)
		}
	case g.tok == nil:
		return nil, usagef("no tokenizer found for the model: pass --tokenizer FILE, or --prompt-ids")
	default:
		g.promptIDs = g.tok.Encode(text, true)
	}
	if len(g.promptIDs) > cfg.Context {
		return nil, fmt.Errorf("%w: %d prompt tokens, context %d", generate.ErrPromptTooLong, len(g.promptIDs), cfg.Context)
	}
	n := flagInt(fs, "n")
	if n < 0 {
		return nil, usagef("-n %d: want a count >= 0", n)
	}
	g.sampling = sample.Params{
		Temp: flagFloat(fs, "temp"), TopP: flagFloat(fs, "top-p"),
		TopK: flagInt(fs, "top-k"), Seed: fs.Lookup("seed").Value.(flag.Getter).Get().(uint64),
	}
	g.opts = generate.Options{
		MaxTokens: n,
		Seed:      g.sampling.Seed,
		EOS:       cfg.EOS,
		IgnoreEOS: flagBool(fs, "ignore-eos"),
		Context:   cfg.Context,
	}
	if err := g.sampling.Validate(); err != nil {
		return nil, usagef("%v", err)
	}
	if err := g.parseSpec(fs); err != nil {
		return nil, err
	}
	return g, nil
}

func runLocal(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	src, shardList := flagString(fs, "model"), flagString(fs, "shards")
	if src == "" && shardList == "" {
		return usagef("--model is required")
	}
	quant, err := ovrt.ParseDType(flagString(fs, "quant"))
	if err != nil {
		return usagef("%v", err)
	}
	var lm *loadedModel
	if shardList != "" {
		lm, err = openShardList(ctx, src, shardList, quant, flagInt(fs, "threads"))
	} else {
		lm, err = openModel(ctx, env, src, quant, flagInt(fs, "threads"))
	}
	if err != nil {
		return err
	}
	defer lm.Close()
	tok := lm.tok
	if lm.manifest != nil && lm.manifest.Tokenizer.CID != "" && flagString(fs, "tokenizer") == "" {
		st, err := shards.Open(models.Home())
		if err != nil {
			return err
		}
		tok, err = st.Tokenizer(ctx, lm.manifest)
		st.Close()
		if err != nil {
			return err
		}
	}
	g, err := parseGen(fs, lm.cfg, lm.tokenizer, tok)
	if err != nil {
		return err
	}
	key := filepath.Base(src)
	if lm.manifest != nil {
		key = lm.manifest.ModelID
	}
	g.openHistory(env, models.Home(), key)
	fwd, err := generate.NewLocal(g.sampling, lm.models...)
	if err != nil {
		return err
	}
	return g.run(ctx, env, fwd, nil)
}

// run generates and prints; extra adds fields to the JSON output.
func (g *genRequest) run(ctx context.Context, env *Env, fwd generate.Backend, extra map[string]any) error {
	d, closeDraft, err := g.drafter(ctx, env)
	if err != nil {
		return err
	}
	defer closeDraft()
	var logitsFile *os.File
	if g.logitsOut != "" {
		f, err := os.Create(g.logitsOut)
		if err != nil {
			return err
		}
		defer f.Close()
		logitsFile = f
		g.opts.OnPromptLogits = func(l []float32) {
			buf := make([]byte, 4*len(l))
			for i, v := range l {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			}
			if _, err := f.Write(buf); err != nil {
				fmt.Fprintf(env.Stderr, "writing %s: %v\n", g.logitsOut, err)
			}
		}
	}
	stream := newTextStream(env.Stdout, env.Stderr, g.tok, g.promptIDs, g.json)
	if g.verified != nil {
		stream.holdUntilVerified(g.verified)
	}
	g.opts.OnToken = stream.token
	var res generate.Result
	switch {
	case g.speculate != "none":
		res, err = generate.RunSpeculative(ctx, fwd, d, g.promptIDs, g.opts, generate.SpecOptions{K: g.specK, Sampling: g.sampling, Tree: g.specTree})
	case g.rewinding != nil:
		res, err = g.rewinding(ctx, fwd, g.promptIDs, g.opts, stream.rewind)
	default:
		res, err = generate.Run(ctx, fwd, g.promptIDs, g.opts)
	}
	text := stream.finish()
	if err != nil {
		if !g.json {
			fmt.Fprintln(env.Stdout)
		}
		return err
	}
	g.remember(env, res.IDs)
	if logitsFile != nil {
		if err := logitsFile.Close(); err != nil {
			return err
		}
	}
	if !g.json {
		fmt.Fprintln(env.Stdout)
		fmt.Fprintf(env.Stderr, "%d prompt tokens at %.1f tok/s, %d generated at %.1f tok/s (%s)\n",
			len(g.promptIDs), res.PrefillRate(len(g.promptIDs)), len(res.IDs), res.DecodeRate(), res.Stopped)
		if g.speculate != "none" {
			fmt.Fprintf(env.Stderr, "speculative (%s): %d of %d drafts accepted (%.0f%%), %.2f tokens per traversal, %d traversals\n",
				g.speculate, res.Accepted, res.Drafted, 100*res.AcceptanceRate(), res.TokensPerTraversal(), res.Traversals)
		}
		return nil
	}
	out := map[string]any{
		"prompt_ids":           g.promptIDs,
		"ids":                  nonNil(res.IDs),
		"text":                 text,
		"prefill_tokens_per_s": res.PrefillRate(len(g.promptIDs)),
		"decode_tokens_per_s":  res.DecodeRate(),
		"stopped":              res.Stopped,
		"traversals":           res.Traversals,
	}
	if g.speculate != "none" {
		k := any(g.specK)
		if g.specK == 0 {
			k = "auto"
		}
		out["speculative"] = map[string]any{
			"mode":                 g.speculate,
			"k":                    k,
			"drafted":              res.Drafted,
			"accepted":             res.Accepted,
			"acceptance_rate":      res.AcceptanceRate(),
			"tokens_per_traversal": res.TokensPerTraversal(),
			"refed":                res.Refed,
			"draft_ms":             float64(res.DraftTime.Microseconds()) / 1e3,
			"point_mass":           g.speculate == "ngram" || g.sampling.Greedy() || g.pointMass,
			"history":              historyPath(g.hist), // "" when none
		}
	}
	for k, v := range extra {
		if f, ok := v.(jsonFunc); ok {
			v = f()
		}
		out[k] = v
	}
	enc := json.NewEncoder(env.Stdout)
	return enc.Encode(out)
}

func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}
