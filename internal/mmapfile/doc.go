// Package mmapfile maps a whole file into memory read-only.
//
// Open maps the file with mmap(2) on Unix systems, so the bytes are
// paged in from the page cache only when touched and are shared with
// every other process mapping the same file: a model loaded this way
// costs no more resident memory than the parts of it in use. On other
// systems (Windows, wasm) Open falls back to reading the whole file into
// an 8-byte-aligned heap buffer; the API is the same.
//
// The bytes are read-only. Writing to them faults (SIGSEGV) on the mmap
// path. Truncating the file while it is mapped makes later accesses past
// the new end fault (SIGBUS), as with any mmap; model files are expected
// to be immutable while in use.
//
// The slice returned by Bytes (and every slice or unsafe view derived
// from it) is valid until Close; using it afterwards is a use-after-free
// that the garbage collector cannot catch. The mapping's start is
// page-aligned (heap fallback: 8-byte-aligned), so a view at an offset
// that is a multiple of 4 may be reinterpreted as []float32.
package mmapfile
