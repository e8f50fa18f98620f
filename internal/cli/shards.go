package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/shards/blockstore"
	"github.com/pipeshard/pipeshard/shards/gguf"
)

func init() {
	home := func(fs *flag.FlagSet) {
		fs.String("home", models.Home(), "pipeshard home directory (store under HOME/store)")
	}
	jsonFlag := func(fs *flag.FlagSet) { fs.Bool("json", false, "print one JSON object") }
	register(&Command{
		Name:     "shards",
		Short:    "import, split, address and verify content-addressed shards",
		Usage:    "import|synth|split|ls|show|verify|export|cid ...",
		Examples: []string{"pipeshard shards import --json stories15M", "pipeshard shards split bafk... --stages 3", "pipeshard shards verify bafk..."},
		Long: `A model is stored as content-addressed files: a tokenizer, a manifest (whose
CID is the model CID) and shards, each a contiguous range of layers laid out
as the runtime's kernels read them. CIDs are those that
'ipfs add --cid-version=1 --raw-leaves' prints for the same bytes.`,
		Sub: []*Command{
			{
				Name: "import", Short: "import a llama2.c, Hugging Face or GGUF model into the store",
				Usage:    "[--name NAME] [--tokenizer FILE] [--json] PATH|stories15M",
				Examples: []string{"pipeshard shards import stories15M", "pipeshard shards import --json ./Llama-3.2-1B.Q8_0.gguf"},
				Flags: func(fs *flag.FlagSet) {
					home(fs)
					jsonFlag(fs)
					fs.String("name", "", "model name (default: the file's base name)")
					fs.String("tokenizer", "", "llama2.c tokenizer file (default: tokenizer.bin beside the model)")
				},
				Run: shardsImport,
			},
			{
				Name: "synth", Short: "make a deterministic synthetic model with real shapes",
				Usage:    "--shape llama3-1b|llama3-8b|llama2-7b|tiny [--layers N] [--seed S] [--quant q4] [--json]",
				Examples: []string{"pipeshard shards synth --shape llama3-1b --layers 4 --seed 1 --quant q8"},
				Flags: func(fs *flag.FlagSet) {
					home(fs)
					jsonFlag(fs)
					fs.String("shape", "llama3-1b", "layer shapes: "+strings.Join(shards.SynthShapes(), ", "))
					fs.Int("layers", 0, "number of layers (0: the real model's)")
					fs.Uint64("seed", 1, "seed of the weights")
					fs.String("quant", "f32", "weight type: f32, q8 or q4")
				},
				Run: shardsSynth,
			},
			{
				Name: "split", Short: "cut a model into stages (cost-balanced by default) and store the shards",
				Usage: "MODEL-CID (--stages N [--even] | --ranges 0:4,4:6) [--quant f32|q8|q4] [--json]",
				Long: `--stages N cuts the model so that the slowest stage is as fast as it can be,
counting each layer's bytes and arithmetic, the embedding and the output head,
which may be cut by rows between the last stages. --even uses the paper's rule
instead (L//N layers each, the remainder to the first stages). --ranges gives
the cut: START:END of layers, and /ROWLO:ROWHI for a part of the head.`,
				Examples: []string{"pipeshard shards split bafy... --stages 3 --quant q8", "pipeshard shards split bafy... --ranges 0:4,4:6"},
				Flags: func(fs *flag.FlagSet) {
					home(fs)
					jsonFlag(fs)
					fs.Int("stages", 2, "number of stages")
					fs.Bool("even", false, "split by layer count, as the paper did")
					fs.String("ranges", "", "explicit cut, e.g. 0:4,4:6")
					fs.String("quant", "f32", "weight type of the shards")
				},
				Run: shardsSplit,
			},
			{Name: "ls", Short: "list the models in the store", Usage: "[--json]", Flags: func(fs *flag.FlagSet) { home(fs); jsonFlag(fs) }, Run: shardsLs,
				Examples: []string{"pipeshard shards ls", "PIPESHARD_HOME=~/node2 pipeshard shards ls --json"}},
			{Name: "show", Short: "print a manifest or a shard's header", Usage: "CID", Flags: home, Run: shardsShow,
				Examples: []string{"pipeshard shards show bafk...   # a model: its manifest", "pipeshard shards show bafy...   # a shard: its header"}},
			{
				Name: "verify", Short: "re-hash every block of a model (all its shards) or a shard", Usage: "CID",
				Examples: []string{"pipeshard shards verify bafk...   # the model and every shard", "pipeshard shards verify bafy...   # one shard"},
				Flags:    home, Run: shardsVerify,
			},
			{
				Name: "export", Short: "write a stored file out as a plain file, or a whole model as GGUF",
				Usage:    "[--gguf] [--quant q8] CID FILE",
				Examples: []string{"pipeshard shards export bafy... shard.bin", "pipeshard shards export --gguf --quant q8 bafk... stories15M.q8_0.gguf"},
				Flags: func(fs *flag.FlagSet) {
					home(fs)
					fs.Bool("gguf", false, "CID is a model: write it as a GGUF file llama.cpp can load")
					fs.String("quant", "f32", "with --gguf: the weight type of the layout to export")
				},
				Run: shardsExport,
			},
			{Name: "cid", Short: "print the CID 'ipfs add --cid-version=1 --raw-leaves' would give FILE", Usage: "FILE", Run: shardsCID,
				Examples: []string{"pipeshard shards cid stories15M.bin"}},
		},
	})
}

