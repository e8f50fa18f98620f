package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
)

// floatAt reads the float32 at byte offset off of the file at path,
// independently of the loader.
func floatAt(t *testing.T, path string, off int64) float32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[:]))
}

// checkViews fails unless every tensor of w aliases w's mapping.
func checkViews(t *testing.T, w *ovrt.Weights) {
	t.Helper()
	// The tensors are views of one buffer (a mapping, or the aligned
	// anonymous copy of a llama2.c file), never copies.
	f, ok := w.Closer.(interface{ Bytes() []byte })
	if !ok {
		t.Fatalf("Closer is %T, which holds no buffer", w.Closer)
	}
	check := func(name string, v []float32) {
		t.Helper()
		if !within(f, v) {
			t.Errorf("%s is a copy, not a view of the mapping", name)
		}
	}
	if w.HasEmbed() {
		check("embed", w.Embed.F32)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		for name, v := range map[string][]float32{
			"attn norm": l.AttnNorm, "ffn norm": l.FFNNorm, "wq": l.Wq.F32, "wk": l.Wk.F32, "wv": l.Wv.F32,
			"wo": l.Wo.F32, "w1": l.W1.F32, "w2": l.W2.F32, "w3": l.W3.F32,
		} {
			check(fmt.Sprintf("layer %d %s", w.Start+i, name), v)
		}
	}
	if w.HasHead() {
		check("final norm", w.FinalNorm)
		check("head", w.Head.F32)
	}
}

