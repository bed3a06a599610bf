package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
