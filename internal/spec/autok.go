package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxK bounds the number of drafts per traversal chosen
// automatically.
const DefaultMaxK = 16

// Costs model the time of one verifying traversal with k drafts:
//
//	Fixed + (k+1)·PerToken + k·Draft
//
// Fixed is what a traversal costs whatever its length: the network round
// trips of the route and the part of each hop's compute that does not grow
// with the tokens (reading the weights once, framing, queueing). PerToken
// is the target's compute per token of the traversal, over all hops; Draft
// the client's cost of drafting one token (about zero for NGram).
type Costs struct {
	Fixed    time.Duration
	PerToken time.Duration
	Draft    time.Duration
}

// Step returns the modelled time of a traversal verifying k drafts.
func (c Costs) Step(k int) time.Duration {
	return c.Fixed + time.Duration(k+1)*c.PerToken + time.Duration(k)*c.Draft
}

// ExpectedTokens returns the mean number of tokens a traversal with k
// drafts emits when each draft is accepted with probability alpha,
// independently, until the first rejection: (1 − α^{k+1})/(1 − α).
func ExpectedTokens(alpha float64, k int) float64 {
	alpha = min(max(alpha, 0), 1)
	if alpha == 1 {
		return float64(k + 1)
	}
	return (1 - math.Pow(alpha, float64(k+1))) / (1 - alpha)
}

// ExpectedTokensByPosition returns the mean number of tokens a traversal
// with k drafts emits when draft i+1 is accepted with probability
// alphas[i] once the drafts before it were (the last entry stands for
// every later position): 1 + Σ_j Π_{i<j} alphas[i]. With one alpha for
// every position it is ExpectedTokens.
func ExpectedTokensByPosition(alphas []float64, k int) float64 {
	e, p := 1.0, 1.0
	for i := range k {
		a := 0.0
		if len(alphas) > 0 {
			a = min(max(alphas[min(i, len(alphas)-1)], 0), 1)
		}
		p *= a
		e += p
	}
	return e
}

// Throughput returns the modelled tokens per second with k drafts.
func Throughput(alpha float64, k int, c Costs) float64 {
	t := c.Step(k).Seconds()
	if t <= 0 {
		return math.Inf(1)
	}
	return ExpectedTokens(alpha, k) / t
}

// BestK returns the k in [1, maxK] of the highest modelled throughput
// (the smallest such k on ties). It never answers 0: a drafter that is
// never asked cannot show that its acceptance rate has risen.
func BestK(alpha float64, c Costs, maxK int) int { return bestK([]float64{alpha}, c, maxK) }

// bestK is BestK under per-position acceptance rates
// (ExpectedTokensByPosition).
func bestK(alphas []float64, c Costs, maxK int) int {
	if maxK < 1 {
		maxK = 1
	}
	best, bestE := 1, -1.0
	for k := 1; k <= maxK; k++ {
		e := math.Inf(1)
		if sec := c.Step(k).Seconds(); sec > 0 {
			e = ExpectedTokensByPosition(alphas, k) / sec
		}
		if e > bestE*(1+1e-12) {
			best, bestE = k, e
		}
	}
	return best
}

// PaperK is the fixed rule the automatic choice is compared with: 6
// drafts on a LAN, 10 when a hop's round trip is 50 ms or more.
func PaperK(hopRTT time.Duration) int {
	if hopRTT >= 50*time.Millisecond {
		return 10
	}
	return 6
}

// ParseK reads a --spec-k value: "auto" (0) or a count from 1 to 64.
func ParseK(s string) (int, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "auto") || s == "" {
		return 0, nil
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 1 || k > 64 {
		return 0, fmt.Errorf("%w: %q is not auto or a draft count from 1 to 64", ErrParse, s)
	}
	return k, nil
}

// ParseTree reads a --spec-tree value: "auto" (0: sized from measured
// costs when K is automatic), "off" (-1: chains only) or a node count from
// 1 to 512.
func ParseTree(s string) (int, error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.EqualFold(s, "auto") || s == "":
		return 0, nil
	case strings.EqualFold(s, "off"):
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 512 {
		return 0, fmt.Errorf("%w: %q is not auto, off or a node count from 1 to 512", ErrParse, s)
	}
	return n, nil
}

