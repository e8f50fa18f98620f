package pipebench

import (
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
)

// TestParitySmoke runs table a once, briefly: every contender must
// produce the unsplit model's tokens (parity checks that itself) and the
// table must have one row per contender. No speed is asserted.
func TestParitySmoke(t *testing.T) {
	model, _ := testmodel.Stories15M(t)
	tables, err := Run(t.Context(), Config{Tables: []string{"a"}, Repeats: 1, Tokens: 8, ModelPath: model})
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || len(tables[0].Rows) != 4 {
		t.Fatalf("tables = %+v, want table a with 4 rows", tables)
	}
	for _, r := range tables[0].Rows {
		if r[1] == "–" {
			t.Errorf("row %v has no rate", r)
		}
	}
}
