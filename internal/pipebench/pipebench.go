package pipebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"

	"github.com/pipeshard/pipeshard/sim/scenario"
)

// Config is one `pipeshard bench pipeline` run.
type Config struct {
	Tables  []string // "a", "b", "c", "d", "e"
	Repeats int      // per contender; figures are medians over them

	// ModelPath is stories15M's llama2.c checkpoint; its tokenizer is
	// beside it. DraftModel is the draft model the client runs for
	// --speculate draft (a file), DraftQuant its weight type.
	ModelPath  string
	DraftModel string
	DraftQuant string

	// Model, if set, is what tables a and b measure instead of
	// stories15M f32: "synth:SHAPE", a synthetic model with a real
	// model's shapes (shards synth --seed 1), in weight type Quant
	// (default q4). Tables c and d measure drafting on text: stories15M
	// only.
	Model string
	Quant string

	Threads int             // table a: threads of every contender
	Tokens  int             // tokens generated per sequence
	Prompt  string          // the prompt of every request
	Delays  []time.Duration // table c: one-way delay per link
	KDelays []time.Duration // table d
	Ks      []int           // table d: fixed K rows (auto is always added)
	Streams int             // table c: streams of the full stack
	Batch   []int           // table b: streams
	// HistoryStories is how many earlier answers (to other prompts) the
	// n-gram drafter's history holds in table c's "n-gram + history"
	// contender (default 400; negative: no such contender).
	HistoryStories int

	// Table e: a synthetic model of shape BigShape in q4, cut into
	// BigNodes stages served by as many node processes, each with
	// --max-memory BigMemory; BigTokens per stream, with BigStreams
	// streams in flight (defaults: llama3-8b, 4, 2 GiB, 16, [1 4]).
	BigShape   string
	BigNodes   int
	BigMemory  int64
	BigTokens  int
	BigStreams []int

	// Binary is the pipeshard executable the nodes and clients run.
	Binary string
	// StartNetwork starts the emulated network (sim/netem); required for
	// tables b, c and d.
	StartNetwork func(ctx context.Context, s scenario.NetSpec) (scenario.Network, error)
	// WorkDir keeps the scenario runs' logs (default: temporary).
	WorkDir string
	Log     *slog.Logger // progress
	Now     func() time.Time
}

func (c *Config) defaults() error {
	if c.Repeats < 1 {
		return fmt.Errorf("%w: repeats %d", ErrConfig, c.Repeats)
	}
	if c.Threads < 1 {
		c.Threads = 1
	}
	if c.Tokens < 2 {
		return fmt.Errorf("%w: tokens %d: want at least 2", ErrConfig, c.Tokens)
	}
	if c.Prompt == "" {
		c.Prompt = "Once upon a time, there was a little girl named Lily. Lily loved to play in the park with her dog Max. One day, Lily and Max went to the park"
	}
	if c.Streams < 1 {
		c.Streams = 16
	}
	if c.HistoryStories == 0 {
		c.HistoryStories = 400
	}
	if c.BigShape == "" {
		c.BigShape = "llama3-8b"
	}
	if c.BigNodes < 1 {
		c.BigNodes = 4
	}
	if c.BigMemory <= 0 {
		c.BigMemory = 2 << 30
	}
	if c.BigTokens < 2 {
		c.BigTokens = 16
	}
	if len(c.BigStreams) == 0 {
		c.BigStreams = []int{1, 4}
	}
	if len(c.Batch) == 0 {
		c.Batch = []int{1, 2, 4, 8}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.DraftQuant == "" {
		c.DraftQuant = "q4"
	}
	if c.Model != "" {
		shape, ok := strings.CutPrefix(c.Model, scenario.SynthPrefix)
		if !ok {
			return fmt.Errorf("%w: model %q: want synth:SHAPE", ErrConfig, c.Model)
		}
		if _, err := shards.SynthConfig(shape, 0); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if c.Quant == "" {
			c.Quant = "q4"
		}
		if _, err := ovrt.ParseDType(c.Quant); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		for _, t := range c.Tables {
			if t == "c" || t == "d" {
				return fmt.Errorf("%w: table %s measures drafting on text: stories15M only, not %s", ErrConfig, t, c.Model)
			}
		}
	}
	return nil
}

// Run measures the configured tables, in order, and returns them; a
// table that failed is returned as an error alongside the others.
func Run(ctx context.Context, c Config) ([]*Table, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	var out []*Table
	for _, id := range c.Tables {
		var t *Table
		var err error
		start := c.Now()
		c.Log.Info("table", "id", id)
		switch id {
		case "a":
			t, err = parity(ctx, c)
		case "b":
			t, err = microBatch(ctx, c)
		case "c":
			t, err = wanTable(ctx, c)
		case "d":
			t, err = kSweep(ctx, c)
		case "e":
			t, err = bigModel(ctx, c)
		default:
			err = fmt.Errorf("%w: table %s is not implemented", ErrConfig, id)
		}
		if err != nil {
			return out, fmt.Errorf("table %s: %w", id, err)
		}
		t.Notes = append(t.Notes, fmt.Sprintf("(measured in %v)", c.Now().Sub(start).Round(time.Second)))
		out = append(out, t)
	}
	return out, nil
}

// WriteMarkdown writes the tables under one heading.
func WriteMarkdown(w io.Writer, tables []*Table, svg map[string]string) {
	for _, t := range tables {
		t.Markdown(w, svg[t.ID])
	}
}

// synth returns the shape and weight type of a synthetic Model, ok false
// for stories15M.
func (c Config) synth() (cfg ovrt.Config, q ovrt.DType, ok bool) {
	shape, ok := strings.CutPrefix(c.Model, scenario.SynthPrefix)
	if !ok {
		return cfg, q, false
	}
	cfg, _ = shards.SynthConfig(shape, 0)
	q, _ = ovrt.ParseDType(c.Quant)
	return cfg, q, true
}

// tableID is table id's name in the output: "a", or "a-llama3-1b-q4"
// for a synthetic model.
func (c Config) tableID(id string) string {
	if _, q, ok := c.synth(); ok {
		return fmt.Sprintf("%s-%s-%s", id, strings.TrimPrefix(c.Model, scenario.SynthPrefix), q)
	}
	return id
}

// modelName names the model tables a and b measure.
func (c Config) modelName() string {
	if _, q, ok := c.synth(); ok {
		return fmt.Sprintf("synthetic %s %s", strings.TrimPrefix(c.Model, scenario.SynthPrefix), q)
	}
	return "stories15M f32"
}
