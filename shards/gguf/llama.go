package gguf

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/pipeshard/pipeshard/internal/mmapfile"
	"github.com/pipeshard/pipeshard/ovrt"
)

// Tensor names of the llama architecture.
const (
	nameEmbed     = "token_embd.weight"
	nameFinalNorm = "output_norm.weight"
	nameHead      = "output.weight"
	nameRopeFreqs = "rope_freqs.weight"
)

func blk(i int, s string) string { return fmt.Sprintf("blk.%d.%s.weight", i, s) }

// Private keys WriteLlama adds to keep a llama3 rope scaling exact (the
// rope_freqs.weight tensor it also writes is what llama.cpp reads).
const (
	keyScalingType    = "pipeshard.rope_scaling.type"
	keyScalingFactor  = "pipeshard.rope_scaling.factor"
	keyScalingLow     = "pipeshard.rope_scaling.low_freq_factor"
	keyScalingHigh    = "pipeshard.rope_scaling.high_freq_factor"
	keyScalingOrigCtx = "pipeshard.rope_scaling.original_context_length"
)

// DefaultLlama3OriginalContext is the original context length assumed when
// a llama3 rope scaling is recovered from rope_freqs.weight alone (the
// result does not depend on it; see the package documentation).
const DefaultLlama3OriginalContext = 8192

// ReadLlamaConfig reads the configuration of a llama-architecture model.
// Missing required keys are ErrKeyNotFound errors naming the key.
func ReadLlamaConfig(f *File) (ovrt.Config, error) {
	var c ovrt.Config
	arch, err := f.String("general.architecture")
	if err != nil {
		return c, err
	}
	if arch != "llama" {
		return c, fmt.Errorf("%w: architecture %q (want llama)", ErrUnsupported, arch)
	}
	type intKey struct {
		key string
		dst *int
	}
	for _, k := range []intKey{
		{"llama.embedding_length", &c.Dim},
		{"llama.feed_forward_length", &c.HiddenDim},
		{"llama.block_count", &c.Layers},
		{"llama.attention.head_count", &c.Heads},
		{"llama.context_length", &c.Context},
	} {
		if *k.dst, err = uniformInt(f, k.key); err != nil {
			return c, err
		}
	}
	c.KVHeads = c.Heads
	if f.Has("llama.attention.head_count_kv") {
		if c.KVHeads, err = uniformInt(f, "llama.attention.head_count_kv"); err != nil {
			return c, err
		}
	}
	if c.NormEps, err = f.Float("llama.attention.layer_norm_rms_epsilon"); err != nil {
		return c, err
	}
	c.RopeTheta = 10000
	if f.Has("llama.rope.freq_base") {
		if c.RopeTheta, err = f.Float("llama.rope.freq_base"); err != nil {
			return c, err
		}
	}

	// Head size: key_length, by default Dim/Heads. Like the other
	// checkpoint loaders, HeadDim is always set explicitly.
	if c.Heads > 0 && c.Dim%c.Heads == 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if f.Has("llama.attention.key_length") {
		if c.HeadDim, err = uniformInt(f, "llama.attention.key_length"); err != nil {
			return c, err
		}
	}
	head := c.HeadDim
	if f.Has("llama.attention.value_length") {
		v, err := uniformInt(f, "llama.attention.value_length")
		if err != nil {
			return c, err
		}
		if v != head {
			return c, fmt.Errorf("%w: llama.attention.value_length %d differs from the key length %d", ErrUnsupported, v, head)
		}
	}
	if f.Has("llama.rope.dimension_count") {
		r, err := uniformInt(f, "llama.rope.dimension_count")
		if err != nil {
			return c, err
		}
		if r != head {
			return c, fmt.Errorf("%w: llama.rope.dimension_count %d rotates part of the %d-wide heads", ErrUnsupported, r, head)
		}
	}

	// Vocabulary size.
	switch {
	case f.Has("llama.vocab_size"):
		c.Vocab, err = uniformInt(f, "llama.vocab_size")
	case f.Has("tokenizer.ggml.tokens"):
		var toks Array
		toks, err = f.Array("tokenizer.ggml.tokens")
		c.Vocab = toks.Len()
	default:
		t, terr := f.Tensor(nameEmbed)
		if terr != nil {
			return c, fmt.Errorf("%w: %q (nor tokenizer.ggml.tokens, nor %s)", ErrKeyNotFound, "llama.vocab_size", nameEmbed)
		}
		if len(t.Dims) >= 2 && t.Dims[1] <= math.MaxInt32 {
			c.Vocab = int(t.Dims[1])
		}
	}
	if err != nil {
		return c, err
	}

	// Special tokens; llama.cpp's defaults for a SentencePiece vocabulary.
	c.BOS, c.EOS = 1, 2
	if m, err := f.String("tokenizer.ggml.model"); err == nil && m != "llama" {
		c.BOS, c.EOS = -1, -1
	}
	for _, k := range []intKey{{"tokenizer.ggml.bos_token_id", &c.BOS}, {"tokenizer.ggml.eos_token_id", &c.EOS}} {
		if f.Has(k.key) {
			if *k.dst, err = uniformInt(f, k.key); err != nil {
				return c, err
			}
		}
	}

	_, err = f.Tensor(nameHead)
	c.TiedHead = err != nil

	if f.Has("llama.expert_count") {
		n, err := f.Uint("llama.expert_count")
		if err != nil {
			return c, err
		}
		if n > 0 {
			return c, fmt.Errorf("%w: a mixture of %d experts (llama.expert_count)", ErrUnsupported, n)
		}
	}

	if c.RopeScaling, err = readRopeScaling(f, c); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("gguf: %w", err)
	}
	return c, nil
}

