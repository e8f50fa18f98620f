package gguf

import (
	"bytes"
	"errors"
	"math"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/pipeshard/pipeshard/ovrt"
)

// allValues has one metadata entry of every type, arrays included.
var allValues = []KV{
	{"t.u8", ValueUint8, uint8(200)},
	{"t.i8", ValueInt8, int8(-100)},
	{"t.u16", ValueUint16, uint16(60000)},
	{"t.i16", ValueInt16, int16(-30000)},
	{"t.u32", ValueUint32, uint32(4000000000)},
	{"t.i32", ValueInt32, int32(-2000000000)},
	{"t.f32", ValueFloat32, float32(1e-5)},
	{"t.bool", ValueBool, true},
	{"t.str", ValueString, "héllo ▁world"},
	{"t.u64", ValueUint64, uint64(math.MaxUint64)},
	{"t.i64", ValueInt64, int64(math.MinInt64)},
	{"t.f64", ValueFloat64, 2.5e300},
	{"t.au8", ValueArray, Array{ValueUint8, []uint8{1, 2, 3}}},
	{"t.ai8", ValueArray, Array{ValueInt8, []int8{-1, 2}}},
	{"t.au16", ValueArray, Array{ValueUint16, []uint16{1, 65535}}},
	{"t.ai16", ValueArray, Array{ValueInt16, []int16{-1, 2}}},
	{"t.au32", ValueArray, Array{ValueUint32, []uint32{7, 8}}},
	{"t.ai32", ValueArray, Array{ValueInt32, []int32{-7, 8, 9}}},
	{"t.af32", ValueArray, Array{ValueFloat32, []float32{0.5, -1.25}}},
	{"t.abool", ValueArray, Array{ValueBool, []bool{true, false, true}}},
	{"t.astr", ValueArray, Array{ValueString, []string{"a", "", "<0x0A>"}}},
	{"t.au64", ValueArray, Array{ValueUint64, []uint64{1 << 63}}},
	{"t.ai64", ValueArray, Array{ValueInt64, []int64{-5}}},
	{"t.af64", ValueArray, Array{ValueFloat64, []float64{math.Pi}}},
	{"t.empty", ValueArray, Array{ValueInt32, []int32{}}},
	{"t.nested", ValueArray, Array{ValueArray, []Array{
		{ValueString, []string{"x", "y"}},
		{ValueArray, []Array{{ValueUint8, []uint8{9}}}},
		{ValueFloat32, []float32{}},
	}}},
}

