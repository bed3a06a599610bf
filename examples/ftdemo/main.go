// Command ftdemo is ftrma's fault-tolerance demonstration: under ftrun, every
// rank keeps one-sided traffic going toward every other rank — fetch-and-add,
// compare-and-swap, puts and locks — while ranks may be killed. A rank that
// sees a failure revokes the window so that everyone stops; the survivors
// agree on who failed, shrink the communicator, and run a verified workload on
// the survivors: counters that must come out exact.
//
//	ftrun --oversubscribe -n 8 --kill 3@1s --tag-output ftdemo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
	"github.com/ftrma/ftrma/window/rmacheck"
)

func main() {
	traffic := flag.Duration("traffic", 2*time.Second, "how long to keep RMA traffic going before recovering")
	iters := flag.Int("iters", 500, "verified increments per survivor after recovery")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *traffic, *iters); err != nil {
		fmt.Fprintln(os.Stderr, "ftdemo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, traffic time.Duration, iters int) error {
	c, err := startup.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := window.Allocate(ctx, c, 64*c.Size())
	if err != nil {
		return err
	}
	ops, stop := hammer(ctx, c, w, traffic)
	if stop != nil {
		fmt.Printf("rank %d stopped after %d operations: %v\n", c.Rank(), ops, stop)
		w.Revoke() // everyone stops: their next operation returns ErrRevoked
	}

	// Recovery: agree on the failed set, shrink, and verify on the survivors.
	c.AckFailed(c.Size())
	if _, err := c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return fmt.Errorf("agree: %w", err)
	}
	failed := c.Failed()
	nc, err := c.Shrink(ctx)
	if err != nil {
		return fmt.Errorf("shrink: %w", err)
	}
	cas, fao, err := rmacheck.Counters(ctx, nc, iters)
	if err != nil {
		return fmt.Errorf("after recovery: %w", err)
	}
	if nc.Rank() == 0 {
		fmt.Printf("verified: %d of %d ranks survived (failed: %v); counters %d and %d after recovery (want %d each)\n",
			nc.Size(), c.Size(), failed, cas, fao, nc.Size()*iters)
	}
	if err := nc.Barrier(ctx); err != nil {
		return err
	}
	return nil
}

// hammer keeps one-sided traffic going toward every other rank until d has
// passed or an operation fails; it returns the number of operations and the
// error that stopped it (nil when time ran out).
func hammer(ctx context.Context, c *comm.Comm, w *window.Window, d time.Duration) (int, error) {
	me, n := int(c.Rank()), c.Size()
	end := time.Now().Add(d)
	ops := 0
	var old int64
	buf := make([]byte, 8)
	for i := 0; time.Now().Before(end); i++ {
		t := ftrma.Rank((me + 1 + i%(n-1)) % n)
		if n == 1 {
			t = 0
		}
		slot := uint64(8 * me)
		var err error
		switch i % 4 {
		case 0:
			err = w.FetchAndOp(t, slot, 1, &old, window.Sum)
		case 1:
			err = w.CompareAndSwap(t, slot, old, old+1, &old)
		case 2:
			err = w.Put(t, slot, buf)
		case 3:
			if err = w.Lock(ctx, t, window.Exclusive); err == nil {
				err = w.Get(t, slot, buf)
				if err == nil {
					err = w.Unlock(ctx, t)
				} else {
					w.Unlock(ctx, t)
				}
			}
		}
		if err == nil {
			err = w.Flush(ctx, t)
		}
		if err != nil {
			return ops, err
		}
		ops++
	}
	return ops, nil
}