func TestLoadLlama2CStories15M(t *testing.T) {
	path, _ := testmodel.Stories15M(t)
	w, err := LoadLlama2C(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	want := ovrt.Config{Dim: 288, HiddenDim: 768, Layers: 6, Heads: 6, KVHeads: 6, HeadDim: 48, Vocab: 32000, Context: 256,
		NormEps: 1e-5, RopeTheta: 10000, TiedHead: true, BOS: 1, EOS: 2}
	if !sameConfig(w.Config, want) {
		t.Fatalf("config %+v\nwant   %+v", w.Config, want)
	}
	if w.Start != 0 || w.End != 6 || len(w.Layers) != 6 || !w.HasEmbed() || !w.HasHead() {
		t.Fatalf("range [%d, %d), %d layers", w.Start, w.End, len(w.Layers))
	}
	if !sameStorage(w.Head.F32, w.Embed.F32) {
		t.Error("tied head does not share the embedding's storage")
	}
	checkViews(t, w)

	// Spot values, read from the file independently: the first embedding
	// float, the last float of the final norm, and an element of layer 3's
	// wk and of layer 5's w2.
	const F = 4
	off := func(floats int) int64 { return 28 + F*int64(floats) }
	L, d, h, v := 6, 288, 768, 32000
	if got, want := w.Embed.F32[0], floatAt(t, path, 28); got != want || got != float32(-0.059824646) {
		t.Errorf("embed[0] = %v, file has %v (want -0.059824646)", got, want)
	}
	finalNorm := v*d + L*d*2 + L*d*d*4 + L*h*d*3
	if got, want := w.FinalNorm[d-1], floatAt(t, path, off(finalNorm+d-1)); got != want {
		t.Errorf("final norm[%d] = %v, file has %v", d-1, got, want)
	}
	wk := v*d + L*d + L*d*d
	if got, want := w.Layers[3].Wk.F32[17*d+5], floatAt(t, path, off(wk+3*d*d+17*d+5)); got != want {
		t.Errorf("layer 3 wk[17][5] = %v, file has %v", got, want)
	}
	w2 := v*d + L*d*2 + L*d*d*4 + L*h*d
	if got, want := w.Layers[5].W2.F32[200*h+700], floatAt(t, path, off(w2+5*d*h+200*h+700)); got != want {
		t.Errorf("layer 5 w2[200][700] = %v, file has %v", got, want)
	}
	// The RMSNorm weights of a trained model are far from zero; a shifted
	// tensor would not be.
	var sum float64
	for _, x := range w.FinalNorm {
		sum += float64(x)
	}
	if mean := sum / float64(d); mean < 0.5 || mean > 20 {
		t.Errorf("final norm mean %g: tensors misplaced?", mean)
	}

	t.Run("ranges", func(t *testing.T) {
		for _, r := range [][2]int{{0, 2}, {2, 6}, {2, 0}, {0, 6}, {5, 6}, {3, 4}} {
			s, err := LoadLlama2C(path, r[0], r[1])
			if err != nil {
				t.Fatalf("%v: %v", r, err)
			}
			end := r[1]
			if end <= 0 {
				end = 6
			}
			if s.Start != r[0] || s.End != end || len(s.Layers) != end-r[0] {
				t.Errorf("%v: got [%d, %d) with %d layers", r, s.Start, s.End, len(s.Layers))
			}
			if err := s.Validate(); err != nil {
				t.Errorf("%v: %v", r, err)
			}
			if s.HasEmbed() != (r[0] == 0) || (s.Embed.F32 != nil) != (r[0] == 0) {
				t.Errorf("%v: embed present %v", r, s.Embed.F32 != nil)
			}
			if s.HasHead() != (end == 6) || (s.FinalNorm != nil) != (end == 6) || (s.Head.F32 != nil) != (end == 6) {
				t.Errorf("%v: head present %v, final norm %v", r, s.Head.F32 != nil, s.FinalNorm != nil)
			}
			equalWeights(t, s, sub(w, r[0], end), nil)
			checkViews(t, s)
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		}
		for _, r := range [][2]int{{6, 6}, {6, 0}, {-1, 2}, {0, 7}, {3, 2}, {4, 4}} {
			_, err := LoadLlama2C(path, r[0], r[1])
			wantErr(t, err, []error{ErrLayerRange, ovrt.ErrBadConfig}, path, fmt.Sprintf("[%d,", r[0]))
		}
	})
}

// sub returns the layer range [start, end) of whole-model weights.
func sub(w *ovrt.Weights, start, end int) *ovrt.Weights {
	s := &ovrt.Weights{Config: w.Config, Start: start, End: end, Layers: w.Layers[start:end]}
	if start == 0 {
		s.Embed = w.Embed
	}
	if end == w.Config.Layers {
		s.FinalNorm, s.Head = w.FinalNorm, w.Head
	}
	return s
}

// TestLlama2CLayout loads synthetic checkpoints whose every float is its
// own index, so each tensor's placement is checked element by element.
func TestLlama2CLayout(t *testing.T) {
	for _, h := range []llama2cHeader{
		{Dim: 16, HiddenDim: 40, Layers: 3, Heads: 4, KVHeads: 4, Vocab: 11, SeqLen: 8},
		{Dim: 16, HiddenDim: 40, Layers: 3, Heads: 4, KVHeads: 2, Vocab: -11, SeqLen: 8}, // GQA, unshared head
		{Dim: 8, HiddenDim: 8, Layers: 1, Heads: 1, KVHeads: 1, Vocab: -1, SeqLen: 1},
	} {
		t.Run(fmt.Sprint(h), func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "m.bin", llama2cBytes(h, index))
			w, err := LoadLlama2C(path, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			c := w.Config
			vocab, shared := int(h.Vocab), h.Vocab > 0
			if !shared {
				vocab = -vocab
			}
			if c.Vocab != vocab || c.TiedHead != shared || c.KVHeads != int(h.KVHeads) || c.HeadDim != int(h.Dim/h.Heads) || c.Context != int(h.SeqLen) {
				t.Fatalf("config %+v from header %v", c, h)
			}
			checkViews(t, w)
			L, d, hd, q, kv := c.Layers, c.Dim, c.HiddenDim, c.QDim(), c.KVDim()
			pos := 0
			expect := func(name string, v []float32, n, count int) {
				t.Helper()
				for l := range count {
					vv := v
					if v == nil {
						vv = layerVec(w, name, l)
					}
					if len(vv) != n {
						t.Fatalf("%s layer %d: %d values, want %d", name, l, len(vv), n)
					}
					for i, x := range vv {
						if x != float32(pos+l*n+i) {
							t.Fatalf("%s layer %d [%d] = %v, want %v", name, l, i, x, pos+l*n+i)
						}
					}
				}
				pos += n * count
			}
			expect("embed", w.Embed.F32, vocab*d, 1)
			expect("attn", nil, d, L)
			expect("wq", nil, q*d, L)
			expect("wk", nil, kv*d, L)
			expect("wv", nil, kv*d, L)
			expect("wo", nil, d*q, L)
			expect("ffn", nil, d, L)
			expect("w1", nil, hd*d, L)
			expect("w2", nil, d*hd, L)
			expect("w3", nil, hd*d, L)
			expect("final", w.FinalNorm, d, 1)
			pos += int(h.SeqLen) * c.HeadSize() // the two RoPE tables
			if shared {
				if !sameStorage(w.Head.F32, w.Embed.F32) {
					t.Error("tied head is not the embedding")
				}
			} else {
				expect("head", w.Head.F32, vocab*d, 1)
			}
		})
	}
}

func layerVec(w *ovrt.Weights, name string, l int) []float32 {
	ly := &w.Layers[l]
	return map[string][]float32{
		"attn": ly.AttnNorm, "ffn": ly.FFNNorm, "wq": ly.Wq.F32, "wk": ly.Wk.F32, "wv": ly.Wv.F32,
		"wo": ly.Wo.F32, "w1": ly.W1.F32, "w2": ly.W2.F32, "w3": ly.W3.F32,
	}[name]
}

