package gguf

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
)

// tinyConfig is a small GQA model: 4 query heads sharing 2 KV heads of 16.
func tinyConfig() ovrt.Config {
	return ovrt.Config{
		Dim: 64, HiddenDim: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 100,
		Context: 128, NormEps: 1e-5, RopeTheta: 10000, BOS: 1, EOS: 2,
	}
}

// dtypes picks the storage type of each weight matrix of a synthetic model.
type dtypes struct {
	embed, attn, ffn, head ovrt.DType
}

func allOf(d ovrt.DType) dtypes { return dtypes{d, d, d, d} }

// randMatrix makes a matrix of random weights. Quantized blocks are built
// by hand: a random positive f16 scale and random quants.
func randMatrix(rng *rand.Rand, d ovrt.DType, rows, cols int) ovrt.Matrix {
	m := ovrt.Matrix{DType: d, Rows: rows, Cols: cols}
	switch d {
	case ovrt.F32:
		m.F32 = make([]float32, rows*cols)
		for i := range m.F32 {
			m.F32[i] = float32(rng.NormFloat64() * 0.1)
		}
	case ovrt.Q8_0, ovrt.Q4_0:
		bs := 34
		if d == ovrt.Q4_0 {
			bs = 18
		}
		m.Q = make([]byte, rows*d.RowBytes(cols))
		for b := 0; b < len(m.Q); b += bs {
			le.PutUint16(m.Q[b:], Float32ToHalf(float32(0.001+rng.Float64()*0.05)))
			for j := 2; j < bs; j++ {
				m.Q[b+j] = byte(rng.UintN(256))
			}
		}
	}
	return m
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(1 + 0.1*rng.NormFloat64())
	}
	return v
}

// synthModel builds a whole model of random weights.
func synthModel(seed uint64, c ovrt.Config, dt dtypes) *ovrt.Weights {
	rng := rand.New(rand.NewPCG(seed, 42))
	w := &ovrt.Weights{Config: c, Start: 0, End: c.Layers}
	w.Embed = randMatrix(rng, dt.embed, c.Vocab, c.Dim)
	for range c.Layers {
		w.Layers = append(w.Layers, ovrt.Layer{
			AttnNorm: randVec(rng, c.Dim),
			Wq:       randMatrix(rng, dt.attn, c.QDim(), c.Dim),
			Wk:       randMatrix(rng, dt.attn, c.KVDim(), c.Dim),
			Wv:       randMatrix(rng, dt.attn, c.KVDim(), c.Dim),
			Wo:       randMatrix(rng, dt.attn, c.Dim, c.QDim()),
			FFNNorm:  randVec(rng, c.Dim),
			W1:       randMatrix(rng, dt.ffn, c.HiddenDim, c.Dim),
			W2:       randMatrix(rng, dt.ffn, c.Dim, c.HiddenDim),
			W3:       randMatrix(rng, dt.ffn, c.HiddenDim, c.Dim),
		})
	}
	w.FinalNorm = randVec(rng, c.Dim)
	if c.TiedHead {
		w.Head = w.Embed
	} else {
		w.Head = randMatrix(rng, dt.head, c.Vocab, c.Dim)
	}
	return w
}

// synthVocab is a SentencePiece-style vocabulary of n distinct tokens.
func synthVocab(n int) Vocab {
	v := Vocab{Model: "llama", BOS: 1, EOS: 2, UNK: 0}
	for i := range n {
		var tok string
		typ := TokenNormal
		switch {
		case i == 0:
			tok, typ = "<unk>", TokenUnknown
		case i == 1:
			tok, typ = "<s>", TokenControl
		case i == 2:
			tok, typ = "</s>", TokenControl
		case i < 3+16:
			tok, typ = fmt.Sprintf("<0x%02X>", i-3), TokenByte
		default:
			tok = fmt.Sprintf("▁tok%d", i)
		}
		v.Tokens = append(v.Tokens, tok)
		v.Scores = append(v.Scores, -float32(i)/4)
		v.Types = append(v.Types, typ)
	}
	return v
}

