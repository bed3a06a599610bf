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
//
// O_EXCL makes a file someone else made first (another local user can guess
// the name) an error, fs.ErrExist, rather than ours to map; O_NOFOLLOW
// refuses a symbolic link there.
func createFile(path string, size, reserve int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := checkOwned(fd, path, unix.S_IFREG); err != nil {
		unix.Unlink(path)
		return nil, err
	}
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
	fd, err := openOwned(path, unix.O_RDWR, unix.S_IFREG)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fallocate(fd, off, n)
}

// mapFile maps an existing file shared, whole. The file must be ours (see
// openOwned).
func mapFile(path string) ([]byte, error) {
	fd, err := openOwned(path, unix.O_RDWR, unix.S_IFREG)
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

// errNotOurs is why a file of the job that some other user could have made
// is refused: the file is not what this process's user made (its owner,
// its kind, or a symbolic link in its place). A rank maps no such file.
var errNotOurs = errors.New("not a file of this user")

// openOwned opens path (flags plus O_NOFOLLOW and O_CLOEXEC) and checks what
// it opened: a file of kind (unix.S_IFREG or unix.S_IFIFO) owned by this
// process's effective user. A symbolic link fails with an error wrapping
// errNotOurs, as does any other mismatch; each names the file. A missing
// file fails with an error wrapping the open's (ENOENT, which is
// fs.ErrNotExist).
func openOwned(path string, flags, kind int) (int, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.ELOOP {
		return -1, fmt.Errorf("%s is a symbolic link: %w", path, errNotOurs)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	if err := checkOwned(fd, path, uint32(kind)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkOwned checks that the open file fd (named path) is of kind and owned
// by this process's effective user.
func checkOwned(fd int, path string, kind uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != kind {
		return fmt.Errorf("%s is not a %s (mode %#o): %w", path, kindName(kind), st.Mode, errNotOurs)
	}
	if uid := uint32(unix.Geteuid()); st.Uid != uid {
		return fmt.Errorf("%s is owned by uid %d, not by this process's uid %d: %w", path, st.Uid, uid, errNotOurs)
	}
	return nil
}

func kindName(kind uint32) string {
	if kind == unix.S_IFIFO {
		return "named pipe"
	}
	return "regular file"
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
