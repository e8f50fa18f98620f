package mmapfile

import "syscall"

func dontNeed(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }

// hugePages asks for transparent huge pages on b: weights are read
// sequentially every token, and 4 KiB pages cost TLB misses.
func hugePages(b []byte) { _ = syscall.Madvise(b, 14 /* MADV_HUGEPAGE */) }
