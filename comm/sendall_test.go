package comm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// A root whose send to a dead rank fails still sends to the ranks after it:
// with rank 1 crashed and known failed at the root, ranks 2 and 3 get the
// data of Bcast from root 0 instead of waiting for it until their context
// ends (the root is alive, so nothing would tell them to stop). The root
// reports the failed send.
func TestBcastReachesRanksAfterADeadOne(t *testing.T) {
	w := commtest.New(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w.Net.Crash(1)
	errs := w.RunRanks(ctx, []ftrma.Rank{0, 2, 3}, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 0 {
			if err := commtest.AwaitGone(ctx, c, 1); err != nil {
				return err
			}
		}
		got, err := c.Bcast(ctx, 0, []byte("data"))
		if c.Rank() == 0 {
			if !errors.Is(err, ftrma.ErrProcFailed) {
				t.Errorf("root: Bcast with rank 1 dead: %v, want ErrProcFailed", err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if string(got) != "data" {
			t.Errorf("rank %d got %q", c.Rank(), got)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
