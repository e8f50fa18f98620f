//go:build !unix

package mmapfile

import "os"

func mapFile(f *os.File, size int) ([]byte, bool, error) {
	data, err := readAll(f, size)
	return data, false, err
}

func unmap([]byte) error { return nil }
