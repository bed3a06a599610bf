package window_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/window"
)

// allocAll allocates a window of size bytes at every rank of world and
// returns them indexed by rank.
func allocAll(t *testing.T, world *commtest.World, ctx context.Context, size int) []*window.Window {
	t.Helper()
	wins := make([]*window.Window, len(world.Comms))
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, size)
		wins[c.Rank()] = w
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: allocate: %v", r, err)
		}
	}
	return wins
}

// mustTimeOut checks that Lock waits (a conflicting lock is held): it must
// end with the short context's deadline.
func mustTimeOut(t *testing.T, ctx context.Context, w *window.Window, target ftrma.Rank, lt window.LockType, what string) {
	t.Helper()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.Lock(short, target, lt); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			w.Unlock(ctx, target)
		}
		t.Fatalf("%s: %v, want DeadlineExceeded", what, err)
	}
}

func waitFailed(t *testing.T, ctx context.Context, c *comm.Comm, r ftrma.Rank) {
	t.Helper()
	if err := commtest.AwaitGone(ctx, c, r); err != nil {
		t.Fatal(err)
	}
}

// A shared lock held by a rank that died is taken over by an exclusive
// locker, while a live shared holder still keeps it out.
func TestExclusiveTakesOverDeadSharedHolder(t *testing.T) {
	world := commtest.New(t, 4)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	for _, r := range []int{2, 3} {
		if err := wins[r].Lock(ctx, 0, window.Shared); err != nil {
			t.Fatal(err)
		}
	}
	world.Net.Crash(2)
	waitFailed(t, ctx, world.Comms[1], 2)
	mustTimeOut(t, ctx, wins[1], 0, window.Exclusive, "exclusive lock while live rank 3 holds a shared one")
	if err := wins[3].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := wins[1].Lock(ctx, 0, window.Exclusive); err != nil {
		t.Fatalf("exclusive lock with only a dead shared holder left: %v", err)
	}
	mustTimeOut(t, ctx, wins[3], 0, window.Shared, "shared lock while rank 1 holds the exclusive one")
	if err := wins[1].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := wins[3].Lock(ctx, 0, window.Shared); err != nil {
		t.Fatalf("shared lock after the exclusive holder left: %v", err)
	}
	if err := wins[3].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// A shared locker that dies while it waits (its slot set, the gate held by
// an exclusive holder) blocks nobody: once the holder leaves, an exclusive
// locker takes the dead rank's slot over.
func TestDeadSharedWaiterTakenOver(t *testing.T) {
	world := commtest.New(t, 4)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	if err := wins[1].Lock(ctx, 0, window.Exclusive); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- wins[2].Lock(ctx, 0, window.Shared) }()
	mustTimeOut(t, ctx, wins[3], 0, window.Exclusive, "exclusive lock while rank 1 holds it")
	world.Net.Crash(2)
	if err := <-waiting; err == nil {
		t.Fatal("the crashed rank's shared lock went through while rank 1 held the exclusive one")
	}
	waitFailed(t, ctx, world.Comms[3], 2)
	if err := wins[1].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := wins[3].Lock(short, 0, window.Exclusive); err != nil {
		t.Fatalf("exclusive lock with a dead shared waiter left: %v", err)
	}
	if err := wins[3].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// One death during a LockAll epoch does not block exclusive locks on any
// surviving target; an exclusive lock held by a dead rank is taken over by a
// shared locker too.
func TestDeathDuringLockAll(t *testing.T) {
	world := commtest.New(t, 4)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	if err := wins[2].LockAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wins[2].Lock(ctx, 0, window.Shared); !errors.Is(err, ftrma.ErrLockHeld) {
		t.Fatalf("second lock under LockAll: %v, want ErrLockHeld", err)
	}
	mustTimeOut(t, ctx, wins[0], 1, window.Exclusive, "exclusive lock during rank 2's LockAll")
	mustTimeOut(t, ctx, wins[3], 2, window.Exclusive, "exclusive lock on the LockAll holder itself")
	world.Net.Crash(2)
	for _, r := range []int{0, 1, 3} {
		waitFailed(t, ctx, world.Comms[r], 2)
	}
	errs := world.RunRanks(ctx, []ftrma.Rank{0, 1, 3}, func(ctx context.Context, c *comm.Comm) error {
		w := wins[c.Rank()]
		for _, target := range []ftrma.Rank{0, 1, 3} {
			if err := w.Lock(ctx, target, window.Exclusive); err != nil {
				return fmt.Errorf("exclusive lock on %d after the LockAll holder died: %v", target, err)
			}
			var v int64
			if err := w.FetchAndOp(target, 0, 1, &v, window.Sum); err != nil {
				return err
			}
			if err := w.Unlock(ctx, target); err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	// A dead exclusive holder gives way to a shared locker.
	if err := wins[3].Lock(ctx, 0, window.Exclusive); err != nil {
		t.Fatal(err)
	}
	world.Net.Crash(3)
	waitFailed(t, ctx, world.Comms[1], 3)
	if err := wins[1].Lock(ctx, 0, window.Shared); err != nil {
		t.Fatalf("shared lock held exclusively by a dead rank: %v", err)
	}
	if err := wins[1].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// A Lock whose context ends while it waits leaves nothing behind at the
// target: once the holder unlocks, every other rank can lock.
func TestCancelledLockLeavesNoTrace(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := w.Lock(ctx, 2, window.Exclusive); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			for _, lt := range []window.LockType{window.Exclusive, window.Shared, window.Exclusive} {
				short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				err := w.Lock(short, 2, lt)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("lock type %d while rank 0 holds the exclusive lock: %v", lt, err)
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := w.Unlock(ctx, 2); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// Every rank in turn, each kind: a leftover word would block one.
		for turn := range c.Size() {
			if int(c.Rank()) == turn {
				for _, lt := range []window.LockType{window.Exclusive, window.Shared} {
					short, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := w.Lock(short, 2, lt)
					cancel()
					if err != nil {
						return fmt.Errorf("lock type %d after the cancelled tries: %v", lt, err)
					}
					if err := w.Unlock(ctx, 2); err != nil {
						return err
					}
				}
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		return w.Free(ctx)
	})
}

// Shared and exclusive lockers mixed: an exclusive holder writes two words
// with two separate puts, and every shared holder must read them equal; the
// exclusive holders' read-modify-write counter must come out exact.
func TestMixedLocksExclude(t *testing.T) {
	const rounds = 1000
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 24)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		buf := make([]byte, 16)
		for i := range rounds {
			if (i+int(c.Rank()))%2 == 0 {
				if err := w.Lock(ctx, 0, window.Exclusive); err != nil {
					return err
				}
				if err := w.Get(0, 16, buf[:8]); err != nil {
					return err
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
				n := binary.LittleEndian.Uint64(buf[:8]) + 1
				binary.LittleEndian.PutUint64(buf[:8], n)
				for _, off := range []uint64{0, 8, 16} {
					if err := w.Put(0, off, buf[:8]); err != nil {
						return err
					}
					if err := w.Flush(ctx, 0); err != nil {
						return err
					}
				}
			} else {
				if err := w.Lock(ctx, 0, window.Shared); err != nil {
					return err
				}
				if err := w.Get(0, 0, buf); err != nil {
					return err
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
				if a, b := binary.LittleEndian.Uint64(buf), binary.LittleEndian.Uint64(buf[8:]); a != b {
					return fmt.Errorf("under a shared lock: words %d and %d, an exclusive writer was inside", a, b)
				}
			}
			if err := w.Unlock(ctx, 0); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			if got, want := binary.LittleEndian.Uint64(w.Bytes()[16:]), uint64(c.Size()*rounds/2); got != want {
				return fmt.Errorf("counter %d, want %d: two exclusive holders at once", got, want)
			}
		}
		return w.Free(ctx)
	})
}

// Ranks hold locks, shared and exclusive, when another rank revokes the
// window: every Unlock returns ErrRevoked (or nil, if it ran first), every
// rank frees the window (one without unlocking), and a Shrink of the
// communicator afterwards completes at every rank.
func TestFreeAndShrinkAfterRevokeWithLocksHeld(t *testing.T) {
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		// Rank 0 holds rank 1 exclusively, rank 2 holds rank 0 shared, rank
		// 3 holds ranks 0, 2 and 3 shared (and frees without unlocking).
		switch c.Rank() {
		case 0:
			err = w.Lock(ctx, 1, window.Exclusive)
		case 2:
			err = w.Lock(ctx, 0, window.Shared)
		case 3:
			for _, r := range []ftrma.Rank{0, 2, 3} {
				if err == nil {
					err = w.Lock(ctx, r, window.Shared)
				}
			}
		}
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			if err := w.Revoke(); err != nil {
				return err
			}
		}
		for !w.IsRevoked() {
			if ctx.Err() != nil {
				return errors.New("the revocation never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		switch c.Rank() {
		case 0:
			err = w.Unlock(ctx, 1)
		case 2:
			err = w.Unlock(ctx, 0)
		}
		if err != nil && !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("unlock on a revoked window: %v", err)
		}
		if err := w.Unlock(ctx, 0); c.Rank() != 3 && !errors.Is(err, ftrma.ErrNotLocked) {
			return fmt.Errorf("second unlock: %v, want ErrNotLocked", err)
		}
		if err := w.Free(ctx); err != nil {
			return fmt.Errorf("free: %v", err)
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink: %v", err)
		}
		if s.Size() != 4 {
			return fmt.Errorf("shrunk to %d ranks", s.Size())
		}
		return nil
	})
}

// A lock dropped on a revoked window is released at its target: the window
// Shrink makes (which shares the lock words) can take it.
func TestShrunkWindowLocksAfterRevokedUnlock(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := w.Lock(ctx, 1, window.Exclusive); err != nil {
				return err
			}
		}
		if c.Rank() == 2 {
			if err := w.Lock(ctx, 2, window.Shared); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			w.Revoke()
		}
		for !w.IsRevoked() {
			time.Sleep(time.Millisecond)
		}
		if c.Rank() == 0 || c.Rank() == 2 {
			if err := w.Unlock(ctx, c.Rank()/2+1); !errors.Is(err, ftrma.ErrRevoked) {
				return fmt.Errorf("unlock on a revoked window: %v, want ErrRevoked", err)
			}
		}
		s, err := w.Shrink(ctx)
		if err != nil {
			return err
		}
		for turn := range s.Size() {
			if int(s.Rank()) == turn {
				for _, target := range []ftrma.Rank{1, 2} {
					short, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := s.Lock(short, target, window.Exclusive)
					cancel()
					if err != nil {
						return fmt.Errorf("exclusive lock on %d in the shrunk window: %v", target, err)
					}
					if err := s.Unlock(ctx, target); err != nil {
						return err
					}
				}
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		return s.Free(ctx)
	})
}

// LockAll/UnlockAll: an epoch of puts to every rank, visible afterwards;
// LockAll keeps exclusive lockers out and lets shared ones in.
func TestLockAllEpoch(t *testing.T) {
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8*c.Size())
		if err != nil {
			return err
		}
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		for r := range c.Size() {
			var v [8]byte
			binary.LittleEndian.PutUint64(v[:], uint64(100+c.Rank()))
			if err := w.Put(ftrma.Rank(r), 8*uint64(c.Rank()), v[:]); err != nil {
				return err
			}
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		if err := w.UnlockAll(ctx); !errors.Is(err, ftrma.ErrNotLocked) {
			return fmt.Errorf("UnlockAll without LockAll: %v, want ErrNotLocked", err)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for r := range c.Size() {
			if got := binary.LittleEndian.Uint64(w.Bytes()[8*r:]); got != uint64(100+r) {
				return fmt.Errorf("word %d is %d after the epoch, want %d", r, got, 100+r)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := w.LockAll(ctx); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() != 0 {
			target := ftrma.Rank(c.Rank()) // rank 0 holds everyone's
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := w.Lock(short, target, window.Exclusive)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("exclusive lock during rank 0's LockAll: %v, want DeadlineExceeded", err)
			}
			if err := w.Lock(ctx, target, window.Shared); err != nil {
				return fmt.Errorf("shared lock during rank 0's LockAll: %v", err)
			}
			if err := w.Unlock(ctx, target); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := w.UnlockAll(ctx); err != nil {
				return err
			}
		}
		return w.Free(ctx)
	})
}

// LockAll with a dead rank fails with ErrProcFailed and holds no lock
// afterwards (it does not hang).
func TestLockAllWithDeadRank(t *testing.T) {
	world := commtest.New(t, 4)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	world.Net.Crash(2)
	waitFailed(t, ctx, world.Comms[0], 2)
	if err := wins[0].LockAll(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("LockAll with rank 2 dead: %v, want ErrProcFailed", err)
	}
	for _, r := range []ftrma.Rank{0, 1, 3} {
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := wins[1].Lock(short, r, window.Exclusive)
		cancel()
		if err != nil {
			t.Fatalf("exclusive lock on %d after the failed LockAll: %v", r, err)
		}
		if err := wins[1].Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := wins[0].Unlock(ctx, r); !errors.Is(err, ftrma.ErrNotLocked) {
			t.Fatalf("the failed LockAll still holds %d: %v", r, err)
		}
	}
	s := make(chan error, 1)
	go func() { s <- wins[0].Lock(ctx, 2, window.Shared) }()
	if err := <-s; !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("lock on a dead rank: %v, want ErrProcFailed", err)
	}
}

// Bad input to Lock and Unlock is refused with a clear error.
func TestLockBadInput(t *testing.T) {
	world := commtest.New(t, 2)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	w := wins[0]
	for _, c := range []struct {
		err  error
		want error
	}{
		{w.Lock(ctx, 5, window.Shared), ftrma.ErrRankOutOfRange},
		{w.Lock(ctx, -1, window.Shared), ftrma.ErrRankOutOfRange},
		{w.Lock(ctx, 1, window.LockType(7)), ftrma.ErrInvalid},
		{w.Unlock(ctx, 1), ftrma.ErrNotLocked},
		{w.Unlock(ctx, 9), ftrma.ErrRankOutOfRange},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%v, want %v", c.err, c.want)
		}
	}
	if err := w.Lock(ctx, 1, window.Shared); err != nil {
		t.Fatal(err)
	}
	if err := w.Free(ctx); !errors.Is(err, ftrma.ErrLockHeld) {
		t.Fatalf("Free holding a lock: %v, want ErrLockHeld", err)
	}
	if err := w.Unlock(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

func benchLock(b *testing.B, n int, lt window.LockType) {
	benchOn(b, n, func(ctx context.Context, c *comm.Comm) (*window.Window, error) {
		return window.Allocate(ctx, c, 8)
	}, func(ctx context.Context, w *window.Window) error {
		if err := w.Lock(ctx, 1, lt); err != nil {
			return err
		}
		return w.Unlock(ctx, 1)
	})
}

// Lock and Unlock without contention, on shared memory: three operations
// either way (an exclusive lock reads one slot per rank in its one Read).
func BenchmarkSHMLockUnlockShared2(b *testing.B)     { benchLock(b, 2, window.Shared) }
func BenchmarkSHMLockUnlockExclusive2(b *testing.B)  { benchLock(b, 2, window.Exclusive) }
func BenchmarkSHMLockUnlockShared16(b *testing.B)    { benchLock(b, 16, window.Shared) }
func BenchmarkSHMLockUnlockExclusive16(b *testing.B) { benchLock(b, 16, window.Exclusive) }

// Waiting exclusive lockers never keep shared lockers out: ranks 0 and 1
// hold shared locks on targets 0 and 1 respectively, exclusive lockers 2 and
// 3 wait on those targets, and then 0 and 1 take shared locks on each
// other's target. Had the waiting exclusive lockers kept the slots they got,
// the four would wait for each other forever.
func TestWaitingExclusiveLetsSharedIn(t *testing.T) {
	for _, mk := range commtest.Worlds() {
		t.Run(mk.Name, func(t *testing.T) {
			world := mk.New(t, 4)
			ctx := testCtx(t, time.Minute)
			wins := allocAll(t, world, ctx, 8)
			for r := range 2 {
				if err := wins[r].Lock(ctx, ftrma.Rank(r), window.Shared); err != nil {
					t.Fatal(err)
				}
			}
			excl := make(chan error, 2)
			for r := 2; r < 4; r++ {
				go func() {
					target := ftrma.Rank(3 - r) // rank 2 → target 1, rank 3 → target 0
					err := wins[r].Lock(ctx, target, window.Exclusive)
					if err == nil {
						err = wins[r].Unlock(ctx, target)
					}
					excl <- err
				}()
			}
			time.Sleep(20 * time.Millisecond) // let them start waiting (not required for the outcome)
			shared := make(chan error, 2)
			for r := range 2 {
				go func() {
					short, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					other := ftrma.Rank(1 - r)
					err := wins[r].Lock(short, other, window.Shared)
					if err != nil {
						err = fmt.Errorf("rank %d: shared lock on %d while exclusive lockers wait: %w", r, other, err)
					} else {
						err = wins[r].Unlock(ctx, other)
					}
					if e := wins[r].Unlock(ctx, ftrma.Rank(r)); err == nil {
						err = e
					}
					shared <- err
				}()
			}
			for range 2 {
				if err := <-shared; err != nil {
					t.Error(err)
				}
			}
			for range 2 {
				if err := <-excl; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// countingTransport counts the one-sided operations a rank posts.
type countingTransport struct {
	transport.Transport
	atomics, reads, readBytes, writes atomic.Int64
}

func (t *countingTransport) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	t.atomics.Add(1)
	return t.Transport.CompareAndSwap64(peer, key, off, old, new, result)
}

func (t *countingTransport) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	t.atomics.Add(1)
	return t.Transport.FetchAndAdd64(peer, key, off, delta, result)
}

func (t *countingTransport) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	t.reads.Add(1)
	t.readBytes.Add(int64(len(dst)))
	return t.Transport.Read(peer, key, off, dst)
}

func (t *countingTransport) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	t.writes.Add(1)
	return t.Transport.Write(peer, key, off, src)
}

// countingComm is a communicator whose windows post through a
// countingTransport.
type countingComm struct {
	*comm.Comm
	t *countingTransport
}

func (c countingComm) Transport() transport.Transport { return c.t }

// An uncontended lock epoch costs the same few operations whatever the
// number of ranks: a CAS and one Read of the slots (8 bytes a rank) for an
// exclusive lock, a CAS and a fetch-and-add for a shared one, and one CAS
// for either Unlock.
func TestLockEpochOperations(t *testing.T) {
	for _, mk := range []commtest.Maker{{Name: "memnet", New: commtest.New}, {Name: "weak", New: commtest.NewWeak}} {
		for _, n := range []int{3, 256} {
			t.Run(fmt.Sprintf("%s/%d", mk.Name, n), func(t *testing.T) {
				world := mk.New(t, n)
				ctx := testCtx(t, time.Minute)
				ct := &countingTransport{Transport: world.Comms[0].Transport()}
				wins := make([]*window.Window, n)
				for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
					var wc window.Comm = c
					if c.Rank() == 0 {
						wc = countingComm{c, ct}
					}
					w, err := window.Allocate(ctx, wc, 8)
					wins[c.Rank()] = w
					return err
				}) {
					if err != nil {
						t.Fatalf("rank %d: allocate: %v", r, err)
					}
				}
				for _, c := range []struct {
					lt                 window.LockType
					atomics, readBytes int64
				}{
					{window.Exclusive, 2, 8 * int64(n)},
					{window.Shared, 3, 0},
				} {
					a0, r0, b0, w0 := ct.atomics.Load(), ct.reads.Load(), ct.readBytes.Load(), ct.writes.Load()
					if err := wins[0].Lock(ctx, 1, c.lt); err != nil {
						t.Fatal(err)
					}
					if err := wins[0].Unlock(ctx, 1); err != nil {
						t.Fatal(err)
					}
					atomics, readBytes := ct.atomics.Load()-a0, ct.readBytes.Load()-b0
					reads, writes := ct.reads.Load()-r0, ct.writes.Load()-w0
					if atomics != c.atomics || readBytes != c.readBytes || reads > 1 || writes != 0 {
						t.Errorf("lock type %d epoch: %d atomics, %d reads of %d bytes, %d writes; want %d atomics, %d bytes read in at most one read, no writes",
							c.lt, atomics, reads, readBytes, writes, c.atomics, c.readBytes)
					}
				}
			})
		}
	}
}
