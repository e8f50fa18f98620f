package gguf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
)

// Format limits. The decoder enforces them before allocating anything.
const (
	// DefaultAlignment is the alignment of tensor data when the file has
	// no general.alignment key.
	DefaultAlignment = 32
	// MaxDims is the most dimensions a tensor may have (GGML_MAX_DIMS).
	MaxDims = 4
	// MaxTensorName is the longest tensor name llama.cpp accepts, in bytes
	// (GGML_MAX_NAME - 1).
	MaxTensorName = 63
	// MaxKeyLen is the longest metadata key the GGUF specification allows.
	MaxKeyLen = 65535
	// MaxArrayDepth bounds the nesting of arrays of arrays.
	MaxArrayDepth = 8
)

const magic = "GGUF"

// KV is one metadata key/value pair. Value holds, according to Type:
// uint8, int8, uint16, int16, uint32, int32, float32, bool, string,
// uint64, int64, float64, or Array.
type KV struct {
	Key   string
	Type  ValueType
	Value any
}

// Array is a metadata array. Values is a slice of the Go type matching
// Elem: []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32,
// []bool, []string, []uint64, []int64, []float64, or []Array for an array
// of arrays.
type Array struct {
	Elem   ValueType
	Values any
}

// Len returns the number of elements of a.
func (a Array) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	case []Array:
		return len(v)
	}
	return 0
}

// TensorInfo describes one tensor. Dims are in GGUF order, innermost
// (fastest-varying) first: a [rows, cols] row-major matrix has Dims
// [cols, rows]. Offset is absolute (from the start of the file) and Size is
// the byte length of the data.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64
	Size   uint64
}

// Elements returns the number of elements of the tensor.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d // Parse checked the product does not overflow
	}
	return n
}

// File is a parsed GGUF file: its metadata and tensor directory. Tensor data
// is read on demand from the underlying reader (or sliced from memory, for
// ParseBytes).
type File struct {
	Version    uint32
	KVs        []KV         // in file order
	Tensors    []TensorInfo // in file order
	Alignment  uint64       // general.alignment, or DefaultAlignment
	DataOffset int64        // absolute offset of the tensor data section
	Size       int64        // file size

	r       io.ReaderAt
	mem     []byte // the whole file, when parsed from memory
	closer  io.Closer
	kvs     map[string]int
	tensors map[string]int
}

// Open opens and parses the GGUF file at path. The file stays open to read
// tensor data until Close.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, err
	}
	f, err := Parse(fd, st.Size())
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	f.closer = fd
	return f, nil
}

// Close releases the file Open opened. It is a no-op for a File from Parse
// or ParseBytes.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c.Close()
}

