// Package checkpoint loads Llama-family model weights from disk into
// ovrt.Weights, for a whole model or for a layer range (a pipeline shard).
//
// # Formats
//
// LoadLlama2C reads llama2.c's legacy checkpoint (run.c's export version
// 0, e.g. stories15M.bin): seven little-endian int32 — dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len — then float32
// tensors in the order token embedding [vocab, dim], attention RMSNorm
// [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim],
// wo [L, dim, dim], FFN RMSNorm [L, dim], w1 [L, hidden, dim], w2
// [L, dim, hidden], w3 [L, hidden, dim], final RMSNorm [dim], two legacy
// RoPE tables of seq_len*head_size/2 floats each (skipped), and, when
// vocab_size is negative, an unshared classifier [vocab, dim]. The file
// must be exactly as long as the header implies. The format has no
// hyperparameters beyond the header, so the configuration uses llama2.c's
// fixed values: RMSNorm eps 1e-5, RoPE theta 10000, BOS 1, EOS 2, context
// seq_len, head size dim/n_heads. Versioned llama2.c exports (magic
// "ak42") are rejected with ErrUnsupported.
//
// LoadHF reads a Hugging Face Llama directory: config.json and either
// model.safetensors or model.safetensors.index.json with the shards its
// weight_map names. config.json must say model_type "llama" (or list
// LlamaForCausalLM in architectures), hidden_act silu and no biases. It
// must give hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads and vocab_size; the other fields default as in
// transformers' LlamaConfig: num_key_value_heads = num_attention_heads,
// head_dim = hidden_size / num_attention_heads, max_position_embeddings
// 2048, rms_norm_eps 1e-6, RoPE theta 10000, tie_word_embeddings false,
// bos_token_id 1, eos_token_id 2 (a list of ids means its first). The
// RoPE base is rope_theta or rope_parameters.rope_theta (transformers 5
// writes the latter); the scaling is rope_scaling or rope_parameters, of
// type (rope_type, or the older type) "default" (none) or "llama3" with
// factor, low_freq_factor, high_freq_factor and
// original_max_position_embeddings. Other scaling types, and unknown keys
// in those objects, are ErrUnsupported rather than silently ignored. If
// both places give a value they must agree. The output head is tied to
// the embedding when tie_word_embeddings is true or lm_head.weight is
// absent.
//
// Tensor names map as model.embed_tokens → Embed, model.layers.N.
// input_layernorm → AttnNorm, post_attention_layernorm → FFNNorm,
// self_attn.{q,k,v,o}_proj → Wq, Wk, Wv, Wo, mlp.gate_proj → W1,
// mlp.down_proj → W2, mlp.up_proj → W3, model.norm → FinalNorm,
// lm_head → Head. Each tensor must have exactly the shape the
// configuration implies and dtype F32, F16 or BF16.
//
// # RoPE layout
//
// ovrt rotates adjacent pairs (2i, 2i+1) of each head (Meta's and
// llama2.c's "interleaved" layout). Hugging Face checkpoints were
// converted by Meta's script, which permutes each head's Q and K rows so
// that the pairs are (i, i + head_dim/2) ("rotate-half"). LoadHF undoes
// that permutation: within each head, Meta row 2i is HF row i and Meta
// row 2i+1 is HF row i + head_dim/2. The permutation applies to the rows
// (outputs) of q_proj (num_attention_heads heads) and k_proj
// (num_key_value_heads heads) only.
//
// # Memory
//
// Both loaders memory-map their files (internal/mmapfile). A float32
// tensor stored little-endian at a 4-byte-aligned offset — every tensor
// of a llama2.c file, and the F32 tensors of a safetensors file written by
// the reference library — is returned as a view of the mapping: no copy,
// pages read on first touch and shared with other processes mapping the
// file. Only what must change is copied: F16/BF16 tensors (widened to
// float32), HF Q/K projections (permuted), and tensors that are
// misaligned or on a big-endian host. After copying a tensor the loader
// tells the kernel its source pages may be dropped, so resident memory
// stays near the size of the loaded float32 weights. Only the requested
// layers' pages are ever touched; a layer range loads no more than its
// share.
//
// The views are read-only memory: writing to a tensor's F32 slice faults.
// Weights.Close (the Closer field) unmaps the files; no tensor may be
// used after it. Shards that ended up with no views are closed before
// the loader returns, and Closer is nil when nothing is mapped.
//
// # Errors
//
// Errors wrap one of the sentinels below (I/O errors wrap the
// *fs.PathError, so errors.Is(err, fs.ErrNotExist) works) and name the
// file and the field, tensor, offset or size at fault. Each sentinel also
// matches the ovrt sentinel of its class (ErrConfig and ErrLayerRange
// match ovrt.ErrBadConfig, ErrUnsupported matches ovrt.ErrUnsupported,
// the rest ovrt.ErrBadWeights), so the stage protocol can map them
// without knowing this package.
package checkpoint
