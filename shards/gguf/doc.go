// Package gguf reads and writes GGUF files, the model format of llama.cpp,
// and maps llama-architecture models to and from ovrt.Weights.
//
// # Reading
//
// Parse (or ParseBytes for a file in memory, or Open for a path) decodes a
// GGUF version 3 or 2 file: the header, every metadata key/value pair, and
// the tensor directory. Tensor data is not read until asked for.
//
//	f, err := gguf.Open("model.gguf")
//	arch, err := f.String("general.architecture")
//	layers, err := f.Uint("llama.block_count")
//	tokens, err := f.Strings("tokenizer.ggml.tokens")
//	ti, err := f.Tensor("blk.0.attn_q.weight") // Name, Dims, Type, Offset, Size
//	w, err := f.TensorF32("output_norm.weight")
//
// Metadata values keep their GGUF type in KV.Value (uint8 ... float64,
// string, or Array, whose Values is a typed slice such as []string or, for
// arrays of arrays, []Array). The accessors convert within a family and
// fail with ErrWrongType otherwise: Uint and Int take any integer width
// (Uint refuses negatives), Float takes float32 or float64 (a float32
// becomes the float64 of its shortest decimal, so 1e-5 written as float32
// reads back as exactly 1e-5), Strings, Floats and Ints take arrays. A
// missing key is ErrKeyNotFound.
//
// Tensor dims are in GGUF order, innermost first: a row-major [rows, cols]
// matrix has Dims [cols, rows]. TensorInfo.Offset is absolute (from the
// start of the file). TensorBytes returns the raw data and TensorF32
// converts it to float32, for the types F32, F16, BF16, Q8_0 and Q4_0.
// Every other ggml type (k-quants, i-quants, ...) is parsed, and its data
// range checked, but asking for its data is an ErrUnsupported naming the
// tensor and the type.
//
// # Hostile input
//
// The decoder is meant for untrusted files. Before allocating, it checks
// every count and length (tensor count, metadata count, string and array
// lengths) against the bytes left in the file, so a short file cannot
// claim a huge allocation; arrays grow only as their elements are actually
// read. It requires known value and ggml types, at most 4 dimensions whose
// element count fits in an int64, rows that are whole quantization blocks,
// tensor names of 1 to 63 bytes (llama.cpp's limit), unique keys and tensor
// names, a general.alignment that is a uint32 power of two, tensor offsets
// that are multiples of it, tensor data inside the file and not
// overlapping, and arrays nested at most 8 deep. Failures are errors, never
// panics; FuzzParse checks this. Every error wraps one of the sentinels in
// errors.go (all prefixed "gguf: ") and names the key, tensor or offset:
//
//	gguf: file truncated: tensor "blk.3.ffn_up.weight" data [52435968, 53615616) extends past the end of the 53000000-byte file
//
// # Writing
//
// Writer writes a GGUF v3 file in a single pass without holding tensor data:
// declare the metadata (AddKV, typed by the Go value: uint32(8), "llama",
// []string{...}; plain int is refused) and the tensors (AddTensor with the
// type and GGUF-order dims, which fixes every offset), then write each
// tensor's data in declaration order (WriteTensor, WriteTensorF32, or
// Write for a stream of any piece sizes), then Close. Tensor data is
// aligned to 32 bytes (or general.alignment) and each tensor padded to it,
// as llama.cpp writes files.
//
// # Llama models
//
// ReadLlamaConfig maps the llama.* keys to ovrt.Config:
//
//	llama.embedding_length                 Dim          required
//	llama.feed_forward_length              HiddenDim    required
//	llama.block_count                      Layers       required
//	llama.attention.head_count             Heads        required
//	llama.attention.head_count_kv          KVHeads      default Heads
//	llama.context_length                   Context      required
//	llama.attention.layer_norm_rms_epsilon NormEps      required
//	llama.rope.freq_base                   RopeTheta    default 10000
//	llama.attention.key_length             HeadDim      default Dim/Heads
//	llama.vocab_size                       Vocab        default len(tokenizer.ggml.tokens)
//	tokenizer.ggml.bos_token_id            BOS          default 1 for a llama tokenizer
//	tokenizer.ggml.eos_token_id            EOS          default 2 for a llama tokenizer
//	no output.weight tensor                TiedHead
//
// A missing required key is an ErrKeyNotFound naming it. Per-layer arrays
// are accepted when all their values are equal. A value_length or
// rope.dimension_count different from the head size (partial rotary
// embeddings), linear, yarn or longrope rope scaling, and any architecture
// other than "llama" are ErrUnsupported.
//
// Llama 3 rope scaling: llama.cpp does not store the llama3 parameters as
// keys; its converter bakes them into a rope_freqs.weight tensor of
// HeadDim/2 per-frequency divisors (1 for high frequencies, factor for low
// ones, a blend in between). ReadLlamaConfig recovers an
// ovrt.RopeScaling{Type: "llama3"} from that tensor: Factor is its largest
// value, and since the divisors depend on (OriginalContext, LowFreqFactor,
// HighFreqFactor) only through one line in 1/wavelength, the two band edges
// are solved for given OriginalContext (llama.rope.scaling.original_context_length
// if present, else 8192, Llama 3's); the result reproduces the tensor, which
// is verified (a tensor that is not a llama3 blend is ErrUnsupported).
// WriteLlama writes both the rope_freqs.weight tensor (what llama.cpp
// uses) and pipeshard.rope_scaling.* keys holding the exact parameters,
// which ReadLlamaConfig prefers. LoadLlama does not otherwise load
// rope_freqs.weight: ovrt computes the frequencies from the config.
//
// LoadLlama(path, start, end) loads the layers [start, end) (end <= 0: to
// the last) as ovrt.Weights: token_embd.weight when start is 0;
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate (W1), ffn_down (W2), ffn_up (W3)}.weight; output_norm.weight and
// output.weight (or the embedding, when tied) when end is the last layer.
// The file is memory-mapped (internal/mmapfile): F32 tensors are read-only
// views of the mapping (never write to them), Q8_0 and Q4_0 tensors are
// kept as stored (ovrt uses the same block layouts), F16 and BF16 tensors
// are converted to F32 copies (and their pages released), as are norm
// vectors of any decodable type. Weights.Close unmaps the file. Q and K
// rows are used as stored: llama GGUF files keep Meta's interleaved RoPE
// layout, as ovrt does. Each tensor's shape is checked (ErrShape, naming
// it), a missing tensor is ErrTensorNotFound, a bad range ErrLayerRange,
// and the result passes ovrt.Weights.Validate. Tensors that llama.cpp
// would use but ovrt would ignore make the load fail with ErrUnsupported
// rather than run a different model: attention biases or any other extra
// tensor in the loaded blocks, unknown global tensors, and mixtures of
// experts (llama.expert_count). The whole output head is loaded; use
// ovrt.Weights.Slice for a range holding only some of its rows.
//
// WriteLlama(w, name, weights, vocab) writes a whole model (layers
// [0, Layers)) with general.{architecture, name, alignment, file_type},
// all the llama.* keys above (plus value_length, rope.dimension_count),
// the tokenizer.ggml.* keys, and every tensor in its stored type (F32,
// Q8_0, Q4_0), output.weight omitted when the head is tied. WriteLlamaFile
// writes to a path atomically.
//
// # Tokenizer
//
// Vocab is the embedded tokenizer: tokenizer.ggml.model "llama"
// (SentencePiece: tokens, scores, token_type) or "gpt2" (byte-level BPE:
// tokens, merges, token_type, pre), with BOS, EOS and UNK ids (-1 for
// none). ReadVocab reads it; WriteLlama writes it after Vocab.Validate,
// which refuses what llama.cpp refuses, duplicate token strings above all.
// A llama2.c tokenizer.bin must therefore be converted first: byte tokens
// become "<0xNN>" with token_type 6 (TokenByte), "<unk>" 2, "<s>" and
// "</s>" 3 (TokenControl), spaces "▁" (see stories_test.go). llama.cpp's
// SentencePiece tokenizer also needs all 256 byte tokens "<0x00>" to
// "<0xFF>" to encode arbitrary text: it aborts on a vocabulary without
// them, which Validate does not check.
//
// # Checked against
//
// The tests compare with gguf-parser-go (an independent Go parser; it trims
// white space off strings, we keep the bytes, as llama.cpp does), convert
// the real stories15M and the oracle's gqa_a (llama3 rope scaling) through
// GGUF bit for bit, and run gqa_a through ovrt against the oracle's logits.
// testdata/llamacpp_check.mjs checks written files against llama.cpp by
// hand: stories15M (F32) and gqa_a load and give next-token probabilities
// within 1e-3 of the oracle's on every prompt position (llama.cpp's f16 KV
// cache sets that floor).
package gguf
