//go:build unix

package mmapfile

import (
	"os"
	"syscall"
)

func mapFile(f *os.File, size int) ([]byte, bool, error) {
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		// Some file systems cannot be mapped; read the file instead.
		if err == syscall.ENODEV || err == syscall.EINVAL {
			data, rerr := readAll(f, size)
			return data, false, rerr
		}
		return nil, false, err
	}
	return data, true, nil
}

func unmap(b []byte) error { return syscall.Munmap(b) }

func anon(size int) ([]byte, bool, error) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}
