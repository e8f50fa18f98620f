package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/pipeshard/pipeshard/internal/mmapfile"
	"github.com/pipeshard/pipeshard/ovrt"
)

// Hugging Face file and tensor names.
const (
	hfConfigFile = "config.json"
	hfSingleFile = "model.safetensors"
	hfIndexFile  = "model.safetensors.index.json"

	hfEmbed     = "model.embed_tokens.weight"
	hfFinalNorm = "model.norm.weight"
	hfHead      = "lm_head.weight"
)

func hfLayer(l int, s string) string { return "model.layers." + strconv.Itoa(l) + "." + s + ".weight" }

// LoadHF loads the layers [start, end) of a Hugging Face Llama checkpoint
// directory: config.json plus model.safetensors, or the shards listed in
// model.safetensors.index.json. end <= 0 means through the last layer.
// Only the shards holding the requested tensors are opened. F32 tensors
// are views of the memory-mapped shards; F16 and BF16 tensors, and the Q
// and K projections (whose rows are reordered from the rotate-half RoPE
// layout to Meta's interleaved layout), are converted into the heap.
func LoadHF(dir string, start, end int) (_ *ovrt.Weights, err error) {
	cfgPath := filepath.Join(dir, hfConfigFile)
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := parseHFConfig(cfgPath, b)
	if err != nil {
		return nil, err
	}
	c := &m.Config
	start, end, err = resolveRange(dir, start, end, c.Layers)
	if err != nil {
		return nil, err
	}

	st, err := openHFTensors(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.closeAll()
		}
	}()
	if !st.has(hfHead) {
		c.TiedHead = true
	}

	w := &ovrt.Weights{Config: *c, Start: start, End: end, Layers: make([]ovrt.Layer, end-start)}
	hd := c.HeadSize()
	mat := func(name string, rows, cols, ropeHeads int) (ovrt.Matrix, error) {
		v, err := st.load(name, []int64{int64(rows), int64(cols)}, ropeHeads, hd)
		return f32Matrix(v, rows, cols), err
	}
	vec := func(name string, n int) ([]float32, error) {
		return st.load(name, []int64{int64(n)}, 0, 0)
	}
	if w.HasEmbed() {
		if w.Embed, err = mat(hfEmbed, c.Vocab, c.Dim, 0); err != nil {
			return nil, err
		}
	}
	for i := range w.Layers {
		l, ly := start+i, &w.Layers[i]
		if ly.AttnNorm, err = vec(hfLayer(l, "input_layernorm"), c.Dim); err != nil {
			return nil, err
		}
		if ly.Wq, err = mat(hfLayer(l, "self_attn.q_proj"), c.QDim(), c.Dim, c.Heads); err != nil {
			return nil, err
		}
		if ly.Wk, err = mat(hfLayer(l, "self_attn.k_proj"), c.KVDim(), c.Dim, c.KVHeads); err != nil {
			return nil, err
		}
		if ly.Wv, err = mat(hfLayer(l, "self_attn.v_proj"), c.KVDim(), c.Dim, 0); err != nil {
			return nil, err
		}
		if ly.Wo, err = mat(hfLayer(l, "self_attn.o_proj"), c.Dim, c.QDim(), 0); err != nil {
			return nil, err
		}
		if ly.FFNNorm, err = vec(hfLayer(l, "post_attention_layernorm"), c.Dim); err != nil {
			return nil, err
		}
		if ly.W1, err = mat(hfLayer(l, "mlp.gate_proj"), c.HiddenDim, c.Dim, 0); err != nil {
			return nil, err
		}
		if ly.W2, err = mat(hfLayer(l, "mlp.down_proj"), c.Dim, c.HiddenDim, 0); err != nil {
			return nil, err
		}
		if ly.W3, err = mat(hfLayer(l, "mlp.up_proj"), c.HiddenDim, c.Dim, 0); err != nil {
			return nil, err
		}
	}
	if w.HasHead() {
		if w.FinalNorm, err = vec(hfFinalNorm, c.Dim); err != nil {
			return nil, err
		}
		switch {
		case c.TiedHead && w.HasEmbed():
			w.Head = w.Embed
		case c.TiedHead:
			w.Head, err = mat(hfEmbed, c.Vocab, c.Dim, 0)
		default:
			w.Head, err = mat(hfHead, c.Vocab, c.Dim, 0)
		}
		if err != nil {
			return nil, err
		}
	}
	if err = w.Validate(); err != nil {
		// Unreachable unless the code above disagrees with ovrt.
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, dir, err)
	}
	w.Closer = st.keep()
	return w, nil
}

// hfShard is one opened safetensors file.
type hfShard struct {
	path    string
	f       *mmapfile.File
	tensors map[string]TensorInfo
	views   bool // some loaded tensor aliases the mapping
}

// hfStore finds tensors in a checkpoint directory, opening shards on
// first use.
type hfStore struct {
	dir       string
	index     string            // path of the index file, "" for a single file
	weightMap map[string]string // tensor name -> shard file name, with an index
	shards    map[string]*hfShard
}

