package testmodel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/pipeshard/pipeshard/internal/models"
)

// Home returns the pipeshard home directory (see models.Home).
func Home() string { return models.Home() }

// missing fails the test under CI and skips it elsewhere.
func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing and CI is set: run .ci/run (or `pipeshard model pull stories15M`) first", what)
	}
	t.Skipf("%s is missing; run `pipeshard model pull stories15M`", what)
}

// Stories15M returns the paths of the stories15M checkpoint and its
// tokenizer, or fails/skips the test when they are absent.
func Stories15M(t testing.TB) (model, tokenizer string) {
	t.Helper()
	dir := filepath.Join(Home(), "models", "stories15M")
	model = filepath.Join(dir, "stories15M.bin")
	tokenizer = filepath.Join(dir, "tokenizer.bin")
	for _, p := range []string{model, tokenizer} {
		if _, err := os.Stat(p); err != nil {
			missing(t, p)
		}
	}
	return model, tokenizer
}

// RepoRoot returns the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// OracleDir returns the oracle directory (containing stories15M/ and
// gqa_a/), or fails/skips the test when it is absent.
func OracleDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("PIPESHARD_ORACLE")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "..", "shared", "oracle")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		missing(t, "oracle directory "+dir)
	}
	return dir
}

// Encoding is one SentencePiece reference encoding.
type Encoding struct {
	Text   *string  `json:"text"`
	IDs    []int    `json:"ids"`
	Pieces []string `json:"pieces"`
}

// Prompt is one reference prompt with its greedy continuation and logits.
type Prompt struct {
	Name         string    `json:"name"`
	Text         *string   `json:"text"`
	IDs          []int     `json:"ids"`
	Greedy       []int     `json:"greedy"`
	LastTop10IDs []int     `json:"last_top10_ids"`
	LastTop10    []float32 `json:"last_top10_logits"`
	LogitsShape  []int     `json:"logits_shape"`
	LogitsFile   string    `json:"logits_file"`
}

// Ref is an oracle ref.json.
type Ref struct {
	Prompts   []Prompt            `json:"prompts"`
	Encodings map[string]Encoding `json:"encodings"`
}

// LoadRef reads oracle/<model>/ref.json.
func LoadRef(t testing.TB, model string) (*Ref, string) {
	t.Helper()
	dir := filepath.Join(OracleDir(t), model)
	b, err := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Ref
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return &r, dir
}
