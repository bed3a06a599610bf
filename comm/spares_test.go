package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// sparesConfig is a detector fast enough that a test spans several
// timeouts in about a second.
func sparesConfig() comm.Config {
	cfg := commtest.TestConfig()
	cfg.Detector.Period = 25 * time.Millisecond
	cfg.Detector.Timeout = 250 * time.Millisecond
	return cfg
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noneGone fails the test if a started rank counts any rank gone.
func noneGone(t *testing.T, w *commtest.World) {
	t.Helper()
	for at, c := range w.Comms {
		if c == nil {
			continue
		}
		for r := range w.Comms {
			if w.Gone(ftrma.Rank(at), ftrma.Rank(r)) {
				t.Errorf("rank %d counts rank %d gone", at, r)
			}
		}
	}
}

// A job of 4 ranks with 4 spares held in reserve runs for several detector
// timeouts: the world communicator is the 4 ranks, and nobody is suspected
// (the absent spares send no heartbeats, and nobody watches them).
func TestSparesAreNotSuspected(t *testing.T) {
	w := commtest.NewSparesConfig(t, 4, 4, sparesConfig())
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if c.Size() != 4 {
			return fmt.Errorf("world of %d ranks, want 4", c.Size())
		}
		// The runtime's start-up grace (1 s), then 4 timeouts.
		time.Sleep(time.Second + 4*250*time.Millisecond)
		if f := c.Failed(); len(f) != 0 {
			return fmt.Errorf("Failed() = %v", f)
		}
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	noneGone(t, w)
}

// After a spare is admitted, the detector's ring includes it: rank 0
// watches it, and it watches rank 3. When rank 3 falls silent only the
// spare can suspect it (nobody else watches rank 3 any more), and its
// failure notice reaches ranks 0..2 over the broadcast graph that now
// includes the spare; a notice from rank 0 reaches the spare.
func TestSpareJoinsRingAndBroadcast(t *testing.T) {
	w := commtest.NewSparesConfig(t, 4, 4, sparesConfig())
	spare, err := w.StartSpare(4)
	if err != nil {
		t.Fatal(err)
	}
	if spare.Size() != 1 || spare.TransportRank(0) != 4 {
		t.Fatalf("spare's communicator: size %d, world rank %d", spare.Size(), spare.TransportRank(0))
	}
	if _, err := w.StartSpare(4); err == nil {
		t.Fatal("starting spare 4 twice succeeded")
	}
	if _, err := w.StartSpare(2); err == nil {
		t.Fatal("starting rank 2 as a spare succeeded")
	}
	// The ring re-formed without a false suspicion.
	time.Sleep(4 * 250 * time.Millisecond)
	noneGone(t, w)

	w.Comms[0].Notify("test/hello")
	waitFor(t, "rank 0's notice at the spare", func() bool { return spare.Noticed("test/hello") })

	w.Net.Isolate(3)
	for r := range ftrma.Rank(5) {
		if r != 3 {
			waitFor(t, fmt.Sprintf("rank %d to learn rank 3 failed", r), func() bool { return w.Gone(r, 3) })
		}
	}
	for r := range ftrma.Rank(3) {
		if !w.Comms[r].ProcFailed(3) {
			t.Errorf("rank %d: ProcFailed(3) false", r)
		}
	}
	for _, r := range []ftrma.Rank{0, 1, 2, 4} {
		for _, q := range []ftrma.Rank{0, 1, 2, 4} {
			if w.Gone(r, q) {
				t.Errorf("rank %d counts rank %d gone", r, q)
			}
		}
	}
}

// A spare that falls silent after its admission is suspected by rank 0,
// which watches it now, and every rank learns it.
func TestAdmittedSpareFailureDetected(t *testing.T) {
	w := commtest.NewSparesConfig(t, 4, 4, sparesConfig())
	if _, err := w.StartSpare(4); err != nil {
		t.Fatal(err)
	}
	w.Net.Isolate(4)
	for r := range ftrma.Rank(4) {
		waitFor(t, fmt.Sprintf("rank %d to learn the spare failed", r), func() bool { return w.Gone(r, 4) })
	}
	for r := range ftrma.Rank(4) {
		for q := range ftrma.Rank(4) {
			if w.Gone(r, q) {
				t.Errorf("rank %d counts rank %d gone", r, q)
			}
		}
	}
	// A failed spare is never admitted again, nor is a crashed rank
	// replaced by itself.
	if _, err := w.StartSpare(4); err == nil {
		t.Fatal("a failed spare started again")
	}
	// The next spare starts knowing the failure.
	s5, err := w.StartSpare(5)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Gone(5, 4) || w.Gone(5, 0) {
		t.Fatalf("spare 5: Gone(4) %v, Gone(0) %v; want true, false", w.Gone(5, 4), w.Gone(5, 0))
	}
	s5.Close()
}

// Revocation reaches every live rank of 8 present ones, with 24 spares
// absent, while D(8)-1 = 4 of them have crashed: ranks 1, 2, 4 and 5. In
// the binomial graph over all 32 ranks, rank 0's only present neighbours
// are 1, 2 and 4, so it would be cut off; over the 8 present ranks it
// also links to 6 and 7.
func TestRevokeReachesPresentRanksWithSpares(t *testing.T) {
	w := commtest.NewSpares(t, 8, 24)
	for _, r := range []ftrma.Rank{1, 2, 4, 5} {
		w.Crash(r)
	}
	for _, r := range []ftrma.Rank{0, 3, 6, 7} {
		for _, q := range []ftrma.Rank{1, 2, 4, 5} {
			waitFor(t, fmt.Sprintf("rank %d to learn rank %d failed", r, q), func() bool { return w.Gone(r, q) })
		}
	}
	w.Comms[3].Revoke()
	for _, r := range []ftrma.Rank{0, 6, 7} {
		select {
		case <-w.Comms[r].Revoked():
		case <-time.After(time.Minute):
			t.Fatalf("rank %d: the revocation never came", r)
		}
	}
}
