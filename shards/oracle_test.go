package shards_test

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/shards"
)

// TestOracleThroughTheStore imports both oracle models (the llama2.c
// stories15M and the Hugging Face gqa_a), reads them back as shards, and
// holds them to the oracle: the store keeps the runtime's fidelity.
func TestOracleThroughTheStore(t *testing.T) {
	ctx := context.Background()
	stories, _ := testmodel.Stories15M(t)
	oracle := testmodel.OracleDir(t)
	cases := []struct {
		name string
		load func() (*ovrt.Weights, error)
	}{
		{"stories15M", func() (*ovrt.Weights, error) { return checkpoint.LoadLlama2C(stories, 0, 0) }},
		{"gqa_a", func() (*ovrt.Weights, error) { return checkpoint.LoadHF(filepath.Join(oracle, "gqa_a"), 0, 0) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := tc.load()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			st, err := shards.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			m, _, err := st.Import(ctx, shards.Source{Name: tc.name, Weights: w}, nil)
			if err != nil {
				t.Fatal(err)
			}
			sw, _, err := st.LoadShard(ctx, cid.MustParse(m.Layouts[0].Shards[0].CID))
			if err != nil {
				t.Fatal(err)
			}
			model, err := ovrt.Compile(sw)
			if err != nil {
				t.Fatal(err)
			}
			defer model.Close()
			ref, dir := testmodel.LoadRef(t, tc.name)
			for _, p := range ref.Prompts {
				ids := make([]int32, len(p.IDs))
				for i, id := range p.IDs {
					ids[i] = int32(id)
				}
				res, err := model.NewRequest().Infer(ovrt.Step{Tokens: ids, Want: ovrt.WantAll})
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(dir, p.LogitsFile))
				if err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for i := range res.Logits {
					want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
					worst = max(worst, math.Abs(float64(res.Logits[i]-want)))
				}
				if worst > 1e-3 {
					t.Errorf("%s: max |Δ logit| %g over the oracle's", p.Name, worst)
				}
			}
		})
	}
}
