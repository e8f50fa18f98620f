package spectest

import (
	"math"
	"testing"
)

func TestGammaQ(t *testing.T) {
	tests := []struct {
		dof  int
		stat float64
		p    float64
	}{
		{1, 3.841459, 0.05},
		{10, 18.307038, 0.05},
		{10, 23.209251, 0.01},
		{50, 67.504807, 0.05},
		{2, 4, math.Exp(-2)}, // dof 2: p = exp(-stat/2)
		{3, 0.351846, 0.95},
	}
	for _, tt := range tests {
		if got := GammaQ(float64(tt.dof)/2, tt.stat/2); math.Abs(got-tt.p) > 1e-5 {
			t.Errorf("chi-square dof %d stat %v: p = %v, want %v", tt.dof, tt.stat, got, tt.p)
		}
	}
}

func TestChiSquarePools(t *testing.T) {
	// 100 draws over cells expected 50, 45, 3, 2: the last two pool into
	// one cell of 5.
	stat, dof, p := ChiSquare([]int{50, 45, 3, 2}, []float64{0.5, 0.45, 0.03, 0.02}, 5)
	if dof != 2 || stat != 0 || p != 1 {
		t.Fatalf("stat %v dof %d p %v", stat, dof, p)
	}
	if _, _, p := ChiSquare([]int{1, 9}, []float64{0, 1}, 5); p != 0 {
		t.Fatalf("a count in an impossible cell: p %v", p)
	}
	// A badly wrong distribution is rejected.
	if _, _, p := ChiSquare([]int{900, 100}, []float64{0.5, 0.5}, 5); p > 1e-10 {
		t.Fatalf("900/100 against a fair coin: p %v", p)
	}
}
