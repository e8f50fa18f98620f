package bench

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// QualityPrompt is one reference prompt: its ids, the reference greedy
// continuation and the reference logits at every prompt position
// ([len(IDs)][vocab], row-major).
type QualityPrompt struct {
	Name   string
	IDs    []int
	Greedy []int
	Logits []float32
}

// QualityRow is what one weight type does on one prompt (or, with Prompt
// "all", on every prompt together).
type QualityRow struct {
	Quant  string
	Prompt string

	Positions int     // prompt positions compared
	MaxAbs    float64 // max |Δ logit| against the reference, over every position and id
	MeanAbs   float64 // mean |Δ logit| over the same
	Top1      int     // positions whose argmax equals the reference's

	// MaxAbsDequant is the max |Δ logit| against the f32 engine running
	// the same quantized weights expanded back to float32: the error the
	// quantized kernels add beyond the rounding of the weights themselves
	// (summation order only, if they are right).
	MaxAbsDequant float64

	N        int // greedy tokens compared (len(Greedy))
	LeadF32  int // leading greedy tokens identical to the f32 engine's
	MatchF32 int // greedy positions (of N) identical to the f32 engine's
	// GapF32 is the f32 engine's margin (top-1 minus top-2 logit) at the
	// first token where this type's continuation differs (NaN if none):
	// a small margin means a near tie that any rounding can flip.
	GapF32      float64
	LeadOracle  int // leading greedy tokens identical to the reference's
	MatchOracle int // greedy positions identical to the reference's
}

// QuantQuality measures each weight type in quants against the prompts:
// the logit error at every prompt position and the agreement of an
// N-token greedy continuation with the f32 engine's and with the
// reference's. w is the f32 model; it is quantized in memory.
func QuantQuality(w *ovrt.Weights, prompts []QualityPrompt, quants []ovrt.DType, threads int) ([]QualityRow, error) {
	f32, err := ovrt.Compile(w, ovrt.WithThreads(threads))
	if err != nil {
		return nil, err
	}
	defer f32.Close()
	base := make([][]int, len(prompts))
	gaps := make([][]float64, len(prompts))
	for i, p := range prompts {
		if base[i], gaps[i], err = greedy(f32, p.IDs, len(p.Greedy)); err != nil {
			return nil, err
		}
	}
	var rows []QualityRow
	for _, q := range quants {
		m, dq := f32, f32
		if q != ovrt.F32 {
			qw, err := w.Quantize(q)
			if err != nil {
				return nil, err
			}
			if m, err = ovrt.Compile(qw, ovrt.WithThreads(threads)); err != nil {
				return nil, err
			}
			dw, err := qw.Quantize(ovrt.F32) // dequantize
			if err != nil {
				return nil, err
			}
			if dq, err = ovrt.Compile(dw, ovrt.WithThreads(threads)); err != nil {
				return nil, err
			}
		}
		all := QualityRow{Quant: q.String(), Prompt: "all"}
		var sum float64
		var count int
		for i, p := range prompts {
			r := QualityRow{Quant: q.String(), Prompt: p.Name, Positions: len(p.IDs), N: len(p.Greedy)}
			res, err := m.NewRequest().Infer(ovrt.Step{Tokens: ids32(p.IDs), Want: ovrt.WantAll})
			if err != nil {
				return nil, err
			}
			if len(res.Logits) != len(p.Logits) {
				return nil, fmt.Errorf("bench: %s: %d logits, the reference has %d", p.Name, len(res.Logits), len(p.Logits))
			}
			vocab := len(p.Logits) / len(p.IDs)
			var s float64
			for j, want := range p.Logits {
				d := math.Abs(float64(res.Logits[j]) - float64(want))
				s += d
				r.MaxAbs = max(r.MaxAbs, d)
			}
			r.MeanAbs = s / float64(len(p.Logits))
			dres, err := dq.NewRequest().Infer(ovrt.Step{Tokens: ids32(p.IDs), Want: ovrt.WantAll})
			if err != nil {
				return nil, err
			}
			for j, v := range dres.Logits {
				r.MaxAbsDequant = max(r.MaxAbsDequant, math.Abs(float64(res.Logits[j])-float64(v)))
			}
			sum += s
			count += len(p.Logits)
			for pos := range p.IDs {
				row := pos * vocab
				if sample.Argmax(res.Logits[row:row+vocab]) == sample.Argmax(p.Logits[row:row+vocab]) {
					r.Top1++
				}
			}
			got, _, err := greedy(m, p.IDs, len(p.Greedy))
			if err != nil {
				return nil, err
			}
			r.LeadF32, r.MatchF32 = agreement(got, base[i])
			r.GapF32 = math.NaN()
			if r.LeadF32 < len(gaps[i]) {
				r.GapF32 = gaps[i][r.LeadF32]
			}
			r.LeadOracle, r.MatchOracle = agreement(got, p.Greedy)
			rows = append(rows, r)

			all.Positions += r.Positions
			all.MaxAbs = max(all.MaxAbs, r.MaxAbs)
			all.Top1 += r.Top1
			all.MaxAbsDequant = max(all.MaxAbsDequant, r.MaxAbsDequant)
			all.N += r.N
			all.LeadF32 += r.LeadF32
			all.MatchF32 += r.MatchF32
			all.LeadOracle += r.LeadOracle
			all.MatchOracle += r.MatchOracle
		}
		all.MeanAbs = sum / float64(max(count, 1))
		rows = append(rows, all)
		if m != f32 {
			m.Close()
			dq.Close()
		}
	}
	return rows, nil
}

