// Package kernels holds the compute kernels of ovrt, pipeshard's CPU LLM
// runtime: matrix × activations products over float32, Q8_0 and Q4_0
// weights, and the float16/bfloat16 and quantization format helpers.
//
// The one property everything here is built around: every output is
// computed in a single, documented order of floating-point operations (the
// canonical order below), so it is bit-identical on every machine, with
// every instruction set, whatever the batch and thread partitioning. Peers
// compare logits bit for bit to catch lying peers, and the runtime promises
// the same logits whatever the thread count and batch composition.
//
// # Functions
//
// MatMulF32, MatMulQ8_0 and MatMulQ4_0 compute, for every token t in
// [0, ntok) and row r in [r0, r1),
//
//	out[t*outStride + r] = dot(row r of w, x[t*xStride : t*xStride+cols])
//
// and write nothing else. Rows are how callers split work between threads
// (disjoint [r0, r1) ranges into the same out); tokens are a decode step
// (ntok == 1) or a batch (prefill, speculative verification, several
// sessions). They panic, with a message starting "kernels: ", only on
// programmer errors: slices too short, cols not a multiple of 32 for
// quantized weights, a bad row range, or token outputs that would overlap
// (ntok > 1 and outStride < r1). They allocate nothing and are safe for
// concurrent use on disjoint outputs.
//
// F16ToF32, F32ToF16 (round to nearest even; overflow to infinity;
// subnormals; NaN stays NaN) and BF16ToF32 convert scalars.
// QuantizeRowQ8_0 and QuantizeRowQ4_0 follow ggml's reference quantizers
// exactly (see their comments for the rounding rules), and
// DequantizeRowQ8_0 and DequantizeRowQ4_0 expand blocks to float32 (one
// float32 multiply d*q per element). These helpers are plain Go.
//
// ISA reports the implementation the MatMul functions use: "avx512",
// "avx2" or "generic".
//
// # Weight formats
//
// Little-endian GGUF block layouts. F32: row-major float32, a row is cols
// values. Q8_0: blocks of 32 weights in 34 bytes, an f16 scale d then 32
// int8 q; weight = d*q. Q4_0: blocks of 32 weights in 18 bytes, an f16 scale
// d then 16 bytes qs; element i (0..15) is (qs[i]&15)-8 and element i+16 is
// (qs[i]>>4)-8; weight = d*element. A quantized row of cols weights is cols/32
// consecutive blocks, and rows are consecutive.
//
// # The canonical summation order
//
// fma(a, b, c) below is the fused multiply-add: a*b+c rounded once to
// float32 (round to nearest, ties to even). Every other operation is one
// float32 operation rounded to nearest even.
//
// F32. Sixteen lane accumulators acc[0..15] start at +0. For each full chunk
// of 16 columns, k = 0, 1, 2, ...:
//
//	acc[i] = fma(w[16k+i], x[16k+i], acc[i])      for i = 0..15
//
// Then the fixed reduction tree:
//
//	s8[i] = acc[i] + acc[i+8]   (i < 8)
//	s4[i] = s8[i] + s8[i+4]     (i < 4)
//	s2[i] = s4[i] + s4[i+2]     (i < 2)
//	s     = s2[0] + s2[1]
//
// Then the cols%16 tail columns j, in ascending order: s = fma(w[j], x[j], s).
//
// Q8_0 and Q4_0. For each block b (32 weights, element values e[0..31] as
// small integers converted exactly to float32, d = the block's f16 scale as
// float32, x the block's 32 activations), for i = 0..15:
//
//	tmp    = e[i] * x[i]                  (rounded product)
//	tmp    = fma(e[i+16], x[i+16], tmp)
//	acc[i] = fma(tmp, d, acc[i])
//
// and after the last block the same reduction tree. (cols is a multiple of
// 32, so there is no tail.)
//
// The order of the operands of an addition or a multiplication does not
// matter (both are commutative in IEEE arithmetic), which is what lets SIMD
// code combine lanes in any register layout as long as the pairs are the
// ones above. Only NaN payloads are not canonical: when an output is NaN,
// every implementation returns a NaN, but not necessarily the same bits.
//
// # Implementations and their agreement
//
// generic.go is the portable Go code and the executable definition of the
// order. Go has no float32 FMA, and float32(math.FMA(a, b, c)) in float64
// rounds twice, which is wrong when the float64 result lands exactly on a
// float32 midpoint (a = b = 1+2^-12, c = 2^-80 is one such case). fma32
// therefore computes in float64 (the product of two float32 values is
// exact there) and, in the rare midpoint case, recovers the rounding error
// with TwoSum and rounds to odd before the final conversion; its comment
// has the argument. Conversions are explicit so the compiler cannot fuse
// or drop a rounding.
//
// The amd64 assembly computes exactly the same operations with vector
// instructions: a 16-lane accumulator is one zmm register (AVX-512) or a
// pair of ymm registers for lanes 0-7 and 8-15 (AVX2), VFMADD231PS is the
// fma, VMULPS the rounded product, and the reduction tree is a network of
// 128-bit-lane and in-lane shuffles (VSHUFF64X2 or VPERM2F128, then VSHUFPS)
// and VADDPS that applies it to several accumulators at once. Block scales
// come from f16Table, a 65536-entry float32 table filled by F16ToF32 (the
// conversion is exact, so the table equals VCVTPH2PS). Q8_0 elements are
// sign-extended and converted with VPMOVSXBD+VCVTDQ2PS; Q4_0 elements are
// zero-extended with VPMOVZXBD, and either converted after subtracting 8
// (AVX2) or built as the float 2^23+n by OR-ing n into the bit pattern of
// 2^23 and then subtracting 2^23+8, which is exact (AVX-512).
//
// Tests hold all of this together: TestGenericMatchesSpec compares the Go
// code with a literal transcription of the order using exact big-float
// FMAs, TestBitIdentical and the fuzz targets compare every SIMD backend the
// CPU supports with the Go code with math.Float32bits equality, over random
// shapes, strides and row ranges, TestBatchIndependence checks that a row
// does not depend on the other rows and tokens of its call, and
// TestSpecialScales runs all 65536 f16 scales through every backend.
//
// # ISA dispatch
//
// On amd64 (without the purego build tag) dispatch_amd64.go asks CPUID and
// XGETBV once at init: AVX-512F with OS-enabled zmm state selects the
// "avx512" backend, AVX2+FMA with OS-enabled ymm state selects "avx2", and
// anything else "generic". The AVX-512 kernels use only AVX512F instructions
// besides AVX2 ones (no BW, VL or DQ), and neither path needs F16C since
// scales come from f16Table. Every other GOOS/GOARCH, and any build
// with -tags purego, compiles dispatch_other.go and uses the Go code only.
// Tests and benchmarks reach every backend the CPU supports through
// backends(), so one test run checks them all against each other; running
// the tests with -tags purego checks the build without assembly.
//
// # Kernel structure
//
// The assembly is generated by internal/asmgen (go generate in this
// directory; TestGeneratedUpToDate there fails when the committed files are
// stale). For each ISA, format and token count T it emits one function that
// computes a tile of T tokens × R rows at a time (R = 8 for one or two
// tokens and 4 for three or four with AVX-512; R = 4, 3, 2 for T = 1, 2, 3
// with AVX2), then single rows. Each weight vector loaded is used for T
// tokens and each activation vector for R rows, and the R×T accumulation
// chains are independent, which hides the FMA latency; with one token the
// R rows are R load streams. The generator checks the reduction network
// symbolically and panics unless every output lane holds exactly the
// canonical tree of its accumulator.
//
// dispatch_amd64.go drives the tiles: with at most one tile of tokens it
// walks the rows in blocks of 1024 (assembly is not preemptible, so this
// bounds one call); with more tokens it walks blocks of about 48 KiB of
// weights and runs every token tile over a block while it is in cache.
// None of this changes any result: an output's order depends only on cols.
//
// # Adding an ISA (for example arm64 NEON or SVE)
//
//  1. Write the tile kernels, by hand or by extending internal/asmgen with an
//     ISA description. A 16-lane accumulator is four 128-bit registers on
//     NEON (lanes 0-3, 4-7, 8-11, 12-15); FMLA is the fma (it rounds once),
//     FMUL the rounded product. Reduce with exactly the canonical pairs:
//     the s8 step adds register 0 to register 2 and 1 to 3, the s4 step adds
//     the two results, then lanes 0+2 and 1+3 within the register (for
//     example with EXT or a pairwise add applied to the right operands),
//     then lane 0+1. Quantized weights: SXTL/UXTL widening and SCVTF, or the
//     2^23 trick; scales through f16Table or FCVTL.
//  2. Add dispatch_arm64.go (and exclude arm64 from dispatch_other.go's
//     build constraint) with feature detection (golang.org/x/sys/cpu or the
//     auxiliary vector), the backends list and the driver loops, which can
//     be shared with amd64's by moving them to a file both build.
//  3. Run the tests on the new machine: TestBitIdentical, the fuzz targets
//     and TestSpecialScales compare the new backend with the Go code bit
//     for bit; add per-ISA sub-benchmarks automatically through backends().
//
// BENCH.md has measured throughput per ISA and shape.
package kernels

//go:generate go run ./internal/asmgen -dir .
