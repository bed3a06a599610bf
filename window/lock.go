package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// The control block at each rank holds the lock on that rank's window. Only
// the lockers' compare-and-swap operations change it:
//
//	word 0                the gate: exclWord(e) while rank e holds, or is
//	                      taking, the exclusive lock; 0 otherwise
//	word 1                this rank's own: the fence of Sync
//	words 2..ctlHeader-1  reserved
//	word ctlHeader+i      the slot of communicator rank i: sharedMark while
//	                      rank i holds a shared lock, exclWord(e) while rank
//	                      e holds (or is taking) the exclusive lock, 0 if free
//
// A shared locker changes only its own slot: one atomic. An exclusive locker
// takes the gate, which orders the exclusive lockers, and then every slot,
// which shuts out every shared holder. Every non-zero word names its holder
// (the slot's owner for sharedMark, e for exclWord(e)), so a waiter can take
// over a word whose holder is known failed, shared and exclusive alike.
// Ranks are communicator ranks: a window made by Shrink shares the control
// block and keeps them.
//
// Words are indexed j = 0 for the gate and j = 1+i for the slot of rank i.
const (
	ctlHeader  = 8
	syncWord   = 1 // a reserved word: Sync's fence
	sharedMark = 1
	held       = ^uint64(0) // acquireExclusive: word j is this rank's
	unlocking  = 3          // Window.locks: Unlock is releasing the lock
)

// settleWait bounds how long lock code still waits for its own atomics once
// the caller's context has ended (or the window was revoked): a lock word
// must not change unseen, since nobody would release it. A live target answers
// in microseconds and a failed one is reported within the failure detector's
// timeout, so the bound is reached only by a target that hangs without being
// declared failed.
const settleWait = 10 * time.Second

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

// exclWord is the value of the words held exclusively by communicator rank r.
func exclWord(r ftrma.Rank) uint64 { return uint64(r+1) << 32 }

// lockWords is the number of control words a lock touches: the gate and one
// slot per rank of the communicator the window was created over.
func (w *Window) lockWords() int { return 1 + len(w.ctl) - ctlHeader }

// failedHolder reports whether value v of control word j is held by a rank
// known failed. Values that are no lock state are never taken over.
func (w *Window) failedHolder(j int, v uint64) bool {
	switch {
	case v == sharedMark:
		return j > 0 && w.c.ProcFailed(ftrma.Rank(j-1))
	case v != 0 && v&(1<<32-1) == 0:
		return w.c.ProcFailed(ftrma.Rank(v>>32) - 1)
	}
	return false
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
// changed only by compare-and-swap from a value the changer saw: a late one
// either finds the word moved on and does nothing, or leaves the word to the
// dead rank again, and the next locker takes it over again.
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
	bctx, cancel := bounded(ctx)
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
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleWait)
}

// acquireShared takes this rank's slot at target: CAS(free → sharedMark),
// or CAS(held by a failed rank → sharedMark).
func (w *Window) acquireShared(ctx context.Context, target ftrma.Rank) error {
	p := w.peers[target]
	j := 1 + int(w.peers[w.rank].cr)
	res := &w.scratch(target, 1)[0]
	var b backoff
	var expect uint64
	for {
		*res = 0
		seq, err := w.t.CompareAndSwap64(p.tr, p.ctl, ctlOff(j), expect, sharedMark, res)
		if err != nil {
			return err
		}
		settled, err := w.await(ctx, p.tr, seq)
		if !settled {
			w.lockScratch[target] = nil
			return err
		}
		// sharedMark found there is this rank's own, left by a release
		// that could not reach the target: taken up again.
		got := *res == expect || *res == sharedMark
		if err != nil {
			if got {
				bctx, cancel := bounded(ctx)
				w.release(bctx, target, Shared)
				cancel()
			}
			return err
		}
		if got {
			return nil
		}
		if w.failedHolder(j, *res) {
			expect = *res
			continue // take it over at once
		}
		expect = 0
		if err := b.wait(ctx); err != nil {
			return err
		}
		if w.IsRevoked() {
			return ftrma.ErrRevoked
		}
	}
}

