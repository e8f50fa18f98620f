package generate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// storyPrompt repeats names and phrases, as stories do: the n-gram
// drafter's good case.
const storyPrompt = "Once upon a time, there was a little girl named Lily. Lily loved to play in the park with her dog Max. One day, Lily and Max went to the park"

type stories struct {
	w      *ovrt.Weights
	target *ovrt.Model
	draft  *ovrt.Model // stories15M quantized to q4: a cheaper model with the same vocabulary
	prompt []int
	tok    *tokenizer.Tokenizer
}

var (
	storiesOnce sync.Once
	story       *stories
	storyErr    error
)

func loadStories(t testing.TB) *stories {
	t.Helper()
	model, tok := testmodel.Stories15M(t)
	storiesOnce.Do(func() {
		s := &stories{}
		if s.w, storyErr = checkpoint.LoadLlama2C(model, 0, 0); storyErr != nil {
			return
		}
		// One thread: the machine is shared, and spinning workers suffer
		// most from that (the tokens do not depend on it).
		if s.target, storyErr = ovrt.Compile(s.w, ovrt.WithThreads(1)); storyErr != nil {
			return
		}
		q, err := s.w.Quantize(ovrt.Q4_0)
		if err != nil {
			storyErr = err
			return
		}
		if s.draft, storyErr = ovrt.Compile(q, ovrt.WithThreads(1)); storyErr != nil {
			return
		}
		tk, err := tokenizer.LoadFor(tok, s.w.Config.Vocab)
		if err != nil {
			storyErr = err
			return
		}
		s.prompt = tk.Encode(storyPrompt, true)
		s.tok = tk
		story = s
	})
	if storyErr != nil {
		t.Fatal(storyErr)
	}
	return story
}

func (s *stories) local(t testing.TB, p sample.Params) *Local {
	t.Helper()
	l, err := NewLocal(p, s.target)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (s *stories) drafter(t testing.TB, p sample.Params, seed uint64) *spec.DraftModel {
	t.Helper()
	d, err := spec.NewDraftModel(s.draft, spec.ModelOptions{Sampling: p, Uniform: rand.New(rand.NewPCG(seed, 7)).Float64})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSpeculativeStories15M is the acceptance test: on stories15M in
// process, speculative greedy decoding gives plain greedy decoding's
// tokens for K = 1, 3, 8 and auto, with the n-gram drafter (chains, and
// trees of 24 nodes drafted from a history of near-copies of the answer)
// and with a draft model; and sampled decoding with point-mass drafts
// gives Run's tokens for the same seed.
func TestSpeculativeStories15M(t *testing.T) {
	s := loadStories(t)
	ctx := context.Background()
	for _, p := range []sample.Params{{}, {Temp: 0.8, TopP: 0.9, Seed: 5}} {
		// Local sampling sorts the vocabulary per row: sampled runs are
		// slower, and shorter.
		n := 48
		if !p.Greedy() {
			n = 20
		}
		if raceDetector {
			n /= 2
		}
		o := Options{MaxTokens: n, EOS: 2, Seed: p.Seed, Context: s.w.Config.Context}
		ref, err := Run(ctx, s.local(t, p), s.prompt, o)
		if err != nil {
			t.Fatal(err)
		}
		// Near-copies of the answer: one every 5th token off by one, or
		// every 3rd; the trees branch where they disagree.
		h := spec.NewHistory(0)
		for _, every := range []int{5, 3, 5} {
			seq := append(slices.Clone(s.prompt), ref.IDs...)
			for i := len(s.prompt) + 2; i < len(seq); i += every {
				seq[i] = (seq[i] + 1) % s.w.Config.Vocab
			}
			h.Add(seq)
		}
		h.Add(append(slices.Clone(s.prompt), ref.IDs...))
		drafters := []struct {
			name string
			mk   func() spec.Drafter
			tree int
		}{
			{"ngram", func() spec.Drafter { return spec.NGram{} }, -1},
			{"ngram-history-tree", func() spec.Drafter { return spec.NGram{History: h} }, 24},
			{"draft-q4-argmax", func() spec.Drafter {
				d, _ := spec.NewDraftModel(s.draft, spec.ModelOptions{Sampling: p, PointMass: true})
				return d
			}, 0},
		}
		for _, d := range drafters {
			for _, k := range []int{1, 3, 8, 0} {
				t.Run(fmt.Sprintf("temp=%v/%s/K=%d", p.Temp, d.name, k), func(t *testing.T) {
					r, err := RunSpeculative(ctx, s.local(t, p), d.mk(), s.prompt, o, SpecOptions{K: k, Sampling: p, Tree: d.tree})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(r.IDs, ref.IDs) || r.Stopped != ref.Stopped {
						t.Fatalf("speculative\n%v (%s)\nplain\n%v (%s)", r.IDs, r.Stopped, ref.IDs, ref.Stopped)
					}
					t.Logf("%d tokens in %d traversals (plain: %d); %d of %d drafts accepted (%.0f%%), %d fed again",
						len(r.IDs), r.Traversals, ref.Traversals, r.Accepted, r.Drafted, 100*r.AcceptanceRate(), r.Refed)
					if d.tree > 0 && r.Refed == 0 {
						t.Errorf("no accepted path left a tree's leading chain")
					}
				})
			}
		}
	}
}

// TestSpeculativeStories15MDraftSampling: a draft model's own
// distributions, verified by rejection sampling on the client, give a
// valid generation (every token drawn from the target's filtered
// distribution, so inside its top-k) and accept drafts.
func TestSpeculativeStories15MDraftSampling(t *testing.T) {
	s := loadStories(t)
	p := sample.Params{Temp: 1, TopK: 8, Seed: 3}
	n := 24
	if raceDetector {
		n = 12
	}
	o := Options{MaxTokens: n, EOS: -1, Seed: p.Seed, Context: s.w.Config.Context}
	var seq []int
	seq = append(seq, s.prompt...)
	check := s.local(t, sample.Params{})
	o.OnToken = func(id int) {
		logits, err := check.Logits(context.Background(), 0, toInt32(seq), false)
		if err != nil {
			t.Fatal(err)
		}
		smp, _ := sample.New(p)
		if smp.Dist(logits)[id] == 0 {
			t.Errorf("token %d after %d tokens is outside the target's top-%d", id, len(seq), p.TopK)
		}
		seq = append(seq, id)
	}
	r, err := RunSpeculative(context.Background(), s.local(t, p), s.drafter(t, p, 1), s.prompt, o, SpecOptions{K: 4, Sampling: p})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.IDs) != n || r.Accepted == 0 || r.Drafted == 0 {
		t.Fatalf("%d tokens, %d of %d accepted", len(r.IDs), r.Accepted, r.Drafted)
	}
	t.Logf("%d of %d drafts accepted (%.0f%%), %.2f tokens per traversal", r.Accepted, r.Drafted, 100*r.AcceptanceRate(), r.TokensPerTraversal())
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
