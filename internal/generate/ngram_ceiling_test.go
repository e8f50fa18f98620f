package generate

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// BenchmarkNGramCeiling bounds what drafting from the context alone can
// give on stories15M: it generates greedy stories, then replays them
// offline, counting traversals when every round's drafts are the n-gram
// drafter's (W = 1) or the best of W distinct context matches, all
// verified at once as if a route could check W candidates in one
// traversal. It reports tokens per traversal; the single-user speed-up
// at a latency-bound hop cannot exceed it.
func BenchmarkNGramCeiling(b *testing.B) {
	s := loadStories(b)
	tok := s.tok
	prompts := []string{storyPrompt, "Once upon a time", "The dragon", "Tim had a red ball", "One day, a little bird"}
	var seqs [][]int
	var starts []int
	for _, p := range prompts {
		ids := tok.Encode(p, true)
		res, err := Run(context.Background(), s.local(b, sample.Params{}), ids, Options{MaxTokens: 200, Context: s.w.Config.Context})
		if err != nil {
			b.Fatal(err)
		}
		seqs = append(seqs, append(slices.Clone(ids), res.IDs...))
		starts = append(starts, len(ids))
	}
	for _, k := range []int{4, 8} {
		for _, w := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("K=%d/W=%d", k, w), func(b *testing.B) {
				var tokens, travs int
				for range b.N {
					tokens, travs = 0, 0
					for i, seq := range seqs {
						pos := starts[i] + 1 // the prompt's traversal gives one token
						travs++
						for pos < len(seq) {
							best := 0
							for _, d := range (spec.NGram{}).Candidates(seq[:pos], k, w) {
								a := 0
								for a < len(d) && pos+a < len(seq) && d[a] == seq[pos+a] {
									a++
								}
								best = max(best, a)
							}
							pos += best + 1
							travs++
						}
						tokens += len(seq) - starts[i]
					}
				}
				b.ReportMetric(float64(tokens)/float64(travs), "tokens/traversal")
			})
		}
	}
}
