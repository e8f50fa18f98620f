package checkpoint

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/pipeshard/pipeshard/internal/mmapfile"
	"github.com/pipeshard/pipeshard/ovrt"
)

// llama2cHeaderSize is the size of the legacy header: seven int32.
const llama2cHeaderSize = 7 * 4

// llama2cMagic is the first word of llama2.c's versioned exports
// ("ak42"), which this loader does not read.
const llama2cMagic = 0x616b3432

// Bounds on header values. They match ovrt.Config.Validate, so a header
// that passes is a configuration the runtime accepts, and they keep every
// size computation far from int64 overflow.
const (
	maxDim     = 1 << 20
	maxLayers  = 4096
	maxVocab   = 1 << 24
	maxContext = 1 << 22
)

// LoadLlama2C loads the layers [start, end) of a llama2.c legacy
// checkpoint (the format of run.c's export.py --version 0 and of
// stories15M.bin); end <= 0 means through the last layer. The tensors are
// views of one buffer, released by the returned Weights' Close.
//
// The file's 28-byte header leaves every tensor 28 bytes past a cache
// line, which costs the kernels about 8% (every vector load spans two
// lines), so the file is read into an anonymous mapping at an offset that
// puts the tensors on 64-byte boundaries, rather than mapped in place.
func LoadLlama2C(path string, start, end int) (*ovrt.Weights, error) {
	f, err := readAligned(path, llama2cHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	w, copied, err := parseLlama2C(path, f.Bytes(), start, end)
	if err != nil {
		f.Close()
		return nil, err
	}
	if copied {
		// Big-endian host: every tensor was decoded into the heap.
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		return w, nil
	}
	w.Closer = f
	return w, nil
}

// llama2cHeader is the legacy header, in file order.
type llama2cHeader struct {
	Dim, HiddenDim, Layers, Heads, KVHeads, Vocab, SeqLen int32
}

func (h llama2cHeader) String() string {
	return fmt.Sprintf("dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d",
		h.Dim, h.HiddenDim, h.Layers, h.Heads, h.KVHeads, h.Vocab, h.SeqLen)
}

// llama2cConfig checks the header and returns the configuration it
// describes.
func llama2cConfig(name string, b []byte) (llama2cHeader, ovrt.Config, error) {
	var h llama2cHeader
	if len(b) < llama2cHeaderSize {
		return h, ovrt.Config{}, fmt.Errorf("%w: %s: %d bytes, shorter than the %d-byte llama2.c header",
			ErrTruncated, name, len(b), llama2cHeaderSize)
	}
	word := func(i int) int32 { return int32(binary.LittleEndian.Uint32(b[4*i:])) }
	if uint32(word(0)) == llama2cMagic {
		return h, ovrt.Config{}, fmt.Errorf("%w: %s: llama2.c export version %d (magic \"ak42\"); only the legacy (version 0) format is read",
			ErrUnsupported, name, word(1))
	}
	h = llama2cHeader{word(0), word(1), word(2), word(3), word(4), word(5), word(6)}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: header (%v): "+format, append([]any{ErrConfig, name, h}, args...)...)
	}
	vocab := int64(h.Vocab)
	if vocab < 0 {
		vocab = -vocab
	}
	switch {
	case h.Dim <= 0 || h.Dim > maxDim:
		return h, ovrt.Config{}, bad("dim %d out of range (1..%d)", h.Dim, maxDim)
	case h.HiddenDim <= 0 || h.HiddenDim > maxDim:
		return h, ovrt.Config{}, bad("hidden_dim %d out of range (1..%d)", h.HiddenDim, maxDim)
	case h.Layers <= 0 || h.Layers > maxLayers:
		return h, ovrt.Config{}, bad("n_layers %d out of range (1..%d)", h.Layers, maxLayers)
	case h.Heads <= 0 || h.Heads > h.Dim:
		return h, ovrt.Config{}, bad("n_heads %d out of range (1..dim)", h.Heads)
	case h.Dim%h.Heads != 0:
		return h, ovrt.Config{}, bad("dim %d is not divisible by n_heads %d", h.Dim, h.Heads)
	case h.Dim/h.Heads%2 != 0:
		return h, ovrt.Config{}, bad("head size %d is odd; RoPE rotates pairs", h.Dim/h.Heads)
	case h.KVHeads <= 0 || h.KVHeads > h.Heads:
		return h, ovrt.Config{}, bad("n_kv_heads %d out of range (1..n_heads)", h.KVHeads)
	case h.Heads%h.KVHeads != 0:
		return h, ovrt.Config{}, bad("n_heads %d is not divisible by n_kv_heads %d", h.Heads, h.KVHeads)
	case vocab == 0 || vocab > maxVocab:
		return h, ovrt.Config{}, bad("vocab_size %d out of range (1..%d in magnitude)", h.Vocab, maxVocab)
	case h.SeqLen <= 0 || h.SeqLen > maxContext:
		return h, ovrt.Config{}, bad("seq_len %d out of range (1..%d)", h.SeqLen, maxContext)
	}
	c := ovrt.Config{
		Dim:       int(h.Dim),
		HiddenDim: int(h.HiddenDim),
		Layers:    int(h.Layers),
		Heads:     int(h.Heads),
		KVHeads:   int(h.KVHeads),
		HeadDim:   int(h.Dim / h.Heads),
		Vocab:     int(vocab),
		Context:   int(h.SeqLen),
		NormEps:   1e-5,
		RopeTheta: 10000,
		TiedHead:  h.Vocab > 0,
		BOS:       1,
		EOS:       2,
	}
	if err := c.Validate(); err != nil {
		return h, ovrt.Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
	}
	return h, c, nil
}