// ParseBytes parses a GGUF file held in memory (read or memory-mapped).
// Tensor data accessors then return slices of b without copying.
func ParseBytes(b []byte) (*File, error) {
	f, err := Parse(byteReaderAt(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	f.mem = b
	return f, nil
}

type byteReaderAt []byte

func (b byteReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Parse decodes the header, metadata and tensor directory of the GGUF file
// (version 3 or 2) of the given size that r reads. It reads no tensor data
// but checks that every tensor's data lies inside the file.
//
// Parse is meant for untrusted input: every count and length is checked
// against the bytes left in the file before anything is allocated, so a
// hostile file gets an error, never a panic or a huge allocation.
func Parse(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative file size %d", ErrMalformed, size)
	}
	d := &decoder{r: r, size: size}
	f := &File{r: r, Size: size, Alignment: DefaultAlignment}
	if err := f.parse(d); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) parse(d *decoder) error {
	// Magic and version.
	m, err := d.take(4)
	if err != nil {
		n := min(int(d.size), 4)
		head := make([]byte, n)
		if rn, _ := d.r.ReadAt(head, 0); rn == n && string(head) == magic[:n] {
			return err
		}
		return fmt.Errorf("%w: %d-byte file", ErrNotGGUF, d.size)
	}
	if string(m) != magic {
		return fmt.Errorf("%w: magic %q, want %q", ErrNotGGUF, m, magic)
	}
	ver, err := d.u32()
	if err != nil {
		return ctx(err, "the version")
	}
	switch {
	case ver == 2 || ver == 3:
	case ver == 1:
		return fmt.Errorf("%w: version 1 (re-convert the model with a current llama.cpp)", ErrVersion)
	case ver&0xFFFF == 0:
		return fmt.Errorf("%w: version %#x (a big-endian file?)", ErrVersion, ver)
	default:
		return fmt.Errorf("%w: version %d (want 2 or 3)", ErrVersion, ver)
	}
	f.Version = ver
	nTensors, err := d.u64()
	if err != nil {
		return ctx(err, "the tensor count")
	}
	nKV, err := d.u64()
	if err != nil {
		return ctx(err, "the metadata count")
	}
	// Smallest encodings: a KV is a 1-byte key (8+1), a type (4) and a
	// 1-byte value; a tensor info is a 1-byte name (8+1), a dimension
	// count (4), a type (4) and an offset (8).
	const minKV, minTensor = 14, 25
	left := d.left()
	if nKV > left/minKV {
		return fmt.Errorf("%w: %d metadata entries cannot fit in the %d bytes left after the header", ErrMalformed, nKV, left)
	}
	if nTensors > left/minTensor || nKV*minKV+nTensors*minTensor > left {
		return fmt.Errorf("%w: %d tensors and %d metadata entries cannot fit in the %d bytes left after the header", ErrMalformed, nTensors, nKV, left)
	}

	// Metadata.
	f.KVs = make([]KV, 0, min(nKV, 1024))
	f.kvs = make(map[string]int, min(nKV, 1024))
	for i := range nKV {
		at := d.off
		key, err := d.str(MaxKeyLen)
		if err != nil {
			return ctx(err, "the key of metadata entry %d at offset %d", i, at)
		}
		if key == "" {
			return fmt.Errorf("%w: metadata entry %d at offset %d has an empty key", ErrMalformed, i, at)
		}
		if _, dup := f.kvs[key]; dup {
			return fmt.Errorf("%w: duplicate metadata key %q at offset %d", ErrMalformed, key, at)
		}
		t, err := d.u32()
		if err != nil {
			return ctx(err, "the type of metadata key %q", key)
		}
		v, err := d.value(ValueType(t), 0)
		if err != nil {
			return ctx(err, "the value of metadata key %q", key)
		}
		f.kvs[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Type: ValueType(t), Value: v})
	}
	if kv, ok := f.Lookup("general.alignment"); ok {
		a, isU32 := kv.Value.(uint32)
		if !isU32 {
			return fmt.Errorf("%w: general.alignment is a %s, want uint32", ErrMalformed, kv.describe())
		}
		if a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("%w: general.alignment %d is not a power of two", ErrMalformed, a)
		}
		f.Alignment = uint64(a)
	}

	// Tensor directory.
	f.Tensors = make([]TensorInfo, 0, min(nTensors, 4096))
	f.tensors = make(map[string]int, min(nTensors, 4096))
	for i := range nTensors {
		at := d.off
		ti, err := f.tensorInfo(d, i)
		if err != nil {
			return ctx(err, "tensor info %d at offset %d", i, at)
		}
		if _, dup := f.tensors[ti.Name]; dup {
			return fmt.Errorf("%w: duplicate tensor name %q at offset %d", ErrMalformed, ti.Name, at)
		}
		f.tensors[ti.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	data, ok := alignUp(uint64(d.off), f.Alignment)
	if !ok || data > math.MaxInt64 {
		return fmt.Errorf("%w: data section offset overflows", ErrMalformed)
	}
	f.DataOffset = int64(data)

	// Every tensor's data must lie in the file, without overlap.
	for i := range f.Tensors {
		t := &f.Tensors[i]
		abs, c := bits.Add64(t.Offset, data, 0)
		end, c2 := bits.Add64(abs, t.Size, 0)
		if c != 0 || c2 != 0 {
			return fmt.Errorf("%w: tensor %q: offset %d + size %d overflows", ErrMalformed, t.Name, t.Offset, t.Size)
		}
		if end > uint64(d.size) {
			return fmt.Errorf("%w: tensor %q data [%d, %d) extends past the end of the %d-byte file", ErrTruncated, t.Name, abs, end, d.size)
		}
		t.Offset = abs
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return f.Tensors[order[a]].Offset < f.Tensors[order[b]].Offset })
	for k := 1; k < len(order); k++ {
		p, t := &f.Tensors[order[k-1]], &f.Tensors[order[k]]
		if p.Size > 0 && t.Size > 0 && t.Offset < p.Offset+p.Size {
			return fmt.Errorf("%w: tensors %q [%d, %d) and %q [%d, %d) overlap", ErrMalformed,
				p.Name, p.Offset, p.Offset+p.Size, t.Name, t.Offset, t.Offset+t.Size)
		}
	}
	return nil
}

func (f *File) tensorInfo(d *decoder, i uint64) (TensorInfo, error) {
	var ti TensorInfo
	name, err := d.str(MaxKeyLen)
	if err != nil {
		return ti, ctx(err, "the name")
	}
	if name == "" {
		return ti, fmt.Errorf("%w: empty tensor name", ErrMalformed)
	}
	if len(name) > MaxTensorName {
		return ti, fmt.Errorf("%w: tensor name %q is %d bytes, longer than %d", ErrMalformed, name, len(name), MaxTensorName)
	}
	ti.Name = name
	nd, err := d.u32()
	if err != nil {
		return ti, ctx(err, "tensor %q dimension count", name)
	}
	if nd > MaxDims {
		return ti, fmt.Errorf("%w: tensor %q has %d dimensions, more than %d", ErrMalformed, name, nd, MaxDims)
	}
	ti.Dims = make([]uint64, nd)
	elems := uint64(1)
	overflow := false
	for j := range ti.Dims {
		v, err := d.u64()
		if err != nil {
			return ti, ctx(err, "tensor %q dimension %d", name, j)
		}
		if v > math.MaxInt64 {
			return ti, fmt.Errorf("%w: tensor %q dimension %d is %d (negative as int64)", ErrMalformed, name, j, v)
		}
		ti.Dims[j] = v
		hi, lo := bits.Mul64(elems, v)
		if hi != 0 || lo > math.MaxInt64 {
			overflow = true
		}
		elems = lo
	}
	if overflow {
		return ti, fmt.Errorf("%w: tensor %q shape %v overflows int64", ErrMalformed, name, ti.Dims)
	}
	t, err := d.u32()
	if err != nil {
		return ti, ctx(err, "tensor %q type", name)
	}
	ti.Type = GGMLType(t)
	tr, known := traits[ti.Type]
	if !known {
		return ti, fmt.Errorf("%w: tensor %q has type %d", ErrUnknownType, name, t)
	}
	if len(ti.Dims) > 0 && ti.Dims[0]%tr.block != 0 {
		return ti, fmt.Errorf("%w: tensor %q of type %s has rows of %d elements, not a multiple of its block size %d",
			ErrMalformed, name, ti.Type, ti.Dims[0], tr.block)
	}
	hi, sz := bits.Mul64(elems/tr.block, tr.size)
	if hi != 0 || sz > math.MaxInt64 {
		return ti, fmt.Errorf("%w: tensor %q byte size overflows", ErrMalformed, name)
	}
	ti.Size = sz
	off, err := d.u64()
	if err != nil {
		return ti, ctx(err, "tensor %q offset", name)
	}
	if off%f.Alignment != 0 {
		return ti, fmt.Errorf("%w: tensor %q data offset %d is not a multiple of the alignment %d", ErrMalformed, name, off, f.Alignment)
	}
	ti.Offset = off
	return ti, nil
}

func alignUp(n, a uint64) (uint64, bool) {
	r, c := bits.Add64(n, a-1, 0)
	return r &^ (a - 1), c == 0
}

// ctx adds context to an error, keeping the sentinel (and so the "gguf: "
// prefix) first.
func ctx(err error, format string, args ...any) error {
	return fmt.Errorf("%w; reading %s", err, fmt.Sprintf(format, args...))
}

// decoder reads little-endian values from an io.ReaderAt through a window,
// refusing to read past size.
type decoder struct {
	r    io.ReaderAt
	size int64
	off  int64 // offset of the next byte
	win  []byte
	wOff int64 // file offset of win[0]
}

const window = 64 << 10

func (d *decoder) left() uint64 { return uint64(d.size - d.off) }

// take returns the next n bytes (n <= window), valid until the next call.
func (d *decoder) take(n int) ([]byte, error) {
	if uint64(n) > d.left() {
		return nil, fmt.Errorf("%w: %d bytes needed at offset %d, %d left", ErrTruncated, n, d.off, d.left())
	}
	if d.off < d.wOff || d.off+int64(n) > d.wOff+int64(len(d.win)) {
		m := int(min(int64(window), d.size-d.off))
		if cap(d.win) < m {
			d.win = make([]byte, m)
		}
		d.win = d.win[:m]
		if err := d.readAt(d.win, d.off); err != nil {
			return nil, err
		}
		d.wOff = d.off
	}
	i := int(d.off - d.wOff)
	d.off += int64(n)
	return d.win[i : i+n], nil
}

func (d *decoder) readAt(p []byte, off int64) error {
	n, err := d.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: short read of %d bytes at offset %d (%d read)", ErrTruncated, len(p), off, n)
	}
	return fmt.Errorf("gguf: reading offset %d: %w", off, err)
}

