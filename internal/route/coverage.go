package route

import (
	"cmp"
	"math"
	"slices"
)

// Span is a run of layers, or of head rows, that the same throughput
// serves.
type Span struct {
	Head   bool // Lo, Hi are head rows; otherwise layers
	Lo, Hi int  // [Lo, Hi)
	// TokensPerSec is the sum of Capacity over the live servers that
	// compute this part of the model, each rounded to a thousandth of a
	// token per second (so that sums are exact and do not depend on the
	// servers' order); 0 if none does.
	TokensPerSec float64
	Servers      int // how many live servers compute it
}

// segment is a run of positions on the model's axis (layer l is
// position l, head row r is position Layers+r) and its throughput.
type segment struct {
	lo, hi  int
	milli   int64 // throughput in thousandths of a token per second
	servers int
}

// milli returns a Capacity in thousandths of a token per second. At most
// 10^12 each, a sum of millions of them fits in an int64.
func milli(capacity float64) int64 { return int64(math.Round(capacity * 1000)) }

// Coverage describes how well the live servers (not Draining, not Banned,
// with an ID and a range inside the model) serve each layer and each head row, as
// runs in model order: the layers [0, Layers) then the head rows
// [0, Vocab), a span wherever the throughput or the server count changes.
// A server counts for every layer and head row of its range, whether or
// not a route can use it. An invalid Model gives nil.
func Coverage(m Model, servers []Server) []Span {
	if m.validate() != nil {
		return nil
	}
	segs := coverage(m, servers)
	spans := make([]Span, 0, len(segs))
	for _, s := range segs {
		sp := Span{Lo: s.lo, Hi: s.hi, TokensPerSec: float64(s.milli) / 1000, Servers: s.servers}
		if s.lo >= m.Layers {
			sp.Head, sp.Lo, sp.Hi = true, s.lo-m.Layers, s.hi-m.Layers
		}
		spans = append(spans, sp)
	}
	return spans
}

// coverage is Coverage on the model's axis: segments that tile
// [0, Layers+Vocab), split at Layers.
func coverage(m Model, servers []Server) []segment {
	type event struct {
		at    int
		milli int64
		delta int
	}
	L, end := m.Layers, m.Layers+m.Vocab
	evs := []event{{at: 0}, {at: L}, {at: end}}
	add := func(lo, hi int, milli int64) {
		if lo < hi {
			evs = append(evs, event{lo, milli, 1}, event{hi, -milli, -1})
		}
	}
	for _, s := range servers {
		if s.Draining || s.Banned || s.ID == "" {
			continue
		}
		r, err := m.Normalize(s.Range())
		if err != nil {
			continue
		}
		c := milli(Capacity(s))
		add(r.Start, r.End, c)
		if r.End == L {
			add(L+r.HeadLo, L+r.HeadHi, c)
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	var (
		segs  []segment
		milli int64
		n     int
	)
	for i := 0; i < len(evs); {
		at := evs[i].at
		for ; i < len(evs) && evs[i].at == at; i++ {
			milli += evs[i].milli
			n += evs[i].delta
		}
		if at == end {
			break
		}
		next := evs[i].at
		if k := len(segs) - 1; k >= 0 && at != L && segs[k].milli == milli && segs[k].servers == n {
			segs[k].hi = next
			continue
		}
		segs = append(segs, segment{lo: at, hi: next, milli: milli, servers: n})
	}
	return segs
}

// Choose picks the range a joining node should serve, from the
// candidates it could host (say, the shards of the model's layouts that
// fit its memory): the one whose least-served layer or head row (the
// least sum of Capacity over live servers covering it, 0 if none does) is
// least served, so that the node relieves the swarm's bottleneck. This is
// Petals' block selection counting throughput rather than presence.
//
// scores[i] is candidate i's least throughput, NaN if the candidate is not
// a range of the model. Ties go to the earlier candidate, so callers list
// them in order of preference. index is -1 if no candidate is valid.
func Choose(m Model, servers []Server, candidates []Range) (index int, scores []float64) {
	scores = make([]float64, len(candidates))
	index = -1
	if m.validate() != nil {
		for i := range scores {
			scores[i] = math.NaN()
		}
		return -1, scores
	}
	segs := coverage(m, servers)
	// least returns the least throughput over positions [lo, hi).
	least := func(lo, hi int, acc int64) int64 {
		i, _ := slices.BinarySearchFunc(segs, lo, func(s segment, p int) int {
			return cmp.Compare(s.hi, p+1) // the first segment with hi > lo
		})
		for ; i < len(segs) && segs[i].lo < hi; i++ {
			acc = min(acc, segs[i].milli)
		}
		return acc
	}
	var best int64
	for i, c := range candidates {
		r, err := m.Normalize(c)
		if err != nil {
			scores[i] = math.NaN()
			continue
		}
		s := int64(math.MaxInt64)
		if r.Start < r.End {
			s = least(r.Start, r.End, s)
		}
		if r.End == m.Layers {
			s = least(m.Layers+r.HeadLo, m.Layers+r.HeadHi, s)
		}
		scores[i] = float64(s) / 1000
		if index < 0 || s < best {
			index, best = i, s
		}
	}
	return index, scores
}