// acquireExclusive takes the gate and then every slot at target, each by
// CAS(free → mine) or CAS(held by a failed rank → mine). The first try posts
// them all at once (one round trip when the lock is free); once the gate was
// found taken, slots are tried only after the gate is ours, so that losers do
// not get in the winner's way. A loser gives back the slots it got, and so
// does the gate's holder whenever it must wait for a live shared holder: as
// with a single counting lock word, an exclusive locker gets in at a moment
// when no shared lock is held, and shared lockers never wait for it.
func (w *Window) acquireExclusive(ctx context.Context, target ftrma.Rank) error {
	p := w.peers[target]
	mine := exclWord(w.peers[w.rank].cr)
	n := w.lockWords()
	s := w.scratch(target, 2*n)
	exp, res := s[:n], s[n:] // exp[j]: the value to swap from, or held
	clear(exp)
	var b backoff
	optimistic := true
	for {
		gate := exp[0] == held
		var last transport.Seq
		var postErr error
		hi := 0 // words below hi were posted unless held
		for j := range n {
			if j > 0 && !gate && !optimistic {
				break
			}
			if exp[j] != held {
				res[j] = 0
				seq, err := w.t.CompareAndSwap64(p.tr, p.ctl, ctlOff(j), exp[j], mine, &res[j])
				if err != nil {
					postErr = err
					break
				}
				last = seq
			}
			hi = j + 1
		}
		settled, err := true, error(nil)
		if last != 0 {
			settled, err = w.await(ctx, p.tr, last)
		}
		if !settled {
			w.lockScratch[target] = nil
			return err
		}
		takeover := false
		for j := range hi {
			if exp[j] == held {
				continue
			}
			switch v := res[j]; {
			case v == exp[j] || v == mine: // mine: left by a release that failed
				exp[j] = held
			case w.failedHolder(j, v):
				exp[j], takeover = v, true
			default:
				exp[j] = 0
			}
		}
		if err == nil {
			err = postErr
		}
		if err != nil {
			w.giveBack(ctx, target, 0, exp, res, mine)
			return err
		}
		if exp[0] != held {
			// Somebody else has the gate: give back what the first try
			// got, then wait for the gate alone.
			optimistic = false
			takeover = exp[0] != 0 // its holder failed
			if err := w.giveBack(ctx, target, 1, exp[1:], res[1:], mine); err != nil {
				return err
			}
		} else if !slices.Contains(exp[1:], 0) && !takeover {
			return nil // every slot held
		} else if !takeover {
			// A live rank holds a slot. Give back the slots while waiting,
			// keeping only the gate: a waiting exclusive locker must never
			// keep shared lockers out, or ranks holding shared locks on
			// several targets could wait for each other through it.
			if err := w.giveBack(ctx, target, 1, exp[1:], res[1:], mine); err != nil {
				w.giveBack(ctx, target, 0, exp[:1], res[:1], mine)
				return err
			}
		}
		if takeover {
			continue
		}
		if err := b.wait(ctx); err != nil {
			w.giveBack(ctx, target, 0, exp, res, mine)
			return err
		}
		if w.IsRevoked() {
			w.giveBack(ctx, target, 0, exp, res, mine)
			return ftrma.ErrRevoked
		}
	}
}

// giveBack releases the words marked held in exp, which are words first
// onwards (CAS(mine → free), into res), waiting for that at most settleWait
// whatever ctx says, and marks them free. On error the scratch words are
// dropped.
func (w *Window) giveBack(ctx context.Context, target ftrma.Rank, first int, exp, res []uint64, mine uint64) error {
	p := w.peers[target]
	var last transport.Seq
	var err error
	for j := range exp {
		if exp[j] != held {
			continue
		}
		var seq transport.Seq
		if seq, err = w.t.CompareAndSwap64(p.tr, p.ctl, ctlOff(first+j), mine, 0, &res[j]); err != nil {
			break
		}
		last = seq
		exp[j] = 0
	}
	if last != 0 {
		// await waits on past ctx's end, within settleWait.
		settled, werr := w.await(ctx, p.tr, last)
		if !settled {
			w.lockScratch[target] = nil
		}
		if err == nil {
			err = werr
		}
	}
	return err
}

// release gives back this rank's lock of type lt on target: its slot when
// shared; the slots, then the gate, when exclusive.
func (w *Window) release(ctx context.Context, target ftrma.Rank, lt LockType) error {
	me := w.peers[w.rank].cr
	if lt == Shared {
		p := w.peers[target]
		res := &w.scratch(target, 1)[0]
		seq, err := w.t.CompareAndSwap64(p.tr, p.ctl, ctlOff(1+int(me)), sharedMark, 0, res)
		if err != nil {
			return err
		}
		settled, err := w.await(ctx, p.tr, seq)
		if !settled {
			w.lockScratch[target] = nil
		}
		return err
	}
	n := w.lockWords()
	s := w.scratch(target, 2*n)
	exp, res := s[:n], s[n:]
	for j := range exp {
		exp[j] = held
	}
	// The slots first: shared lockers get in before the next exclusive
	// locker, which waits at the gate.
	if err := w.giveBack(ctx, target, 1, exp[1:], res[1:], exclWord(me)); err != nil {
		return err
	}
	return w.giveBack(ctx, target, 0, exp[:1], res[:1], exclWord(me))
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
	bctx, cancel := bounded(ctx)
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
func (w *Window) Free(ctx context.Context) error {
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
