package window

import (
	"context"
	"fmt"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// AllocateShared creates a window of size bytes of fresh zeroed, 8-byte
// aligned memory at every rank, as Allocate, that every rank can also load
// from and store into directly: SharedQuery returns a rank's memory mapped
// into this process (MPI_Win_allocate_shared and MPI_Win_shared_query).
// Collective. Every rank of the communicator must run on one host and be
// reached through shared memory; otherwise it fails at every rank with an
// error wrapping transport.ErrNotShared (which is ftrma.ErrInvalid) that
// names a rank that cannot map the others' memory.
//
// Each rank's memory is a mapping of its own, not one block laid out rank
// after rank (MPI's alloc_shared_noncontig). Loads and stores through
// SharedQuery follow Go's memory model between the goroutines of all the
// ranks: order them with the window's synchronization (Flush, a lock, a
// barrier of the communicator) or with sync/atomic on aligned words. Those
// atomics are atomic with the window's own (FetchAndOp, CompareAndSwap,
// Accumulate) only where LocalAtomics is true; on a device whose atomics
// are not the CPU's (shm+verbs), use the window's.
//
// Under failure: a rank's memory stays mapped here, readable and writable
// with what it held, after that rank fails or exits, until this rank frees
// the window (Shrink keeps the mappings; free only one of the two windows).
// A rank that was already down when the window was made cannot be mapped:
// SharedQuery of it returns the error. A window Rebuild makes does not map
// its ranks' memory (SharedQuery fails); the old window's mappings last
// until its Free.
func AllocateShared(ctx context.Context, c Comm, size int) (*Window, error) {
	return allocate(ctx, "allocate shared", c, sharedAlloc, size)
}

// sharesAll reports whether this rank can map the memory of every rank of
// c (its own needs no mapping): the flag each rank adds to its window
// description at AllocateShared, so that every rank decides alike whether
// the window can be made.
func sharesAll(c Comm) bool {
	s, _ := c.Transport().(transport.Sharer)
	for r := range c.Size() {
		if r == int(c.Rank()) {
			continue
		}
		if s == nil || !s.Shares(c.TransportRank(ftrma.Rank(r))) {
			return false
		}
	}
	return true
}

// mapShared maps every rank's memory into this process once every rank
// said it can. A rank it cannot map (down already) keeps its error for
// SharedQuery: the window is made at every rank alike.
func (w *Window) mapShared() {
	s, _ := w.t.(transport.Sharer) // sharesAll said so at this rank, if it has peers
	w.sharedMem = make([][]byte, len(w.peers))
	w.sharedErr = make([]error, len(w.peers))
	unmaps := make([]func(), 0, len(w.peers))
	for r, p := range w.peers {
		if ftrma.Rank(r) == w.rank {
			w.sharedMem[r] = w.mem
			continue
		}
		mem, unmap, err := s.MapShared(p.tr, p.key)
		if err != nil {
			w.sharedErr[r] = wrap("shared query", ftrma.Rank(r), err)
			continue
		}
		w.sharedMem[r] = mem
		unmaps = append(unmaps, unmap)
	}
	w.unmaps = &unmaps
}

// unmapShared undoes mapShared's mappings, at Free.
func (w *Window) unmapShared() {
	if w.unmaps == nil {
		return
	}
	for _, unmap := range *w.unmaps {
		unmap()
	}
	*w.unmaps = nil
}

// SharedQuery returns rank r's window memory, mapped into this process for
// direct loads and stores, in a window AllocateShared made
// (MPI_Win_shared_query); for this rank it is Bytes. It is valid until this
// rank frees the window, also after r fails (see AllocateShared); touching
// it after Free faults. It fails with ErrFreed after Free,
// ftrma.ErrRankOutOfRange for a rank outside the window, ftrma.ErrInvalid
// for a window not made by AllocateShared, and with the mapping's error
// for a rank that was down when the window was made.
func (w *Window) SharedQuery(r ftrma.Rank) ([]byte, error) {
	if err := w.check("shared query"); err != nil {
		return nil, err
	}
	if r < 0 || int(r) >= len(w.peers) {
		return nil, &ftrma.OpError{Op: "shared query", Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	if w.sharedMem == nil {
		return nil, &ftrma.OpError{Op: "shared query", Rank: r, Err: fmt.Errorf("%w: not a window AllocateShared made", ftrma.ErrInvalid)}
	}
	if err := w.sharedErr[r]; err != nil {
		return nil, err
	}
	return w.sharedMem[r], nil
}
