package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
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
	mu  sync.Mutex
	cur *ownedChunk // the chunk being filled at that rank
}

type ownedChunk struct {
	entry            int
	addr, size, next uint64
}

func (s *op) entryAddr(r ftrma.Rank, e, w int) uint64 {
	return s.v().tables[r] + s.chunk0 + uint64(e*chunkBytes+w*8)
}

// alloc returns the address of a block of n bytes (a multiple of 8) at rank
// r and counts it live at its chunk. The count's update is posted; it
// completes with the next flush toward r, before any free of the block can
// be posted.
func (s *op) alloc(ctx context.Context, r ftrma.Rank, n int) (uint64, error) {
	return s.allocIn(ctx, s.v().arenas[r], r, n)
}

// allocNow is alloc at this rank by its own housekeeping, which must not
// wait for a chunk (it is the one that attaches them) nor for a writer that
// waits for one (so it has an arena of its own). It fails with ErrFull when
// no free chunk is at hand.
func (s *op) allocNow(ctx context.Context, n int) (uint64, error) {
	ctx = context.WithValue(ctx, noWaitKey{}, true)
	a, err := s.allocIn(ctx, &s.ownArena, s.me, n)
	if errors.Is(err, ErrFull) && s.attachChunk(s.opt.ChunkSize) {
		a, err = s.allocIn(ctx, &s.ownArena, s.me, n) // a chunk of its own making
	}
	return a, err
}

// noWaitKey in a context tells claimChunk not to ask for a chunk and wait.
type noWaitKey struct{}

// allocKey is alloc for a key block: key blocks live as long as their keys'
// slots, so they get chunks of their own (keyArenas) rather than pin the
// chunks that values churn through (see compact).
func (s *op) allocKey(ctx context.Context, r ftrma.Rank, n int) (uint64, error) {
	return s.allocIn(ctx, s.v().keyArenas[r], r, n)
}

func (s *op) allocIn(ctx context.Context, a *arena, r ftrma.Rank, n int) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	size := uint64(n)
	if c := a.cur; c != nil && c.next+size <= c.size {
		addr := c.addr + c.next
		c.next += size
		return addr, s.v().w.Accumulate(r, s.entryAddr(r, c.entry, chunkLive), []int64{int64(size)}, window.Sum)
	}
	if a.cur != nil {
		s.seal(r, a.cur.entry)
		a.cur = nil
	}
	lo, hi := uint64(s.opt.ChunkSize), uint64(s.opt.ChunkSize)
	big := size > uint64(s.opt.ChunkSize)/2
	if big {
		lo = (size + 4095) &^ 4095
		hi = 2 * lo
	}
	c, err := s.claimChunk(ctx, r, lo, hi)
	if err != nil {
		return 0, err
	}
	c.next = size
	if err := s.v().w.Accumulate(r, s.entryAddr(r, c.entry, chunkLive), []int64{int64(size)}, window.Sum); err != nil {
		s.seal(r, c.entry) // claimed, and given up: its rank reclaims it
		return 0, err
	}
	if big {
		s.seal(r, c.entry)
	} else {
		a.cur = c
	}
	return c.addr, nil
}

// seal marks chunk entry of rank r filled: a release, through the current
// window (see live).
func (s *op) seal(r ftrma.Rank, entry int) {
	var b [8]byte
	putWords(b[:], sealed|uint64(s.me+1))
	s.live().Put(r, s.entryAddr(r, entry, chunkOwner), b[:])
	s.live().Push(r)
}

// free subtracts a block of n bytes at rank r from its chunk's live count;
// the update completes with the next flush toward r.
func (s *op) free(ctx context.Context, r ftrma.Rank, addr, n uint64) {
	if addr == 0 || n == 0 || s.failed(r) {
		return
	}
	e, ok := s.chunkOf(ctx, r, addr)
	if !ok {
		return
	}
	s.v().w.Accumulate(r, s.entryAddr(r, e, chunkLive), []int64{-int64(n)}, window.Sum)
}

