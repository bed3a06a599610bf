//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/ftrma/ftrma"
	"golang.org/x/sys/unix"
)

// PrepareDir makes dir, the directory of a job's files, if it is missing
// (mode 0700), and checks that it is private: a directory, not a symbolic
// link, owned by this process's effective user, that no one else may write
// into (mode bits 022 clear). A directory that fails the check is refused with an
// error naming it and what is wrong (wrapping ftrma.ErrInvalid): another
// user may have made it first.
func PrepareDir(dir string) error {
	if err := unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
		return fmt.Errorf("shm transport: make %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	var st unix.Stat_t
	switch {
	case (err == unix.ELOOP || err == unix.ENOTDIR) && unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("shm transport: %s is a symbolic link, not a private directory: %w", dir, ftrma.ErrInvalid)
	case err == unix.ENOTDIR:
		return fmt.Errorf("shm transport: %s is not a directory: %w", dir, ftrma.ErrInvalid)
	case err != nil:
		return fmt.Errorf("shm transport: open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("shm transport: stat %s: %w", dir, err)
	}
	if uid := uint32(unix.Geteuid()); st.Uid != uid {
		return fmt.Errorf("shm transport: %s is owned by uid %d, not by this process's uid %d (another user made it first?): %w", dir, st.Uid, uid, ftrma.ErrInvalid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("shm transport: %s has mode %#o: others may make files in it: %w", dir, st.Mode&0o7777, ftrma.ErrInvalid)
	}
	return nil
}

// OpenRanks returns the ranks of job whose control segments in dir
// (JobDir("", job) when empty) a live process holds open: those whose
// lock (see "A private place") is held. It sees through PID namespaces:
// the locks are the kernel's, not pids. A missing directory is no ranks. A
// control segment it cannot test (not this user's, unreadable) is an
// error, so that a caller deciding whether the job is dead decides it is
// not.
func OpenRanks(dir, job string) ([]ftrma.Rank, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	if dir == "" {
		dir = JobDir("", job)
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("shm transport: %w", err)
	}
	var open []ftrma.Rank
	var errs []error
	for _, e := range ents {
		r, ok := jobFileRank(e.Name(), job)
		if !ok || e.Name() != ctlName(job, r) {
			continue
		}
		path := dir + "/" + e.Name()
		held, err := lockHeld(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, err)
		case held:
			open = append(open, r)
		}
	}
	if len(errs) > 0 {
		return open, fmt.Errorf("shm transport: %w", errors.Join(errs...))
	}
	return open, nil
}

// holdShared takes a shared open-file-description lock on all of the file
// fd: it lasts while fd (or a duplicate of it) is open, and the kernel
// drops it when the process dies.
func holdShared(fd int) error {
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 0, Len: 0}
	return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
}

// lockHeld reports whether some open file description holds a lock on the
// file at path (this user's regular file, not a symbolic link).
func lockHeld(path string) (bool, error) {
	fd, err := openOwned(path, unix.O_RDONLY, unix.S_IFREG)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("test the lock of %s: %w", path, err)
	}
	return lk.Type != unix.F_UNLCK, nil
}
