package window

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// The control block at each rank holds the lock on that rank's window. Only
// the lock code touches it, with atomics and reads:
//
//	word 0                the gate: exclWord(e) while rank e holds the
//	                      exclusive lock, or checks whether it may; 0
//	                      otherwise
//	word 1                this rank's own: the fence of Sync
//	words 2..ctlHeader-1  reserved
//	word ctlHeader+i      the slot of communicator rank i: sharedMark while
//	                      rank i holds a shared lock, or waits for one; 0
//	                      otherwise
//
// Words are indexed j = 0 for the gate and j = 1+i for the slot of rank i.
// Ranks are communicator ranks: a window made by Shrink shares the control
// block and keeps them.
//
// A shared locker sets its own slot, CAS(0 → sharedMark), and then reads the
// gate with a fetch-and-add of zero. A gate of 0 means it holds the lock. A
// gate held by a live rank means it waits: it keeps its slot and reads the
// gate again after a backoff. An exclusive locker takes the gate,
// CAS(0 → exclWord(me)), and then reads every slot with one Read. All slots
// 0 means it holds the lock. A slot held by a live rank means it gives the
// gate back and tries again after a backoff; it never waits holding the gate.
// Unlock is one CAS back to 0 of the slot or of the gate. So a lock costs one
// atomic and one read, and its unlock one atomic, whatever the number of
// ranks: 3 operations per epoch, and 8n bytes read by an exclusive locker.
//
// Why no shared and exclusive holder meet. Every change of the gate is an
// atomic read-modify-write (CAS; the shared locker's fetch-and-add of zero
// changes nothing but is one too), so the gate's atomics happen in one order,
// and each one reads the value the one before it left. Take a shared locker S
// and an exclusive locker E that both think they hold the lock: S's
// fetch-and-add read 0, and E's Read found S's slot 0.
//   - If E's CAS on the gate came before S's fetch-and-add, S read the value
//     E's CAS left there, or a later one. It reads 0 only if E released the
//     gate in between (then E's epoch was over before S's began), or if E
//     was counted failed and its gate cleared (then E does nothing more).
//   - If S's fetch-and-add came first, E's CAS read what S's fetch-and-add
//     left there, or a later value left by read-modify-writes after it: in
//     Go's (and C++'s) memory model E's CAS synchronizes with S's
//     fetch-and-add (a release sequence). S set its slot before its
//     fetch-and-add, and E reads the slots after its CAS, so E sees S's slot
//     set (or cleared by S's later Unlock: S's epoch was over).
//
// This is release-acquire message passing through the gate, not Dekker's
// store-then-load, so no locker needs its store ordered before a later load
// of another word. It needs only that each locker's two steps reach the
// target's memory in order. All lock words are reached through the
// transport, also by their owner. How each transport keeps the order:
//   - shm: the origin's CPU runs each operation when it is posted: the CAS is
//     a locked read-modify-write (acquire and release in Go's memory model)
//     and the Read's loads come after it in program order. The epoch's puts
//     are plain stores, ordered before the release's CAS by that locked
//     instruction itself (and by the barrier Unlock's Flush runs).
//   - tcp, memnet (and multi, whose shm part is as above): the target's
//     goroutine runs one origin's operations one after another in posting
//     order (CapOrdered without CapOneSided), with sync/atomic for the
//     atomics. So a locker posts its check right behind its CAS and waits
//     once: one round trip per lock, as before.
//   - verbs: the target's device runs every access to the lock words (the
//     owner's too: verbs has no CapLocalAtomics); the locker waits for the
//     CAS to complete before it posts the check, so the CAS has been executed
//     at the target before the target's device starts the check. Between atomics,
//     and from an atomic to a later Read, the device accesses the memory in
//     the order it runs them. (verbs has no CapWholeWords, so a Read may see a
//     word torn between two values. A slot holds only 0 or sharedMark, which
//     differ in one byte, so a torn slot still reads as one of the two. The
//     gate is read by the fetch-and-add, never torn.)
//
// A shared locker that waits keeps its slot, so exclusive lockers that
// check meanwhile give way to it: it gets in as soon as the holder leaves.
// An exclusive locker gets in at a moment when no shared lock is held or
// waited for, as with a single counting lock word: shared lockers never wait
// for a waiting exclusive locker, which holds nothing while it waits. (If it
// held the gate while waiting, ranks holding shared locks on several targets
// could wait for each other through it.) Exclusive lockers can starve under
// a stream of overlapping shared locks, as before.
//
// Every non-zero word names its holder (the slot's owner for sharedMark, e
// for exclWord(e)), so a locker takes over a word whose holder is known
// failed: a shared locker clears a dead rank's gate, CAS(exclWord(d) → 0),
// and reads the gate again; an exclusive locker holding the gate clears a
// dead rank's slot, CAS(sharedMark → 0), and reads the slots again. A word
// naming this rank itself, found while it locks, is left by a release that
// could not reach the target, and is taken over the same way.
const (
	ctlHeader  = 8
	syncWord   = 1 // a reserved word: Sync's fence
	sharedMark = 1
	unset      = ^uint64(0) // no lock state: a CAS result not written (yet)
	unlocking  = 3          // Window.locks: Unlock is releasing the lock
)

