package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
)

// Localized recovery. Every rank's housekeeping goroutine watches the
// runtime's failure knowledge (local, no messages). When ranks fail, it scans
// this rank's own slot table — local memory, no communication — for keys
// whose placement changed or whose lock a failed rank holds. Only a rank that
// holds such a key acts, and only for those keys: it reads the key's live
// replicas like a Get, and if they disagree (a new replica without the key,
// a write cut short, a transaction left pending) it makes them agree under
// the key's lock, restoring Copies replicas. The key's holders act in
// placement order, the later ones after a short delay, so that usually the
// first one does the work and the others find the key whole. Every other
// rank goes on working.

// staggerStep delays the n-th holder of a key before it checks the key.
const staggerStep = 5 * time.Millisecond

func (s *Store) housekeeping() {
	defer close(s.done)
	known := make([]bool, s.n)
	work := make(chan []bool, 64)
	recDone := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop: // work under way (recovery, compaction) ends with the store
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer close(recDone)
		for old := range work {
			// A recovery that a new view cut short starts again in it.
			for done := false; !done && ctx.Err() == nil; {
				leave := s.enter()
				o := s.begin()
				done = o.recover(ctx, old)
				o.end()
				leave()
			}
		}
	}()
	defer func() {
		cancel()
		close(work)
		<-recDone
	}()
	idle := 0
	var asked uint64
	compacted := time.Now()
	var last *view
	for {
		o := s.begin()
		v := o.v()
		if v != last {
			// Ranks a new view counts live again (replaced) are no longer
			// known failed; their new processes hold nothing to recover.
			for r := range s.n {
				known[r] = known[r] && v.c.ProcFailed(ftrma.Rank(r))
			}
			last = v
		}
		failCh := v.c.FailuresChanged() // before reading the knowledge it announces
		// Compaction, which moves records, holds the gate, and is left for
		// the next tick while a snapshot has it closed. The rest must go on
		// during a snapshot: other ranks' puts, which their snapshots wait
		// for, may be waiting for this rank to attach heap (grow) or to end
		// a lease (DESIGN.md §8.2).
		busy := o.grow()
		o.markSeen()
		s.expireLeases()
		asked = o.answerAsks(ctx, asked)
		if time.Since(compacted) >= compactEvery && s.gate.TryRLock() {
			busy = o.compact(ctx) > 0 || busy
			s.gate.RUnlock()
			compacted = time.Now()
		}
		var fresh bool
		for r := range s.n {
			if !known[r] && o.failed(ftrma.Rank(r)) {
				fresh = true
			}
		}
		if fresh {
			old := slices.Clone(known)
			for r := range s.n {
				known[r] = known[r] || o.failed(ftrma.Rank(r))
			}
			o.freeFailedClaim()
			work <- old
			busy = true
		}
		o.end()
		if busy {
			idle = 0
		} else {
			idle = min(idle+1, 5)
		}
		t := time.NewTimer(time.Duration(1+idle) * time.Millisecond)
		select {
		case <-s.stop:
			t.Stop()
			return
		case reply := <-s.kick:
			t.Stop()
			moved := 0
			if s.gate.TryRLock() { // else a snapshot is being taken: nothing moved now
				o := s.begin()
				moved = o.compact(ctx)
				o.end()
				s.gate.RUnlock()
			}
			reply <- moved
			compacted = time.Now()
		case <-failCh:
			t.Stop() // a failure: recovery starts now, not at the next tick
		case <-t.C:
		}
	}
}

// freeFailedClaim gives back this rank's claim lock when a failed rank
// holds it, at once rather than when the next claimer takes it over
// (lockClaims): nothing a failed rank took stays taken. The claim it was
// making, if any, is a slot with a key and no value, which the next write of
// the key uses and a deletion frees (DESIGN.md F5).
func (o *op) freeFailedClaim() {
	claim := localWord{&o.table[hdrClaim]}
	if c := claim.Load(); c != 0 && o.failed(ftrma.Rank(c-1)) {
		o.casOwn(claim, o.v().tables[o.me]+hdrClaim*8, c, 0)
	}
}

