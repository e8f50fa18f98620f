package ovrt

import (
	"fmt"
	"io"
)

// DType is the storage type of a weight matrix, as the kernels read it.
type DType uint8

const (
	F32  DType = iota // little-endian float32, row-major
	Q8_0              // GGUF Q8_0 blocks: f16 scale + 32 int8 (34 bytes per 32 weights)
	Q4_0              // GGUF Q4_0 blocks: f16 scale + 16 bytes of nibbles (18 bytes per 32 weights)
)

// BlockSize is the number of weights per quantization block.
const BlockSize = 32

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case Q8_0:
		return "q8_0"
	case Q4_0:
		return "q4_0"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts the names String returns, plus the CLI's short
// forms "q8" and "q4".
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "F32", "fp32":
		return F32, nil
	case "q8", "q8_0", "Q8_0":
		return Q8_0, nil
	case "q4", "q4_0", "Q4_0":
		return Q4_0, nil
	}
	return 0, fmt.Errorf("%w: quantization %q (want f32, q8 or q4)", ErrUnsupported, s)
}

// RowBytes is the number of bytes one row of cols weights occupies.
func (d DType) RowBytes(cols int) int {
	switch d {
	case F32:
		return 4 * cols
	case Q8_0:
		return cols / BlockSize * 34
	case Q4_0:
		return cols / BlockSize * 18
	}
	return 0
}

// Matrix is a weight matrix of shape [Rows, Cols] (out, in), row-major.
// Exactly one of F32 and Q is set, according to DType.
type Matrix struct {
	DType DType
	Rows  int
	Cols  int
	F32   []float32 // DType == F32: Rows*Cols values
	Q     []byte    // quantized: Rows*DType.RowBytes(Cols) bytes
}

// Bytes returns the storage size of m.
func (m *Matrix) Bytes() int64 { return int64(m.Rows) * int64(m.DType.RowBytes(m.Cols)) }

func (m *Matrix) check(name string, rows, cols int) error {
	if m.Rows != rows || m.Cols != cols {
		return fmt.Errorf("%w: %s is [%d %d], want [%d %d]", ErrBadWeights, name, m.Rows, m.Cols, rows, cols)
	}
	switch m.DType {
	case F32:
		if len(m.F32) != rows*cols {
			return fmt.Errorf("%w: %s has %d floats, want %d", ErrBadWeights, name, len(m.F32), rows*cols)
		}
	case Q8_0, Q4_0:
		if cols%BlockSize != 0 {
			return fmt.Errorf("%w: %s: %d columns is not a multiple of the %s block size %d", ErrBadWeights, name, cols, m.DType, BlockSize)
		}
		if want := rows * m.DType.RowBytes(cols); len(m.Q) != want {
			return fmt.Errorf("%w: %s has %d bytes, want %d", ErrBadWeights, name, len(m.Q), want)
		}
	default:
		return fmt.Errorf("%w: %s has %v", ErrUnsupported, name, m.DType)
	}
	return nil
}

// Layer holds one transformer block's weights. Q and K rows use Meta's
// interleaved-pair RoPE layout (as llama2.c and GGUF store them).
type Layer struct {
	AttnNorm []float32 // [Dim]
	Wq       Matrix    // [QDim, Dim]
	Wk       Matrix    // [KVDim, Dim]
	Wv       Matrix    // [KVDim, Dim]
	Wo       Matrix    // [Dim, QDim]
	FFNNorm  []float32 // [Dim]
	W1       Matrix    // gate [HiddenDim, Dim]
	W2       Matrix    // down [Dim, HiddenDim]
	W3       Matrix    // up   [HiddenDim, Dim]
}

// Weights are the tensors of the layer range [Start, End) of a model:
// a shard. The embedding is present iff Start == 0, the final norm and
// output head iff End == Config.Layers. A whole model is the range
// [0, Layers).
//
// The output head is often the largest single piece of work (60% of
// stories15M's), so a range may hold only some of its rows: HeadLo and
// HeadHi. Such a range returns the logits of its rows and the hidden state,
// and the next range, which may hold no layers at all (Start == End ==
// Layers), computes the following rows from that hidden state. Zero
// HeadLo and HeadHi mean the whole head.
type Weights struct {
	Config Config
	Start  int
	End    int

	HeadLo, HeadHi int // rows of the output head held; 0, 0 = all

	Embed     Matrix    // [Vocab, Dim], iff Start == 0
	Layers    []Layer   // End-Start blocks
	FinalNorm []float32 // [Dim], iff End == Layers
	Head      Matrix    // [HeadHi-HeadLo, Dim], iff End == Layers (shares Embed's storage when tied and whole)

	// Closer releases the storage behind the tensors (an mmap), if any.
	Closer io.Closer
}

// HasEmbed reports whether the range starts at the first layer.
func (w *Weights) HasEmbed() bool { return w.Start == 0 }

// HasHead reports whether the range ends at the last layer, and so holds
// (some of) the output head.
func (w *Weights) HasHead() bool { return w.End == w.Config.Layers }

// HeadRange returns the rows of the output head the range holds: [0, 0)
// without the head.
func (w *Weights) HeadRange() (lo, hi int) {
	switch {
	case !w.HasHead():
		return 0, 0
	case w.HeadHi == 0:
		return 0, w.Config.Vocab
	}
	return w.HeadLo, w.HeadHi
}

// IsLast reports whether the range computes the final logits rows: no
// range follows it.
func (w *Weights) IsLast() bool {
	_, hi := w.HeadRange()
	return hi == w.Config.Vocab
}

