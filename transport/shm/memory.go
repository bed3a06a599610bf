//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// segment is a data segment of this rank, from Alloc.
type segment struct {
	id   uint64
	mem  []byte // the whole mapping
	path string
	regs int // regions registered inside it; guarded by Transport.mu
}

func (s *segment) base() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s.mem))) }

// region is a registered region of this rank.
type region struct {
	slot int
	seg  *segment
}

// Alloc returns size bytes of zeroed shared memory, 8-byte aligned (page
// aligned, in fact): a new segment file of size bytes rounded up to whole
// pages, reserved in the file system and mapped. The result's length and
// capacity are size. It stays valid until Release, and after Close until
// Release or the process exits. It fails with ftrma.ErrInvalid for a negative
// size, ftrma.ErrClosed after Close, or the file system's error (no space).
func (t *Transport) Alloc(size int) ([]byte, error) {
	if size < 0 {
		return nil, &ftrma.OpError{Op: "alloc", Rank: -1, Err: fmt.Errorf("%w: shm transport: negative size %d", ftrma.ErrInvalid, size)}
	}
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return nil, &ftrma.OpError{Op: "alloc", Rank: -1, Err: ftrma.ErrClosed}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextSeg++
	s := &segment{id: t.nextSeg}
	s.path = filepath.Join(t.cfg.Dir, segName(t.cfg.Job, t.cfg.Rank, s.id))
	mem, err := createFile(s.path, alignUp(max(size, 1), pageSize), -1)
	if err != nil {
		return nil, &ftrma.OpError{Op: "alloc", Rank: -1, Err: fmt.Errorf("shm transport: %w", err)}
	}
	s.mem = mem
	i := sort.Search(len(t.segs), func(i int) bool { return t.segs[i].base() > s.base() })
	t.segs = append(t.segs, nil)
	copy(t.segs[i+1:], t.segs[i:])
	t.segs[i] = s
	t.peers[t.cfg.Rank].addSelfSegment(s.id, s.mem)
	return mem[:size:size], nil
}

// Release unmaps memory returned by Alloc (buf must start where it started;
// its length does not matter) and removes its file. No part of it may be
// registered. Peers drop their mappings of it when they next reach this
// rank. Other memory, or registered memory, fails with ftrma.ErrInvalid.
// Release also works after Close, so that memory Close left mapped can be
// given back.
func (t *Transport) Release(buf []byte) error {
	t.life.RLock()
	defer t.life.RUnlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	i := sort.Search(len(t.segs), func(i int) bool { return t.segs[i].base() >= p })
	if buf == nil || i == len(t.segs) || t.segs[i].base() != p {
		return &ftrma.OpError{Op: "release", Rank: -1, Err: fmt.Errorf("%w: shm transport: release memory from Alloc", ftrma.ErrInvalid)}
	}
	s := t.segs[i]
	if s.regs > 0 {
		return &ftrma.OpError{Op: "release", Rank: -1, Err: fmt.Errorf("%w: shm transport: release of memory with %d registered regions", ftrma.ErrInvalid, s.regs)}
	}
	t.segs = append(t.segs[:i], t.segs[i+1:]...)
	t.peers[t.cfg.Rank].removeSelfSegment(s.id)
	if t.fast {
		grace() // fast operations of this rank that found it in the hot cache are done
	}
	unmap(s.mem)
	if !t.unmapped {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.log.Warn(fmt.Sprintf("shm transport: %v", err))
		}
		// Counted after the file is gone: a peer that sees the count drops
		// its mappings of the segments whose files are missing.
		atomic.AddUint64(t.own.word(offReleaseGen), 1)
	}
	return nil
}

// straddles reports whether mem overlaps a segment without lying inside it.
// The caller holds t.mu.
func (t *Transport) straddles(mem []byte) bool {
	if len(mem) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	hi := lo + uintptr(len(mem))
	for _, s := range t.segs {
		if lo < s.base()+uintptr(len(s.mem)) && s.base() < hi {
			return true
		}
	}
	return false
}

