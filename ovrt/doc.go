// Package ovrt is pipeshard's shard runtime: a pure-Go CPU engine for
// Llama-family decoders with a stateful, OpenVINO-style request API.
//
// # Model, shard and request
//
// A [Weights] value holds the tensors of a contiguous layer range [Start,
// End) of a model. The range that starts at layer 0 carries the token
// embedding; the range that ends at the last layer carries the final norm
// and the output head. A whole model is simply the range [0, Layers). That
// range is what pipeshard calls a shard.
//
// [Compile] checks the weights and prepares a [Model] (RoPE tables, a
// worker pool). [Model.NewRequest] creates a [Request], which owns the key/
// value cache of one sequence in this layer range, as an OpenVINO
// InferRequest owns its VariableState.
//
// # The one rule of positions
//
// Every forward names the absolute position of its first token. Writing at
// position p drops whatever the request's cache held at positions >= p. A
// forward may not leave a gap (p must be <= Request.Len), and may not run
// past the context length. That single rule is how a caller rewinds: a
// speculative decoder that had three of five drafted tokens rejected simply
// sends its next forward at the position after the accepted ones; a
// failover replays a prefix from position 0. No masks, no copies.
//
// # Batching
//
// [Model.Forward] advances several requests in one call: the tokens of all
// steps are stacked, every weight matrix is read once for all of them, and
// attention runs per request over its own cache. A step may carry many
// tokens (prefill, or verifying drafted tokens).
//
// # Determinism
//
// Every output is bit-identical whatever the thread count and whichever
// other requests share the batch: each dot product is computed by one
// goroutine in a fixed summation order (see ovrt/internal/kernels), and
// threads only split rows between them. pipeshard relies on this to verify
// untrusted nodes by recomputation and to promise token-identical output
// under batching.
//
// # Weights and kernels
//
// Matrices are float32 or quantized with GGUF's Q8_0 and Q4_0 block
// layouts; quantized matrices are multiplied on their blocks, with float32
// activations. Kernels are Go assembly for AVX-512 and AVX2/FMA chosen at
// run time, with a portable Go fallback that gives the same bits.
//
// # An OpenVINO backend
//
// The API is shaped so that an OpenVINO backend (cgo, behind a build tag,
// for Intel iGPU/NPU) can stand behind the same types: Compile maps to
// ov::Core::compile_model of a stateful IR exported per layer range,
// Request to ov::InferRequest with one ReadValue/Assign variable pair per
// layer's K and V, and the position rule to setting the state's length
// (trimming) before infer. See docs/architecture.md.
package ovrt