// chunkOf finds the chunk entry of a block at rank r. Entries never change
// their memory, so what is learned is kept.
func (s *op) chunkOf(ctx context.Context, r ftrma.Rank, addr uint64) (int, bool) {
	region := addr >> 40
	s.cache.Lock()
	e, ok := s.cache.chunk[regionRef{r, region}]
	s.cache.Unlock()
	if ok {
		return e, true
	}
	if _, err := s.readChunkTable(ctx, r); err != nil {
		return 0, false
	}
	s.cache.Lock()
	e, ok = s.cache.chunk[regionRef{r, region}]
	s.cache.Unlock()
	return e, ok
}

func (s *op) readChunkTable(ctx context.Context, r ftrma.Rank) ([]byte, error) {
	tbl := make([]byte, s.opt.Chunks*chunkBytes)
	if err := s.v().w.Get(r, s.v().tables[r]+s.chunk0, tbl); err != nil {
		return nil, err
	}
	if err := s.flush(ctx, r); err != nil {
		return nil, err
	}
	s.cache.Lock()
	for e := range s.opt.Chunks {
		if a := word(tbl, e*chunkWords+chunkAddr); a != 0 {
			s.cache.chunk[regionRef{r, a >> 40}] = e
		}
	}
	s.cache.Unlock()
	return tbl, nil
}