func openStore(fs *flag.FlagSet) (*shards.Store, error) {
	return shards.Open(flagString(fs, "home"))
}

// printModel prints what a command made: the model CID and its shards.
func printModel(env *Env, fs *flag.FlagSet, m *shards.Manifest, mc cid.Cid, l shards.Layout) error {
	if flagBool(fs, "json") {
		type shard struct {
			CID    string `json:"cid"`
			Layers [2]int `json:"layers"`
			Head   []int  `json:"head,omitempty"`
			Quant  string `json:"quant"`
		}
		out := struct {
			Model   string  `json:"model"`
			ModelID string  `json:"model_id"`
			Name    string  `json:"name"`
			Shards  []shard `json:"shards"`
		}{Model: mc.String(), ModelID: m.ModelID, Name: m.Name}
		for _, s := range l.Shards {
			out.Shards = append(out.Shards, shard{s.CID, s.Layers, s.Head, s.Quant})
		}
		return json.NewEncoder(env.Stdout).Encode(out)
	}
	fmt.Fprintf(env.Stdout, "model %s  %s\n", mc, m.Name)
	for _, s := range l.Shards {
		fmt.Fprintf(env.Stdout, "shard %s  layers %s  %s  %s\n", s.CID, s.Stage(), s.Quant, size(s.Bytes))
	}
	return nil
}

func storeProgress(env *Env) shards.Progress {
	bars := map[string]*progress{}
	return func(what string, done, total int64) {
		p := bars[what]
		if p == nil {
			p = newProgress(env.Stderr, what)
			bars[what] = p
		}
		p.update(done, total)
	}
}

func shardsImport(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return usagef("shards import takes one model path")
	}
	path := fs.Arg(0)
	w, tokPath, err := loadWeights(ctx, env, path, 0, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, ok := models.Known[path]; ok {
		path = filepath.Join(models.Dir(models.Home(), path), path+".bin")
	}
	src := shards.Source{Name: flagString(fs, "name"), Weights: w}
	if src.Name == "" {
		src.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if t := flagString(fs, "tokenizer"); t != "" {
		tokPath = t
	}
	format := sourceFormat(path)
	src.Origin = shards.Artifact{Format: format}
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		fmt.Fprintf(env.Stderr, "hashing %s\n", path)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		c, err := blockstore.CIDContext(ctx, f)
		f.Close()
		if err != nil {
			return err
		}
		src.Origin.CID, src.Origin.Bytes = c.String(), st.Size()
	}
	switch {
	case format == "gguf":
		f, err := gguf.Open(path)
		if err != nil {
			return err
		}
		v, err := gguf.ReadVocab(f)
		f.Close()
		if err == nil {
			if src.Tokenizer, err = shards.VocabArtifact(v); err != nil {
				return err
			}
			src.TokFormat = "gguf"
		}
	case tokPath != "":
		if b, err := os.ReadFile(tokPath); err == nil {
			src.Tokenizer, src.TokFormat = b, "llama2c"
		} else if flagString(fs, "tokenizer") != "" {
			return err
		}
	}
	if src.Tokenizer == nil {
		fmt.Fprintf(env.Stderr, "no tokenizer found for %s: the model will take token ids only\n", path)
	}
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	m, mc, err := s.Import(ctx, src, storeProgress(env))
	if err != nil {
		return err
	}
	return printModel(env, fs, m, mc, m.Layouts[0])
}