// uniformInt reads an integer key, or an array of equal integers (some
// converters write per-layer values).
func uniformInt(f *File, key string) (int, error) {
	var v int64
	if a, err := f.Array(key); err == nil {
		xs, err := f.Ints(key)
		if err != nil {
			return 0, err
		}
		if a.Len() == 0 {
			return 0, fmt.Errorf("%w: %q is an empty array", ErrWrongType, key)
		}
		for _, x := range xs {
			if x != xs[0] {
				return 0, fmt.Errorf("%w: %q varies across layers (%v)", ErrUnsupported, key, xs)
			}
		}
		v = xs[0]
	} else {
		u, err := f.Uint(key)
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt32 {
			return 0, fmt.Errorf("gguf: %w: %q is %d", ovrt.ErrBadConfig, key, u)
		}
		v = int64(u)
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, fmt.Errorf("gguf: %w: %q is %d", ovrt.ErrBadConfig, key, v)
	}
	return int(v), nil
}

func readRopeScaling(f *File, c ovrt.Config) (*ovrt.RopeScaling, error) {
	if f.Has(keyScalingType) {
		var s ovrt.RopeScaling
		var err error
		if s.Type, err = f.String(keyScalingType); err != nil {
			return nil, err
		}
		for _, k := range []struct {
			key string
			dst *float64
		}{{keyScalingFactor, &s.Factor}, {keyScalingLow, &s.LowFreqFactor}, {keyScalingHigh, &s.HighFreqFactor}} {
			if *k.dst, err = f.Float(k.key); err != nil {
				return nil, err
			}
		}
		if s.OriginalContext, err = uniformInt(f, keyScalingOrigCtx); err != nil {
			return nil, err
		}
		return &s, nil
	}
	if f.Has("llama.rope.scaling.type") {
		t, err := f.String("llama.rope.scaling.type")
		if err != nil {
			return nil, err
		}
		if t != "none" && t != "linear" {
			return nil, fmt.Errorf("%w: rope scaling %q (llama.rope.scaling.type)", ErrUnsupported, t)
		}
	}
	if f.Has("llama.rope.scaling.factor") {
		// llama.cpp applies it as a linear frequency scale.
		x, err := f.Float("llama.rope.scaling.factor")
		if err != nil {
			return nil, err
		}
		if x != 0 && x != 1 {
			return nil, fmt.Errorf("%w: linear rope scaling by %g (llama.rope.scaling.factor)", ErrUnsupported, x)
		}
	}
	t, err := f.Tensor(nameRopeFreqs)
	if err != nil {
		return nil, nil
	}
	half := c.HeadSize() / 2
	if len(t.Dims) != 1 || t.Dims[0] != uint64(half) {
		return nil, fmt.Errorf("%w: %s is %v, want [%d]", ErrShape, nameRopeFreqs, t.Dims, half)
	}
	factors, err := f.TensorF32(nameRopeFreqs)
	if err != nil {
		return nil, err
	}
	orig := DefaultLlama3OriginalContext
	if f.Has("llama.rope.scaling.original_context_length") {
		if orig, err = uniformInt(f, "llama.rope.scaling.original_context_length"); err != nil {
			return nil, err
		}
	}
	return inferLlama3(factors, c.HeadSize(), c.RopeTheta, orig)
}

