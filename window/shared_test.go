package window_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/window"
)

// sharedWords is rank r's memory of a shared window as words.
func sharedWords(w *window.Window, r ftrma.Rank) ([]uint64, error) {
	b, err := w.SharedQuery(r)
	if err != nil {
		return nil, err
	}
	if len(b)%8 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return nil, fmt.Errorf("rank %d's shared memory: %d bytes at %p, not whole aligned words", r, len(b), unsafe.SliceData(b))
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8), nil
}

// AllocateShared's memory is every rank's to load and store directly: each
// rank sees what the others stored into their own memory, its stores into a
// peer's memory land in that peer's window memory (seen by the peer in
// Bytes and by others through Get), a put lands where SharedQuery sees it,
// and a rank polling a flag in its own memory sees another rank's store.
func TestAllocateShared(t *testing.T) {
	w := commtest.NewSHM(t, 4)
	ctx := testCtx(t, time.Minute)
	for r, err := range w.Run(ctx, allocateShared) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func allocateShared(ctx context.Context, c *comm.Comm) error {
	me, n := c.Rank(), ftrma.Rank(c.Size())
	next, prev := (me+1)%n, (me+n-1)%n
	w, err := window.AllocateShared(ctx, c, 64)
	if err != nil {
		return err
	}
	if b, err := w.SharedQuery(me); err != nil || len(b) != 64 || &b[0] != &w.Bytes()[0] {
		return fmt.Errorf("SharedQuery of this rank: %d bytes, %v; want Bytes", len(b), err)
	}
	mine, err := sharedWords(w, me)
	if err != nil {
		return err
	}
	atomic.StoreUint64(&mine[0], uint64(100+me))
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	for r := range n {
		words, err := sharedWords(w, r)
		if err != nil {
			return err
		}
		if got := atomic.LoadUint64(&words[0]); got != uint64(100+r) {
			return fmt.Errorf("rank %d's word 0 read directly: %d, want %d", r, got, 100+r)
		}
	}
	// A store into the next rank's memory, and a put into it.
	theirs, err := sharedWords(w, next)
	if err != nil {
		return err
	}
	atomic.StoreUint64(&theirs[1], uint64(1000+me))
	if err := w.Put(next, 16, []byte{byte(me + 1)}); err != nil {
		return err
	}
	if err := w.Flush(ctx, next); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if got := atomic.LoadUint64(&mine[1]); got != uint64(1000+prev) {
		return fmt.Errorf("rank %d's store into this rank's memory: word 1 holds %d, want %d", prev, got, 1000+prev)
	}
	if got := w.Bytes()[16]; got != byte(prev+1) {
		return fmt.Errorf("rank %d's put: byte 16 holds %d, want %d", prev, got, prev+1)
	}
	word := make([]byte, 8)
	if err := w.Get(next, 8, word); err != nil {
		return err
	}
	if err := w.Flush(ctx, next); err != nil {
		return err
	}
	if got := *(*uint64)(unsafe.Pointer(&word[0])); got != uint64(1000+me) {
		return fmt.Errorf("get of what this rank stored into rank %d's memory: %d, want %d", next, got, 1000+me)
	}
	// Rank 1 raises a flag in rank 0's memory by a plain store; rank 0 polls.
	switch me {
	case 1:
		zero, err := sharedWords(w, 0)
		if err != nil {
			return err
		}
		atomic.StoreUint64(&zero[7], 1)
	case 0:
		if err := awaitFlag(ctx, &mine[7], "the flag rank 1 stored into this rank's memory"); err != nil {
			return err
		}
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if _, err := w.SharedQuery(next); !errors.Is(err, window.ErrFreed) {
		return fmt.Errorf("SharedQuery after Free: %v, want ErrFreed", err)
	}
	return nil
}

// AllocateShared over ranks that cannot map each other's memory (memnet,
// tcp: other hosts, as far as the transport knows) fails at every rank
// with transport.ErrNotShared; SharedQuery of a window Allocate made, or of
// a rank outside the window, fails with a clear error.
func TestAllocateSharedRefused(t *testing.T) {
	refused := func(ctx context.Context, c *comm.Comm) error {
		w, err := window.AllocateShared(ctx, c, 64)
		if !errors.Is(err, transport.ErrNotShared) || !errors.Is(err, ftrma.ErrInvalid) {
			if err == nil {
				w.Free(ctx)
			}
			return fmt.Errorf("AllocateShared: %v, want ErrNotShared", err)
		}
		// The window is not made, and nothing of it is left to stop the
		// next one.
		w, err = window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		if _, err := w.SharedQuery(0); !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("SharedQuery of an Allocate window: %v, want ErrInvalid", err)
		}
		return w.Free(ctx)
	}
	t.Run("memnet", func(t *testing.T) {
		w := commtest.New(t, 3)
		for r, err := range w.Run(testCtx(t, time.Minute), refused) {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("tcp", func(t *testing.T) { runComms(t, tcpWorld(t, 3), refused) })
	t.Run("bad rank", func(t *testing.T) {
		w := commtest.NewSHM(t, 2)
		errs := w.Run(testCtx(t, time.Minute), func(ctx context.Context, c *comm.Comm) error {
			win, err := window.AllocateShared(ctx, c, 8)
			if err != nil {
				return err
			}
			for _, r := range []ftrma.Rank{-1, 2} {
				if _, err := win.SharedQuery(r); !errors.Is(err, ftrma.ErrRankOutOfRange) {
					return fmt.Errorf("SharedQuery(%d): %v, want ErrRankOutOfRange", r, err)
				}
			}
			return win.Free(ctx)
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
}

// A rank's shared memory stays mapped, with what it held, after the rank is
// gone: the transport drops its own mappings of a rank that leaves, the
// window's stay until Free, through Shrink too. (e2e's
// TestSharedMemoryOfKilledRank kills a process.)
func TestSharedMemoryOutlivesRank(t *testing.T) {
	world := commtest.NewSHM(t, 3)
	ctx := testCtx(t, time.Minute)
	const gone = 2
	errs := world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		me := c.Rank()
		w, err := window.AllocateShared(ctx, c, 4096)
		if err != nil {
			return err
		}
		mine, err := sharedWords(w, me)
		if err != nil {
			return err
		}
		for i := range mine {
			mine[i] = uint64(me)<<32 | uint64(i)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if me == gone {
			return c.Close() // leaves without freeing the window
		}
		for !world.Gone(me, gone) {
			select {
			case <-c.FailuresChanged():
			case <-ctx.Done():
				return fmt.Errorf("rank %d never counted gone: %w", gone, ctx.Err())
			}
		}
		check := func(w *window.Window, r ftrma.Rank, when string) error {
			words, err := sharedWords(w, r)
			if err != nil {
				return fmt.Errorf("%s: %w", when, err)
			}
			for i := range words {
				if v := atomic.LoadUint64(&words[i]); i != 1 && i != 2 && v != uint64(gone)<<32|uint64(i) {
					return fmt.Errorf("%s: word %d of the gone rank's memory holds %#x", when, i, v)
				}
			}
			atomic.StoreUint64(&words[1+me], 7) // still writable (words 1 and 2 are the survivors')
			return nil
		}
		if err := check(w, gone, "after the rank left"); err != nil {
			return err
		}
		if _, err := w.Get(gone, 0, make([]byte, 8)), w.Flush(ctx, gone); !errors.Is(err, ftrma.ErrProcFailed) {
			return fmt.Errorf("flush toward the gone rank: %v, want ErrProcFailed", err)
		}
		s, err := w.Shrink(ctx)
		if err != nil {
			return err
		}
		if s.Size() != 2 {
			return fmt.Errorf("shrunk window of %d ranks", s.Size())
		}
		other := 1 - me
		words, err := sharedWords(s, other)
		if err != nil {
			return err
		}
		if words[0] != uint64(other)<<32 {
			return fmt.Errorf("shrunk window: rank %d's word 0 holds %#x", other, words[0])
		}
		old, err := sharedWords(w, gone)
		if err != nil || old[0] != uint64(gone)<<32 {
			return fmt.Errorf("the old window's mapping of the gone rank after Shrink: %v", err)
		}
		return s.Free(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// SplitShared groups the ranks by host: over shared memory every rank is
// in one communicator, over memnet each is alone; AllocateShared works on
// what it returns.
func TestSplitShared(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(testing.TB, int) *commtest.World
		size int
	}{{"shm", commtest.NewSHM, 3}, {"memnet", commtest.New, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			world := tc.make(t, 3)
			errs := world.Run(testCtx(t, time.Minute), func(ctx context.Context, c *comm.Comm) error {
				hc, err := c.SplitShared(ctx)
				if err != nil {
					return err
				}
				defer hc.Close()
				if hc.Size() != tc.size {
					return fmt.Errorf("host communicator of %d ranks, want %d", hc.Size(), tc.size)
				}
				w, err := window.AllocateShared(ctx, hc, 8)
				if err != nil {
					return err
				}
				return w.Free(ctx)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