// settleWait bounds how long lock code still waits for its own atomics once
// the caller's context has ended (or the window was revoked): a lock word
// must not change unseen, since nobody would release it. A live target answers
// in microseconds and a failed one is declared within the runtime's verdict
// bound (the communicator's VerdictBound: comm.Comm says it, from the job's
// chain of failure bounds, failure.Chain), so the bound is reached only by a
// target that hangs without ever being declared failed. A communicator that
// does not say gets defaultSettleWait.
func (w *Window) settleWait() time.Duration {
	if v, ok := w.c.(interface{ VerdictBound() time.Duration }); ok {
		if d := v.VerdictBound(); d > 0 {
			return d
		}
	}
	return defaultSettleWait
}

// defaultSettleWait is settleWait for a communicator that does not say how
// long its verdicts take.
const defaultSettleWait = 10 * time.Second

// ctlWords is the size in words of the control block of a window over n
// ranks.
func ctlWords(n int) int { return ctlHeader + n }

// ctlOff is the byte offset of control word j.
func ctlOff(j int) uint64 {
	if j == 0 {
		return 0
	}
	return 8 * uint64(ctlHeader+j-1)
}

// exclWord is the value of the gate held by communicator rank r.
func exclWord(r ftrma.Rank) uint64 { return uint64(r+1) << 32 }

// slots is the number of slots at each target: one per rank of the
// communicator the window was created over.
func (w *Window) slots() int { return len(w.ctl) - ctlHeader }

// stale reports whether value v of control word j is to be taken over: its
// holder is a rank known failed, or this rank itself, which holds no lock on
// the target while it locks it (a release that could not reach the target
// left the word). Values that are no lock state are never taken over.
func (w *Window) stale(j int, v uint64) bool {
	me := w.peers[w.rank].cr
	var r ftrma.Rank
	switch {
	case v == sharedMark && j > 0:
		r = ftrma.Rank(j - 1)
	case j == 0 && v != 0 && v&(1<<32-1) == 0:
		r = ftrma.Rank(v>>32) - 1
	default:
		return false
	}
	return r == me || w.c.ProcFailed(r)
}

// pipelined reports whether a locker may post its check right behind its
// CAS, without waiting for the CAS: where the target runs one origin's
// operations one by one in posting order (see the ordering notes above).
func (w *Window) pipelined() bool {
	c := w.t.Caps()
	return c.Has(transport.CapOrdered) && !c.Has(transport.CapOneSided)
}

