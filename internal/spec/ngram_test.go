package spec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

func TestNGramHistoryLookup(t *testing.T) {
	hist := func(seqs ...[]int) *History {
		h := NewHistory(0)
		for _, s := range seqs {
			h.Add(s)
		}
		return h
	}
	tests := []struct {
		name string
		h    *History
		seq  []int
		k    int
		want []int
	}{
		{"empty history, context only", hist(), []int{5, 6, 7, 5}, 2, []int{6, 7}},
		{"nothing anywhere", hist([]int{1, 2}), []int{7, 8}, 3, nil},
		{"from the history", hist([]int{1, 2, 3, 4, 5}), []int{9, 1, 2}, 3, []int{3, 4, 5}},
		{"stops at the end of a sequence", hist([]int{1, 2, 3}, []int{4, 4, 4}), []int{9, 2}, 4, []int{3}},
		{"majority of continuations", hist([]int{1, 2, 3, 4}, []int{1, 2, 3, 4}, []int{1, 2, 7, 7}), []int{0, 1, 2}, 2, []int{3, 4}},
		{"longer match beats majority", hist([]int{8, 1, 2, 7}, []int{1, 2, 3}, []int{1, 2, 3}), []int{8, 1, 2}, 1, []int{7}},
		{"history's longer match beats the context", hist([]int{6, 1, 2, 3}), []int{1, 2, 9, 6, 1, 2}, 1, []int{3}},
		{"context's longer match beats the history", hist([]int{1, 2, 3}), []int{6, 1, 2, 9, 6, 1, 2}, 1, []int{9}},
		{"context breaks a tie", hist([]int{1, 2, 3}), []int{1, 2, 9, 1, 2}, 1, []int{9}},
		{"context loop continues past the end", hist(), []int{1, 2, 1, 2}, 5, []int{1, 2, 1, 2, 1}},
		{"unigram in the history", hist([]int{4, 5, 6}), []int{9, 9, 5}, 2, []int{6}},
		{"no n-gram across sequences", hist([]int{1, 2}, []int{3, 4}), []int{9, 2, 3}, 1, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NGram{History: tt.h}.Lookup(tt.seq, tt.k)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Lookup(%v, %d) = %v, want %v", tt.seq, tt.k, got, tt.want)
			}
		})
	}
}

func TestHistoryKeepsNewest(t *testing.T) {
	h := NewHistory(10)
	h.Add([]int{1, 2, 3})
	h.Add([]int{4, 5, 6})
	h.Add([]int{7, 8, 9}) // past 10 tokens with separators: the oldest go
	if n := h.Len(); n > 10 {
		t.Fatalf("Len %d > 10", n)
	}
	g := NGram{History: h}
	if got := g.Lookup([]int{0, 7, 8}, 1); !slices.Equal(got, []int{9}) {
		t.Errorf("newest sequence: %v, want [9]", got)
	}
	if got := g.Lookup([]int{0, 1, 2}, 1); got != nil {
		t.Errorf("oldest sequence still drafted: %v", got)
	}
	h.Add(make([]int, 40)) // longer than the history: its tail is kept
	if n := h.Len(); n > 10 {
		t.Fatalf("Len %d > 10 after a long sequence", n)
	}
}

func TestHistoryFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h", "model.ngram")
	h, err := LoadHistory(path, 10, 0)
	if err != nil || h.Len() != 0 {
		t.Fatalf("no file: %v, %d tokens", err, h.Len())
	}
	for _, s := range [][]int{{1, 2, 3}, {4, 5}, {6, 7, 8, 9}} {
		if err := h.Append(path, s); err != nil {
			t.Fatal(err)
		}
	}
	back, err := LoadHistory(path, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := (NGram{History: back}).Lookup([]int{0, 4}, 2); !slices.Equal(got, []int{5}) {
		t.Errorf("reloaded history drafts %v, want [5]", got)
	}
	// A writer that died mid-sequence: the partial sequence is dropped.
	b, _ := os.ReadFile(path)
	os.WriteFile(path, append(b, 1, 0, 0, 0, 2, 0), 0o644)
	if back, err = LoadHistory(path, 10, 0); err != nil || back.Len() != 12 {
		t.Fatalf("torn tail: %v, %d tokens, want 12", err, back.Len())
	}
	// Past its budget the file is rewritten with the newest sequences.
	if back, err = LoadHistory(path, 10, 7); err != nil {
		t.Fatal(err)
	}
	if again, err := LoadHistory(path, 10, 0); err != nil || again.Len() != back.Len() || back.Len() > 7 {
		t.Fatalf("rewritten file: %v, %d tokens, in memory %d", err, again.Len(), back.Len())
	}
	for _, bad := range []struct {
		name string
		b    []byte
	}{
		{"no header", []byte("hello")},
		{"id past the vocabulary", append([]byte("PSHIST1\n"), 10, 0, 0, 0, 255, 255, 255, 255)},
	} {
		os.WriteFile(path, bad.b, 0o644)
		if _, err := LoadHistory(path, 10, 0); !errors.Is(err, ErrHistory) {
			t.Errorf("%s: %v, want ErrHistory", bad.name, err)
		}
	}
}

// FuzzDecodeHistory: any bytes decode to ids in the vocabulary and whole
// sequences, or to ErrHistory; a decoded file encodes back to its
// prefix.
func FuzzDecodeHistory(f *testing.F) {
	f.Add([]byte("PSHIST1\n\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Add([]byte("PSHIST1\n\x01\x00\x00"))
	f.Add([]byte("nope"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := DecodeHistory(b, 300)
		if err != nil {
			if !errors.Is(err, ErrHistory) {
				t.Fatalf("error %v is not ErrHistory", err)
			}
			return
		}
		if len(ts) > 0 && ts[len(ts)-1] != histSep {
			t.Fatalf("last sequence not whole: %v", ts)
		}
		for _, id := range ts {
			if id != histSep && (id < 0 || id >= 300) {
				t.Fatalf("id %d outside the vocabulary", id)
			}
		}
		h := NewHistory(0)
		h.add32(ts)
		g := NGram{History: h}
		for i := range min(len(ts), 8) {
			if ts[i] != histSep {
				g.Lookup([]int{int(ts[i])}, 4)
			}
		}
	})
}
