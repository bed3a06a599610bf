//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A bell is how a rank wakes another's progress goroutine (or its own): a
// named pipe per rank, next to its control segment. The owner keeps it
// open for reading and writing (so it never sees end of file and never
// blocks opening it) and parks by reading it through Go's network poller:
// the parked goroutine gives up its processor, so the rank's other
// goroutines, and the ftrun supervision link that reports a dead peer,
// run at once even with GOMAXPROCS=1. A futex wait would hold the
// processor until the runtime's monitor took it back, up to tens of
// milliseconds on an idle process. Ringers open it write-only and
// non-blocking and write one byte; bytes persist until read, so a ring
// sent before the owner parks is not lost, and a full pipe (the owner is
// not parked and has 64 KiB of rings to read) needs no more.
type bell struct {
	f    *os.File // read end, pollable; nil once closed
	self int      // a write-only descriptor for rings of its own
	buf  [64]byte
}

// makeBell creates the named pipe path (mode 0600; it must not exist) and
// opens it.
func makeBell(path string) (*bell, error) {
	if err := unix.Mkfifo(path, 0o600); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fs.ErrExist
		}
		return nil, fmt.Errorf("make %s: %w", path, err)
	}
	// Opened non-blocking, os.NewFile makes it pollable.
	fd, err := openOwned(path, unix.O_RDWR|unix.O_NONBLOCK, unix.S_IFIFO)
	if err != nil {
		unix.Unlink(path)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	self, err := openRinger(path)
	if err != nil {
		f.Close()
		unix.Unlink(path)
		return nil, err
	}
	return &bell{f: f, self: self}, nil
}

// wait parks until the bell rings or d passes, and takes the rings.
func (b *bell) wait(d time.Duration) {
	if err := b.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		// Not pollable (it always is on Linux): poll the rings instead.
		time.Sleep(min(d, time.Millisecond))
		return
	}
	b.f.Read(b.buf[:])
}

// ring rings the owner's own bell.
func (b *bell) ring() { ringFD(b.self) }

// close closes both descriptors; the caller removes the file.
func (b *bell) close() {
	b.f.Close()
	unix.Close(b.self)
}

// openRinger opens a bell for ringing, or returns an error (ENXIO when its
// owner is gone and nobody holds it open for reading; errNotOurs when it is
// not a named pipe of this user).
func openRinger(path string) (int, error) {
	return openOwned(path, unix.O_WRONLY|unix.O_NONBLOCK, unix.S_IFIFO)
}

// ringFD writes one byte to a bell opened by openRinger. A full pipe, or a
// pipe whose owner is gone, needs no ring: errors are ignored.
func ringFD(fd int) {
	if fd < 0 {
		return
	}
	one := [1]byte{1}
	for {
		if _, err := unix.Write(fd, one[:]); err != unix.EINTR {
			return
		}
	}
}

// spaceSignal wakes this rank's senders that wait for room in a peer's ring.
// A receiver that frees room for a waiting sender rings the sender's bell;
// the woken progress goroutine then broadcasts here. Waiters also give up
// after a bounded pause, so a ring that came while the progress goroutine
// was busy costs at most that pause.
type spaceSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// channel returns the channel the next broadcast closes.
func (s *spaceSignal) channel() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// broadcast wakes every waiter that took its channel before.
func (s *spaceSignal) broadcast() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}
