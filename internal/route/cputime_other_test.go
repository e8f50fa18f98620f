//go:build !linux

package route

func threadCPU() (int64, bool) { return 0, false }
