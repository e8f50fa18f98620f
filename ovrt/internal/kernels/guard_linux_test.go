package kernels

import (
	"math/rand"
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns a byte slice of length n whose last byte is immediately
// followed by an inaccessible page, so any read past the end faults.
func guarded(t *testing.T, n int) []byte {
	t.Helper()
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	return mem[size-page-n : size-page : size-page]
}

func guardedF32(t *testing.T, n int) []float32 {
	b := guarded(t, 4*n)
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

// TestNoOverread puts the end of the weights, the activations and the
// outputs right before an unmapped page: a kernel that reads or writes one
// byte too far crashes the test.
func TestNoOverread(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	for _, tf := range testFormats {
		for _, cols := range []int{32, 64, 288, 17, 16, 1} {
			if cols%tf.colMult != 0 {
				continue
			}
			for _, ntok := range []int{1, 2, 3, 4, 5} {
				rows := 13
				wf0, wq0 := tf.make(rng, rows, cols)
				var wf []float32
				var wq []byte
				if wf0 != nil {
					wf = guardedF32(t, len(wf0))
					copy(wf, wf0)
				} else {
					wq = guarded(t, len(wq0))
					copy(wq, wq0)
				}
				x := guardedF32(t, ntok*cols)
				copy(x, randomX(rng, ntok*cols))
				want := make([]float32, ntok*rows)
				tf.run(genericBackend, want, rows, wf, wq, cols, x, cols, ntok, 0, rows)
				for _, b := range backends() {
					out := guardedF32(t, ntok*rows)
					tf.run(b, out, rows, wf, wq, cols, x, cols, ntok, 0, rows)
					for i := range out {
						if !sameBits(out[i], want[i]) {
							t.Fatalf("%s %s cols=%d ntok=%d: out[%d] = %v, want %v", b.name, tf.name, cols, ntok, i, out[i], want[i])
						}
					}
				}
			}
		}
	}
}
