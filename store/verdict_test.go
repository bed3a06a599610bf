package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
)

// The store waits for a replica's fate as long as the runtime may take to
// decide it: its bound is the communicator's VerdictBound.
func TestStoreVerdictBoundIsTheCommunicators(t *testing.T) {
	w, st := openAll(t, 3, smallOptions(2))
	var c *comm.Comm = w.Comms[0]
	if got, want := st[0].verdict, c.VerdictBound(); got != want {
		t.Errorf("store's verdict bound %v, want the communicator's %v", got, want)
	}
}

// An operation whose replicas keep failing gives up only when the verdict
// bound passed with no new verdict: its clock starts at the first failed
// attempt, and starts again each time a failure becomes known (the
// operation then goes on with the new replica set). The bound is set to
// nothing here, so that any time at all exceeds it.
func TestRetrierWaitsForVerdicts(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 3, smallOptions(2))
	s := st[0]
	s.verdict = time.Nanosecond
	o := s.begin()
	defer o.end()

	r := o.retrier()
	if err := r.again(ctx, errRetry); err != nil {
		t.Fatalf("first failed attempt: %v, want another try", err)
	}
	time.Sleep(time.Millisecond)
	if err := r.again(ctx, errRetry); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("no verdict for the bound: %v, want ErrProcFailed", err)
	}

	r = o.retrier()
	if err := r.again(ctx, errRetry); err != nil {
		t.Fatalf("first failed attempt: %v, want another try", err)
	}
	w.Crash(2)
	for !o.failed(2) {
		select {
		case <-ctx.Done():
			t.Fatal("rank 2's crash never became known")
		case <-time.After(time.Millisecond):
		}
	}
	if err := r.again(ctx, errRetry); err != nil {
		t.Fatalf("a verdict came since the last attempt: %v, want another try", err)
	}
}

// A retrier lets an attempt that met no failure (errAgain: a reused slot, a
// conditional write's replicas made to agree) start again at once, up to
// quickTries times, and waits after a failure: with a context already
// ended, waiting returns its error, not waiting returns nil.
func TestRetrierDoesNotWaitToLookAgain(t *testing.T) {
	_, st := openAll(t, 3, smallOptions(2))
	o := st[0].begin()
	defer o.end()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	r := o.retrier()
	for i := range quickTries {
		if err := r.again(ended, errStale); err != nil {
			t.Fatalf("look again %d: %v, want at once", i, err)
		}
	}
	if err := r.again(ended, errStale); !errors.Is(err, context.Canceled) {
		t.Fatalf("look again %d: %v, want a paced retry (context.Canceled)", quickTries, err)
	}
	if err := o.retrier().again(ended, errRetry); !errors.Is(err, context.Canceled) {
		t.Fatalf("after a failure: %v, want a paced retry (context.Canceled)", err)
	}
}