func (d *decoder) u8() (uint8, error) {
	b, err := d.take(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (d *decoder) u16() (uint16, error) {
	b, err := d.take(2)
	if err != nil {
		return 0, err
	}
	return le.Uint16(b), nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return le.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.take(8)
	if err != nil {
		return 0, err
	}
	return le.Uint64(b), nil
}

// str reads a GGUF string (uint64 length, bytes) of at most max bytes.
func (d *decoder) str(max uint64) (string, error) {
	at := d.off
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > d.left() {
		return "", fmt.Errorf("%w: string at offset %d has length %d, more than the %d bytes left", ErrMalformed, at, n, d.left())
	}
	if n > max {
		return "", fmt.Errorf("%w: string at offset %d has length %d, more than %d", ErrMalformed, at, n, max)
	}
	if n <= window {
		b, err := d.take(int(n))
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	b := make([]byte, n) // n <= bytes left in the file
	if err := d.readAt(b, d.off); err != nil {
		return "", err
	}
	d.off += int64(n)
	return string(b), nil
}

// value reads one value of type t; depth counts enclosing arrays.
func (d *decoder) value(t ValueType, depth int) (any, error) {
	switch t {
	case ValueUint8:
		return d.u8()
	case ValueInt8:
		v, err := d.u8()
		return int8(v), err
	case ValueUint16:
		return d.u16()
	case ValueInt16:
		v, err := d.u16()
		return int16(v), err
	case ValueUint32:
		return d.u32()
	case ValueInt32:
		v, err := d.u32()
		return int32(v), err
	case ValueFloat32:
		v, err := d.u32()
		return math.Float32frombits(v), err
	case ValueBool:
		at := d.off
		v, err := d.u8()
		if err != nil {
			return false, err
		}
		if v > 1 {
			return false, fmt.Errorf("%w: bool at offset %d has byte value %d", ErrMalformed, at, v)
		}
		return v == 1, nil
	case ValueString:
		return d.str(math.MaxUint64)
	case ValueUint64:
		return d.u64()
	case ValueInt64:
		v, err := d.u64()
		return int64(v), err
	case ValueFloat64:
		v, err := d.u64()
		return math.Float64frombits(v), err
	case ValueArray:
		return d.array(depth + 1)
	}
	return nil, fmt.Errorf("%w: unknown value type %d at offset %d", ErrMalformed, uint32(t), d.off-4)
}

func (d *decoder) array(depth int) (Array, error) {
	at := d.off
	if depth > MaxArrayDepth {
		return Array{}, fmt.Errorf("%w: arrays nested deeper than %d at offset %d", ErrMalformed, MaxArrayDepth, at)
	}
	et, err := d.u32()
	if err != nil {
		return Array{}, err
	}
	elem := ValueType(et)
	if !elem.valid() {
		return Array{}, fmt.Errorf("%w: array at offset %d has unknown element type %d", ErrMalformed, at, et)
	}
	n, err := d.u64()
	if err != nil {
		return Array{}, err
	}
	if n > d.left()/elem.minSize() {
		return Array{}, fmt.Errorf("%w: array at offset %d has %d %s elements, more than the %d bytes left can hold",
			ErrMalformed, at, n, elem, d.left())
	}
	a := Array{Elem: elem}
	switch elem {
	case ValueUint8:
		a.Values, err = readN(d, n, (*decoder).u8)
	case ValueInt8:
		a.Values, err = readN(d, n, func(d *decoder) (int8, error) { v, err := d.u8(); return int8(v), err })
	case ValueUint16:
		a.Values, err = readN(d, n, (*decoder).u16)
	case ValueInt16:
		a.Values, err = readN(d, n, func(d *decoder) (int16, error) { v, err := d.u16(); return int16(v), err })
	case ValueUint32:
		a.Values, err = readN(d, n, (*decoder).u32)
	case ValueInt32:
		a.Values, err = readN(d, n, func(d *decoder) (int32, error) { v, err := d.u32(); return int32(v), err })
	case ValueFloat32:
		a.Values, err = readN(d, n, func(d *decoder) (float32, error) { v, err := d.u32(); return math.Float32frombits(v), err })
	case ValueBool:
		a.Values, err = readN(d, n, func(d *decoder) (bool, error) { v, err := d.value(ValueBool, depth); return v.(bool), err })
	case ValueString:
		a.Values, err = readN(d, n, func(d *decoder) (string, error) { return d.str(math.MaxUint64) })
	case ValueUint64:
		a.Values, err = readN(d, n, (*decoder).u64)
	case ValueInt64:
		a.Values, err = readN(d, n, func(d *decoder) (int64, error) { v, err := d.u64(); return int64(v), err })
	case ValueFloat64:
		a.Values, err = readN(d, n, func(d *decoder) (float64, error) { v, err := d.u64(); return math.Float64frombits(v), err })
	case ValueArray:
		a.Values, err = readN(d, n, func(d *decoder) (Array, error) { return d.array(depth + 1) })
	}
	if err != nil {
		return Array{}, ctx(err, "array at offset %d", at)
	}
	return a, nil
}

// readN reads n values; the slice grows as values are actually read, so a
// length that passed the bytes-left check still cannot allocate ahead of
// the data.
func readN[T any](d *decoder, n uint64, read func(*decoder) (T, error)) ([]T, error) {
	s := make([]T, 0, min(n, 1<<16))
	for i := uint64(0); i < n; i++ {
		v, err := read(d)
		if err != nil {
			return nil, ctx(err, "element %d", i)
		}
		s = append(s, v)
	}
	return s, nil
}
