//go:build !linux

package launcher

import (
	"errors"
	"os"
)

var errNoOFDLocks = errors.New("no open-file-description locks on this system")

// lockOwner fails: only Linux has open-file-description locks (and shared
// memory transports).
func lockOwner(f *os.File) error { return errNoOFDLocks }

// ownerLocked fails: a sweep here proves nothing dead.
func ownerLocked(path string) (bool, error) { return false, errNoOFDLocks }
