//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// The kinds of one-sided operation.
const (
	rmaWrite = iota
	rmaRead
	rmaCAS
	rmaFAdd
)

// rma describes one operation for execute.
type rma struct {
	kind   int
	src    []byte  // rmaWrite
	dst    []byte  // rmaRead
	a, b   uint64  // rmaCAS: old, new; rmaFAdd: delta
	result *uint64 // rmaCAS, rmaFAdd; may be nil
	whole  uint64  // rmaWrite, rmaRead: bytes from off the bounds check covers, if more than src or dst (the first piece of a large operation)
}

var opNames = [...]string{rmaWrite: "write", rmaRead: "read", rmaCAS: "compare-and-swap", rmaFAdd: "fetch-and-add"}

// Write copies src into peer's region key at off before it returns; the
// operation is complete at once. Aligned words are stored whole when
// len(src) <= transport.WordAtomicWrite. It fails at once with
// ftrma.ErrClosed, ftrma.ErrRankOutOfRange, the peer-down error (wrapping
// ftrma.ErrProcFailed; transport.ErrPeerLeft too when the peer closed), or
// ftrma.ErrInvalid if the peer has not opened its transport yet; region,
// bounds and alignment errors are reported by the next Wait or Flush. A
// write larger than half of transport.CopyChunk is copied in pieces that let the
// rank's other goroutines run in between; should the region be deregistered
// or the peer fence this rank or go meanwhile, a part may have landed and
// the write fails.
func (t *Transport) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	o := rma{kind: rmaWrite, src: src}
	return t.post(peer, key, off, &o)
}

// Read copies len(dst) bytes of peer's region key at off into dst before it
// returns. Aligned words are loaded whole when len(dst) <=
// transport.WordAtomicWrite. Errors, and pieces, are those of Write.
func (t *Transport) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	o := rma{kind: rmaRead, dst: dst}
	return t.post(peer, key, off, &o)
}

// CompareAndSwap64 atomically replaces the word at off of peer's region key
// with new if it equals old, with a hardware compare-and-swap on the shared
// mapping, and stores the prior value in *result (if not nil) before it
// returns. A word that is not 8-byte aligned fails with ftrma.ErrMisaligned.
// Errors are those of Write.
func (t *Transport) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	o := rma{kind: rmaCAS, a: old, b: new, result: result}
	return t.post(peer, key, off, &o)
}

// FetchAndAdd64 atomically adds delta to the word at off of peer's region key
// and stores the prior value in *result (if not nil), as CompareAndSwap64.
func (t *Transport) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	o := rma{kind: rmaFAdd, a: delta, result: result}
	return t.post(peer, key, off, &o)
}

// post executes o toward peer and numbers it, complete.
func (t *Transport) post(r ftrma.Rank, key transport.Key, off uint64, o *rma) (transport.Seq, error) {
	var p *peer
	if uint(r) < uint(len(t.peers)) {
		p = t.peers[r] // t.peer's common case, written out
	}
	if p == nil || p.absent.Load() || t.closed.Load() {
		var err error
		if p, err = t.peerSlow(opNames[o.kind], r); err != nil {
			return 0, err
		}
	}
	if err := p.downErr(); err != nil {
		return 0, err
	}
	var opErr, status error
	if len(o.src)+len(o.dst) <= copyPiece {
		// execute, written out: the call it saves is an eighth of a small
		// write's time.
		if p.t.fast && p.fastOp(key, off, o) {
			return p.comp.Done(nil), nil
		}
		opErr, status = p.executeSlow(key, off, o)
	} else {
		opErr, status = p.executeInPieces(key, off, o)
	}
	if opErr == errForeign { // nothing moved: the whole operation goes to the target
		opErr, status = p.remote(key, off, o)
	}
	if status != nil {
		return 0, t.lost(opNames[o.kind], p, status)
	}
	if opErr != nil {
		opErr = &ftrma.OpError{Op: opNames[o.kind], Rank: r, Err: opErr}
	}
	// Numbered after it executed: a sequence that Wait sees complete is an
	// operation that took effect.
	return p.comp.Done(opErr), nil
}

// executeSlow is execute without the fast path: under the peer's mapping
// lock, counted in the target's active table with read-modify-writes.
func (p *peer) executeSlow(key transport.Key, off uint64, o *rma) (opErr, status error) {
	c, err := p.lock()
	if err != nil {
		return nil, err
	}
	if p.t.closed.Load() {
		p.mu.RUnlock()
		return nil, errGone // Close waits for the accesses that got here first
	}
	act := c.active(p.t.selfSlot)
	slot := enter(c, act)
	// No defers: access has too many returns for the compiler to inline
	// deferred calls.
	opErr, status = p.access(c, act, key, off, o)
	atomic.AddUint64(slot, ^uint64(0))
	p.mu.RUnlock()
	return opErr, status
}

// copyPiece is the most one access copies: half of transport.CopyChunk. Go's
// memmove switches to non-temporal stores, which bypass the cache, from 1
// MiB on; a reader of the data (or the next operation on the same buffer)
// then fetches it from memory: a 1 MiB put took 1.5 times as long as two of
// 512 KiB.
const copyPiece = transport.CopyChunk / 2

// executeInPieces runs a write or read larger than copyPiece as
// accesses of copyPiece bytes, each with the peer's mapping lock
// taken and let go and this rank counted active anew, paced by a
// transport.Pacer: a long copy holds neither the processor (a heartbeat is
// due every few tens of milliseconds) nor the mapping lock (a Send toward
// the peer may need it to drop released segments) for long. The
// first piece checks the bounds of the whole operation, so one out of bounds
// copies nothing; a region deregistered, a fence raised or the peer gone
// midway fails the rest.
func (p *peer) executeInPieces(key transport.Key, off uint64, o *rma) (opErr, status error) {
	whole := len(o.src) + len(o.dst)
	piece := rma{kind: o.kind, whole: uint64(whole)}
	var pace transport.Pacer
	for done := 0; ; {
		n := min(whole-done, copyPiece)
		if o.kind == rmaWrite {
			piece.src = o.src[done : done+n]
		} else {
			piece.dst = o.dst[done : done+n]
		}
		opErr, status = p.execute(key, off+uint64(done), &piece)
		done += n
		if opErr != nil || status != nil || done == whole {
			return opErr, status
		}
		piece.whole = 0
		pace.Pause()
	}
}

// access is executeSlow's part inside the target: the peer's mapping lock
// held and this origin counted in the target's active table.
func (p *peer) access(c *ctl, act int, key transport.Key, off uint64, o *rma) (opErr, status error) {
	// Checked after entering: Fence and Deregister publish their change before
	// they wait for the operations that entered earlier. A peer that closed
	// (it marks itself closed before it cuts its peers off) has left; a
	// fence flag on an open peer means it declared this rank failed.
	if !p.self {
		if st := atomic.LoadUint64(c.word(offState)); st != stateOpen {
			return nil, stateStatus(st)
		}
	}
	if atomic.LoadUint64(c.word(act+actFenced)) != 0 {
		return nil, errFencedByPeer
	}
	reg, err := p.resolve(c, key)
	if err != nil {
		return err, nil
	}
	b, ok := span(reg, off, o)
	if !ok {
		return ftrma.ErrOutOfBounds, nil
	}
	if o.atomic() && !aligned(b) {
		return ftrma.ErrMisaligned, nil
	}
	apply(b, o)
	return nil, nil
}

// atomic reports whether o is a compare-and-swap or a fetch-and-add.
func (o *rma) atomic() bool { return o.kind == rmaCAS || o.kind == rmaFAdd }

// span returns the bytes of reg that o accesses at off, and false if they
// (or, for the first piece of a large operation, the whole) are out of
// bounds.
func span(reg []byte, off uint64, o *rma) ([]byte, bool) {
	n := uint64(len(o.src) + len(o.dst))
	if o.atomic() {
		n = 8
	}
	if off > uint64(len(reg)) || max(n, o.whole) > uint64(len(reg))-off {
		return nil, false
	}
	return reg[off : off+n], true
}

// aligned reports whether b starts on an 8-byte boundary.
func aligned(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 == 0 }

// apply does o on b, the target's bytes (aligned for an atomic).
func apply(b []byte, o *rma) {
	switch o.kind {
	case rmaWrite:
		if len(o.src) == 8 && aligned(b) { // a word: storeTo's case, without its loops
			storeWord(&b[0], binary.NativeEndian.Uint64(o.src))
			return
		}
		storeTo(b, o.src)
	case rmaRead:
		if len(o.dst) == 8 && aligned(b) {
			binary.NativeEndian.PutUint64(o.dst, loadWord(&b[0]))
			return
		}
		loadFrom(o.dst, b)
	case rmaCAS, rmaFAdd:
		w := (*uint64)(unsafe.Pointer(unsafe.SliceData(b)))
		var v uint64
		if o.kind == rmaFAdd {
			v = atomic.AddUint64(w, o.a) - o.a
		} else {
			for {
				v = atomic.LoadUint64(w)
				if v != o.a || atomic.CompareAndSwapUint64(w, o.a, o.b) {
					break
				}
			}
		}
		if o.result != nil {
			*o.result = v
		}
	}
}

// enter counts an operation of this rank in the peer's active line act, in
// the slot of the current epoch, and returns the counter to decrement when
// the operation is done.
//
// Safety does not rest on the epoch: Deregister (and Fence) publish their
// change and only then read the counters, while an operation counts itself
// and only then reads the key table (and fence flag), all with sequentially
// consistent atomics. So an operation that the drain does not see counted
// sees the change. The epoch only spares Deregister from waiting for
// operations that start after it, which count themselves in the other slot.
func enter(c *ctl, act int) *uint64 {
	e := atomic.LoadUint64(c.word(offEpoch))
	w := c.word(act + actCount0 + 8*int(e&1))
	atomic.AddUint64(w, 1)
	return w
}

// resolve looks key up in the peer's key table and returns the region's
// memory, caching it in p.hot for the fast path. The caller holds p.mu for
// reading and is counted active.
func (p *peer) resolve(c *ctl, key transport.Key) ([]byte, error) {
	if key == 0 || key > transport.MaxKey {
		return nil, ftrma.ErrUnknownRegion
	}
	e := c.entry(int(key) & (c.lay.regions - 1))
	if st := atomic.LoadUint64(c.word(e + entryState)); st != uint64(key)<<8|1 {
		if st == uint64(key)<<8|2 {
			return nil, errForeign
		}
		return nil, ftrma.ErrUnknownRegion
	}
	hot := &p.hot[key&(hotKeys-1)]
	if h := hot.Load(); h != nil && h.key == key {
		return h.reg, nil
	}
	id := atomic.LoadUint64(c.word(e + entrySeg))
	off := atomic.LoadUint64(c.word(e + entryOffset))
	n := atomic.LoadUint64(c.word(e + entryLength))
	mem, err := p.segment(id)
	if err != nil {
		return nil, err
	}
	if off > uint64(len(mem)) || n > uint64(len(mem))-off {
		return nil, fmt.Errorf("%w: shm transport: key %d of rank %d names bytes %d+%d of a %d-byte segment", ftrma.ErrInvalid, key, p.rank, off, n, len(mem))
	}
	reg := mem[off : off+n : off+n]
	hot.Store(&hotKey{key: key, reg: reg})
	return reg, nil
}

// wideMin is the shortest middle of a copy worth storeWide or loadWide.
const wideMin = 64

// storeTo copies src into dst, shared memory of at least len(src) bytes. When
// len(src) <= transport.WordAtomicWrite every 8-byte aligned word of dst that
// src covers is stored whole (the unaligned ends go byte by byte), so that a
// concurrent reader never sees it torn; larger copies use memmove (at most
// copyPiece bytes: post splits larger operations). memmove does
// tear words: on this project's x86-64 machines a reader saw 2 new bytes of
// 8 in a 32 KiB copy (TestWordAtomicity).
func storeTo(dst, src []byte) {
	n := len(src)
	if n > transport.WordAtomicWrite {
		copy(dst, src)
		return
	}
	if n == 0 {
		return
	}
	dst = dst[:n]
	i := 0
	for head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 7); i < head && i < n; i++ {
		dst[i] = src[i]
	}
	if n-i >= wideMin {
		if uintptr(unsafe.Pointer(&dst[i]))&15 != 0 { // to 16-byte alignment
			storeWord(&dst[i], binary.NativeEndian.Uint64(src[i:i+8]))
			i += 8
		}
		i += storeWide(dst[i:], src[i:])
	}
	for ; i+32 <= n; i += 32 { // unrolled: a quarter of the loop's overhead per word
		s, d := src[i:i+32], dst[i:i+32]
		a, b := binary.NativeEndian.Uint64(s), binary.NativeEndian.Uint64(s[8:])
		c, e := binary.NativeEndian.Uint64(s[16:]), binary.NativeEndian.Uint64(s[24:])
		storeWord(&d[0], a)
		storeWord(&d[8], b)
		storeWord(&d[16], c)
		storeWord(&d[24], e)
	}
	for ; i+8 <= n; i += 8 {
		storeWord(&dst[i], binary.NativeEndian.Uint64(src[i:i+8]))
	}
	for ; i < n; i++ {
		dst[i] = src[i]
	}
}

