package spec

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

func TestNGramLookup(t *testing.T) {
	tests := []struct {
		name string
		g    NGram
		seq  []int
		k    int
		want []int
	}{
		{"empty", NGram{}, nil, 4, nil},
		{"one token", NGram{}, []int{7}, 4, nil},
		{"k zero", NGram{}, []int{1, 2, 1}, 0, nil},
		{"no match", NGram{}, []int{1, 2, 3, 4}, 3, nil},
		{"unigram", NGram{}, []int{5, 6, 7, 5}, 2, []int{6, 7}},
		{"trigram beats a more recent unigram", NGram{}, []int{1, 2, 3, 9, 8, 3, 4, 1, 2, 3}, 2, []int{9, 8}},
		{"most recent occurrence", NGram{}, []int{1, 2, 5, 1, 2, 6, 1, 2}, 1, []int{6}},
		{"bigram when no trigram", NGram{}, []int{4, 1, 2, 7, 9, 9, 1, 2}, 3, []int{7, 9, 9}},
		{"loop continues past the end", NGram{}, []int{1, 2, 1, 2}, 5, []int{1, 2, 1, 2, 1}},
		{"run of one token", NGram{}, []int{3, 3}, 3, []int{3, 3, 3}},
		{"continuation runs into the copy", NGram{}, []int{8, 1, 2, 3, 1, 2, 3}, 4, []int{1, 2, 3, 1}},
		{"min n excludes unigrams", NGram{MinN: 2}, []int{5, 6, 7, 5}, 2, nil},
		{"max n 1", NGram{MaxN: 1}, []int{1, 2, 3, 9, 8, 3, 4, 1, 2, 3}, 2, []int{4, 1}},
		{"window hides an old match", NGram{Window: 4}, []int{5, 6, 0, 0, 0, 5}, 2, nil},
		{"window keeps a recent match", NGram{Window: 4}, []int{0, 0, 5, 6, 0, 5}, 2, []int{6, 0}},
		{"k larger than the context", NGram{}, []int{1, 2, 3, 1}, 6, []int{2, 3, 1, 2, 3, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, q, err := tt.g.Draft(context.Background(), tt.seq, tt.k)
			if err != nil || q != nil {
				t.Fatalf("Draft: q %v, err %v", q, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Lookup(%v, %d) = %v, want %v", tt.seq, tt.k, got, tt.want)
			}
		})
	}
}

// FuzzNGram checks the drafter's invariants on any sequence: at most k
// tokens, every one of them from the context, and a proposal whenever
// the last token occurred before.
func FuzzNGram(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 2}, uint8(4), uint8(3), uint8(0))
	f.Add([]byte{7}, uint8(1), uint8(0), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, k, maxN, window uint8) {
		seq := make([]int, len(b))
		for i, c := range b {
			seq[i] = int(c % 8)
		}
		g := NGram{MaxN: int(maxN % 5), Window: int(window)}
		out := g.Lookup(seq, int(k%20))
		if len(out) > int(k%20) {
			t.Fatalf("%d tokens for k %d", len(out), k%20)
		}
		for _, id := range out {
			if !slices.Contains(seq, id) {
				t.Fatalf("proposed %d, not in %v", id, seq)
			}
		}
		L := len(seq)
		lo := 0
		if g.Window > 0 && L > g.Window {
			lo = L - g.Window
		}
		if k%20 > 0 && L >= 2 && slices.Contains(seq[lo:L-1], seq[L-1]) && len(out) != int(k%20) {
			t.Fatalf("last token %d occurred before in %v, got %v", seq[L-1], seq, out)
		}
	})
}

func FuzzParseK(f *testing.F) {
	for _, s := range []string{"auto", "AUTO", "1", "8", "64", "65", "0", "-1", "x", " 3 ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseK(s)
		if err != nil {
			if k != 0 {
				t.Fatalf("ParseK(%q) = %d with error", s, k)
			}
			return
		}
		if k < 0 || k > 64 {
			t.Fatalf("ParseK(%q) = %d", s, k)
		}
		if again, err := ParseK(fmt.Sprint(k)); k > 0 && (err != nil || again != k) {
			t.Fatalf("ParseK(%q) = %d, but ParseK(%d) = %d, %v", s, k, k, again, err)
		}
	})
}

func TestParseK(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"auto", 0, true}, {"Auto", 0, true}, {"", 0, true}, {"1", 1, true}, {"8", 8, true}, {"64", 64, true},
		{"0", 0, false}, {"65", 0, false}, {"-3", 0, false}, {"eight", 0, false}, {"3.5", 0, false},
	}
	for _, tt := range tests {
		k, err := ParseK(tt.in)
		if (err == nil) != tt.ok || k != tt.want {
			t.Errorf("ParseK(%q) = %d, %v", tt.in, k, err)
		}
	}
}
