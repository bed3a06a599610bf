package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// The heap. Each rank attaches chunks of memory to the store's window ahead
// of demand and lists them in its chunk table. A writer claims a free chunk at
// a rank with one remote compare-and-swap on the entry's owner word and then
// allocates in it alone by bumping an offset, with no further coordination.
// Every chunk entry counts the bytes of its live blocks: an allocation adds
// its size, and whoever replaces or deletes a value subtracts the old block's
// size (a remote fetch-and-add that travels with the write, so freeing needs
// nobody's help, also when the block's writer has failed). A writer seals a
// chunk it has filled; the rank's housekeeping hands sealed chunks whose
// count has dropped to zero — and chunks of failed writers, once empty —
// back to the table for anyone to claim. A value larger than half a chunk gets
// a chunk of its own, sealed at once. When a rank has no free chunk, a writer
// writes the size it needs to the rank's want word; the rank's housekeeping
// sees it and attaches one. Growing and reclaiming are the owner's own acts on
// its own memory; no request is served.

const sealed = 1 << 62 // in a chunk's owner word: the writer allocates no more in it

type arena struct {
	mu  waitLock
	cur *ownedChunk // the chunk being filled at that rank
}

type ownedChunk struct {
	entry            int
	addr, size, next uint64
}

func (o *op) entryAddr(r ftrma.Rank, e, w int) uint64 {
	return o.v().tables[r] + o.chunk0 + uint64(e*chunkBytes+w*8)
}

// alloc returns the address of a block of n bytes (a multiple of 8) at rank
// r and counts it live at its chunk. The count's update is posted; it
// completes with the next flush toward r, before any free of the block can
// be posted.
func (o *op) alloc(ctx context.Context, r ftrma.Rank, n int) (uint64, error) {
	return o.allocIn(ctx, o.v().arenas[r], r, n, true)
}

// allocNow is alloc at this rank by its own housekeeping, which must not
// wait for a chunk (it is the one that attaches them) nor for a writer that
// waits for one (so it has an arena of its own). It fails with ErrFull when
// no free chunk is at hand.
func (o *op) allocNow(ctx context.Context, n int) (uint64, error) {
	a, err := o.allocIn(ctx, &o.ownArena, o.me, n, false)
	if errors.Is(err, ErrFull) && o.attachChunk(o.opt.ChunkSize) {
		a, err = o.allocIn(ctx, &o.ownArena, o.me, n, false) // a chunk of its own making
	}
	return a, err
}

// allocKey is alloc for a key block: key blocks live as long as their keys'
// slots, so they get chunks of their own (keyArenas) rather than pin the
// chunks that values churn through (see compact).
func (o *op) allocKey(ctx context.Context, r ftrma.Rank, n int) (uint64, error) {
	return o.allocIn(ctx, o.v().keyArenas[r], r, n, true)
}

// allocIn allocates n bytes at r from arena a; wait says whether it may ask
// r for a chunk and wait for one (claimChunk).
func (o *op) allocIn(ctx context.Context, a *arena, r ftrma.Rank, n int, wait bool) (uint64, error) {
	if err := a.mu.lock(ctx); err != nil {
		return 0, err
	}
	defer a.mu.unlock()
	size := uint64(n)
	if c := a.cur; c != nil && c.next+size <= c.size {
		addr := c.addr + c.next
		c.next += size
		return addr, o.v().w.Accumulate(r, o.entryAddr(r, c.entry, chunkLive), []int64{int64(size)}, window.Sum)
	}
	if a.cur != nil {
		o.seal(r, a.cur.entry)
		a.cur = nil
	}
	lo, hi := uint64(o.opt.ChunkSize), uint64(o.opt.ChunkSize)
	big := size > uint64(o.opt.ChunkSize)/2
	if big {
		lo = (size + 4095) &^ 4095
		hi = 2 * lo
	}
	c, err := o.claimChunk(ctx, r, lo, hi, wait)
	if err != nil {
		return 0, err
	}
	c.next = size
	if err := o.v().w.Accumulate(r, o.entryAddr(r, c.entry, chunkLive), []int64{int64(size)}, window.Sum); err != nil {
		o.seal(r, c.entry) // claimed, and given up: its rank reclaims it
		return 0, err
	}
	if big {
		o.seal(r, c.entry)
	} else {
		a.cur = c
	}
	return c.addr, nil
}

