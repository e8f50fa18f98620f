package ovrt_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

func bitsEqual(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

var prompts = [][]int{
	{1, 9038, 2501, 263, 931, 29892, 727, 471},
	{1, 450, 8338, 265},
	{1, 4335, 322, 670, 11203, 3512, 304, 278, 14089, 29889, 2688},
}

func logitsAll(t *testing.T, m *ovrt.Model, ids []int) []float32 {
	t.Helper()
	res, err := m.NewRequest().Infer(ovrt.Step{Tokens: ids32(ids), Want: ovrt.WantAll})
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), res.Logits...)
}

func TestThreadCountDoesNotChangeBits(t *testing.T) {
	for _, load := range []func(testing.TB) *ovrt.Weights{loadStories, loadGQA} {
		w := load(t)
		one := compile(t, w, ovrt.WithThreads(1))
		two := compile(t, w, ovrt.WithThreads(2))
		three := compile(t, w, ovrt.WithThreads(3))
		ovrt.SetParallelThreshold(two, 0) // split every product and attention
		ovrt.SetParallelThreshold(three, 0)
		for _, p := range prompts {
			p := slices.Clone(p)
			for i := range p {
				p[i] %= w.Config.Vocab
			}
			a, b, c := logitsAll(t, one, p), logitsAll(t, two, p), logitsAll(t, three, p)
			if i := bitsEqual(a, b); i >= 0 {
				t.Fatalf("1 vs 2 threads differ at %d: %v vs %v", i, a[i], b[i])
			}
			if i := bitsEqual(a, c); i >= 0 {
				t.Fatalf("1 vs 3 threads differ at %d", i)
			}
		}
	}
}

func TestBatchDoesNotChangeBits(t *testing.T) {
	w := loadStories(t)
	m := compile(t, w)
	// Alone: each prompt prefilled, then one decode step.
	alone := make([][]float32, len(prompts))
	for i, p := range prompts {
		r := m.NewRequest()
		if _, err := r.Infer(ovrt.Step{Tokens: ids32(p[:len(p)-1])}); err != nil {
			t.Fatal(err)
		}
		res, err := r.Infer(ovrt.Step{Pos: len(p) - 1, Tokens: ids32(p[len(p)-1:])})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = append([]float32(nil), res.Logits...)
	}
	// Together: the same requests advanced in shared batches, with an
	// unrelated prefill riding along in the last one.
	reqs := make([]*ovrt.Request, len(prompts))
	var steps []ovrt.Step
	for i, p := range prompts {
		reqs[i] = m.NewRequest()
		steps = append(steps, ovrt.Step{Req: reqs[i], Tokens: ids32(p[:len(p)-1])})
	}
	for _, r := range m.Forward(steps) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	steps = steps[:0]
	for i, p := range prompts {
		steps = append(steps, ovrt.Step{Req: reqs[i], Pos: len(p) - 1, Tokens: ids32(p[len(p)-1:])})
	}
	steps = append(steps, ovrt.Step{Req: m.NewRequest(), Tokens: ids32(prompts[2])})
	res := m.Forward(steps)
	for i := range prompts {
		if res[i].Err != nil {
			t.Fatal(res[i].Err)
		}
		if j := bitsEqual(alone[i], res[i].Logits); j >= 0 {
			t.Fatalf("prompt %d: batched logits differ from alone at %d", i, j)
		}
	}
}

