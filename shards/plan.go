package shards

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pipeshard/pipeshard/ovrt"
)

// Profile is the speed of a reference node, used to turn bytes streamed
// and multiply-adds into time. Decoding one token reads every weight once,
// so a stage's time is bounded by its memory traffic and by its
// arithmetic; whichever is slower decides (a roofline).
type Profile struct {
	BytesPerSec float64 // sustained memory bandwidth
	MACsPerSec  float64 // sustained multiply-adds
}

// DefaultProfile is a laptop-class core: 20 GB/s, 16 GMAC/s.
var DefaultProfile = Profile{BytesPerSec: 20e9, MACsPerSec: 16e9}

// Work is what one token costs a part of the model.
type Work struct {
	Bytes int64 // weight and KV bytes read
	MACs  int64 // multiply-adds
}

// Seconds is the roofline time of w on p.
func (p Profile) Seconds(w Work) float64 {
	return max(float64(w.Bytes)/p.BytesPerSec, float64(w.MACs)/p.MACsPerSec)
}

// Costs is the per-token work of every part of a model.
type Costs struct {
	Embed   Work   // one row of the embedding
	Layers  []Work // each block, with attention over AvgContext positions
	HeadRow Work   // one row of the output head (and 1/Vocab of the final norm)
	Vocab   int
}

// AvgContext is the attention length assumed by the cost model: half the
// context, the mean over a generation that fills it.
func AvgContext(c ovrt.Config) int { return max(c.Context/2, 1) }

// CostsOf computes the per-token work of a model stored as q (embedding
// and head as head).
func CostsOf(c ovrt.Config, q, head ovrt.DType) Costs {
	D, H, qd, kvd := int64(c.Dim), int64(c.HiddenDim), int64(c.QDim()), int64(c.KVDim())
	ctx := int64(AvgContext(c))
	rb := func(d ovrt.DType, cols int64) int64 { return int64(d.RowBytes(int(cols))) }
	layer := Work{
		Bytes: (qd+2*kvd)*rb(q, D) + D*rb(q, qd) + 2*H*rb(q, D) + D*rb(q, H) + 8*D + 2*4*kvd*ctx,
		MACs:  D*(qd+2*kvd) + qd*D + 3*D*H + 2*qd*ctx,
	}
	cs := Costs{
		Embed:   Work{Bytes: rb(head, D)},
		HeadRow: Work{Bytes: rb(head, D), MACs: D},
		Vocab:   c.Vocab,
	}
	for range c.Layers {
		cs.Layers = append(cs.Layers, layer)
	}
	return cs
}

// Stage is one shard of a plan: layers [Start, End) and head rows
// [HeadLo, HeadHi) (0, 0: the whole head if End is the last layer, none
// otherwise).
type Stage struct {
	Start, End     int
	HeadLo, HeadHi int
}

func (s Stage) String() string {
	if s.HeadHi > 0 {
		return fmt.Sprintf("%d:%d/%d:%d", s.Start, s.End, s.HeadLo, s.HeadHi)
	}
	return fmt.Sprintf("%d:%d", s.Start, s.End)
}

// headRows returns the stage's head rows given the model's size.
func (s Stage) headRows(layers, vocab int) (int, int) {
	switch {
	case s.End != layers:
		return 0, 0
	case s.HeadHi == 0:
		return 0, vocab
	}
	return s.HeadLo, s.HeadHi
}

// Work returns the per-token work of stage s.
func (cs Costs) Work(s Stage) Work {
	var w Work
	if s.Start == 0 {
		w = cs.Embed
	}
	for _, l := range cs.Layers[s.Start:s.End] {
		w.Bytes += l.Bytes
		w.MACs += l.MACs
	}
	lo, hi := s.headRows(len(cs.Layers), cs.Vocab)
	w.Bytes += int64(hi-lo) * cs.HeadRow.Bytes
	w.MACs += int64(hi-lo) * cs.HeadRow.MACs
	return w
}

// Total is the work of the whole model.
func (cs Costs) Total() Work { return cs.Work(Stage{0, len(cs.Layers), 0, 0}) }

// EvenSplit is the paper's rule: L//N layers per stage, the remainder to
// the first stages, the head with the last.
func EvenSplit(layers, n int) ([]Stage, error) {
	if n < 1 || n > layers {
		return nil, fmt.Errorf("shards: %d stages for %d layers", n, layers)
	}
	var out []Stage
	start := 0
	for i := range n {
		k := layers / n
		if i < layers%n {
			k++
		}
		out = append(out, Stage{Start: start, End: start + k})
		start += k
	}
	return out, nil
}

// headAlign is the granularity of a head split, in rows.
const headAlign = 64

