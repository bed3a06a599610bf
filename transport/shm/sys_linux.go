//go:build linux

package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// createFile creates path (which must not exist) with mode 0600, sizes it to
// size bytes, reserves its first reserve bytes (all of it if reserve is
// negative) so that a full file system fails here rather than with SIGBUS at
// first touch, and maps it shared. Bytes not reserved must be reserved with
// reserveRange before they are first touched.
func createFile(path string, size, reserve int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
	}
	if reserve < 0 || reserve > size {
		reserve = size
	}
	if err := fallocate(fd, 0, reserve); err != nil {
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

func fallocate(fd, off, n int) error {
	for {
		err := unix.Fallocate(fd, 0, int64(off), int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			return nil // the file system cannot reserve; touching may fail later
		}
		return err
	}
}

// reserveRange reserves n bytes at off of the file path (see createFile).
func reserveRange(path string, off, n int) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fallocate(fd, off, n)
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

// processGone reports whether process pid surely no longer exists.
func processGone(pid int) bool {
	return pid > 0 && unix.Kill(pid, 0) == unix.ESRCH
}
