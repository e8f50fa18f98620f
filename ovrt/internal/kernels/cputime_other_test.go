//go:build !linux

package kernels

func threadCPUTime() (int64, bool) { return 0, false }
