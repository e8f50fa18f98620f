package route

import (
	"syscall"
	"unsafe"
)

// threadCPU returns the CPU time of the calling thread in nanoseconds, so
// that benchmarks on a busy machine can report time spent computing apart
// from time spent waiting for a core.
func threadCPU() (int64, bool) {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	var ts syscall.Timespec
	_, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano(), e == 0
}
