package ovrt

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the runtime returns wraps one of these, so
// callers (and the stage protocol, which maps them to wire codes) can test
// with errors.Is.
var (
	ErrBadConfig   = errors.New("ovrt: invalid model configuration")
	ErrBadWeights  = errors.New("ovrt: weights do not match the configuration")
	ErrContextFull = errors.New("ovrt: position past the context length")
	ErrPosition    = errors.New("ovrt: forward position leaves a gap in the cache")
	ErrBadInput    = errors.New("ovrt: malformed forward input")
	ErrTokenRange  = errors.New("ovrt: token id outside the vocabulary")
	ErrWrongModel  = errors.New("ovrt: request belongs to another model")
	ErrUnsupported = errors.New("ovrt: unsupported")
)

// RopeScaling describes a RoPE frequency rescaling. Only Llama 3's
// ("llama3") scheme is supported; a nil *RopeScaling means plain RoPE.
type RopeScaling struct {
	Type            string  `json:"type"` // "llama3"
	Factor          float64 `json:"factor"`
	LowFreqFactor   float64 `json:"low_freq_factor"`
	HighFreqFactor  float64 `json:"high_freq_factor"`
	OriginalContext int     `json:"original_context"`
}

// Config holds a Llama-family decoder's hyperparameters. It describes the
// whole model; a shard runs a layer range of it (see Weights).
type Config struct {
	Dim       int `json:"dim"`        // hidden size
	HiddenDim int `json:"hidden_dim"` // FFN inner size
	Layers    int `json:"layers"`     // number of transformer blocks
	Heads     int `json:"heads"`      // query heads
	KVHeads   int `json:"kv_heads"`   // key/value heads (GQA when < Heads)
	HeadDim   int `json:"head_dim"`   // per-head size; Dim/Heads when zero
	Vocab     int `json:"vocab"`
	Context   int `json:"context"` // maximum positions

	NormEps     float64      `json:"norm_eps"`
	RopeTheta   float64      `json:"rope_theta"`
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
	TiedHead    bool         `json:"tied_head"` // output head shares the embedding

	BOS int `json:"bos"`
	EOS int `json:"eos"`
}

// HeadSize returns the per-head dimension.
func (c Config) HeadSize() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.Heads == 0 {
		return 0
	}
	return c.Dim / c.Heads
}

// KVDim is the width of one position's keys (or values) in one layer.
func (c Config) KVDim() int { return c.KVHeads * c.HeadSize() }

// QDim is the width of the concatenated query heads.
func (c Config) QDim() int { return c.Heads * c.HeadSize() }

// Validate reports whether c describes a model the runtime can run.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...)
	}
	const maxDim = 1 << 20
	switch {
	case c.Dim <= 0 || c.Dim > maxDim:
		return bad("dim %d", c.Dim)
	case c.HiddenDim <= 0 || c.HiddenDim > maxDim:
		return bad("hidden_dim %d", c.HiddenDim)
	case c.Layers <= 0 || c.Layers > 4096:
		return bad("layers %d", c.Layers)
	case c.Heads <= 0 || c.Heads > c.Dim:
		return bad("heads %d", c.Heads)
	case c.KVHeads <= 0 || c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return bad("kv_heads %d with %d heads", c.KVHeads, c.Heads)
	case c.HeadDim < 0 || c.HeadSize() <= 0 || c.HeadSize()%2 != 0:
		return bad("head_dim %d", c.HeadSize())
	case c.HeadDim == 0 && c.Dim%c.Heads != 0:
		return bad("dim %d not divisible by %d heads", c.Dim, c.Heads)
	case c.Vocab <= 0 || c.Vocab > 1<<24:
		return bad("vocab %d", c.Vocab)
	case c.Context <= 0 || c.Context > 1<<22:
		return bad("context %d", c.Context)
	case !(c.NormEps > 0 && c.NormEps < 1):
		return bad("norm_eps %g", c.NormEps)
	case !(c.RopeTheta > 0):
		return bad("rope_theta %g", c.RopeTheta)
	}
	if s := c.RopeScaling; s != nil {
		if s.Type != "llama3" {
			return fmt.Errorf("%w: rope scaling %q", ErrUnsupported, s.Type)
		}
		if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalContext <= 0 {
			return bad("llama3 rope scaling %+v", *s)
		}
	}
	return nil
}
