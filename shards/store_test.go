package shards_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// importStories imports the real stories15M into a fresh store.
func importStories(t testing.TB) (*shards.Store, *shards.Manifest, cid.Cid, *ovrt.Weights) {
	t.Helper()
	model, tok := testmodel.Stories15M(t)
	w, err := checkpoint.LoadLlama2C(model, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	tb, err := os.ReadFile(tok)
	if err != nil {
		t.Fatal(err)
	}
	s, err := shards.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m, c, err := s.Import(context.Background(), shards.Source{Name: "stories15M", Weights: w, Tokenizer: tb, TokFormat: "llama2c",
		Origin: shards.Artifact{Format: "llama2c"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, m, c, w
}

func chain(t testing.TB, s *shards.Store, l shards.Layout) *generate.Local {
	t.Helper()
	var ms []*ovrt.Model
	for _, r := range l.Shards {
		w, _, err := s.LoadShard(context.Background(), cid.MustParse(r.CID))
		if err != nil {
			t.Fatal(err)
		}
		m, err := ovrt.Compile(w)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		ms = append(ms, m)
	}
	local, err := generate.NewLocal(sample.Params{}, ms...)
	if err != nil {
		t.Fatal(err)
	}
	return local
}

func greedyIDs(t testing.TB, f generate.Backend, n int) []int {
	t.Helper()
	r, err := generate.Run(context.Background(), f, []int{1, 450, 8338, 265}, generate.Options{MaxTokens: n, IgnoreEOS: true, EOS: 2, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	return r.IDs
}

func TestSplitsGenerateLikeTheWholeModel(t *testing.T) {
	s, m, mc, w := importStories(t)
	if len(m.Layouts) != 1 || len(m.Layouts[0].Shards) != 1 {
		t.Fatalf("import made layouts %+v", m.Layouts)
	}
	for _, q := range []ovrt.DType{ovrt.F32, ovrt.Q8_0} {
		whole := w
		if q != ovrt.F32 {
			var err error
			if whole, err = w.Quantize(q); err != nil {
				t.Fatal(err)
			}
		}
		wm, err := ovrt.Compile(whole)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(wm.Close)
		ref, _ := generate.NewLocal(sample.Params{}, wm)
		want := greedyIDs(t, ref, 40)
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%v/%d", q, n), func(t *testing.T) {
				cs := shards.CostsOf(m.Config, q, q)
				stages, err := shards.BalancedSplit(cs, shards.DefaultProfile, n)
				if err != nil {
					t.Fatal(err)
				}
				m2, mc2, err := s.Split(context.Background(), mc, stages, q, "balanced", nil)
				if err != nil {
					t.Fatal(err)
				}
				if mc2 == mc || m2.ModelID != m.ModelID {
					t.Fatalf("split changed the model id or kept the manifest CID")
				}
				l, ok := m2.Layout(q.String(), "balanced", n)
				if !ok {
					t.Fatalf("no %v layout of %d in %+v", q, n, m2.Layouts)
				}
				got := greedyIDs(t, chain(t, s, l), 40)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%d-stage %v split generated\n%v\nthe whole model\n%v", n, q, got, want)
				}
				// Every shard's header names the model.
				for _, r := range l.Shards {
					_, h, err := s.LoadShard(context.Background(), cid.MustParse(r.CID))
					if err != nil {
						t.Fatal(err)
					}
					if h.ModelID != m.ModelID || h.Start != r.Layers[0] || h.End != r.Layers[1] {
						t.Fatalf("shard %s header %+v", r.CID, h)
					}
				}
			})
		}
	}
}

func TestCorruptShardIsRefused(t *testing.T) {
	s, m, _, _ := importStories(t)
	c := cid.MustParse(m.Layouts[0].Shards[0].CID)
	if err := s.Blocks.Verify(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	// Flip one byte of one block file on disk.
	var victim string
	filepath.Walk(filepath.Join(s.Blocks.Dir(), "blocks"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Size() == 256<<10 && victim == "" {
			victim = p
		}
		return nil
	})
	if victim == "" {
		t.Fatal("no full-size block file found")
	}
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[1000] ^= 0x40
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var be *blockstore.BlockError
	err = s.Blocks.Verify(context.Background(), c)
	if !errors.Is(err, blockstore.ErrCorrupt) || !errors.As(err, &be) {
		t.Fatalf("Verify after corruption: %v", err)
	}
	t.Logf("verify: %v", err)
	_, _, err = s.LoadShard(context.Background(), c)
	if !errors.Is(err, blockstore.ErrCorrupt) || !errors.As(err, &be) {
		t.Fatalf("LoadShard after corruption: %v", err)
	}
	if be.Block.String() == "" {
		t.Fatal("the error names no block")
	}
}