// findSegment returns the segment holding all of mem and mem's offset in it.
// The caller holds t.mu.
func (t *Transport) findSegment(mem []byte) (*segment, uint64, bool) {
	if unsafe.SliceData(mem) == nil {
		return nil, 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	i := sort.Search(len(t.segs), func(i int) bool { return t.segs[i].base() > p }) - 1
	if i < 0 {
		return nil, 0, false
	}
	s := t.segs[i]
	off := uint64(p - s.base())
	if off > uint64(len(s.mem)) || uint64(len(mem)) > uint64(len(s.mem))-off {
		return nil, 0, false
	}
	return s, off, true
}

// keyBits is the number of low key bits that select a key-table slot; the
// bits above count the slot's uses, so that keys are not reused.
func (t *Transport) keyBits() int { return bits.TrailingZeros(uint(t.cfg.Regions)) }

// Register publishes mem in this rank's key table and returns its key:
// never 0, at most transport.MaxKey, not reused while the transport is
// open; peers reach mem until Deregister. Memory inside memory from Alloc
// (any sub-slice of it, even empty) peers map and access themselves; other
// memory (the caller's own) is target-executed: this rank's progress
// goroutine executes its peers' operations on it (foreign.go). A full key
// table (Config.Regions keys registered at once) fails with
// ftrma.ErrInvalid; after Close it fails with ftrma.ErrClosed.
func (t *Transport) Register(mem []byte) (transport.Key, error) {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: ftrma.ErrClosed}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, off, ok := t.findSegment(mem) // s nil: memory of the caller's, target-executed (foreign.go)
	if !ok {
		if t.straddles(mem) {
			return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: fmt.Errorf("%w: shm transport: memory that begins or ends inside memory from Alloc but is not inside it", ftrma.ErrInvalid)}
		}
		s, off = nil, 0
	}
	kb := t.keyBits()
	maxGen := uint32(transport.MaxKey >> kb)
	for len(t.freeSlots) > 0 {
		slot := t.freeSlots[0]
		t.freeSlots = t.freeSlots[1:]
		gen := t.slotGen[slot]
		if gen > maxGen {
			continue // every key of this slot was used: retired
		}
		t.slotGen[slot]++
		key := transport.Key(gen)<<kb | transport.Key(slot)
		e := t.own.entry(slot)
		state := uint64(key)<<8 | 1
		if s == nil {
			if err := t.foreign.register(key, mem); err != nil {
				t.freeSlots = append(t.freeSlots, slot)
				return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: err}
			}
			state = uint64(key)<<8 | 2 // its peers send requests (foreign.go)
		} else {
			atomic.StoreUint64(t.own.word(e+entrySeg), s.id)
			s.regs++
		}
		atomic.StoreUint64(t.own.word(e+entryOffset), off)
		atomic.StoreUint64(t.own.word(e+entryLength), uint64(len(mem)))
		atomic.StoreUint64(t.own.word(e+entryState), state)
		t.regions[key] = region{slot: slot, seg: s}
		return key, nil
	}
	return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: fmt.Errorf("%w: shm transport: key table full (%d regions registered)", ftrma.ErrInvalid, len(t.regions))}
}

// Deregister withdraws key from the key table, then waits until every
// operation that found it there has finished (operations of peers that are
// down are not waited for, nor, past Config.DrainTimeout, those of a peer
// stopped in the middle of one). Later operations naming key fail with
// ftrma.ErrUnknownRegion at their origin. An unknown key fails with
// ftrma.ErrUnknownRegion; after Close it fails with ftrma.ErrClosed.
func (t *Transport) Deregister(key transport.Key) error {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return &ftrma.OpError{Op: "deregister", Rank: -1, Err: ftrma.ErrClosed}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	reg, ok := t.regions[key]
	if !ok {
		return &ftrma.OpError{Op: "deregister", Rank: -1, Err: fmt.Errorf("shm transport: deregister key %d: %w", key, ftrma.ErrUnknownRegion)}
	}
	atomic.StoreUint64(t.own.word(t.own.entry(reg.slot)+entryState), 0)
	// Operations that enter from now on count themselves in the other slot
	// and see the entry gone; wait for those counted in this one, and for
	// those on the fast path that may have found the entry.
	ep := t.own.word(offEpoch)
	e := atomic.LoadUint64(ep)
	atomic.StoreUint64(ep, e+1)
	slot := actCount0 + 8*int(e&1)
	what := fmt.Sprintf("deregister key %d", key)
	if t.fast {
		t.barrier()
	}
	for _, p := range t.local {
		t.drain(p, slot, what)
		if t.fast {
			t.drainFast(p, what)
		}
	}
	delete(t.regions, key)
	if reg.seg == nil {
		t.foreign.deregister(key) // waits for the requests executing on it
	} else {
		reg.seg.regs--
	}
	t.freeSlots = append(t.freeSlots, reg.slot)
	return nil
}

// drain waits until the counter at slot of p's active line in this rank's
// control segment is seen zero, or p is down or its process gone, or
// Config.DrainTimeout passed (then it logs). The caller holds t.life for
// reading.
func (t *Transport) drain(p *peer, slot int, what string) {
	w := t.own.word(t.own.active(p.slot) + slot)
	if atomic.LoadUint64(w) == 0 {
		return
	}
	p.mu.RLock()
	pid := p.pid
	p.mu.RUnlock()
	t.waitOut(p, pid, time.Now(), what, func() bool { return atomic.LoadUint64(w) == 0 })
}
