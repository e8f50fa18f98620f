package pipebench

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/internal/testmodel"
)

func TestHistoryPrompts(t *testing.T) {
	exclude := "One day, Tom wanted to play."
	ps := historyPrompts(500, exclude)
	if len(ps) != 500 {
		t.Fatalf("%d prompts, want 500", len(ps))
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if p == exclude || seen[p] {
			t.Fatalf("prompt %q excluded or repeated", p)
		}
		seen[p] = true
	}
}

// BenchmarkNGramHistory measures what a history of earlier answers adds
// to the n-gram drafter on stories15M, offline: it generates greedy
// stories for other prompts (the history, as table c builds it), then
// replays the measured prompts' greedy stories, counting the traversals
// a round needs with drafts from the context alone (stories=0) and from
// the context and the first n history stories, as chains and as trees.
// At a latency-bound hop, tokens per traversal is a single user's
// speed-up (less the compute a tree's nodes add). "first" is table c's
// prompt alone, and "first64" its first 64 tokens, table c's length.
// Run it with -benchtime 1x: the stories are generated once, which takes
// minutes on one core.
func BenchmarkNGramHistory(b *testing.B) {
	model, _ := testmodel.Stories15M(b)
	c := Config{ModelPath: model, Repeats: 1, Tokens: 2}
	if err := c.defaults(); err != nil {
		b.Fatal(err)
	}
	sm, err := loadStoryModel(c)
	if err != nil {
		b.Fatal(err)
	}
	defer sm.m.Close()
	measured := []string{c.Prompt, "Once upon a time", "The dragon", "Tim had a red ball", "One day, a little bird"}
	var seqs [][]int
	var starts []int
	for _, p := range measured {
		seq, start, err := sm.story(b.Context(), p)
		if err != nil {
			b.Fatal(err)
		}
		seqs, starts = append(seqs, seq), append(starts, start)
	}
	sizes := []int{0, 100, 200, 400, 800}
	var hist [][]int
	for _, p := range historyPrompts(sizes[len(sizes)-1], c.Prompt) {
		if slices.Contains(measured, p) {
			b.Fatalf("history prompt %q is measured", p)
		}
		seq, _, err := sm.story(b.Context(), p)
		if err != nil {
			b.Fatal(err)
		}
		hist = append(hist, seq)
	}
	for _, n := range sizes {
		g := spec.NGram{}
		if n > 0 {
			g.History = spec.NewHistory(0)
			for _, seq := range hist[:n] {
				g.History.Add(seq)
			}
		}
		// Chains of K drafts (Lookup), and trees of B nodes (DraftTree,
		// depth 16) as a route verifies them: the longest path agreeing
		// with the greedy story, and the token after it.
		type variant struct {
			name string
			k, b int
		}
		for _, v := range []variant{{"K=8", 8, 0}, {"K=16", 16, 0}, {"tree=32", 16, 32}, {"tree=64", 16, 64}, {"tree=128", 16, 128}} {
			if v.b > 0 && n < 400 {
				continue
			}
			b.Run(fmt.Sprintf("stories=%d/%s", n, v.name), func(b *testing.B) {
				var tokens, travs, first, firstTravs, first64, travs64, nodes int
				var drafting time.Duration
				for range b.N {
					tokens, travs = 0, 0
					for i, seq := range seqs {
						pos, t := starts[i]+1, 1 // the prompt's traversal gives one token
						for pos < len(seq) {
							a := 0
							if v.b == 0 {
								d := g.Lookup(seq[:pos], v.k)
								for a < len(d) && pos+a < len(seq) && d[a] == seq[pos+a] {
									a++
								}
							} else {
								t0 := time.Now()
								tr := g.DraftTree(seq[:pos], v.k, v.b)
								drafting += time.Since(t0)
								nodes += tr.Len()
								a = treeAccepts(tr, seq[pos:])
							}
							pos += a + 1
							t++
							if i == 0 && pos-starts[i] <= 64 {
								first64, travs64 = pos-starts[i], t
							}
						}
						if i == 0 {
							first, firstTravs = len(seq)-starts[i], t
						}
						tokens, travs = tokens+len(seq)-starts[i], travs+t
					}
				}
				b.ReportMetric(float64(tokens)/float64(travs), "tokens/traversal")
				b.ReportMetric(float64(first)/float64(firstTravs), "first-tokens/traversal")
				b.ReportMetric(float64(first64)/float64(travs64), "first64-tokens/traversal")
				if nodes > 0 {
					b.ReportMetric(float64(drafting.Microseconds())/float64(nodes), "draft-µs/node")
				}
			})
		}
	}
}

// treeAccepts returns the length of the longest path of tr that want
// begins with.
func treeAccepts(tr spec.Tree, want []int) int {
	a, cur := 0, -1
	for a < len(want) {
		next := -1
		for j, p := range tr.Parent {
			if p == cur && tr.Tokens[j] == want[a] {
				next = j
				break
			}
		}
		if next < 0 {
			break
		}
		cur, a = next, a+1
	}
	return a
}
