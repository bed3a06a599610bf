package store

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// Respawn and JoinRespawned recover in one call each through a failure
// during it: rank 4 fails, and rank 1 fails once the window is rebuilt,
// before Grow's exchange (as in TestGrowRetriedAfterFailedExchange, which
// writes the rounds out by hand). The survivors' Respawn replaces 4, sees
// the Grow fail, replaces 1 too and grows; the first spare's
// JoinRespawned sees its Join fail, replaces with the survivors and joins
// the result, as the second spare does directly. Every call returns the
// same communicator, the survivors report ranks 4 then 1 replaced, every
// key is placed and read back, and the store's Close closes the
// communicators Respawn made (not the one given to Open).
func TestRespawnThroughAFailure(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	defer stacksIfSlow(t, 50*time.Second)()
	w, st := openSpares(t, 6, 2, smallOptions(3))
	want := putKeys(ctx, t, st, 300)
	crashAndWait(ctx, t, w, st, 4)
	var once sync.Once
	var fired atomic.Bool
	testHookGrow.set(t, func(_ *Store, at string) {
		if at != "exchange" {
			return
		}
		once.Do(func() { w.Crash(1); fired.Store(true) })
	})
	survivors := []ftrma.Rank{0, 2, 3, 5} // and rank 1, until the hook
	type result struct {
		c        *comm.Comm
		replaced []ftrma.Rank
		err      error
	}
	var mu sync.Mutex
	res := map[ftrma.Rank]result{}
	nst := slices.Clone(st)
	nst[1], nst[4] = nil, nil
	var wg sync.WaitGroup
	for _, r := range append([]ftrma.Rank{1}, survivors...) {
		wg.Go(func() {
			c, replaced, err := Respawn(ctx, st[r], w.Comms[r])
			mu.Lock()
			res[r] = result{c, replaced, err}
			mu.Unlock()
		})
	}
	joined := make([]*comm.Comm, 0, 2)
	for range 2 {
		var j commtest.Joined
		select {
		case j = <-w.Joined():
		case <-ctx.Done():
			t.Fatalf("%d spares joined, want 2", len(joined))
		}
		if j.Err != nil {
			t.Fatalf("spare %d: %v", j.Rank, j.Err)
		}
		joined = append(joined, j.Comm)
		wg.Go(func() {
			s, c, err := JoinRespawned(ctx, j.Comm, Config{})
			mu.Lock()
			defer mu.Unlock()
			if s != nil {
				nst[c.Rank()] = s
			}
			res[100+j.Comm.Rank()] = result{c, nil, err} // spares by their number, offset
		})
	}
	wg.Wait()
	if !fired.Load() {
		t.Fatal("no survivor reached the exchange: the failure during Respawn never happened")
	}
	delete(res, 1)
	t.Cleanup(func() { stopAll(nst) })
	var final *comm.Comm
	for _, r := range slices.Sorted(maps.Keys(res)) {
		got := res[r]
		if got.err != nil {
			t.Fatalf("rank %d: %v", r, got.err)
		}
		if r < 100 && !slices.Equal(got.replaced, []ftrma.Rank{4, 1}) {
			t.Errorf("rank %d: replaced %v, want [4 1]", r, got.replaced)
		}
		if final == nil {
			final = got.c
		}
		if got.c.ContextID() != final.ContextID() {
			t.Errorf("rank %d ends on communicator %d, rank %d on %d", r, got.c.ContextID(), 0, final.ContextID())
		}
	}
	checkPlaced(ctx, t, nst, want)

	// Close (collective: at every live rank) closes what Respawn made.
	for _, s := range nst {
		wg.Go(func() {
			if err := s.Close(ctx); err != nil {
				t.Errorf("close at rank %d: %v", s.me, err)
			}
		})
	}
	wg.Wait()
	if err := res[0].c.Barrier(ctx); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("the communicator Respawn returned, after the store's Close: %v, want ErrClosed", err)
	}
}

// Respawn with nothing failed is no change: the same communicator, nothing
// replaced, and the store still on it.
func TestRespawnWithoutFailure(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openSpares(t, 3, 1, smallOptions(2))
	var wg sync.WaitGroup
	for r := range st {
		wg.Go(func() {
			c, replaced, err := Respawn(ctx, st[r], w.Comms[r])
			if err != nil || c != w.Comms[r] || len(replaced) != 0 {
				t.Errorf("rank %d: %v, %v (same communicator %v), want nil and none replaced", r, err, replaced, c == w.Comms[r])
			}
		})
	}
	wg.Wait()
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := st[2].Get(ctx, []byte("k")); err != nil || string(got) != "v" {
		t.Fatalf("get after Respawn: %q, %v", got, err)
	}
}
