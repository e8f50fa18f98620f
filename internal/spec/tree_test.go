package spec

import (
	"slices"
	"testing"
	"time"
)

func TestDraftTree(t *testing.T) {
	h := NewHistory(0)
	h.Add([]int{7, 1, 2, 3, 4, 5})
	h.Add([]int{7, 1, 2, 3, 9, 9})
	h.Add([]int{7, 1, 2, 3, 4, 6})
	seq := []int{1, 2, 3}
	tr := NGram{History: h}.DraftTree(seq, 4, 16)
	// Continuations after "1 2 3": 4 5, 9 9, 4 6. The likelier 4 leads;
	// 5 and 6 are as likely, the lower id first. After "9" comes 9 in
	// the history, so that branch runs on to the depth.
	want := Tree{Tokens: []int{4, 5, 6, 9, 9, 9, 9}, Parent: []int{-1, 0, 0, -1, 3, 4, 5}}
	if !slices.Equal(tr.Tokens, want.Tokens) || !slices.Equal(tr.Parent, want.Parent) {
		t.Fatalf("tree %+v, want %+v", tr, want)
	}
	if tr.Chain() {
		t.Fatal("a branching tree called a chain")
	}
	// A budget keeps the heaviest nodes, and they are still a tree.
	small := NGram{History: h}.DraftTree(seq, 4, 2)
	if !slices.Equal(small.Tokens, []int{4, 5}) || !small.Chain() {
		t.Fatalf("budget 2: %+v", small)
	}
	// From the context alone, the copy runs into itself as Candidates' does.
	ctx := NGram{}.DraftTree([]int{5, 6, 5, 6}, 3, 8)
	if len(ctx.Tokens) == 0 || ctx.Tokens[0] != 5 || ctx.Parent[0] != -1 {
		t.Fatalf("context tree %+v", ctx)
	}
	for i, p := range ctx.Parent {
		if p >= i {
			t.Fatalf("parent %d of node %d", p, i)
		}
	}
	if got := (NGram{}).DraftTree(nil, 3, 8); got.Len() != 0 {
		t.Fatalf("empty sequence: %+v", got)
	}
}

func TestTreeBudget(t *testing.T) {
	for _, tt := range []struct {
		c      Costs
		k, max int
		want   int
	}{
		{Costs{}, 3, 0, 3},
		{Costs{Fixed: time.Millisecond, PerToken: time.Millisecond}, 4, 0, 4},
		{Costs{Fixed: 300 * time.Millisecond, PerToken: time.Millisecond}, 4, 0, 18},
		{Costs{Fixed: 3 * time.Second, PerToken: time.Millisecond}, 4, 0, DefaultMaxTree},
		{Costs{Fixed: 300 * time.Millisecond, PerToken: 300 * time.Microsecond, Draft: 10 * time.Microsecond}, 4, 0, 60},
		{Costs{Fixed: 3 * time.Second, PerToken: time.Millisecond}, 4, 20, 20},
		{Costs{}, 0, 0, 1},
	} {
		if got := TreeBudget(tt.c, tt.k, tt.max); got != tt.want {
			t.Errorf("TreeBudget(%+v, %d, %d) = %d, want %d", tt.c, tt.k, tt.max, got, tt.want)
		}
	}
}

func TestParseTree(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"auto", 0, true}, {"", 0, true}, {"off", -1, true}, {"OFF", -1, true}, {"1", 1, true}, {"512", 512, true},
		{"0", 0, false}, {"513", 0, false}, {"-1", 0, false}, {"many", 0, false},
	} {
		got, err := ParseTree(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseTree(%q) = %d, %v", tt.in, got, err)
		}
	}
}
