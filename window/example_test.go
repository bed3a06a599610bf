package window_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
)

// Four ranks (goroutines here, processes under ftrun) each add their rank+1 to
// a counter at rank 0 with FetchAndOp, then rank 0 reads the total.
func Example() {
	world := commtest.New(nil, 4)
	defer world.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		var old int64
		if err := w.FetchAndOp(0, 0, int64(c.Rank())+1, &old, window.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			var total int64
			w.FetchAndOp(0, 0, 0, &total, window.NoOp)
			w.Flush(ctx, 0)
			fmt.Println("total:", total)
		}
		return w.Free(ctx)
	})
	// Output: total: 10
}
