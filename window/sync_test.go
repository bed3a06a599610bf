package window_test

import (
	"bytes"
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

// Sync between local stores and a peer's Get, and between a peer's Put and
// local loads (with a barrier as the event that orders them, as in MPI).
func TestSyncLocalAndRemote(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 16)
		if err != nil {
			return err
		}
		me, peer := c.Rank(), 1-c.Rank()
		copy(w.Bytes()[:8], fmt.Sprintf("local %d", me))
		if err := w.Sync(); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		got := make([]byte, 7)
		if err := w.Get(peer, 0, got); err != nil {
			return err
		}
		if err := w.FlushLocal(ctx, peer); err != nil {
			return err
		}
		if want := fmt.Sprintf("local %d", peer); string(got) != want {
			return fmt.Errorf("got %q from the peer's local stores, want %q", got, want)
		}
		if err := w.Put(peer, 8, []byte(fmt.Sprintf("put by %d", me))); err != nil {
			return err
		}
		if err := w.Flush(ctx, peer); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := w.Sync(); err != nil {
			return err
		}
		if want := fmt.Sprintf("put by %d", peer); string(w.Bytes()[8:16]) != want {
			return fmt.Errorf("local memory holds %q after the peer's put, want %q", w.Bytes()[8:16], want)
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
		if err := w.Sync(); !errors.Is(err, window.ErrFreed) {
			return fmt.Errorf("Sync on a freed window: %v, want ErrFreed", err)
		}
		return nil
	})
}

// Sync is local: it works on a revoked window.
func TestSyncOnRevokedWindow(t *testing.T) {
	world := commtest.New(t, 2)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	wins[0].Revoke()
	if err := wins[0].Sync(); err != nil {
		t.Fatalf("Sync on a revoked window: %v", err)
	}
}

// FlushLocal and FlushLocalAll: after them get buffers hold the data and
// atomics' results are there; toward a crashed rank they fail with
// ErrProcFailed (never hang); bad ranks and revoked windows give clear errors.
func TestFlushLocal(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		copy(w.Bytes(), bytes.Repeat([]byte{byte('a' + c.Rank())}, 56))
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		peer := ftrma.Rank((int(c.Rank()) + 1) % c.Size())
		buf := make([]byte, 56)
		var old int64
		if err := w.Get(peer, 0, buf); err != nil {
			return err
		}
		if err := w.FetchAndOp(peer, 56, 1, &old, window.Sum); err != nil {
			return err
		}
		if err := w.FlushLocal(ctx, peer); err != nil {
			return err
		}
		if !bytes.Equal(buf, bytes.Repeat([]byte{byte('a' + peer)}, 56)) {
			return fmt.Errorf("get after FlushLocal: %q", buf)
		}
		if old != 0 {
			return fmt.Errorf("fetch-and-add result %d after FlushLocal, want 0", old)
		}
		bufs := make([][]byte, c.Size())
		for r := range c.Size() {
			bufs[r] = make([]byte, 8)
			if err := w.Get(ftrma.Rank(r), 0, bufs[r]); err != nil {
				return err
			}
		}
		if err := w.FlushLocalAll(ctx); err != nil {
			return err
		}
		for r, b := range bufs {
			if !bytes.Equal(b, bytes.Repeat([]byte{byte('a' + r)}, 8)) {
				return fmt.Errorf("get from %d after FlushLocalAll: %q", r, b)
			}
		}
		if err := w.FlushLocal(ctx, 7); !errors.Is(err, ftrma.ErrRankOutOfRange) {
			return fmt.Errorf("FlushLocal toward rank 7: %v", err)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	})
}

func TestFlushLocalFailures(t *testing.T) {
	world := commtest.New(t, 3)
	ctx := testCtx(t, time.Minute)
	wins := allocAll(t, world, ctx, 8)
	world.Net.Crash(2)
	buf := make([]byte, 8)
	wins[0].Get(2, 0, buf) // may fail at once or at the flush
	if err := wins[0].FlushLocal(ctx, 2); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("FlushLocal toward a crashed rank: %v, want ErrProcFailed", err)
	}
	if err := wins[0].FlushLocalAll(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("FlushLocalAll with a crashed rank: %v, want ErrProcFailed", err)
	}
	if err := wins[0].FlushLocal(ctx, 1); err != nil {
		t.Fatalf("FlushLocal toward a live rank: %v", err)
	}
	wins[1].Revoke()
	if err := wins[1].FlushLocal(ctx, 0); !errors.Is(err, ftrma.ErrRevoked) {
		t.Fatalf("FlushLocal on a revoked window: %v, want ErrRevoked", err)
	}
}