// FlushLocal returns when the origin buffers of operations toward target may
// be reused and their results read (MPI_Win_flush_local). No transport tells
// local completion apart from remote completion, so it is Flush: Write copies
// its data before it returns on every transport (the transport contract), so
// a Put's buffer is free at once anyway; a Get's or an atomic's result is
// there only when the answer came back from the target, which is remote
// completion; and operations toward one peer complete in order, so waiting
// for the last of them waits for all. FlushLocal therefore also reports the
// errors Flush reports.
func (w *Window) FlushLocal(ctx context.Context, target ftrma.Rank) error {
	return w.Flush(ctx, target)
}

// FlushLocalAll is FlushLocal toward every rank (as FlushAll).
func (w *Window) FlushLocalAll(ctx context.Context) error { return w.FlushAll(ctx) }

// Sync is MPI_Win_sync: a full memory barrier between this goroutine's loads
// and stores of its window memory (Bytes, attached buffers) before it and
// after it. It is local: it sends nothing and completes no operation. It
// works on a revoked window; on a freed one it returns ErrFreed.
//
// On shared memory, peers' operations are their own CPUs' stores and atomics
// on this memory: Sync (a sequentially consistent atomic, a full fence) makes
// this rank's stores before it visible to peers' later operations, and its
// loads after it see what peers' completed operations stored. On RDMA the
// device reaches the memory by DMA, and Sync orders this CPU's accesses around
// it the same way. On TCP and memnet a goroutine of the transport applies
// peers' operations to the memory; there the event that tells this rank
// they are done (a barrier, a message, a lock) is also what orders the memory
// in Go's memory model, and Sync adds only the fence. As in MPI, a rank still
// needs such an event to know that a peer's operation happened.
func (w *Window) Sync() error {
	if err := w.check("sync"); err != nil {
		return err
	}
	atomic.AddUint64(&w.ctl[syncWord], 0)
	return nil
}

// Lock takes a shared or exclusive lock on target's window, waiting (with
// backoff) while a conflicting lock is held, until ctx ends. This rank may
// hold one lock per target (a window and the window Shrink made from it share
// their locks: lock a target through one of them at a time).
//
// A lock held by a rank known failed is taken over, shared or exclusive (the
// paper's enforced unlocking). Only ranks the runtime counts failed are taken
// over, never a holder that is merely slow. The runtime fences a rank before
// it counts it failed (and under ftrun only once ftrun killed it), so such a
// holder does nothing more. An atomic it posted before it died may still be
// on its way to the target; that does no harm, because every lock word is
// changed only by compare-and-swap from a value the changer saw (the
// fetch-and-add that reads the gate adds zero): a late one either finds the
// word moved on and does nothing, or leaves the word to the dead rank again,
// and the next locker takes it over again.
func (w *Window) Lock(ctx context.Context, target ftrma.Rank, lt LockType) error {
	const name = "lock"
	if _, err := w.rankOf(name, target); err != nil {
		return err
	}
	if lt != Shared && lt != Exclusive {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: lock type %d", ftrma.ErrInvalid, lt)}
	}
	if err := w.reserve(ctx, target, lt); err != nil {
		return wrap(name, target, err)
	}
	var err error
	if lt == Shared {
		err = w.acquireShared(ctx, target)
	} else {
		err = w.acquireExclusive(ctx, target)
	}
	if err != nil {
		w.locks[target].Store(0)
	}
	return wrap(name, target, err)
}