// smallFile is a valid GGUF with every value type and a few tiny tensors.
func smallFile(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, kv := range allValues {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	q8 := make([]byte, 2*34)
	le.PutUint16(q8, Float32ToHalf(0.5))
	for i := range 32 {
		q8[2+i] = byte(int8(i - 16))
	}
	le.PutUint16(q8[34:], Float32ToHalf(-2))
	for i := range 32 {
		q8[36+i] = byte(int8(3 * i))
	}
	q4 := make([]byte, 18)
	le.PutUint16(q4, Float32ToHalf(0.25))
	for i := range 16 {
		q4[2+i] = byte(i) | byte(15-i)<<4
	}
	f16 := make([]byte, 6)
	for i, x := range []float32{1, -0.5, 65504} {
		le.PutUint16(f16[2*i:], Float32ToHalf(x))
	}
	tensors := []struct {
		name string
		typ  GGMLType
		dims []uint64
		data []byte
	}{
		{"a.f32", TypeF32, []uint64{3}, le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, math.Float32bits(1)), math.Float32bits(2)), math.Float32bits(-3))},
		{"b.q8", TypeQ8_0, []uint64{32, 2}, q8},
		{"c.empty", TypeF32, []uint64{0, 4}, nil},
		{"d.q4", TypeQ4_0, []uint64{32}, q4},
		{"e.f16", TypeF16, []uint64{3, 1}, f16},
		{"f.bf16", TypeBF16, []uint64{2}, []byte{0x80, 0x3f, 0x00, 0xc0}}, // 1, -2
	}
	for _, tt := range tensors {
		if err := w.AddTensor(tt.name, tt.typ, tt.dims...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tensors {
		if err := w.WriteTensor(tt.name, tt.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := int64(buf.Len()); got < w.DataOffset() {
		t.Fatalf("file of %d bytes, data offset %d", got, w.DataOffset())
	}
	return buf.Bytes()
}

func TestParseAllValueTypes(t *testing.T) {
	b := smallFile(t)
	f, err := Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 32 || f.DataOffset%32 != 0 || f.Size != int64(len(b)) {
		t.Errorf("version %d alignment %d data offset %d size %d", f.Version, f.Alignment, f.DataOffset, f.Size)
	}
	if !reflect.DeepEqual(f.KVs, allValues) {
		t.Errorf("KVs:\n got %#v\nwant %#v", f.KVs, allValues)
	}
	check := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, %v; want %v", what, got, err, want)
		}
	}
	s, err := f.String("t.str")
	check("String", s, "héllo ▁world", err)
	u, err := f.Uint("t.u64")
	check("Uint u64", u, uint64(math.MaxUint64), err)
	u, err = f.Uint("t.u8")
	check("Uint u8", u, uint64(200), err)
	i, err := f.Int("t.i32")
	check("Int", i, int64(-2000000000), err)
	x, err := f.Float("t.f32")
	check("Float f32", x, 1e-5, err) // shortest decimal, not float64(float32(1e-5))
	x, err = f.Float("t.f64")
	check("Float f64", x, 2.5e300, err)
	bl, err := f.Bool("t.bool")
	check("Bool", bl, true, err)
	ss, err := f.Strings("t.astr")
	check("Strings", ss, []string{"a", "", "<0x0A>"}, err)
	fs, err := f.Floats("t.af32")
	check("Floats", fs, []float64{0.5, -1.25}, err)
	is, err := f.Ints("t.ai32")
	check("Ints i32", is, []int64{-7, 8, 9}, err)
	is, err = f.Ints("t.au16")
	check("Ints u16", is, []int64{1, 65535}, err)
	is, err = f.Ints("t.empty")
	check("Ints empty", is, []int64{}, err)

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"missing", func() error { _, err := f.String("nope"); return err }, ErrKeyNotFound},
		{"String of u32", func() error { _, err := f.String("t.u32"); return err }, ErrWrongType},
		{"Uint of negative", func() error { _, err := f.Uint("t.i8"); return err }, ErrWrongType},
		{"Uint of string", func() error { _, err := f.Uint("t.str"); return err }, ErrWrongType},
		{"Int of u64 max", func() error { _, err := f.Int("t.u64"); return err }, ErrWrongType},
		{"Float of int", func() error { _, err := f.Float("t.i32"); return err }, ErrWrongType},
		{"Bool of u8", func() error { _, err := f.Bool("t.u8"); return err }, ErrWrongType},
		{"Strings of ints", func() error { _, err := f.Strings("t.ai32"); return err }, ErrWrongType},
		{"Strings of scalar", func() error { _, err := f.Strings("t.str"); return err }, ErrWrongType},
		{"Floats of strings", func() error { _, err := f.Floats("t.astr"); return err }, ErrWrongType},
		{"Ints of floats", func() error { _, err := f.Ints("t.af64"); return err }, ErrWrongType},
		{"Ints of u64 max", func() error { _, err := f.Ints("t.au64"); return err }, ErrWrongType},
		{"Ints missing", func() error { _, err := f.Ints("nope"); return err }, ErrKeyNotFound},
		{"tensor missing", func() error { _, err := f.TensorF32("nope"); return err }, ErrTensorNotFound},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "gguf: ") {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	wantData := map[string][]float32{
		"a.f32":   {1, 2, -3},
		"c.empty": {},
		"d.q4":    nil, // below
		"e.f16":   {1, -0.5, 65504},
		"f.bf16":  {1, -2},
	}
	q4 := make([]float32, 32)
	for j := range 16 {
		q4[j] = 0.25 * float32(j-8)
		q4[j+16] = 0.25 * float32(15-j-8)
	}
	wantData["d.q4"] = q4
	q8 := make([]float32, 64)
	for j := range 32 {
		q8[j] = 0.5 * float32(j-16)
		q8[32+j] = -2 * float32(int8(3*j))
	}
	wantData["b.q8"] = q8
	for _, g := range []*File{f, mustParseBytes(t, b)} {
		for name, want := range wantData {
			got, err := g.TensorF32(name)
			if err != nil || !sameF32(got, want) {
				t.Errorf("TensorF32(%s) = %v, %v; want %v", name, got, err, want)
			}
		}
		raw, err := g.TensorBytes("b.q8")
		if err != nil || len(raw) != 68 {
			t.Errorf("TensorBytes(b.q8): %d bytes, %v", len(raw), err)
		}
	}
	ti, _ := f.Tensor("b.q8")
	if ti.Size != 68 || ti.Elements() != 64 || ti.Offset%32 != 0 {
		t.Errorf("b.q8 info %+v", ti)
	}

	// Version 2 has the same layout.
	v2 := append([]byte(nil), b...)
	le.PutUint32(v2[4:], 2)
	g, err := ParseBytes(v2)
	if err != nil || g.Version != 2 || !reflect.DeepEqual(g.KVs, allValues) {
		t.Errorf("version 2: %v", err)
	}
}