// loadFrom copies src, shared memory, into dst, loading every aligned word
// of src whole when len(dst) <= transport.WordAtomicWrite, as storeTo.
func loadFrom(dst, src []byte) {
	n := len(dst)
	if n > transport.WordAtomicWrite {
		copy(dst, src)
		return
	}
	if n == 0 {
		return
	}
	src = src[:n]
	i := 0
	for head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(src))) & 7); i < head && i < n; i++ {
		dst[i] = src[i]
	}
	if n-i >= wideMin {
		if uintptr(unsafe.Pointer(&src[i]))&15 != 0 {
			binary.NativeEndian.PutUint64(dst[i:i+8], loadWord(&src[i]))
			i += 8
		}
		i += loadWide(dst[i:], src[i:])
	}
	for ; i+32 <= n; i += 32 {
		s, d := src[i:i+32], dst[i:i+32]
		a, b, c, e := loadWord(&s[0]), loadWord(&s[8]), loadWord(&s[16]), loadWord(&s[24])
		binary.NativeEndian.PutUint64(d, a)
		binary.NativeEndian.PutUint64(d[8:], b)
		binary.NativeEndian.PutUint64(d[16:], c)
		binary.NativeEndian.PutUint64(d[24:], e)
	}
	for ; i+8 <= n; i += 8 {
		binary.NativeEndian.PutUint64(dst[i:i+8], loadWord(&src[i]))
	}
	for ; i < n; i++ {
		dst[i] = src[i]
	}
}

// Wait returns once operation seq toward peer is complete, which it is as
// soon as it was posted: it never blocks. It returns the errors (joined) of
// operations up to seq not yet reported by Wait or Flush, each an
// *ftrma.OpError; the peer-down error (wrapping ftrma.ErrProcFailed) if
// operations toward peer failed since; ftrma.ErrInvalid for a sequence never
// posted; ftrma.ErrClosed after Close.
func (t *Transport) Wait(ctx context.Context, peer ftrma.Rank, seq transport.Seq) error {
	p, err := t.peer("wait", peer)
	if err != nil {
		return err
	}
	if seq > p.comp.Posted() {
		return &ftrma.OpError{Op: "wait", Rank: peer, Err: fmt.Errorf("%w: shm transport: sequence %d not posted", ftrma.ErrInvalid, seq)}
	}
	return p.comp.Wait(ctx, seq, 0)
}

// Test reports whether operation seq toward peer is complete, and then the
// error Wait would return (transport.Tester). It never blocks.
func (t *Transport) Test(peer ftrma.Rank, seq transport.Seq) (bool, error) {
	p, err := t.peer("test", peer)
	if err != nil {
		return true, err
	}
	return p.comp.Test(seq)
}

// Flush is Wait for every operation posted toward peer; it never blocks.
// Toward a peer that is down it fails with an error wrapping
// ftrma.ErrProcFailed even when nothing is pending. Flush runs a full
// memory barrier (fullFence): an operation on the fast path ends with plain
// stores, and what this rank loads after a Flush must come after what it
// stored before, as MPI's flush orders it (of two ranks that each put to
// the other's window, flush, and then get, at least one sees the other's
// put). Wait and Test need none: the data a Write stored is visible to
// every later load of any rank as soon as the store buffer drains, in
// order (x86-TSO), and every way to tell another rank that it is there
// (Send, an atomic, Flush) is a barrier of its own.
func (t *Transport) Flush(ctx context.Context, peer ftrma.Rank) error {
	p, err := t.peer("flush", peer)
	if err != nil {
		return err
	}
	fullFence()
	return p.comp.Flush(ctx, 0)
}

// Push does nothing: operations take effect when posted.
func (t *Transport) Push(peer ftrma.Rank) {}