// reserve sets this rank's lock state on target to lt. While another
// goroutine's Unlock of target is under way it waits for it, as it would for
// any other holder.
func (w *Window) reserve(ctx context.Context, target ftrma.Rank, lt LockType) error {
	var b backoff
	for !w.locks[target].CompareAndSwap(0, int32(lt)) {
		if w.locks[target].Load() != unlocking {
			return fmt.Errorf("%w: already locked by this rank", ftrma.ErrLockHeld)
		}
		if err := b.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// scratch returns n scratch words of target's lock state; only the goroutine
// that owns that state uses them.
func (w *Window) scratch(target ftrma.Rank, n int) []uint64 {
	if len(w.lockScratch[target]) < n {
		w.lockScratch[target] = make([]uint64, n)
	}
	return w.lockScratch[target][:n]
}

// await waits for operation seq toward tr. When ctx ends first it still
// waits, up to settleWait, for the operations to finish, so that the caller
// learns what its lock atomics did and can undo them. settled is true when
// they finished (the result words are valid again); then err is the first
// error seen (ctx's, or that of an earlier operation). When not settled (the
// target failed, or did not answer in time) the transport may still write the
// result words, and the caller must drop them.
func (w *Window) await(ctx context.Context, tr ftrma.Rank, seq transport.Seq) (settled bool, err error) {
	if err = w.t.Wait(ctx, tr, seq); err == nil {
		return true, nil
	}
	if errors.Is(err, ftrma.ErrProcFailed) {
		return false, err
	}
	bctx, cancel := w.bounded(ctx)
	defer cancel()
	for {
		e := w.t.Wait(bctx, tr, seq)
		if e == nil {
			return true, err
		}
		if errors.Is(e, ftrma.ErrProcFailed) || bctx.Err() != nil {
			return false, err
		}
	}
}

// bounded is ctx without its cancellation, ending after settleWait: for the
// clean-up lock code does after ctx ended.
func (w *Window) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.settleWait())
}

// acquireShared takes this rank's slot at target: CAS(free → sharedMark),
// Lock scratch words, per target (see scratch): the CAS result, the gate as
// a shared locker reads it, the result of swapWord, then the slots as an
// exclusive locker reads them.
const (
	scrRes = iota
	scrGate
	scrSwap
	scrSlots
)

// casThen posts CAS(control word j at target: old → new), its result into
// *res, and then the check: a Read of every slot into slots when slots is
// not nil, else a fetch-and-add of zero on the gate into *gate. With
// pipeline it posts the check right behind the CAS; else it waits for the
// CAS and posts the check only when the CAS took the word (*res is old, or
// new: this rank's own). settled is true when everything posted finished
// (see await); checked, when the check did too. *res stays unset when the
// CAS was not posted.
func (w *Window) casThen(ctx context.Context, target ftrma.Rank, j int, old, new uint64, res *uint64, slots []uint64, gate *uint64, pipeline bool) (checked, settled bool, err error) {
	p := w.peers[target]
	*res = unset
	seq, err := w.t.CompareAndSwap64(p.tr, p.ctl, ctlOff(j), old, new, res)
	if err != nil {
		return false, true, err
	}
	if !pipeline {
		if settled, err = w.await(ctx, p.tr, seq); !settled || err != nil || *res != old && *res != new {
			return false, settled, err
		}
	}
	cseq, postErr := w.postCheck(target, slots, gate)
	if postErr == nil {
		seq = cseq
	}
	settled, err = w.await(ctx, p.tr, seq)
	if err == nil {
		err = postErr
	}
	return settled && err == nil, settled, err
}

// postCheck posts the read casThen describes.
func (w *Window) postCheck(target ftrma.Rank, slots []uint64, gate *uint64) (transport.Seq, error) {
	p := w.peers[target]
	if slots != nil {
		return w.t.Read(p.tr, p.ctl, ctlOff(1), wordBytes(slots))
	}
	*gate = unset
	return w.t.FetchAndAdd64(p.tr, p.ctl, ctlOff(0), 0, gate)
}

// recheck posts the check alone and waits for it (see casThen).
func (w *Window) recheck(ctx context.Context, target ftrma.Rank, slots []uint64, gate *uint64) (settled bool, err error) {
	seq, err := w.postCheck(target, slots, gate)
	if err != nil {
		return true, err
	}
	return w.await(ctx, w.peers[target].tr, seq)
}

