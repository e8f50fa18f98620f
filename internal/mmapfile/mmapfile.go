package mmapfile

import (
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"unsafe"
)

// File is a read-only, whole-file mapping.
type File struct {
	name string

	mu     sync.Mutex
	data   []byte
	mapped bool // data comes from mmap and must be unmapped
}

// Open maps the whole file at path read-only. A zero-length file yields a
// File whose Bytes is empty.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("mmapfile: %s: not a regular file (%v)", path, fi.Mode().Type())
	}
	size := fi.Size()
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("mmapfile: %s: size %d does not fit in memory on this platform", path, size)
	}
	if size == 0 {
		return &File{name: path, data: []byte{}}, nil
	}
	data, mapped, err := mapFile(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("mmapfile: %s: %w", path, err)
	}
	return &File{name: path, data: data, mapped: mapped}, nil
}

// Name returns the path the file was opened with.
func (f *File) Name() string { return f.name }

// Bytes returns the file's contents. The slice must not be written to and
// must not be used after Close.
func (f *File) Bytes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.data
}

// Len returns the file's size in bytes.
func (f *File) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.data)
}

// Mapped reports whether the contents are memory-mapped (rather than read
// into the heap by the fallback).
func (f *File) Mapped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mapped
}

// Release tells the system that the bytes [off, off+n) will not be read
// again soon, so the resident pages that lie wholly inside that range may
// be dropped (they are re-read from the file if touched again). It is a
// hint: a no-op on the heap fallback and where the system lacks
// madvise(MADV_DONTNEED). Loaders call it after converting a tensor into
// a private copy, which keeps peak resident memory near the size of the
// converted model instead of converted plus source.
func (f *File) Release(off, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mapped || off < 0 || n <= 0 || off > len(f.data) || n > len(f.data)-off {
		return
	}
	page := os.Getpagesize()
	lo := (off + page - 1) / page * page
	hi := (off + n) / page * page
	if lo >= hi {
		return
	}
	dontNeed(f.data[lo:hi])
}

// Close releases the mapping. It is safe to call more than once.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, mapped := f.data, f.mapped
	f.data, f.mapped = nil, false
	if !mapped || len(data) == 0 {
		return nil
	}
	if err := unmap(data); err != nil {
		return fmt.Errorf("mmapfile: %s: munmap: %w", f.name, err)
	}
	return nil
}

// readAll is the fallback: it reads size bytes of f into an 8-byte-aligned
// heap buffer.
func readAll(f *os.File, size int) ([]byte, error) {
	words := make([]uint64, (size+7)/8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), size)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Anon returns a writable, page-aligned buffer of size bytes outside the
// Go heap (an anonymous mapping where the OS has one), released by Close.
// A multi-gigabyte shard read into it does not make the garbage collector
// let the heap grow by as much again.
func Anon(size int) (*File, error) {
	if size <= 0 {
		return &File{name: "anonymous"}, nil
	}
	b, mapped, err := anon(size)
	if err != nil {
		return nil, fmt.Errorf("mmapfile: anonymous mapping of %d bytes: %w", size, err)
	}
	if mapped {
		hugePages(b)
	}
	return &File{name: "anonymous", data: b, mapped: mapped}, nil
}
