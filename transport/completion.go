package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
)

// Completion tracks the operations one rank has posted toward one peer: which
// sequence numbers are complete, which failed, and whether the peer is down.
// Transports embed one per peer and share its Wait, so every transport waits the
// same way: spin briefly on the completed counter, then park.
//
// Sequence numbers are handed out by Next under the poster's own lock (so their
// order is the order on the wire) and completed in order by Complete, from one
// goroutine at a time. A transport whose operations take effect while they
// are posted calls SetImmediate once and then numbers each operation, after
// it took effect, with Done, which needs no lock; there only failed
// operations get numbers of their own (see Done).
type Completion struct {
	posted    atomic.Uint64 // last sequence handed out by Next or Done
	done      atomic.Uint64 // last sequence completed; done <= posted
	immediate bool          // every sequence handed out is complete (Done only)

	mu      sync.Mutex    // guards errs, down and wake
	errs    []seqErr      // failed operations not yet reported, in sequence order
	down    error         // non-nil once the peer is down: pending and later operations fail
	wake    chan struct{} // closed when done advances while waiters > 0, then replaced
	waiters atomic.Int32  // goroutines parked in Wait
	nerrs   atomic.Int32  // len(errs), for Wait's fast path
	isDown  atomic.Bool   // down != nil, for Down's fast path
}

type seqErr struct {
	seq Seq
	err error
}

// SetImmediate says that every operation is complete before it is numbered,
// by Done: Completed is then Posted, and Wait never blocks for a sequence
// handed out. Call it before any other method; Next and Complete must not be
// used afterwards.
func (c *Completion) SetImmediate() { c.immediate = true }

// Done numbers an operation that has taken effect already, and records err,
// if not nil, as its failure, reported by the next Wait or Flush that covers
// it. It is for a Completion set immediate, and may be called by several
// goroutines at once without a lock of the caller's.
//
// Only a failed operation takes a new number. One that succeeded shares the
// number of the last failure numbered before it (0 before any): every
// failure numbered before it is covered by Wait on its number, as Wait on an
// operation covers the operations posted before it, and no later failure
// is. So the common case is one atomic load, no read-modify-write; numbers
// are not distinct, and Posted counts failures.
func (c *Completion) Done(err error) Seq {
	if err == nil {
		return Seq(c.posted.Load())
	}
	return c.doneFailed(err)
}

// doneFailed is Done of a failed operation (not inlined, unlike Done).
func (c *Completion) doneFailed(err error) Seq {
	// Numbered under mu, so failures are kept in sequence order.
	c.mu.Lock()
	seq := Seq(c.posted.Add(1))
	c.errs = append(c.errs, seqErr{seq, err})
	c.nerrs.Store(int32(len(c.errs)))
	c.mu.Unlock()
	return seq
}

// completed is the last sequence completed.
func (c *Completion) completed() Seq {
	if c.immediate {
		return Seq(c.posted.Load())
	}
	return Seq(c.done.Load())
}

// Next hands out the next sequence number. Call it under the lock that orders
// posting toward the peer.
func (c *Completion) Next() Seq { return Seq(c.posted.Add(1)) }

// Posted returns the last sequence handed out (set immediate: the number of
// the last failure, see Done).
func (c *Completion) Posted() Seq { return Seq(c.posted.Load()) }

// Completed returns the last sequence completed.
func (c *Completion) Completed() Seq { return c.completed() }

// Complete marks seq, and all before it, complete (a sequence at or below the
// completed one changes nothing but may report err); err, if non-nil, is the
// failure of seq itself and is reported by the next Wait or Flush that covers it.
func (c *Completion) Complete(seq Seq, err error) {
	if err != nil {
		c.mu.Lock()
		c.errs = append(c.errs, seqErr{seq, err})
		c.nerrs.Store(int32(len(c.errs)))
		c.mu.Unlock()
	}
	if uint64(seq) > c.done.Load() {
		c.done.Store(uint64(seq))
	}
	if c.waiters.Load() > 0 {
		c.mu.Lock()
		if c.wake != nil {
			close(c.wake)
			c.wake = nil
		}
		c.mu.Unlock()
	}
}

// Fail marks the peer down: every pending and later Wait returns err, which
// should wrap ftrma.ErrProcFailed. Only the first call has an effect; it
// reports whether it was the first.
func (c *Completion) Fail(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down != nil {
		return false
	}
	c.down = err
	c.isDown.Store(true)
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
	return true
}

// Down returns the error given to Fail, or nil while the peer is up.
func (c *Completion) Down() error {
	if !c.isDown.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down
}

// Wait blocks until seq is complete, spinning for up to spin before parking.
// It returns the first unreported failure of an operation up to seq, the
// peer-down error if seq could not complete, or ctx's error.
func (c *Completion) Wait(ctx context.Context, seq Seq, spin time.Duration) error {
	// Fast path: complete, and no failure waiting to be reported (Complete
	// counts a failure before it advances done).
	if c.completed() >= seq && c.nerrs.Load() == 0 {
		return nil
	}
	return c.wait(ctx, seq, spin, true)
}

