package store_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/store"
)

// Four ranks each checkpoint their progress under their own key, with two
// copies of every key on distinct ranks. Rank 2 dies; a survivor adopts its
// work by reading its last checkpoint, which outlived it.
func Example() {
	world := commtest.New(nil, 4)
	defer world.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, err := store.Open(ctx, c, store.Config{Copies: 2, Slots: 64, ChunkSize: 4096})
		if err != nil {
			return err
		}
		key := fmt.Appendf(nil, "ckpt/%d", c.Rank())
		if err := s.Put(ctx, key, fmt.Appendf(nil, "rank %d: 100 tasks done", c.Rank())); err != nil {
			return err
		}
		// Every checkpoint is written. Rank 2 dies right after the barrier,
		// so a survivor's barrier may fail: rank 2's Put returned before it
		// died either way, and a Put that returned is on every live copy.
		err = c.Barrier(ctx)
		if c.Rank() == 2 {
			world.Net.Crash(2)
			return nil
		}
		if err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
			return err
		}
		// Rank 0 notices the failure (here it waits for it) and adopts.
		if c.Rank() == 0 {
			for !c.ProcFailed(2) {
				<-c.FailuresChanged()
			}
			v, err := s.Get(ctx, []byte("ckpt/2"))
			if err != nil {
				return err
			}
			fmt.Printf("adopted %q\n", v)
		}
		return nil
	})
	// Output: adopted "rank 2: 100 tasks done"
}