// claimChunk takes a free chunk of size in [lo, hi] at rank r (the smallest
// such), asking r to attach one when there is none. It fails with ErrFull
// when r has no chunk to give: its chunk table is full, it answered a want
// of this call's without attaching anything (no memory, no room in its
// transport's region table), or it attached nothing for attachBound.
func (s *op) claimChunk(ctx context.Context, r ftrma.Rank, lo, hi uint64) (*ownedChunk, error) {
	full := func(why string, args ...any) error {
		return &ftrma.OpError{Op: "store alloc", Rank: r, Err: fmt.Errorf("%w: rank %d: %s", ErrFull, r, fmt.Sprintf(why, args...))}
	}
	start := time.Now()
	asked := false // a want of this call's is out
	for i := 0; ; i++ {
		var hdr [3 * 8]byte
		if err := s.v().w.Get(r, s.v().tables[r], hdr[:]); err != nil {
			return nil, err
		}
		tbl, err := s.readChunkTable(ctx, r) // flushes the header's read too
		if err != nil {
			return nil, err
		}
		best, empty := -1, false
		for e := range s.opt.Chunks {
			owner, sz := word(tbl, e*chunkWords+chunkOwner), word(tbl, e*chunkWords+chunkSize)
			if owner == 0 && sz >= lo && sz <= hi && (best < 0 || sz < word(tbl, best*chunkWords+chunkSize)) {
				best = e
			}
			if owner == chunkNotReady && word(tbl, e*chunkWords+chunkAddr) == 0 {
				empty = true
			}
			if s.reclaimable(owner, word(tbl, e*chunkWords+chunkLive)) {
				empty = true // the owner hands it back at its next tick
			}
		}
		if best >= 0 {
			var got int64
			if err := s.v().w.CompareAndSwap(r, s.entryAddr(r, best, chunkOwner), 0, int64(s.me)+1, &got); err != nil {
				return nil, err
			}
			if hook := testHookPosted.get(); hook != nil {
				hook(ctx, s.Store, "chunk", "")
			}
			if err := s.flush(ctx, r); err != nil {
				if s.completed(ctx, r, err) && got == 0 {
					// Taken all the same (through a window rebuilt
					// meanwhile, or as ctx ended): sealed empty, its rank
					// reclaims it.
					s.seal(r, best)
				}
				return nil, err
			}
			if got == 0 {
				return &ownedChunk{entry: best, addr: word(tbl, best*chunkWords+chunkAddr), size: word(tbl, best*chunkWords+chunkSize)}, nil
			}
			continue // somebody else took it
		}
		switch want, noRoom := word(hdr[:], hdrWant), word(hdr[:], hdrNoRoom); {
		case ctx.Value(noWaitKey{}) != nil:
			return nil, full("no free chunk at hand")
		case !empty:
			return nil, full("all %d chunks attached (Options.Chunks)", s.opt.Chunks)
		case asked && want == 0 && noRoom != 0:
			return nil, full("could not attach %d more bytes of heap (out of memory, or its transport's region table is full)", noRoom)
		case time.Since(start) > attachBound:
			return nil, full("attached no heap memory for %v", attachBound)
		}
		var want [8]byte
		binary.LittleEndian.PutUint64(want[:], lo)
		if err := s.v().w.Put(r, s.v().tables[r]+hdrWant*8, want[:]); err != nil {
			return nil, err
		}
		if err := s.flush(ctx, r); err != nil {
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
func (s *op) attachChunk(size int) bool {
	for e := range s.opt.Chunks {
		if s.entry(e, chunkOwner).Load() != chunkNotReady || s.entry(e, chunkAddr).Load() != 0 {
			continue
		}
		mem, err := s.v().w.Alloc(size)
		if err != nil {
			return false
		}
		addr, err := s.v().w.Attach(mem)
		if err != nil {
			s.v().w.Release(mem)
			return false
		}
		s.heap.Lock()
		s.heap.mem = append(s.heap.mem, mem)
		s.heap.attached += uint64(size)
		s.heap.entries.Store(int64(max(int(s.heap.entries.Load()), e+1)))
		s.heap.Unlock()
		s.entry(e, chunkSize).Store(uint64(size))
		s.entry(e, chunkAddr).Store(addr)
		s.entry(e, chunkOwner).Store(0)
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
func (s *op) casOwn(w localWord, addr uint64, old, new uint64) bool {
	if s.v().w.LocalAtomics() {
		return w.CompareAndSwap(old, new)
	}
	var got int64
	if err := s.v().w.CompareAndSwap(s.me, addr, int64(old), int64(new), &got); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), localBound)
	defer cancel()
	return s.v().w.Flush(ctx, s.me) == nil && uint64(got) == old
}

// grow reclaims empty chunks, keeps Reserve free chunks attached and
// answers a writer's want.
func (s *op) grow() (busy bool) {
	free := 0
	for e := range int(s.heap.entries.Load()) {
		owner := s.entry(e, chunkOwner).Load()
		if owner == chunkNotReady {
			continue
		}
		if s.reclaimable(owner, s.entry(e, chunkLive).Load()) {
			if s.casOwn(s.entry(e, chunkOwner), s.entryAddr(s.me, e, chunkOwner), owner, 0) {
				owner = 0
			}
		}
		if owner == 0 && s.entry(e, chunkSize).Load() == uint64(s.opt.ChunkSize) {
			free++
		}
	}
	for ; free < s.opt.Reserve; free++ {
		if !s.attachChunk(s.opt.ChunkSize) {
			break
		}
		busy = true
	}
	if want := atomic.LoadUint64(&s.table[hdrWant]); want != 0 {
		// The answer to a want: a new chunk, or the size that could not be
		// attached, which tells the writers to give up (ErrFull).
		size := max((want+4095)&^4095, uint64(s.opt.ChunkSize))
		noRoom := size
		if s.hasFree(want) || s.attachChunk(int(size)) {
			noRoom = 0
		}
		atomic.StoreUint64(&s.table[hdrNoRoom], noRoom)
		s.casOwn(localWord{&s.table[hdrWant]}, s.v().tables[s.me]+hdrWant*8, want, 0)
		busy = true
	}
	return busy
}

// reclaimable reports whether a chunk whose owner word is owner and whose
// live count is live goes back to the table: empty, and sealed or its
// writer failed.
func (s *op) reclaimable(owner, live uint64) bool {
	return owner != 0 && owner != chunkNotReady && live == 0 &&
		(owner&sealed != 0 || s.failed(ftrma.Rank(owner&^sealed)-1))
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
