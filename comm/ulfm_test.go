package comm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport"
)

// A rank that closes cleanly is a departure, not a failure: with rank 3
// closed and rank 5 crashed, Failed and GetFailed list rank 5 only and
// Departed rank 3; ProcFailed(3) is true (gone) as for a failure; a collective that needs rank 3
// fails with an error wrapping both ErrProcFailed and ErrPeerLeft; Agree
// after acknowledging rank 5 reports no error (the departure raises none),
// and Shrink leaves both out.
func TestDepartureIsNoFailure(t *testing.T) {
	const n = 6
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	w.Net.Crash(5)
	errs := w.RunRanks(ctx, []ftrma.Rank{0, 1, 2, 3, 4}, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 3 {
			return c.Close()
		}
		if err := commtest.AwaitGone(ctx, c, 3, 5); err != nil {
			return err
		}
		if f := c.Failed(); !slices.Equal(f, []ftrma.Rank{5}) {
			return fmt.Errorf("Failed() = %v, want [5]", f)
		}
		if f := c.GetFailed(); !slices.Equal(f, []ftrma.Rank{5}) {
			return fmt.Errorf("GetFailed() = %v, want [5]", f)
		}
		if d := c.Departed(); !slices.Equal(d, []ftrma.Rank{3}) {
			return fmt.Errorf("Departed() = %v, want [3]", d)
		}
		if !c.ProcFailed(3) || !c.ProcFailed(5) {
			return fmt.Errorf("ProcFailed(3) = %v, ProcFailed(5) = %v; want true (gone) for both", c.ProcFailed(3), c.ProcFailed(5))
		}
		err := c.Barrier(ctx)
		var oe *ftrma.OpError
		if !errors.Is(err, ftrma.ErrProcFailed) || !errors.As(err, &oe) {
			return fmt.Errorf("barrier with rank 3 gone and 5 failed: %v, want ErrProcFailed", err)
		}
		if oe.Rank == 3 && !errors.Is(err, transport.ErrPeerLeft) {
			return fmt.Errorf("barrier waiting for departed rank 3: %v, want ErrPeerLeft too", err)
		}
		if oe.Rank == 5 && errors.Is(err, transport.ErrPeerLeft) {
			return fmt.Errorf("barrier waiting for failed rank 5: %v, which is no departure", err)
		}
		if got := c.AckFailed(c.Size()); got != 1 {
			return fmt.Errorf("AckFailed = %d, want 1", got)
		}
		if v, err := c.Agree(ctx, 5); err != nil || v != 5 {
			return fmt.Errorf("agree after acknowledging: %d, %v; want 5, nil", v, err)
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		if s.Size() != n-2 {
			return fmt.Errorf("shrink gave %d ranks, want %d", s.Size(), n-2)
		}
		if f, d := s.Failed(), s.Departed(); len(f)+len(d) != 0 {
			return fmt.Errorf("shrunk communicator: failed %v, departed %v", f, d)
		}
		return s.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// mpi4py's ULFM tests without failures: AckFailed acknowledges nothing,
// GetFailed is empty; Iagree gives each value back; a root's Iagree cannot
// complete (Test is false) before the others contribute, and then every
// rank gets the AND; Ishrink gives a communicator of the same size and
// ranks, its request done after Wait.
func TestIagreeIshrinkWithoutFailures(t *testing.T) {
	const n = 4
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		for _, k := range []int{0, c.Size(), -1} {
			if got := c.AckFailed(k); got != 0 {
				return fmt.Errorf("AckFailed(%d) = %d without failures", k, got)
			}
		}
		if f := c.GetFailed(); len(f) != 0 {
			return fmt.Errorf("GetFailed() = %v without failures", f)
		}
		for i := range uint64(5) {
			if v, err := c.Iagree(i).Wait(ctx); err != nil || v != i {
				return fmt.Errorf("Iagree(%d) = %d, %v", i, v, err)
			}
		}
		for root := range ftrma.Rank(n) {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			var req *comm.AgreeRequest
			if c.Rank() == root {
				req = c.Iagree(0b1011)
				if req.Test() {
					return fmt.Errorf("root %d: Iagree completed before the others took part", root)
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
			} else {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				req = c.Iagree(0b1101)
			}
			select {
			case <-req.Done():
			case <-ctx.Done():
				return ctx.Err()
			}
			if !req.Test() {
				return errors.New("Test is false after Done closed")
			}
			if v, err := req.Wait(ctx); err != nil || v != 0b1001 {
				return fmt.Errorf("root %d: Iagree = %#b, %v; want 0b1001", root, v, err)
			}
		}
		req := c.Ishrink()
		s, err := req.Wait(ctx)
		if err != nil {
			return err
		}
		if !req.Test() {
			return errors.New("Ishrink: Test is false after Wait")
		}
		if s.Size() != c.Size() || s.Rank() != c.Rank() || s.ContextID() == c.ContextID() {
			return fmt.Errorf("Ishrink: rank %d of %d (context %d), want %d of %d, new context", s.Rank(), s.Size(), s.ContextID(), c.Rank(), c.Size())
		}
		return s.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A rank fails while an Iagree is under way (it never contributes, so the
// agreement cannot complete before the failure): every survivor's request
// completes with the same value, the AND of the survivors' flags, and an
// error wrapping ErrProcFailed naming the failed rank, not yet
// acknowledged. After AckFailed the next Iagree reports no error, and
// Ishrink leaves the failed rank out.
func TestIagreeAcrossFailure(t *testing.T) {
	const n, victim = 6, 5
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	started := make(chan struct{}, n)
	crashed := make(chan struct{})
	go func() {
		for range n - 1 {
			<-started
		}
		w.Net.Crash(victim)
		close(crashed)
	}()
	values := make([]uint64, n)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == victim {
			<-crashed
			return nil
		}
		req := c.Iagree(^uint64(0) &^ (1 << uint(c.Rank())))
		started <- struct{}{}
		v, err := req.Wait(ctx)
		var oe *ftrma.OpError
		if !errors.Is(err, ftrma.ErrProcFailed) || !errors.As(err, &oe) || oe.Rank != victim {
			return fmt.Errorf("Iagree across the failure of rank %d: %#x, %v; want ErrProcFailed for rank %d", victim, v, err, victim)
		}
		values[c.Rank()] = v
		if f := c.GetFailed(); !slices.Equal(f, []ftrma.Rank{victim}) {
			return fmt.Errorf("GetFailed() = %v, want [%d]", f, victim)
		}
		if got := c.AckFailed(0); got != 0 {
			return fmt.Errorf("AckFailed(0) = %d before any acknowledgement", got)
		}
		if got := c.AckFailed(c.Size()); got != 1 {
			return fmt.Errorf("AckFailed(size) = %d, want 1", got)
		}
		if v, err := c.Iagree(3).Wait(ctx); err != nil || v != 3 {
			return fmt.Errorf("Iagree after acknowledging: %d, %v; want 3, nil", v, err)
		}
		s, err := c.Ishrink().Wait(ctx)
		if err != nil {
			return err
		}
		if s.Size() != n-1 || s.Rank() != c.Rank() {
			return fmt.Errorf("Ishrink: rank %d of %d, want %d of %d", s.Rank(), s.Size(), c.Rank(), n-1)
		}
		return s.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	want := ^uint64(0) &^ (1<<victim - 1) // every survivor cleared its bit
	for r := range ftrma.Rank(n) {
		if r != victim && values[r] != want {
			t.Errorf("rank %d decided %#x, want %#x", r, values[r], want)
		}
	}
}

// AckFailed with two failures known: acknowledging the first leaves the
// other reported by Agree (with its value), the count only grows (0, a
// negative n and a smaller n change nothing), FailureGetAcked is the
// first count ranks of GetFailed, and acknowledging all quiets Agree.
func TestAckFailedSeveral(t *testing.T) {
	const n = 6
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	w.Net.Crash(4)
	w.Net.Crash(5)
	errs := w.RunRanks(ctx, []ftrma.Rank{0, 1, 2, 3}, func(ctx context.Context, c *comm.Comm) error {
		if err := commtest.AwaitGone(ctx, c, 4, 5); err != nil {
			return err
		}
		failed := c.GetFailed()
		if len(failed) != 2 {
			return fmt.Errorf("GetFailed() = %v, want ranks 4 and 5", failed)
		}
		if got := c.AckFailed(1); got != 1 {
			return fmt.Errorf("AckFailed(1) = %d, want 1", got)
		}
		if acked := c.FailureGetAcked(); !slices.Equal(acked, failed[:1]) {
			return fmt.Errorf("acknowledged %v after AckFailed(1), want the first of GetFailed %v", acked, failed)
		}
		v, err := c.Agree(ctx, 6)
		var oe *ftrma.OpError
		if v != 6 || !errors.Is(err, ftrma.ErrProcFailed) || !errors.As(err, &oe) || oe.Rank != failed[1] {
			return fmt.Errorf("Agree with %d of %v acknowledged: %d, %v; want 6 and ErrProcFailed for rank %d", 1, failed, v, err, failed[1])
		}
		for _, k := range []int{0, -1, 1} {
			if got := c.AckFailed(k); got != 1 {
				return fmt.Errorf("AckFailed(%d) after AckFailed(1) = %d, want 1", k, got)
			}
		}
		if got := c.AckFailed(c.Size()); got != 2 {
			return fmt.Errorf("AckFailed(size) = %d, want 2", got)
		}
		if got := c.AckFailed(1); got != 2 {
			return fmt.Errorf("AckFailed(1) after acknowledging both = %d, want 2: acknowledgements only grow", got)
		}
		if v, err := c.Agree(ctx, 7); v != 7 || err != nil {
			return fmt.Errorf("Agree with both acknowledged: %d, %v; want 7, nil", v, err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