// writeModel writes w and v to a GGUF file in a temporary directory.
func writeModel(t testing.TB, w *ovrt.Weights, v Vocab) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := WriteLlamaFile(path, "tiny", w, v); err != nil {
		t.Fatalf("WriteLlamaFile: %v", err)
	}
	return path
}

func parseFile(t testing.TB, path string) *File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseBytes(b)
	if err != nil {
		t.Fatalf("ParseBytes: %v", err)
	}
	return f
}

func sameF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func checkVec(t testing.TB, name string, got, want []float32) {
	t.Helper()
	if !sameF32(got, want) {
		t.Errorf("%s: %d values differ from the %d written", name, len(got), len(want))
	}
}

func checkMatrix(t testing.TB, name string, got, want ovrt.Matrix) {
	t.Helper()
	if got.DType != want.DType || got.Rows != want.Rows || got.Cols != want.Cols {
		t.Errorf("%s: got %v [%d %d], want %v [%d %d]", name, got.DType, got.Rows, got.Cols, want.DType, want.Rows, want.Cols)
		return
	}
	if want.DType == ovrt.F32 {
		checkVec(t, name, got.F32, want.F32)
	} else if !bytes.Equal(got.Q, want.Q) {
		t.Errorf("%s: %s bytes differ", name, want.DType)
	}
}

// checkWeights compares the layer range of got with the whole model want,
// bit for bit.
func checkWeights(t testing.TB, got, want *ovrt.Weights) {
	t.Helper()
	if got.HasEmbed() {
		checkMatrix(t, "embed", got.Embed, want.Embed)
	} else if got.Embed.F32 != nil || got.Embed.Q != nil {
		t.Errorf("range [%d, %d) has an embedding", got.Start, got.End)
	}
	if len(got.Layers) != got.End-got.Start {
		t.Fatalf("%d layers for [%d, %d)", len(got.Layers), got.Start, got.End)
	}
	for i := range got.Layers {
		g, w := &got.Layers[i], &want.Layers[got.Start+i]
		n := func(s string) string { return fmt.Sprintf("layer %d %s", got.Start+i, s) }
		checkVec(t, n("attn_norm"), g.AttnNorm, w.AttnNorm)
		checkVec(t, n("ffn_norm"), g.FFNNorm, w.FFNNorm)
		checkMatrix(t, n("wq"), g.Wq, w.Wq)
		checkMatrix(t, n("wk"), g.Wk, w.Wk)
		checkMatrix(t, n("wv"), g.Wv, w.Wv)
		checkMatrix(t, n("wo"), g.Wo, w.Wo)
		checkMatrix(t, n("w1"), g.W1, w.W1)
		checkMatrix(t, n("w2"), g.W2, w.W2)
		checkMatrix(t, n("w3"), g.W3, w.W3)
	}
	if got.HasHead() {
		checkVec(t, "final norm", got.FinalNorm, want.FinalNorm)
		checkMatrix(t, "head", got.Head, want.Head)
	} else if got.FinalNorm != nil {
		t.Errorf("range [%d, %d) has a final norm", got.Start, got.End)
	}
}

// rewrite copies a parsed GGUF file through a Writer, letting edit change
// each tensor (its type, dims and data) and drop keys or tensors. It
// returns the new file's bytes.
type tensorEdit func(ti TensorInfo, data []byte) (typ GGMLType, dims []uint64, out []byte, keep bool)

func rewrite(t testing.TB, f *File, dropKeys []string, edit tensorEdit) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	drop := map[string]bool{}
	for _, k := range dropKeys {
		drop[k] = true
	}
	for _, kv := range f.KVs {
		if drop[kv.Key] {
			continue
		}
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	type out struct {
		name string
		data []byte
	}
	var outs []out
	for _, ti := range f.Tensors {
		data, err := f.raw(&ti)
		if err != nil {
			t.Fatal(err)
		}
		typ, dims, d, keep := ti.Type, ti.Dims, data, true
		if edit != nil {
			typ, dims, d, keep = edit(ti, data)
		}
		if !keep {
			continue
		}
		if err := w.AddTensor(ti.Name, typ, dims...); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out{ti.Name, d})
	}
	for _, o := range outs {
		if err := w.WriteTensor(o.name, o.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeBytes(t testing.TB, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edited.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