// Llama3RopeFactors returns the per-frequency divisors llama.cpp expects in
// rope_freqs.weight for a llama3 rope scaling: 1 for the high
// frequencies, Factor for the low ones, and a smooth blend in between.
func Llama3RopeFactors(s ovrt.RopeScaling, headDim int, theta float64) []float32 {
	out := make([]float32, headDim/2)
	for i := range out {
		out[i] = float32(llama3Factor(s, freq(i, headDim, theta)))
	}
	return out
}

func freq(i, headDim int, theta float64) float64 {
	return math.Pow(theta, -float64(2*i)/float64(headDim))
}

func llama3Factor(s ovrt.RopeScaling, freq float64) float64 {
	L := float64(s.OriginalContext)
	wavelen := 2 * math.Pi / freq
	switch {
	case wavelen < L/s.HighFreqFactor:
		return 1
	case wavelen > L/s.LowFreqFactor:
		return s.Factor
	}
	smooth := (L/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
	return 1 / ((1-smooth)/s.Factor + smooth)
}

// inferLlama3 recovers llama3 scaling parameters from rope_freqs factors.
// The factors depend on (OriginalContext, Low, High) only through the
// line s(x) = (L·x - Low)/(High - Low) in x = 1/wavelength, so given L any
// two points of the blended band fix Low and High; with fewer such points
// any line consistent with the band edges gives identical factors.
func inferLlama3(factors []float32, headDim int, theta float64, orig int) (*ovrt.RopeScaling, error) {
	fail := func(why string) error {
		return fmt.Errorf("%w: %s is not a llama3 rope scaling: %s", ErrUnsupported, nameRopeFreqs, why)
	}
	const tol = 1e-4
	f := 0.0
	for _, v := range factors {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return nil, fail(fmt.Sprintf("factor %g", v))
		}
		f = max(f, float64(v))
	}
	if f <= 1+tol {
		for _, v := range factors {
			if math.Abs(float64(v)-1) > tol {
				return nil, fail(fmt.Sprintf("factor %g below 1", v))
			}
		}
		return nil, nil // all ones: no scaling
	}
	var midX, midS []float64
	lowMax, highMin := math.Inf(-1), math.Inf(1) // x of the last scaled, first unscaled
	for i, v := range factors {
		x := freq(i, headDim, theta) / (2 * math.Pi)
		switch fv := float64(v); {
		case math.Abs(fv-1) <= tol:
			highMin = min(highMin, x)
		case math.Abs(fv-f) <= tol*f:
			lowMax = max(lowMax, x)
		default:
			midX = append(midX, x)
			midS = append(midS, (1/fv-1/f)/(1-1/f))
		}
	}
	var a, b float64 // s = a·x + b
	switch {
	case len(midX) >= 2:
		i, j := 0, len(midX)-1
		a = (midS[j] - midS[i]) / (midX[j] - midX[i])
		b = midS[i] - a*midX[i]
	case len(midX) == 1 && !math.IsInf(lowMax, 0):
		a = midS[0] / (midX[0] - lowMax)
		b = -a * lowMax
		if !math.IsInf(highMin, 0) && a*highMin+b < 1 {
			a = (1 - midS[0]) / (highMin - midX[0])
			b = 1 - a*highMin
		}
	case len(midX) == 1:
		a = (1 - midS[0]) / (highMin - midX[0])
		b = 1 - a*highMin
	case !math.IsInf(lowMax, 0) && !math.IsInf(highMin, 0):
		a = 1 / (highMin - lowMax)
		b = -a * lowMax
	default:
		return nil, fail("every frequency is scaled")
	}
	if !(a > 0) || !(b < 0) || math.IsInf(a, 0) {
		return nil, fail("the blended band is not increasing")
	}
	L := float64(orig)
	s := ovrt.RopeScaling{Type: "llama3", Factor: f, OriginalContext: orig}
	s.LowFreqFactor = -b * L / a
	s.HighFreqFactor = s.LowFreqFactor + L/a
	for i, v := range factors {
		want := llama3Factor(s, freq(i, headDim, theta))
		if math.Abs(want-float64(v)) > 1e-3*max(1, want) {
			return nil, fail(fmt.Sprintf("factor %d is %g, the fitted scaling gives %g", i, v, want))
		}
	}
	return &s, nil
}

