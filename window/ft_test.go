package window_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
)

// Revoke(window) makes every rank's later operations on it return
// ErrRevoked; Free still works.
func TestWindowRevoke(t *testing.T) {
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
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
		var old int64
		target := ftrma.Rank((int(c.Rank()) + 1) % c.Size())
		for {
			err := w.FetchAndOp(target, 0, 1, &old, window.Sum)
			if err == nil {
				err = w.Flush(ctx, target)
			}
			if errors.Is(err, ftrma.ErrRevoked) {
				break
			}
			if err != nil {
				return fmt.Errorf("before the revocation arrived: %v", err)
			}
			if ctx.Err() != nil {
				return errors.New("the revocation never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		if !w.IsRevoked() {
			return errors.New("IsRevoked false after ErrRevoked")
		}
		if err := w.Put(target, 0, []byte{1}); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("put on a revoked window: %v", err)
		}
		if err := w.Lock(ctx, target, window.Shared); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("lock on a revoked window: %v", err)
		}
		if c.IsRevoked() {
			return errors.New("revoking the window revoked the communicator")
		}
		return w.Free(ctx)
	})
}

// A revocation by another rank stops Put and Get by themselves, with no
// Flush or other call that asks the communicator: the window's common path
// skips asking while no notice arrived in the process (window.NoticeCounter),
// so it must see this one arrive. Another notice (a second window's
// revocation) arriving first changes nothing for this window.
func TestRevokeStopsPutAlone(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		other, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		target := ftrma.Rank((int(c.Rank()) + 1) % c.Size())
		if err := w.Put(target, 0, []byte{1}); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 2 {
			if err := other.Revoke(); err != nil {
				return err
			}
		}
		for !other.IsRevoked() {
			if ctx.Err() != nil {
				return errors.New("the other window's revocation never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		if err := w.Put(target, 0, []byte{2}); err != nil {
			return fmt.Errorf("put after another window's revocation: %v", err)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			if err := w.Revoke(); err != nil {
				return err
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := w.Put(target, 0, []byte{3})
			if errors.Is(err, ftrma.ErrRevoked) {
				break
			}
			if err != nil {
				return fmt.Errorf("put before the revocation arrived: %v", err)
			}
			if time.Now().After(deadline) {
				return errors.New("Put never saw the revocation")
			}
			time.Sleep(time.Millisecond)
		}
		if err := w.Get(target, 0, make([]byte, 1)); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("get on the revoked window: %v", err)
		}
		if err := other.Free(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	})
}

// Shrink gives a window over the survivors that keeps their memory, renumbered
// in the old order, without shrinking the communicator; operations work on it
// and Free completes although a rank is dead.
func TestWindowShrinkKeepsMemory(t *testing.T) {
	world := commtest.New(t, 4)
	ctx := testCtx(t, time.Minute)
	wins := make([]*window.Window, 4)
	errs := world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		wins[c.Rank()] = w
		copy(w.Bytes(), fmt.Sprintf("memory of rank %d", c.Rank()))
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	world.Net.Crash(1)
	errs = world.RunRanks(ctx, []ftrma.Rank{0, 2, 3}, func(ctx context.Context, c *comm.Comm) error {
		if err := commtest.AwaitGone(ctx, c, 1); err != nil {
			return err
		}
		w := wins[c.Rank()]
		if f := w.Failed(); len(f) != 1 || f[0] != 1 {
			return fmt.Errorf("Failed() = %v, want [1]", f)
		}
		s, err := w.Shrink(ctx)
		if err != nil {
			return err
		}
		if s.Size() != 3 {
			return fmt.Errorf("shrunk window of %d ranks, want 3", s.Size())
		}
		if c.Size() != 4 {
			return errors.New("the communicator shrank too")
		}
		// Old ranks 0, 2, 3 are new ranks 0, 1, 2; old rank 2's memory is
		// new rank 1's.
		want := map[ftrma.Rank]string{0: "memory of rank 0", 1: "memory of rank 2", 2: "memory of rank 3"}
		for nr, text := range want {
			buf := make([]byte, len(text))
			if err := s.Get(nr, 0, buf); err != nil {
				return err
			}
			if err := s.Flush(ctx, nr); err != nil {
				return err
			}
			if string(buf) != text {
				return fmt.Errorf("shrunk rank %d holds %q, want %q", nr, buf, text)
			}
		}
		var old int64
		if err := s.FetchAndOp(0, 56, 1, &old, window.Sum); err != nil {
			return err
		}
		if err := s.Flush(ctx, 0); err != nil {
			return err
		}
		return s.Free(ctx)
	})
	for _, r := range []int{0, 2, 3} {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
}

// Operations toward a rank that fails while they are in flight return
// ErrProcFailed (never hang), including a lock whose holder died.
func TestLockTakenFromCrashedHolder(t *testing.T) {
	world := commtest.New(t, 3)
	ctx := testCtx(t, time.Minute)
	wins := make([]*window.Window, 3)
	world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		wins[c.Rank()] = w
		return err
	})
	if err := wins[2].Lock(ctx, 0, window.Exclusive); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := wins[1].Lock(short, 0, window.Exclusive); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock held by a live rank: %v, want DeadlineExceeded", err)
	}
	cancel()
	world.Net.Crash(2)
	if err := wins[1].Lock(ctx, 0, window.Exclusive); err != nil {
		t.Fatalf("lock held by a crashed rank: %v", err)
	}
	if err := wins[1].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
}
