package spec

import (
	"context"
	"fmt"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// ModelOptions configure a DraftModel.
type ModelOptions struct {
	// Sampling is the target's settings. Drafts are the draft model's
	// argmax under greedy settings, else draws from its distribution
	// filtered the same way (temperature, top-k, top-p).
	Sampling sample.Params
	// PointMass proposes the draft model's argmax even when sampling, with
	// no distribution: verification then needs only the target's sampled
	// ids, not its logits, at the price of a lower acceptance rate.
	PointMass bool
	// Uniform supplies the random numbers of sampled drafts, in [0, 1).
	// Required when sampling without PointMass.
	Uniform func() float64
}

// DraftModel is a Drafter running a small model in this process: any
// model whose vocabulary is the target's. It keeps its own KV cache and,
// on each call, rewinds to the longest common prefix of the tokens it
// holds and the sequence it is given (a forward at that position drops
// the rest), so it needs no accept hook. Not safe for concurrent use.
type DraftModel struct {
	m       *ovrt.Model
	req     *ovrt.Request
	smp     *sample.Sampler
	point   bool
	uniform func() float64
	held    []int // the tokens whose keys and values req holds, by position
	ctxLen  int
}

// NewDraftModel wraps m, which must be a whole model (embedding, every
// layer, the whole head).
func NewDraftModel(m *ovrt.Model, o ModelOptions) (*DraftModel, error) {
	w := m.Weights()
	if !w.HasEmbed() || !w.IsLast() || w.HeadLo != 0 {
		return nil, fmt.Errorf("%w: layers [%d, %d) of %d: a draft model runs whole", ErrDraftModel, w.Start, w.End, w.Config.Layers)
	}
	smp, err := sample.New(o.Sampling)
	if err != nil {
		return nil, err
	}
	point := o.PointMass || o.Sampling.Greedy()
	if !point && o.Uniform == nil {
		return nil, fmt.Errorf("%w: sampled drafts need a source of random numbers", ErrDraftModel)
	}
	return &DraftModel{m: m, req: m.NewRequest(), smp: smp, point: point, uniform: o.Uniform, ctxLen: m.Config().Context}, nil
}

// Vocab returns the draft model's vocabulary size.
func (d *DraftModel) Vocab() int { return d.m.Config().Vocab }

// Draft implements Drafter.
func (d *DraftModel) Draft(ctx context.Context, seq []int, k int) ([]int, [][]float64, error) {
	L := len(seq)
	// seq fills positions 0..L-1 and drafts 1..k-1 go at L..L+k-2.
	k = min(k, d.ctxLen-L+1)
	if k <= 0 || L == 0 {
		return nil, nil, nil
	}
	common := 0
	for common < len(d.held) && common < L && d.held[common] == seq[common] {
		common++
	}
	if common == L {
		common = L - 1 // the last token's logits are not kept: run it again
	}
	ids := make([]int32, L-common)
	for i, t := range seq[common:] {
		ids[i] = int32(t)
	}
	d.held = append(d.held[:common], seq[common:]...)
	res, err := d.req.Infer(ovrt.Step{Pos: common, Tokens: ids, Want: ovrt.WantLast})
	if err != nil {
		d.held = d.held[:min(common, d.req.Len())]
		return nil, nil, fmt.Errorf("%w: %w", ErrDraftModel, err)
	}
	tokens := make([]int, 0, k)
	var q [][]float64
	if !d.point {
		q = make([][]float64, 0, k)
	}
	for i := range k {
		var x int
		if d.point {
			x = sample.Argmax(res.Logits)
		} else {
			dist := append([]float64(nil), d.smp.Dist(res.Logits)...)
			x = sample.DrawWith(dist, d.uniform())
			q = append(q, dist)
		}
		tokens = append(tokens, x)
		if i == k-1 {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		res, err = d.req.Infer(ovrt.Step{Pos: len(d.held), Tokens: []int32{int32(x)}, Want: ovrt.WantLast})
		if err != nil {
			d.held = d.held[:min(len(d.held), d.req.Len())]
			return nil, nil, fmt.Errorf("%w: %w", ErrDraftModel, err)
		}
		d.held = append(d.held, x)
	}
	return tokens, q, nil
}

// EarlyExit returns a view of w's first layers with w's final norm and
// output head: a draft model made of the target itself (self-speculation
// by early exit), sharing its memory. It needs no second model but,
// untrained for it, agrees with the target less often than a real small
// model would; the tests use it as a draft with a different distribution.
func EarlyExit(w *ovrt.Weights, layers int) (*ovrt.Weights, error) {
	if !w.HasEmbed() || !w.IsLast() || w.HeadLo != 0 {
		return nil, fmt.Errorf("%w: early exit needs a whole model", ErrDraftModel)
	}
	if layers < 1 || layers > len(w.Layers) {
		return nil, fmt.Errorf("%w: early exit after %d of %d layers", ErrDraftModel, layers, len(w.Layers))
	}
	c := w.Config
	c.Layers = layers
	v := &ovrt.Weights{Config: c, Start: 0, End: layers, Embed: w.Embed, Layers: w.Layers[:layers], FinalNorm: w.FinalNorm, Head: w.Head}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}