// Await blocks until seq is complete, like Wait, but leaves the failures of
// operations up to seq to the next Wait or Flush: it returns nil once seq is
// complete, the peer-down error if seq could not complete, or ctx's error. A
// transport uses it to bound the operations it keeps in flight.
func (c *Completion) Await(ctx context.Context, seq Seq) error {
	if c.completed() >= seq {
		return nil
	}
	return c.wait(ctx, seq, 0, false)
}

// wait is Wait and Await past their fast paths; take says whether to take
// the failures up to seq.
func (c *Completion) wait(ctx context.Context, seq Seq, spin time.Duration, take bool) error {
	if c.completed() < seq && spin > 0 {
		deadline := time.Now().Add(spin)
		for i := 0; c.completed() < seq; i++ {
			if i&63 == 63 && time.Now().After(deadline) {
				break
			}
		}
	}
	for {
		c.mu.Lock()
		// Announce the waiter before reading done: Complete stores done before
		// reading waiters, so one of the two sees the other.
		c.waiters.Add(1)
		if c.completed() >= seq {
			c.waiters.Add(-1)
			var err error
			if take {
				err = c.takeErrs(seq)
			}
			c.mu.Unlock()
			return err
		}
		if c.down != nil {
			c.waiters.Add(-1)
			err := c.down
			c.mu.Unlock()
			return err
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
			c.waiters.Add(-1)
		case <-ctx.Done():
			c.waiters.Add(-1)
			if c.completed() >= seq {
				continue
			}
			return ctx.Err()
		}
	}
}

// Test reports, without blocking, whether seq is complete, and then the
// failures Wait would return, which it takes as Wait does. When seq is
// incomplete and the peer is down, it is done with the peer-down error.
func (c *Completion) Test(seq Seq) (bool, error) {
	if c.completed() >= seq && c.nerrs.Load() == 0 {
		return true, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.completed() >= seq {
		return true, c.takeErrs(seq)
	}
	if c.down != nil {
		return true, c.down
	}
	return false, nil
}

// Flush waits for every sequence posted so far, as Wait; toward a peer that is
// down it fails even when nothing is pending.
func (c *Completion) Flush(ctx context.Context, spin time.Duration) error {
	if err := c.Down(); err != nil {
		return err
	}
	return c.Wait(ctx, c.Posted(), spin)
}

// takeErrs removes and returns (joined) the reported failures up to seq.
// The caller holds c.mu.
func (c *Completion) takeErrs(seq Seq) error {
	if len(c.errs) == 0 {
		return nil
	}
	var errs []error
	i := 0
	for ; i < len(c.errs) && c.errs[i].seq <= seq; i++ {
		errs = append(errs, c.errs[i].err)
	}
	c.errs = c.errs[i:]
	c.nerrs.Store(int32(len(c.errs)))
	return errors.Join(errs...)
}

// ErrPeerDown wraps ftrma.ErrProcFailed with the cause of a lost peer; the
// cause stays visible to errors.Is (for example ErrPeerLeft).
func ErrPeerDown(peer ftrma.Rank, cause error) error {
	if cause == nil {
		return &ftrma.OpError{Op: "transport", Rank: peer, Err: ftrma.ErrProcFailed}
	}
	return &ftrma.OpError{Op: "transport", Rank: peer, Err: fmt.Errorf("%w: %w", ftrma.ErrProcFailed, cause)}
}

// ErrPeerLeft is the cause of a peer-down event when the peer closed its
// transport on purpose (a goodbye, after everything it sent was delivered),
// as opposed to crashing or being fenced.
var ErrPeerLeft = errors.New("peer closed its transport")

// ErrPeerExited is the cause of a peer-down event when the launcher, which
// reaped the peer's process, said through the transport itself that the
// process is gone (shm: the launcher marks the peer's control segment). It
// is as sure as the launcher's exit notice, and earlier.
var ErrPeerExited = errors.New("the launcher reaped the peer's process")

// ErrExitReported is wrapped by the error of every peer-down event that the
// job's launcher reported through its own channel (ftrun's exit notice,
// passed on by startup's receiver), and by no other: ftrun saw the peer's
// process end (waitpid, or its host's agent did), killed it, or counted it
// failed 1.5 lease terms after it stopped renewing the peer's lease, by
// which time the peer has stopped acting. With ErrPeerExited it is the only
// cause of a peer-down that proves the peer can no longer act; a
// transport's own peer-down (a connection reset, closed or timed out, a
// queue pair in error) proves only that the connection is gone. Test with
// errors.Is.
var ErrExitReported = errors.New("reported by ftrun")

// ErrFenced is wrapped by the error of a connection that the peer refused
// because it counts this rank failed and has fenced it out: this rank is
// not (or no longer) in the peer's world, and trying again cannot change
// that.
var ErrFenced = errors.New("fenced out by the peer: it counts this rank failed")
