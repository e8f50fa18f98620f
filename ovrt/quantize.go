package ovrt

import (
	"fmt"

	"github.com/pipeshard/pipeshard/ovrt/internal/kernels"
)

// Quantize returns a copy of w with its matrices stored as d. Norm vectors
// stay float32. With Q4_0, the embedding and output head are stored as
// Q8_0: they decide every token, and at four bits the head changes greedy
// choices (llama.cpp keeps its output tensor at higher precision for the
// same reason). Quantized matrices of w are dequantized and quantized
// again only if their type differs from the target.
func (w *Weights) Quantize(d DType) (*Weights, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	outer := d
	if d == Q4_0 {
		outer = Q8_0
	}
	q := &Weights{Config: w.Config, Start: w.Start, End: w.End, HeadLo: w.HeadLo, HeadHi: w.HeadHi, FinalNorm: w.FinalNorm}
	var err error
	conv := func(m *Matrix, to DType) Matrix {
		if err != nil {
			return Matrix{}
		}
		var r Matrix
		r, err = m.Convert(to)
		return r
	}
	if w.HasEmbed() {
		q.Embed = conv(&w.Embed, outer)
	}
	q.Layers = make([]Layer, len(w.Layers))
	for i := range w.Layers {
		l, ql := &w.Layers[i], &q.Layers[i]
		ql.AttnNorm, ql.FFNNorm = l.AttnNorm, l.FFNNorm
		ql.Wq, ql.Wk, ql.Wv, ql.Wo = conv(&l.Wq, d), conv(&l.Wk, d), conv(&l.Wv, d), conv(&l.Wo, d)
		ql.W1, ql.W2, ql.W3 = conv(&l.W1, d), conv(&l.W2, d), conv(&l.W3, d)
	}
	if w.HasHead() {
		if lo, hi := w.HeadRange(); w.Config.TiedHead && w.HasEmbed() && lo == 0 && hi == w.Config.Vocab {
			q.Head = q.Embed
		} else {
			q.Head = conv(&w.Head, outer)
		}
	}
	if err != nil {
		return nil, err
	}
	return q, nil
}

// Convert returns m stored as d. Converting to the same type returns m
// itself (sharing storage).
func (m *Matrix) Convert(d DType) (Matrix, error) {
	if m.DType == d {
		return *m, nil
	}
	if d != F32 && m.Cols%BlockSize != 0 {
		return Matrix{}, fmt.Errorf("%w: %d columns cannot be quantized to %v (blocks of %d)", ErrUnsupported, m.Cols, d, BlockSize)
	}
	r := Matrix{DType: d, Rows: m.Rows, Cols: m.Cols}
	row := make([]float32, m.Cols)
	rb := d.RowBytes(m.Cols)
	switch d {
	case F32:
		r.F32 = make([]float32, m.Rows*m.Cols)
	case Q8_0, Q4_0:
		r.Q = make([]byte, m.Rows*rb)
	default:
		return Matrix{}, fmt.Errorf("%w: convert to %v", ErrUnsupported, d)
	}
	for i := 0; i < m.Rows; i++ {
		m.row(row, i)
		switch d {
		case F32:
			copy(r.F32[i*m.Cols:], row)
		case Q8_0:
			kernels.QuantizeRowQ8_0(r.Q[i*rb:(i+1)*rb], row)
		case Q4_0:
			kernels.QuantizeRowQ4_0(r.Q[i*rb:(i+1)*rb], row)
		}
	}
	return r, nil
}
