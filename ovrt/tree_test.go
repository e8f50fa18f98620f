package ovrt_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
)

// TestTreeStep checks that every node of a draft tree gets, bit for bit,
// the logits its root-to-node path gets as a plain sequence, alone and
// batched with another request and with a multi-threaded model, and that
// a forward after the tree at the end of its leading chain continues as
// if only that chain had been run.
func TestTreeStep(t *testing.T) {
	w := loadStories(t)
	prefix := []int{1, 9038, 2501, 263, 931, 29892}
	// Three branches after the prefix, one of them branching again; the
	// leading chain (slots 0..3) is "727 471 263 2217".
	tokens := []int32{727, 471, 263, 2217, 1183, 29892, 263, 931, 9038, 278}
	parents := []int32{-1, 0, 1, 2, -1, 4, 1, 6, -1, 5}
	path := func(i int) []int {
		var p []int
		for a := int32(i); a >= 0; a = parents[a] {
			p = append([]int{int(tokens[a])}, p...)
		}
		return p
	}
	for _, threads := range []int{1, 2} {
		m, err := ovrt.Compile(w, ovrt.WithThreads(threads))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		want := make([][]float32, len(tokens))
		for i := range tokens {
			seq := append(append([]int(nil), prefix...), path(i)...)
			all := logitsAll(t, m, seq)
			V := len(all) / len(seq)
			want[i] = all[(len(seq)-1)*V:]
		}
		for _, batched := range []bool{false, true} {
			r := m.NewRequest()
			if _, err := r.Infer(ovrt.Step{Tokens: ids32(prefix)}); err != nil {
				t.Fatal(err)
			}
			steps := []ovrt.Step{{Req: r, Pos: len(prefix), Tokens: tokens, Tree: parents, Want: ovrt.WantAll}}
			if batched {
				steps = append(steps, ovrt.Step{Req: m.NewRequest(), Tokens: ids32(prompts[0]), Want: ovrt.WantAll})
			}
			res := m.Forward(steps)
			if res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
			V := len(res[0].Logits) / len(tokens)
			for i := range tokens {
				if j := bitsEqual(want[i], res[0].Logits[i*V:(i+1)*V]); j >= 0 {
					t.Fatalf("threads %d, batched %v: node %d's logits differ from its path's at %d", threads, batched, i, j)
				}
			}
			// Keep the leading chain (slots 0..2 = path of node 2) and go on.
			keep := len(prefix) + 3
			next := []int32{2217, 1183}
			res2, err := r.Infer(ovrt.Step{Pos: keep, Tokens: next, Want: ovrt.WantAll})
			if err != nil {
				t.Fatal(err)
			}
			seq := append(append(append([]int(nil), prefix...), path(2)...), 2217, 1183)
			all := logitsAll(t, m, seq)
			if j := bitsEqual(all[keep*V:], res2.Logits); j >= 0 {
				t.Fatalf("threads %d, batched %v: the forward after the tree differs at %d", threads, batched, j)
			}
		}
	}
}

func TestTreeStepErrors(t *testing.T) {
	m := compile(t, loadStories(t))
	for _, tree := range [][]int32{{-1, 0}, {-1, 1, 0}, {-2, 0, 1}, {0, 0, 1}} {
		_, err := m.NewRequest().Infer(ovrt.Step{Tokens: []int32{1, 2, 3}, Tree: tree})
		if !errors.Is(err, ovrt.ErrBadInput) {
			t.Errorf("tree %v: err %v, want ErrBadInput", tree, err)
		}
	}
}