func openHFTensors(dir string) (*hfStore, error) {
	s := &hfStore{dir: dir, shards: make(map[string]*hfShard)}
	idx := filepath.Join(dir, hfIndexFile)
	b, err := os.ReadFile(idx)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A single file: open it now, so that its absence is reported as
		// such rather than as a missing tensor.
		if _, err := os.Stat(filepath.Join(dir, hfSingleFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint: %s has neither %s nor %s: %w", dir, hfSingleFile, hfIndexFile, err)
		}
		if _, err := s.shard(hfSingleFile); err != nil {
			return nil, err
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, idx, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("%w: %s: no weight_map", ErrFormat, idx)
	}
	for name, file := range index.WeightMap {
		if file == "" || filepath.Base(file) != file || !filepath.IsLocal(file) {
			return nil, fmt.Errorf("%w: %s: tensor %q maps to %q, not a file name in the directory", ErrFormat, idx, name, file)
		}
	}
	s.index, s.weightMap = idx, index.WeightMap
	return s, nil
}

// has reports whether the checkpoint lists the tensor.
func (s *hfStore) has(name string) bool {
	if s.weightMap != nil {
		_, ok := s.weightMap[name]
		return ok
	}
	_, ok := s.shards[hfSingleFile].tensors[name]
	return ok
}

// shard opens (once) the safetensors file of that name.
func (s *hfStore) shard(file string) (*hfShard, error) {
	if sh := s.shards[file]; sh != nil {
		return sh, nil
	}
	path := filepath.Join(s.dir, file)
	f, err := mmapfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	tensors, err := parseSafetensors(path, f.Bytes(), int64(f.Len()))
	if err != nil {
		f.Close()
		return nil, err
	}
	sh := &hfShard{path: path, f: f, tensors: tensors}
	s.shards[file] = sh
	return sh, nil
}

// load returns the tensor name, which must have the given shape, as
// float32. With ropeHeads > 0 it is a Q or K projection of ropeHeads
// heads of hd rows each, and its rows are reordered from the rotate-half
// layout to the interleaved one.
func (s *hfStore) load(name string, shape []int64, ropeHeads, hd int) ([]float32, error) {
	file := hfSingleFile
	if s.weightMap != nil {
		var ok bool
		if file, ok = s.weightMap[name]; !ok {
			return nil, fmt.Errorf("%w: %s: %q is not in weight_map", ErrMissingTensor, s.index, name)
		}
	}
	sh, err := s.shard(file)
	if err != nil {
		return nil, err
	}
	t, ok := sh.tensors[name]
	if !ok {
		if s.weightMap != nil {
			return nil, fmt.Errorf("%w: %s: no tensor %q (%s maps it to this file)", ErrMissingTensor, sh.path, name, hfIndexFile)
		}
		return nil, fmt.Errorf("%w: %s: no tensor %q", ErrMissingTensor, sh.path, name)
	}
	if !slices.Equal(t.Shape, shape) {
		return nil, fmt.Errorf("%w: %s: tensor %q has shape %v, want %v", ErrTensorShape, sh.path, name, t.Shape, shape)
	}
	switch t.DType {
	case "F32", "F16", "BF16":
	default:
		return nil, fmt.Errorf("%w: %s: tensor %q has dtype %s (F32, F16 and BF16 can be loaded)", ErrUnsupported, sh.path, name, t.DType)
	}
	n := int(t.Elements()) // fits: the bytes are mapped
	src := sh.f.Bytes()[t.Offset : t.Offset+t.Size]
	if ropeHeads == 0 && t.DType == "F32" {
		if v, ok := aliasF32(src, n); ok {
			sh.views = true
			return v, nil
		}
	}
	dst := make([]float32, n)
	if ropeHeads > 0 {
		rows := int(shape[0])
		cols, es := n/rows, int(t.Size)/n
		if rows != ropeHeads*hd {
			panic(fmt.Sprintf("checkpoint: %s: %d rows for %d heads of %d", name, rows, ropeHeads, hd))
		}
		for r := range rows {
			from := interleavedSource(r, hd) * cols * es
			decode(t.DType, dst[r*cols:(r+1)*cols], src[from:from+cols*es])
		}
	} else {
		decode(t.DType, dst, src)
	}
	// The source bytes are not needed any more: let their pages go, so the
	// converted copy does not double the resident size.
	sh.f.Release(int(t.Offset), int(t.Size))
	return dst, nil
}

// keep closes the shards no loaded tensor aliases and returns a closer
// for the others (nil if none).
func (s *hfStore) keep() io.Closer {
	var kept multiCloser
	for _, file := range slices.Sorted(maps.Keys(s.shards)) {
		sh := s.shards[file]
		if sh.views {
			kept = append(kept, sh.f)
		} else {
			sh.f.Close()
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return kept
}

func (s *hfStore) closeAll() {
	for _, sh := range s.shards {
		sh.f.Close()
	}
}

// multiCloser closes several mappings.
type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var errs []error
	for _, c := range m {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
