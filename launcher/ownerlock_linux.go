package launcher

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockOwner takes an exclusive open-file-description lock on all of the
// owner file f: it lasts while f is open, in this process only (descriptors
// are closed on exec), and the kernel drops it when the process dies.
func lockOwner(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// ownerLocked reports whether a lock is held on the owner file at path,
// by a process in any PID namespace.
func ownerLocked(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("test the lock of %s: %w", path, err)
	}
	return lk.Type != unix.F_UNLCK, nil
}
