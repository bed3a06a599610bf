package ftrma

import (
	"errors"
	"fmt"
)

// Rank names a process of a job, counting from 0.
type Rank int

// The shared error values. Every layer returns them wrapped (often in an
// *OpError), so callers test with errors.Is.
var (
	// ErrProcFailed reports that the peer an operation needed has failed: its
	// process died, its connection broke, or it was fenced.
	ErrProcFailed = errors.New("ftrma: process failed")
	// ErrRevoked reports that the communicator or window was revoked.
	ErrRevoked = errors.New("ftrma: revoked")
	// ErrClosed reports use of a transport, communicator or window after it
	// was closed, finalized or freed.
	ErrClosed = errors.New("ftrma: use of closed object")
	// ErrRankOutOfRange reports a rank outside [0, size).
	ErrRankOutOfRange = errors.New("ftrma: rank out of range")
	// ErrOutOfBounds reports an access whose offset+length lies beyond the
	// target's memory (window or registered region).
	ErrOutOfBounds = errors.New("ftrma: access out of bounds")
	// ErrMisaligned reports an atomic operation on an address that is not
	// 8-byte aligned.
	ErrMisaligned = errors.New("ftrma: misaligned atomic access")
	// ErrUnknownRegion reports an access naming a region the target has not
	// registered (or has deregistered, for example a detached dynamic-window
	// buffer).
	ErrUnknownRegion = errors.New("ftrma: unknown memory region")
	// ErrLockHeld reports an operation that is illegal while this rank holds a
	// lock, such as freeing a window with a lock held.
	ErrLockHeld = errors.New("ftrma: lock held")
	// ErrNotLocked reports an unlock of a lock this rank does not hold.
	ErrNotLocked = errors.New("ftrma: lock not held")
	// ErrInvalid reports an invalid argument not covered by a more specific
	// error (a negative size, an unsupported operation, ...).
	ErrInvalid = errors.New("ftrma: invalid argument")
)

// OpError describes a failed operation: which operation, toward which rank, and
// why. It unwraps to the underlying error, usually one of the values above.
type OpError struct {
	Op   string // the operation, e.g. "put", "flush", "lock"
	Rank Rank   // the peer involved, or -1 when none
	Err  error  // the cause
}

func (e *OpError) Error() string {
	if e.Rank < 0 {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }
