package tcp

import (
	"syscall"
	"unsafe"
)

// The socket calls of the data path bypass the Go scheduler's system-call
// bookkeeping.
//
// The transport's sockets are non-blocking: read, write and writev on them
// return at once, with EAGAIN when they would block. Made through
// syscall.Syscall, each call still enters the scheduler's system-call state,
// and the first one after the process was idle wakes the runtime's monitor
// thread (sysmon), which then polls every 20 µs until the process is idle
// again. A rank that serves one request after a pause, the common case of a
// store target, paid that wake-up and those polls for each request; on a host
// with more ranks than CPUs they take the CPU from the very rank the
// request's origin waits for. RawSyscall skips the bookkeeping, which is safe
// only because these calls never block. Race-detector builds keep the
// bookkeeping (syscall.Syscall), and read and write keep the syscall
// package's annotations, which tell the detector that what one goroutine
// wrote to a socket happens before another one reads it.

// rawRead reads into b from the non-blocking socket fd.
func rawRead(fd int, b []byte) (int, syscall.Errno) {
	if raceBuild {
		return retry(func() (int, error) { return syscall.Read(fd, b) })
	}
	return rawCall(syscall.SYS_READ, fd, unsafe.Pointer(unsafe.SliceData(b)), len(b))
}

// rawWrite writes b to the non-blocking socket fd.
func rawWrite(fd int, b []byte) (int, syscall.Errno) {
	if raceBuild {
		return retry(func() (int, error) { return syscall.Write(fd, b) })
	}
	return rawCall(syscall.SYS_WRITE, fd, unsafe.Pointer(unsafe.SliceData(b)), len(b))
}

// rawWritev writes iov (at least one entry) to the non-blocking socket fd.
func rawWritev(fd int, iov []syscall.Iovec) (int, syscall.Errno) {
	return rawCall(syscall.SYS_WRITEV, fd, unsafe.Pointer(&iov[0]), len(iov))
}

// rawCall makes the system call trap(fd, p, n), again while interrupted.
func rawCall(trap uintptr, fd int, p unsafe.Pointer, n int) (int, syscall.Errno) {
	for {
		var r uintptr
		var e syscall.Errno
		if raceBuild {
			r, _, e = syscall.Syscall(trap, uintptr(fd), uintptr(p), uintptr(n))
		} else {
			r, _, e = syscall.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(n))
		}
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

// retry makes a syscall package call, again while interrupted.
func retry(call func() (int, error)) (int, syscall.Errno) {
	for {
		n, err := call()
		if err == nil {
			return n, 0
		}
		if e := err.(syscall.Errno); e != syscall.EINTR {
			return 0, e
		}
	}
}
