//go:build !unix

package mmapfile

import (
	"os"
	"unsafe"
)

func mapFile(f *os.File, size int) ([]byte, bool, error) {
	data, err := readAll(f, size)
	return data, false, err
}

func unmap([]byte) error { return nil }

func anon(size int) ([]byte, bool, error) {
	words := make([]uint64, (size+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), size), false, nil
}
