package window_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
)

// The recovery loop every fault-tolerant program writes. Try the step; agree
// on its outcome, because a collective can succeed at one rank and fail at
// another when a rank dies during it; on a failure, revoke so that ranks
// blocked elsewhere stop too, shrink to the survivors, rebuild the window on
// the new communicator and try again. Here rank 3 of four dies at once; the
// step (every rank adds its rank+1 to a counter at rank 0) succeeds on the
// three survivors. Window.Shrink instead of a new Allocate keeps the
// survivors' window memory.
func Example_recovery() {
	world := commtest.New(nil, 4)
	defer world.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 3 {
			world.Net.Crash(3) // the process dies (under ftrun: a SIGKILL)
			return nil
		}
		const stepDone, haveWindow = 1, 2
		world := c // Close of the world ends the runtime: close only shrunk ones
		for {
			w, err := window.Allocate(ctx, c, 8)
			var total int64
			if err == nil {
				total, err = step(ctx, c, w)
			}
			var flags uint64
			if err == nil {
				flags |= stepDone
			}
			if w != nil {
				flags |= haveWindow
			}
			all, agreeErr := c.Agree(ctx, flags) // the same at every survivor
			if agreeErr == nil && all&stepDone != 0 {
				if c.Rank() == 0 {
					fmt.Printf("%d ranks, total %d\n", c.Size(), total)
				}
				return w.Free(ctx)
			}
			for _, e := range []error{err, agreeErr} {
				if e != nil && !errors.Is(e, ftrma.ErrProcFailed) && !errors.Is(e, ftrma.ErrRevoked) {
					return e // not a failure: no recovery for it
				}
			}
			if w != nil {
				w.Revoke()
				if all&haveWindow != 0 {
					w.Free(ctx) // every survivor has it: free it together
				} // else a rank died inside Allocate: the window is dropped
			}
			c.Revoke()
			old := c
			if c, err = c.Shrink(ctx); err != nil {
				return err
			}
			if old != world {
				old.Close() // its windows are gone: the runtime forgets its state
			}
		}
	})
	// Output: 3 ranks, total 6
}

// step is the application's work: every rank adds rank+1 to the counter at
// rank 0, and rank 0 reads the sum once everyone has added.
func step(ctx context.Context, c *comm.Comm, w *window.Window) (int64, error) {
	var old int64
	if err := w.FetchAndOp(0, 0, int64(c.Rank())+1, &old, window.Sum); err != nil {
		return 0, err
	}
	if err := w.Flush(ctx, 0); err != nil {
		return 0, err
	}
	if err := c.Barrier(ctx); err != nil {
		return 0, err
	}
	var total int64
	if err := w.FetchAndOp(0, 0, 0, &total, window.NoOp); err != nil {
		return 0, err
	}
	return total, w.Flush(ctx, 0)
}