func mustParseBytes(t testing.TB, b []byte) *File {
	t.Helper()
	f, err := ParseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestOpenAndClose(t *testing.T) {
	path := writeBytes(t, smallFile(t))
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.TensorF32("e.f16")
	if err != nil || !sameF32(got, []float32{1, -0.5, 65504}) {
		t.Errorf("TensorF32 through the file: %v %v", got, err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := Open(path + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(writeBytes(t, []byte("GGML junk"))); !errors.Is(err, ErrNotGGUF) {
		t.Errorf("junk file: %v", err)
	}
}

// A model parsed from memory shares its F32 tensors with the buffer.
func TestLoadLlamaFileZeroCopy(t *testing.T) {
	c := tinyConfig()
	want := synthModel(9, c, dtypes{embed: ovrt.F32, attn: ovrt.F32, ffn: ovrt.Q8_0, head: ovrt.Q4_0})
	b, err := os.ReadFile(writeModel(t, want, synthVocab(c.Vocab)))
	if err != nil {
		t.Fatal(err)
	}
	f := mustParseBytes(t, b)
	got, err := LoadLlamaFile(f, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkWeights(t, got, want)
	inside := func(p unsafe.Pointer) bool {
		lo := uintptr(unsafe.Pointer(&b[0]))
		return uintptr(p) >= lo && uintptr(p) < lo+uintptr(len(b))
	}
	if !inside(unsafe.Pointer(&got.Layers[1].Wq.F32[0])) || !inside(unsafe.Pointer(&got.Layers[0].AttnNorm[0])) ||
		!inside(unsafe.Pointer(&got.Layers[0].W2.Q[0])) {
		t.Errorf("tensors were copied out of the mapped buffer")
	}
	if cap(got.Layers[0].AttnNorm) != len(got.Layers[0].AttnNorm) {
		t.Errorf("a view may be appended into the next tensor")
	}
}

func TestHalf(t *testing.T) {
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		if f != f { // NaN stays NaN
			if g := HalfToFloat32(Float32ToHalf(f)); g == g {
				t.Fatalf("NaN %#04x came back as %v", h, g)
			}
			continue
		}
		if back := Float32ToHalf(f); back != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
	}
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00},
		{5.960464477539063e-08, 0x0001}, {2.9802322387695312e-08, 0x0000}, // halfway rounds to even (0)
		{8.940696716308594e-08, 0x0002}, // 1.5 ulp rounds to even (2)
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {float32(math.Inf(-1)), 0xfc00},
		{6.097555160522461e-05, 0x03ff}, {6.103515625e-05, 0x0400},
	} {
		if got := Float32ToHalf(tc.f); got != tc.h {
			t.Errorf("Float32ToHalf(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
}

func TestWriterMisuse(t *testing.T) {
	var sink bytes.Buffer
	for _, tc := range []struct {
		name string
		run  func(w *Writer) error
	}{
		{"int value", func(w *Writer) error { return w.AddKV("k", 3) }},
		{"empty key", func(w *Writer) error { return w.AddKV("", uint8(1)) }},
		{"duplicate key", func(w *Writer) error { w.AddKV("k", uint8(1)); return w.AddKV("k", uint8(2)) }},
		{"bad alignment", func(w *Writer) error { return w.AddKV("general.alignment", uint32(24)) }},
		{"alignment type", func(w *Writer) error { return w.AddKV("general.alignment", uint64(32)) }},
		{"array mismatch", func(w *Writer) error { return w.AddKV("k", Array{ValueUint8, []int32{1}}) }},
		{"unknown type", func(w *Writer) error { return w.AddTensor("t", GGMLType(4), 32) }},
		{"ragged q8", func(w *Writer) error { return w.AddTensor("t", TypeQ8_0, 33) }},
		{"5 dims", func(w *Writer) error { return w.AddTensor("t", TypeF32, 1, 1, 1, 1, 1) }},
		{"long name", func(w *Writer) error { return w.AddTensor(strings.Repeat("x", 64), TypeF32, 1) }},
		{"duplicate tensor", func(w *Writer) error { w.AddTensor("t", TypeF32, 1); return w.AddTensor("t", TypeF32, 1) }},
		{"overflow", func(w *Writer) error { return w.AddTensor("t", TypeF32, 1<<62, 4) }},
		{"wrong order", func(w *Writer) error {
			w.AddTensor("a", TypeF32, 1)
			w.AddTensor("b", TypeF32, 1)
			return w.WriteTensor("b", make([]byte, 4))
		}},
		{"wrong size", func(w *Writer) error { w.AddTensor("a", TypeF32, 2); return w.WriteTensor("a", make([]byte, 4)) }},
		{"f32 into q8", func(w *Writer) error {
			w.AddTensor("a", TypeQ8_0, 32)
			return w.WriteTensorF32("a", make([]float32, 34/4))
		}},
		{"too much data", func(w *Writer) error { w.AddTensor("a", TypeF32, 1); _, err := w.Write(make([]byte, 5)); return err }},
		{"missing data", func(w *Writer) error { w.AddTensor("a", TypeF32, 1); return w.Close() }},
		{"late key", func(w *Writer) error {
			w.AddTensor("a", TypeF32, 1)
			w.WriteTensor("a", make([]byte, 4))
			return w.AddKV("k", uint8(1))
		}},
		{"write after close", func(w *Writer) error { w.Close(); _, err := w.Write([]byte{1}); return err }},
	} {
		if err := tc.run(NewWriter(&sink)); !errors.Is(err, ErrWrite) {
			t.Errorf("%s: %v, want ErrWrite", tc.name, err)
		}
	}
}

// Streaming through Write in odd-sized pieces gives the same file as
// whole-tensor writes.
func TestWriterStreaming(t *testing.T) {
	b := smallFile(t)
	f := mustParseBytes(t, b)
	var all []byte
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, kv := range f.KVs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims...); err != nil {
			t.Fatal(err)
		}
		all = append(all, b[ti.Offset:ti.Offset+ti.Size]...)
	}
	for len(all) > 0 {
		n := min(len(all), 7)
		if _, err := w.Write(all[:n]); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), b) {
		t.Errorf("streamed file differs")
	}
}

func TestAlignment(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.AddKV("general.alignment", uint32(64))
	w.AddTensor("a", TypeF32, 3)
	w.AddTensor("b", TypeF32, 5)
	w.WriteTensorF32("a", []float32{1, 2, 3})
	w.WriteTensorF32("b", []float32{4, 5, 6, 7, 8})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := mustParseBytes(t, buf.Bytes())
	if f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("alignment %d data offset %d", f.Alignment, f.DataOffset)
	}
	for _, ti := range f.Tensors {
		if ti.Offset%64 != 0 {
			t.Errorf("%s at %d", ti.Name, ti.Offset)
		}
	}
	if got, _ := f.TensorF32("b"); !sameF32(got, []float32{4, 5, 6, 7, 8}) {
		t.Errorf("b = %v", got)
	}
}

// raw builds GGUF bytes by hand, for malformed files.
type raw struct{ b []byte }

func newRaw(version uint32, tensors, kvs uint64) *raw {
	r := &raw{b: []byte("GGUF")}
	return r.u32(version).u64(tensors).u64(kvs)
}
func (r *raw) u8(v uint8) *raw   { r.b = append(r.b, v); return r }
func (r *raw) u32(v uint32) *raw { r.b = le.AppendUint32(r.b, v); return r }
func (r *raw) u64(v uint64) *raw { r.b = le.AppendUint64(r.b, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.b = append(r.b, s...); return r }

// tensor appends a tensor info.
func (r *raw) tensor(name string, typ GGMLType, off uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(off)
}

// data pads to 32 and appends n zero bytes.
func (r *raw) data(n int) *raw {
	for len(r.b)%32 != 0 {
		r.b = append(r.b, 0)
	}
	r.b = append(r.b, make([]byte, n)...)
	return r
}

func TestParseBadInput(t *testing.T) {
	valid := smallFile(t)
	kv := func(key string, typ ValueType) *raw { return newRaw(3, 0, 1).str(key).u32(uint32(typ)) }
	one := func() *raw { return newRaw(3, 1, 0) }
	for _, tc := range []struct {
		name    string
		b       []byte
		want    error
		mention string // must appear in the message
	}{
		{"empty", nil, ErrTruncated, ""},
		{"short magic", []byte("GG"), ErrTruncated, ""},
		{"wrong magic", append([]byte("GGML"), valid[4:]...), ErrNotGGUF, "GGML"},
		{"text file", []byte("hello, world"), ErrNotGGUF, ""},
		{"version 1", newRaw(1, 0, 0).b, ErrVersion, "version 1"},
		{"version 4", newRaw(4, 0, 0).b, ErrVersion, "4"},
		{"big endian", newRaw(3<<24, 0, 0).b, ErrVersion, "big-endian"},
		{"no counts", []byte("GGUF\x03\x00\x00\x00"), ErrTruncated, "tensor count"},
		{"huge kv count", newRaw(3, 0, 1<<62).b, ErrMalformed, "metadata"},
		{"huge tensor count", newRaw(3, math.MaxUint64, 0).b, ErrMalformed, "tensors"},
		{"kv count past end", newRaw(3, 0, 2).str("a").u32(0).u8(1).b, ErrMalformed, ""},
		{"huge key length", newRaw(3, 0, 1).u64(math.MaxUint64).u64(0).b, ErrMalformed, "length"},
		{"empty key", kv("", ValueUint8).u8(1).u64(0).b, ErrMalformed, "empty key"},
		{"huge string", kv("k", ValueString).u64(1 << 40).b, ErrMalformed, `"k"`},
		{"huge array", kv("k", ValueArray).u32(uint32(ValueUint32)).u64(1 << 60).b, ErrMalformed, `"k"`},
		{"huge string array", kv("k", ValueArray).u32(uint32(ValueString)).u64(1 << 20).u64(0).b, ErrMalformed, "elements"},
		{"array elem type", kv("k", ValueArray).u32(77).u64(0).b, ErrMalformed, "element type 77"},
		{"value type", kv("k", 13).u8(0).b, ErrMalformed, "value type 13"},
		{"bool 2", kv("k", ValueBool).u8(2).b, ErrMalformed, "bool"},
		{"truncated value", kv("k", ValueUint64).u32(0).b, ErrTruncated, `"k"`},
		{"deep arrays", func() []byte {
			r := kv("k", ValueArray)
			for range MaxArrayDepth + 1 {
				r.u32(uint32(ValueArray)).u64(1)
			}
			return r.u32(uint32(ValueUint8)).u64(0).b
		}(), ErrMalformed, "nested"},
		{"duplicate key", newRaw(3, 0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2).b, ErrMalformed, `duplicate metadata key "k"`},
		{"alignment zero", kv("general.alignment", ValueUint32).u32(0).b, ErrMalformed, "alignment"},
		{"alignment 48", kv("general.alignment", ValueUint32).u32(48).b, ErrMalformed, "power of two"},
		{"alignment type", kv("general.alignment", ValueUint64).u64(32).b, ErrMalformed, "uint32"},
		{"unknown ggml type", one().tensor("w", GGMLType(4), 0, 32).data(64).b, ErrUnknownType, `"w"`},
		{"ggml type 1000", one().tensor("w", GGMLType(1000), 0, 32).data(64).b, ErrUnknownType, "1000"},
		{"5 dims", one().tensor("w", TypeF32, 0, 1, 1, 1, 1, 1).data(4).b, ErrMalformed, "dimensions"},
		{"negative dim", one().tensor("w", TypeF32, 0, 1<<63).data(4).b, ErrMalformed, "negative"},
		{"dims overflow", one().tensor("w", TypeF32, 0, 1<<32, 1<<32).data(4).b, ErrMalformed, "overflow"},
		{"size overflow", one().tensor("w", TypeF32, 0, 1<<62).data(4).b, ErrMalformed, "overflow"},
		{"ragged block", one().tensor("w", TypeQ8_0, 0, 33).data(64).b, ErrMalformed, "block size"},
		{"empty name", one().tensor("", TypeF32, 0, 1).data(4).b, ErrMalformed, "empty tensor name"},
		{"long name", one().tensor(strings.Repeat("n", 64), TypeF32, 0, 1).data(4).b, ErrMalformed, "longer than 63"},
		{"misaligned offset", one().tensor("w", TypeF32, 4, 1).data(64).b, ErrMalformed, `"w"`},
		{"offset past end", one().tensor("w", TypeF32, 1<<20, 1).data(64).b, ErrTruncated, `"w"`},
		{"offset overflow", one().tensor("w", TypeF32, math.MaxUint64&^31, 8).data(64).b, ErrMalformed, `"w"`},
		{"data past end", one().tensor("w", TypeF32, 0, 100).data(64).b, ErrTruncated, `"w"`},
		{"duplicate tensor", newRaw(3, 2, 0).tensor("w", TypeF32, 0, 1).tensor("w", TypeF32, 32, 1).data(64).b, ErrMalformed, `duplicate tensor name "w"`},
		{"overlap", newRaw(3, 2, 0).tensor("a", TypeF32, 0, 16).tensor("b", TypeF32, 32, 16).data(128).b, ErrMalformed, "overlap"},
		{"truncated tensor info", one().str("w").u32(4).u64(4).u64(4).b, ErrTruncated, `"w"`},
		{"truncated data", valid[:len(valid)-40], ErrTruncated, "f.bf16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse(bytes.NewReader(tc.b), int64(len(tc.b)))
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "gguf: ") || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("message %q should start with gguf: and mention %q", err, tc.mention)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("allocated %d bytes on a %d-byte file", n, len(tc.b))
			}
		})
	}
}

