package shards

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unsafe"

	"github.com/pipeshard/pipeshard/ovrt"
)

// tinyShard returns a small valid shard file and its weights.
func tinyShard(t testing.TB, q ovrt.DType, start, end int) []byte {
	t.Helper()
	c, err := SynthConfig("tiny", 2)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Synth(c, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	v, err := w.Slice(start, end, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHeader(v, "bafkmodel", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, h, v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// aligned copies b into 8-byte-aligned memory, as the store does.
func aligned(b []byte) []byte {
	words := make([]uint64, len(b)/8+1)
	out := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))[:len(b)]
	copy(out, b)
	return out
}

func TestShardRoundTrip(t *testing.T) {
	for _, q := range []ovrt.DType{ovrt.F32, ovrt.Q8_0, ovrt.Q4_0} {
		for _, r := range [][2]int{{0, 2}, {0, 1}, {1, 2}} {
			b := aligned(tinyShard(t, q, r[0], r[1]))
			w, h, err := Decode(b)
			if err != nil {
				t.Fatalf("%v %v: %v", q, r, err)
			}
			if h.Start != r[0] || h.End != r[1] || w.Start != r[0] || w.End != r[1] || h.Quant != q.String() {
				t.Fatalf("%v %v: header %+v", q, r, h)
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := tinyShard(t, ovrt.Q8_0, 0, 2)
	h, err := ParseHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	rehead := func(edit func(h *Header)) []byte {
		h2 := *h
		h2.Tensors = append([]Tensor(nil), h.Tensors...)
		edit(&h2)
		js, _ := json.Marshal(&h2)
		out := append([]byte(Magic), 0, 0, 0, 0)
		out[8], out[9], out[10], out[11] = byte(len(js)), byte(len(js)>>8), byte(len(js)>>16), byte(len(js)>>24)
		out = append(out, js...)
		return aligned(append(out, good[len(out):]...))
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"bad magic", append([]byte("NOTSHARD"), good[8:]...)},
		{"truncated", aligned(good[:len(good)-1])},
		{"huge header", aligned(append([]byte(Magic), 0xff, 0xff, 0xff, 0x7f))},
		{"garbage json", aligned(append(append([]byte(Magic), 3, 0, 0, 0), "{]x"...))},
		{"format 2", rehead(func(h *Header) { h.Format = 2 })},
		{"bad dtype", rehead(func(h *Header) { h.Tensors[1].DType = "q5_k" })},
		{"size mismatch", rehead(func(h *Header) { h.Tensors[2].Size++ })},
		{"overlap", rehead(func(h *Header) { h.Tensors[2].Offset = h.Tensors[1].Offset })},
		{"misaligned", rehead(func(h *Header) { h.Tensors[3].Offset += 4 })},
		{"wrong name", rehead(func(h *Header) { h.Tensors[0].Name = "head" })},
		{"layer range", rehead(func(h *Header) { h.End = 9 })},
		{"bad config", rehead(func(h *Header) { h.Config.Heads = 0 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Decode(tt.b); !errors.Is(err, ErrBadShard) {
				t.Fatalf("Decode: %v, want ErrBadShard", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(tinyShard(f, ovrt.F32, 0, 1))
	f.Add(tinyShard(f, ovrt.Q4_0, 1, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, h, err := Decode(aligned(b))
		if err != nil {
			if !errors.Is(err, ErrBadShard) {
				t.Fatalf("error %v does not wrap ErrBadShard", err)
			}
			return
		}
		if w.Validate() != nil || h.Size() != int64(len(b)) {
			t.Fatal("decoded a shard that does not validate")
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	d := Descriptor{Name: "m", Arch: "llama", Config: ovrt.Config{Dim: 64, HiddenDim: 160, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 512, Context: 64, NormEps: 1e-5, RopeTheta: 1e4}}
	id, _ := d.ID()
	m := Manifest{Format: ManifestFormat, ModelID: id.String(), Descriptor: d, Layouts: []Layout{{Quant: "f32", Split: "whole", Shards: []ShardRef{{CID: id.String(), Layers: [2]int{0, 2}, Quant: "f32"}}}}}
	b, _ := m.Encode()
	if _, err := ParseManifest(b); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("error %v does not wrap ErrBadManifest", err)
			}
			return
		}
		if m.Validate() != nil {
			t.Fatal("parsed a manifest that does not validate")
		}
	})
}
