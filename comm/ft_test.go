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
)

// The ULFM semantics mpi4py's ULFM tests check, without failures: Failed is
// empty, Agree is the AND of all inputs, Shrink keeps size and ranks.
func TestULFMWithoutFailures(t *testing.T) {
	const n = 8
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if f := c.Failed(); len(f) != 0 {
			return fmt.Errorf("Failed() = %v without failures", f)
		}
		for round := range 5 {
			// Every rank clears a different bit (of round-dependent ones).
			flag := ^uint64(0) &^ (1 << (uint(c.Rank()) + uint(round)))
			got, err := c.Agree(ctx, flag)
			if err != nil {
				return err
			}
			want := ^uint64(0)
			for r := range n {
				want &^= 1 << (uint(r) + uint(round))
			}
			if got != want {
				return fmt.Errorf("round %d: Agree = %#x, want %#x", round, got, want)
			}
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		if nc.Size() != n || nc.Rank() != c.Rank() {
			return fmt.Errorf("Shrink without failures: rank %d of %d, want %d of %d", nc.Rank(), nc.Size(), c.Rank(), n)
		}
		if nc.ContextID() == c.ContextID() {
			return fmt.Errorf("Shrink kept the context id %d", c.ContextID())
		}
		return nc.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// After Revoke every rank's non-fault-tolerant operations return
// ErrRevoked, IsRevoked turns true at every rank without communication at call
// time, and Agree and Shrink still work.
func TestRevoke(t *testing.T) {
	const n = 6
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if c.IsRevoked() {
			return errors.New("revoked before Revoke")
		}
		// A rank still in this barrier when rank 2, out of it, revokes gets
		// ErrRevoked from it: a barrier completes at each rank on its own.
		if err := c.Barrier(ctx); err != nil && !errors.Is(err, ftrma.ErrRevoked) {
			return err
		}
		if c.Rank() == 2 {
			c.Revoke()
		}
		for !c.IsRevoked() {
			select {
			case <-ctx.Done():
				return errors.New("revocation never arrived")
			case <-time.After(time.Millisecond):
			}
		}
		if err := c.Barrier(ctx); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("barrier after revoke: %v, want ErrRevoked", err)
		}
		if _, err := c.Bcast(ctx, 0, []byte("x")); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("bcast after revoke: %v, want ErrRevoked", err)
		}
		if _, err := c.Allgather(ctx, nil); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("allgather after revoke: %v, want ErrRevoked", err)
		}
		if v, err := c.Agree(ctx, 7); err != nil || v != 7 {
			return fmt.Errorf("agree on a revoked communicator: %d, %v", v, err)
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink of a revoked communicator: %v", err)
		}
		if nc.IsRevoked() {
			return errors.New("the shrunk communicator is revoked")
		}
		return nc.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Ranks crash before and during an agreement, the coordinator (rank 0)
