package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// ErrBadParams is returned for sampling settings out of range.
var ErrBadParams = errors.New("sample: invalid sampling parameters")

// Params are the sampling settings. The zero value is greedy decoding.
type Params struct {
	Temp float64 // 0 = greedy
	TopK int     // 0 = no top-k cut
	TopP float64 // 0 or 1 = no nucleus cut
	Seed uint64
}

// Validate reports whether p is usable.
func (p Params) Validate() error {
	switch {
	case p.Temp < 0 || math.IsNaN(p.Temp) || math.IsInf(p.Temp, 0):
		return fmt.Errorf("%w: temperature %g", ErrBadParams, p.Temp)
	case p.TopK < 0:
		return fmt.Errorf("%w: top-k %d", ErrBadParams, p.TopK)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("%w: top-p %g (want 0 < p <= 1)", ErrBadParams, p.TopP)
	}
	return nil
}

// Greedy reports whether p selects argmax decoding.
func (p Params) Greedy() bool { return p.Temp == 0 }

// Sampler draws ids from logits. It is not safe for concurrent use.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	idx  []int
	prob []float64
}

// New returns a sampler for p, seeded from p.Seed.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}, nil
}

// Params returns the sampler's settings.
func (s *Sampler) Params() Params { return s.p }

// Argmax returns the index of the largest logit, the lowest on ties.
func Argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Sample returns the next id.
func (s *Sampler) Sample(logits []float32) int {
	if s.p.Greedy() {
		return Argmax(logits)
	}
	return s.Draw(s.Dist(logits))
}

// Float64 returns a uniform number in [0, 1) from the sampler's generator.
func (s *Sampler) Float64() float64 { return s.rng.Float64() }

// Draw samples an index from a distribution that sums to about 1.
func (s *Sampler) Draw(dist []float64) int { return DrawWith(dist, s.rng.Float64()) }

// DrawWith picks the index where the cumulative mass of dist passes
// u*sum(dist), for u in [0, 1): the inverse-CDF draw. Given the same
// distribution and u it picks the same id on every machine, which lets a
// remote stage sample with a client's random numbers.
func DrawWith(dist []float64, u float64) int {
	var sum float64
	for _, p := range dist {
		sum += p
	}
	u *= sum
	last := 0
	for i, p := range dist {
		if p == 0 {
			continue
		}
		last = i
		u -= p
		if u < 0 {
			return i
		}
	}
	return last
}

// Dist returns the distribution Sample draws from: softmax(logits/T)
// restricted to the top-k ids and then to the smallest set whose mass
// reaches top-p, renormalized. For greedy settings it is one-hot at the
// argmax. The slice is reused by the next call.
func (s *Sampler) Dist(logits []float32) []float64 {
	n := len(logits)
	if cap(s.prob) < n {
		s.prob = make([]float64, n)
		s.idx = make([]int, n)
	}
	prob := s.prob[:n]
	clear(prob)
	if s.p.Greedy() {
		prob[Argmax(logits)] = 1
		return prob
	}
	idx := s.idx[:n]
	for i := range idx {
		idx[i] = i
	}
	// Order by logit, descending; ties by id for reproducibility.
	slices.SortFunc(idx, func(a, b int) int {
		if logits[a] != logits[b] {
			if logits[a] > logits[b] {
				return -1
			}
			return 1
		}
		return a - b
	})
	keep := n
	if s.p.TopK > 0 && s.p.TopK < keep {
		keep = s.p.TopK
	}
	mx := float64(logits[idx[0]])
	var sum float64
	for _, i := range idx[:keep] {
		e := math.Exp((float64(logits[i]) - mx) / s.p.Temp)
		prob[i] = e
		sum += e
	}
	if s.p.TopP > 0 && s.p.TopP < 1 {
		var cum float64
		for k, i := range idx[:keep] {
			cum += prob[i] / sum
			if cum >= s.p.TopP {
				for _, j := range idx[k+1 : keep] {
					prob[j] = 0
				}
				keep = k + 1
				break
			}
		}
		sum = 0
		for _, i := range idx[:keep] {
			sum += prob[i]
		}
	}
	for _, i := range idx[:keep] {
		prob[i] /= sum
	}
	return prob
}
