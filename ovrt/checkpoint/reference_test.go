package checkpoint

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
)

// refForward is a deliberately naive float64 Llama forward pass over the
// loaded weights, using interleaved-pair RoPE as ovrt does. It exists only
// to check, against the oracle's logits, that the loaders hand the runtime
// correctly laid-out tensors and configuration (the Q/K permutation, GQA,
// llama3 scaling parameters, the tied head). It returns the logits at
// every position.
func refForward(w *ovrt.Weights, ids []int) [][]float64 {
	c := w.Config
	hd := c.HeadSize()
	group := c.Heads / c.KVHeads
	matvec := func(m ovrt.Matrix, x []float64) []float64 {
		out := make([]float64, m.Rows)
		for r := range m.Rows {
			row := m.F32[r*m.Cols : (r+1)*m.Cols]
			var s float64
			for i, v := range row {
				s += float64(v) * x[i]
			}
			out[r] = s
		}
		return out
	}
	rmsnorm := func(x []float64, wt []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		scale := 1 / math.Sqrt(ss/float64(len(x))+c.NormEps)
		out := make([]float64, len(x))
		for i := range x {
			out[i] = x[i] * scale * float64(wt[i])
		}
		return out
	}
	// Inverse frequencies, with Llama 3 scaling as transformers applies it.
	inv := make([]float64, hd/2)
	for i := range inv {
		f := math.Pow(c.RopeTheta, -float64(2*i)/float64(hd))
		if s := c.RopeScaling; s != nil {
			old := float64(s.OriginalContext)
			lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave:
			case wave > lowWave:
				f /= s.Factor
			default:
				smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f = (1-smooth)*f/s.Factor + smooth*f
			}
		}
		inv[i] = f
	}
	rope := func(v []float64, pos int) {
		for h := 0; h < len(v)/hd; h++ {
			for i := range hd / 2 {
				a, b := h*hd+2*i, h*hd+2*i+1
				sin, cos := math.Sincos(float64(pos) * inv[i])
				v[a], v[b] = v[a]*cos-v[b]*sin, v[a]*sin+v[b]*cos
			}
		}
	}
	keys := make([][][]float64, c.Layers)
	vals := make([][][]float64, c.Layers)
	var logits [][]float64
	for pos, id := range ids {
		x := make([]float64, c.Dim)
		for i := range x {
			x[i] = float64(w.Embed.F32[id*c.Dim+i])
		}
		for l := range w.Layers {
			ly := &w.Layers[l]
			xb := rmsnorm(x, ly.AttnNorm)
			q, k, v := matvec(ly.Wq, xb), matvec(ly.Wk, xb), matvec(ly.Wv, xb)
			rope(q, pos)
			rope(k, pos)
			keys[l], vals[l] = append(keys[l], k), append(vals[l], v)
			att := make([]float64, c.QDim())
			for h := range c.Heads {
				kh := h / group * hd
				qh := q[h*hd : (h+1)*hd]
				scores := make([]float64, pos+1)
				maxs := math.Inf(-1)
				for t := range scores {
					var s float64
					for i := range hd {
						s += qh[i] * keys[l][t][kh+i]
					}
					scores[t] = s / math.Sqrt(float64(hd))
					maxs = math.Max(maxs, scores[t])
				}
				var sum float64
				for t := range scores {
					scores[t] = math.Exp(scores[t] - maxs)
					sum += scores[t]
				}
				for t := range scores {
					for i := range hd {
						att[h*hd+i] += scores[t] / sum * vals[l][t][kh+i]
					}
				}
			}
			for i, o := range matvec(ly.Wo, att) {
				x[i] += o
			}
			xb = rmsnorm(x, ly.FFNNorm)
			g, u := matvec(ly.W1, xb), matvec(ly.W3, xb)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			for i, o := range matvec(ly.W2, g) {
				x[i] += o
			}
		}
		logits = append(logits, matvec(w.Head, rmsnorm(x, w.FinalNorm)))
	}
	return logits
}

// checkOracleLogits compares refForward over w with an oracle prompt.
func checkOracleLogits(t *testing.T, w *ovrt.Weights, model, prompt string) {
	t.Helper()
	ref, dir := testmodel.LoadRef(t, model)
	for _, p := range ref.Prompts {
		if p.Name != prompt {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, p.LogitsFile))
		if err != nil {
			t.Fatal(err)
		}
		got := refForward(w, p.IDs)
		vocab := w.Config.Vocab
		if len(b) != 4*len(p.IDs)*vocab {
			t.Fatalf("%s: %d bytes of logits for %d positions", p.LogitsFile, len(b), len(p.IDs))
		}
		var worst float64
		for pos := range p.IDs {
			for i := range vocab {
				want := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*(pos*vocab+i):])))
				worst = math.Max(worst, math.Abs(got[pos][i]-want))
			}
		}
		t.Logf("%s/%s: max |Δ logit| %.2e over %d positions", model, prompt, worst, len(p.IDs))
		if worst > 1e-3 {
			t.Errorf("%s/%s: max |Δ logit| %g > 1e-3", model, prompt, worst)
		}
		return
	}
	t.Fatalf("%s: no prompt %q", model, prompt)
}

func TestOracleLogitsHF(t *testing.T) {
	if testing.Short() {
		t.Skip("reference forward pass")
	}
	w, err := LoadHF(filepath.Join(testmodel.OracleDir(t), "gqa_a"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkOracleLogits(t, w, "gqa_a", "p1_len5")
	checkOracleLogits(t, w, "gqa_a", "p3_len70")
}

func TestOracleLogitsLlama2C(t *testing.T) {
	if testing.Short() {
		t.Skip("reference forward pass")
	}
	path, _ := testmodel.Stories15M(t)
	w, err := LoadLlama2C(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkOracleLogits(t, w, "stories15M", "dragon")
}
