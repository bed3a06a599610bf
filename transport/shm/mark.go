//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/ftrma/ftrma"
	"golang.org/x/sys/unix"
)

// MarkExited is for the launcher, once it has reaped the process of rank r
// of job (the process is surely gone): it marks r's control segment in dir
// (JobDir("", job) when empty) exited, unless r closed its transport, and rings
// the bells of wake, the job's other ranks on this host. Their progress
// goroutines, and any operation toward r, then see it gone and report it
// down with transport.ErrPeerExited (as PeerDown does), without waiting for
// the launcher's exit notice over the network: a rank whose application
// keeps its only processor busy hears that notice only when Go's scheduler
// polls the network, up to 10 ms later. A rank that never opened its
// transport, or whose files were removed, leaves nothing to mark: that is
// not an error.
func MarkExited(dir, job string, r ftrma.Rank, wake []ftrma.Rank) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if dir == "" {
		dir = JobDir("", job)
	}
	path := filepath.Join(dir, ctlName(job, r))
	fd, err := openOwned(path, unix.O_RDWR, unix.S_IFREG)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shm transport: mark rank %d exited: %w", r, err)
	}
	mem, err := unix.Mmap(fd, 0, headerBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("shm transport: mark rank %d exited: map %s: %w", r, path, err)
	}
	defer unix.Munmap(mem)
	word := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
	if *word(offMagic) != magicWord || *word(offVersion) != layoutVersion || *word(offRank) != uint64(r) {
		return fmt.Errorf("shm transport: mark rank %d exited: %s is not its control segment of version %d", r, path, layoutVersion)
	}
	if !atomic.CompareAndSwapUint64(word(offState), stateOpen, stateExited) {
		return nil // it closed: its peers deliver what it sent, then see it left
	}
	for _, q := range wake {
		if q == r {
			continue
		}
		if fd, err := openRinger(filepath.Join(dir, bellName(job, q))); err == nil {
			ringFD(fd)
			unix.Close(fd)
		}
	}
	return nil
}