// recover restores the keys this rank holds that the failures since oldFailed
// touched. It reports false when it stopped because its view is no longer
// current: it is to run again in the new one.
func (o *op) recover(ctx context.Context, oldFailed []bool) bool {
	if hook := testHookRecover.get(); hook != nil {
		hook(ctx, o.Store)
	}
	wasFailed := func(r ftrma.Rank) bool { return oldFailed[r] }
	type job struct {
		h    uint64
		key  uint64 // the slot's key block
		pos  int
		slot int
		lock uint64 // the slot's lock word as the scan read it
	}
	var jobs []job
	for i := range o.opt.Slots {
		base := hdrWords + i*slotWords
		ka, h := o.ownSlot(ctx, i)
		lw := atomic.LoadUint64(&o.table[base+slotLock])
		if ka == slotTomb {
			// A deletion whose writer failed between its tombstone and
			// its release: the lock guards nothing any more (F23).
			o.freeFailedLock(i, ka, lw)
			continue
		}
		if ka == 0 || h == 0 {
			continue // never used, or no value yet
		}
		now := o.v().replicas(h, o.failed)
		pos := slices.Index(now, o.me)
		if pos < 0 {
			continue
		}
		w := lockOwner(lw)
		touched := !slices.Equal(now, o.v().replicas(h, wasFailed)) ||
			(w >= 0 && o.failed(ftrma.Rank(w)) && !oldFailed[w]) ||
			orphanPending(atomic.LoadUint64(&o.table[base+slotPAddr]), w, o.failed)
		if touched {
			jobs = append(jobs, job{h, ka, pos, i, lw})
		}
	}
	slices.SortFunc(jobs, func(a, b job) int { return a.pos - b.pos })
	start := time.Now()
	for _, j := range jobs {
		if d := time.Duration(j.pos)*staggerStep - time.Since(start); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return true
			}
		}
		if ctx.Err() != nil {
			return true
		}
		if o.stale() {
			return false
		}
		o.st.checks.Add(1)
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := o.ownKey(jctx, j.h, j.key)
		if err == nil {
			_, _, err = o.getAll(jctx, id)
		}
		cancel()
		if o.restart(err) {
			return false
		}
		if err == nil || errors.Is(err, ErrNotFound) {
			o.freeFailedLock(j.slot, j.key, j.lock)
		}
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDataLost) && ctx.Err() == nil {
			o.st.retries.Add(1)
		}
	}
	return true
}

// orphanPending reports whether a slot whose pending descriptor names
// block pending (0: none) and whose lock holder is w (-1: free) holds a
// pending record that no live writer will settle: a transaction's records
// exist only under its writer's locks, so one under a free lock, or a
// failed rank's, is left over — by a writer that died after a repair that
// took its lock over gave the lock back unsettled (DESIGN.md F40), or by
// an attempt that could not clear it. A check of the key settles it.
func orphanPending(pending uint64, w int, failed func(ftrma.Rank) bool) bool {
	return pending != 0 && (w < 0 || failed(ftrma.Rank(w)))
}

// freeFailedLock gives back the lock of this rank's slot i when a failed
// rank holds it, once a check of the slot's key (getAll) found its replicas
// agreeing (a repair would have taken it over and given it back, an
// agreement leaves nothing for it to guard: the failed holder is fenced),
// or when the slot is a tombstone (its deletion landed; a claim may reuse
// the slot, and its writer would take the lock over anyway).
// key and lock are the slot's key and lock words as the scan read them
// before the check: the lock is given back only if neither changed since.
func (o *op) freeFailedLock(i int, key, lock uint64) {
	base := hdrWords + i*slotWords
	w := lockOwner(lock)
	if w < 0 || !o.failed(ftrma.Rank(w)) || atomic.LoadUint64(&o.table[base+slotKey]) != key {
		return
	}
	o.casOwn(localWord{&o.table[base+slotLock]}, o.slotAddr(o.me, i)+slotLock*8, lock, lockWord(lockVersion(lock), -1))
}

// ownSlot returns the key word and hash word of this rank's slot i, for the
// scans of this rank's own slots (recovery, Grow, compaction), which go by
// the hash word. A slot that holds a value of a key but no hash word (its
// claim's hash word or a tombstone's clearing of it was lost as the window
// was rebuilt, or as its writer died) gets it back from its key block, so
// that no copy is hidden from the scans.
func (o *op) ownSlot(ctx context.Context, i int) (ka, h uint64) {
	base := hdrWords + i*slotWords
	ka, h = atomic.LoadUint64(&o.table[base+slotKey]), atomic.LoadUint64(&o.table[base+slotHash])
	if h != 0 || ka == 0 || ka == slotTomb || atomic.LoadUint64(&o.table[base+slotCurAddr]) == 0 {
		return ka, h
	}
	var hdr [keyHeader]byte
	if o.v().w.Get(o.me, ka, hdr[:]) != nil || o.v().w.Flush(ctx, o.me) != nil || word(hdr[:], 0) == 0 {
		return ka, 0
	}
	h = word(hdr[:], 0)
	o.casOwn(localWord{&o.table[base+slotHash]}, o.slotAddr(o.me, i)+slotHash*8, 0, h)
	return ka, h
}

// ownKey reads the key block at addr of this rank's heap: the key of a slot
// of this rank whose hash word is h.
func (o *op) ownKey(ctx context.Context, h, addr uint64) (ident, error) {
	var hdr [keyHeader]byte
	if err := o.v().w.Get(o.me, addr, hdr[:]); err != nil {
		return ident{}, err
	}
	if err := o.v().w.Flush(ctx, o.me); err != nil {
		return ident{}, err
	}
	n := word(hdr[:], 1)
	if word(hdr[:], 0) != h || n == 0 || n > uint64(o.keyLimit()) {
		return ident{}, fmt.Errorf("store: slot's key block at %#x is not of hash %#x", addr, h)
	}
	b := make([]byte, keyBlockLen(int(n)))
	if err := o.v().w.Get(o.me, addr, b); err != nil {
		return ident{}, err
	}
	if err := o.v().w.Flush(ctx, o.me); err != nil {
		return ident{}, err
	}
	return ident{h, string(b[keyHeader : keyHeader+n])}, nil
}
