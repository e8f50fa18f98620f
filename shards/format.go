package shards

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/pipeshard/pipeshard/ovrt"
)

// Sentinel errors.
var (
	ErrBadShard    = errors.New("shards: malformed shard")
	ErrBadManifest = errors.New("shards: malformed manifest")
	ErrNotFound    = errors.New("shards: not found")
	ErrMismatch    = errors.New("shards: shard does not belong to the model")
)

// Magic opens every shard file.
const Magic = "PSHARD\x00\x01"

// Alignment of every tensor's offset in a shard file.
const Alignment = 64

// maxHeader bounds the header JSON: a 128-layer model's header is ~60 KiB.
const maxHeader = 16 << 20

// Header describes a shard: whose layers it holds and where each tensor is.
// It is JSON after the magic and a little-endian uint32 length, so that a
// shard alone says what it is.
type Header struct {
	Format  int         `json:"format"`   // 1
	ModelID string      `json:"model_id"` // CID of the model's descriptor (see Manifest)
	Name    string      `json:"name"`
	Config  ovrt.Config `json:"config"`
	Start   int         `json:"start"` // layers [Start, End)
	End     int         `json:"end"`
	HeadLo  int         `json:"head_lo,omitempty"` // output head rows [HeadLo, HeadHi); 0, 0 = all
	HeadHi  int         `json:"head_hi,omitempty"`
	Quant   string      `json:"quant"`               // the layers' weight type
	Tied    bool        `json:"head_tied,omitempty"` // the head is the embedding, stored once
	Tensors []Tensor    `json:"tensors"`
}

// Tensor locates one tensor in a shard file.
type Tensor struct {
	Name   string `json:"name"`
	DType  string `json:"dtype"` // f32, q8_0, q4_0
	Rows   int    `json:"rows"`
	Cols   int    `json:"cols"`
	Offset int64  `json:"offset"` // from the start of the file; a multiple of Alignment
	Size   int64  `json:"size"`
}

// tensorRef pairs a tensor's name with where its data lives in Weights.
type tensorRef struct {
	name string
	mat  *ovrt.Matrix // nil for a vector
	vec  *[]float32
}

// refs lists w's tensors in file order, binding each to its place in w.
func refs(w *ovrt.Weights, tied bool) []tensorRef {
	var r []tensorRef
	if w.HasEmbed() {
		r = append(r, tensorRef{name: "embed", mat: &w.Embed})
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		p := fmt.Sprintf("layers.%d.", w.Start+i)
		r = append(r,
			tensorRef{name: p + "attn_norm", vec: &l.AttnNorm},
			tensorRef{name: p + "wq", mat: &l.Wq}, tensorRef{name: p + "wk", mat: &l.Wk},
			tensorRef{name: p + "wv", mat: &l.Wv}, tensorRef{name: p + "wo", mat: &l.Wo},
			tensorRef{name: p + "ffn_norm", vec: &l.FFNNorm},
			tensorRef{name: p + "w1", mat: &l.W1}, tensorRef{name: p + "w2", mat: &l.W2},
			tensorRef{name: p + "w3", mat: &l.W3})
	}
	if w.HasHead() {
		r = append(r, tensorRef{name: "final_norm", vec: &w.FinalNorm})
		if !tied {
			r = append(r, tensorRef{name: "head", mat: &w.Head})
		}
	}
	return r
}

// headTied reports whether w's head can be stored as its embedding.
func headTied(w *ovrt.Weights) bool {
	lo, hi := w.HeadRange()
	return w.Config.TiedHead && w.HasEmbed() && w.HasHead() && lo == 0 && hi == w.Config.Vocab &&
		w.Head.DType == w.Embed.DType && sameStorage(&w.Head, &w.Embed)
}

func sameStorage(a, b *ovrt.Matrix) bool {
	if a.DType == ovrt.F32 {
		return len(a.F32) > 0 && len(a.F32) == len(b.F32) && &a.F32[0] == &b.F32[0]
	}
	return len(a.Q) > 0 && len(a.Q) == len(b.Q) && &a.Q[0] == &b.Q[0]
}

func align(n int64) int64 { return (n + Alignment - 1) / Alignment * Alignment }

