package gguf

import (
	"fmt"
	"math"
	"strconv"
)

// Lookup returns the metadata entry for key.
func (f *File) Lookup(key string) (KV, bool) {
	i, ok := f.kvs[key]
	if !ok {
		return KV{}, false
	}
	return f.KVs[i], true
}

// Has reports whether the metadata has key.
func (f *File) Has(key string) bool { _, ok := f.kvs[key]; return ok }

func (kv KV) describe() string {
	if a, ok := kv.Value.(Array); ok {
		return "array of " + a.Elem.String()
	}
	return kv.Type.String()
}

func (f *File) get(key string) (KV, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return KV{}, fmt.Errorf("%w: %q", ErrKeyNotFound, key)
	}
	return kv, nil
}

func wrongType(kv KV, want string) error {
	return fmt.Errorf("%w: %q is a %s, want %s", ErrWrongType, kv.Key, kv.describe(), want)
}

// String returns the string value of key.
func (f *File) String(key string) (string, error) {
	kv, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := kv.Value.(string)
	if !ok {
		return "", wrongType(kv, "string")
	}
	return s, nil
}

// Bool returns the bool value of key.
func (f *File) Bool(key string) (bool, error) {
	kv, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := kv.Value.(bool)
	if !ok {
		return false, wrongType(kv, "bool")
	}
	return b, nil
}

// asInt converts an integer value of any width to int64 (ok false for
// non-integers and for uint64 values above MaxInt64).
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Uint returns the value of key, an integer of any width and signedness
// that is not negative.
func (f *File) Uint(key string) (uint64, error) {
	kv, err := f.get(key)
	if err != nil {
		return 0, err
	}
	if u, ok := kv.Value.(uint64); ok {
		return u, nil
	}
	i, ok := asInt(kv.Value)
	if !ok {
		return 0, wrongType(kv, "an unsigned integer")
	}
	if i < 0 {
		return 0, fmt.Errorf("%w: %q is %d, want an unsigned integer", ErrWrongType, key, i)
	}
	return uint64(i), nil
}

// Int returns the value of key, an integer of any width that fits int64.
func (f *File) Int(key string) (int64, error) {
	kv, err := f.get(key)
	if err != nil {
		return 0, err
	}
	i, ok := asInt(kv.Value)
	if !ok {
		return 0, wrongType(kv, "an integer")
	}
	return i, nil
}

// Float returns the value of key, a float32 or float64. A float32 becomes
// the float64 of its shortest decimal representation, so a value written
// from the float64 1e-5 reads back as exactly 1e-5.
func (f *File) Float(key string) (float64, error) {
	kv, err := f.get(key)
	if err != nil {
		return 0, err
	}
	switch x := kv.Value.(type) {
	case float32:
		return widen(x), nil
	case float64:
		return x, nil
	}
	return 0, wrongType(kv, "a float")
}

// widen converts x to the float64 nearest its shortest decimal form.
func widen(x float32) float64 {
	if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
		return float64(x)
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	if err != nil {
		return float64(x)
	}
	return v
}

// Array returns the array value of key.
func (f *File) Array(key string) (Array, error) {
	kv, err := f.get(key)
	if err != nil {
		return Array{}, err
	}
	a, ok := kv.Value.(Array)
	if !ok {
		return Array{}, wrongType(kv, "an array")
	}
	return a, nil
}

// Strings returns the array of strings of key. The slice is shared with
// the File.
func (f *File) Strings(key string) ([]string, error) {
	a, err := f.Array(key)
	if err != nil {
		return nil, err
	}
	s, ok := a.Values.([]string)
	if !ok {
		kv, _ := f.Lookup(key)
		return nil, wrongType(kv, "an array of string")
	}
	return s, nil
}

// Floats returns the array of float32 or float64 of key, as float64
// (exactly: a float32 element converts without rounding).
func (f *File) Floats(key string) ([]float64, error) {
	a, err := f.Array(key)
	if err != nil {
		return nil, err
	}
	switch v := a.Values.(type) {
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	case []float64:
		return append([]float64(nil), v...), nil
	}
	kv, _ := f.Lookup(key)
	return nil, wrongType(kv, "an array of float")
}

// Ints returns the array of integers (of any width) of key, as int64. A
// uint64 element above MaxInt64 is an ErrWrongType.
func (f *File) Ints(key string) ([]int64, error) {
	a, err := f.Array(key)
	if err != nil {
		return nil, err
	}
	kv, _ := f.Lookup(key)
	switch v := a.Values.(type) {
	case []uint8:
		return ints(v), nil
	case []int8:
		return ints(v), nil
	case []uint16:
		return ints(v), nil
	case []int16:
		return ints(v), nil
	case []uint32:
		return ints(v), nil
	case []int32:
		return ints(v), nil
	case []int64:
		return append([]int64(nil), v...), nil
	case []uint64:
		out := make([]int64, len(v))
		for i, x := range v {
			if x > math.MaxInt64 {
				return nil, fmt.Errorf("%w: %q element %d is %d, beyond int64", ErrWrongType, key, i, x)
			}
			out[i] = int64(x)
		}
		return out, nil
	}
	return nil, wrongType(kv, "an array of integer")
}

func ints[T uint8 | int8 | uint16 | int16 | uint32 | int32](v []T) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}