// swapWord does CAS(control word j at target: old → new) and waits for it,
// past ctx's end within settleWait (see await). Its result is not used: it
// releases this rank's words and clears stale ones, and the lockers look
// again where that matters.
func (w *Window) swapWord(ctx context.Context, target ftrma.Rank, j int, old, new uint64) error {
	p := w.peers[target]
	res := &w.scratch(target, scrSlots)[scrSwap]
	seq, err := w.t.CompareAndSwap64(p.tr, p.ctl, ctlOff(j), old, new, res)
	if err != nil {
		return err
	}
	settled, err := w.await(ctx, p.tr, seq)
	if !settled {
		w.lockScratch[target] = nil
	}
	return err
}

// acquireShared sets this rank's slot at target and then waits, keeping the
// slot, until the gate is free (or held by a rank known failed, whose gate
// it clears). See the control block's notes.
func (w *Window) acquireShared(ctx context.Context, target ftrma.Rank) error {
	j := 1 + int(w.peers[w.rank].cr)
	s := w.scratch(target, scrSlots)
	res, gate := &s[scrRes], &s[scrGate]
	checked, settled, err := w.casThen(ctx, target, j, 0, sharedMark, res, nil, gate, w.pipelined())
	if !settled {
		w.lockScratch[target] = nil
		return err
	}
	// sharedMark found there is this rank's own, left by a release that
	// could not reach the target: taken up again.
	got := *res == 0 || *res == sharedMark
	if err != nil {
		if got {
			w.swapWord(ctx, target, j, sharedMark, 0)
		}
		return err
	}
	if !got {
		return fmt.Errorf("window: lock slot %d holds %#x, no lock state", j-1, *res)
	}
	var b backoff
	for {
		if !checked {
			settled, err := w.recheck(ctx, target, nil, gate)
			if !settled {
				w.lockScratch[target] = nil
				return err
			}
			if err != nil {
				w.swapWord(ctx, target, j, sharedMark, 0)
				return err
			}
		}
		checked = false
		g := *gate
		if g == 0 {
			return nil
		}
		if w.stale(0, g) {
			if err := w.swapWord(ctx, target, 0, g, 0); err != nil {
				w.swapWord(ctx, target, j, sharedMark, 0)
				return err
			}
			continue // look again at once
		}
		// An exclusive holder, or an exclusive locker checking the slots,
		// which will see this slot and give way.
		if err := b.wait(ctx); err != nil {
			w.swapWord(ctx, target, j, sharedMark, 0)
			return err
		}
		if w.IsRevoked() {
			w.swapWord(ctx, target, j, sharedMark, 0)
			return ftrma.ErrRevoked
		}
	}
}

// acquireExclusive takes the gate at target, CAS(free → mine) or
// CAS(held by a stale holder → mine), and then reads the slots: all free, it
// holds the lock; one held by a live rank, it gives the gate back and tries
// again after a backoff. Only the first try posts the Read behind the CAS
// (on transports that allow it, see pipelined), so that waiting lockers
// read the slots only when they got the gate. See the control block's notes.
func (w *Window) acquireExclusive(ctx context.Context, target ftrma.Rank) error {
	mine := exclWord(w.peers[w.rank].cr)
	s := w.scratch(target, scrSlots+w.slots())
	res, slots := &s[scrRes], s[scrSlots:]
	var b backoff
	var expect uint64
	pipeline := w.pipelined()
	for {
		checked, settled, err := w.casThen(ctx, target, 0, expect, mine, res, slots, nil, pipeline)
		if !settled {
			w.lockScratch[target] = nil
			return err
		}
		// mine found there is this rank's own, left by a release that could
		// not reach the target.
		got := *res == expect || *res == mine
		if err != nil {
			if got {
				w.swapWord(ctx, target, 0, mine, 0)
			}
			return err
		}
		pipeline = false
		expect = 0
		switch {
		case got:
			free, err := w.checkSlots(ctx, target, slots, checked)
			if free && err == nil {
				return nil
			}
			// A live rank holds (or waits for) a shared lock: give the gate
			// back while waiting, so that it does not keep shared lockers
			// out.
			if e := w.swapWord(ctx, target, 0, mine, 0); err == nil {
				err = e
			}
			if err != nil {
				return err
			}
		case w.stale(0, *res):
			expect = *res
			continue // take it over at once
		}
		if err := b.wait(ctx); err != nil {
			return err
		}
		if w.IsRevoked() {
			return ftrma.ErrRevoked
		}
	}
}

