package generate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// ErrPromptTooLong is returned when the prompt does not fit the context.
var ErrPromptTooLong = errors.New("generate: prompt exceeds the context length")

// ErrNoRow is returned when a backend leaves out a row that a step's
// walk reads.
var ErrNoRow = errors.New("generate: the backend left out a row the walk reads")

// Step asks a backend to run IDs at positions Pos, Pos+1, ... of one
// sequence (dropping whatever it held at positions >= Pos) and to choose
// the next token after each output row: after the last position, or after
// every position when All is set. Uniform holds one random number in
// [0, 1) per row for sampling; greedy settings ignore it.
//
// With Tree set, IDs are a tree of drafts rather than a sequence (see
// ovrt.Step.Tree): ID i follows ID Tree[i], or position Pos-1 when
// Tree[i] is -1, and sits at position Pos+depth(i). Afterwards the
// backend holds a sequence only up to the first slot the caller's next
// step does not keep, and that step starts there.
type Step struct {
	Pos     int
	IDs     []int32
	All     bool
	Uniform []float64
	Logits  bool    // also return the rows' logits, if the backend can
	Tree    []int32 // parents of IDs within the step (nil: a sequence)
	// Walk says that only the rows a speculative decoder reads are
	// wanted: from row From down the drafts the outputs accept
	// (ovrt.Walk). A backend may answer -1 for the other rows, and so
	// compute the head for a path instead of for every draft.
	Walk bool
	From int
}

// StepResult is a backend's answer: the chosen id per row, and the rows'
// logits when asked for and available.
type StepResult struct {
	Next   []int
	Logits []float32
	// Compute is the time the backend's hops computed the step, summed
	// over hops, when they report it (0: unknown).
	Compute time.Duration
}

// Backend runs the whole model for one sequence: a local model (Local) or
// a route of remote stages (the swarm client). The same sampling settings
// apply to every step of a sequence; the backend is told them at creation.
type Backend interface {
	Step(ctx context.Context, s Step) (StepResult, error)
}

// TreeBackend is a Backend that says whether it runs steps with a Tree.
// RunSpeculative drafts trees only for backends that say so; others get
// chains of drafts.
type TreeBackend interface {
	Backend
	Trees() bool
}

func canTree(b Backend) bool {
	t, ok := b.(TreeBackend)
	return ok && t.Trees()
}

// Options control one generation.
type Options struct {
	MaxTokens int // tokens to generate
	Seed      uint64
	EOS       int  // stop after this id unless IgnoreEOS; -1 for none
	IgnoreEOS bool // keep going past EOS
	Context   int  // the model's context length

	// OnPromptLogits, if set, receives the logits of every prompt position.
	OnPromptLogits func(logits []float32)
	// OnToken, if set, receives each generated id as it is chosen.
	OnToken func(id int)
	Now     func() time.Time // clock; time.Now when nil
}

// Result is what a generation produced and how fast.
type Result struct {
	IDs     []int         // generated ids, including a final EOS
	Prefill time.Duration // prompt forward, up to the first token
	Decode  time.Duration // the rest
	Stopped string        // "eos", "length" or "context"

	// Traversals counts the backend's steps, the prompt's included: with
	// speculative decoding, fewer than the tokens generated.
	Traversals int
	// Speculative decoding's counts (RunSpeculative): drafts verified,
	// and how many of them the target accepted; and the time spent
	// drafting (part of Decode).
	Drafted   int
	Accepted  int
	DraftTime time.Duration
	// Refed counts accepted tree nodes that were off their tree's leading
	// chain, so not in the caches as a sequence: the next traversal runs
	// them again (see RunSpeculative's trees).
	Refed int
}

// AcceptanceRate returns the fraction of drafts the target accepted.
func (r Result) AcceptanceRate() float64 {
	if r.Drafted == 0 {
		return 0
	}
	return float64(r.Accepted) / float64(r.Drafted)
}

// TokensPerTraversal returns generated tokens per backend step after the
// prompt's (1 without speculation).
func (r Result) TokensPerTraversal() float64 {
	if r.Traversals <= 1 || len(r.IDs) <= 1 {
		return 0
	}
	return float64(len(r.IDs)-1) / float64(r.Traversals-1)
}