// sourceFormat names a model file's format from its first bytes.
func sourceFormat(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return "hf"
	}
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	magic := make([]byte, 4)
	io.ReadFull(f, magic)
	if string(magic) == "GGUF" {
		return "gguf"
	}
	return "llama2c"
}

func shardsSynth(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	q, err := ovrt.ParseDType(flagString(fs, "quant"))
	if err != nil {
		return usagef("%v", err)
	}
	cfg, err := shards.SynthConfig(flagString(fs, "shape"), flagInt(fs, "layers"))
	if err != nil {
		return usagef("%v", err)
	}
	seed := fs.Lookup("seed").Value.(flag.Getter).Get().(uint64)
	fmt.Fprintf(env.Stderr, "generating %s (%d layers, %s, seed %d)\n", flagString(fs, "shape"), cfg.Layers, q, seed)
	w, err := shards.Synth(cfg, q, seed)
	if err != nil {
		return err
	}
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	name := fmt.Sprintf("synth-%s-%dL-%s-seed%d", flagString(fs, "shape"), cfg.Layers, q, seed)
	m, mc, err := s.Import(ctx, shards.Source{Name: name, Weights: w, Origin: shards.Artifact{Format: "synthetic"}}, storeProgress(env))
	if err != nil {
		return err
	}
	return printModel(env, fs, m, mc, m.Layouts[0])
}

func parseCIDArg(fs *flag.FlagSet, what string) (cid.Cid, error) {
	if fs.NArg() < 1 {
		return cid.Undef, usagef("missing %s CID", what)
	}
	c, err := cid.Decode(fs.Arg(0))
	if err != nil {
		return cid.Undef, usagef("%q is not a CID: %v", fs.Arg(0), err)
	}
	return c, nil
}

func shardsSplit(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	mc, err := parseCIDArg(fs, "model")
	if err != nil {
		return err
	}
	q, err := ovrt.ParseDType(flagString(fs, "quant"))
	if err != nil {
		return usagef("%v", err)
	}
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	m, err := s.Manifest(ctx, mc)
	if err != nil {
		return err
	}
	headQ := q
	if q == ovrt.Q4_0 {
		headQ = ovrt.Q8_0
	}
	cs := shards.CostsOf(m.Config, q, headQ)
	var stages []shards.Stage
	split := "balanced"
	switch {
	case flagString(fs, "ranges") != "":
		split = "ranges"
		stages, err = shards.ParseRanges(flagString(fs, "ranges"), m.Config)
	case flagBool(fs, "even"):
		split = "even"
		stages, err = shards.EvenSplit(m.Config.Layers, flagInt(fs, "stages"))
	default:
		stages, err = shards.BalancedSplit(cs, shards.DefaultProfile, flagInt(fs, "stages"))
	}
	if err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(env.Stderr, "%s split into %d stages; the largest costs %.2fx its ideal share\n", split, len(stages), shards.Imbalance(cs, shards.DefaultProfile, stages))
	m, nc, err := s.Split(ctx, mc, stages, q, split, storeProgress(env))
	if err != nil {
		return err
	}
	return printModel(env, fs, m, nc, m.Layouts[len(m.Layouts)-1])
}

