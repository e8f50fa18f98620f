package spec

import (
	"fmt"

	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// AcceptPointMass verifies point-mass drafts. target[i] is the target's
// token after the context and drafts[:i] (its argmax under greedy
// decoding, or a draw from its filtered distribution when sampling), for
// i = 0..len(drafts). Drafts are accepted while they equal the target's
// token; the result is the accepted drafts and then the target's token at
// the first disagreement, or its bonus token after all of them. n is the
// number of drafts accepted; len(out) == n+1.
func AcceptPointMass(drafts, target []int) (out []int, n int, err error) {
	if len(target) != len(drafts)+1 {
		return nil, 0, fmt.Errorf("%w: %d target rows for %d drafts", ErrDraft, len(target), len(drafts))
	}
	for n < len(drafts) && drafts[n] == target[n] {
		n++
	}
	out = make([]int, n+1)
	copy(out, drafts[:n])
	out[n] = target[n]
	return out, n, nil
}

// AcceptDistributions verifies drafts drawn from distributions q by
// rejection sampling, so that the emitted tokens are distributed as the
// target's. p[i] is the target's filtered distribution after the context
// and drafts[:i], for i = 0..len(drafts)-1; bonus is the target's draw
// after all the drafts (used when every draft is accepted). Draft i is
// accepted with probability min(1, p[i][x]/q[i][x]) (x = drafts[i]); at
// the first rejection a token is drawn from norm(max(0, p[i] − q[i])) and
// the round ends. u supplies uniform numbers in [0, 1): one per draft
// examined and one per residual draw.
func AcceptDistributions(drafts []int, q, p [][]float64, bonus int, u func() float64) (out []int, n int, err error) {
	if len(q) != len(drafts) || len(p) < len(drafts) {
		return nil, 0, fmt.Errorf("%w: %d drafts, %d draft and %d target distributions", ErrDraft, len(drafts), len(q), len(p))
	}
	out = make([]int, 0, len(drafts)+1)
	for i, x := range drafts {
		if len(q[i]) != len(p[i]) || x < 0 || x >= len(q[i]) {
			return nil, 0, fmt.Errorf("%w: draft %d: id %d, vocabularies %d and %d", ErrDraft, i, x, len(q[i]), len(p[i]))
		}
		px, qx := p[i][x], q[i][x]
		// Accept with probability min(1, px/qx), without dividing.
		if u()*qx < px {
			out = append(out, x)
			continue
		}
		return append(out, Residual(p[i], q[i], u())), i, nil
	}
	return append(out, bonus), len(drafts), nil
}

// Residual draws, with u, from norm(max(0, p − q)): the distribution that
// makes a rejected draft's replacement, together with the accepted
// drafts, distributed as p. When p ≤ q everywhere (p == q up to rounding,
// where a rejection is a rounding event), it draws from p.
func Residual(p, q []float64, u float64) int {
	r := make([]float64, len(p))
	var sum float64
	for i := range p {
		if d := p[i] - q[i]; d > 0 {
			r[i] = d
			sum += d
		}
	}
	if sum <= 0 {
		return sample.DrawWith(p, u)
	}
	return sample.DrawWith(r, u)
}
