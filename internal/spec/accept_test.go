package spec

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pipeshard/pipeshard/internal/spec/spectest"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

func TestAcceptPointMass(t *testing.T) {
	tests := []struct {
		name           string
		drafts, target []int
		want           []int
		n              int
	}{
		{"no drafts", nil, []int{4}, []int{4}, 0},
		{"first rejected", []int{1, 2, 3}, []int{9, 2, 3, 4}, []int{9}, 0},
		{"two accepted", []int{1, 2, 3}, []int{1, 2, 7, 4}, []int{1, 2, 7}, 2},
		{"all accepted and the bonus", []int{1, 2, 3}, []int{1, 2, 3, 4}, []int{1, 2, 3, 4}, 3},
		{"later agreement does not count", []int{1, 2, 3}, []int{1, 5, 3, 4}, []int{1, 5}, 1},
	}
	for _, tt := range tests {
		out, n, err := AcceptPointMass(tt.drafts, tt.target)
		if err != nil || n != tt.n || !slices.Equal(out, tt.want) {
			t.Errorf("%s: %v, %d, %v; want %v, %d", tt.name, out, n, err, tt.want, tt.n)
		}
	}
	if _, _, err := AcceptPointMass([]int{1, 2}, []int{1, 2}); !errors.Is(err, ErrDraft) {
		t.Errorf("too few target rows: %v", err)
	}
}

func TestAcceptDistributions(t *testing.T) {
	p := [][]float64{{0.5, 0.5, 0}, {0, 1, 0}}
	q := [][]float64{{0.25, 0.25, 0.5}, {0.5, 0.5, 0}}
	script := func(us ...float64) func() float64 {
		return func() float64 { u := us[0]; us = us[1:]; return u }
	}
	tests := []struct {
		name   string
		drafts []int
		us     []float64
		want   []int
		n      int
	}{
		// p(0)/q(0) = 2: always accepted; p(1)/q(1) = 2 likewise; bonus 2.
		{"all accepted", []int{0, 1}, []float64{0.99, 0.99}, []int{0, 1, 2}, 2},
		// p(2) = 0: always rejected; the residual max(0, p−q) is {0.25, 0.25, 0}.
		{"impossible draft", []int{2, 1}, []float64{0, 0.75}, []int{1}, 0},
		// Second row: p(0)/q(0) = 0: rejected; residual {0, 0.5, 0}: 1.
		{"second rejected", []int{0, 0}, []float64{0.3, 0.1, 0.2}, []int{0, 1}, 1},
	}
	for _, tt := range tests {
		out, n, err := AcceptDistributions(tt.drafts, q, p, 2, script(tt.us...))
		if err != nil || n != tt.n || !slices.Equal(out, tt.want) {
			t.Errorf("%s: %v, %d, %v; want %v, %d", tt.name, out, n, err, tt.want, tt.n)
		}
	}
	if _, _, err := AcceptDistributions([]int{0}, nil, p, 0, nil); !errors.Is(err, ErrDraft) {
		t.Errorf("missing q: %v", err)
	}
	if _, _, err := AcceptDistributions([]int{7}, q[:1], p, 0, nil); !errors.Is(err, ErrDraft) {
		t.Errorf("id out of range: %v", err)
	}
	// p == q: no residual mass; draws from p.
	if got := Residual([]float64{0, 1}, []float64{0, 1}, 0.5); got != 1 {
		t.Errorf("residual of p == q: %d", got)
	}
}

// chain is a first-order Markov model over a small vocabulary: row prev
// is the distribution of the token after prev.
type chain [][]float64

func (c chain) draw(prev int, u float64) int { return sample.DrawWith(c[prev], u) }