// Tuner chooses the number of drafts as generation goes: it keeps a
// running estimate of the acceptance rate α, overall and at each draft
// position given the drafts before it, and of the costs (a traversal's
// time as a line in its token count, fitted over the lengths seen; a
// draft's time per token) and asks BestK. Before it can fit the line it
// uses the prior costs it was given, or else PaperK. Not safe for
// concurrent use.
type Tuner struct {
	maxK   int
	prior  Costs
	hopRTT time.Duration

	steps   map[int]*mean // traversal seconds by token count
	compute map[int]*mean // of which the hops computed, by token count
	draft   mean          // drafting seconds per token
	s, f    float64       // decayed accepted drafts, and rejections
	// pos[i] counts, decayed, the rounds that offered draft i+1 after
	// accepting every draft before it: s those that accepted it, f those
	// that did not. Drafts are not independent: a context or history
	// match that survives its first token tends to run on, and a draft
	// model agrees in streaks.
	pos    []counts
	rounds int // K calls: every exploreEvery-th round drafts deeper
}

// exploreEvery: one round in this many drafts twice as deep as the model
// says (at least 2 more), so that the acceptance of positions the
// current K never reaches is measured; without it a tuner that settled on
// a short K would never learn that longer drafts pay.
const exploreEvery = 8

type counts struct{ s, f float64 }

// Decay of the acceptance counts per round: about the last 20 rounds
// count.
const alphaDecay = 0.95

// NewTuner returns a tuner choosing k in [1, maxK] (0: DefaultMaxK).
// prior (may be zero) and hopRTT (the route's longest hop round trip, for
// PaperK) describe what is known before anything is measured.
func NewTuner(prior Costs, hopRTT time.Duration, maxK int) *Tuner {
	if maxK <= 0 {
		maxK = DefaultMaxK
	}
	// Prior acceptance 0.6, worth a couple of rounds.
	return &Tuner{maxK: maxK, prior: prior, hopRTT: hopRTT, steps: map[int]*mean{}, compute: map[int]*mean{}, s: 1.5, f: 1}
}

type mean struct {
	v float64
	n int
	w float64 // the length's weight in fit: its observations, decayed
}

func (m *mean) add(x float64) {
	m.n++
	if m.n == 1 {
		m.v = x
		return
	}
	m.v += (x - m.v) * max(0.2, 1/float64(m.n))
}

// ObserveStep records that a traversal of tokens tokens took d.
func (t *Tuner) ObserveStep(tokens int, d time.Duration) {
	if tokens > 0 && d >= 0 {
		addByLength(t.steps, tokens, d)
	}
}

// addByLength adds d to the mean of length tokens in by, and ages the
// weight of every length by lengthDecay.
func addByLength(by map[int]*mean, tokens int, d time.Duration) {
	m := by[tokens]
	if m == nil {
		m = &mean{}
		by[tokens] = m
	}
	for _, o := range by {
		o.w *= lengthDecay
	}
	m.w++
	m.add(d.Seconds())
}

// lengthDecay ages a length's weight in fit per traversal observed (of
// any length), so that a length not seen lately stops steering the line.
// The first traversals of a route are its slowest (buffers grow, pages
// fault in) and an automatic tree starts at its largest, once: that one
// point, far from the sizes that follow, would otherwise set the slope
// for good. Measured on stories15M at 100 ms (docs/benchmarks.md, stop
// 16): a first tree of 129 nodes computed at 0.8 ms a node, the later
// ones of 27 to 100 nodes at 0.4, and the undecayed fit kept 0.8, which
// halved the trees. A weight saturates at 1/(1-lengthDecay) = 10.
const lengthDecay = 0.9

// staleWeight is the weight under which a length leaves the fit (see
// fit): about 22 traversals without it.
const staleWeight = 0.1

// ObserveCompute records that the hops of a traversal of tokens tokens
// computed for d in all (their traces). Compute grows with the tokens
// as the whole traversal does, without the network's jitter, so once two
// lengths were seen Costs takes the per-token cost from it: a few
// milliseconds of jitter on a 300 ms round trip would otherwise make a
// slope of their own.
func (t *Tuner) ObserveCompute(tokens int, d time.Duration) {
	if tokens > 0 && d > 0 {
		addByLength(t.compute, tokens, d)
	}
}

// ObserveDraft records that drafting tokens tokens took d.
func (t *Tuner) ObserveDraft(tokens int, d time.Duration) {
	if tokens <= 0 || d < 0 {
		return
	}
	t.draft.add(d.Seconds() / float64(tokens))
}

// ObserveAcceptance records a round: accepted of drafted drafts were
// accepted.
func (t *Tuner) ObserveAcceptance(drafted, accepted int) {
	if drafted <= 0 {
		return
	}
	t.s = alphaDecay*t.s + float64(accepted)
	t.f *= alphaDecay
	if accepted < drafted {
		t.f++
	}
	for i := range t.pos {
		t.pos[i].s *= positionDecay
		t.pos[i].f *= positionDecay
	}
	for i := 0; i < drafted && i <= accepted && i < t.maxK; i++ {
		if i == len(t.pos) {
			t.pos = append(t.pos, counts{})
		}
		if i < accepted {
			t.pos[i].s++
		} else {
			t.pos[i].f++
		}
	}
}

