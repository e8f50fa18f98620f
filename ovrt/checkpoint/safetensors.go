package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
)

// maxSafetensorsHeader bounds the JSON header, as the reference
// implementation does.
const maxSafetensorsHeader = 100_000_000

// dtypeSizes are the element sizes of the safetensors dtypes the parser
// knows. Only F32, F16 and BF16 tensors can be loaded as weights; the
// others may appear in a file (buffers, indices) and are skipped.
var dtypeSizes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// TensorInfo locates one tensor of a safetensors file.
type TensorInfo struct {
	DType  string  // safetensors dtype name: "F32", "F16", "BF16", ...
	Shape  []int64 // row-major; empty for a scalar
	Offset int64   // absolute byte offset in the file
	Size   int64   // bytes: product(Shape) * element size
}

// Elements returns the number of values in the tensor.
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// ParseSafetensorsHeader parses and validates the header of a safetensors
// file of fileSize bytes whose beginning is b (b must hold at least the
// 8-byte length and the JSON header; it may be the whole file). The checks
// are those of the reference implementation: the header length is at most
// 100 MB and inside the file, the JSON is one object (no duplicate keys,
// nothing after it) whose entries other than "__metadata__" are tensors
// with a known dtype, a shape of non-negative dimensions and data_offsets
// [begin, end] whose span equals the shape's size; the tensors' byte
// ranges tile the data area exactly, without gaps or overlaps. Errors wrap
// ErrFormat (ErrTruncated when the file ends early, ErrUnsupported for an
// unknown dtype) and name the offending tensor; callers prefix the file
// name.
func ParseSafetensorsHeader(b []byte, fileSize int64) (map[string]TensorInfo, error) {
	return parseSafetensors("", b, fileSize)
}

// parseSafetensors is ParseSafetensorsHeader with the file's name (if not
// empty) in its errors.
func parseSafetensors(file string, b []byte, fileSize int64) (map[string]TensorInfo, error) {
	where := ""
	if file != "" {
		where = file + ": "
	}
	fail := func(sentinel error, format string, args ...any) error {
		return fmt.Errorf("%w: %s"+format, append([]any{sentinel, where}, args...)...)
	}
	if fileSize < 8 || len(b) < 8 {
		return nil, fail(ErrTruncated, "%d bytes, too short for the 8-byte safetensors header length", min(fileSize, int64(len(b))))
	}
	n64 := binary.LittleEndian.Uint64(b)
	if n64 > maxSafetensorsHeader {
		return nil, fail(ErrFormat, "safetensors header length %d exceeds the %d-byte limit", n64, maxSafetensorsHeader)
	}
	n := int64(n64)
	if 8+n > fileSize {
		return nil, fail(ErrTruncated, "safetensors header length %d runs past the end of the %d-byte file", n, fileSize)
	}
	if 8+n > int64(len(b)) {
		return nil, fail(ErrTruncated, "safetensors header length %d runs past the %d bytes given", n, len(b))
	}
	hdr := b[8 : 8+n]
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, fail(ErrFormat, "safetensors header does not start with '{'")
	}
	dataStart, dataLen := 8+n, fileSize-8-n

	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.DisallowUnknownFields()
	jsonErr := func(err error) error {
		return fail(ErrFormat, "safetensors header (offset %d in the JSON): %v", dec.InputOffset(), err)
	}
	if _, err := dec.Token(); err != nil { // '{', checked above
		return nil, jsonErr(err)
	}
	tensors := make(map[string]TensorInfo)
	seenMeta := false
	type span struct {
		name       string
		begin, end int64
	}
	var spans []span
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, jsonErr(fmt.Errorf("key %v is not a string", tok))
		}
		if _, dup := tensors[name]; dup || (name == "__metadata__" && seenMeta) {
			return nil, fail(ErrFormat, "safetensors header: duplicate key %q", name)
		}
		if name == "__metadata__" {
			seenMeta = true
			var meta map[string]string
			if err := dec.Decode(&meta); err != nil {
				return nil, fail(ErrFormat, "safetensors header: __metadata__ is not a string-to-string map: %v", err)
			}
			continue
		}
		var raw struct {
			DType       *string  `json:"dtype"`
			Shape       *[]int64 `json:"shape"`
			DataOffsets *[]int64 `json:"data_offsets"`
		}
		if err := dec.Decode(&raw); err != nil {
			return nil, fail(ErrFormat, "safetensors header: tensor %q: %v", name, err)
		}
		bad := func(format string, args ...any) error {
			return fail(ErrFormat, "safetensors header: tensor %q: "+format, append([]any{name}, args...)...)
		}
		switch {
		case raw.DType == nil:
			return nil, bad("no dtype")
		case raw.Shape == nil:
			return nil, bad("no shape")
		case raw.DataOffsets == nil:
			return nil, bad("no data_offsets")
		case len(*raw.DataOffsets) != 2:
			return nil, bad("data_offsets %v is not [begin, end]", *raw.DataOffsets)
		}
		size, known := dtypeSizes[*raw.DType]
		if !known {
			return nil, fail(ErrUnsupported, "safetensors header: tensor %q has dtype %q", name, *raw.DType)
		}
		shape := *raw.Shape
		begin, end := (*raw.DataOffsets)[0], (*raw.DataOffsets)[1]
		switch {
		case begin < 0 || end < begin:
			return nil, bad("data_offsets [%d, %d] are not an ascending pair", begin, end)
		case end > dataLen:
			return nil, fail(ErrTruncated, "safetensors header: tensor %q: data_offsets [%d, %d] run past the %d-byte data area", name, begin, end, dataLen)
		}
		// The shape's size must equal the span. Multiply in 128 bits so
		// that a huge shape cannot overflow into a match.
		nbytes, elems := end-begin, uint64(1)
		for _, d := range shape {
			if d < 0 {
				return nil, bad("shape %v has a negative dimension", shape)
			}
			if d == 0 {
				elems = 0
			}
		}
		overflow := false
		mul := func(x int64) {
			hi, lo := bits.Mul64(elems, uint64(x))
			overflow = overflow || hi != 0 || lo > math.MaxInt64
			elems = lo
		}
		for _, d := range shape {
			mul(d)
		}
		if mul(size); overflow { // impossible with a zero dimension: elems stays 0
			return nil, bad("shape %v of %s is larger than 2^63 bytes (data_offsets [%d, %d])", shape, *raw.DType, begin, end)
		}
		if int64(elems) != nbytes {
			return nil, bad("shape %v of %s is %d bytes, data_offsets [%d, %d] span %d",
				shape, *raw.DType, elems, begin, end, nbytes)
		}
		tensors[name] = TensorInfo{DType: *raw.DType, Shape: shape, Offset: dataStart + begin, Size: end - begin}
		spans = append(spans, span{name, begin, end})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, jsonErr(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the header object")
		}
		return nil, jsonErr(err)
	}

	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var at int64
	prev := "the data area's start"
	for _, s := range spans {
		switch {
		case s.begin > at:
			return nil, fail(ErrFormat, "safetensors header: %d unused bytes between %s and tensor %q at data offset %d", s.begin-at, prev, s.name, s.begin)
		case s.begin < at:
			return nil, fail(ErrFormat, "safetensors header: tensor %q at data offset %d overlaps %s", s.name, s.begin, prev)
		}
		at, prev = s.end, fmt.Sprintf("tensor %q", s.name)
	}
	if at != dataLen {
		return nil, fail(ErrTrailingData, "the tensors cover %d bytes of the %d-byte data area", at, dataLen)
	}
	return tensors, nil
}
