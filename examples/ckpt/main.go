// Command ckpt is ftrma's checkpointing demonstration: a task-parallel
// computation whose ranks checkpoint their progress in the replicated store,
// so that when ranks are killed the survivors take over their work and still
// finish with exactly the result of a failure-free run.
//
//	ftrun -n 8 --kill 2@1s --kill 5@2s --tag-output ckpt
//
// The work is an unbalanced tree search: task i counts the nodes of a
// deterministic pseudo-random tree whose size nobody can predict (see tree),
// and the result is the sum over all tasks.
//
//  1. Rank r owns the task list r, r+n, r+2n, ... and runs it in order.
//     Every -ckpt (looked at after each task) and at the list's end it puts
//     the list's checkpoint ckpt/<r> with one Put: the position of the next
//     task, the sum of the tasks before it, whether the list is done. A task
//     counts iff the checkpoint is past it: exactly once, whatever happens.
//  2. Between tasks a rank looks for new failures. The adopter of a failed
//     rank f is the first rank after f, cyclically, not known to have failed:
//     if an adopter dies too, the next live rank adopts both. It reads
//     ckpt/f (none yet: f's list from the start) and goes on with f's list
//     beside its own, checkpointing into ckpt/f.
//  3. A rank with nothing left to run polls the checkpoints until every list
//     is done, still adopting ranks that fail meanwhile. Then the survivors
//     agree (a fault-tolerant collective) and the lowest of them prints the
//     sum of the final checkpoints.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/store"
)

// config is what the flags set.
type config struct {
	tasks  int
	tree   tree
	copies int
	every  time.Duration // checkpoint interval of a list
	poll   time.Duration // how often an idle rank reads the checkpoints
}

func main() {
	var cfg config
	flag.IntVar(&cfg.tasks, "tasks", 4096, "number of root tasks")
	b0 := flag.Int("b0", 300, "a task's root has 1 to 2*b0 children")
	m := flag.Int("m", 4, "children of an inner node below the root")
	q := flag.Float64("q", 0.2495, "probability that a node below the root is inner (q*m < 1; near 1 makes trees more unbalanced)")
	seed := flag.Uint64("seed", 1, "seed of the trees")
	flag.IntVar(&cfg.copies, "copies", 3, "replicas of each checkpoint, at most one per rank: checkpoints survive copies-1 simultaneous failures")
	flag.DurationVar(&cfg.every, "ckpt", 20*time.Millisecond, "checkpoint a task list at most this often (and when it ends)")
	flag.DurationVar(&cfg.poll, "poll", 10*time.Millisecond, "how often a rank with nothing to run reads the checkpoints")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	var err error
	if cfg.tree, err = newTree(*b0, *m, *q, *seed); err == nil && cfg.tasks < 1 {
		err = errors.New("-tasks must be at least 1")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ckpt:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ckpt:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	c, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := store.Open(ctx, c, store.Options{Copies: min(cfg.copies, c.Size())})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() {
		// Collective while everyone lives; after failures it may fail, and
		// must not hold up the exit.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(cctx)
	}()

	start := time.Now()
	w := newWorker(c, s, cfg)
	if err := w.run(ctx); err != nil {
		return err
	}
	fmt.Printf("rank %d ran %s in %.2f s\n", w.me, w.summary(), w.idle.Sub(start).Seconds())

	// Everyone has seen every list done. Agree, fault-tolerantly, so that
	// every failed rank is known at every survivor; then the lowest survivor
	// is the same at all of them.
	c.FailureAck()
	if _, err := c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return fmt.Errorf("final agreement: %w", err)
	}
	failed := c.Failed()
	if lowestLive(c.Size(), failed) != w.me {
		return nil
	}
	var total uint64
	var adopted []ftrma.Rank
	for owner, ck := range w.final {
		total += ck.sum
		if ck.by != ftrma.Rank(owner) {
			adopted = append(adopted, ftrma.Rank(owner))
		}
	}
	fmt.Printf("result: %d tree nodes (tasks %d, survivors %d of %d, adopted ranks %v)\n",
		total, cfg.tasks, c.Size()-len(failed), c.Size(), adopted)
	return nil
}

// lowestLive returns the lowest of n ranks not in failed.
func lowestLive(n int, failed []ftrma.Rank) ftrma.Rank {
	for r := range ftrma.Rank(n) {
		if !slices.Contains(failed, r) {
			return r
		}
	}
	return -1
}