// NewHeader lays out w's tensors and returns the shard header.
func NewHeader(w *ovrt.Weights, modelID, name string) (*Header, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	h := &Header{Format: 1, ModelID: modelID, Name: name, Config: w.Config, Start: w.Start, End: w.End,
		HeadLo: w.HeadLo, HeadHi: w.HeadHi, Quant: quantOf(w).String(), Tied: headTied(w)}
	for _, r := range refs(w, h.Tied) {
		t := Tensor{Name: r.name}
		if r.mat != nil {
			t.DType, t.Rows, t.Cols, t.Size = r.mat.DType.String(), r.mat.Rows, r.mat.Cols, r.mat.Bytes()
		} else {
			t.DType, t.Rows, t.Cols, t.Size = "f32", 1, len(*r.vec), int64(4*len(*r.vec))
		}
		h.Tensors = append(h.Tensors, t)
	}
	// Offsets depend on the header's length, which depends on the offsets'
	// digits: iterate to the fixed point (two rounds at most in practice).
	start := int64(0)
	for range 8 {
		off := start
		for i := range h.Tensors {
			h.Tensors[i].Offset = off
			off = align(off + h.Tensors[i].Size)
		}
		b, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		next := align(int64(len(Magic) + 4 + len(b)))
		if next == start {
			return h, nil
		}
		start = next
	}
	return nil, fmt.Errorf("%w: header layout did not settle", ErrBadShard)
}

// quantOf names the layers' weight type (the head's for a head-only range).
func quantOf(w *ovrt.Weights) ovrt.DType {
	if len(w.Layers) > 0 {
		return w.Layers[0].Wq.DType
	}
	return w.Head.DType
}

// DataStart returns the offset of the first tensor.
func (h *Header) DataStart() int64 {
	if len(h.Tensors) == 0 {
		return 0
	}
	return h.Tensors[0].Offset
}

// Size returns the shard file's size.
func (h *Header) Size() int64 {
	if len(h.Tensors) == 0 {
		return 0
	}
	t := h.Tensors[len(h.Tensors)-1]
	return t.Offset + t.Size
}

// Write writes the shard file for w, laid out by h, to out.
func Write(out io.Writer, h *Header, w *ovrt.Weights) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var pre bytes.Buffer
	pre.WriteString(Magic)
	binary.Write(&pre, binary.LittleEndian, uint32(len(b)))
	pre.Write(b)
	pre.Write(make([]byte, h.DataStart()-int64(pre.Len())))
	if _, err := out.Write(pre.Bytes()); err != nil {
		return err
	}
	pos := h.DataStart()
	rs := refs(w, h.Tied)
	if len(rs) != len(h.Tensors) {
		return fmt.Errorf("%w: header lists %d tensors, weights have %d", ErrBadShard, len(h.Tensors), len(rs))
	}
	for i, r := range rs {
		t := h.Tensors[i]
		if pad := t.Offset - pos; pad > 0 {
			if _, err := out.Write(make([]byte, pad)); err != nil {
				return err
			}
		}
		var data []byte
		switch {
		case r.vec != nil:
			data = f32Bytes(*r.vec)
		case r.mat.DType == ovrt.F32:
			data = f32Bytes(r.mat.F32)
		default:
			data = r.mat.Q
		}
		if int64(len(data)) != t.Size {
			return fmt.Errorf("%w: tensor %s has %d bytes, header says %d", ErrBadShard, t.Name, len(data), t.Size)
		}
		// Write in pieces so a multi-GB tensor streams.
		for len(data) > 0 {
			n := min(len(data), 4<<20)
			if _, err := out.Write(data[:n]); err != nil {
				return err
			}
			data = data[n:]
		}
		pos = t.Offset + t.Size
	}
	return nil
}

// f32Bytes views floats as their little-endian bytes (every platform Go
// runs pipeshard on is little-endian; init checks).
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

func init() {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) != 1 {
		panic("shards: big-endian machines are not supported")
	}
}