// checkSlots reports whether every slot at target is free, for an exclusive
// locker holding the gate. slots holds them when checked; else, and after
// it clears stale slots, it reads them again.
func (w *Window) checkSlots(ctx context.Context, target ftrma.Rank, slots []uint64, checked bool) (free bool, err error) {
	for {
		if !checked {
			settled, err := w.recheck(ctx, target, slots, nil)
			if !settled {
				w.lockScratch[target] = nil
				return false, err
			}
			if err != nil {
				return false, err
			}
		}
		checked = false
		stale := false
		for i, v := range slots {
			switch {
			case v == 0:
			case w.stale(1+i, v):
				stale = true
			default:
				return false, nil
			}
		}
		if !stale {
			return true, nil
		}
		for i, v := range slots {
			if v != 0 {
				if err := w.swapWord(ctx, target, 1+i, v, 0); err != nil {
					return false, err
				}
			}
		}
	}
}

// release gives back this rank's lock of type lt on target: one CAS of its
// slot when shared, of the gate when exclusive.
func (w *Window) release(ctx context.Context, target ftrma.Rank, lt LockType) error {
	me := w.peers[w.rank].cr
	if lt == Shared {
		return w.swapWord(ctx, target, 1+int(me), sharedMark, 0)
	}
	return w.swapWord(ctx, target, 0, exclWord(me), 0)
}

// Unlock completes every operation toward target (as Flush) and releases this
// rank's lock on it. On a revoked window it drops the lock all the same (its
// words at the target are released as far as the target answers within a
// bound, errors ignored) and returns ftrma.ErrRevoked, so that Free and
// Shrink work afterwards.
func (w *Window) Unlock(ctx context.Context, target ftrma.Rank) error {
	const name = "unlock"
	if err := w.check(name); err != nil {
		return err
	}
	if target < 0 || int(target) >= len(w.peers) {
		return &ftrma.OpError{Op: name, Rank: target, Err: ftrma.ErrRankOutOfRange}
	}
	lt := LockType(w.locks[target].Load())
	if lt != Shared && lt != Exclusive || !w.locks[target].CompareAndSwap(int32(lt), unlocking) {
		return &ftrma.OpError{Op: name, Rank: target, Err: ftrma.ErrNotLocked}
	}
	defer w.locks[target].Store(0)
	if w.IsRevoked() {
		w.dropRevoked(ctx, target, lt)
		return &ftrma.OpError{Op: name, Rank: target, Err: ftrma.ErrRevoked}
	}
	tr := w.peers[target].tr
	// On an ordered transport the release is posted behind the epoch's
	// operations and one wait covers both; otherwise flush first.
	var flushErr error
	if !w.ordered {
		flushErr = w.t.Flush(ctx, tr)
	}
	err := w.release(ctx, target, lt)
	if flushErr != nil {
		return wrap(name, target, flushErr)
	}
	return wrap(name, target, err)
}

// dropRevoked releases a lock on a revoked window, within settleWait whatever
// ctx says, ignoring errors: the operations of the epoch are not reported any
// more, but the next holder (through a window made by Shrink, which shares the
// lock words) must find them complete.
func (w *Window) dropRevoked(ctx context.Context, target ftrma.Rank, lt LockType) {
	bctx, cancel := w.bounded(ctx)
	defer cancel()
	if !w.ordered {
		w.t.Flush(bctx, w.peers[target].tr)
	}
	w.release(bctx, target, lt)
}

