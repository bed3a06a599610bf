package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// A deletion in Grow's new view, then a failure, must not bring the deleted
// value back from a copy the new view no longer places (found by the
// explorer, seeds 9 and 10: a get after a completed Delete read the value
// before it). Rank R fails and X takes its place among key k's copies;
// Replace gives R's number to a spare and Grow moves k back to it. While X
// has not dropped its copy yet (X's Grow paused before dropKeys), a rank
// deletes k, and then Y, one of k's copies in the new placement, fails: X
// places k again, and its copy — the value from before the deletion — is
// the only one.
func TestGrowDeleteThenFailureNoResurrection(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	defer stacksIfSlow(t, 60*time.Second)()
	const R = ftrma.Rank(4)
	w, st := openSpares(t, 6, 1, smallOptions(3))
	pl := st[0].current().place
	none := func(ftrma.Rank) bool { return false }
	// A key whose copies after R's failure include X, not placed once R is
	// back, and placed again once Y of the new placement fails.
	var key string
	var X, Y, D ftrma.Rank
	for i := 0; key == "" && i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		h := st[0].hash([]byte(k))
		now := pl.replicas(h, none)
		if !slices.Contains(now, R) {
			continue
		}
		without := pl.replicas(h, func(r ftrma.Rank) bool { return r == R })
		for _, x := range without {
			if slices.Contains(now, x) {
				continue
			}
			for _, y := range now {
				if y == R || !slices.Contains(pl.replicas(h, func(r ftrma.Rank) bool { return r == y }), x) {
					continue
				}
				for d := range ftrma.Rank(6) {
					if d != R && d != x && d != y {
						key, X, Y, D = k, x, y, d
						break
					}
				}
			}
			break
		}
	}
	if key == "" {
		t.Fatal("no key fits")
	}
	t.Logf("key %s: R %d, X %d, Y %d, deleter %d", key, R, X, Y, D)
	if err := st[D].Put(ctx, []byte(key), []byte("old")); err != nil {
		t.Fatal(err)
	}
	crashAndWait(ctx, t, w, st, R)
	// X gets its copy from recovery.
	for {
		reps, err := st[D].Locate(ctx, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(reps, func(p Replica) bool { return p.Rank == X && p.Complete }) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("X (rank %d) never got a copy: %+v", X, reps)
		}
		time.Sleep(5 * time.Millisecond)
	}
	atDrop, release := make(chan struct{}), make(chan struct{})
	testHookDrop.set(t, func(s *Store) {
		if s.me == X {
			close(atDrop)
			<-release
		}
	})
	grew := make(chan map[ftrma.Rank]error, 1)
	var nst []*Store
	go func() {
		var errs map[ftrma.Rank]error
		nst, errs = replaceAndGrow(ctx, t, w, st, []ftrma.Rank{R})
		grew <- errs
	}()
	select {
	case <-atDrop:
	case <-ctx.Done():
		close(release)
		t.Fatal("X never reached its drop")
	}
	// Every rank is in the new view now (a barrier precedes the drop).
	if err := st[D].Delete(ctx, []byte(key)); err != nil {
		close(release)
		t.Fatal(err)
	}
	w.Crash(Y)
	for _, s := range []*Store{st[D], st[X]} {
		for !s.current().c.ProcFailed(Y) {
			if ctx.Err() != nil {
				close(release)
				t.Fatal("Y's failure never became known")
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Recovery runs; the deletion must hold meanwhile and after.
	var resurrected []byte
	for end := time.Now().Add(time.Second); time.Now().Before(end) && resurrected == nil; time.Sleep(5 * time.Millisecond) {
		v, err := st[D].Get(ctx, []byte(key))
		if err == nil {
			resurrected = v
		} else if !errors.Is(err, ErrNotFound) {
			t.Logf("get while X waits: %v", err)
		}
	}
	close(release)
	errs := <-grew
	for r, err := range errs {
		if err != nil && r != Y && !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d: grow: %v", r, err)
		}
	}
	if resurrected != nil {
		t.Fatalf("deleted key %s read back as %q after rank %d failed (rank %d's copy, not yet dropped)", key, resurrected, Y, X)
	}
	if v, err := nst[D].Get(context.Background(), []byte(key)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after Grow: get of the deleted key: %q, %v", v, err)
	}
}

// A deletion in a survivor's interim view — after Grow's exchange, before
// its transition view — must not miss the copy that another survivor,
// already in its transition view, wrote at the new rank (DESIGN.md F39,
// found by the explorer). Rank D's Grow is held before it installs its
// transition view; rank X, past that point, puts key k, whose placement
// includes the new rank; then D deletes k. Once the Grow is done, k reads as
// deleted from every rank. (Without the deletion's wait for the transition
// view, it tombstoned the old placement only, and the next read repaired
// the new rank's copy back everywhere.)
func TestGrowInterimDeletionReachesNewRank(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	defer stacksIfSlow(t, 60*time.Second)()
	const R, D, X = ftrma.Rank(4), ftrma.Rank(0), ftrma.Rank(1)
	w, st := openSpares(t, 6, 1, smallOptions(3))
	pl := st[0].current().place
	var key string
	for i := 0; key == "" && i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		if slices.Contains(pl.replicas(st[0].hash([]byte(k)), func(ftrma.Rank) bool { return false }), R) {
			key = k
		}
	}
	if err := st[D].Put(ctx, []byte(key), []byte("old")); err != nil {
		t.Fatal(err)
	}
	crashAndWait(ctx, t, w, st, R)
	// A write of D's after the failure, so that D's later writes do not
	// wait for the others to learn of it (awaitSettled), which would hold
	// them until D's transition view anyway.
	if err := st[D].Put(ctx, []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	testHookGrow.set(t, func(s *Store, at string) {
		if s.me == D && at == "transition" {
			close(held)
			<-release
		}
	})
	type grown struct {
		st   []*Store
		errs map[ftrma.Rank]error
	}
	grew := make(chan grown, 1)
	go func() {
		nst, errs := replaceAndGrow(ctx, t, w, st, []ftrma.Rank{R})
		grew <- grown{nst, errs}
	}()
	unhold := sync.OnceFunc(func() { close(release) })
	defer unhold()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("rank D never reached its transition view")
	}
	for st[X].current().old == nil {
		if ctx.Err() != nil {
			t.Fatal("rank X never installed its transition view")
		}
		time.Sleep(time.Millisecond)
	}
	if err := st[X].Put(ctx, []byte(key), []byte("new")); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- st[D].Delete(ctx, []byte(key)) }()
	// Give a deletion that does not wait the time to end in the interim
	// view; one that waits ends once D's Grow goes on.
	select {
	case err := <-deleted:
		deleted <- err
	case <-time.After(200 * time.Millisecond):
	}
	unhold()
	g := <-grew
	for r, err := range g.errs {
		if err != nil {
			t.Fatalf("rank %d's Grow: %v", r, err)
		}
	}
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	for r, s := range g.st {
		if s == nil {
			continue
		}
		if v, err := s.Get(ctx, []byte(key)); !errors.Is(err, ErrNotFound) {
			t.Errorf("rank %d reads %s after its deletion: %q, %v; copies:\n%s", r, key, v, err, describeKey(ctx, g.st, key))
		}
	}
}
