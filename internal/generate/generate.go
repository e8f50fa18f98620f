package generate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// ErrPromptTooLong is returned when the prompt does not fit the context.
var ErrPromptTooLong = errors.New("generate: prompt exceeds the context length")

// Forwarder runs the whole model over tokens at positions pos, pos+1, ...
// of one sequence and returns logits: of every position when all is set,
// else of the last one, as rows of vocab floats. A forward at pos drops
// whatever the sequence held at positions >= pos.
type Forwarder interface {
	Forward(ctx context.Context, pos int, ids []int32, all bool) ([]float32, error)
}

// Options control one generation.
type Options struct {
	MaxTokens int // tokens to generate
	Sampling  sample.Params
	EOS       int  // stop after this id unless IgnoreEOS; -1 for none
	IgnoreEOS bool // keep going past EOS
	Context   int  // the model's context length

	// OnPromptLogits, if set, receives the logits of every prompt position.
	OnPromptLogits func(logits []float32)
	// OnToken, if set, receives each generated id as it is sampled.
	OnToken func(id int)
	Now     func() time.Time // clock; time.Now when nil
}

// Result is what a generation produced and how fast.
type Result struct {
	IDs     []int         // generated ids, including a final EOS
	Prefill time.Duration // prompt forward, up to the first token
	Decode  time.Duration // the rest
	Stopped string        // "eos", "length" or "context"
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

// Run generates from prompt.
func Run(ctx context.Context, f Forwarder, prompt []int, o Options) (Result, error) {
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
	smp, err := sample.New(o.Sampling)
	if err != nil {
		return res, err
	}
	ids := make([]int32, len(prompt))
	for i, id := range prompt {
		ids[i] = int32(id)
	}
	t0 := now()
	all := o.OnPromptLogits != nil
	logits, err := f.Forward(ctx, 0, ids, all)
	if err != nil {
		return res, err
	}
	if all {
		o.OnPromptLogits(logits)
	}
	vocab := len(logits)
	if all {
		vocab /= len(ids)
	}
	last := logits[len(logits)-vocab:]
	pos := len(prompt)
	res.Stopped = "length"
	for len(res.IDs) < o.MaxTokens {
		next := smp.Sample(last)
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
		last, err = f.Forward(ctx, pos, []int32{int32(next)}, false)
		if err != nil {
			return res, err
		}
		pos++
	}
	if len(res.IDs) > 0 {
		res.Decode = now().Sub(t0)
	}
	return res, nil
}

// Local runs a whole model, or a chain of shards, in this process.
type Local struct {
	vocab int
	reqs  []*ovrt.Request // one per model, in layer order
	heads [][2]int        // each model's rows of the output head
	buf   []float32
}

// NewLocal chains models that together cover all layers and all rows of
// the output head, in order.
func NewLocal(models ...*ovrt.Model) (*Local, error) {
	if len(models) == 0 {
		return nil, fmt.Errorf("generate: no models")
	}
	c := models[0].Config()
	l := &Local{vocab: c.Vocab}
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

// Forward implements Forwarder.
func (l *Local) Forward(ctx context.Context, pos int, ids []int32, all bool) ([]float32, error) {
	want := ovrt.WantLast
	rows := 1
	if all {
		want = ovrt.WantAll
		rows = len(ids)
	}
	step := ovrt.Step{Pos: pos, Tokens: ids, Want: want}
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
		step = ovrt.Step{Pos: pos, Hidden: res.Hidden, Want: want}
	}
	return logits, nil
}
