package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/pipeshard/pipeshard/ovrt"
)

// writeFile writes b to dir/name and returns the path.
func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// llama2cBytes builds a legacy llama2.c checkpoint for header h whose
// i-th float (counting from the first tensor) is fill(i).
func llama2cBytes(h llama2cHeader, fill func(i int) float32) []byte {
	vocab := int(h.Vocab)
	if vocab < 0 {
		vocab = -vocab
	}
	L, dim, hidden := int(h.Layers), int(h.Dim), int(h.HiddenDim)
	hs := dim / int(h.Heads)
	kv := int(h.KVHeads) * hs
	n := vocab*dim + L*dim*2 + L*dim*dim*2 + L*kv*dim*2 + L*hidden*dim*3 + dim + int(h.SeqLen)*hs
	if h.Vocab < 0 {
		n += vocab * dim
	}
	b := make([]byte, 28+4*n)
	for i, v := range []int32{h.Dim, h.HiddenDim, h.Layers, h.Heads, h.KVHeads, h.Vocab, h.SeqLen} {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	for i := range n {
		binary.LittleEndian.PutUint32(b[28+4*i:], math.Float32bits(fill(i)))
	}
	return b
}

func index(i int) float32 { return float32(i) }

// stTensor is a tensor to write into a safetensors file.
type stTensor struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

// safetensorsBytes writes tensors in order, as the reference library
// does: 8-byte header length, JSON header padded with spaces to a
// multiple of 8, then the data.
func safetensorsBytes(tensors []stTensor, meta map[string]string) []byte {
	hdr := map[string]any{}
	if meta != nil {
		hdr["__metadata__"] = meta
	}
	var off int64
	for _, t := range tensors {
		hdr[t.name] = map[string]any{"dtype": t.dtype, "shape": t.shape, "data_offsets": []int64{off, off + int64(len(t.data))}}
		off += int64(len(t.data))
	}
	j, err := json.Marshal(hdr)
	if err != nil {
		panic(err)
	}
	for len(j)%8 != 0 {
		j = append(j, ' ')
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(j)))
	b = append(b, j...)
	for _, t := range tensors {
		b = append(b, t.data...)
	}
	return b
}

// rawSafetensors builds a file from a literal JSON header and data.
func rawSafetensors(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// encode stores values as a safetensors dtype.
func encode(dtype string, v []float32) []byte {
	switch dtype {
	case "F32":
		if littleEndian && len(v) > 0 {
			return slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		}
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	case "BF16":
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], bf16RNE(x))
		}
		return b
	case "F16":
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], f16Exact(x))
		}
		return b
	}
	panic(dtype)
}