// Every truncation of a valid file fails cleanly.
func TestParseEveryTruncation(t *testing.T) {
	valid := smallFile(t)
	for n := range len(valid) {
		_, err := ParseBytes(valid[:n])
		if err == nil {
			// Only the zero padding after the last tensor may go.
			f := mustParseBytes(t, valid)
			last := uint64(0)
			for _, ti := range f.Tensors {
				last = max(last, ti.Offset+ti.Size)
			}
			if uint64(n) < last {
				t.Fatalf("truncated to %d bytes (data ends at %d): no error", n, last)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
}

// A reader that lies about its size gets ErrTruncated, not garbage.
func TestParseShortReader(t *testing.T) {
	valid := smallFile(t)
	_, err := Parse(bytes.NewReader(valid[:100]), int64(len(valid)))
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("short reader: %v", err)
	}
	f, err := Parse(bytes.NewReader(valid), int64(len(valid)))
	if err != nil {
		t.Fatal(err)
	}
	f.r = bytes.NewReader(valid[:f.DataOffset])
	if _, err := f.TensorF32("a.f32"); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "a.f32") {
		t.Errorf("short tensor read: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	valid := smallFile(f)
	f.Add(valid)
	v2 := append([]byte(nil), valid...)
	le.PutUint32(v2[4:], 2)
	f.Add(v2)
	f.Add(newRaw(3, 1, 1).str("general.alignment").u32(uint32(ValueUint32)).u32(64).tensor("w", TypeQ4_0, 0, 32, 2).data(36).b)
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseBytes(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("error without the gguf: prefix: %v", err)
			}
			return
		}
		for _, ti := range g.Tensors {
			if ti.Offset+ti.Size > uint64(len(b)) || ti.Offset < uint64(g.DataOffset) {
				t.Fatalf("tensor %q [%d, +%d) outside the %d-byte file", ti.Name, ti.Offset, ti.Size, len(b))
			}
			if _, err := g.TensorF32(ti.Name); err != nil && ti.Type.Decodable() {
				t.Fatalf("TensorF32(%q): %v", ti.Name, err)
			}
		}
		for _, kv := range g.KVs {
			g.Uint(kv.Key)
			g.Float(kv.Key)
			g.Strings(kv.Key)
			g.Ints(kv.Key)
			g.Floats(kv.Key)
		}
		ReadLlamaConfig(g)
		ReadVocab(g)
		LoadLlamaFile(g, 0, 0)
		// What parses also parses through an io.ReaderAt.
		if _, err := Parse(bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatalf("ParseBytes accepted what Parse refuses: %v", err)
		}
	})
}