// Close releases the weights' storage. The weights must not be used after.
func (w *Weights) Close() error {
	if w.Closer == nil {
		return nil
	}
	c := w.Closer
	w.Closer = nil
	return c.Close()
}

// Bytes returns the total storage of the tensors, counting a tied head once.
func (w *Weights) Bytes() int64 {
	var n int64
	if w.HasEmbed() {
		n += w.Embed.Bytes()
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		n += int64(4 * (len(l.AttnNorm) + len(l.FFNNorm)))
		for _, m := range l.matrices() {
			n += m.Bytes()
		}
	}
	if w.HasHead() {
		n += int64(4 * len(w.FinalNorm))
		if lo, hi := w.HeadRange(); !(w.Config.TiedHead && w.HasEmbed() && lo == 0 && hi == w.Config.Vocab) {
			n += w.Head.Bytes()
		}
	}
	return n
}

func (l *Layer) matrices() []*Matrix {
	return []*Matrix{&l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.W1, &l.W2, &l.W3}
}

// Validate checks every tensor's shape and size against the configuration.
func (w *Weights) Validate() error {
	c := w.Config
	if err := c.Validate(); err != nil {
		return err
	}
	if w.Start < 0 || w.End > c.Layers || w.Start > w.End || (w.Start == w.End && w.End != c.Layers) {
		return fmt.Errorf("%w: layer range [%d, %d) of %d layers", ErrBadWeights, w.Start, w.End, c.Layers)
	}
	if w.HeadLo != 0 || w.HeadHi != 0 {
		if !w.HasHead() || w.HeadLo < 0 || w.HeadHi > c.Vocab || w.HeadLo >= w.HeadHi {
			return fmt.Errorf("%w: head rows [%d, %d) for layers [%d, %d) of %d, vocabulary %d", ErrBadWeights, w.HeadLo, w.HeadHi, w.Start, w.End, c.Layers, c.Vocab)
		}
	}
	if w.Start == w.End && w.HeadLo == 0 {
		return fmt.Errorf("%w: a range without layers must hold later rows of the head, not [%d, %d)", ErrBadWeights, w.HeadLo, w.HeadHi)
	}
	if len(w.Layers) != w.End-w.Start {
		return fmt.Errorf("%w: %d layers for range [%d, %d)", ErrBadWeights, len(w.Layers), w.Start, w.End)
	}
	if w.HasEmbed() {
		if err := w.Embed.check("token embedding", c.Vocab, c.Dim); err != nil {
			return err
		}
	}
	vec := func(name string, v []float32, n int) error {
		if len(v) != n {
			return fmt.Errorf("%w: %s has %d values, want %d", ErrBadWeights, name, len(v), n)
		}
		return nil
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		li := w.Start + i
		name := func(s string) string { return fmt.Sprintf("layer %d %s", li, s) }
		checks := []error{
			vec(name("attention norm"), l.AttnNorm, c.Dim),
			vec(name("ffn norm"), l.FFNNorm, c.Dim),
			l.Wq.check(name("wq"), c.QDim(), c.Dim),
			l.Wk.check(name("wk"), c.KVDim(), c.Dim),
			l.Wv.check(name("wv"), c.KVDim(), c.Dim),
			l.Wo.check(name("wo"), c.Dim, c.QDim()),
			l.W1.check(name("w1"), c.HiddenDim, c.Dim),
			l.W2.check(name("w2"), c.Dim, c.HiddenDim),
			l.W3.check(name("w3"), c.HiddenDim, c.Dim),
		}
		for _, err := range checks {
			if err != nil {
				return err
			}
		}
	}
	if w.HasHead() {
		if err := vec("final norm", w.FinalNorm, c.Dim); err != nil {
			return err
		}
		lo, hi := w.HeadRange()
		if err := w.Head.check("output head", hi-lo, c.Dim); err != nil {
			return err
		}
	}
	return nil
}

// Slice returns a view of the layer range [start, end) and head rows
// [headLo, headHi) of w, sharing w's storage (headLo = headHi = 0: the
// whole head, if the range has it). w must hold every part asked for.
// The view has no Closer: w still owns the storage.
func (w *Weights) Slice(start, end, headLo, headHi int) (*Weights, error) {
	if start < w.Start || end > w.End || start > end {
		return nil, fmt.Errorf("%w: layers [%d, %d) outside the held range [%d, %d)", ErrBadWeights, start, end, w.Start, w.End)
	}
	v := &Weights{Config: w.Config, Start: start, End: end, HeadLo: headLo, HeadHi: headHi,
		Layers: w.Layers[start-w.Start : end-w.Start]}
	if v.HasEmbed() {
		v.Embed = w.Embed
	}
	if v.HasHead() {
		lo, hi := v.HeadRange()
		wlo, whi := w.HeadRange()
		if lo < wlo || hi > whi {
			return nil, fmt.Errorf("%w: head rows [%d, %d) outside the held rows [%d, %d)", ErrBadWeights, lo, hi, wlo, whi)
		}
		v.FinalNorm = w.FinalNorm
		v.Head = w.Head.rows(lo-wlo, hi-wlo)
	}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// rows returns a view of rows [lo, hi) of m.
func (m *Matrix) rows(lo, hi int) Matrix {
	r := Matrix{DType: m.DType, Rows: hi - lo, Cols: m.Cols}
	if m.DType == F32 {
		r.F32 = m.F32[lo*m.Cols : hi*m.Cols]
	} else {
		rb := m.DType.RowBytes(m.Cols)
		r.Q = m.Q[lo*rb : hi*rb]
	}
	return r
}
