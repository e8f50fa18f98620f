package gguf

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// Writer writes a GGUF version 3 file in one pass.
//
// Declare everything first: metadata with AddKV and tensors with AddTensor
// (which computes each tensor's offset from its type and shape). Then write
// the tensors' data in declaration order, whole with WriteTensor or
// WriteTensorF32, or in pieces of any size through Write; the header is
// written before the first data and padding between tensors is inserted
// automatically. Close checks that every tensor got exactly its bytes and
// flushes. Nothing is buffered beyond a fixed-size write buffer, so a
// multi-GB model is never held twice.
//
// Tensor data is aligned to general.alignment if the metadata sets it (as
// a uint32 power of two), else to 32 bytes; each tensor's data is padded to
// the alignment, as llama.cpp writes it.
type Writer struct {
	w         *bufio.Writer
	kvs       []KV
	keys      map[string]bool
	tensors   []TensorInfo // Offset relative to the data section
	names     map[string]bool
	dataSize  uint64 // padded
	alignment uint64

	started bool   // header written
	cur     int    // tensor being written
	curLeft uint64 // bytes of it still to come
	n       int64  // bytes written so far
	err     error  // sticky
	closed  bool
}

// NewWriter returns a Writer writing to w. Close does not close w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{
		w:         bufio.NewWriterSize(w, 1<<20),
		keys:      map[string]bool{},
		names:     map[string]bool{},
		alignment: DefaultAlignment,
	}
}

func (w *Writer) fail(format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{ErrWrite}, args...)...)
	if w.err == nil {
		w.err = err
	}
	return err
}

// AddKV declares a metadata entry. The value's Go type selects the GGUF
// type: uint8, int8, uint16, int16, uint32, int32, float32, bool, string,
// uint64, int64, float64, a slice of one of those (an array), or an Array
// (for an empty array of a given type, or arrays of arrays). int, uint and
// other types are refused: say which width you mean.
func (w *Writer) AddKV(key string, value any) error {
	if w.err != nil {
		return w.err
	}
	if w.started {
		return w.fail("metadata key %q added after tensor data", key)
	}
	if key == "" || len(key) > MaxKeyLen {
		return w.fail("metadata key of %d bytes", len(key))
	}
	if w.keys[key] {
		return w.fail("duplicate metadata key %q", key)
	}
	t, v, err := normalize(value, 0)
	if err != nil {
		return w.fail("metadata key %q: %v", key, err)
	}
	if key == "general.alignment" {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return w.fail("general.alignment must be a uint32 power of two, got %T %v", value, value)
		}
		if len(w.tensors) > 0 {
			return w.fail("general.alignment set after tensors were added")
		}
		w.alignment = uint64(a)
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{Key: key, Type: t, Value: v})
	return nil
}

// normalize maps a Go value to its GGUF type, turning slices into Arrays.
func normalize(v any, depth int) (ValueType, any, error) {
	switch x := v.(type) {
	case uint8:
		return ValueUint8, x, nil
	case int8:
		return ValueInt8, x, nil
	case uint16:
		return ValueUint16, x, nil
	case int16:
		return ValueInt16, x, nil
	case uint32:
		return ValueUint32, x, nil
	case int32:
		return ValueInt32, x, nil
	case float32:
		return ValueFloat32, x, nil
	case bool:
		return ValueBool, x, nil
	case string:
		return ValueString, x, nil
	case uint64:
		return ValueUint64, x, nil
	case int64:
		return ValueInt64, x, nil
	case float64:
		return ValueFloat64, x, nil
	case []uint8:
		return ValueArray, Array{ValueUint8, x}, nil
	case []int8:
		return ValueArray, Array{ValueInt8, x}, nil
	case []uint16:
		return ValueArray, Array{ValueUint16, x}, nil
	case []int16:
		return ValueArray, Array{ValueInt16, x}, nil
	case []uint32:
		return ValueArray, Array{ValueUint32, x}, nil
	case []int32:
		return ValueArray, Array{ValueInt32, x}, nil
	case []float32:
		return ValueArray, Array{ValueFloat32, x}, nil
	case []bool:
		return ValueArray, Array{ValueBool, x}, nil
	case []string:
		return ValueArray, Array{ValueString, x}, nil
	case []uint64:
		return ValueArray, Array{ValueUint64, x}, nil
	case []int64:
		return ValueArray, Array{ValueInt64, x}, nil
	case []float64:
		return ValueArray, Array{ValueFloat64, x}, nil
	case Array:
		if depth >= MaxArrayDepth {
			return 0, nil, fmt.Errorf("arrays nested deeper than %d", MaxArrayDepth)
		}
		if x.Values == nil {
			x.Values = emptySlice(x.Elem)
		}
		want := emptySlice(x.Elem)
		if want == nil {
			return 0, nil, fmt.Errorf("array of unknown element type %d", uint32(x.Elem))
		}
		if fmt.Sprintf("%T", want) != fmt.Sprintf("%T", x.Values) {
			return 0, nil, fmt.Errorf("array of %s holds %T", x.Elem, x.Values)
		}
		if inner, ok := x.Values.([]Array); ok {
			for _, a := range inner {
				if _, _, err := normalize(a, depth+1); err != nil {
					return 0, nil, err
				}
			}
		}
		return ValueArray, x, nil
	}
	return 0, nil, fmt.Errorf("unsupported Go type %T", v)
}

