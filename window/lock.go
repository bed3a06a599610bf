package window

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// The lock word at each rank: the exclusive holder's rank+1 in the high 32
// bits, the number of shared holders in the low 32.
const (
	lockWordOff = 0
	ctlWords    = 8 // control block size in words; the rest is reserved
	sharedOne   = 1
)

func exclusiveWord(r ftrma.Rank) uint64 { return uint64(r+1) << 32 }

// FlushLocal returns when the origin buffers of operations toward target may
// be reused and their results read. Puts copy their data when posted, so this
// waits for gets and atomics, which complete locally only when their answer
// arrives; it is therefore as strong as Flush.
func (w *Window) FlushLocal(ctx context.Context, target ftrma.Rank) error {
	return w.Flush(ctx, target)
}

// FlushLocalAll is FlushLocal toward every rank.
func (w *Window) FlushLocalAll(ctx context.Context) error { return w.FlushAll(ctx) }

// Lock takes a shared or exclusive lock on target's window, waiting (with
// backoff) while a conflicting lock is held, until ctx ends. This rank may hold
// one lock per target.
func (w *Window) Lock(ctx context.Context, target ftrma.Rank, lt LockType) error {
	const name = "lock"
	if _, err := w.rankOf(name, target); err != nil {
		return err
	}
	if lt != Shared && lt != Exclusive {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: lock type %d", ftrma.ErrInvalid, lt)}
	}
	if !w.locks[target].CompareAndSwap(0, int32(lt)) {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: already locked by this rank", ftrma.ErrLockHeld)}
	}
	// Reserved; given up again on failure.
	err := w.acquire(ctx, target, lt)
	if err != nil {
		w.locks[target].Store(0)
	}
	return wrap(name, target, err)
}

func (w *Window) acquire(ctx context.Context, target ftrma.Rank, lt LockType) error {
	p := w.peers[target]
	me := exclusiveWord(w.peers[w.rank].cr)
	var b backoff
	old := &w.lockOld[target] // this goroutine's: it holds the reservation
	for {
		*old = 0
		var seq transport.Seq
		var err error
		if lt == Exclusive {
			seq, err = w.t.CompareAndSwap64(p.tr, p.ctl, lockWordOff, 0, me, old)
		} else {
			seq, err = w.t.FetchAndAdd64(p.tr, p.ctl, lockWordOff, sharedOne, old)
		}
		if err == nil {
			err = w.t.Wait(ctx, p.tr, seq)
		}
		if err != nil {
			return err
		}
		if lt == Exclusive && *old == 0 || lt == Shared && *old>>32 == 0 {
			return nil
		}
		if lt == Shared { // an exclusive holder: take the increment back
			seq, err = w.t.FetchAndAdd64(p.tr, p.ctl, lockWordOff, ^uint64(sharedOne-1), nil)
			if err == nil {
				err = w.t.Wait(ctx, p.tr, seq)
			}
			if err != nil {
				return err
			}
		}
		// An exclusive holder known to have failed never unlocks: take its
		// lock away (the paper's enforced unlocking), CAS(dead → free part).
		if v := *old; v>>32 != 0 && w.c.ProcFailed(ftrma.Rank(v>>32)-1) {
			seq, err = w.t.CompareAndSwap64(p.tr, p.ctl, lockWordOff, v, v&(1<<32-1), old)
			if err == nil {
				err = w.t.Wait(ctx, p.tr, seq)
			}
			if err != nil {
				return err
			}
			continue // retry at once: the lock may be free now
		}
		if err := b.wait(ctx); err != nil {
			return err
		}
		if w.IsRevoked() {
			return ftrma.ErrRevoked
		}
	}
}

// Unlock completes every operation toward target (as Flush) and releases this
// rank's lock on it.
func (w *Window) Unlock(ctx context.Context, target ftrma.Rank) error {
	const name = "unlock"
	tr, err := w.rankOf(name, target)
	if err != nil {
		return err
	}
	// Released here, before the lock word: a Lock of this target from
	// another goroutine then waits for the release like any other.
	lt := LockType(w.locks[target].Swap(0))
	if lt == 0 {
		return &ftrma.OpError{Op: name, Rank: target, Err: ftrma.ErrNotLocked}
	}
	// On an ordered transport the release is posted behind the epoch's
	// operations and one wait covers both; otherwise flush first.
	var flushErr error
	if !w.ordered {
		flushErr = w.t.Flush(ctx, tr)
	}
	delta := ^uint64(sharedOne - 1)
	if lt == Exclusive {
		delta = -exclusiveWord(w.peers[w.rank].cr)
	}
	seq, err := w.t.FetchAndAdd64(tr, w.peers[target].ctl, lockWordOff, delta, nil)
	if err == nil {
		err = w.t.Wait(ctx, tr, seq)
	}
	if flushErr != nil {
		return wrap(name, target, flushErr)
	}
	return wrap(name, target, err)
}

// LockAll takes a shared lock on every rank, in rank order.
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

// UnlockAll releases the locks of LockAll; it returns the first error.
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
// ftrma.ErrLockHeld, and frees nothing, while this rank holds a lock. After
// Free every method returns ErrFreed, and the memory Allocate gave the window
// is released (on shared memory it is unmapped: Bytes must not be used any
// more). Memory from Alloc is the caller's to Release after Detach or Free.
func (w *Window) Free(ctx context.Context) error {
	if err := w.check("free"); err != nil {
		return err
	}
	n := 0
	for i := range w.locks {
		if w.locks[i].Load() != 0 {
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
