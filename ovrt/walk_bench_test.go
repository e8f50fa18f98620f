package ovrt_test

import (
	"fmt"
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
)

// BenchmarkWalkHead compares a draft tree's forward on a last stage with
// the head computed for every node (all) against WalkHead along a path of
// the given length that keeps to first children (leading) or takes the
// last child at every step (branching), and against no head at all.
func BenchmarkWalkHead(b *testing.B) {
	w := loadStories(b)
	m := compile(b, w, ovrt.WithThreads(1))
	prefix := ids32(prompts[0])
	for _, n := range []int{16, 64} {
		tokens := make([]int32, n)
		parents := make([]int32, n)
		var kids [][]int
		for i := range tokens {
			tokens[i] = int32(100 + i)
			parents[i] = int32((i+1)/3) - 1 // three roots, then three children a node
			kids = append(kids, nil)
			if p := parents[i]; p >= 0 {
				kids[p] = append(kids[p], i)
			}
		}
		r := m.NewRequest()
		if _, err := r.Infer(ovrt.Step{Tokens: prefix}); err != nil {
			b.Fatal(err)
		}
		run := func(b *testing.B, want ovrt.Want) {
			if _, err := r.Infer(ovrt.Step{Pos: len(prefix), Tokens: tokens, Tree: parents, Want: want}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("nodes=%d/all", n), func(b *testing.B) {
			for b.Loop() {
				run(b, ovrt.WantAll)
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/none", n), func(b *testing.B) {
			for b.Loop() {
				run(b, ovrt.WantNone)
			}
		})
		for _, path := range []int{1, 3} {
			for _, branching := range []bool{false, true} {
				name := "leading"
				if branching {
					name = "branching"
				}
				b.Run(fmt.Sprintf("nodes=%d/walk=%d/%s", n, path, name), func(b *testing.B) {
					for b.Loop() {
						run(b, ovrt.WantDeferred)
						depth := map[int]int{0: 0}
						walked, err := r.WalkHead(tokens, parents, 0, func(row int, _ []float32) (int, error) {
							k := kids[row]
							if depth[row] >= path-1 || len(k) == 0 {
								return 0, nil // no child has token 0
							}
							c := k[0]
							if branching {
								c = k[len(k)-1]
							}
							depth[c] = depth[row] + 1
							return int(tokens[c]), nil
						})
						if err != nil {
							b.Fatal(err)
						}
						_ = walked
					}
				})
			}
		}
	}
}