// The target and the draft disagree on purpose: the draft puts mass where
// the target has none (id 5 after 0), lacks mass where the target has
// some (id 4 after 1), and ranks tokens differently.
var (
	targetChain = chain{
		{0.05, 0.40, 0.25, 0.20, 0.10, 0.00},
		{0.30, 0.05, 0.15, 0.10, 0.30, 0.10},
		{0.10, 0.10, 0.10, 0.40, 0.20, 0.10},
		{0.25, 0.25, 0.05, 0.05, 0.20, 0.20},
		{0.50, 0.10, 0.10, 0.10, 0.10, 0.10},
		{0.10, 0.30, 0.30, 0.10, 0.10, 0.10},
	}
	draftChain = chain{
		{0.10, 0.20, 0.40, 0.10, 0.10, 0.10},
		{0.40, 0.10, 0.20, 0.20, 0.00, 0.10},
		{0.10, 0.10, 0.30, 0.30, 0.10, 0.10},
		{0.30, 0.20, 0.10, 0.10, 0.20, 0.10},
		{0.40, 0.20, 0.10, 0.10, 0.10, 0.10},
		{0.20, 0.20, 0.20, 0.20, 0.10, 0.10},
	}
)

// speculate emits at least n tokens after prev by speculative rounds of k
// drafts: the draft chain's draws verified by rejection sampling when
// withQ, else its argmax as point masses verified against the target's
// draws. broken skips the correction (emits the drafts as they are) for
// the test's negative control.
func speculate(r *rand.Rand, prev, n, k int, withQ, broken bool) []int {
	var out []int
	for len(out) < n {
		cur := prev
		drafts := make([]int, k)
		q := make([][]float64, k)
		p := make([][]float64, k)
		for i := range drafts {
			p[i], q[i] = targetChain[cur], draftChain[cur]
			if withQ {
				drafts[i] = draftChain.draw(cur, r.Float64())
			} else {
				drafts[i] = slices.Index(q[i], slices.Max(q[i]))
			}
			cur = drafts[i]
		}
		bonus := targetChain.draw(cur, r.Float64())
		var emitted []int
		switch {
		case broken:
			emitted = append(drafts, bonus)
		case withQ:
			emitted, _, _ = AcceptDistributions(drafts, q, p, bonus, r.Float64)
		default:
			// The target's draw at every row, as the last stage makes it.
			target := make([]int, k+1)
			ctx := prev
			for i := range target {
				target[i] = targetChain.draw(ctx, r.Float64())
				if i < k {
					ctx = drafts[i]
				}
			}
			emitted, _, _ = AcceptPointMass(drafts, target)
		}
		out = append(out, emitted...)
		prev = out[len(out)-1]
	}
	return out[:n]
}

// significance is the chi-square tests' level. The seeds are fixed, so a
// test gives the same statistic on every run and cannot flake; the level
// says how unlikely a failure would be for a correct sampler with a fresh
// seed.
const significance = 0.001

// TestRejectionSamplingDistribution: the first two emitted tokens of
// speculative sampling are distributed as the target's, by a chi-square
// test over the 36 pairs, with a draft that has its own distribution and
// with point-mass drafts, for K = 1 and 3. The uncorrected drafts fail
// the same test.
func TestRejectionSamplingDistribution(t *testing.T) {
	const trials = 60000
	const start = 2
	V := len(targetChain)
	want := make([]float64, V*V)
	for a := range V {
		for b := range V {
			want[a*V+b] = targetChain[start][a] * targetChain[a][b]
		}
	}
	for _, tt := range []struct {
		name   string
		k      int
		withQ  bool
		broken bool
	}{
		{"draft distribution K=3", 3, true, false},
		{"draft distribution K=1", 1, true, false},
		{"point mass K=3", 3, false, false},
		{"point mass K=1", 1, false, false},
		{"no correction (must fail)", 3, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(20240601, uint64(tt.k)))
			counts := make([]int, V*V)
			first := make([]int, V)
			for range trials {
				out := speculate(r, start, 2, tt.k, tt.withQ, tt.broken)
				counts[out[0]*V+out[1]]++
				first[out[0]]++
			}
			stat, dof, p := spectest.ChiSquare(counts, want, 5)
			stat1, dof1, p1 := spectest.ChiSquare(first, targetChain[start], 5)
			t.Logf("pairs: chi2 %.2f, dof %d, p %.3g; first token: chi2 %.2f, dof %d, p %.3g", stat, dof, p, stat1, dof1, p1)
			if tt.broken {
				if p >= significance {
					t.Fatalf("uncorrected drafts passed: p %.3g", p)
				}
				return
			}
			if p < significance || p1 < significance {
				t.Fatalf("emitted tokens are not the target's: pairs p %.3g, first p %.3g", p, p1)
			}
		})
	}
}