func shardsLs(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	type row struct {
		Model   string `json:"model"`
		Name    string `json:"name"`
		Layouts int    `json:"layouts"`
		Shards  int    `json:"shards"`
	}
	var rows []row
	for _, c := range s.Blocks.List() {
		m, err := s.Manifest(ctx, c)
		if err != nil {
			continue // not a manifest
		}
		n := 0
		for _, l := range m.Layouts {
			n += len(l.Shards)
		}
		rows = append(rows, row{c.String(), m.Name, len(m.Layouts), n})
	}
	if flagBool(fs, "json") {
		return json.NewEncoder(env.Stdout).Encode(rows)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tNAME\tLAYOUTS\tSHARDS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", r.Model, r.Name, r.Layouts, r.Shards)
	}
	return tw.Flush()
}

func shardsShow(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	c, err := parseCIDArg(fs, "model or shard")
	if err != nil {
		return err
	}
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	// A shard's header is at its start: read just that, not the tensors.
	r, _, err := s.Blocks.Open(ctx, c)
	if err != nil {
		return err
	}
	head := make([]byte, len(shards.Magic)+4)
	n, _ := io.ReadFull(r, head)
	if n == len(head) && bytes.HasPrefix(head, []byte(shards.Magic)) {
		size := binary.LittleEndian.Uint32(head[len(shards.Magic):])
		if size <= 16<<20 {
			rest := make([]byte, size)
			if _, err := io.ReadFull(r, rest); err == nil {
				head = append(head, rest...)
			}
		}
		r.Close()
		h, err := shards.ParseHeader(head)
		if err != nil {
			return err
		}
		return printJSON(env.Stdout, h)
	}
	r.Close()
	m, err := s.Manifest(ctx, c)
	if err != nil {
		return err
	}
	return printJSON(env.Stdout, m)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func shardsVerify(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	c, err := parseCIDArg(fs, "model or shard")
	if err != nil {
		return err
	}
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	targets := []string{c.String()}
	if m, err := s.Manifest(ctx, c); err == nil {
		if m.Tokenizer.CID != "" {
			targets = append(targets, m.Tokenizer.CID)
		}
		for _, l := range m.Layouts {
			for _, sh := range l.Shards {
				targets = append(targets, sh.CID)
			}
		}
	}
	for _, t := range targets {
		if err := s.Blocks.Verify(ctx, cid.MustParse(t)); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "ok %s\n", t)
	}
	return nil
}

func shardsExport(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	c, err := parseCIDArg(fs, "shard")
	if err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("shards export takes CID FILE")
	}
	s, err := openStore(fs)
	if err != nil {
		return err
	}
	defer s.Close()
	if flagBool(fs, "gguf") {
		return exportGGUF(ctx, s, c, flagString(fs, "quant"), fs.Arg(1))
	}
	f, err := os.Create(fs.Arg(1))
	if err != nil {
		return err
	}
	if err := s.Blocks.Export(ctx, c, f); err != nil {
		f.Close()
		os.Remove(fs.Arg(1))
		return err
	}
	return f.Close()
}

func shardsCID(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return usagef("shards cid takes one file")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := blockstore.CIDContext(ctx, f)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, c)
	return nil
}

// exportGGUF writes model c's whole layout of quant q as a GGUF file.
func exportGGUF(ctx context.Context, s *shards.Store, c cid.Cid, quant, path string) error {
	q, err := ovrt.ParseDType(quant)
	if err != nil {
		return usagef("%v", err)
	}
	m, err := s.Manifest(ctx, c)
	if err != nil {
		return err
	}
	w, err := s.Whole(ctx, m, q)
	if err != nil {
		return err
	}
	if quantName(w) != q.String() {
		if w, err = w.Quantize(q); err != nil {
			return err
		}
	}
	var vocab gguf.Vocab
	if m.Tokenizer.CID != "" {
		tok, err := s.Tokenizer(ctx, m)
		if err != nil {
			return err
		}
		vocab = shards.VocabOf(tok)
	}
	return gguf.WriteLlamaFile(path, m.Name, w, vocab)
}

func quantName(w *ovrt.Weights) string {
	if len(w.Layers) > 0 {
		return w.Layers[0].Wq.DType.String()
	}
	return ""
}