// among them: every survivor decides the same value and failed set, Shrink
// gives the same group everywhere, in the old order, and works.
func TestAgreeAndShrinkAcrossCrashes(t *testing.T) {
	const n = 8
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	w.Net.Crash(5) // before
	type out struct {
		value   uint64
		failed  []ftrma.Rank
		members int
		rank    ftrma.Rank
	}
	outs := make([]out, n)
	survivors := []ftrma.Rank{1, 2, 3, 4, 6, 7}
	go func() {
		time.Sleep(time.Millisecond)
		w.Net.Crash(0) // during, most likely: the first coordinator
	}()
	errs := w.RunRanks(ctx, append([]ftrma.Rank{0}, survivors...), func(ctx context.Context, c *comm.Comm) error {
		v, err := c.Agree(ctx, ^uint64(0)&^(1<<uint(c.Rank())))
		if c.Rank() == 0 {
			return nil // crashed: whatever it got does not count
		}
		if err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
			return err
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		outs[c.Rank()] = out{v, c.Failed(), nc.Size(), nc.Rank()}
		return nil
	})
	for _, r := range survivors {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	first := outs[survivors[0]]
	for _, r := range survivors {
		o := outs[r]
		if o.value != first.value || !slices.Equal(o.failed, first.failed) {
			t.Fatalf("rank %d decided %#x %v, rank %d %#x %v", r, o.value, o.failed, survivors[0], first.value, first.failed)
		}
		if !slices.Contains(o.failed, 5) {
			t.Fatalf("rank %d: failed set %v lacks rank 5, which crashed before contributing", r, o.failed)
		}
		// New ranks keep the old order: r's new rank counts the live ranks below it.
		below := 0
		for q := range ftrma.Rank(r) {
			if !slices.Contains(o.failed, q) {
				below++
			}
		}
		if o.members != n-len(o.failed) || int(o.rank) != below {
			t.Fatalf("rank %d: shrunk to rank %d of %d, want %d of %d", r, o.rank, o.members, below, n-len(o.failed))
		}
	}
	// The value is the AND over the ranks that took part: every survivor's
	// bit is clear.
	for _, r := range survivors {
		if first.value&(1<<uint(r)) != 0 {
			t.Fatalf("decided %#x keeps survivor %d's bit", first.value, r)
		}
	}
}

// A rank that goes silent (its links cut, so no connection breaks) is found
// by the heartbeat detector and declared failed everywhere; operations
// waiting on it return ErrProcFailed, and the silent rank, once it hears,
// learns that it was declared failed.
func TestDetectorFindsSilentRank(t *testing.T) {
	const n = 5
	var cfg comm.Config // the default detector: 20 ms period, 60 ms timeout
	w := commtest.NewConfig(t, n, cfg)
	ctx := testCtx(t, time.Minute)
	w.Net.Isolate(3)
	errs := w.RunRanks(ctx, []ftrma.Rank{0, 1, 2, 4}, func(ctx context.Context, c *comm.Comm) error {
		err := c.Barrier(ctx)
		if !errors.Is(err, ftrma.ErrProcFailed) {
			return fmt.Errorf("barrier with a silent rank: %v, want ErrProcFailed", err)
		}
		if !c.ProcFailed(3) {
			return errors.New("rank 3 not known failed")
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestSignalAndAck(t *testing.T) {
	w := commtest.New(t, 3)
	ctx := testCtx(t, 30*time.Second)
	got := make(chan string, 1)
	w.Comms[2].SetSignalHandler(func(from ftrma.Rank, p []byte) { got <- fmt.Sprintf("%d:%s", from, p) })
	if err := w.Comms[0].Signal(2, []byte("wake up")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "0:wake up" {
			t.Fatalf("signal handler got %q", s)
		}
	case <-ctx.Done():
		t.Fatal("signal never arrived")
	}
	if err := w.Comms[0].Signal(9, nil); !errors.Is(err, ftrma.ErrRankOutOfRange) {
		t.Fatalf("signal to rank 9: %v", err)
	}
	w.Net.Crash(1)
	c := w.Comms[0]
	if err := commtest.AwaitGone(ctx, c, 1); err != nil {
		t.Fatal(err)
	}
	if got := c.FailureGetAcked(); len(got) != 0 {
		t.Fatalf("acked %v before FailureAck", got)
	}
	c.FailureAck()
	if got := c.FailureGetAcked(); !slices.Equal(got, []ftrma.Rank{1}) {
		t.Fatalf("acked %v, want [1]", got)
	}
	if err := c.Signal(1, nil); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("signal to a failed rank: %v", err)
	}
}

// RevokeGroup propagates a revocation to a subset only.
func TestRevokeGroup(t *testing.T) {
	w := commtest.New(t, 5)
	ctx := testCtx(t, 30*time.Second)
	c0 := w.Comms[0]
	if err := c0.RevokeGroup([]ftrma.Rank{1, 3}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 1, 3} {
		for !w.Comms[r].IsRevoked() {
			select {
			case <-ctx.Done():
				t.Fatalf("rank %d never saw the group revocation", r)
			case <-time.After(time.Millisecond):
			}
		}
	}
	// Ranks 2 and 4 are not in the group: a collective between them works.
	errs := w.RunRanks(ctx, []ftrma.Rank{2, 4}, func(ctx context.Context, c *comm.Comm) error {
		if c.IsRevoked() {
			return errors.New("revoked outside the group")
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if _, err := w.Comms[1].Allgather(ctx, nil); !errors.Is(err, ftrma.ErrRevoked) {
		t.Fatalf("allgather at a revoked group member: %v", err)
	}
	if err := c0.RevokeGroup([]ftrma.Rank{7}); !errors.Is(err, ftrma.ErrRankOutOfRange) {
		t.Fatalf("RevokeGroup with rank 7: %v", err)
	}
}

// Closing the world communicator wakes a rank waiting in a collective or an
// agreement: it returns ErrClosed instead of waiting for its context.
func TestCloseWakesWaiters(t *testing.T) {
	w := commtest.New(t, 3)
	ctx := testCtx(t, 30*time.Second)
	c := w.Comms[0]
	errc := make(chan error, 2)
	go func() { errc <- c.Barrier(ctx) }()
	go func() { _, err := c.Agree(ctx, 1); errc <- err }()
	time.Sleep(20 * time.Millisecond) // let both wait: ranks 1 and 2 never join
	c.Close()
	for range 2 {
		select {
		case err := <-errc:
			if !errors.Is(err, ftrma.ErrClosed) {
				t.Fatalf("waiter got %v, want ErrClosed", err)
			}
		case <-ctx.Done():
			t.Fatal("a waiter did not wake on Close")
		}
	}
}

// FailuresChanged closes when a failure becomes known, and not before: a
// caller waits on it instead of polling ProcFailed.
func TestFailuresChanged(t *testing.T) {
	w := commtest.New(t, 4)
	c := w.Comms[0]
	ch := c.FailuresChanged()
	select {
	case <-ch:
		t.Fatal("closed without a failure")
	default:
	}
	w.Net.Crash(2)
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatal("rank 2 crashed and FailuresChanged never closed")
	}
	if !c.ProcFailed(2) {
		t.Error("FailuresChanged closed before ProcFailed(2) held")
	}
	select {
	case <-c.FailuresChanged():
		t.Error("a new channel is closed without a new failure")
	default:
	}
}

// A rank that decided an agreement and closed the communicator still
// answers it: agreement needs decided ranks to stay participants (a
// decision may have to come again by another way). Ranks 0 and 1 decide
// and close; the decision on its way to rank 3 through rank 2 (its parent
// in the tree) is held back, and rank 2 crashes. Rank 3 asks the leader,
// rank 0, which must answer from its closed communicator's agreement; it
// once dropped the request and rank 3 waited for ever.
func TestClosedCommunicatorStillAnswersItsAgreement(t *testing.T) {
	const n = 4
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	dups := make([]*comm.Comm, n)
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		d, err := c.Dup(ctx)
		dups[c.Rank()] = d
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: dup: %v", r, err)
		}
	}
	w.Net.Delay(2, 3, time.Hour) // the decision's way to rank 3
	decided := make(chan ftrma.Rank, n)
	got := make(chan error, 1)
	var want uint64 = ^uint64(0)
	for r := range ftrma.Rank(n) {
		want &^= 1 << r
	}
	for r := range ftrma.Rank(n) {
		go func() {
			v, err := dups[r].Agree(ctx, ^uint64(0)&^(1<<r))
			if r == 3 {
				if err == nil || errors.Is(err, ftrma.ErrProcFailed) {
					if v != want {
						err = fmt.Errorf("decided %#x, want %#x", v, want)
					} else {
						err = nil
					}
				}
				got <- err
				return
			}
			if err != nil {
				t.Errorf("rank %d: agree: %v", r, err)
			}
			if r < 2 {
				dups[r].Close()
			}
			decided <- r
		}()
	}
	for range 3 {
		select {
		case <-decided:
		case err := <-got:
			t.Fatalf("rank 3 ended (%v) before its decision could come", err)
		case <-ctx.Done():
			t.Fatal("ranks 0-2 did not decide")
		}
	}
	w.Crash(2)
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("rank 3: %v", err)
		}
	case <-fctx.Done():
		t.Fatal("rank 3 never decided: the ranks that closed the communicator did not answer it")
	}
}