// bf16RNE rounds a (finite) float32 to bfloat16, to nearest even.
func bf16RNE(x float32) uint16 {
	b := math.Float32bits(x)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16Value(x float32) float32 { return math.Float32frombits(uint32(bf16RNE(x)) << 16) }

// f16Exact encodes a float32 that binary16 represents exactly as a
// normal number or zero; it panics otherwise.
func f16Exact(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	if b&0x7fffffff == 0 {
		return sign
	}
	exp := int(b>>23&0xff) - 127 + 15
	if exp <= 0 || exp >= 31 || b&0x1fff != 0 {
		panic(fmt.Sprintf("%g is not an exact normal binary16 value", x))
	}
	return sign | uint16(exp)<<10 | uint16(b>>13&0x3ff)
}

// hfPermute applies Meta's permute (convert_llama_weights_to_hf.py) to the
// rows of an interleaved-layout Q or K matrix: w.view(heads, hd/2, 2, cols)
// .transpose(1, 2).reshape(heads*hd, cols). Element [h, i, j, c] of the
// view moves to [h, j, i, c].
func hfPermute(w []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(w))
	for h := range heads {
		for i := range hd / 2 {
			for j := range 2 {
				src := ((h*(hd/2)+i)*2 + j) * cols
				dst := ((h*2+j)*(hd/2) + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// hfTensors returns the tensors of whole-model weights w as a Hugging Face
// checkpoint stores them (Q/K permuted to rotate-half), in dtype, with
// transform (if not nil) applied to every value. The head is omitted when
// tied.
func hfTensors(w *ovrt.Weights, dtype string, transform func(float32) float32) []stTensor {
	c := w.Config
	var ts []stTensor
	add := func(name string, v []float32, shape ...int64) {
		if transform != nil {
			vv := make([]float32, len(v))
			for i, x := range v {
				vv[i] = transform(x)
			}
			v = vv
		}
		ts = append(ts, stTensor{name, dtype, shape, encode(dtype, v)})
	}
	d, h, q, kv := int64(c.Dim), int64(c.HiddenDim), int64(c.QDim()), int64(c.KVDim())
	add(hfEmbed, w.Embed.F32, int64(c.Vocab), d)
	for l := range w.Layers {
		ly := &w.Layers[l]
		add(hfLayer(l, "input_layernorm"), ly.AttnNorm, d)
		add(hfLayer(l, "self_attn.q_proj"), hfPermute(ly.Wq.F32, c.Heads, c.HeadSize(), c.Dim), q, d)
		add(hfLayer(l, "self_attn.k_proj"), hfPermute(ly.Wk.F32, c.KVHeads, c.HeadSize(), c.Dim), kv, d)
		add(hfLayer(l, "self_attn.v_proj"), ly.Wv.F32, kv, d)
		add(hfLayer(l, "self_attn.o_proj"), ly.Wo.F32, d, q)
		add(hfLayer(l, "post_attention_layernorm"), ly.FFNNorm, d)
		add(hfLayer(l, "mlp.gate_proj"), ly.W1.F32, h, d)
		add(hfLayer(l, "mlp.down_proj"), ly.W2.F32, d, h)
		add(hfLayer(l, "mlp.up_proj"), ly.W3.F32, h, d)
	}
	add(hfFinalNorm, w.FinalNorm, d)
	if !c.TiedHead {
		add(hfHead, w.Head.F32, int64(c.Vocab), d)
	}
	return ts
}

// hfConfigJSON is a config.json for c.
func hfConfigJSON(c ovrt.Config) []byte {
	m := map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"hidden_act":              "silu",
		"hidden_size":             c.Dim,
		"intermediate_size":       c.HiddenDim,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadSize(),
		"vocab_size":              c.Vocab,
		"max_position_embeddings": c.Context,
		"rms_norm_eps":            c.NormEps,
		"rope_theta":              c.RopeTheta,
		"tie_word_embeddings":     c.TiedHead,
		"bos_token_id":            c.BOS,
		"eos_token_id":            c.EOS,
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

// editJSON decodes a JSON object, applies edit, and encodes it again.
func editJSON(b []byte, edit func(m map[string]any)) []byte {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return out
}

// within reports whether v's storage lies inside f's mapping.
func within(f interface{ Bytes() []byte }, v []float32) bool {
	b := f.Bytes()
	if len(v) == 0 || len(b) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= lo && p+4*uintptr(len(v)) <= lo+uintptr(len(b))
}

// sameStorage reports whether a and b are the same slice.
func sameStorage(a, b []float32) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// wantErr checks that err wraps every target and mentions every string.
func wantErr(t testing.TB, err error, targets []error, mentions ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", targets)
	}
	t.Logf("error: %v", err)
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("error %q does not wrap %v", err, target)
		}
	}
	for _, s := range mentions {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if !strings.HasPrefix(err.Error(), "checkpoint: ") {
		t.Errorf("error %q lacks the checkpoint: prefix", err)
	}
}

// equalWeights compares two loads of the same model value by value: got
// must hold value(x) for each x of want (exactly x when value is nil).
func equalWeights(t *testing.T, got, want *ovrt.Weights, value func(float32) float32) {
	t.Helper()
	if !sameConfig(got.Config, want.Config) {
		t.Fatalf("config %+v, want %+v", got.Config, want.Config)
	}
	if got.Start != want.Start || got.End != want.End || len(got.Layers) != len(want.Layers) {
		t.Fatalf("range [%d, %d) with %d layers, want [%d, %d) with %d", got.Start, got.End, len(got.Layers), want.Start, want.End, len(want.Layers))
	}
	vec := func(name string, g, w []float32) {
		t.Helper()
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", name, len(g), len(w))
		}
		if value == nil {
			if !equalFloats(g, w) {
				t.Fatalf("%s differs", name)
			}
			return
		}
		for i := range g {
			if math.Float32bits(g[i]) != math.Float32bits(value(w[i])) {
				t.Fatalf("%s[%d] = %g, want %g", name, i, g[i], value(w[i]))
			}
		}
	}
	if want.HasEmbed() {
		vec("embed", got.Embed.F32, want.Embed.F32)
	}
	for i := range got.Layers {
		g, w := &got.Layers[i], &want.Layers[i]
		n := fmt.Sprintf("layer %d ", got.Start+i)
		vec(n+"attn norm", g.AttnNorm, w.AttnNorm)
		vec(n+"wq", g.Wq.F32, w.Wq.F32)
		vec(n+"wk", g.Wk.F32, w.Wk.F32)
		vec(n+"wv", g.Wv.F32, w.Wv.F32)
		vec(n+"wo", g.Wo.F32, w.Wo.F32)
		vec(n+"ffn norm", g.FFNNorm, w.FFNNorm)
		vec(n+"w1", g.W1.F32, w.W1.F32)
		vec(n+"w2", g.W2.F32, w.W2.F32)
		vec(n+"w3", g.W3.F32, w.W3.F32)
	}
	if want.HasHead() {
		vec("final norm", got.FinalNorm, want.FinalNorm)
		vec("head", got.Head.F32, want.Head.F32)
	}
}

// equalFloats compares bit patterns.
func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), 4*len(a)), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b)))
}

func sameConfig(a, b ovrt.Config) bool {
	sa, sb := a.RopeScaling, b.RopeScaling
	a.RopeScaling, b.RopeScaling = nil, nil
	return a == b && (sa == nil) == (sb == nil) && (sa == nil || *sa == *sb)
}
