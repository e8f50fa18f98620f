package ovrt_test

import (
	"errors"
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