// ParseHeader decodes the header at the start of a shard file. b must
// hold at least the magic, the length and the header JSON.
func ParseHeader(b []byte) (*Header, error) {
	if len(b) < len(Magic)+4 || string(b[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: no shard magic", ErrBadShard)
	}
	n := binary.LittleEndian.Uint32(b[len(Magic):])
	if n > maxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds %d", ErrBadShard, n, maxHeader)
	}
	if int64(len(b)) < int64(len(Magic))+4+int64(n) {
		return nil, fmt.Errorf("%w: header of %d bytes, %d present", ErrBadShard, n, len(b)-len(Magic)-4)
	}
	var h Header
	dec := json.NewDecoder(bytes.NewReader(b[len(Magic)+4 : len(Magic)+4+int(n)]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadShard, err)
	}
	if h.Format != 1 {
		return nil, fmt.Errorf("%w: format %d (this pipeshard reads 1)", ErrBadShard, h.Format)
	}
	if err := h.Config.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadShard, err)
	}
	end := int64(len(Magic)) + 4 + int64(n)
	for i, t := range h.Tensors {
		d, err := ovrt.ParseDType(t.DType)
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %w", ErrBadShard, t.Name, err)
		}
		if t.Rows <= 0 || t.Cols <= 0 || t.Rows > 1<<26 || t.Cols > 1<<26 || (d != ovrt.F32 && t.Cols%ovrt.BlockSize != 0) {
			return nil, fmt.Errorf("%w: tensor %s has shape [%d %d]", ErrBadShard, t.Name, t.Rows, t.Cols)
		}
		if want := int64(t.Rows) * int64(d.RowBytes(t.Cols)); t.Size != want {
			return nil, fmt.Errorf("%w: tensor %s has %d bytes, its shape needs %d", ErrBadShard, t.Name, t.Size, want)
		}
		if t.Offset < end || t.Offset%Alignment != 0 || t.Offset > math.MaxInt64-t.Size {
			return nil, fmt.Errorf("%w: tensor %d (%s) at offset %d overlaps what precedes it or is misaligned", ErrBadShard, i, t.Name, t.Offset)
		}
		end = t.Offset + t.Size
	}
	return &h, nil
}

// Decode returns the weights a shard file holds, as views into data: no
// tensor is copied or converted. data must be the whole file, 8-byte
// aligned, and must outlive the weights.
func Decode(data []byte) (*ovrt.Weights, *Header, error) {
	h, err := ParseHeader(data)
	if err != nil {
		return nil, nil, err
	}
	if h.Size() != int64(len(data)) {
		return nil, nil, fmt.Errorf("%w: header describes %d bytes, the file has %d", ErrBadShard, h.Size(), len(data))
	}
	if len(data) > 0 && uintptr(unsafe.Pointer(&data[0]))%8 != 0 {
		return nil, nil, fmt.Errorf("%w: shard bytes are not 8-byte aligned", ErrBadShard)
	}
	w := &ovrt.Weights{Config: h.Config, Start: h.Start, End: h.End, HeadLo: h.HeadLo, HeadHi: h.HeadHi}
	if w.Start < 0 || w.End > w.Config.Layers || w.Start > w.End {
		return nil, nil, fmt.Errorf("%w: layers [%d, %d) of %d", ErrBadShard, w.Start, w.End, w.Config.Layers)
	}
	w.Layers = make([]ovrt.Layer, w.End-w.Start)
	rs := refs(w, h.Tied)
	if len(rs) != len(h.Tensors) {
		return nil, nil, fmt.Errorf("%w: %d tensors for layers [%d, %d), want %d", ErrBadShard, len(h.Tensors), w.Start, w.End, len(rs))
	}
	for i, r := range rs {
		t := h.Tensors[i]
		if t.Name != r.name {
			return nil, nil, fmt.Errorf("%w: tensor %d is %q, want %q", ErrBadShard, i, t.Name, r.name)
		}
		b := data[t.Offset : t.Offset+t.Size]
		d, _ := ovrt.ParseDType(t.DType)
		if r.vec != nil {
			if d != ovrt.F32 || t.Rows != 1 {
				return nil, nil, fmt.Errorf("%w: vector %s is %s [%d %d]", ErrBadShard, t.Name, t.DType, t.Rows, t.Cols)
			}
			*r.vec = f32View(b)
			continue
		}
		*r.mat = ovrt.Matrix{DType: d, Rows: t.Rows, Cols: t.Cols}
		if d == ovrt.F32 {
			r.mat.F32 = f32View(b)
		} else {
			r.mat.Q = b
		}
	}
	if h.Tied {
		w.Head = w.Embed
	}
	if err := w.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadShard, err)
	}
	return w, h, nil
}

func f32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