func emptySlice(t ValueType) any {
	switch t {
	case ValueUint8:
		return []uint8{}
	case ValueInt8:
		return []int8{}
	case ValueUint16:
		return []uint16{}
	case ValueInt16:
		return []int16{}
	case ValueUint32:
		return []uint32{}
	case ValueInt32:
		return []int32{}
	case ValueFloat32:
		return []float32{}
	case ValueBool:
		return []bool{}
	case ValueString:
		return []string{}
	case ValueUint64:
		return []uint64{}
	case ValueInt64:
		return []int64{}
	case ValueFloat64:
		return []float64{}
	case ValueArray:
		return []Array{}
	}
	return nil
}

// AddTensor declares a tensor of type typ with dims in GGUF order
// (innermost first: a [rows, cols] matrix is dims cols, rows). Its data
// must be written in declaration order.
func (w *Writer) AddTensor(name string, typ GGMLType, dims ...uint64) error {
	if w.err != nil {
		return w.err
	}
	if w.started {
		return w.fail("tensor %q added after tensor data", name)
	}
	if name == "" || len(name) > MaxTensorName || !utf8.ValidString(name) {
		return w.fail("tensor name %q (want 1 to %d bytes of UTF-8)", name, MaxTensorName)
	}
	if w.names[name] {
		return w.fail("duplicate tensor %q", name)
	}
	tr, ok := traits[typ]
	if !ok {
		return w.fail("tensor %q: unknown type %d", name, uint32(typ))
	}
	if len(dims) > MaxDims {
		return w.fail("tensor %q has %d dimensions, more than %d", name, len(dims), MaxDims)
	}
	elems := uint64(1)
	for _, d := range dims {
		if d != 0 && elems > math.MaxInt64/d {
			return w.fail("tensor %q shape %v overflows", name, dims)
		}
		elems *= d
	}
	if len(dims) > 0 && dims[0]%tr.block != 0 {
		return w.fail("tensor %q of type %s: %d elements per row is not a multiple of %d", name, typ, dims[0], tr.block)
	}
	size := elems / tr.block * tr.size
	if elems/tr.block != 0 && size/(elems/tr.block) != tr.size {
		return w.fail("tensor %q size overflows", name)
	}
	padded, ok := alignUp(size, w.alignment)
	if !ok {
		return w.fail("tensor %q size overflows", name)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{
		Name: name, Dims: append([]uint64(nil), dims...), Type: typ,
		Offset: w.dataSize, Size: size,
	})
	w.dataSize += padded
	return nil
}

// DataOffset returns the absolute offset the tensor data section will
// have, given what has been declared so far.
func (w *Writer) DataOffset() int64 {
	n := w.headerSize()
	a, _ := alignUp(uint64(n), w.alignment)
	return int64(a)
}

