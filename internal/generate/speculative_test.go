package generate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt"
)

// toy is a backend double with a cache: it holds the tokens of one
// sequence by position, refuses a step that would leave a gap, drops what
// it held from the step's position on, and chooses the token after a
// prefix by a fixed hash of it (greedy) or of it and the row's uniform.
// A tree step's row sees the held prefix and its path.
type toy struct {
	vocab   int
	sampled bool
	counted bool // hash the prefix's length too: text that does not loop
	held    []int
	steps   []Step
}

var errGap = errors.New("toy: position past the cache")

func (b *toy) choose(prefix []int, u float64) int {
	h := uint64(14695981039346656037)
	for _, t := range prefix[max(0, len(prefix)-3):] { // a 3-gram model: it repeats itself
		h = (h ^ uint64(t)) * 1099511628211
	}
	if b.counted {
		h = (h ^ uint64(len(prefix))) * 1099511628211
	}
	if b.sampled {
		h ^= uint64(u * 4) // four likely continuations
		h *= 1099511628211
	}
	return int(h>>33) % b.vocab
}

func (b *toy) Step(ctx context.Context, s Step) (StepResult, error) {
	b.steps = append(b.steps, s)
	if s.Pos > len(b.held) {
		return StepResult{}, fmt.Errorf("%w: %d > %d", errGap, s.Pos, len(b.held))
	}
	b.held = b.held[:s.Pos]
	for _, id := range s.IDs {
		b.held = append(b.held, int(id))
	}
	rows := 1
	if s.All {
		rows = len(s.IDs)
	}
	if len(s.Uniform) != rows {
		return StepResult{}, fmt.Errorf("toy: %d uniforms for %d rows", len(s.Uniform), rows)
	}
	var out StepResult
	for r := range rows {
		i := len(s.IDs) - rows + r
		prefix := b.held[:s.Pos+i+1]
		if s.Tree != nil {
			prefix = append(slices.Clone(b.held[:s.Pos]), treePath(s.IDs, s.Tree, i)...)
		}
		out.Next = append(out.Next, b.choose(prefix, s.Uniform[r]))
	}
	if s.Walk {
		// Answer the walk's rows only, as a last stage does: a decoder
		// that reads any other row fails.
		walked, err := ovrt.Walk(s.IDs, s.Tree, s.From, func(row int) (int, error) { return out.Next[row], nil })
		if err != nil {
			return StepResult{}, err
		}
		out.Next = walked
	}
	return out, nil
}

func (b *toy) Trees() bool { return true }

// treePath returns the tokens from a tree step's root to node i.
func treePath(ids, parents []int32, i int) []int {
	var p []int
	for ; i >= 0; i = int(parents[i]) {
		p = append(p, int(ids[i]))
	}
	slices.Reverse(p)
	return p
}

// noisy drafts random tokens, some of them right: a drafter that guesses
// the toy's choice with probability hit.
type noisy struct {
	target *toy
	hit    float64
	r      *rand.Rand
}

func (d *noisy) Draft(ctx context.Context, seq []int, k int) ([]int, [][]float64, error) {
	s := slices.Clone(seq)
	var out []int
	for range k {
		x := d.target.choose(s, 0)
		if d.r.Float64() >= d.hit {
			x = d.r.IntN(d.target.vocab)
		}
		out = append(out, x)
		s = append(s, x)
	}
	return out, nil, nil
}

