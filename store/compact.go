package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
)

// Compaction. A chunk returns to the table only when none of its blocks is
// live, so one long-lived value would pin a whole chunk. Every rank's
// housekeeping, every compactEvery, looks for sparse chunks of its own heap
// — sealed (or of a failed writer), with live bytes no more than a quarter
// of their size — and moves the records still live in them, one key at a
// time, into fresh blocks: under the key's lock at this rank only (its slot's
// lock word, compare-and-swap free → this rank, and the key's process lock),
// it copies the record, points the slot's descriptor at the copy (same
// version, same bytes: readers and the other replicas see no change) and
// frees the old block; the chunk drains and is reclaimed. A writer that meets
// the lock backs off as from any live holder; a rank that dies in the middle
// leaves either descriptor, both whole. Key blocks stay where they are (a
// key's block lives as long as its slot; they are small and written once,
// when the key first comes to the rank).

const compactEvery = 50 * time.Millisecond

// compactNow has the housekeeping compact at once and returns the records it
// moved (for tests: compaction, like attaching chunks, is the housekeeping
// goroutine's alone).
func (s *Store) compactNow() int {
	reply := make(chan int)
	select {
	case s.kick <- reply:
		return <-reply
	case <-s.done:
		return 0
	}
}

// compact moves the live records of this rank's sparse chunks; it returns
// how many it moved.
func (o *op) compact(ctx context.Context) (moved int) {
	sparse := map[uint64]bool{} // regions of sparse chunks
	for e := range int(o.heap.entries.Load()) {
		owner := o.entry(e, chunkOwner).Load()
		if owner == chunkNotReady || owner == 0 {
			continue
		}
		live, size := o.entry(e, chunkLive).Load(), o.entry(e, chunkSize).Load()
		done := owner&sealed != 0 || o.failed(ftrma.Rank(owner&^sealed)-1)
		if done && live > 0 && live*4 <= size {
			sparse[o.entry(e, chunkAddr).Load()>>40] = true
		}
	}
	if len(sparse) == 0 {
		return 0
	}
	for i := range o.opt.Slots {
		if ctx.Err() != nil {
			return moved
		}
		base := hdrWords + i*slotWords
		a := atomic.LoadUint64(&o.table[base+slotCurAddr])
		if a == 0 || !sparse[a>>40] {
			continue
		}
		if o.relocate(ctx, i) {
			moved++
		}
	}
	return moved
}

// relocate moves the record of this rank's slot i into a fresh block.
func (o *op) relocate(ctx context.Context, i int) bool {
	base := hdrWords + i*slotWords
	at := o.slotAddr(o.me, i)
	ka, h := o.ownSlot(ctx, i)
	if ka == 0 || ka == slotTomb || h == 0 {
		return false
	}
	id, err := o.ownKey(ctx, h, ka)
	if err != nil || !o.keys.tryLock(id) {
		return false
	}
	defer o.keys.unlock(id)
	lw := localWord{&o.table[base+slotLock]}
	free := lw.Load()
	if lockOwner(free) >= 0 || !o.casOwn(lw, at+slotLock*8, free, lockWord(lockVersion(free), int(o.me))) {
		return false // a writer holds it
	}
	defer func() {
		var w [8]byte
		putWords(w[:], free)
		lw := o.live() // see live
		lw.Put(o.me, at+slotLock*8, w[:])
		lw.Flush(ctx, o.me)
	}()
	// Under the lock nobody else changes the slot.
	if atomic.LoadUint64(&o.table[base+slotKey]) != ka || atomic.LoadUint64(&o.table[base+slotPAddr]) != 0 {
		return false
	}
	old, n, v := atomic.LoadUint64(&o.table[base+slotCurAddr]), atomic.LoadUint64(&o.table[base+slotCurLen]), atomic.LoadUint64(&o.table[base+slotCurVer])
	if old == 0 || n > o.recordLimit() {
		return false
	}
	rec := make([]byte, n)
	if o.v().w.Get(o.me, old, rec) != nil || o.v().w.Flush(ctx, o.me) != nil {
		return false
	}
	if r, ok := decodeRecord(rec); !ok || !r.is(id) || r.version != v {
		return false
	}
	addr, err := o.allocNow(ctx, int(n))
	if err != nil {
		return false
	}
	if o.v().w.Put(o.me, addr, rec) != nil || o.v().w.Flush(ctx, o.me) != nil {
		o.free(ctx, o.me, addr, n)
		return false
	}
	var d [8]byte
	putWords(d[:], addr)
	if o.v().w.Put(o.me, at+slotCurAddr*8, d[:]) != nil || o.v().w.Flush(ctx, o.me) != nil {
		return false
	}
	o.free(ctx, o.me, old, n)
	return true
}
