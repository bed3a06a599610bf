package comm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestCollectives(t *testing.T) {
	const n = 8
	w := commtest.New(t, n)
	ctx := testCtx(t, 30*time.Second)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		for round := range 20 {
			all, err := c.Allgather(ctx, []byte(fmt.Sprintf("r%d-%d", c.Rank(), round)))
			if err != nil {
				return err
			}
			if len(all) != n {
				return fmt.Errorf("allgather returned %d contributions", len(all))
			}
			for r, b := range all {
				if want := fmt.Sprintf("r%d-%d", r, round); string(b) != want {
					return fmt.Errorf("allgather[%d] = %q, want %q", r, b, want)
				}
			}
			root := ftrma.Rank(round % n)
			got, err := c.Bcast(ctx, root, []byte(fmt.Sprintf("from %d in %d", c.Rank(), round)))
			if err != nil {
				return err
			}
			if want := fmt.Sprintf("from %d in %d", root, round); string(got) != want {
				return fmt.Errorf("bcast = %q, want %q", got, want)
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestCollectiveFailsWhenRankCrashes(t *testing.T) {
	w := commtest.New(t, 4)
	ctx := testCtx(t, 30*time.Second)
	w.Net.Crash(2)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 2 {
			return nil
		}
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if r == 2 {
			continue
		}
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d: barrier with a crashed rank = %v, want ErrProcFailed", r, err)
		}
	}
	if got := w.Comms[0].Failed(); len(got) != 1 || got[0] != 2 {
		t.Errorf("Failed() = %v, want [2]", got)
	}
}

func TestCollectiveHonoursContext(t *testing.T) {
	w := commtest.New(t, 3)
	w.Net.Cut(0, 1)
	ctx := testCtx(t, 30*time.Second)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	errs := w.Run(short, func(ctx context.Context, c *comm.Comm) error { return c.Barrier(ctx) })
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("barrier across a cut link = %v, want DeadlineExceeded", errs[0])
	}
}

func TestBadArguments(t *testing.T) {
	w := commtest.New(t, 2)
	ctx := testCtx(t, 10*time.Second)
	c := w.Comms[0]
	if _, err := c.Bcast(ctx, 2, nil); !errors.Is(err, ftrma.ErrRankOutOfRange) {
		t.Errorf("bcast from rank 2 of 2: %v", err)
	}
	if _, err := c.Allgather(ctx, make([]byte, comm.MaxCollectivePayload+1)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("oversized allgather: %v", err)
	}
	c.Close()
	if err := c.Barrier(ctx); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("barrier after close: %v", err)
	}
}
