//go:build amd64 && !purego

package kernels

// The amd64 backends drive the generated assembly tiles
// (kernels_amd64.s, built by internal/asmgen). A tile function computes T
// tokens × nrows rows; the driver here walks the row range in blocks and
// each block's tokens in tiles of up to maxT.

type f32Kernel func(out *float32, outStride int, w *float32, cols int, x *float32, xStride int, nrows int)
type qKernel func(out *float32, outStride int, w *byte, cols int, x *float32, xStride int, nrows int)

// tileSet holds one ISA's tile functions, indexed by token count T
// (index 0 unused).
type tileSet struct {
	f32    []f32Kernel
	q8, q4 []qKernel
}

//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

func xgetbv0() (eax, edx uint32)

// cpuFeatures reports what the CPU and the OS support: AVX2 with FMA (and
// OS-saved ymm state), and AVX-512F (and OS-saved zmm and opmask state).
// F16C is not needed: the kernels look block scales up in f16Table.
func cpuFeatures() (avx2, avx512 bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		fma     = 1 << 12
		osxsave = 1 << 27
		avx     = 1 << 28
	)
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false, false
	}
	xcr0, _ := xgetbv0()
	if xcr0&0x6 != 0x6 { // SSE and AVX state
		return false, false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	avx2 = ebx7&(1<<5) != 0
	avx512 = avx2 && ebx7&(1<<16) != 0 && xcr0&0xe0 == 0xe0 // AVX512F; opmask, ZMM_Hi256, Hi16_ZMM state
	return avx2, avx512
}

var (
	hasAVX2, hasAVX512 = cpuFeatures()

	avx512Backend = newAsmBackend("avx512", &avx512Tiles)
	avx2Backend   = newAsmBackend("avx2", &avx2Tiles)
)

func bestBackend() *backend {
	switch {
	case hasAVX512:
		return avx512Backend
	case hasAVX2:
		return avx2Backend
	}
	return genericBackend
}

// backends lists every backend this CPU can run, generic first.
func backends() []*backend {
	b := []*backend{genericBackend}
	if hasAVX2 {
		b = append(b, avx2Backend)
	}
	if hasAVX512 {
		b = append(b, avx512Backend)
	}
	return b
}

// Row blocking. With one tile of tokens, rows are streamed once and the
// block only bounds how long one assembly call runs (assembly is not
// preemptible). With several tiles, a block of rows is reused by every tile
// of tokens while it is still in L1/L2, so it is sized in bytes.
const (
	decodeBlockRows = 1024
	tileBlockBytes  = 48 << 10
	blockRowQuantum = 24 // multiple of every tile's R (8, 4, 3, 2)
)

func rowBlock(ntok, maxT, rowBytes int) int {
	if ntok <= maxT {
		return decodeBlockRows
	}
	n := tileBlockBytes / rowBytes / blockRowQuantum * blockRowQuantum
	return max(n, blockRowQuantum)
}

func newAsmBackend(name string, ts *tileSet) *backend {
	return &backend{
		name: name,
		f32: func(out []float32, outStride int, w []float32, cols int, x []float32, xStride, ntok, r0, r1 int) {
			maxT := len(ts.f32) - 1
			rb := rowBlock(ntok, maxT, 4*cols)
			for ra := r0; ra < r1; ra += rb {
				n := min(rb, r1-ra)
				wp := &w[ra*cols]
				for t0 := 0; t0 < ntok; {
					T := min(maxT, ntok-t0)
					ts.f32[T](&out[t0*outStride+ra], outStride, wp, cols, &x[t0*xStride], xStride, n)
					t0 += T
				}
			}
		},
		q8: func(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
			runQ(ts.q8, Q8_0BlockBytes, out, outStride, w, cols, x, xStride, ntok, r0, r1)
		},
		q4: func(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
			runQ(ts.q4, Q4_0BlockBytes, out, outStride, w, cols, x, xStride, ntok, r0, r1)
		},
	}
}

func runQ(k []qKernel, blockBytes int, out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
	maxT := len(k) - 1
	rowBytes := cols / QK * blockBytes
	rb := rowBlock(ntok, maxT, rowBytes)
	for ra := r0; ra < r1; ra += rb {
		n := min(rb, r1-ra)
		wp := &w[ra*rowBytes]
		for t0 := 0; t0 < ntok; {
			T := min(maxT, ntok-t0)
			k[T](&out[t0*outStride+ra], outStride, wp, cols, &x[t0*xStride], xStride, n)
			t0 += T
		}
	}
}
