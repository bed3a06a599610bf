package comm_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/comm/internal/admission"
	"github.com/ftrma/ftrma/window"
)

// The same number replaced three times: rank 2 of 4 fails, spare 4 takes
// number 2; it fails, spare 5 takes it; it fails, spare 6 takes it. Each
// round ends with a communicator of 4 that passes a barrier and a window
// round, and each spare's Replaces names the world rank it replaced
// (replaceRound checks both).
func TestReplaceSameRankThreeTimes(t *testing.T) {
	w := commtest.NewSpares(t, 4, 3)
	ctx := testCtx(t, time.Minute)
	comms := make(map[ftrma.Rank]*comm.Comm)
	for r := range ftrma.Rank(4) {
		comms[r] = w.Comms[r]
	}
	victim := ftrma.Rank(2)
	for round, want := range [][]ftrma.Rank{{0, 1, 3, 4}, {0, 1, 3, 5}, {0, 1, 3, 6}} {
		comms = replaceRound(t, ctx, w, comms, victim)
		if got := slices.Sorted(maps.Keys(comms)); !slices.Equal(got, want) {
			t.Fatalf("after round %d: world ranks %v, want %v", round+1, got, want)
		}
		victim = want[3]
		if comms[victim].Rank() != 2 {
			t.Fatalf("after round %d: spare %d holds number %d, want 2", round+1, victim, comms[victim].Rank())
		}
	}
}

// replaceAll has ranks (by world rank, with their communicators) call
// Replace at once and returns what each got. It checks that every rank
// not in crashed got the same outcome: all a communicator or all an error.
func replaceAll(t *testing.T, ctx context.Context, comms map[ftrma.Rank]*comm.Comm, crashed ...ftrma.Rank) (map[ftrma.Rank]*comm.Comm, map[ftrma.Rank]error) {
	t.Helper()
	out, errs := onEach(comms, func(_ ftrma.Rank, c *comm.Comm) (*comm.Comm, error) { return c.Replace(ctx) })
	failed, survivors := 0, 0
	for r, err := range errs {
		if slices.Contains(crashed, r) {
			continue
		}
		survivors++
		if err != nil {
			failed++
		}
	}
	if failed != 0 && failed != survivors {
		t.Fatalf("replace succeeded at some ranks and failed at others: %v", errs)
	}
	return out, errs
}

// spawnFault is a fault injected around the leader's spawn.
type spawnFault struct {
	name string
	// before runs as the leader's spawn starts, after runs with the
	// spares it started; both get the world.
	before func(w *commtest.World)
	after  func(w *commtest.World, started []ftrma.Rank)
	// crashed lists the ranks the fault crashes (besides rank 3), so
	// that the second Replace runs at the others.
	crashed []ftrma.Rank
}