// seal marks chunk entry of rank r filled: a release, through the current
// window (see live).
func (o *op) seal(r ftrma.Rank, entry int) {
	var b [8]byte
	putWords(b[:], sealed|uint64(o.me+1))
	if lw := o.liveAt(r); lw != nil {
		lw.Put(r, o.entryAddr(r, entry, chunkOwner), b[:])
		lw.Push(r)
	}
}

// free subtracts a block of n bytes at rank r from its chunk's live count;
// the update completes with the next flush toward r. When the operation's
// window was rebuilt under it, the update goes through the current one
// (pushed), as long as r is the same process there (sameProcess): else the
// block's chunk was counted in a process that is gone (DESIGN.md F5).
func (o *op) free(ctx context.Context, r ftrma.Rank, addr, n uint64) {
	o.freeBlock(ctx, r, addr, n, true)
}

// freeBehind is free for a block that a write posted just before, in the
// same batch, stops naming (a new descriptor, a tombstone): the update goes
// behind that write, through the operation's window only. When that window
// was rebuilt, the write could not be posted either, or the update could
// not follow it: the block stays counted (a leak), and is never counted
// free while a slot still names it (F32).
func (o *op) freeBehind(ctx context.Context, r ftrma.Rank, addr, n uint64) {
	o.freeBlock(ctx, r, addr, n, false)
}

func (o *op) freeBlock(ctx context.Context, r ftrma.Rank, addr, n uint64, anyWindow bool) {
	if addr == 0 || n == 0 || o.failed(r) {
		return
	}
	e, ok := o.chunkOf(ctx, r, addr)
	if !ok {
		return
	}
	at, delta := o.entryAddr(r, e, chunkLive), []int64{-int64(n)}
	if err := o.v().w.Accumulate(r, at, delta, window.Sum); errors.Is(err, window.ErrRebuilt) && anyWindow && o.sameProcess(r) {
		if w := o.live(); w.Accumulate(r, at, delta, window.Sum) == nil {
			w.Push(r)
		}
	}
}

// chunkOf finds the chunk entry of a block at rank r. Entries never change
// their memory, so what is learned is kept.
func (o *op) chunkOf(ctx context.Context, r ftrma.Rank, addr uint64) (int, bool) {
	region := addr >> 40
	o.cache.Lock()
	e, ok := o.cache.chunk[regionRef{o.v().epoch, r, region}]
	o.cache.Unlock()
	if ok {
		return e, true
	}
	if _, err := o.readChunkTable(ctx, r); err != nil {
		return 0, false
	}
	o.cache.Lock()
	e, ok = o.cache.chunk[regionRef{o.v().epoch, r, region}]
	o.cache.Unlock()
	return e, ok
}

func (o *op) readChunkTable(ctx context.Context, r ftrma.Rank) ([]byte, error) {
	tbl := make([]byte, o.opt.Chunks*chunkBytes)
	if err := o.v().w.Get(r, o.v().tables[r]+o.chunk0, tbl); err != nil {
		return nil, err
	}
	if err := o.flush(ctx, r); err != nil {
		return nil, err
	}
	o.cache.Lock()
	for e := range o.opt.Chunks {
		if a := word(tbl, e*chunkWords+chunkAddr); a != 0 {
			o.cache.chunk[regionRef{o.v().epoch, r, a >> 40}] = e
		}
	}
	o.cache.Unlock()
	return tbl, nil
}