// resolveRange applies the end <= 0 default and checks [start, end)
// against a model of n layers.
func resolveRange(name string, start, end, n int) (int, int, error) {
	if end <= 0 {
		end = n
	}
	if start < 0 || start >= end || end > n {
		return 0, 0, fmt.Errorf("%w: %s: layers [%d, %d) of a %d-layer model", ErrLayerRange, name, start, end, n)
	}
	return start, end, nil
}

// parseLlama2C builds the weights of layers [start, end) from the
// checkpoint bytes b. copied reports that the tensors were decoded into
// the heap rather than aliasing b.
func parseLlama2C(name string, b []byte, start, end int) (w *ovrt.Weights, copied bool, err error) {
	h, c, err := llama2cConfig(name, b)
	if err != nil {
		return nil, false, err
	}
	start, end, err = resolveRange(name, start, end, c.Layers)
	if err != nil {
		return nil, false, err
	}

	// Float offsets (in units of float32, from the end of the header) of
	// each tensor group, in file order. All fit in int64 by the bounds.
	L, dim, hidden, vocab := int64(c.Layers), int64(c.Dim), int64(c.HiddenDim), int64(c.Vocab)
	qdim, kvdim, hs := int64(c.QDim()), int64(c.KVDim()), int64(c.HeadSize())
	var pos int64
	next := func(n int64) int64 { p := pos; pos += n; return p }
	var (
		embed     = next(vocab * dim)
		attnNorm  = next(L * dim)
		wq        = next(L * qdim * dim)
		wk        = next(L * kvdim * dim)
		wv        = next(L * kvdim * dim)
		wo        = next(L * dim * qdim)
		ffnNorm   = next(L * dim)
		w1        = next(L * hidden * dim)
		w2        = next(L * dim * hidden)
		w3        = next(L * hidden * dim)
		finalNorm = next(dim)
		_         = next(2 * int64(c.Context) * hs / 2) // legacy freq_cis_real, freq_cis_imag
		head      = embed
	)
	if !c.TiedHead {
		head = next(vocab * dim)
	}
	want := llama2cHeaderSize + 4*pos
	if got := int64(len(b)); got < want {
		return nil, false, fmt.Errorf("%w: %s: the header (%v) implies %d bytes, the file has %d",
			ErrTruncated, name, h, want, got)
	} else if got > want {
		return nil, false, fmt.Errorf("%w: %s: the header (%v) implies %d bytes, the file has %d (%d extra)",
			ErrTrailingData, name, h, want, got, got-want)
	}

	// vec returns n floats at float offset off (+ index*n). Every slice
	// lies inside b, which has exactly the size checked above.
	vec := func(off int64, index, n int) []float32 {
		at := llama2cHeaderSize + 4*(off+int64(index)*int64(n))
		v, c := f32View(b[at:], n)
		copied = copied || c
		return v
	}
	mat := func(off int64, index, rows, cols int) ovrt.Matrix {
		return f32Matrix(vec(off, index, rows*cols), rows, cols)
	}

	w = &ovrt.Weights{Config: c, Start: start, End: end, Layers: make([]ovrt.Layer, end-start)}
	if w.HasEmbed() {
		w.Embed = mat(embed, 0, c.Vocab, c.Dim)
	}
	for i := range w.Layers {
		l := start + i
		w.Layers[i] = ovrt.Layer{
			AttnNorm: vec(attnNorm, l, c.Dim),
			Wq:       mat(wq, l, c.QDim(), c.Dim),
			Wk:       mat(wk, l, c.KVDim(), c.Dim),
			Wv:       mat(wv, l, c.KVDim(), c.Dim),
			Wo:       mat(wo, l, c.Dim, c.QDim()),
			FFNNorm:  vec(ffnNorm, l, c.Dim),
			W1:       mat(w1, l, c.HiddenDim, c.Dim),
			W2:       mat(w2, l, c.Dim, c.HiddenDim),
			W3:       mat(w3, l, c.HiddenDim, c.Dim),
		}
	}
	if w.HasHead() {
		w.FinalNorm = vec(finalNorm, 0, c.Dim)
		if c.TiedHead && w.HasEmbed() {
			w.Head = w.Embed
		} else {
			w.Head = mat(head, 0, c.Vocab, c.Dim)
		}
	}
	if err := w.Validate(); err != nil {
		// Unreachable unless the code above disagrees with ovrt.
		return nil, false, fmt.Errorf("%w: %s: %w", ErrFormat, name, err)
	}
	return w, copied, nil
}

// readAligned reads the file at path into an anonymous mapping so that
// byte dataStart of the file lands on a 64-byte boundary.
func readAligned(path string, dataStart int) (*alignedFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	lead := (64 - dataStart%64) % 64
	buf, err := mmapfile.Anon(int(st.Size()) + lead)
	if err != nil {
		return nil, err
	}
	data := buf.Bytes()[lead:]
	if _, err := io.ReadFull(fh, data); err != nil {
		buf.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &alignedFile{buf: buf, data: data}, nil
}

// alignedFile is a file's bytes in an anonymous mapping.
type alignedFile struct {
	buf  *mmapfile.File
	data []byte
}

func (f *alignedFile) Bytes() []byte { return f.data }
func (f *alignedFile) Close() error  { return f.buf.Close() }