func TestRewindByPosition(t *testing.T) {
	m := compile(t, loadStories(t))
	// Write a wrong continuation, then overwrite from position 4: the
	// result must equal a fresh run of the right sequence, bit for bit.
	right := []int{1, 9038, 2501, 263, 931, 29892}
	wrong := []int{1, 9038, 2501, 263, 450, 8338, 265, 29889}
	r := m.NewRequest()
	if _, err := r.Infer(ovrt.Step{Tokens: ids32(wrong)}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Infer(ovrt.Step{Pos: 4, Tokens: ids32(right[4:]), Want: ovrt.WantAll})
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != len(right) {
		t.Fatalf("Len = %d after rewind, want %d", r.Len(), len(right))
	}
	fresh := logitsAll(t, m, right)
	vocab := m.Config().Vocab
	if i := bitsEqual(fresh[4*vocab:], res.Logits); i >= 0 {
		t.Fatalf("rewound logits differ at %d", i)
	}
}

func TestShardChainEqualsWhole(t *testing.T) {
	w := loadStories(t)
	whole := compile(t, w)
	// Each cut: layer range and head rows of every stage.
	cuts := [][][4]int{
		{{0, 3, 0, 0}, {3, 6, 0, 0}},
		{{0, 1, 0, 0}, {1, 5, 0, 0}, {5, 6, 0, 0}},
		{{0, 6, 0, 16000}, {6, 6, 16000, 32000}},
		{{0, 4, 0, 0}, {4, 6, 0, 9984}, {6, 6, 9984, 32000}},
	}
	for _, cut := range cuts {
		var chain []*ovrt.Model
		for _, c := range cut {
			v, err := w.Slice(c[0], c[1], c[2], c[3])
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, compile(t, v))
		}
		local, err := generate.NewLocal(sample.Params{}, chain...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range prompts {
			want := logitsAll(t, whole, p)
			got, err := local.Logits(t.Context(), 0, ids32(p), true)
			if err != nil {
				t.Fatal(err)
			}
			if i := bitsEqual(want, got); i >= 0 {
				t.Fatalf("cut %v: chained logits differ at %d", cut, i)
			}
		}
	}
	// A chain with a gap is refused.
	a, _ := w.Slice(0, 3, 0, 0)
	b, _ := w.Slice(4, 6, 0, 0)
	if _, err := generate.NewLocal(sample.Params{}, compile(t, a), compile(t, b)); err == nil {
		t.Fatal("a chain missing layer 3 was accepted")
	}
}

func TestForwardErrors(t *testing.T) {
	w := loadStories(t)
	m := compile(t, w)
	other := compile(t, w)
	c := m.Config()
	mid, err := w.Slice(2, 4, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	stage := compile(t, mid)

	r := m.NewRequest()
	if _, err := r.Infer(ovrt.Step{Tokens: []int32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		m    *ovrt.Model
		step ovrt.Step
		want error
	}{
		{"gap", m, ovrt.Step{Req: r, Pos: 5, Tokens: []int32{1}}, ovrt.ErrPosition},
		{"negative position", m, ovrt.Step{Req: r, Pos: -1, Tokens: []int32{1}}, ovrt.ErrPosition},
		{"past context", m, ovrt.Step{Req: r, Pos: 3, Tokens: make([]int32, c.Context)}, ovrt.ErrContextFull},
		{"token too large", m, ovrt.Step{Req: r, Pos: 3, Tokens: []int32{int32(c.Vocab)}}, ovrt.ErrTokenRange},
		{"negative token", m, ovrt.Step{Req: r, Pos: 3, Tokens: []int32{-1}}, ovrt.ErrTokenRange},
		{"no input", m, ovrt.Step{Req: r, Pos: 3}, ovrt.ErrBadInput},
		{"hidden to first stage", m, ovrt.Step{Req: r, Pos: 3, Hidden: make([]float32, c.Dim)}, ovrt.ErrBadInput},
		{"other model's request", other, ovrt.Step{Req: r, Pos: 3, Tokens: []int32{1}}, ovrt.ErrWrongModel},
		{"tokens to middle stage", stage, ovrt.Step{Req: stage.NewRequest(), Tokens: []int32{1}}, ovrt.ErrBadInput},
		{"ragged hidden", stage, ovrt.Step{Req: stage.NewRequest(), Hidden: make([]float32, c.Dim+1)}, ovrt.ErrBadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.m.Forward([]ovrt.Step{tt.step})
			if !errors.Is(res[0].Err, tt.want) {
				t.Fatalf("err = %v, want %v", res[0].Err, tt.want)
			}
		})
	}
	if r.Len() != 3 {
		t.Fatalf("failed steps changed the request: Len %d", r.Len())
	}
	// A bad step does not stop the good one beside it.
	good := m.NewRequest()
	res := m.Forward([]ovrt.Step{{Req: r, Pos: 9, Tokens: []int32{1}}, {Req: good, Tokens: []int32{1, 2}}})
	if res[0].Err == nil || res[1].Err != nil || good.Len() != 2 {
		t.Fatalf("mixed batch: %v, %v, len %d", res[0].Err, res[1].Err, good.Len())
	}
	// The same request twice in one batch is refused.
	res = m.Forward([]ovrt.Step{{Req: good, Pos: 2, Tokens: []int32{1}}, {Req: good, Pos: 2, Tokens: []int32{1}}})
	if !errors.Is(res[1].Err, ovrt.ErrBadInput) {
		t.Fatalf("duplicate request: %v", res[1].Err)
	}
}