// claimChunk takes a free chunk of size in [lo, hi] at rank r (the smallest
// such), asking r to attach one when there is none. It fails with ErrFull
// when r has no chunk to give: its chunk table is full, it answered a want
// of this call's without attaching anything (no memory, no room in its
// transport's region table), or it attached nothing for attachBound. With
// wait false it fails at once when no free chunk is at hand.
func (o *op) claimChunk(ctx context.Context, r ftrma.Rank, lo, hi uint64, wait bool) (*ownedChunk, error) {
	full := func(why string, args ...any) error {
		return &ftrma.OpError{Op: "store alloc", Rank: r, Err: fmt.Errorf("%w: rank %d: %s", ErrFull, r, fmt.Sprintf(why, args...))}
	}
	start := time.Now()
	asked := false // a want of this call's is out
	for i := 0; ; i++ {
		var hdr [3 * 8]byte
		if err := o.v().w.Get(r, o.v().tables[r], hdr[:]); err != nil {
			return nil, err
		}
		tbl, err := o.readChunkTable(ctx, r) // flushes the header's read too
		if err != nil {
			return nil, err
		}
		best, empty := -1, false
		for e := range o.opt.Chunks {
			owner, sz := word(tbl, e*chunkWords+chunkOwner), word(tbl, e*chunkWords+chunkSize)
			if owner == 0 && sz >= lo && sz <= hi && (best < 0 || sz < word(tbl, best*chunkWords+chunkSize)) {
				best = e
			}
			if owner == chunkNotReady && word(tbl, e*chunkWords+chunkAddr) == 0 {
				empty = true
			}
			if o.reclaimable(owner, word(tbl, e*chunkWords+chunkLive)) {
				empty = true // the owner hands it back at its next tick
			}
		}
		if best >= 0 {
			var got int64
			if err := o.v().w.CompareAndSwap(r, o.entryAddr(r, best, chunkOwner), 0, int64(o.me)+1, &got); err != nil {
				return nil, err
			}
			if hook := testHookPosted.get(); hook != nil {
				hook(ctx, o.Store, "chunk", "")
			}
			if err := o.flush(ctx, r); err != nil {
				if o.completed(ctx, r, err) && got == 0 {
					// Taken all the same (through a window rebuilt
					// meanwhile, or as ctx ended): sealed empty, its rank
					// reclaims it.
					o.seal(r, best)
				}
				return nil, err
			}
			if got == 0 {
				return &ownedChunk{entry: best, addr: word(tbl, best*chunkWords+chunkAddr), size: word(tbl, best*chunkWords+chunkSize)}, nil
			}
			continue // somebody else took it
		}
		switch want, noRoom := word(hdr[:], hdrWant), word(hdr[:], hdrNoRoom); {
		case !wait:
			return nil, full("no free chunk at hand")
		case !empty:
			return nil, full("all %d chunks attached (Config.Chunks)", o.opt.Chunks)
		case asked && want == 0 && noRoom != 0:
			return nil, full("could not attach %d more bytes of heap (out of memory, or its transport's region table is full)", noRoom)
		case time.Since(start) > attachBound:
			return nil, full("attached no heap memory for %v", attachBound)
		}
		var want [8]byte
		binary.LittleEndian.PutUint64(want[:], lo)
		if err := o.v().w.Put(r, o.v().tables[r]+hdrWant*8, want[:]); err != nil {
			return nil, err
		}
		if err := o.flush(ctx, r); err != nil {
			return nil, err
		}
		asked = true
		t := time.NewTimer(time.Duration(1+i%10) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// attachBound bounds how long a writer waits for a live rank to attach heap
// memory it asked for (the rank's housekeeping answers within milliseconds).
const attachBound = 5 * time.Second

// attachChunk attaches a chunk of size bytes to this rank's heap and lists
// it as free; false when the chunk table is full.
func (o *op) attachChunk(size int) bool {
	for e := range o.opt.Chunks {
		if o.entry(e, chunkOwner).Load() != chunkNotReady || o.entry(e, chunkAddr).Load() != 0 {
			continue
		}
		mem, err := o.v().w.Alloc(size)
		if err != nil {
			return false
		}
		addr, err := o.v().w.Attach(mem)
		if err != nil {
			o.v().w.Release(mem)
			return false
		}
		o.heap.Lock()
		o.heap.mem = append(o.heap.mem, mem)
		o.heap.addrs = append(o.heap.addrs, addr)
		o.heap.attached += uint64(size)
		o.heap.entries.Store(int64(max(int(o.heap.entries.Load()), e+1)))
		o.heap.Unlock()
		o.entry(e, chunkSize).Store(uint64(size))
		o.entry(e, chunkAddr).Store(addr)
		o.entry(e, chunkOwner).Store(0)
		return true
	}
	return false
}

// entry is word w of this rank's chunk table entry e.
func (s *Store) entry(e, w int) localWord {
	return localWord{&s.table[int(s.chunk0/8)+e*chunkWords+w]}
}

// localWord is a word of this rank's exposed memory, accessed atomically
// because remote operations change it concurrently.
type localWord struct{ p *uint64 }

func (w localWord) Load() uint64                    { return atomic.LoadUint64(w.p) }
func (w localWord) Store(v uint64)                  { atomic.StoreUint64(w.p, v) }
func (w localWord) CompareAndSwap(o, n uint64) bool { return atomic.CompareAndSwapUint64(w.p, o, n) }

// casOwn compare-and-swaps a word of this rank's own memory that peers
// update with remote atomics: with the CPU when the transport's atomics are
// atomic with it, else through the window (the device) like a peer does.
func (o *op) casOwn(w localWord, addr uint64, old, new uint64) bool {
	if o.v().w.LocalAtomics() {
		return w.CompareAndSwap(old, new)
	}
	var got int64
	if err := o.v().w.CompareAndSwap(o.me, addr, int64(old), int64(new), &got); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), localBound)
	defer cancel()
	return o.v().w.Flush(ctx, o.me) == nil && uint64(got) == old
}

// grow reclaims empty chunks (none while a snapshot's copy pins the heap:
// cutCopy), keeps Reserve free chunks attached and answers a writer's want.
func (o *op) grow() (busy bool) {
	free := 0
	for e := range int(o.heap.entries.Load()) {
		owner := o.entry(e, chunkOwner).Load()
		if owner == chunkNotReady {
			continue
		}
		if o.heapPins.Load() == 0 && o.reclaimable(owner, o.entry(e, chunkLive).Load()) {
			if o.casOwn(o.entry(e, chunkOwner), o.entryAddr(o.me, e, chunkOwner), owner, 0) {
				owner = 0
			}
		}
		if owner == 0 && o.entry(e, chunkSize).Load() == uint64(o.opt.ChunkSize) {
			free++
		}
	}
	for ; free < o.opt.Reserve; free++ {
		if !o.attachChunk(o.opt.ChunkSize) {
			break
		}
		busy = true
	}
	if want := atomic.LoadUint64(&o.table[hdrWant]); want != 0 {
		// The answer to a want: a new chunk, or the size that could not be
		// attached, which tells the writers to give up (ErrFull).
		size := max((want+4095)&^4095, uint64(o.opt.ChunkSize))
		noRoom := size
		if o.hasFree(want) || o.attachChunk(int(size)) {
			noRoom = 0
		}
		atomic.StoreUint64(&o.table[hdrNoRoom], noRoom)
		o.casOwn(localWord{&o.table[hdrWant]}, o.v().tables[o.me]+hdrWant*8, want, 0)
		busy = true
	}
	return busy
}

// reclaimable reports whether a chunk whose owner word is owner and whose
// live count is live goes back to the table: empty, and sealed or its
// writer failed.
func (o *op) reclaimable(owner, live uint64) bool {
	return owner != 0 && owner != chunkNotReady && live == 0 &&
		(owner&sealed != 0 || o.failed(ftrma.Rank(owner&^sealed)-1))
}

// hasFree reports whether this rank has a free chunk that a writer who asked
// for want bytes can claim (see alloc's sizes).
func (s *Store) hasFree(want uint64) bool {
	for e := range int(s.heap.entries.Load()) {
		if s.entry(e, chunkOwner).Load() != 0 {
			continue
		}
		sz := s.entry(e, chunkSize).Load()
		if sz == want || want > uint64(s.opt.ChunkSize)/2 && sz >= want && sz <= 2*want {
			return true
		}
	}
	return false
}

// heapLive is the bytes of live blocks in this rank's heap.
func (s *Store) heapLive() uint64 {
	var n uint64
	for e := range int(s.heap.entries.Load()) {
		if s.entry(e, chunkOwner).Load() != chunkNotReady {
			n += s.entry(e, chunkLive).Load()
		}
	}
	return n
}
