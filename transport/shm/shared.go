//go:build linux

package shm

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Shares reports whether peer is a rank this transport serves (one of
// Config.Ranks, the ranks of this host): MapShared can map its memory.
func (t *Transport) Shares(peer ftrma.Rank) bool {
	return peer >= 0 && int(peer) < len(t.peers) && t.peers[peer] != nil
}

// Reaches reports whether this transport reaches rank r
// (transport.Reacher): r is one of Config.Ranks and not absent (a spare
// that has not started, or started on another host, until Admit).
func (t *Transport) Reaches(r ftrma.Rank) bool {
	return t.Shares(r) && !t.peers[r].absent.Load()
}

// MapShared maps peer's region key into this process (transport.Sharer):
// a mapping of the peer's segment file of the caller's own, apart from the
// mappings the transport's operations use, so that neither the peer going
// down (which drops those) nor its Release nor this transport's Close
// unmaps it; the memory lives as long as a mapping of it does, after its
// file is removed too. For this rank it is the registered memory. A
// region the peer registered from memory of its own (target-executed, see
// foreign.go) fails with transport.ErrNotShared.
func (t *Transport) MapShared(r ftrma.Rank, key transport.Key) ([]byte, func(), error) {
	const op = "map shared"
	if !t.Shares(r) {
		return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: shm transport: rank %d is not on this host", transport.ErrNotShared, r)}
	}
	p, err := t.peer(op, r)
	if err != nil {
		return nil, nil, err
	}
	if err := p.downErr(); err != nil {
		return nil, nil, err
	}
	c, err := p.lock()
	if err != nil {
		return nil, nil, t.lost(op, p, err)
	}
	if !p.self {
		// A peer that closed or exited is down, as for an operation
		// (access), even before its departure is reported.
		if st := atomic.LoadUint64(c.word(offState)); st != stateOpen {
			p.mu.RUnlock()
			return nil, nil, t.lost(op, p, stateStatus(st))
		}
	}
	defer p.mu.RUnlock()
	if key == 0 || key > transport.MaxKey {
		return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrUnknownRegion}
	}
	e := c.entry(int(key) & (c.lay.regions - 1))
	switch atomic.LoadUint64(c.word(e + entryState)) {
	case uint64(key)<<8 | 1:
	case uint64(key)<<8 | 2:
		return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: shm transport: region %d of rank %d is memory of its own, not from Alloc", transport.ErrNotShared, key, r)}
	default:
		return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrUnknownRegion}
	}
	id := atomic.LoadUint64(c.word(e + entrySeg))
	off := atomic.LoadUint64(c.word(e + entryOffset))
	n := atomic.LoadUint64(c.word(e + entryLength))
	var mem []byte
	unmapIt := func() {}
	if p.self {
		if mem, err = p.segment(id); err != nil {
			return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: err}
		}
	} else {
		if mem, err = mapFile(p.segPath(id)); err != nil {
			return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: shm transport: map segment %d of rank %d: %w", ftrma.ErrUnknownRegion, id, r, err)}
		}
		whole := mem
		var once sync.Once // a second munmap could take what was mapped there since
		unmapIt = func() { once.Do(func() { unmap(whole) }) }
	}
	if off > uint64(len(mem)) || n > uint64(len(mem))-off {
		unmapIt()
		return nil, nil, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: shm transport: key %d of rank %d names bytes %d+%d of a %d-byte segment", ftrma.ErrInvalid, key, r, off, n, len(mem))}
	}
	return mem[off : off+n : off+n], unmapIt, nil
}

var _ transport.Sharer = (*Transport)(nil)