// A failure during Replace's spawn: rank 3 of 4 has failed and the leader
// (rank 0) is starting its spare when, in turn, another survivor fails, the
// leader itself fails, or the spare dies right after its admission, before
// its side of the Replace ends. Replace then either fails at every
// survivor alike, with an error wrapping ftrma.ErrProcFailed or
// comm.ErrReplace, or succeeds at every survivor (the leader's failure may
// be seen in the first agreement: the others then replace it too), within
// the context. After a failure the survivors' next Replace on the same
// communicator replaces every failed rank. Either way the job ends with a
// communicator of 4 that works, and every spare started learns its
// outcome, none waiting until its context ends: also the one a dying
// leader started, whose id the others may never revoke (they may have
// seen the leader fail in the first agreement and replaced it too, or
// called off under an id of their own: the agreement is not uniform). It
// gives up once it knows its leader failed.
func TestReplaceFailureDuringSpawn(t *testing.T) {
	faults := []spawnFault{
		{name: "survivor", before: func(w *commtest.World) { w.Crash(2) }, crashed: []ftrma.Rank{2}},
		{name: "leader", before: func(w *commtest.World) { w.Crash(0) }, crashed: []ftrma.Rank{0}},
		{name: "spare", after: func(w *commtest.World, started []ftrma.Rank) {
			for _, s := range started {
				w.Crash(s)
			}
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			w := commtest.NewSpares(t, 4, 3)
			ctx := testCtx(t, time.Minute)
			var mu sync.Mutex
			var started, crashedSpares []ftrma.Rank
			fired := false
			spawn := func(self ftrma.Rank, ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error) {
				mu.Lock()
				first := !fired
				fired = true
				mu.Unlock()
				if !first && slices.Contains(f.crashed, self) {
					// A crashed rank's goroutines still run here; a dead
					// process cannot ask ftrun for spares.
					return nil, errors.New("the asking rank has crashed")
				}
				if first && f.before != nil {
					f.before(w)
				}
				got, err := w.Spawn(ctx, k, payload)
				mu.Lock()
				started = append(started, got...)
				mu.Unlock()
				if first && f.after != nil {
					f.after(w, got)
					mu.Lock()
					crashedSpares = append(crashedSpares, got...)
					mu.Unlock()
				}
				return got, err
			}
			for r := range ftrma.Rank(3) {
				admission.SetSpawner(w.Comms[r], func(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error) {
					return spawn(r, ctx, k, payload)
				})
			}
			w.Crash(3)
			comms := map[ftrma.Rank]*comm.Comm{0: w.Comms[0], 1: w.Comms[1], 2: w.Comms[2]}
			final, errs := replaceAll(t, ctx, comms, f.crashed...)
			for _, r := range f.crashed {
				delete(comms, r)
				delete(final, r)
				delete(errs, r)
			}
			// await collects the outcomes of the spares started and not
			// crashed: the communicators of those that joined.
			spares := make(map[ftrma.Rank]*comm.Comm)
			heard := 0
			await := func(what string) {
				mu.Lock()
				k := len(started) - len(crashedSpares) - heard
				mu.Unlock()
				for range k {
					heard++
					select {
					case j := <-w.Joined():
						if j.Err != nil {
							// Its Init failed: the process exits, as a
							// program does when Init fails.
							t.Logf("spare %d (%s): %v", j.Rank, what, j.Err)
							w.Crash(j.Rank)
							continue
						}
						spares[j.Rank] = j.Comm
					case <-ctx.Done():
						mu.Lock()
						t.Fatalf("a spare of the %s never learned its outcome (spares started %v, crashed %v, outcomes heard %d)", what, started, crashedSpares, heard-1)
					}
				}
			}
			if errs[1] != nil {
				for r, err := range errs {
					if !errors.Is(err, ftrma.ErrProcFailed) && !errors.Is(err, comm.ErrReplace) {
						t.Fatalf("rank %d: first replace: %v, want ErrProcFailed or ErrReplace", r, err)
					}
				}
				t.Logf("first replace failed: %v", errs[1])
				await("failed replace")
				final, errs = replaceAll(t, ctx, comms)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: second replace: %v", r, err)
					}
				}
			} else {
				t.Logf("first replace succeeded")
			}
			await("replace")
			if len(final)+len(spares) != 4 {
				t.Fatalf("%d survivors and %d spares joined, want 4 in all", len(final), len(spares))
			}
			for r, nc := range final {
				spares[r] = nc
			}
			_, use := onEach(spares, func(_ ftrma.Rank, nc *comm.Comm) (struct{}, error) {
				return struct{}{}, useReplaced(ctx, nc, 4)
			})
			for r, err := range use {
				if err != nil {
					t.Errorf("rank %d on the replaced communicator: %v", r, err)
				}
			}
		})
	}
}