// LoadLlama loads the layer range [start, end) of the llama model in the
// GGUF file at path (end <= 0 means through the last layer) as
// ovrt.Weights, which pass Validate.
//
// F32 tensors are used in place when the file is memory-mapped, Q8_0 and
// Q4_0 tensors are kept as stored, F16 and BF16 ones are converted to F32;
// other types are an ErrUnsupported naming the tensor. Weights.Close
// releases the file.
func LoadLlama(path string, start, end int) (*ovrt.Weights, error) {
	f, m, err := openModel(path)
	if err != nil {
		return nil, err
	}
	w, err := loadLlama(f, start, end, m.Release)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	w.Closer = m
	return w, nil
}

// LoadLlamaFile is LoadLlama for an already parsed file, which must stay
// open as long as the weights are used if it was parsed from memory.
func LoadLlamaFile(f *File, start, end int) (*ovrt.Weights, error) {
	return loadLlama(f, start, end, nil)
}

// loadLlama loads a layer range; release, if not nil, is told the byte
// ranges of tensors that were converted into private copies.
func loadLlama(f *File, start, end int, release func(off, n int)) (*ovrt.Weights, error) {
	c, err := ReadLlamaConfig(f)
	if err != nil {
		return nil, err
	}
	if end <= 0 {
		end = c.Layers
	}
	if start < 0 || start >= end || end > c.Layers {
		return nil, fmt.Errorf("%w: [%d, %d) of a %d-layer model", ErrLayerRange, start, end, c.Layers)
	}
	if err := checkTensorSet(f, start, end, c.Layers); err != nil {
		return nil, err
	}
	w := &ovrt.Weights{Config: c, Start: start, End: end, Layers: make([]ovrt.Layer, end-start)}
	l := loader{f: f, release: release}
	if w.HasEmbed() {
		w.Embed = l.matrix(nameEmbed, c.Vocab, c.Dim)
	}
	for i := range w.Layers {
		n := start + i
		L := &w.Layers[i]
		L.AttnNorm = l.vector(blk(n, "attn_norm"), c.Dim)
		L.Wq = l.matrix(blk(n, "attn_q"), c.QDim(), c.Dim)
		L.Wk = l.matrix(blk(n, "attn_k"), c.KVDim(), c.Dim)
		L.Wv = l.matrix(blk(n, "attn_v"), c.KVDim(), c.Dim)
		L.Wo = l.matrix(blk(n, "attn_output"), c.Dim, c.QDim())
		L.FFNNorm = l.vector(blk(n, "ffn_norm"), c.Dim)
		L.W1 = l.matrix(blk(n, "ffn_gate"), c.HiddenDim, c.Dim)
		L.W2 = l.matrix(blk(n, "ffn_down"), c.Dim, c.HiddenDim)
		L.W3 = l.matrix(blk(n, "ffn_up"), c.HiddenDim, c.Dim)
	}
	if w.HasHead() {
		w.FinalNorm = l.vector(nameFinalNorm, c.Dim)
		switch {
		case !c.TiedHead:
			w.Head = l.matrix(nameHead, c.Vocab, c.Dim)
		case w.HasEmbed():
			w.Head = w.Embed
		default:
			w.Head = l.matrix(nameEmbed, c.Vocab, c.Dim)
		}
	}
	if l.err != nil {
		return nil, l.err
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return w, nil
}

// layerTensors are the per-block tensors of the llama architecture that
// ovrt runs (attn_rot_embd, a legacy leftover llama.cpp ignores too, is
// skipped).
var layerTensors = map[string]bool{
	"attn_norm.weight": true, "attn_q.weight": true, "attn_k.weight": true, "attn_v.weight": true,
	"attn_output.weight": true, "ffn_norm.weight": true, "ffn_gate.weight": true, "ffn_down.weight": true,
	"ffn_up.weight": true, "attn_rot_embd": true,
}

// checkTensorSet refuses files whose loaded layers (or global tensors)
// carry tensors ovrt would silently ignore, such as attention biases or
// expert weights, which llama.cpp uses: the model would run, wrongly.
func checkTensorSet(f *File, start, end, layers int) error {
	for _, t := range f.Tensors {
		var n int
		var rest string
		if k, err := fmt.Sscanf(t.Name, "blk.%d.%s", &n, &rest); err == nil && k == 2 {
			if n < 0 || n >= layers {
				return fmt.Errorf("%w: tensor %q of a %d-layer model", ErrMalformed, t.Name, layers)
			}
			if n >= start && n < end && !layerTensors[rest] && !layerTensors[strings.TrimSuffix(rest, ".weight")] {
				return fmt.Errorf("%w: tensor %q is not part of the llama blocks pipeshard runs", ErrUnsupported, t.Name)
			}
			continue
		}
		switch t.Name {
		case nameEmbed, nameFinalNorm, nameHead, nameRopeFreqs:
		default:
			return fmt.Errorf("%w: tensor %q is not part of the llama architecture pipeshard runs", ErrUnsupported, t.Name)
		}
	}
	return nil
}

// loader reads tensors, keeping the first error.
type loader struct {
	f       *File
	release func(off, n int)
	err     error
}

// tensor looks name up and checks its dims (ignoring trailing 1s beyond
// the rank of want) against want.
func (l *loader) tensor(name string, want ...uint64) (TensorInfo, bool) {
	if l.err != nil {
		return TensorInfo{}, false
	}
	t, err := l.f.Tensor(name)
	if err != nil {
		l.err = err
		return t, false
	}
	dims := t.Dims
	for len(dims) > len(want) && dims[len(dims)-1] == 1 {
		dims = dims[:len(dims)-1]
	}
	ok := len(dims) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = dims[i] == want[i]
	}
	if !ok {
		l.err = fmt.Errorf("%w: %s is %v, want %v (GGUF order, innermost first)", ErrShape, name, t.Dims, want)
		return t, false
	}
	return t, true
}

