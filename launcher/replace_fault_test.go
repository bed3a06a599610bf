package launcher

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
)

// replaceRoundsHelper is the rank program of TestProcessReplaceThreeTimes:
// a job of 3 ranks and 3 spares (world ranks 3, 4, 5). Number 1 is held in
// turn by world ranks 1, 3, 4 and 5: each of the first three passes a
// barrier on its communicator and kills itself (SIGKILL); the survivors
// find the next barrier failed and Replace, and the next spare takes
// number 1. The last communicator passes a barrier and a window round,
// and everyone exits 0.
func replaceRoundsHelper(rank int) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	const n, rounds = 3, 3
	c, err := startup.Init(ctx)
	if err != nil {
		return fail("init: %v", err)
	}
	defer c.Close()
	round := 0 // the Replaces this rank has seen
	if was, ok := c.Replaces(); ok {
		round = rank - n + 1
		fmt.Printf("rank %d replaces world rank %d as rank %d of %d\n", rank, was, c.Rank(), c.Size())
	}
	for ; round < rounds; round++ {
		err := c.Barrier(ctx)
		if c.Rank() == 1 {
			if err != nil {
				return fail("barrier before dying: %v", err)
			}
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if err == nil {
			err = c.Barrier(ctx)
		}
		if !errors.Is(err, ftrma.ErrProcFailed) {
			return fail("barrier in round %d: %v, want ErrProcFailed", round, err)
		}
		nc, err := c.Replace(ctx)
		if err != nil {
			return fail("replace %d: %v", round+1, err)
		}
		defer nc.Close() // before the older ones: a world communicator owns the runtime
		c = nc
	}
	return endRound(ctx, rank, c, fail)
}

// endRound passes a barrier and a window round on c (each rank puts its
// world rank into its right neighbour's slot) and prints the outcome.
func endRound(ctx context.Context, rank int, c *comm.Comm, fail func(string, ...any) int) int {
	if err := c.Barrier(ctx); err != nil {
		return fail("barrier on the last communicator: %v", err)
	}
	win, err := window.Allocate(ctx, c, 8*c.Size())
	if err != nil {
		return fail("allocate: %v", err)
	}
	size := ftrma.Rank(c.Size())
	next, prev := (c.Rank()+1)%size, (c.Rank()+size-1)%size
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(rank))
	if err := win.PutSync(ctx, next, uint64(8*c.Rank()), b[:]); err != nil {
		return fail("put: %v", err)
	}
	if err := c.Barrier(ctx); err != nil {
		return fail("barrier after put: %v", err)
	}
	got := binary.LittleEndian.Uint64(win.Bytes()[8*prev:])
	if err := win.Free(ctx); err != nil {
		return fail("free: %v", err)
	}
	fmt.Printf("rank %d is %d of %d at the end, its left neighbour is world rank %d\n", rank, c.Rank(), c.Size(), got)
	return 0
}

// Through ftrun --respawn=3, over TCP and shared memory: number 1 dies
// three times (world rank 1, then its replacement 3, then 4) and is
// replaced each time; each replacement's Replaces names the world rank it
// replaced, the last communicator has 3 ranks and works, and ftrun exits
// 0 (the killed ranks failed; every survivor exited 0).
func TestProcessReplaceThreeTimes(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cmd := helperCmd(t, ctx, "replacerounds", []string{"-n", "3", "--respawn=3", "--transport", tr})
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("ftrun: %v", err)
			}
			wantLines(t, string(out),
				`rank 3 replaces world rank 1 as rank 1 of 3`,
				`rank 4 replaces world rank 3 as rank 1 of 3`,
				`rank 5 replaces world rank 4 as rank 1 of 3`,
				`rank 0 is 0 of 3 at the end, its left neighbour is world rank 2`,
				`rank 5 is 1 of 3 at the end, its left neighbour is world rank 0`,
				`rank 2 is 2 of 3 at the end, its left neighbour is world rank 5`,
			)
		})
	}
}