// agreement returns the number of leading tokens a and b share and the
// number of positions at which they are equal.
func agreement(a, b []int) (lead, match int) {
	lead = -1
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			match++
		} else if lead < 0 {
			lead = i
		}
	}
	if lead < 0 {
		lead = min(len(a), len(b))
	}
	return lead, match
}

// greedy decodes n tokens after prompt on a fresh request, and returns
// them with the margin between the best and second-best logit at each.
func greedy(m *ovrt.Model, prompt []int, n int) ([]int, []float64, error) {
	r := m.NewRequest()
	res, err := r.Infer(ovrt.Step{Tokens: ids32(prompt)})
	if err != nil {
		return nil, nil, err
	}
	var out []int
	var gaps []float64
	pos := len(prompt)
	for len(out) < n {
		next := sample.Argmax(res.Logits)
		second := float32(math.Inf(-1))
		for j, v := range res.Logits {
			if j != next && v > second {
				second = v
			}
		}
		out = append(out, next)
		gaps = append(gaps, float64(res.Logits[next]-second))
		if len(out) == n {
			break
		}
		if res, err = r.Infer(ovrt.Step{Pos: pos, Tokens: []int32{int32(next)}}); err != nil {
			return nil, nil, err
		}
		pos++
	}
	return out, gaps, nil
}

func ids32(ids []int) []int32 {
	r := make([]int32, len(ids))
	for i, v := range ids {
		r[i] = int32(v)
	}
	return r
}

// PrintQualityTable prints rows as a Markdown table.
func PrintQualityTable(w io.Writer, rows []QualityRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| quant\t prompt\t positions\t max |Δ logit|\t mean |Δ logit|\t top-1 = oracle\t kernel max |Δ| vs dequantized f32\t greedy leading = f32\t greedy matching f32\t f32 top-2 gap at divergence\t greedy leading = oracle\t greedy matching oracle\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rows {
		name, gap := r.Prompt, "–"
		if name == "all" {
			name = "**all**"
		} else if !math.IsNaN(r.GapF32) {
			gap = fmt.Sprintf("%.3g", r.GapF32)
		}
		fmt.Fprintf(tw, "| %s\t %s\t %d\t %.3g\t %.3g\t %d/%d\t %.3g\t %d/%d\t %d/%d\t %s\t %d/%d\t %d/%d\t\n", r.Quant, name, r.Positions, r.MaxAbs, r.MeanAbs,
			r.Top1, r.Positions, r.MaxAbsDequant, r.LeadF32, r.N, r.MatchF32, r.N, gap, r.LeadOracle, r.N, r.MatchOracle, r.N)
	}
	tw.Flush()
}