func TestLlama2CErrors(t *testing.T) {
	dir := t.TempDir()
	good := llama2cHeader{Dim: 16, HiddenDim: 40, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 11, SeqLen: 8}
	goodBytes := llama2cBytes(good, index)
	size := len(goodBytes)

	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(dir, "nope.bin")
		_, err := LoadLlama2C(p, 0, 0)
		wantErr(t, err, []error{fs.ErrNotExist}, p)
	})
	for _, cut := range []int{0, 3, 27, 28, 29, 100, size / 2, size - 4, size - 1} {
		t.Run(fmt.Sprintf("truncated at %d", cut), func(t *testing.T) {
			p := writeFile(t, dir, "cut.bin", goodBytes[:cut])
			_, err := LoadLlama2C(p, 0, 0)
			mentions := []string{p, fmt.Sprint(cut)}
			if cut >= 28 {
				mentions = append(mentions, fmt.Sprint(size)) // expected size
			}
			wantErr(t, err, []error{ErrTruncated, ovrt.ErrBadWeights}, mentions...)
		})
	}
	for _, extra := range []int{1, 4, 4096} {
		t.Run(fmt.Sprintf("%d trailing bytes", extra), func(t *testing.T) {
			p := writeFile(t, dir, "long.bin", append(append([]byte(nil), goodBytes...), make([]byte, extra)...))
			_, err := LoadLlama2C(p, 0, 0)
			wantErr(t, err, []error{ErrTrailingData}, p, fmt.Sprint(size), fmt.Sprint(size+extra))
		})
	}
	t.Run("stories header on a short file", func(t *testing.T) {
		h := llama2cHeader{288, 768, 6, 6, 6, 32000, 256}
		b := llama2cBytes(good, index)
		for i, v := range []int32{h.Dim, h.HiddenDim, h.Layers, h.Heads, h.KVHeads, h.Vocab, h.SeqLen} {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
		p := writeFile(t, dir, "short.bin", b)
		_, err := LoadLlama2C(p, 0, 0)
		wantErr(t, err, []error{ErrTruncated}, "60816028", fmt.Sprint(len(b)))
	})

	bad := []struct {
		name    string
		edit    func(h *llama2cHeader)
		target  error
		mention string
	}{
		{"zero dim", func(h *llama2cHeader) { h.Dim = 0 }, ErrConfig, "dim 0"},
		{"negative dim", func(h *llama2cHeader) { h.Dim = -16 }, ErrConfig, "dim -16"},
		{"huge dim", func(h *llama2cHeader) { h.Dim = 1 << 30 }, ErrConfig, "dim 1073741824"},
		{"zero hidden", func(h *llama2cHeader) { h.HiddenDim = 0 }, ErrConfig, "hidden_dim 0"},
		{"huge hidden", func(h *llama2cHeader) { h.HiddenDim = math.MaxInt32 }, ErrConfig, "hidden_dim 2147483647"},
		{"zero layers", func(h *llama2cHeader) { h.Layers = 0 }, ErrConfig, "n_layers 0"},
		{"negative layers", func(h *llama2cHeader) { h.Layers = -2 }, ErrConfig, "n_layers -2"},
		{"huge layers", func(h *llama2cHeader) { h.Layers = 100000 }, ErrConfig, "n_layers 100000"},
		{"zero heads", func(h *llama2cHeader) { h.Heads = 0 }, ErrConfig, "n_heads 0"},
		{"heads do not divide dim", func(h *llama2cHeader) { h.Heads = 3 }, ErrConfig, "not divisible by n_heads 3"},
		{"odd head size", func(h *llama2cHeader) { h.Heads, h.KVHeads = 16, 16 }, ErrConfig, "head size 1"},
		{"zero kv heads", func(h *llama2cHeader) { h.KVHeads = 0 }, ErrConfig, "n_kv_heads 0"},
		{"kv heads above heads", func(h *llama2cHeader) { h.KVHeads = 8 }, ErrConfig, "n_kv_heads 8"},
		{"kv heads do not divide heads", func(h *llama2cHeader) { h.KVHeads = 3 }, ErrConfig, "not divisible by n_kv_heads 3"},
		{"zero vocab", func(h *llama2cHeader) { h.Vocab = 0 }, ErrConfig, "vocab_size 0"},
		{"min int vocab", func(h *llama2cHeader) { h.Vocab = math.MinInt32 }, ErrConfig, "vocab_size -2147483648"},
		{"huge vocab", func(h *llama2cHeader) { h.Vocab = 1 << 25 }, ErrConfig, "vocab_size 33554432"},
		{"zero seq_len", func(h *llama2cHeader) { h.SeqLen = 0 }, ErrConfig, "seq_len 0"},
		{"huge seq_len", func(h *llama2cHeader) { h.SeqLen = 1 << 30 }, ErrConfig, "seq_len 1073741824"},
		{"versioned export", func(h *llama2cHeader) { h.Dim, h.HiddenDim = llama2cMagic, 2 }, ErrUnsupported, "version 2"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			h := good
			tc.edit(&h)
			b := append([]byte(nil), goodBytes...)
			for i, v := range []int32{h.Dim, h.HiddenDim, h.Layers, h.Heads, h.KVHeads, h.Vocab, h.SeqLen} {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
			}
			p := writeFile(t, dir, "bad.bin", b)
			_, err := LoadLlama2C(p, 0, 0)
			wantErr(t, err, []error{tc.target}, p, tc.mention)
			if errors.Is(tc.target, ErrConfig) && !errors.Is(err, ovrt.ErrBadConfig) {
				t.Errorf("%v does not match ovrt.ErrBadConfig", err)
			}
		})
	}
}