func (w *Writer) headerSize() int64 {
	n := int64(4 + 4 + 8 + 8)
	for _, kv := range w.kvs {
		n += 8 + int64(len(kv.Key)) + 4 + valueSize(kv.Type, kv.Value)
	}
	for _, t := range w.tensors {
		n += 8 + int64(len(t.Name)) + 4 + 8*int64(len(t.Dims)) + 4 + 8
	}
	return n
}

func valueSize(t ValueType, v any) int64 {
	switch t {
	case ValueString:
		return 8 + int64(len(v.(string)))
	case ValueArray:
		a := v.(Array)
		n := int64(4 + 8)
		switch s := a.Values.(type) {
		case []string:
			for _, x := range s {
				n += 8 + int64(len(x))
			}
		case []Array:
			for _, x := range s {
				n += valueSize(ValueArray, x)
			}
		default:
			n += int64(a.Len()) * int64(a.Elem.fixedSize())
		}
		return n
	}
	return int64(t.fixedSize())
}

// start writes the header, metadata, tensor directory and padding.
func (w *Writer) start() error {
	if w.started {
		return w.err
	}
	w.started = true
	w.put([]byte(magic))
	w.u32(3)
	w.u64(uint64(len(w.tensors)))
	w.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		w.str(kv.Key)
		w.u32(uint32(kv.Type))
		w.value(kv.Type, kv.Value)
	}
	for _, t := range w.tensors {
		w.str(t.Name)
		w.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			w.u64(d)
		}
		w.u32(uint32(t.Type))
		w.u64(t.Offset)
	}
	w.pad()
	w.cur = -1
	w.next()
	return w.err
}

// next moves to the next tensor with data to write.
func (w *Writer) next() {
	for w.cur++; w.cur < len(w.tensors) && w.tensors[w.cur].Size == 0; w.cur++ {
	}
	if w.cur < len(w.tensors) {
		w.curLeft = w.tensors[w.cur].Size
	}
}

func (w *Writer) pad() {
	a, _ := alignUp(uint64(w.n), w.alignment)
	var zero [64]byte
	for k := a - uint64(w.n); k > 0; {
		m := min(k, uint64(len(zero)))
		w.put(zero[:m])
		k -= m
	}
}

func (w *Writer) put(p []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = fmt.Errorf("gguf: write: %w", err)
	}
}

func (w *Writer) u32(v uint32) { w.put(le.AppendUint32(nil, v)) }
func (w *Writer) u64(v uint64) { w.put(le.AppendUint64(nil, v)) }
func (w *Writer) str(s string) { w.u64(uint64(len(s))); w.put([]byte(s)) }

func (w *Writer) value(t ValueType, v any) {
	var b []byte
	switch x := v.(type) {
	case uint8:
		b = []byte{x}
	case int8:
		b = []byte{byte(x)}
	case uint16:
		b = le.AppendUint16(nil, x)
	case int16:
		b = le.AppendUint16(nil, uint16(x))
	case uint32:
		b = le.AppendUint32(nil, x)
	case int32:
		b = le.AppendUint32(nil, uint32(x))
	case float32:
		b = le.AppendUint32(nil, math.Float32bits(x))
	case bool:
		b = []byte{0}
		if x {
			b[0] = 1
		}
	case string:
		w.str(x)
		return
	case uint64:
		b = le.AppendUint64(nil, x)
	case int64:
		b = le.AppendUint64(nil, uint64(x))
	case float64:
		b = le.AppendUint64(nil, math.Float64bits(x))
	case Array:
		w.u32(uint32(x.Elem))
		w.u64(uint64(x.Len()))
		switch s := x.Values.(type) {
		case []string:
			for _, e := range s {
				w.str(e)
			}
		case []Array:
			for _, e := range s {
				w.value(ValueArray, e)
			}
		case []bool:
			for _, e := range s {
				w.value(ValueBool, e)
			}
		default:
			w.put(encodeFixed(x.Values))
		}
		return
	}
	w.put(b)
}

