package spectest

import (
	"math"
	"slices"
)

// ChiSquare tests observed counts against expected probabilities (one per
// cell, summing to 1). Cells expected fewer than minExpected times are
// pooled into one, and that pool, if still below minExpected, into the
// smallest remaining cell, as Pearson's approximation asks. A count in a
// cell of probability 0 gives an infinite statistic and p = 0. It returns
// the statistic, the degrees of freedom (cells after pooling − 1) and the
// p-value: the chance of a statistic at least this large if the counts
// were drawn from expected.
func ChiSquare(observed []int, expected []float64, minExpected float64) (stat float64, dof int, p float64) {
	var n float64
	for _, o := range observed {
		n += float64(o)
	}
	type cell struct{ o, e float64 }
	var cells []cell
	var pool cell
	for i, o := range observed {
		e := n * expected[i]
		if e == 0 && o > 0 {
			return math.Inf(1), len(observed) - 1, 0
		}
		if e < minExpected {
			pool.o += float64(o)
			pool.e += e
			continue
		}
		cells = append(cells, cell{float64(o), e})
	}
	if pool.e > 0 || pool.o > 0 {
		if pool.e < minExpected && len(cells) > 0 {
			i := slices.IndexFunc(cells, func(c cell) bool {
				return c.e == slices.MinFunc(cells, func(a, b cell) int { return cmpf(a.e, b.e) }).e
			})
			cells[i].o += pool.o
			cells[i].e += pool.e
		} else {
			cells = append(cells, pool)
		}
	}
	for _, c := range cells {
		d := c.o - c.e
		stat += d * d / c.e
	}
	dof = len(cells) - 1
	if dof < 1 {
		return stat, dof, 1
	}
	return stat, dof, GammaQ(float64(dof)/2, stat/2)
}

func cmpf(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// GammaQ is the regularized upper incomplete gamma function Q(a, x) =
// Γ(a, x)/Γ(a): by its power series for x < a+1, else by its continued
// fraction (evaluated with Lentz's method).
func GammaQ(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	front := math.Exp(-x + a*math.Log(x) - lg)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for n := 1; n < 10000; n++ {
			term *= x / (a + float64(n))
			sum += term
			if math.Abs(term) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return max(0, 1-sum*front)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i < 10000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return front * h
}
