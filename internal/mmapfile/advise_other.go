//go:build !linux

package mmapfile

func dontNeed([]byte) {}

func hugePages([]byte) {}