// TestDeferredLogits checks that a forward with WantDeferred followed by
// Logits for some of its rows gives those rows bit for bit what WantAll
// gives, for a tree step batched with another request, and that Logits
// refuses what it cannot answer.
func TestDeferredLogits(t *testing.T) {
	w := loadStories(t)
	prefix := ids32([]int{1, 9038, 2501, 263, 931, 29892})
	tokens := []int32{727, 471, 263, 2217, 1183, 29892}
	parents := []int32{-1, 0, 1, -1, 3, 0}
	m := compile(t, w, ovrt.WithThreads(2))
	run := func(want ovrt.Want) (*ovrt.Request, ovrt.Result) {
		r := m.NewRequest()
		if _, err := r.Infer(ovrt.Step{Tokens: prefix}); err != nil {
			t.Fatal(err)
		}
		res := m.Forward([]ovrt.Step{
			{Req: r, Pos: len(prefix), Tokens: tokens, Tree: parents, Want: want},
			{Req: m.NewRequest(), Tokens: ids32(prompts[0]), Want: ovrt.WantLast},
		})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		return r, res[0]
	}
	_, all := run(ovrt.WantAll)
	V := len(all.Logits) / len(tokens)
	r, res := run(ovrt.WantDeferred)
	if res.Logits != nil {
		t.Fatalf("a deferred forward returned %d logits", len(res.Logits))
	}
	for _, rows := range [][]int{{0}, {5}, {3, 1}, {0, 1, 2, 3, 4, 5}} {
		got, err := r.Logits(rows...)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(rows)*V {
			t.Fatalf("rows %v: %d logits, want %d", rows, len(got), len(rows)*V)
		}
		for i, row := range rows {
			if j := bitsEqual(all.Logits[row*V:(row+1)*V], got[i*V:(i+1)*V]); j >= 0 {
				t.Fatalf("rows %v: row %d differs from WantAll's at %d", rows, row, j)
			}
		}
	}
	if _, err := r.Logits(6); !errors.Is(err, ovrt.ErrBadInput) {
		t.Errorf("row past the forward: err %v, want ErrBadInput", err)
	}
	// The next forward ends the deferred rows.
	if _, err := r.Infer(ovrt.Step{Pos: len(prefix) + 3, Tokens: []int32{2217}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Logits(0); !errors.Is(err, ovrt.ErrBadInput) {
		t.Errorf("after a plain forward: err %v, want ErrBadInput", err)
	}
	// A range without the head has no logits to defer.
	part, err := w.Slice(0, 3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	pm := compile(t, part)
	pr := pm.NewRequest()
	if _, err := pr.Infer(ovrt.Step{Tokens: prefix, Want: ovrt.WantDeferred}); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Logits(0); !errors.Is(err, ovrt.ErrBadInput) {
		t.Errorf("a range without the head: err %v, want ErrBadInput", err)
	}
}

func TestWalk(t *testing.T) {
	// Row outputs: what the target "chooses" at each row.
	tests := []struct {
		name    string
		ids     []int32
		parents []int32
		from    int
		choice  []int
		want    []int
	}{
		{"chain all accepted", []int32{5, 6, 7}, nil, 0, []int{6, 7, 8}, []int{6, 7, 8}},
		{"chain first rejected", []int32{5, 6, 7}, nil, 0, []int{9, 7, 8}, []int{9, -1, -1}},
		{"chain from the trunk's end", []int32{4, 5, 6, 7}, nil, 1, []int{5, 6, 9, 8}, []int{-1, 6, 9, -1}},
		{"tree second branch", []int32{5, 6, 7, 8, 9}, []int32{-1, 0, 0, 2, 2}, 0, []int{7, 1, 9, 1, 3}, []int{7, -1, 9, -1, 3}},
		{"tree first of equal children", []int32{5, 6, 6}, []int32{-1, 0, 0}, 0, []int{6, 1, 2}, []int{6, 1, -1}},
		{"tree leaf", []int32{5, 6}, []int32{-1, 0}, 0, []int{6, 3}, []int{6, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ovrt.Walk(tt.ids, tt.parents, tt.from, func(row int) (int, error) { return tt.choice[row], nil })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	for _, bad := range []struct {
		parents []int32
		from    int
	}{{nil, 3}, {nil, -1}, {[]int32{-1}, 0}} {
		if _, err := ovrt.Walk([]int32{1, 2, 3}, bad.parents, bad.from, func(int) (int, error) { return 0, nil }); !errors.Is(err, ovrt.ErrBadInput) {
			t.Errorf("parents %v from %d: err %v, want ErrBadInput", bad.parents, bad.from, err)
		}
	}
	boom := errors.New("boom")
	if _, err := ovrt.Walk([]int32{1}, nil, 0, func(int) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("next's error: got %v", err)
	}
}

// TestWalkHead checks that walking a deferred tree step gives the walk
// that the logits of every row give, with every row's logits bit for bit
// WantAll's, whichever branches the walk takes.
func TestWalkHead(t *testing.T) {
	w := loadStories(t)
	m := compile(t, w)
	prefix := ids32([]int{1, 9038, 2501, 263, 931, 29892})
	tokens := []int32{727, 471, 263, 2217, 1183, 29892, 263, 931, 9038, 278}
	parents := []int32{-1, 0, 1, 2, -1, 4, 1, 6, -1, 5}
	r := m.NewRequest()
	if _, err := r.Infer(ovrt.Step{Tokens: prefix}); err != nil {
		t.Fatal(err)
	}
	step := ovrt.Step{Pos: len(prefix), Tokens: tokens, Tree: parents, Want: ovrt.WantAll}
	all, err := r.Infer(step)
	if err != nil {
		t.Fatal(err)
	}
	V := len(all.Logits) / len(tokens)
	all.Logits = slices.Clone(all.Logits)
	// A chooser that follows the tree wherever told: row -> child.
	for _, route := range []map[int]int{{}, {0: 1, 1: 2, 2: 3}, {0: 1, 1: 6, 6: 7}, {4: 5, 5: 9}} {
		choose := func(row int) int {
			if c, ok := route[row]; ok {
				return int(tokens[c])
			}
			return 0
		}
		for _, from := range []int{0, 4} {
			want, err := ovrt.Walk(tokens, parents, from, func(row int) (int, error) { return choose(row), nil })
			if err != nil {
				t.Fatal(err)
			}
			step.Want = ovrt.WantDeferred
			if _, err := r.Infer(step); err != nil {
				t.Fatal(err)
			}
			got, err := r.WalkHead(tokens, parents, from, func(row int, logits []float32) (int, error) {
				if j := bitsEqual(all.Logits[row*V:(row+1)*V], logits); j >= 0 {
					t.Fatalf("row %d's logits differ from WantAll's at %d", row, j)
				}
				return choose(row), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("route %v from %d: walked %v, want %v", route, from, got, want)
			}
		}
	}
	boom := errors.New("boom")
	if _, err := r.WalkHead(tokens, parents, 0, func(int, []float32) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("choose's error: got %v", err)
	}
	if _, err := r.WalkHead(tokens, parents[:3], 0, nil); !errors.Is(err, ovrt.ErrBadInput) {
		t.Errorf("short parents: got %v", err)
	}
}
