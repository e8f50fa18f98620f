package kernels

import (
	"syscall"
	"unsafe"
)

// threadCPUTime returns the calling thread's CPU time in nanoseconds
// (CLOCK_THREAD_CPUTIME_ID), so benchmarks on a shared, overloaded machine
// can report time not spent waiting for a core.
func threadCPUTime() (int64, bool) {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano(), errno == 0
}