// LockAll takes a shared lock on every rank, in rank order. When one fails (a
// failed rank: an error wrapping ftrma.ErrProcFailed; a revoked window; ctx
// ended) it releases the locks it took and returns that error: LockAll holds
// every lock or none. Shrink the window to lock all the survivors.
func (w *Window) LockAll(ctx context.Context) error {
	for r := range w.peers {
		if err := w.Lock(ctx, ftrma.Rank(r), Shared); err != nil {
			for q := range r {
				w.Unlock(ctx, ftrma.Rank(q))
			}
			return err
		}
	}
	return nil
}

// UnlockAll releases the locks of LockAll, every one even when some fail; it
// returns the first error.
func (w *Window) UnlockAll(ctx context.Context) error {
	var first error
	for r := range w.peers {
		if err := w.Unlock(ctx, ftrma.Rank(r)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Free completes this rank's operations, waits for every live rank to do the
// same (collective; failed ranks are skipped, so it works after failures and
// on a revoked window), and withdraws the window's memory. It fails with
// ftrma.ErrLockHeld, and frees nothing, while this rank holds a lock, except
// on a revoked window: there it drops the locks as Unlock does. After
// Free every method returns ErrFreed, and the memory Allocate gave the window
// is released (on shared memory it is unmapped: Bytes must not be used any
// more). Memory from Alloc is the caller's to Release after Detach or Free.
// Free of a window that Rebuild replaced is local: it releases the window's
// control words only (see Rebuild).
func (w *Window) Free(ctx context.Context) error {
	if w.rebuilt.Load() {
		return w.freeRebuilt()
	}
	if err := w.check("free"); err != nil {
		return err
	}
	n := 0
	revoked := w.IsRevoked()
	for i := range w.locks {
		lt := LockType(w.locks[i].Load())
		if revoked && (lt == Shared || lt == Exclusive) && w.locks[i].CompareAndSwap(int32(lt), unlocking) {
			w.dropRevoked(ctx, ftrma.Rank(i), lt)
			w.locks[i].Store(0)
		} else if lt != 0 {
			n++
		}
	}
	if n > 0 {
		return &ftrma.OpError{Op: "free", Rank: -1, Err: fmt.Errorf("%w: %d lock(s) still held", ftrma.ErrLockHeld, n)}
	}
	// Complete this rank's operations toward the live ranks, then wait for
	// every live rank to do the same: the fault-tolerant agreement serves as
	// a barrier that neither hangs nor fails on ranks that died (or on a
	// revoked window).
	var flushErr error
	for r, p := range w.peers {
		if w.c.ProcFailed(p.cr) {
			continue
		}
		if err := w.t.Flush(ctx, p.tr); err != nil && flushErr == nil && !errors.Is(err, ftrma.ErrProcFailed) {
			flushErr = wrap("free", ftrma.Rank(r), err)
		}
	}
	_, barrierErr := w.c.Agree(ctx, 1)
	if errors.Is(barrierErr, ftrma.ErrProcFailed) {
		barrierErr = nil
	}
	if w.freed.Swap(true) {
		return &ftrma.OpError{Op: "free", Rank: -1, Err: ErrFreed}
	}
	me := w.peers[w.rank]
	w.deregister(me.key)
	w.deregister(me.ctl)
	w.mu.Lock()
	for k := range w.attached {
		w.deregister(k)
	}
	w.attached = nil
	w.mu.Unlock()
	w.copyOut()
	w.unmapShared()
	for _, b := range w.owned {
		releaseMem(w.t, b)
	}
	w.owned = nil
	if flushErr != nil {
		return flushErr
	}
	return wrap("free", -1, barrierErr)
}

// backoff paces lock retries: a few yields, then sleeps doubling to 1 ms.
type backoff struct{ n int }

func (b *backoff) wait(ctx context.Context) error {
	b.n++
	d := time.Duration(1<<min(b.n, 10)) * time.Microsecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
