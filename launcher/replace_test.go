package launcher

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
)

// replaceHelper is the rank program of TestProcessReplace: a job of 3
// ranks and 1 spare. Every rank joins with startup.Init and passes a
// barrier; rank 1 then exits with status 3. The others find the next
// barrier failed and call Replace; ftrun starts the spare, whose Init
// returns the communicator Replace made. All three then pass a barrier
// and a window round (each puts its world rank into its right
// neighbour's slot) on it. With args "first-spare-dies" the first spare
// exits at once, before it joins: the first Replace fails with
// ErrReplace at both survivors, and they Replace again.
func replaceHelper(rank int, args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	firstDies := len(args) > 0 && args[0] == "first-spare-dies"
	if firstDies && rank == 3 {
		return 3
	}
	nc, old, err := replaceAfterExit(ctx, rank, 1, firstDies)
	if err != nil {
		return fail("%v", err)
	}
	if old != nil {
		defer old.Close()
	}
	defer nc.Close()
	if err := nc.Barrier(ctx); err != nil {
		return fail("barrier on the new communicator: %v", err)
	}
	win, err := window.Allocate(ctx, nc, 8*nc.Size())
	if err != nil {
		return fail("allocate: %v", err)
	}
	n := ftrma.Rank(nc.Size())
	next, prev := (nc.Rank()+1)%n, (nc.Rank()+n-1)%n
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(rank))
	if err := win.PutSync(ctx, next, uint64(8*nc.Rank()), b[:]); err != nil {
		return fail("put: %v", err)
	}
	if err := nc.Barrier(ctx); err != nil {
		return fail("barrier after put: %v", err)
	}
	got := binary.LittleEndian.Uint64(win.Bytes()[8*prev:])
	if err := win.Free(ctx); err != nil {
		return fail("free: %v", err)
	}
	fmt.Printf("rank %d is %d of %d after replace, its left neighbour is world rank %d\n", rank, nc.Rank(), nc.Size(), got)
	return 0
}

// replaceAfterExit is how the Replace helpers start: every rank joins
// with startup.Init and passes a barrier; rank die then exits with status 3;
// the others find the next barrier failed and call Replace (with
// retryAfterErrReplace, a first Replace must fail with ErrReplace, and
// they call it again). A spare's Init returns the communicator Replace
// made. It returns the communicator to go on with and, at a survivor, the
// old one (to close after it).
func replaceAfterExit(ctx context.Context, rank, die int, retryAfterErrReplace bool) (nc, old *comm.Comm, err error) {
	c, err := startup.Init(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("init: %w", err)
	}
	if was, ok := c.Replaces(); ok {
		fmt.Printf("rank %d replaces world rank %d as rank %d of %d\n", rank, was, c.Rank(), c.Size())
		return c, nil, nil
	}
	// The rank that exits leaves once its own barrier returns, when the
	// others may still be in theirs: they may see it fail there.
	if err := c.Barrier(ctx); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return nil, nil, fmt.Errorf("first barrier: %w", err)
	}
	if rank == die {
		os.Exit(3)
	}
	if err := c.Barrier(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
		return nil, nil, fmt.Errorf("barrier after rank %d left: %v, want ErrProcFailed", die, err)
	}
	nc, err = c.Replace(ctx)
	if retryAfterErrReplace {
		if !errors.Is(err, comm.ErrReplace) {
			return nil, nil, fmt.Errorf("replace with the first spare dying: %v, want ErrReplace", err)
		}
		fmt.Printf("rank %d: first replace: %v\n", rank, err)
		nc, err = c.Replace(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("replace: %w", err)
	}
	return nc, c, nil
}

// Through ftrun --respawn=1, over TCP and shared memory: rank 1 of 3
// exits, the survivors' Replace starts the spare (world rank 3), which
// takes number 1; a barrier and a window work on the new communicator.
func TestProcessReplace(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cmd := helperCmd(t, ctx, "replace", []string{"-n", "3", "--respawn=1", "--transport", tr})
			out, _ := cmd.CombinedOutput() // rank 1's exit fails the job
			wantLines(t, string(out),
				`rank 3 replaces world rank 1 as rank 1 of 3`,
				`rank 0 is 0 of 3 after replace, its left neighbour is world rank 2`,
				`rank 3 is 1 of 3 after replace, its left neighbour is world rank 0`,
				`rank 2 is 2 of 3 after replace, its left neighbour is world rank 3`,
			)
		})
	}
}

// A spare that dies before it joins (world rank 3, exiting at once) fails
// the survivors' Replace with ErrReplace; their next Replace starts spare
// 4, which must not wait for rank 3 (never admitted anywhere: absent at
// every rank) and takes number 1. Over every transport spares work on.
func TestProcessReplaceAfterSpareDiedUnjoined(t *testing.T) {
	for _, tr := range []string{"tcp", "shm", "shm+tcp"} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cmd := helperCmd(t, ctx, "replace", []string{"-n", "3", "--respawn=2", "--transport", tr}, "first-spare-dies")
			out, _ := cmd.CombinedOutput() // rank 1's exit fails the job
			wantLines(t, string(out),
				`rank 0: first replace: .*spare rank 3 exited with status 3 before it joined.*`,
				`rank 4 replaces world rank 1 as rank 1 of 3`,
				`rank 0 is 0 of 3 after replace, its left neighbour is world rank 2`,
				`rank 4 is 1 of 3 after replace, its left neighbour is world rank 0`,
				`rank 2 is 2 of 3 after replace, its left neighbour is world rank 4`,
			)
		})
	}
}