// replaceFaultHelper is the rank program of TestProcessReplaceFailure: a
// job of 4 ranks and 3 spares. Rank 3 kills itself after a barrier; the
// others call Replace, and rank 2 kills itself a moment after calling it,
// while the leader's spawn is likely under way. The survivors' Replace
// either succeeds at both, or fails at both (ErrProcFailed or ErrReplace);
// then they Shrink, or with args "retry" Replace again. A spare whose
// Replace was called off exits 0 (its Init fails with ErrReplace). The last
// communicator passes a barrier and a window round.
func replaceFaultHelper(rank int, args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	retry := len(args) > 0 && args[0] == "retry"
	c, err := startup.Init(ctx)
	if errors.Is(err, comm.ErrReplace) {
		fmt.Printf("rank %d: its replace was called off: %v\n", rank, err)
		return 0
	}
	if err != nil {
		return fail("init: %v", err)
	}
	defer c.Close()
	if was, ok := c.Replaces(); ok {
		fmt.Printf("rank %d replaces world rank %d as rank %d of %d\n", rank, was, c.Rank(), c.Size())
		return endRound(ctx, rank, c, fail)
	}
	err = c.Barrier(ctx)
	if rank == 3 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if err == nil {
		err = c.Barrier(ctx)
	}
	if !errors.Is(err, ftrma.ErrProcFailed) {
		return fail("barrier: %v, want ErrProcFailed", err)
	}
	if rank == 2 {
		go c.Replace(ctx)
		time.Sleep(2 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	for attempt := 1; ; attempt++ {
		nc, err := c.Replace(ctx)
		if err == nil {
			defer nc.Close()
			fmt.Printf("rank %d: replace %d succeeded\n", rank, attempt)
			return endRound(ctx, rank, nc, fail)
		}
		if !errors.Is(err, ftrma.ErrProcFailed) && !errors.Is(err, comm.ErrReplace) || attempt == 3 {
			return fail("replace %d: %v", attempt, err)
		}
		fmt.Printf("rank %d: replace %d failed: %v\n", rank, attempt, err)
		if !retry {
			nc, err := c.Shrink(ctx)
			if err != nil {
				return fail("shrink after a failed replace: %v", err)
			}
			defer nc.Close()
			return endRound(ctx, rank, nc, fail)
		}
	}
}

// Through ftrun --respawn=3, over TCP and shared memory: a survivor dies
// during Replace (see replaceFaultHelper). Whatever the interleaving, the
// survivors' Replace returns the same outcome; the job ends with a
// communicator that works, of 4 after a Replace that succeeded (ranks 0 and
// 1 keeping their numbers), of 2 after one that failed and a Shrink; ftrun
// exits 0.
func TestProcessReplaceFailure(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			out := runReplaceFault(t, tr)
			if strings.Contains(out, "replace 1 failed") {
				wantLines(t, out,
					`rank 0: replace 1 failed: .*`,
					`rank 1: replace 1 failed: .*`,
					`rank 0 is 0 of 2 at the end, its left neighbour is world rank 1`,
					`rank 1 is 1 of 2 at the end, its left neighbour is world rank 0`,
				)
				return
			}
			wantLines(t, out,
				`rank 0: replace 1 succeeded`,
				`rank 1: replace 1 succeeded`,
				`rank 0 is 0 of 4 at the end, its left neighbour is world rank [4-6]`,
				`rank 1 is 1 of 4 at the end, its left neighbour is world rank 0`,
				`rank [4-6] is 2 of 4 at the end, its left neighbour is world rank 1`,
				`rank [4-6] is 3 of 4 at the end, its left neighbour is world rank [4-6]`,
			)
		})
	}
}

// runReplaceFault runs replaceFaultHelper's job over transport tr and
// returns its output; ftrun must exit 0.
func runReplaceFault(t *testing.T, tr string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := helperCmd(t, ctx, "replacefault", []string{"-n", "4", "--respawn=3", "--transport", tr}, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("ftrun: %v\n%s", err, out)
	}
	return string(out)
}

// The same job, but after a failed Replace the survivors Replace again:
// it ends with a communicator of 4. The spare of the called-off Replace
// leaves (exit 0 after its Init failed); the spares of the next Replace
// must not wait for its connection (ftrun lists a rank that left, or is
// leaving, as gone in a spare's roster, and tells joined spares of its
// exit): before that fix they waited in Init until rank 0's detector had
// them killed, and the retry failed.
func TestProcessReplaceAgainAfterFailure(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			out := runReplaceFault(t, tr, "retry")
			wantLines(t, out,
				`rank 0 is 0 of 4 at the end, its left neighbour is world rank [4-6]`,
				`rank 1 is 1 of 4 at the end, its left neighbour is world rank 0`,
			)
		})
	}
}
