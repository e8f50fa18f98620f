package swarm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// TestSpeculativeOverRoute: speculative decoding through a real 2-stage
// route on loopback gives the tokens of plain local decoding, greedy for
// K = 1, 3, 8 and auto with the n-gram drafter and a draft model (the
// model itself in q4), and sampled with point-mass drafts (the last hop
// samples every row with the client's numbers), and with n-gram draft
// trees, whose every hop attends along the tree. A 1-stage route opened
// for logits verifies a sampling draft model's distributions on the
// client.
func TestSpeculativeOverRoute(t *testing.T) {
	f := getFixture(t)
	nodes := startNodes(t, f, f.layouts[2])
	headLast := startNodes(t, f, f.headLast)
	c, err := swarm.New(context.Background(), swarm.Config{Home: t.TempDir(), Bootstrap: nodes[0].Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q4, err := f.whole.Weights().Quantize(ovrt.Q4_0)
	if err != nil {
		t.Fatal(err)
	}
	draft, err := ovrt.Compile(q4, ovrt.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer draft.Close()
	// A prompt that repeats itself, so that the n-gram drafter has work.
	prompt := []int{1, 450, 8338, 265, 263, 2217, 29889, 450, 8338}
	const n = 24
	open := func(t *testing.T, p sample.Params, logits bool, route []swarm.Hop) *swarm.Session {
		s, err := c.Open(context.Background(), route, swarm.SessionOptions{ModelID: f.manifest.ModelID, Sampling: p, Vocab: 32000, Timeout: 20 * time.Second, MaxLen: 256, Logits: logits})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, p := range []sample.Params{{}, {Temp: 0.9, TopP: 0.9, Seed: 11}} {
		want := localIDs(t, f, prompt, n, p)
		drafters := map[string]func() spec.Drafter{
			"ngram": func() spec.Drafter { return spec.NGram{} },
			"draft-q4-argmax": func() spec.Drafter {
				d, err := spec.NewDraftModel(draft, spec.ModelOptions{Sampling: p, PointMass: true})
				if err != nil {
					t.Fatal(err)
				}
				return d
			},
		}
		for _, name := range []string{"ngram", "draft-q4-argmax"} {
			for _, k := range []int{1, 3, 8, 0} {
				if !p.Greedy() && k != 3 && k != 0 {
					continue
				}
				t.Run(fmt.Sprintf("temp=%v/%s/K=%d", p.Temp, name, k), func(t *testing.T) {
					s := open(t, p, false, routeOf(f.layouts[2], nodes))
					r, err := generate.RunSpeculative(context.Background(), s, drafters[name](), prompt,
						generate.Options{MaxTokens: n, IgnoreEOS: true, Seed: p.Seed, Context: 256}, generate.SpecOptions{K: k, Sampling: p})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(r.IDs, want) {
						t.Fatalf("speculative through the route\n%v\nlocal\n%v", r.IDs, want)
					}
					t.Logf("%d tokens in %d traversals, %d of %d drafts accepted", len(r.IDs), r.Traversals, r.Accepted, r.Drafted)
				})
			}
		}
		// Draft trees: a history of near-copies of the answer makes them
		// branch, and some accepted paths leave the leading chain. The
		// last hop computes its head rows along each tree's walk only,
		// whether it holds the whole head or the end of one split between
		// the hops (merging the candidates the earlier part sent).
		for _, tc := range []struct {
			name   string
			layout shards.Layout
			nodes  []*node.Node
		}{{"head split", f.layouts[2], nodes}, {"head last", f.headLast, headLast}} {
			t.Run(fmt.Sprintf("temp=%v/ngram-history-tree/%s", p.Temp, tc.name), func(t *testing.T) {
				h := spec.NewHistory(0)
				for _, every := range []int{4, 3, 0} {
					seq := append(slices.Clone(prompt), want...)
					for i := len(prompt) + 2; every > 0 && i < len(seq); i += every {
						seq[i] = (seq[i] + 1) % 32000
					}
					h.Add(seq)
				}
				route := routeOf(tc.layout, tc.nodes)
				s := open(t, p, false, route)
				lastNode := tc.nodes[len(tc.nodes)-1].Stage
				before := lastNode.Snapshot()
				r, err := generate.RunSpeculative(context.Background(), s, spec.NGram{History: h}, prompt,
					generate.Options{MaxTokens: n, IgnoreEOS: true, Seed: p.Seed, Context: 256}, generate.SpecOptions{Tree: 16, Sampling: p})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(r.IDs, want) {
					t.Fatalf("speculative through the route\n%v\nlocal\n%v", r.IDs, want)
				}
				if r.Refed == 0 {
					t.Fatal("no accepted path left a tree's leading chain")
				}
				after := lastNode.Snapshot()
				walks, rows, of := after.Walks-before.Walks, after.WalkRows-before.WalkRows, after.WalkOf-before.WalkOf
				if walks == 0 || rows >= of {
					t.Fatalf("the last hop walked %d forwards, computing %d head rows of %d", walks, rows, of)
				}
				t.Logf("%d tokens in %d traversals, %d of %d drafts accepted, %d fed again; the last hop walked %d forwards, computing %d head rows of %d",
					len(r.IDs), r.Traversals, r.Accepted, r.Drafted, r.Refed, walks, rows, of)
			})
		}
	}
	t.Run("sampled draft distributions over logits", func(t *testing.T) {
		p := sample.Params{Temp: 1, TopK: 8, Seed: 4}
		// A head split between hops cannot return logits: one stage.
		s := open(t, p, true, routeOf(f.layouts[1], startNodes(t, f, f.layouts[1])))
		d, err := spec.NewDraftModel(draft, spec.ModelOptions{Sampling: p, Uniform: rand.New(rand.NewPCG(4, 4)).Float64})
		if err != nil {
			t.Fatal(err)
		}
		r, err := generate.RunSpeculative(context.Background(), s, d, prompt, generate.Options{MaxTokens: n, IgnoreEOS: true, Seed: p.Seed, Context: 256}, generate.SpecOptions{K: 4, Sampling: p})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.IDs) != n || r.Accepted == 0 {
			t.Fatalf("%d tokens, %d of %d drafts accepted", len(r.IDs), r.Accepted, r.Drafted)
		}
		t.Logf("%d tokens in %d traversals, %d of %d drafts accepted", len(r.IDs), r.Traversals, r.Accepted, r.Drafted)
	})
}
