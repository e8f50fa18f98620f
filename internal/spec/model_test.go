package spec

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
)

func tinyModel(t testing.TB, layers int, seed uint64) *ovrt.Model {
	t.Helper()
	c, err := shards.SynthConfig("tiny", layers)
	if err != nil {
		t.Fatal(err)
	}
	w, err := shards.Synth(c, ovrt.F32, seed)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ovrt.Compile(w, ovrt.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// greedyFrom decodes k tokens after seq with a fresh request.
func greedyFrom(t *testing.T, m *ovrt.Model, seq []int, k int) []int {
	t.Helper()
	r := m.NewRequest()
	ids := make([]int32, len(seq))
	for i, s := range seq {
		ids[i] = int32(s)
	}
	var out []int
	res, err := r.Infer(ovrt.Step{Pos: 0, Tokens: ids})
	for len(out) < k && err == nil {
		out = append(out, sample.Argmax(res.Logits))
		res, err = r.Infer(ovrt.Step{Pos: len(seq) + len(out) - 1, Tokens: []int32{int32(out[len(out)-1])}})
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDraftModelRewinds: whatever sequences it is handed, in whatever
// order, the drafter proposes what a fresh run of its model would.
func TestDraftModelRewinds(t *testing.T) {
	m := tinyModel(t, 2, 5)
	d, err := NewDraftModel(m, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := []int{1, 40, 41, 42}
	steps := []struct {
		name string
		seq  []int
		k    int
	}{
		{"first", a, 4},
		{"all accepted plus a bonus", nil, 3}, // filled below
		{"rewind into the prompt", []int{1, 40, 99}, 5},
		{"same sequence again", []int{1, 40, 99}, 2},
		{"unrelated", []int{1, 7}, 1},
		{"k zero", []int{1, 7}, 0},
	}
	for i, s := range steps {
		if i == 1 {
			first := greedyFrom(t, m, a, 4)
			s.seq = append(slices.Clone(a), append(first, 300)...)
		}
		got, q, err := d.Draft(ctx, s.seq, s.k)
		if err != nil || q != nil {
			t.Fatalf("%s: q %v err %v", s.name, q, err)
		}
		want := []int(nil)
		if s.k > 0 {
			want = greedyFrom(t, m, s.seq, s.k)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: drafted %v, a fresh run gives %v", s.name, got, want)
		}
	}
}

func TestDraftModelSamples(t *testing.T) {
	m := tinyModel(t, 1, 6)
	p := sample.Params{Temp: 0.9, TopK: 20}
	r := rand.New(rand.NewPCG(1, 2))
	d, err := NewDraftModel(m, ModelOptions{Sampling: p, Uniform: r.Float64})
	if err != nil {
		t.Fatal(err)
	}
	seq := []int{1, 10, 11}
	toks, q, err := d.Draft(context.Background(), seq, 4)
	if err != nil || len(toks) != 4 || len(q) != 4 {
		t.Fatalf("drafted %v with %d distributions, %v", toks, len(q), err)
	}
	for i, dist := range q {
		var sum float64
		nonzero := 0
		for _, v := range dist {
			sum += v
			if v > 0 {
				nonzero++
			}
		}
		if math.Abs(sum-1) > 1e-9 || nonzero != 20 || dist[toks[i]] == 0 {
			t.Fatalf("row %d: sum %v, %d ids, q(draft) %v", i, sum, nonzero, dist[toks[i]])
		}
	}
	// Point-mass drafts while sampling: the argmax, no distributions.
	pm, err := NewDraftModel(m, ModelOptions{Sampling: p, PointMass: true})
	if err != nil {
		t.Fatal(err)
	}
	toks, q, err = pm.Draft(context.Background(), seq, 3)
	if err != nil || q != nil || !slices.Equal(toks, greedyFrom(t, m, seq, 3)) {
		t.Fatalf("point-mass drafts %v, q %v, %v", toks, q, err)
	}
	if _, err := NewDraftModel(m, ModelOptions{Sampling: p}); !errors.Is(err, ErrDraftModel) {
		t.Fatalf("sampling without random numbers: %v", err)
	}
}

func TestDraftModelContext(t *testing.T) {
	m := tinyModel(t, 1, 7)
	d, _ := NewDraftModel(m, ModelOptions{})
	n := m.Config().Context
	seq := make([]int, n-2)
	for i := range seq {
		seq[i] = i % 100
	}
	toks, _, err := d.Draft(context.Background(), seq, 8)
	if err != nil || len(toks) != 3 { // positions n-2 and n-1 take drafts 1 and 2; the 3rd is never fed
		t.Fatalf("near the end of the context: %v, %v", toks, err)
	}
	toks, _, err = d.Draft(context.Background(), make([]int, n+1), 8)
	if err != nil || toks != nil {
		t.Fatalf("past the context: %v, %v", toks, err)
	}
}

func TestEarlyExit(t *testing.T) {
	m := tinyModel(t, 4, 8)
	w := m.Weights()
	v, err := EarlyExit(w, 2)
	if err != nil || v.Config.Layers != 2 || v.End != 2 {
		t.Fatalf("EarlyExit: %v", err)
	}
	if _, err := EarlyExit(w, 5); !errors.Is(err, ErrDraftModel) {
		t.Fatalf("5 of 4 layers: %v", err)
	}
	part, err := w.Slice(0, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EarlyExit(part, 1); !errors.Is(err, ErrDraftModel) {
		t.Fatalf("a slice without the head: %v", err)
	}
	pm, err := ovrt.Compile(part)
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	if _, err := NewDraftModel(pm, ModelOptions{}); !errors.Is(err, ErrDraftModel) {
		t.Fatalf("a draft model without the head: %v", err)
	}
}
