package teststore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/shards"
)

// Cut is one layout to add: Balanced cost-balanced stages, or the given
// Ranges.
type Cut struct {
	Balanced int
	Ranges   []shards.Stage
}

// Store is a store holding stories15M and its layouts.
type Store struct {
	*shards.Store
	Manifest *shards.Manifest // with every layout
	MC       cid.Cid          // the manifest's CID
	Weights  *ovrt.Weights    // the unsplit model, for local references
	// Whole is the layout of the import (one shard); Cuts[i] that of
	// the i-th Cut.
	Whole shards.Layout
	Cuts  []shards.Layout
}

// Build imports the stories15M checkpoint (model, with the tokenizer
// file tok) into a new store at dir and adds one layout per cut, in
// order.
func Build(ctx context.Context, dir, model, tok string, cuts ...Cut) (*Store, error) {
	w, err := checkpoint.LoadLlama2C(model, 0, 0)
	if err != nil {
		return nil, err
	}
	tb, err := os.ReadFile(tok)
	if err != nil {
		return nil, err
	}
	st, err := shards.Open(dir)
	if err != nil {
		return nil, err
	}
	m, mc, err := st.Import(ctx, shards.Source{Name: "stories15M", Weights: w, Tokenizer: tb, TokFormat: "llama2c"}, nil)
	if err != nil {
		st.Close()
		return nil, err
	}
	out := &Store{Store: st, Weights: w, Whole: m.Layouts[0]}
	for i, c := range cuts {
		stages, how := c.Ranges, "ranges"
		if c.Balanced > 0 {
			how = "balanced"
			if stages, err = shards.BalancedSplit(shards.CostsOf(m.Config, ovrt.F32, ovrt.F32), shards.DefaultProfile, c.Balanced); err != nil {
				st.Close()
				return nil, fmt.Errorf("teststore: cut %d: %w", i, err)
			}
		}
		if m, mc, err = st.Split(ctx, mc, stages, ovrt.F32, how, nil); err != nil {
			st.Close()
			return nil, fmt.Errorf("teststore: cut %d: %w", i, err)
		}
		out.Cuts = append(out.Cuts, m.Layouts[len(m.Layouts)-1])
	}
	out.Manifest, out.MC = m, mc
	return out, nil
}

// CopyTo puts the stored files cids into the store of home, as a node
// that already holds its shard would have them.
func (s *Store) CopyTo(t testing.TB, home string, cids ...string) {
	t.Helper()
	dst, err := shards.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for _, c := range cids {
		var b bytes.Buffer
		if err := s.Blocks.Export(context.Background(), cid.MustParse(c), &b); err != nil {
			t.Fatal(err)
		}
		if got, err := dst.Blocks.AddFile(context.Background(), &b, nil); err != nil || got.String() != c {
			t.Fatalf("copy %s: %s, %v", c, got, err)
		}
	}
}
