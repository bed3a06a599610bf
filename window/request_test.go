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

// Test reports a request incomplete while its operation cannot complete
// (the link is cut), complete after Wait, and complete with ErrProcFailed
// once the target crashed; WaitAll then returns that error (and not ctx's)
// besides the success of a request toward a live rank, and the outcome
// stays with the request.
func TestRequestTestAndWaitAll(t *testing.T) {
	world := commtest.New(t, 3)
	ctx := testCtx(t, time.Minute)
	wins := make([]*window.Window, 3)
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 16)
		wins[c.Rank()] = w
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	w := wins[0]
	live, err := w.Raccumulate(2, 0, []int64{5}, window.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if done, err := live.Test(); !done || err != nil {
		t.Fatalf("Test after Wait: %v, %v; want true, nil", done, err)
	}

	world.Net.Cut(0, 1)
	var got [1]int64
	stuck, err := w.RgetAccumulate(1, 0, []int64{1}, got[:], window.Sum)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if done, err := stuck.Test(); done || err != nil {
			t.Fatalf("Test across a cut link: %v, %v; want false, nil", done, err)
		}
	}
	// Test alone completes a request: poll it until done.
	polled, err := w.Raccumulate(2, 8, []int64{1}, window.Sum)
	if err != nil {
		t.Fatal(err)
	}
	for {
		done, err := polled.Test()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("a request toward a live rank never tested complete")
		}
		time.Sleep(time.Millisecond)
	}

	world.Net.Crash(1)
	err = window.WaitAll(ctx, live, nil, stuck, polled)
	if !errors.Is(err, ftrma.ErrProcFailed) || ctx.Err() != nil {
		t.Fatalf("WaitAll with a crashed target: %v, want ErrProcFailed", err)
	}
	var oe *ftrma.OpError
	if !errors.As(err, &oe) || oe.Rank != 1 {
		t.Fatalf("WaitAll's error %v does not name rank 1", err)
	}
	if done, err := stuck.Test(); !done || !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("Test after the crash: %v, %v; want true, ErrProcFailed", done, err)
	}
	if err := stuck.Wait(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("Wait again: %v, want the same ErrProcFailed", err)
	}
	var v [2]int64
	if err := w.GetAccumulate(2, 0, nil, v[:], window.NoOp); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if v != [2]int64{5, 1} {
		t.Fatalf("rank 2 holds %v, want [5 1]", v)
	}
}

// Request-based accumulates of every kind of completion (posted fetch-add,
// posted read, compare-and-swap loop) hold their results once WaitAll
// returns, on every world.
func TestRequestsAccumulateWaitAll(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 24)
		if err != nil {
			return err
		}
		var check error
		if c.Rank() == 0 {
			check = func() error {
				a := window.As[uint64](w)
				var prior, peek, maxPrior [1]uint64
				r1, err := a.RgetAccumulate(1, 0, []uint64{7}, prior[:], window.Sum)
				if err != nil {
					return err
				}
				r2, err := a.RgetAccumulate(1, 8, []uint64{9}, maxPrior[:], window.Max)
				if err != nil {
					return err
				}
				r3, err := a.RgetAccumulate(1, 0, nil, peek[:], window.NoOp)
				if err != nil {
					return err
				}
				if err := window.WaitAll(ctx, r1, r2, r3); err != nil {
					return err
				}
				if prior[0] != 0 || maxPrior[0] != 0 || peek[0] != 7 {
					return fmt.Errorf("results %d, %d, %d; want 0, 0, 7", prior[0], maxPrior[0], peek[0])
				}
				return nil
			}()
		}
		return errors.Join(check, c.Barrier(ctx), w.Free(ctx))
	})
}