// positionPrior is how many rounds a position's prior weighs: the
// estimate of the position before it (the pooled rate for the first).
const positionPrior = 2

// positionDecay ages the per-position counts, more slowly than the pooled
// ones (about the last 50 rounds count): deep positions are reached in
// few rounds.
const positionDecay = 0.98

// Alphas returns the estimated acceptance rate of draft i+1 given that
// the drafts before it were accepted, for the positions seen so far: each
// the position's own counts, shrunk towards the estimate of the position
// before it (the first towards the pooled rate, Alpha).
func (t *Tuner) Alphas() []float64 {
	prev := t.Alpha()
	out := make([]float64, len(t.pos))
	for i, c := range t.pos {
		out[i] = min((c.s+positionPrior*prev)/(c.s+c.f+positionPrior), 0.99)
		prev = out[i]
	}
	if len(out) == 0 {
		out = append(out, prev)
	}
	return out
}

// Alpha returns the estimated acceptance rate per draft.
func (t *Tuner) Alpha() float64 { return min(t.s/(t.s+t.f), 0.99) }

// Costs returns the current cost estimate, and whether it was measured
// (false: the prior).
func (t *Tuner) Costs() (Costs, bool) {
	c := t.prior
	if t.draft.n > 0 {
		c.Draft = dur(t.draft.v)
	}
	if _, b, ok := fit(t.compute); ok && len(t.steps) > 0 {
		// The slope from the hops' compute; the fixed time is what the
		// traversals took beyond it.
		var sw, sy float64
		floor := weightFloor(t.steps)
		for n, m := range t.steps {
			if m.w < floor {
				continue
			}
			w := m.w
			sw += w
			sy += w * (m.v - b*float64(n))
		}
		c.Fixed, c.PerToken = dur(max(sy/sw, 0)), dur(b)
		return c, true
	}
	a, b, ok := fit(t.steps)
	if !ok {
		return c, false
	}
	c.Fixed, c.PerToken = dur(a), dur(b)
	return c, true
}

// weightFloor returns the weight under which a length of by is left out
// of the estimates: staleWeight while three lengths weigh more, else 0.
// A length not seen for a while, far from the rest, would tilt the line
// even with a small weight (leverage grows with the square of the
// distance).
func weightFloor(by map[int]*mean) float64 {
	fresh := 0
	for _, m := range by {
		if m.w >= staleWeight {
			fresh++
		}
	}
	if fresh >= 3 {
		return staleWeight
	}
	return 0
}

// fit returns the weighted least-squares line a + b·tokens through the
// means by token count, each weighing its decayed observations (see
// lengthDecay); ok is false for fewer than two lengths.
func fit(by map[int]*mean) (a, b float64, ok bool) {
	floor := weightFloor(by)
	var sw, sx, sy, sxx, sxy float64
	n := 0
	for x, m := range by {
		if m.w < floor {
			continue
		}
		n++
		w := m.w
		x := float64(x)
		sw += w
		sx += w * x
		sy += w * m.v
		sxx += w * x * x
		sxy += w * x * m.v
	}
	if n < 2 {
		return 0, 0, false
	}
	den := sw*sxx - sx*sx
	if den <= 0 {
		return 0, 0, false
	}
	b = max((sw*sxy-sx*sy)/den, 0)
	a = max((sy-b*sx)/sw, 0)
	return a, b, true
}

func dur(s float64) time.Duration { return time.Duration(s * 1e9) }

// ExploreTree reports whether the next tree round should explore: one
// in exploreEvery verifies a tree of twice the budget, so that the
// compute fit always has sizes apart to measure the cost of a node by.
// Trees sized by the budget alone keep within a few nodes of each other,
// where a few milliseconds of noise make any slope.
func (t *Tuner) ExploreTree() bool {
	t.rounds++
	return t.rounds%exploreEvery == 0
}

// K returns the number of drafts for the next traversal.
func (t *Tuner) K() int {
	c, measured := t.Costs()
	if measured {
		k := bestK(t.Alphas(), c, t.maxK)
		if t.rounds++; t.rounds%exploreEvery == 0 {
			k = min(max(2*k, k+2), t.maxK)
		}
		return k
	}
	k := min(PaperK(t.hopRTT), t.maxK)
	if t.prior.Fixed > 0 || t.prior.PerToken > 0 {
		k = bestK(t.Alphas(), c, t.maxK)
	}
	// One traversal length measured (the prompt's): make the next one of
	// another length, so that the line can be fitted.
	for n := range t.steps {
		if n == k+1 {
			if k > 1 {
				k--
			} else if k < t.maxK {
				k++
			}
		}
	}
	return k
}