// PrefillRate returns prompt tokens per second.
func (r Result) PrefillRate(promptLen int) float64 { return rate(promptLen, r.Prefill) }

// DecodeRate returns generated tokens per second after the first.
func (r Result) DecodeRate() float64 { return rate(len(r.IDs)-1, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Uniforms returns the random numbers a generation with seed draws for
// sampling, one per step, in order: local and remote backends sample with
// the same numbers, so a seed gives the same text everywhere.
func Uniforms(seed uint64) func() float64 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return r.Float64
}

// Run generates from prompt.
func Run(ctx context.Context, b Backend, prompt []int, o Options) (Result, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	var res Result
	if len(prompt) == 0 {
		return res, fmt.Errorf("generate: empty prompt")
	}
	if o.Context > 0 && len(prompt) > o.Context {
		return res, fmt.Errorf("%w: %d prompt tokens, context %d", ErrPromptTooLong, len(prompt), o.Context)
	}
	uniform := Uniforms(o.Seed)
	ids := make([]int32, len(prompt))
	for i, id := range prompt {
		ids[i] = int32(id)
	}
	if o.MaxTokens == 0 && o.OnPromptLogits == nil {
		return res, nil
	}
	t0 := now()
	step := promptStep(ids, uniform(), o.OnPromptLogits != nil)
	out, err := b.Step(ctx, step)
	if err != nil {
		return res, err
	}
	res.Traversals++
	if o.OnPromptLogits != nil {
		o.OnPromptLogits(out.Logits)
	}
	next := out.Next[len(out.Next)-1]
	pos := len(prompt)
	res.Stopped = "length"
	for len(res.IDs) < o.MaxTokens {
		res.IDs = append(res.IDs, next)
		if len(res.IDs) == 1 {
			res.Prefill = now().Sub(t0)
			t0 = now()
		}
		if o.OnToken != nil {
			o.OnToken(next)
		}
		if next == o.EOS && !o.IgnoreEOS {
			res.Stopped = "eos"
			break
		}
		if len(res.IDs) == o.MaxTokens {
			break
		}
		if o.Context > 0 && pos >= o.Context {
			res.Stopped = "context"
			break
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		out, err := b.Step(ctx, Step{Pos: pos, IDs: []int32{int32(next)}, Uniform: []float64{uniform()}})
		if err != nil {
			return res, err
		}
		res.Traversals++
		next = out.Next[0]
		pos++
	}
	if len(res.IDs) > 0 {
		res.Decode = now().Sub(t0)
	}
	return res, nil
}

// promptStep is the first step of a generation: the prompt, whose last
// row draws the first token with u. With logits, every prompt position
// gets a row; only the last one's id is used, and it draws with the same
// number as without logits.
func promptStep(ids []int32, u float64, logits bool) Step {
	step := Step{Pos: 0, IDs: ids, Uniform: []float64{u}}
	if logits {
		step.All, step.Logits = true, true
		step.Uniform = make([]float64, len(ids))
		step.Uniform[len(ids)-1] = u
	}
	return step
}

// Local runs a whole model, or a chain of shards, in this process.
type Local struct {
	vocab int
	smp   *sample.Sampler
	reqs  []*ovrt.Request // one per model, in layer order
	heads [][2]int        // each model's rows of the output head
	buf   []float32
}

// NewLocal chains models that together cover all layers and all rows of
// the output head, in order, sampling with p.
func NewLocal(p sample.Params, models ...*ovrt.Model) (*Local, error) {
	if len(models) == 0 {
		return nil, fmt.Errorf("generate: no models")
	}
	smp, err := sample.New(p)
	if err != nil {
		return nil, err
	}
	c := models[0].Config()
	l := &Local{vocab: c.Vocab, smp: smp}
	layer, row := 0, 0
	for _, m := range models {
		s, e := m.Range()
		lo, hi := m.Weights().HeadRange()
		if s != layer || (hi > lo && lo != row) {
			return nil, fmt.Errorf("generate: shard [%d, %d) head rows [%d, %d) does not follow layer %d, row %d", s, e, lo, hi, layer, row)
		}
		layer = e
		if hi > lo {
			row = hi
		}
		l.reqs = append(l.reqs, m.NewRequest())
		l.heads = append(l.heads, [2]int{lo, hi})
	}
	if layer != c.Layers || row != c.Vocab {
		return nil, fmt.Errorf("generate: shards end at layer %d of %d, head row %d of %d", layer, c.Layers, row, c.Vocab)
	}
	return l, nil
}

// Logits runs ids at pos and returns the logits of the last position, or
// of every position when all is set, as rows of vocab floats.
func (l *Local) Logits(ctx context.Context, pos int, ids []int32, all bool) ([]float32, error) {
	return l.logits(ctx, pos, ids, all, nil)
}

func (l *Local) logits(ctx context.Context, pos int, ids []int32, all bool, tree []int32) ([]float32, error) {
	want := ovrt.WantLast
	if all {
		want = ovrt.WantAll
	}
	return l.forward(ctx, pos, ids, want, tree)
}

// forward runs ids at pos through every model and returns the logits
// the last position or all positions ask for (nil with WantDeferred).
func (l *Local) forward(ctx context.Context, pos int, ids []int32, want ovrt.Want, tree []int32) ([]float32, error) {
	rows := 1
	if want == ovrt.WantAll {
		rows = len(ids)
	}
	step := ovrt.Step{Pos: pos, Tokens: ids, Want: want, Tree: tree}
	var logits []float32
	for i, r := range l.reqs {
		res, err := r.Infer(step)
		if err != nil {
			return nil, err
		}
		if h := l.heads[i]; h[1] > h[0] {
			if h[0] == 0 && h[1] == l.vocab {
				logits = res.Logits
			} else {
				if cap(l.buf) < rows*l.vocab {
					l.buf = make([]float32, rows*l.vocab)
				}
				logits = l.buf[:rows*l.vocab]
				w := h[1] - h[0]
				for t := 0; t < rows; t++ {
					copy(logits[t*l.vocab+h[0]:t*l.vocab+h[1]], res.Logits[t*w:(t+1)*w])
				}
			}
		}
		step = ovrt.Step{Pos: pos, Hidden: res.Hidden, Want: want, Tree: tree}
	}
	return logits, nil
}

// Trees implements TreeBackend: a local model runs tree steps.
func (l *Local) Trees() bool { return true }

// walker returns the request that holds the whole head, if one does and
// the others hold none of it: then a walk's rows can be computed alone.
func (l *Local) walker() *ovrt.Request {
	last := len(l.reqs) - 1
	if h := l.heads[last]; h[0] != 0 || h[1] != l.vocab {
		return nil
	}
	for _, h := range l.heads[:last] {
		if h[1] > h[0] {
			return nil
		}
	}
	return l.reqs[last]
}

// Step implements Backend. A step with Walk computes the head for the
// walk's rows only, when one model holds the whole head.
func (l *Local) Step(ctx context.Context, s Step) (StepResult, error) {
	if head := l.walker(); s.Walk && s.All && !s.Logits && head != nil {
		if _, err := l.forward(ctx, s.Pos, s.IDs, ovrt.WantDeferred, s.Tree); err != nil {
			return StepResult{}, err
		}
		next, err := head.WalkHead(s.IDs, s.Tree, s.From, func(row int, logits []float32) (int, error) {
			u := 0.0
			if row < len(s.Uniform) {
				u = s.Uniform[row]
			}
			return Choose(l.smp, logits, u), nil
		})
		return StepResult{Next: next}, err
	}
	logits, err := l.logits(ctx, s.Pos, s.IDs, s.All, s.Tree)
	if err != nil {
		return StepResult{}, err
	}
	rows := len(logits) / l.vocab
	out := StepResult{Next: make([]int, rows)}
	for r := range rows {
		u := 0.0
		if r < len(s.Uniform) {
			u = s.Uniform[r]
		}
		out.Next[r] = Choose(l.smp, logits[r*l.vocab:(r+1)*l.vocab], u)
	}
	if s.Logits {
		out.Logits = logits
	}
	return out, nil
}

// Choose picks the next id from one row of logits: argmax for greedy
// settings, else a draw with u from the filtered distribution.
func Choose(smp *sample.Sampler, logits []float32, u float64) int {
	if smp.Params().Greedy() {
		return sample.Argmax(logits)
	}
	return sample.DrawWith(smp.Dist(logits), u)
}
