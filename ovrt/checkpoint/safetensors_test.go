package checkpoint

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

func TestParseSafetensorsHeader(t *testing.T) {
	b := safetensorsBytes([]stTensor{
		{"a", "F32", []int64{2, 3}, make([]byte, 24)},
		{"b", "BF16", []int64{5}, make([]byte, 10)},
		{"scalar", "I64", []int64{}, make([]byte, 8)},
		{"empty", "F16", []int64{0, 7}, nil},
		{"c", "F16", []int64{1, 1, 3}, make([]byte, 6)},
	}, map[string]string{"format": "pt"})
	ts, err := ParseSafetensorsHeader(b, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 5 {
		t.Fatalf("%d tensors: %v", len(ts), ts)
	}
	data := int64(8 + binary.LittleEndian.Uint64(b))
	want := map[string]TensorInfo{
		"a":      {"F32", []int64{2, 3}, data, 24},
		"b":      {"BF16", []int64{5}, data + 24, 10},
		"scalar": {"I64", []int64{}, data + 34, 8},
		"empty":  {"F16", []int64{0, 7}, data + 42, 0},
		"c":      {"F16", []int64{1, 1, 3}, data + 42, 6},
	}
	for name, w := range want {
		g := ts[name]
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || g.Offset != w.Offset || g.Size != w.Size {
			t.Errorf("%s = %+v, want %+v", name, g, w)
		}
	}
	if n := ts["a"].Elements(); n != 6 {
		t.Errorf("a has %d elements", n)
	}
	if n := ts["scalar"].Elements(); n != 1 {
		t.Errorf("scalar has %d elements", n)
	}
	// Only the header need be passed.
	if _, err := ParseSafetensorsHeader(b[:data], int64(len(b))); err != nil {
		t.Errorf("header-only buffer: %v", err)
	}
	// The real oracle file parses.
	oracle := safetensorsBytes(nil, nil)
	if _, err := ParseSafetensorsHeader(oracle, int64(len(oracle))); err != nil {
		t.Errorf("empty file: %v", err)
	}
}

func TestParseSafetensorsHeaderErrors(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	tests := []struct {
		name    string
		file    []byte
		target  error
		mention string
	}{
		{"empty", nil, ErrTruncated, "0 bytes"},
		{"short length", []byte{1, 2, 3}, ErrTruncated, "3 bytes"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<40), ErrFormat, "1099511627776"},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 100), ErrTruncated, "header length 100"},
		{"not an object", rawSafetensors(`["a"]   `, nil), ErrFormat, "'{'"},
		{"empty header", rawSafetensors(``, nil), ErrFormat, "'{'"},
		{"invalid JSON", rawSafetensors(`{"a":}`, nil), ErrFormat, "invalid character"},
		{"unterminated", rawSafetensors(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}`, make([]byte, 4)), ErrFormat, "JSON"},
		{"garbage after JSON", rawSafetensors(`{} x`, nil), ErrFormat, "JSON"},
		{"second object", rawSafetensors(`{}{}`, nil), ErrFormat, "after the header"},
		{"duplicate tensor", rawSafetensors(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), ErrFormat, `duplicate key "a"`},
		{"duplicate metadata", rawSafetensors(`{"__metadata__":{},"__metadata__":{}}`, nil), ErrFormat, "duplicate"},
		{"bad metadata", rawSafetensors(`{"__metadata__":{"x":1}}`, nil), ErrFormat, "__metadata__"},
		{"unknown dtype", rawSafetensors(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrUnsupported, `"F4"`},
		{"unknown field", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, make([]byte, 8)), ErrFormat, `"a"`},
		{"tensor not an object", rawSafetensors(`{"a":[1]}`, nil), ErrFormat, `"a"`},
		{"no dtype", rawSafetensors(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "no dtype"},
		{"no shape", rawSafetensors(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "no shape"},
		{"null shape", rawSafetensors(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "no shape"},
		{"no offsets", rawSafetensors(`{"a":{"dtype":"F32","shape":[2]}}`, make([]byte, 8)), ErrFormat, "no data_offsets"},
		{"three offsets", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, make([]byte, 8)), ErrFormat, "[0 4 8]"},
		{"fractional offset", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.5]}}`, make([]byte, 8)), ErrFormat, `"a"`},
		{"negative dimension", rawSafetensors(`{"a":{"dtype":"F32","shape":[-2,-1],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "negative"},
		{"descending offsets", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, make([]byte, 8)), ErrFormat, "[8, 0]"},
		{"negative offset", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, make([]byte, 8)), ErrFormat, "[-8, 0]"},
		{"offsets past data", rawSafetensors(ok, make([]byte, 7)), ErrTruncated, "7-byte data area"},
		{"shape mismatch", rawSafetensors(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "12 bytes"},
		{"dtype mismatch", rawSafetensors(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "4 bytes"},
		{"overflowing shape", rawSafetensors(`{"a":{"dtype":"F64","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrFormat, "larger than 2^63"},
		{"overflow to match", rawSafetensors(`{"a":{"dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,0]}}`, nil), ErrFormat, "larger than 2^63"},
		{"gap", rawSafetensors(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), ErrFormat, "4 unused bytes"},
		{"overlap", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), ErrFormat, "overlaps"},
		{"trailing data", rawSafetensors(ok, make([]byte, 12)), ErrTrailingData, "8 bytes of the 12-byte"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSafetensorsHeader(tc.file, int64(len(tc.file)))
			wantErr(t, err, []error{tc.target}, tc.mention)
		})
	}
	t.Run("file name", func(t *testing.T) {
		f := rawSafetensors(ok, make([]byte, 4))
		_, err := parseSafetensors("/x/model.safetensors", f, int64(len(f)))
		wantErr(t, err, []error{ErrTruncated}, "/x/model.safetensors: ")
	})
	t.Run("buffer shorter than header", func(t *testing.T) {
		f := rawSafetensors(ok, make([]byte, 8))
		_, err := ParseSafetensorsHeader(f[:20], int64(len(f)))
		wantErr(t, err, []error{ErrTruncated}, "bytes given")
	})
	t.Run("header limit", func(t *testing.T) {
		b := binary.LittleEndian.AppendUint64(nil, maxSafetensorsHeader+1)
		_, err := ParseSafetensorsHeader(b, 1<<40)
		wantErr(t, err, []error{ErrFormat}, "limit")
		if strings.Contains(err.Error(), "truncated") {
			t.Error(err)
		}
	})
}