// BalancedSplit cuts the model into n contiguous stages whose largest
// roofline time on p is as small as it can be. Layers are indivisible;
// the output head may be cut by rows between the last stages, since it is
// often larger than any fair share (60% of stories15M).
func BalancedSplit(cs Costs, p Profile, n int) ([]Stage, error) {
	L := len(cs.Layers)
	if n < 1 || n > L+cs.Vocab/headAlign {
		return nil, fmt.Errorf("shards: cannot cut %d layers and a %d-row head into %d stages", L, cs.Vocab, n)
	}
	if n == 1 {
		return []Stage{{Start: 0, End: L}}, nil
	}
	// pack returns the stages needed when no stage may exceed limit, or
	// nil when some single layer already does.
	pack := func(limit float64) []Stage {
		var out []Stage
		cur := Stage{}
		curT := 0.0
		if L > 0 {
			curT = p.Seconds(cs.Embed)
		}
		for i, l := range cs.Layers {
			t := p.Seconds(l)
			if i == 0 {
				t += curT
				curT = 0
			}
			if curT+t > limit && cur.End > cur.Start {
				out = append(out, cur)
				cur, curT = Stage{Start: i, End: i}, 0
			}
			if curT+t > limit {
				return nil
			}
			cur.End = i + 1
			curT += t
		}
		// The head's rows fill what is left of the last stage, then
		// further stages.
		rowT := p.Seconds(cs.HeadRow)
		row := 0
		for row < cs.Vocab {
			fit := int((limit-curT)/rowT) / headAlign * headAlign
			if cur.Start < cur.End && cur.HeadHi == 0 {
				// The stage with the last layer holds at least some
				// rows: "no rows" cannot be said of it.
				fit = max(fit, headAlign)
			}
			if row+fit >= cs.Vocab {
				fit = cs.Vocab - row
			}
			if fit <= 0 {
				out = append(out, cur)
				cur, curT = Stage{Start: L, End: L, HeadLo: row, HeadHi: row}, 0
				if rowT*headAlign > limit {
					return nil
				}
				continue
			}
			if cur.HeadHi == 0 {
				cur.HeadLo = row
			}
			cur.HeadHi = row + fit
			curT += float64(fit) * rowT
			row += fit
		}
		out = append(out, cur)
		// A stage that ends before the last layer holds no head.
		for i := range out {
			if out[i].End != L {
				out[i].HeadLo, out[i].HeadHi = 0, 0
			}
		}
		// The whole head in one stage is written as 0, 0.
		if last := &out[len(out)-1]; last.HeadLo == 0 && last.HeadHi == cs.Vocab {
			last.HeadHi = 0
		}
		return out
	}
	total := p.Seconds(cs.Total())
	lo, hi := total/float64(n), total
	var best []Stage
	for range 60 {
		mid := (lo + hi) / 2
		if s := pack(mid); s != nil && len(s) <= n {
			best, hi = s, mid
		} else {
			lo = mid
		}
	}
	if best == nil {
		best = pack(hi)
	}
	// Stages with layers but stranded rows split differently: a plan with
	// fewer stages than asked is fine only if it cannot be refined; split
	// the largest stage's head rows to use every stage.
	for len(best) < n {
		i := largest(cs, p, best)
		s := best[i]
		lo, hi := s.headRows(L, cs.Vocab)
		if hi-lo < 2*headAlign {
			break
		}
		mid := lo + (hi-lo)/2/headAlign*headAlign
		a, b := s, Stage{Start: L, End: L, HeadLo: mid, HeadHi: hi}
		a.HeadLo, a.HeadHi = lo, mid
		best = append(best[:i+1], append([]Stage{b}, best[i+1:]...)...)
		best[i] = a
	}
	return best, nil
}

func largest(cs Costs, p Profile, stages []Stage) int {
	best := 0
	for i, s := range stages {
		if p.Seconds(cs.Work(s)) > p.Seconds(cs.Work(stages[best])) {
			best = i
		}
	}
	return best
}

// Imbalance returns the largest stage's time over the ideal share
// (total/n): 1 is perfect.
func Imbalance(cs Costs, p Profile, stages []Stage) float64 {
	return p.Seconds(cs.Work(stages[largest(cs, p, stages)])) / (p.Seconds(cs.Total()) / float64(len(stages)))
}

// ParseRanges reads "0:4,4:6" (layer ranges), where a range may add head
// rows as "6:6/16000:32000".
func ParseRanges(s string, c ovrt.Config) ([]Stage, error) {
	var out []Stage
	next, row := 0, 0
	for _, part := range strings.Split(s, ",") {
		var st Stage
		layers, head, hasHead := strings.Cut(strings.TrimSpace(part), "/")
		a, b, ok := strings.Cut(layers, ":")
		var err1, err2 error
		st.Start, err1 = strconv.Atoi(a)
		st.End, err2 = strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("shards: range %q: want START:END or START:END/ROWLO:ROWHI", part)
		}
		if hasHead {
			a, b, ok := strings.Cut(head, ":")
			st.HeadLo, err1 = strconv.Atoi(a)
			st.HeadHi, err2 = strconv.Atoi(b)
			if !ok || err1 != nil || err2 != nil || st.HeadLo >= st.HeadHi {
				return nil, fmt.Errorf("shards: head rows %q: want ROWLO:ROWHI", head)
			}
		}
		if st.Start != next || st.End < st.Start || st.End > c.Layers || (st.Start == st.End && !hasHead) {
			return nil, fmt.Errorf("shards: range %q does not continue from layer %d of %d", part, next, c.Layers)
		}
		if lo, hi := st.headRows(c.Layers, c.Vocab); hi > lo {
			if lo != row || hi > c.Vocab {
				return nil, fmt.Errorf("shards: head rows [%d, %d) do not continue from row %d of %d", lo, hi, row, c.Vocab)
			}
			row = hi
		}
		next = st.End
		out = append(out, st)
	}
	if next != c.Layers || row != c.Vocab {
		return nil, fmt.Errorf("shards: ranges %q end at layer %d of %d, head row %d of %d", s, next, c.Layers, row, c.Vocab)
	}
	if last := &out[len(out)-1]; last.HeadLo == 0 && last.HeadHi == c.Vocab {
		last.HeadHi = 0
	}
	return out, nil
}
