package sample

import (
	"math"
	"testing"
)

func TestArgmaxTiesToLowest(t *testing.T) {
	tests := []struct {
		logits []float32
		want   int
	}{
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{5}, 0},
		{[]float32{-1, -1, -1}, 0},
		{[]float32{0, 0, 7, 7}, 2},
	}
	for _, tt := range tests {
		if got := Argmax(tt.logits); got != tt.want {
			t.Errorf("Argmax(%v) = %d, want %d", tt.logits, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []Params{{Temp: -1}, {Temp: math.NaN()}, {TopK: -2}, {Temp: 1, TopP: 1.5}}
	for _, p := range bad {
		if _, err := New(p); err == nil {
			t.Errorf("New(%+v) succeeded", p)
		}
	}
}

func TestDistFilters(t *testing.T) {
	logits := []float32{1, 4, 2, 3, 0}
	s, _ := New(Params{Temp: 1, TopK: 3})
	d := s.Dist(logits)
	if d[0] != 0 || d[4] != 0 || d[1] <= d[3] || d[3] <= d[2] {
		t.Fatalf("top-k 3 dist %v", d)
	}
	s, _ = New(Params{Temp: 1, TopP: 0.5})
	d = s.Dist(logits)
	// softmax of [1,4,2,3,0]: p(4)≈0.636 >= 0.5 alone.
	if d[1] != 1 {
		t.Fatalf("top-p 0.5 dist %v", d)
	}
}

func TestSampleMatchesDist(t *testing.T) {
	logits := []float32{0.5, 1.5, -1, 1}
	s, _ := New(Params{Temp: 0.8, Seed: 7})
	want := append([]float64(nil), s.Dist(logits)...)
	const n = 200000
	counts := make([]float64, len(logits))
	for range n {
		counts[s.Sample(logits)]++
	}
	for i := range counts {
		got := counts[i] / n
		// 5 standard deviations of a binomial proportion.
		tol := 5 * math.Sqrt(want[i]*(1-want[i])/n)
		if math.Abs(got-want[i]) > tol {
			t.Errorf("id %d: frequency %.4f, want %.4f ± %.4f", i, got, want[i], tol)
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	logits := []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}
	run := func() []int {
		s, _ := New(Params{Temp: 1, Seed: 42})
		var ids []int
		for range 50 {
			ids = append(ids, s.Sample(logits))
		}
		return ids
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded runs differ at %d", i)
		}
	}
}