func (l *loader) vector(name string, n int) []float32 {
	t, ok := l.tensor(name, uint64(n))
	if !ok {
		return nil
	}
	return l.f32(&t)
}

func (l *loader) f32(t *TensorInfo) []float32 {
	if t.Type == TypeF32 && l.f.mem != nil {
		if v, ok := bytesF32(l.f.mem[t.Offset : t.Offset+t.Size]); ok {
			return v[:len(v):len(v)]
		}
	}
	v, err := l.f.tensorF32(t)
	if err != nil {
		l.err = err
	}
	if l.release != nil && l.f.mem != nil {
		l.release(int(t.Offset), int(t.Size))
	}
	return v
}

func (l *loader) matrix(name string, rows, cols int) ovrt.Matrix {
	m := ovrt.Matrix{Rows: rows, Cols: cols}
	t, ok := l.tensor(name, uint64(cols), uint64(rows))
	if !ok {
		return m
	}
	switch t.Type {
	case TypeF32, TypeF16, TypeBF16:
		m.DType = ovrt.F32
		m.F32 = l.f32(&t)
	case TypeQ8_0, TypeQ4_0:
		m.DType = ovrt.Q8_0
		if t.Type == TypeQ4_0 {
			m.DType = ovrt.Q4_0
		}
		b, err := l.f.raw(&t)
		if err != nil {
			l.err = err
		}
		m.Q = b
	default:
		l.err = fmt.Errorf("%w: tensor %q has type %s (loadable types: F32, F16, BF16, Q8_0, Q4_0)", ErrUnsupported, name, t.Type)
	}
	return m
}

