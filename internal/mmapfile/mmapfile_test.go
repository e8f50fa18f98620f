package mmapfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"
)

func write(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpen(t *testing.T) {
	want := make([]byte, 3*os.Getpagesize()+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	f, err := Open(write(t, want))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && runtime.GOOS != "js" && runtime.GOOS != "wasip1" && !f.Mapped() {
		t.Errorf("not mapped on %s", runtime.GOOS)
	}
	b := f.Bytes()
	if !bytes.Equal(b, want) || f.Len() != len(want) {
		t.Fatalf("contents differ (len %d, want %d)", len(b), len(want))
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%8 != 0 {
		t.Errorf("mapping at %#x is not 8-byte aligned", p)
	}
	// Release is a hint; the bytes must read back unchanged afterwards.
	f.Release(0, len(b))
	f.Release(10, 2*os.Getpagesize())
	f.Release(-1, 5)
	f.Release(len(b), 1)
	f.Release(5, len(b))
	if !bytes.Equal(f.Bytes(), want) {
		t.Fatal("contents changed after Release")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if len(f.Bytes()) != 0 {
		t.Error("Bytes not empty after Close")
	}
	f.Release(0, 10) // no-op after Close
}

func TestOpenEmpty(t *testing.T) {
	f, err := Open(write(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Bytes()) != 0 || f.Len() != 0 {
		t.Errorf("empty file has %d bytes", len(f.Bytes()))
	}
	f.Release(0, 1)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := Open(dir); err == nil {
		t.Error("opening a directory succeeded")
	}
}

func TestReadAllAligned(t *testing.T) {
	want := []byte("0123456789abcdef!")
	p := write(t, want)
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	b, err := readAll(fh, len(want))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("readAll = %q", b)
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%8 != 0 {
		t.Errorf("buffer at %#x is not 8-byte aligned", p)
	}
	if _, err := readAll(fh, 5); err == nil {
		t.Error("reading past EOF succeeded")
	}
}
