package generate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// script is a test double for a backend: it answers each step with the
// next id of a fixed list and records what it was asked.
type script struct {
	next  []int
	steps []Step
}

func (s *script) Step(ctx context.Context, st Step) (StepResult, error) {
	s.steps = append(s.steps, st)
	if len(s.next) == 0 {
		return StepResult{}, errors.New("script exhausted")
	}
	id := s.next[0]
	s.next = s.next[1:]
	rows := 1
	if st.All {
		rows = len(st.IDs)
	}
	out := StepResult{Next: make([]int, rows)}
	out.Next[rows-1] = id
	return out, nil
}

func TestStopsAndPositions(t *testing.T) {
	tests := []struct {
		name      string
		next      []int
		opts      Options
		wantIDs   []int
		wantWhy   string
		wantSteps int
	}{
		{"length", []int{5, 6, 7, 8}, Options{MaxTokens: 3, EOS: 2}, []int{5, 6, 7}, "length", 3},
		{"eos", []int{5, 2, 7}, Options{MaxTokens: 5, EOS: 2}, []int{5, 2}, "eos", 2},
		{"ignore eos", []int{5, 2, 7}, Options{MaxTokens: 3, EOS: 2, IgnoreEOS: true}, []int{5, 2, 7}, "length", 3},
		{"context", []int{5, 6, 7, 8, 9}, Options{MaxTokens: 10, EOS: -1, Context: 5}, []int{5, 6, 7, 8}, "context", 4}, // 5 positions: the last token comes from position 4
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{next: tt.next}
			r, err := Run(context.Background(), s, []int{1, 2}, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.IDs) != len(tt.wantIDs) || r.Stopped != tt.wantWhy || len(s.steps) != tt.wantSteps {
				t.Fatalf("ids %v stopped %q after %d steps, want %v %q %d", r.IDs, r.Stopped, len(s.steps), tt.wantIDs, tt.wantWhy, tt.wantSteps)
			}
			for i := range r.IDs {
				if r.IDs[i] != tt.wantIDs[i] {
					t.Fatalf("ids %v, want %v", r.IDs, tt.wantIDs)
				}
			}
			// The prompt goes at 0, then each id at the next position.
			if s.steps[0].Pos != 0 || len(s.steps[0].IDs) != 2 {
				t.Fatalf("first step %+v", s.steps[0])
			}
			for i, st := range s.steps[1:] {
				if st.Pos != 2+i || len(st.IDs) != 1 || int(st.IDs[0]) != r.IDs[i] {
					t.Fatalf("step %d: %+v", i+1, st)
				}
			}
		})
	}
}

func TestUniformsFollowTheSeed(t *testing.T) {
	run := func(seed uint64) []float64 {
		s := &script{next: []int{3, 4, 5, 6}}
		if _, err := Run(context.Background(), s, []int{1}, Options{MaxTokens: 4, Seed: seed, EOS: -1}); err != nil {
			t.Fatal(err)
		}
		var us []float64
		for _, st := range s.steps {
			us = append(us, st.Uniform...)
		}
		return us
	}
	a, b, c := run(9), run(9), run(10)
	u := Uniforms(9)
	for i := range a {
		if a[i] != b[i] || a[i] != u() {
			t.Fatalf("seed 9 gave %v and %v", a, b)
		}
	}
	if a[0] == c[0] && a[1] == c[1] {
		t.Fatalf("seeds 9 and 10 gave the same numbers")
	}
}

func TestRates(t *testing.T) {
	clock := time.Unix(0, 0)
	tick := func() time.Time { clock = clock.Add(10 * time.Millisecond); return clock }
	s := &script{next: []int{3, 4, 5}}
	r, err := Run(context.Background(), s, []int{1, 2, 3, 4}, Options{MaxTokens: 3, EOS: -1, Now: tick})
	if err != nil {
		t.Fatal(err)
	}
	if r.Prefill != 10*time.Millisecond || r.PrefillRate(4) != 400 {
		t.Fatalf("prefill %v, %v tok/s", r.Prefill, r.PrefillRate(4))
	}
	if r.DecodeRate() <= 0 {
		t.Fatalf("decode rate %v", r.DecodeRate())
	}
}

func TestPromptErrors(t *testing.T) {
	if _, err := Run(context.Background(), &script{}, nil, Options{MaxTokens: 1}); err == nil {
		t.Fatal("empty prompt accepted")
	}
	if _, err := Run(context.Background(), &script{}, make([]int, 9), Options{MaxTokens: 1, Context: 8}); !errors.Is(err, ErrPromptTooLong) {
		t.Fatalf("long prompt: %v", err)
	}
}

// TestPromptLogitsKeepTheDraw: asking for the prompt's logits must not
// change which number the first token is drawn with.
func TestPromptLogitsKeepTheDraw(t *testing.T) {
	first := func(logits bool) float64 {
		s := &script{next: []int{3}}
		o := Options{MaxTokens: 1, Seed: 4, EOS: -1}
		if logits {
			o.OnPromptLogits = func([]float32) {}
		}
		if _, err := Run(context.Background(), s, []int{1, 2, 3}, o); err != nil {
			t.Fatal(err)
		}
		u := s.steps[0].Uniform
		return u[len(u)-1]
	}
	if a, b := first(false), first(true); a != b || a == 0 {
		t.Fatalf("last-row uniform %v with --logits-out, %v without", b, a)
	}
}
