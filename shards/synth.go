package shards

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/pipeshard/pipeshard/ovrt"
)

// synthShapes are real models' layer shapes, for synthetic models whose
// compute and memory traffic are real even though their text is not.
var synthShapes = map[string]ovrt.Config{
	"tiny":      {Dim: 64, HiddenDim: 160, Layers: 4, Heads: 4, KVHeads: 2, Vocab: 512, Context: 256, NormEps: 1e-5, RopeTheta: 10000},
	"stories":   {Dim: 288, HiddenDim: 768, Layers: 6, Heads: 6, KVHeads: 6, Vocab: 32000, Context: 256, NormEps: 1e-5, RopeTheta: 10000, TiedHead: true},
	"llama2-7b": {Dim: 4096, HiddenDim: 11008, Layers: 32, Heads: 32, KVHeads: 32, Vocab: 32000, Context: 4096, NormEps: 1e-5, RopeTheta: 10000},
	"llama3-1b": {Dim: 2048, HiddenDim: 8192, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, Vocab: 128256, Context: 8192, NormEps: 1e-5, RopeTheta: 500000, TiedHead: true,
		RopeScaling: &ovrt.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
	"llama3-8b": {Dim: 4096, HiddenDim: 14336, Layers: 32, Heads: 32, KVHeads: 8, Vocab: 128256, Context: 8192, NormEps: 1e-5, RopeTheta: 500000,
		RopeScaling: &ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
	"llama3-70b": {Dim: 8192, HiddenDim: 28672, Layers: 80, Heads: 64, KVHeads: 8, Vocab: 128256, Context: 8192, NormEps: 1e-5, RopeTheta: 500000,
		RopeScaling: &ovrt.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
}

// SynthShapes lists the shapes Synth knows.
func SynthShapes() []string {
	var s []string
	for k := range synthShapes {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// SynthConfig returns the configuration of shape with layers blocks
// (0: the real model's count).
func SynthConfig(shape string, layers int) (ovrt.Config, error) {
	c, ok := synthShapes[shape]
	if !ok {
		return c, fmt.Errorf("shards: unknown shape %q (known: %v)", shape, SynthShapes())
	}
	if layers < 0 {
		return c, fmt.Errorf("shards: %d layers", layers)
	}
	if layers > 0 {
		c.Layers = layers
	}
	if c.RopeScaling != nil {
		s := *c.RopeScaling
		c.RopeScaling = &s
	}
	c.BOS, c.EOS = 1, 2
	return c, c.Validate()
}

// Synth makes a deterministic random model: the same config, type and
// seed give the same bytes on every machine. Matrices are generated a row
// at a time and stored directly as q (q4 keeps the embedding and head at
// q8, as Quantize does), so an 8B q4 model never exists in float32.
// Weights are uniform with the standard deviation of a 1/sqrt(fan-in)
// initialisation, and norms are one, so activations stay in range over
// many layers.
func Synth(c ovrt.Config, q ovrt.DType, seed uint64) (*ovrt.Weights, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	outer := q
	if q == ovrt.Q4_0 {
		outer = ovrt.Q8_0
	}
	w := &ovrt.Weights{Config: c, Start: 0, End: c.Layers}
	n := uint64(0)
	mat := func(rows, cols int, d ovrt.DType) ovrt.Matrix {
		n++
		rng := rand.New(rand.NewPCG(seed, n))
		scale := float32(math.Sqrt(3 / float64(cols)))
		f := ovrt.Matrix{DType: ovrt.F32, Rows: 1, Cols: cols, F32: make([]float32, cols)}
		out := ovrt.Matrix{DType: d, Rows: rows, Cols: cols}
		rb := d.RowBytes(cols)
		if d == ovrt.F32 {
			out.F32 = make([]float32, rows*cols)
		} else {
			out.Q = make([]byte, rows*rb)
		}
		for r := 0; r < rows; r++ {
			for i := range f.F32 {
				f.F32[i] = (2*rng.Float32() - 1) * scale
			}
			if d == ovrt.F32 {
				copy(out.F32[r*cols:], f.F32)
				continue
			}
			qr, err := f.Convert(d)
			if err != nil {
				panic(err) // shapes were validated
			}
			copy(out.Q[r*rb:], qr.Q)
		}
		return out
	}
	ones := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	w.Embed = mat(c.Vocab, c.Dim, outer)
	for range c.Layers {
		w.Layers = append(w.Layers, ovrt.Layer{
			AttnNorm: ones(c.Dim), FFNNorm: ones(c.Dim),
			Wq: mat(c.QDim(), c.Dim, q), Wk: mat(c.KVDim(), c.Dim, q), Wv: mat(c.KVDim(), c.Dim, q), Wo: mat(c.Dim, c.QDim(), q),
			W1: mat(c.HiddenDim, c.Dim, q), W2: mat(c.Dim, c.HiddenDim, q), W3: mat(c.HiddenDim, c.Dim, q),
		})
	}
	w.FinalNorm = ones(c.Dim)
	if c.TiedHead {
		w.Head = w.Embed
	} else {
		w.Head = mat(c.Vocab, c.Dim, outer)
	}
	return w, w.Validate()
}
