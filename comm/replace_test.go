package comm_test

import (
	"context"
	"encoding/binary"
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
	"github.com/ftrma/ftrma/window"
)

// useReplaced checks that communicator c of size want works: a barrier,
// then a window where every rank puts its world rank into its slot at its
// right neighbour, and finds its left neighbour's there.
func useReplaced(ctx context.Context, c *comm.Comm, want int) error {
	if c.Size() != want {
		return fmt.Errorf("size %d, want %d", c.Size(), want)
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	win, err := window.Allocate(ctx, c, 8*c.Size())
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	n := ftrma.Rank(c.Size())
	next, prev := (c.Rank()+1)%n, (c.Rank()+n-1)%n
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(c.TransportRank(c.Rank())))
	if err := win.PutSync(ctx, next, uint64(8*c.Rank()), b[:]); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier after put: %w", err)
	}
	if got := binary.LittleEndian.Uint64(win.Bytes()[8*prev:]); got != uint64(c.TransportRank(prev)) {
		return fmt.Errorf("slot %d holds %d, want world rank %d", prev, got, c.TransportRank(prev))
	}
	return win.Free(ctx)
}

// replaceRound crashes world rank victim, has the survivors (comms, by
// world rank) call Replace, and returns the new communicators by world
// rank, the spare's included, after each has passed useReplaced. The
// spare must say it replaces victim and hold victim's number.
// onEach runs f for every communicator of comms (by world rank) at once
// and returns what each call returned, by rank.
func onEach[T any](comms map[ftrma.Rank]*comm.Comm, f func(r ftrma.Rank, c *comm.Comm) (T, error)) (map[ftrma.Rank]T, map[ftrma.Rank]error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := make(map[ftrma.Rank]T)
	errs := make(map[ftrma.Rank]error)
	for r, c := range comms {
		wg.Go(func() {
			v, err := f(r, c)
			mu.Lock()
			out[r], errs[r] = v, err
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, errs
}

func replaceRound(t *testing.T, ctx context.Context, w *commtest.World, comms map[ftrma.Rank]*comm.Comm, victim ftrma.Rank) map[ftrma.Rank]*comm.Comm {
	t.Helper()
	number := comms[victim].Rank()
	delete(comms, victim)
	w.Crash(victim)
	size := 0
	var mu sync.Mutex
	out := make(map[ftrma.Rank]*comm.Comm)
	var wg sync.WaitGroup
	errs := make(map[ftrma.Rank]error)
	for r, c := range comms {
		size = c.Size()
		wg.Go(func() {
			nc, err := c.Replace(ctx)
			if err == nil && nc.Rank() != c.Rank() {
				err = fmt.Errorf("rank %d in the new communicator, %d in the old", nc.Rank(), c.Rank())
			}
			if err == nil {
				err = useReplaced(ctx, nc, c.Size())
			}
			mu.Lock()
			out[r], errs[r] = nc, err
			mu.Unlock()
		})
	}
	wg.Go(func() {
		var j commtest.Joined
		select {
		case j = <-w.Joined():
		case <-ctx.Done():
			mu.Lock()
			errs[-1] = fmt.Errorf("no spare joined: %w", ctx.Err())
			mu.Unlock()
			return
		}
		err := j.Err
		if err == nil {
			if was, ok := j.Comm.Replaces(); !ok || was != victim || j.Comm.Rank() != number {
				err = fmt.Errorf("spare is rank %d, replaces %d %v; want rank %d replacing %d", j.Comm.Rank(), was, ok, number, victim)
			}
		}
		if err == nil {
			err = useReplaced(ctx, j.Comm, size)
		}
		mu.Lock()
		out[j.Rank], errs[j.Rank] = j.Comm, err
		mu.Unlock()
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// 4 ranks and 2 spares. Rank 2 fails: Replace gives a communicator of 4
// again, every survivor keeping its number and spare 4 holding number 2;
// a barrier and a window work over it, the spare's Replaces names 2.
// Then the replacement fails: Replace again starts spare 5 in its place.
// Then it fails too, and no spare is left: Replace fails at every
// survivor with ErrReplace, and nobody hangs.
func TestReplace(t *testing.T) {
	w := commtest.NewSpares(t, 4, 2)
	ctx := testCtx(t, time.Minute)
	comms := make(map[ftrma.Rank]*comm.Comm)
	for r := range ftrma.Rank(4) {
		comms[r] = w.Comms[r]
	}
	comms = replaceRound(t, ctx, w, comms, 2)
	if want := []ftrma.Rank{0, 1, 3, 4}; !slices.Equal(slices.Sorted(maps.Keys(comms)), want) {
		t.Fatalf("after the first replace: ranks %v, want %v", slices.Sorted(maps.Keys(comms)), want)
	}
	comms = replaceRound(t, ctx, w, comms, 4)
	if want := []ftrma.Rank{0, 1, 3, 5}; !slices.Equal(slices.Sorted(maps.Keys(comms)), want) {
		t.Fatalf("after the second replace: ranks %v, want %v", slices.Sorted(maps.Keys(comms)), want)
	}
	// The last spare fails; none is left.
	delete(comms, 5)
	w.Crash(5)
	_, errs := onEach(comms, func(r ftrma.Rank, c *comm.Comm) (struct{}, error) {
		nc, err := c.Replace(ctx)
		switch {
		case err == nil:
			return struct{}{}, fmt.Errorf("replace without spares gave a communicator of %d", nc.Size())
		case !errors.Is(err, comm.ErrReplace):
			return struct{}{}, fmt.Errorf("replace without spares: %w, want ErrReplace", err)
		}
		return struct{}{}, nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Two ranks of 4 fail with one spare held: the leader starts the spare
// for the first, none is left for the second. Replace fails at every
// survivor with ErrReplace, and the spare that did start is told (its
// side, as its Init, fails with ErrReplace too) instead of waiting.
func TestReplaceCalledOff(t *testing.T) {
	w := commtest.NewSpares(t, 4, 1)
	ctx := testCtx(t, time.Minute)
	w.Crash(1)
	w.Crash(2)
	errs := w.RunRanks(ctx, []ftrma.Rank{0, 3}, func(ctx context.Context, c *comm.Comm) error {
		nc, err := c.Replace(ctx)
		if err == nil {
			return fmt.Errorf("replace gave a communicator of %d", nc.Size())
		}
		if !errors.Is(err, comm.ErrReplace) {
			return fmt.Errorf("replace: %w, want ErrReplace", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	select {
	case j := <-w.Joined():
		if j.Rank != 4 || !errors.Is(j.Err, comm.ErrReplace) {
			t.Errorf("spare %d: %v, %v; want rank 4 and ErrReplace", j.Rank, j.Comm, j.Err)
		}
	case <-ctx.Done():
		t.Fatal("the spare's side of the replace never ended")
	}
}
