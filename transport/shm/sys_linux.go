//go:build linux

package shm

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// createFile creates path (which must not exist) with mode 0600, sizes it to
// size bytes, reserves its blocks so that a full file system fails here
// rather than with SIGBUS at first touch, and maps it shared.
func createFile(path string, size int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
	}
	if err := fallocate(fd, size); err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("reserve %d bytes for %s: %w", size, path, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

func fallocate(fd, size int) error {
	for {
		err := unix.Fallocate(fd, 0, 0, int64(size))
		switch {
		case err == unix.EINTR:
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			return nil // the file system cannot reserve; touching may fail later
		}
		return err
	}
}

// mapFile maps an existing file shared, whole.
func mapFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size <= 0 || st.Size > 1<<46 {
		return nil, fmt.Errorf("%s has %d bytes", path, st.Size)
	}
	return unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// unmap unmaps a mapping returned by createFile or mapFile.
func unmap(mem []byte) {
	if mem != nil {
		unix.Munmap(mem)
	}
}

// exists reports whether path exists (false only when it surely does not).
func exists(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) != unix.ENOENT
}

// The futex words live in MAP_SHARED file mappings used by several
// processes, so the operations are the shared ones (no FUTEX_PRIVATE_FLAG).
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, for at most d or until woken. Spurious
// returns are possible; callers recheck their condition.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every process waiting on addr.
func futexWake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(int32(^uint32(0)>>1)), 0, 0, 0)
}

// processGone reports whether process pid surely no longer exists.
func processGone(pid int) bool {
	return pid > 0 && unix.Kill(pid, 0) == unix.ESRCH
}
