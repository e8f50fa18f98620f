package kernels

import (
	"fmt"
	"os"
)

// backend is one implementation of the matrix kernels. The arguments have
// been validated by the exported wrappers; ntok > 0, r0 < r1 and cols > 0.
type backend struct {
	name string
	f32  func(out []float32, outStride int, w []float32, cols int, x []float32, xStride, ntok, r0, r1 int)
	q8   func(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int)
	q4   func(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int)
}

// ISAEnv names the environment variable that, when set at program start
// to "generic", "avx2" or "avx512", makes the kernels use that
// implementation instead of the best one, if the CPU supports it (ISA
// reports what is in use). Results are the same either way; it exists so
// that whole-model tests can check exactly that, e.g.
// OVRT_KERNELS_ISA=generic go test ./ovrt.
const ISAEnv = "OVRT_KERNELS_ISA"

// active is the backend the exported functions use: the best one the CPU
// supports (see dispatch_*.go) or the one ISAEnv asks for, chosen once at
// init.
var active = chooseBackend(os.Getenv(ISAEnv))

func chooseBackend(want string) *backend {
	for _, b := range backends() {
		if b.name == want {
			return b
		}
	}
	return bestBackend()
}

// ISA reports which implementation is active: "avx512", "avx2" or
// "generic".
func ISA() string { return active.name }

// MatMulF32 computes, for every token t in [0, ntok) and row r in [r0, r1):
//
//	out[t*outStride + r] = dot(w[r*cols : (r+1)*cols], x[t*xStride : t*xStride+cols])
//
// w is a row-major float32 matrix with cols columns. Every output is summed
// in the canonical order (see the package documentation), so it is
// bit-identical whatever the ISA, ntok, r0, r1 and the other rows and tokens
// in the call.
func MatMulF32(out []float32, outStride int, w []float32, cols int, x []float32, xStride, ntok, r0, r1 int) {
	if !checkArgs("MatMulF32", len(out), outStride, len(w), cols, cols, 1, len(x), xStride, ntok, r0, r1) {
		return
	}
	if cols == 0 {
		zeroOut(out, outStride, ntok, r0, r1)
		return
	}
	active.f32(out, outStride, w, cols, x, xStride, ntok, r0, r1)
}

// MatMulQ8_0 is MatMulF32 for a Q8_0 matrix: row r is the cols/32 blocks
// w[r*cols/32*34 : (r+1)*cols/32*34]. cols must be a multiple of 32.
// Activations stay float32; weights are expanded in registers only.
func MatMulQ8_0(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
	if !checkArgs("MatMulQ8_0", len(out), outStride, len(w), cols, cols/QK*Q8_0BlockBytes, QK, len(x), xStride, ntok, r0, r1) {
		return
	}
	if cols == 0 {
		zeroOut(out, outStride, ntok, r0, r1)
		return
	}
	active.q8(out, outStride, w, cols, x, xStride, ntok, r0, r1)
}

// MatMulQ4_0 is MatMulF32 for a Q4_0 matrix: row r is the cols/32 blocks
// w[r*cols/32*18 : (r+1)*cols/32*18]. cols must be a multiple of 32.
func MatMulQ4_0(out []float32, outStride int, w []byte, cols int, x []float32, xStride, ntok, r0, r1 int) {
	if !checkArgs("MatMulQ4_0", len(out), outStride, len(w), cols, cols/QK*Q4_0BlockBytes, QK, len(x), xStride, ntok, r0, r1) {
		return
	}
	if cols == 0 {
		zeroOut(out, outStride, ntok, r0, r1)
		return
	}
	active.q4(out, outStride, w, cols, x, xStride, ntok, r0, r1)
}

// checkArgs panics on arguments that no correct caller passes and reports
// whether there is any work. rowLen is the length of one row of w in its
// element type (float32s or bytes); colMult is the multiple cols must be.
func checkArgs(op string, nout, outStride, nw, cols, rowLen, colMult, nx, xStride, ntok, r0, r1 int) bool {
	switch {
	case cols < 0 || cols%colMult != 0:
		panic(fmt.Sprintf("kernels: %s: cols=%d must be a non-negative multiple of %d", op, cols, colMult))
	case r0 < 0 || r1 < r0:
		panic(fmt.Sprintf("kernels: %s: bad row range [%d, %d)", op, r0, r1))
	case ntok < 0:
		panic(fmt.Sprintf("kernels: %s: ntok=%d", op, ntok))
	}
	if ntok == 0 || r0 == r1 {
		return false
	}
	switch {
	case ntok > 1 && outStride < r1:
		panic(fmt.Sprintf("kernels: %s: outStride=%d < r1=%d: token outputs overlap", op, outStride, r1))
	case ntok > 1 && xStride < 0:
		panic(fmt.Sprintf("kernels: %s: xStride=%d", op, xStride))
	case nw < r1*rowLen:
		panic(fmt.Sprintf("kernels: %s: weights too short: %d < %d rows of %d", op, nw, r1, rowLen))
	case nx < (ntok-1)*xStride+cols:
		panic(fmt.Sprintf("kernels: %s: x too short: %d < %d tokens of %d cols at stride %d", op, nx, ntok, cols, xStride))
	case nout < (ntok-1)*outStride+r1:
		panic(fmt.Sprintf("kernels: %s: out too short: %d < (%d-1)*%d+%d", op, nout, ntok, outStride, r1))
	}
	return true
}

func zeroOut(out []float32, outStride, ntok, r0, r1 int) {
	for t := 0; t < ntok; t++ {
		clear(out[t*outStride+r0 : t*outStride+r1])
	}
}
