package generate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/internal/spec/spectest"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
)

// significance is the chi-square tests' level. Seeds are fixed, so each
// test computes the same statistic on every run and cannot flake.
const significance = 0.001

// TestSpeculativeSamplingDistribution runs speculative sampling end to
// end (RunSpeculative on a Local backend) on a synthetic tiny model
// (shards.SynthConfig("tiny", 2)) many times with different seeds, and
// compares the joint distribution of the first three generated tokens
// (the first from the prompt's traversal, the next two from the first
// speculative round when K >= 2, else from two rounds; four are generated
// so that K is not clamped) with the target's exact one, enumerated by
// forwards of the target: 64 cells under top-k 4. Point-mass drafts give
// Run's very tokens for a seed, so their statistics coincide. Drafters: the target quantized to q4
// drawing from its own distribution at another temperature and top-k
// (verified by rejection sampling on the client, from the logits), the
// same model's point-mass argmax, and the n-gram drafter on a prompt whose
// continuation repeats.
func TestSpeculativeSamplingDistribution(t *testing.T) {
	c, err := shards.SynthConfig("tiny", 2)
	if err != nil {
		t.Fatal(err)
	}
	w, err := shards.Synth(c, ovrt.F32, 1)
	if err != nil {
		t.Fatal(err)
	}
	target, err := ovrt.Compile(w, ovrt.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	qw, err := w.Quantize(ovrt.Q4_0)
	if err != nil {
		t.Fatal(err)
	}
	draft, err := ovrt.Compile(qw, ovrt.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer draft.Close()

	p := sample.Params{Temp: 1, TopK: 4}
	greedy, _ := NewLocal(sample.Params{}, target)
	// The prompt: a start, the target's greedy continuation of it, and
	// the start again, so that the n-gram drafter proposes the
	// continuation, which the sampled target often picks.
	prompt := []int{1, 20, 30}
	g, err := Run(context.Background(), greedy, prompt, Options{MaxTokens: 6, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	prompt = append(append(append([]int{}, prompt...), g.IDs...), 7, 1, 20, 30)

	// The exact joint distribution of three tokens under top-k 4.
	smp, _ := sample.New(p)
	dist := func(seq []int) []float64 {
		l, err := greedy.Logits(context.Background(), 0, toInt32(seq), false)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float64(nil), smp.Dist(l)...)
	}
	support := func(d []float64) []int {
		var s []int
		for i, v := range d {
			if v > 0 {
				s = append(s, i)
			}
		}
		return s
	}
	want := map[[3]int]float64{}
	d1 := dist(prompt)
	for _, a := range support(d1) {
		d2 := dist(append(append([]int{}, prompt...), a))
		for _, b := range support(d2) {
			d3 := dist(append(append([]int{}, prompt...), a, b))
			for _, c := range support(d3) {
				want[[3]int{a, b, c}] = d1[a] * d2[b] * d3[c]
			}
		}
	}

	trials := 4000
	if raceDetector {
		trials = 500 // still valid, with less power: the full test runs without -race
	}
	draws := rand.New(rand.NewPCG(77, 78))
	cases := []struct {
		name string
		k    int
		d    spec.Drafter
	}{
		{"draft distribution K=2", 2, must(spec.NewDraftModel(draft, spec.ModelOptions{Sampling: sample.Params{Temp: 1.3, TopK: 6}, Uniform: draws.Float64}))},
		{"draft distribution K=1", 1, must(spec.NewDraftModel(draft, spec.ModelOptions{Sampling: sample.Params{Temp: 1.3, TopK: 6}, Uniform: draws.Float64}))},
		{"draft argmax (point mass) K=2", 2, must(spec.NewDraftModel(draft, spec.ModelOptions{Sampling: p, PointMass: true}))},
		{"ngram K=2", 2, spec.NGram{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			local, err := NewLocal(p, target)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[[3]int]int{}
			var drafted, accepted int
			// Seeds drawn at random (from a fixed seed): consecutive seeds
			// give first uniforms too evenly spread, a fit too good.
			seeds := rand.New(rand.NewPCG(5, 6))
			for range trials {
				r, err := RunSpeculative(context.Background(), local, tc.d, prompt, Options{MaxTokens: 4, EOS: -1, Seed: seeds.Uint64()}, SpecOptions{K: tc.k, Sampling: p})
				if err != nil {
					t.Fatal(err)
				}
				counts[[3]int{r.IDs[0], r.IDs[1], r.IDs[2]}]++
				drafted += r.Drafted
				accepted += r.Accepted
			}
			var obs []int
			var exp []float64
			for cell, pr := range want {
				obs = append(obs, counts[cell])
				exp = append(exp, pr)
				delete(counts, cell)
			}
			if len(counts) > 0 {
				t.Fatalf("sequences the target cannot produce: %v", counts)
			}
			stat, dof, pv := spectest.ChiSquare(obs, exp, 5)
			t.Logf("%d trials: chi2 %.2f, dof %d, p %.3g; %d of %d drafts accepted", trials, stat, dof, pv, accepted, drafted)
			if accepted == 0 || accepted == drafted {
				t.Errorf("%d of %d drafts accepted: the test does not exercise both outcomes", accepted, drafted)
			}
			if pv < significance {
				t.Fatalf("the first three tokens are not distributed as the target's: chi2 %.2f, dof %d, p %.3g", stat, dof, pv)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return v
}