func encodeFixed(v any) []byte {
	var b []byte
	switch s := v.(type) {
	case []uint8:
		return s
	case []int8:
		for _, x := range s {
			b = append(b, byte(x))
		}
	case []uint16:
		for _, x := range s {
			b = le.AppendUint16(b, x)
		}
	case []int16:
		for _, x := range s {
			b = le.AppendUint16(b, uint16(x))
		}
	case []uint32:
		for _, x := range s {
			b = le.AppendUint32(b, x)
		}
	case []int32:
		for _, x := range s {
			b = le.AppendUint32(b, uint32(x))
		}
	case []float32:
		for _, x := range s {
			b = le.AppendUint32(b, math.Float32bits(x))
		}
	case []uint64:
		for _, x := range s {
			b = le.AppendUint64(b, x)
		}
	case []int64:
		for _, x := range s {
			b = le.AppendUint64(b, uint64(x))
		}
	case []float64:
		for _, x := range s {
			b = le.AppendUint64(b, math.Float64bits(x))
		}
	}
	return b
}

// Write streams tensor data: the bytes of the declared tensors, in
// declaration order, concatenated (without padding). Pieces may be of any
// size and may span tensors.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, w.fail("write after Close")
	}
	if err := w.start(); err != nil {
		return 0, err
	}
	written := 0
	for len(p) > 0 {
		if w.cur >= len(w.tensors) {
			return written, w.fail("%d bytes of tensor data beyond the declared tensors", len(p))
		}
		m := min(uint64(len(p)), w.curLeft)
		w.put(p[:m])
		if w.err != nil {
			return written, w.err
		}
		written += int(m)
		p = p[m:]
		w.curLeft -= m
		if w.curLeft == 0 {
			w.pad()
			w.next()
		}
	}
	return written, w.err
}

// WriteTensor writes the whole data of the next tensor, which must be
// called name (a check on the declaration order) and take exactly
// len(data) bytes. A tensor with no elements needs no call.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if err := w.expect(name, uint64(len(data)), nil); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// WriteTensorF32 writes the next tensor, an F32 tensor called name, from
// float32 values (without an intermediate copy on little-endian hosts).
func (w *Writer) WriteTensorF32(name string, data []float32) error {
	f32 := TypeF32
	if err := w.expect(name, 4*uint64(len(data)), &f32); err != nil {
		return err
	}
	if littleEndian {
		_, err := w.Write(f32Bytes(data))
		return err
	}
	var buf [4096]byte
	for len(data) > 0 {
		k := min(len(data), len(buf)/4)
		for i := range k {
			le.PutUint32(buf[4*i:], math.Float32bits(data[i]))
		}
		if _, err := w.Write(buf[:4*k]); err != nil {
			return err
		}
		data = data[k:]
	}
	return nil
}

// expect checks that the next tensor is name, of size bytes (and of type
// *typ if typ is not nil), and that none of it was written yet.
func (w *Writer) expect(name string, size uint64, typ *GGMLType) error {
	if w.closed {
		return w.fail("write after Close")
	}
	if err := w.start(); err != nil {
		return err
	}
	if size == 0 && w.names[name] {
		for _, t := range w.tensors {
			if t.Name == name && t.Size == 0 {
				return nil // nothing to write
			}
		}
	}
	if w.cur >= len(w.tensors) {
		return w.fail("tensor %q: all declared tensors are written", name)
	}
	t := w.tensors[w.cur]
	switch {
	case t.Name != name:
		return w.fail("tensor %q written when %q is next", name, t.Name)
	case typ != nil && t.Type != *typ:
		return w.fail("tensor %q is %s, not %s", name, t.Type, *typ)
	case w.curLeft != t.Size:
		return w.fail("tensor %q: %d of its bytes were already written", name, t.Size-w.curLeft)
	case size != t.Size:
		return w.fail("tensor %q has %d bytes, want %d (%s %v)", name, size, t.Size, t.Type, t.Dims)
	}
	return nil
}

// Close writes the header if no data was written (a file without tensor
// data), checks that every declared tensor was written in full, and
// flushes. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	if err := w.start(); err != nil {
		return err
	}
	w.closed = true
	if w.cur < len(w.tensors) {
		t := w.tensors[w.cur]
		return w.fail("tensor %q: %d of %d bytes written", t.Name, t.Size-w.curLeft, t.Size)
	}
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("gguf: write: %w", err)
	}
	return w.err
}