// TestSpeculativeIsRun: whatever the drafter and K, speculative decoding
// emits Run's tokens, in order through OnToken, and stops where and why
// Run does.
func TestSpeculativeIsRun(t *testing.T) {
	prompt := []int{1, 5, 9, 5, 9, 5}
	opts := []Options{
		{MaxTokens: 40, EOS: -1},
		{MaxTokens: 1, EOS: -1},
		{MaxTokens: 2, EOS: -1},
		{MaxTokens: 50, EOS: -1, Context: 20},
		{MaxTokens: 50, EOS: -1, Context: 7},
		{MaxTokens: 40, EOS: 3},
		{MaxTokens: 40, EOS: 3, IgnoreEOS: true},
		{MaxTokens: 30, EOS: -1, Seed: 4},
	}
	for _, sampled := range []bool{false, true} {
		for oi, o := range opts {
			want := &toy{vocab: 8, sampled: sampled}
			var wantTokens []int
			o.OnToken = func(id int) { wantTokens = append(wantTokens, id) }
			ref, err := Run(context.Background(), want, prompt, o)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(wantTokens, ref.IDs) == false {
				t.Fatalf("Run's OnToken %v, ids %v", wantTokens, ref.IDs)
			}
			for _, k := range []int{0, 1, 3, 8} {
				for _, tb := range []int{0, 6} {
					for di, mk := range []func(*toy) spec.Drafter{
						func(*toy) spec.Drafter { return spec.NGram{} },
						func(b *toy) spec.Drafter { return &noisy{target: b, hit: 0.7, r: rand.New(rand.NewPCG(1, 2))} },
						func(b *toy) spec.Drafter { return &noisy{target: b, hit: 1, r: rand.New(rand.NewPCG(1, 2))} },
						func(b *toy) spec.Drafter { return &noisy{target: b, hit: 0, r: rand.New(rand.NewPCG(1, 2))} },
						// A history that holds this very answer (drafts mostly
						// right), and one of noise (mostly wrong).
						func(*toy) spec.Drafter {
							h := spec.NewHistory(0)
							h.Add(append(slices.Clone(prompt), ref.IDs...))
							return spec.NGram{History: h}
						},
						func(*toy) spec.Drafter {
							h, r := spec.NewHistory(64), rand.New(rand.NewPCG(3, 4))
							for range 20 {
								seq := make([]int, 1+r.IntN(12))
								for i := range seq {
									seq[i] = r.IntN(8)
								}
								h.Add(seq)
							}
							return spec.NGram{History: h}
						},
					} {
						name := fmt.Sprintf("sampled=%v/opts=%d/K=%d/tree=%d/drafter=%d", sampled, oi, k, tb, di)
						b := &toy{vocab: 8, sampled: sampled}
						var got []int
						o.OnToken = func(id int) { got = append(got, id) }
						r, err := RunSpeculative(context.Background(), b, mk(b), prompt, o, SpecOptions{K: k, Tree: tb})
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if !slices.Equal(r.IDs, ref.IDs) || !slices.Equal(got, ref.IDs) || r.Stopped != ref.Stopped {
							t.Fatalf("%s: %v (%s), streamed %v; Run: %v (%s)", name, r.IDs, r.Stopped, got, ref.IDs, ref.Stopped)
						}
						if r.Accepted > r.Drafted || r.Traversals != len(b.steps) || r.Traversals > ref.Traversals {
							t.Fatalf("%s: %d of %d accepted in %d traversals (%d steps; Run %d)", name, r.Accepted, r.Drafted, r.Traversals, len(b.steps), ref.Traversals)
						}
						if di == 2 && k > 1 && len(r.IDs) > 2*k && r.Traversals > 1+(len(r.IDs)+k)/(k+1) {
							t.Fatalf("%s: a perfect drafter took %d traversals for %d tokens", name, r.Traversals, len(r.IDs))
						}
						for _, st := range b.steps {
							// The last token wanted is never fed; nor is a position past the context.
							end := st.Pos + len(st.IDs)
							if o.Context > 0 && end > o.Context {
								t.Fatalf("%s: step at %d with %d ids past the context", name, st.Pos, len(st.IDs))
							}
							for i := range st.IDs {
								if st.Tree != nil {
									end = st.Pos + len(treePath(st.IDs, st.Tree, i))
								}
								if end > len(prompt)+o.MaxTokens-1 && end > len(prompt) {
									t.Fatalf("%s: step at %d with %d ids past the length", name, st.Pos, len(st.IDs))
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestSpeculativeCounts(t *testing.T) {
	b := &toy{vocab: 8}
	r, err := RunSpeculative(context.Background(), b, &noisy{target: b, hit: 1, r: rand.New(rand.NewPCG(3, 3))}, []int{1, 2}, Options{MaxTokens: 13, EOS: -1}, SpecOptions{K: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The prompt gives 1 token, then rounds of 4 drafts + 1 give 5, 5 and
	// (clamped to the 2 left) 1 draft + 1.
	if len(r.IDs) != 13 || r.Traversals != 4 || r.Drafted != 9 || r.Accepted != 9 {
		t.Fatalf("%d ids, %d traversals, %d of %d accepted", len(r.IDs), r.Traversals, r.Accepted, r.Drafted)
	}
	if got := r.TokensPerTraversal(); got != 4 || r.AcceptanceRate() != 1 {
		t.Fatalf("tokens per traversal %v, acceptance %v", got, r.AcceptanceRate())
	}
	wantSteps := []struct{ pos, n int }{{0, 2}, {2, 5}, {7, 5}, {12, 2}}
	for i, w := range wantSteps {
		if s := b.steps[i]; s.Pos != w.pos || len(s.IDs) != w.n || i > 0 && !s.All {
			t.Fatalf("step %d: pos %d, %d ids, all %v; want pos %d, %d ids", i, s.Pos, len(s.IDs), s.All, w.pos, w.n)
		}
	}
}

// TestSpeculativeUniforms: the j-th generated token is drawn with the j-th
// number of the seed's sequence, however the rounds fall.
func TestSpeculativeUniforms(t *testing.T) {
	b := &toy{vocab: 8, sampled: true}
	if _, err := RunSpeculative(context.Background(), b, &noisy{target: b, hit: 0.5, r: rand.New(rand.NewPCG(3, 4))}, []int{1, 2}, Options{MaxTokens: 20, EOS: -1, Seed: 9}, SpecOptions{K: 3}); err != nil {
		t.Fatal(err)
	}
	u := Uniforms(9)
	var want []float64
	for range 30 {
		want = append(want, u())
	}
	g := 0
	for i, s := range b.steps {
		if i > 0 {
			g = s.Pos - 1 // the row of the token at position Pos+1 is generated token Pos+1-len(prompt)
		}
		for r, x := range s.Uniform {
			if x != want[g+r] {
				t.Fatalf("step %d row %d: uniform %v, want number %d of the seed", i, r, x, g+r)
			}
		}
	}
}

type failing struct{ err error }

func (f failing) Draft(context.Context, []int, int) ([]int, [][]float64, error) {
	return nil, nil, f.err
}

type tooMany struct{}

func (tooMany) Draft(ctx context.Context, seq []int, k int) ([]int, [][]float64, error) {
	return make([]int, k+1), nil, nil
}

type withQ struct{}

func (withQ) Draft(ctx context.Context, seq []int, k int) ([]int, [][]float64, error) {
	return []int{1}, [][]float64{make([]float64, 8)}, nil
}

func TestSpeculativeErrors(t *testing.T) {
	boom := errors.New("boom")
	o := Options{MaxTokens: 5, EOS: -1}
	tests := []struct {
		name string
		d    spec.Drafter
		want error
	}{
		{"drafter error", failing{boom}, boom},
		{"too many drafts", tooMany{}, spec.ErrDraft},
		{"distributions without logits", withQ{}, ErrNoLogits},
	}
	for _, tt := range tests {
		if _, err := RunSpeculative(context.Background(), &toy{vocab: 8}, tt.d, []int{1}, o, SpecOptions{K: 2}); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := RunSpeculative(context.Background(), &toy{vocab: 8}, spec.NGram{}, make([]int, 9), Options{MaxTokens: 1, Context: 8}, SpecOptions{}); !errors.Is(err, ErrPromptTooLong) {
		t.Errorf("long prompt: %v", err)
	}
	if r, err := RunSpeculative(context.Background(), &toy{vocab: 8}, spec.NGram{}, []int{1}, Options{}, SpecOptions{}); err != nil || len(r.IDs) != 0 {
		t.Errorf("no tokens asked: %v, %v", r.IDs, err)
	}
	// A backend that leaves out the rows a walk reads: chains and trees.
	for _, tree := range []int{-1, 4} {
		_, err := RunSpeculative(context.Background(), holes{&toy{vocab: 8}}, spec.NGram{}, []int{1, 2, 3, 1, 2, 3, 1, 2}, Options{MaxTokens: 8, EOS: -1}, SpecOptions{K: 3, Tree: tree})
		if !errors.Is(err, ErrNoRow) {
			t.Errorf("tree %d: a backend without the walk's rows: %v, want ErrNoRow", tree, err)
		}
	}
}

// holes answers -1 for every row of a step with a walk.
type holes struct{ *toy }

func (h holes) Step(ctx context.Context, s Step) (StepResult, error) {
	out, err := h.toy.Step(ctx, s)
	if s.Walk {
		for i := range out.Next {
			out.Next[i] = -1
		}
	}
	return out, err
}

func TestSpeculativeTiming(t *testing.T) {
	clock := time.Unix(0, 0)
	tick := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	b := &toy{vocab: 8}
	r, err := RunSpeculative(context.Background(), b, spec.NGram{}, []int{1, 2, 1, 2}, Options{MaxTokens: 10, EOS: -1, Now: tick}, SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Prefill <= 0 || r.Decode <= 0 || r.DecodeRate() <= 0 || r.DraftTime <= 0 || r.DraftTime > r.Decode {
		t.Fatalf("prefill %v decode %v draft %v", r.Prefill, r.Decode, r.DraftTime)
	}
}

// TestSpeculativeTree: with a history that holds the answer and mutated
// copies of it, the n-gram drafter's trees branch, accepted paths leave
// the leading chain (so tokens are fed again as a trunk, which the toy's
// choices would notice if done wrong), and the output is still Run's,
// greedy and sampled.
func TestSpeculativeTree(t *testing.T) {
	prompt := []int{1, 5, 9, 5, 9, 5}
	for _, sampled := range []bool{false, true} {
		o := Options{MaxTokens: 60, EOS: -1, Seed: 7}
		ref, err := Run(context.Background(), &toy{vocab: 64, counted: true, sampled: sampled}, prompt, o)
		if err != nil {
			t.Fatal(err)
		}
		// The answer twice, and three times a copy that differs from it
		// every 7th token: the heavier branch is wrong there, and the
		// right token is the leading chain's sibling.
		h := spec.NewHistory(0)
		answer := append(slices.Clone(prompt), ref.IDs...)
		wrong := slices.Clone(answer)
		for i := len(prompt) + 3; i < len(wrong); i += 7 {
			wrong[i] = (wrong[i] + 1) % 64
		}
		for _, seq := range [][]int{answer, wrong, answer, wrong, wrong} {
			h.Add(seq)
		}
		for _, tb := range []int{3, 12} {
			b := &toy{vocab: 64, counted: true, sampled: sampled}
			res, err := RunSpeculative(context.Background(), b, spec.NGram{History: h}, prompt, o, SpecOptions{Tree: tb, MaxK: 4})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.IDs, ref.IDs) {
				t.Fatalf("sampled=%v tree=%d: %v, Run %v", sampled, tb, res.IDs, ref.IDs)
			}
			var trees int
			for _, st := range b.steps {
				for i, p := range st.Tree {
					if p != int32(i-1) {
						trees++ // a branching tree
						break
					}
				}
			}
			if tb == 12 && (trees == 0 || res.Refed == 0) { // 3 nodes hold only the leading chain; 12 its siblings too
				t.Fatalf("sampled=%v tree=%d: %d branching trees in %d steps, %d tokens fed again", sampled, tb, trees, len(b.steps), res.Refed)
			}
			if res.Traversals >= ref.Traversals/2 {
				t.Fatalf("sampled=%v tree=%d: %d traversals for %d tokens (Run %d)", sampled, tb, res.Traversals, len(res.IDs), ref.Traversals)
			}
			t.Logf("sampled=%v tree=%d: %d traversals, %d branching trees, %d of %d drafts accepted, %d fed again", sampled, tb, res.Traversals, trees, res.Accepted, res.Drafted, res.Refed)
		}
	}
}

// clocked is a toy whose steps take time on an injected clock: a route
// whose round trips come and go (slow while slow() says so).
type clocked struct {
	*toy
	now  time.Time
	slow func(step int) bool
}

func (c *clocked) Step(ctx context.Context, s Step) (StepResult, error) {
	if c.slow(len(c.steps)) {
		c.now = c.now.Add(300*time.Millisecond + time.Duration(len(s.IDs))*time.Millisecond)
	} else {
		c.now = c.now.Add(time.Duration(len(s.IDs)) * 100 * time.Microsecond)
	}
	return c.toy.Step(ctx, s)
}

// TestSpeculativeTreeAndChain: with auto-K, rounds draft trees while the
// route is slow and chains while it is fast; a chain round right after a
// tree that left its leading chain must not reuse the tree's slots, and
// the output stays Run's.
func TestSpeculativeTreeAndChain(t *testing.T) {
	prompt := []int{1, 5, 9, 5, 9, 5}
	o := Options{MaxTokens: 200, EOS: -1}
	ref, err := Run(context.Background(), &toy{vocab: 64, counted: true}, prompt, o)
	if err != nil {
		t.Fatal(err)
	}
	h := spec.NewHistory(0)
	answer := append(slices.Clone(prompt), ref.IDs...)
	wrong := slices.Clone(answer)
	for i := len(prompt) + 3; i < len(wrong); i += 7 {
		wrong[i] = (wrong[i] + 1) % 64
	}
	for _, seq := range [][]int{answer, wrong, answer, wrong, wrong} {
		h.Add(seq)
	}
	b := &clocked{toy: &toy{vocab: 64, counted: true}, slow: func(step int) bool { return step/12%2 == 0 }}
	o.Now = func() time.Time { return b.now }
	res, err := RunSpeculative(context.Background(), b, spec.NGram{History: h}, prompt, o, SpecOptions{MaxK: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, ref.IDs) {
		t.Fatalf("%v\nRun %v", res.IDs, ref.IDs)
	}
	trees, chains := 0, 0
	for _, st := range b.steps[1:] {
		if st.Tree != nil {
			trees++
		} else if len(st.IDs) > 1 {
			chains++
		}
	}
	if trees == 0 || chains == 0 || res.Refed == 0 {
		t.Fatalf("%d tree steps, %d chain steps, %d tokens fed again", trees, chains, res.Refed)
	}
	t.Logf("%d traversals: %d trees, %d chains; %d fed again", res.Traversals, trees, chains, res.Refed)
}

func TestNextTree(t *testing.T) {
	fast := spec.NewTuner(spec.Costs{}, 0, 0)
	fast.ObserveStep(1, time.Millisecond)
	fast.ObserveStep(5, 2*time.Millisecond)
	slow := spec.NewTuner(spec.Costs{}, 0, 0)
	slow.ObserveStep(1, 300*time.Millisecond)
	slow.ObserveStep(9, 304*time.Millisecond)
	for _, tt := range []struct {
		name   string
		trees  bool
		so     SpecOptions
		tuner  *spec.Tuner
		behind bool
		want   func(int) bool
	}{
		{"no trees", false, SpecOptions{}, slow, false, func(b int) bool { return b == 0 }},
		{"fast route: chains", true, SpecOptions{}, fast, false, func(b int) bool { return b == 0 }},
		{"slow route: a tree", true, SpecOptions{}, slow, false, func(b int) bool { return b > spec.DefaultMaxK }},
		{"fast route, behind: a tree", true, SpecOptions{}, fast, true, func(b int) bool { return b >= 1 }},
		{"fixed K, behind", true, SpecOptions{K: 3}, nil, true, func(b int) bool { return b == 3 }},
		{"fixed K: chains", true, SpecOptions{K: 3}, nil, false, func(b int) bool { return b == 0 }},
		{"fixed tree", true, SpecOptions{K: 3, Tree: 20}, nil, false, func(b int) bool { return b == 20 }},
		{"slow route, 64 streams: chains", true, SpecOptions{Streams: func() int { return 64 }}, slow, false, func(b int) bool { return b == 0 }},
		{"slow route, 1 stream: a tree", true, SpecOptions{Streams: func() int { return 1 }}, slow, false, func(b int) bool { return b > spec.DefaultMaxK }},
		{"fixed tree, 64 streams", true, SpecOptions{Tree: 20, Streams: func() int { return 64 }}, slow, false, func(b int) bool { return b == 20 }},
	} {
		if got := nextTree(tt.trees, tt.so, tt.tuner, tt.behind); !tt.want(got) {
			t.Errorf("%s: %d nodes", tt.name, got)
		}
	}
}

// One tree round in eight verifies twice the budget, so that the tuner's
// compute fit sees sizes apart.
func TestNextTreeExplores(t *testing.T) {
	slow := spec.NewTuner(spec.Costs{}, 0, 0)
	slow.ObserveStep(1, 300*time.Millisecond)
	slow.ObserveStep(9, 304*time.Millisecond)
	sizes := map[int]int{}
	for range 16 {
		sizes[nextTree(true, SpecOptions{}, slow, false)]++
	}
	if len(sizes) != 2 {
		t.Fatalf("tree sizes %v, want two", sizes)
	}
	var small, big int
	for b := range sizes {
		if small == 0 || b < small {
			small = b
		}
		big = max(big, b)
	}
	if sizes[small] != 14 || sizes[big] != 2 || big != min(2*small, spec.DefaultMaxTree) {
		t.Errorf("tree sizes %v: want 14 of one size and 2 of twice it", sizes)
	}
}