// Fencing across a Replace. Rank 3 of 4 is cut off, not dead: every
// message it sends is delayed by several seconds, heartbeats included,
// and it issues puts of a marker toward every rank in two windows at
// once. The others declare it failed and replace it with spare 4, free
// one of the two windows and allocate a window over the new communicator
// (which the replacement holding number 3 shares). Once the delayed puts
// are due, and once more after rank 3 puts again on a healed link, no
// marker is anywhere: not in the window kept, not in the new window at any
// rank, the replacement's included.
func TestReplaceFencesLateWrites(t *testing.T) {
	const (
		n      = 4
		size   = 8 * n
		delay  = 3 * time.Second
		marker = 0xee
	)
	w := commtest.NewSparesConfig(t, n, 1, sparesConfig())
	ctx := testCtx(t, time.Minute)
	keep := make([]*window.Window, n)
	freed := make([]*window.Window, n)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		var err error
		if keep[c.Rank()], err = window.Allocate(ctx, c, size); err != nil {
			return err
		}
		if freed[c.Rank()], err = window.Allocate(ctx, c, size); err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for x := range ftrma.Rank(n + 1) {
		if x != 3 {
			w.Net.Delay(3, x, delay)
		}
	}
	late := make([]byte, 8)
	for i := range late {
		late[i] = marker
	}
	due := time.Now().Add(delay)
	for _, win := range []*window.Window{keep[3], freed[3]} {
		for r := range ftrma.Rank(3) {
			if err := win.Put(r, 8*3, late); err != nil {
				t.Fatalf("rank 3's put toward %d: %v", r, err)
			}
		}
	}
	zombie := make(chan error, 1)
	go func() { // rank 3 waits for its puts, as a live rank would
		fctx, cancel := context.WithTimeout(ctx, 2*delay)
		defer cancel()
		zombie <- errors.Join(keep[3].FlushAll(fctx), freed[3].FlushAll(fctx))
	}()

	comms := map[ftrma.Rank]*comm.Comm{0: w.Comms[0], 1: w.Comms[1], 2: w.Comms[2]}
	nw := make(map[ftrma.Rank]*window.Window)
	var mu sync.Mutex
	var wg sync.WaitGroup
	res := make(map[ftrma.Rank]error)
	finish := func(r ftrma.Rank, c *comm.Comm, err error) {
		var win *window.Window
		if err == nil && r < 3 {
			err = freed[r].Free(ctx)
		}
		if err == nil {
			win, err = window.Allocate(ctx, c, size)
		}
		if err == nil {
			err = c.Barrier(ctx)
		}
		mu.Lock()
		nw[r], res[r] = win, err
		mu.Unlock()
	}
	for r, c := range comms {
		wg.Go(func() {
			nc, err := c.Replace(ctx)
			finish(r, nc, err)
		})
	}
	wg.Go(func() {
		select {
		case j := <-w.Joined():
			if was, ok := j.Comm.Replaces(); j.Err == nil && (!ok || was != 3 || j.Comm.Rank() != 3) {
				j.Err = fmt.Errorf("spare %d holds number %d replacing %d %v, want 3 replacing 3", j.Rank, j.Comm.Rank(), was, ok)
			}
			finish(j.Rank, j.Comm, j.Err)
		case <-ctx.Done():
			finish(-1, nil, errors.New("no spare joined"))
		}
	})
	wg.Wait()
	for r, err := range res {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := <-zombie; err == nil {
		t.Error("rank 3's late puts completed without an error")
	}
	time.Sleep(time.Until(due) + 500*time.Millisecond)

	// Rank 3 resumes on a healed link and puts again.
	for x := range ftrma.Rank(n + 1) {
		if x != 3 {
			w.Net.Delay(3, x, 0)
		}
	}
	for r := range ftrma.Rank(3) {
		if err := keep[3].PutSync(ctx, r, 8*3, late); err == nil {
			t.Errorf("rank 3's put toward %d after its replacement succeeded", r)
		}
	}
	check := func(what string, mem []byte) {
		for i, b := range mem {
			if b == marker {
				t.Errorf("%s: byte %d holds rank 3's marker", what, i)
				return
			}
		}
	}
	for r := range ftrma.Rank(3) {
		check(fmt.Sprintf("rank %d's kept window", r), keep[r].Bytes())
	}
	for r, win := range nw {
		check(fmt.Sprintf("world rank %d's window over the new communicator", r), win.Bytes())
	}
}

// After a Replace, the reliable broadcast of every member forwards on the
// graph over the ranks present alone: Replace settles it once every member
// has admitted the spares. Unsettled, a survivor would keep forwarding on
// the union of the graphs before and after each admission as well, and
// the union would grow with every Replace; a spare that admitted a later
// spare of its Replace would too. It fails with either settle call of
// replace.go removed.
func TestReplaceSettlesBroadcast(t *testing.T) {
	w := commtest.NewSpares(t, 8, 4)
	ctx := testCtx(t, time.Minute)
	comms := make(map[ftrma.Rank]*comm.Comm)
	for r := range ftrma.Rank(8) {
		comms[r] = w.Comms[r]
	}
	comms = replaceRound(t, ctx, w, comms, 5)
	comms = replaceRound(t, ctx, w, comms, 2)
	// Two at once: the first spare of this Replace (10) admits the second
	// (11) during it.
	w.Crash(1)
	w.Crash(6)
	delete(comms, 1)
	delete(comms, 6)
	comms, errs := replaceAll(t, ctx, comms)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: replace of two: %v", r, err)
		}
	}
	for range 2 {
		select {
		case j := <-w.Joined():
			if j.Err != nil {
				t.Fatalf("spare %d: %v", j.Rank, j.Err)
			}
			comms[j.Rank] = j.Comm
		case <-ctx.Done():
			t.Fatal("the spares never joined")
		}
	}
	if got, want := slices.Sorted(maps.Keys(comms)), []ftrma.Rank{0, 3, 4, 7, 8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Fatalf("world ranks %v, want %v", got, want)
	}
	for r, c := range comms {
		got, want := comm.BroadcastNeighbors(c)
		if want == nil || !slices.Equal(got, want) {
			t.Errorf("world rank %d forwards to %v, want %v (the graph over the present ranks)", r, got, want)
		}
	}
}