// WriteLlama writes a whole llama model (weights for [0, Layers)) and its
// tokenizer as a GGUF v3 file that llama.cpp can load: general.*, llama.*
// and tokenizer.ggml.* metadata, and every tensor in its stored type (F32,
// Q8_0 or Q4_0). A llama3 rope scaling is written as llama.cpp's
// rope_freqs.weight tensor plus pipeshard.rope_scaling.* keys that keep
// its parameters exact. name becomes general.name.
func WriteLlama(out io.Writer, name string, weights *ovrt.Weights, vocab Vocab) error {
	if err := weights.Validate(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	c := weights.Config
	if lo, hi := weights.HeadRange(); weights.Start != 0 || weights.End != c.Layers || lo != 0 || hi != c.Vocab {
		return fmt.Errorf("%w: WriteLlama needs the whole model, got layers [%d, %d) of %d and head rows [%d, %d) of %d",
			ErrLayerRange, weights.Start, weights.End, c.Layers, lo, hi, c.Vocab)
	}
	if err := vocab.Validate(); err != nil {
		return err
	}
	if len(vocab.Tokens) != c.Vocab {
		return fmt.Errorf("%w: %d tokens for a vocabulary of %d", ErrBadVocab, len(vocab.Tokens), c.Vocab)
	}
	if vocab.BOS != c.BOS || vocab.EOS != c.EOS {
		return fmt.Errorf("%w: vocabulary BOS/EOS %d/%d, model config %d/%d", ErrBadVocab, vocab.BOS, vocab.EOS, c.BOS, c.EOS)
	}
	head := c.HeadSize()
	w := NewWriter(out)
	fileType := uint32(0) // LLAMA_FTYPE_ALL_F32
	quantized := false
	switch weights.Layers[0].Wq.DType {
	case ovrt.Q8_0:
		fileType, quantized = 7, true // LLAMA_FTYPE_MOSTLY_Q8_0
	case ovrt.Q4_0:
		fileType, quantized = 2, true // LLAMA_FTYPE_MOSTLY_Q4_0
	}
	type entry struct {
		key string
		val any
	}
	kvs := []entry{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.alignment", uint32(DefaultAlignment)},
		{"general.file_type", fileType},
	}
	if quantized {
		kvs = append(kvs, entry{"general.quantization_version", uint32(2)})
	}
	kvs = append(kvs,
		entry{"llama.vocab_size", uint32(c.Vocab)},
		entry{"llama.context_length", uint32(c.Context)},
		entry{"llama.embedding_length", uint32(c.Dim)},
		entry{"llama.block_count", uint32(c.Layers)},
		entry{"llama.feed_forward_length", uint32(c.HiddenDim)},
		entry{"llama.attention.head_count", uint32(c.Heads)},
		entry{"llama.attention.head_count_kv", uint32(c.KVHeads)},
		entry{"llama.attention.key_length", uint32(head)},
		entry{"llama.attention.value_length", uint32(head)},
		entry{"llama.rope.dimension_count", uint32(head)},
		entry{"llama.attention.layer_norm_rms_epsilon", float32(c.NormEps)},
		entry{"llama.rope.freq_base", float32(c.RopeTheta)},
	)
	if s := c.RopeScaling; s != nil {
		kvs = append(kvs,
			entry{keyScalingType, s.Type},
			entry{keyScalingFactor, s.Factor},
			entry{keyScalingLow, s.LowFreqFactor},
			entry{keyScalingHigh, s.HighFreqFactor},
			entry{keyScalingOrigCtx, uint32(s.OriginalContext)},
		)
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.key, kv.val); err != nil {
			return err
		}
	}
	if err := addVocab(w, &vocab); err != nil {
		return err
	}

	// Tensors, in llama.cpp's converter order.
	type tensor struct {
		name string
		m    *ovrt.Matrix // or
		v    []float32
	}
	ts := []tensor{{name: nameEmbed, m: &weights.Embed}}
	if c.RopeScaling != nil {
		ts = append(ts, tensor{name: nameRopeFreqs, v: Llama3RopeFactors(*c.RopeScaling, head, c.RopeTheta)})
	}
	for i := range weights.Layers {
		L := &weights.Layers[i]
		ts = append(ts,
			tensor{name: blk(i, "attn_norm"), v: L.AttnNorm},
			tensor{name: blk(i, "attn_q"), m: &L.Wq},
			tensor{name: blk(i, "attn_k"), m: &L.Wk},
			tensor{name: blk(i, "attn_v"), m: &L.Wv},
			tensor{name: blk(i, "attn_output"), m: &L.Wo},
			tensor{name: blk(i, "ffn_norm"), v: L.FFNNorm},
			tensor{name: blk(i, "ffn_gate"), m: &L.W1},
			tensor{name: blk(i, "ffn_down"), m: &L.W2},
			tensor{name: blk(i, "ffn_up"), m: &L.W3},
		)
	}
	ts = append(ts, tensor{name: nameFinalNorm, v: weights.FinalNorm})
	if !c.TiedHead {
		ts = append(ts, tensor{name: nameHead, m: &weights.Head})
	}
	for _, t := range ts {
		var err error
		switch {
		case t.m == nil:
			err = w.AddTensor(t.name, TypeF32, uint64(len(t.v)))
		default:
			err = w.AddTensor(t.name, ggmlType(t.m.DType), uint64(t.m.Cols), uint64(t.m.Rows))
		}
		if err != nil {
			return err
		}
	}
	for _, t := range ts {
		var err error
		switch {
		case t.m == nil:
			err = w.WriteTensorF32(t.name, t.v)
		case t.m.DType == ovrt.F32:
			err = w.WriteTensorF32(t.name, t.m.F32)
		default:
			err = w.WriteTensor(t.name, t.m.Q)
		}
		if err != nil {
			return err
		}
	}
	return w.Close()
}

func ggmlType(d ovrt.DType) GGMLType {
	switch d {
	case ovrt.Q8_0:
		return TypeQ8_0
	case ovrt.Q4_0:
		return TypeQ4_0
	}
	return TypeF32
}

// WriteLlamaFile writes the model to path atomically: to a temporary file
// in the same directory, synced, then renamed over path.
func WriteLlamaFile(path, name string, weights *ovrt.Weights, vocab Vocab) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = WriteLlama(tmp, name, weights, vocab); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// openModel memory-maps and parses the file at path for LoadLlama.
func openModel(path string) (*File, *mmapfile.File, error) {
	m, err := mmapfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := ParseBytes(m.Bytes())
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return f, m, nil
}
