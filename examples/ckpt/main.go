// Command ckpt is ftrma's checkpointing demonstration: a task-parallel
// computation whose ranks checkpoint their progress in the replicated store,
// so that when ranks are killed the survivors take over their work and still
// finish with exactly the result of a failure-free run.
//
//	ftrun --oversubscribe -n 8 --tag-output ckpt -crash 2@0.25 -crash 5@0.5
//
// -crash R@F makes rank R SIGKILL itself before the task at fraction F of
// its own list: a failure after progress, which lands mid-run whatever the
// machine's speed. (ftrun --kill R@DURATION kills from outside, after a fixed
// time, which a fast machine can outrun.)
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
//  3. A checkpoint can be lost: when every rank that held a copy failed
//     (store.ErrDataLost; more than -copies-1 failures). A rank that learns
//     of a failure therefore saves the checkpoints of the lists it runs again;
//     an adopter that finds a lost checkpoint recomputes the list from its
//     start, with sum 0 — still exactly once, since the sum travels with the
//     position — and says so on stderr. A rank waiting for a list whose
//     checkpoint stays lost for -lost-wait recomputes it itself.
//  4. A rank with nothing left to run polls the checkpoints until every list
//     is done, still adopting ranks that fail meanwhile. Then the survivors
//     agree (a fault-tolerant collective) and the lowest of them prints the
//     sum of the final checkpoints.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/store"
)

// config is what the flags set.
type config struct {
	tasks     int
	tree      tree
	copies    int
	every     time.Duration // checkpoint interval of a list
	poll      time.Duration // how often an idle rank reads the checkpoints
	lostGrace time.Duration // how long a lost checkpoint may stay lost before a waiting rank recomputes its list
	respawn   bool          // replace failed ranks (-respawn) rather than adopt their lists
	// snapshot is the directory of the store's snapshots (-snapshot), ""
	// for none; snapEvery their interval.
	snapshot  string
	snapEvery time.Duration
	snapKeep  int // complete snapshots kept (-snapshot-keep)
	// crash maps a rank to the fraction of its own list after which it
	// SIGKILLs itself (-crash).
	crash map[ftrma.Rank]float64
}

// crashFlag is -crash RANK@FRACTION, repeatable.
type crashFlag map[ftrma.Rank]float64

func (f crashFlag) String() string { return fmt.Sprint(map[ftrma.Rank]float64(f)) }

func (f crashFlag) Set(s string) error {
	r, fr, ok := strings.Cut(s, "@")
	rank, err1 := strconv.Atoi(r)
	frac, err2 := strconv.ParseFloat(fr, 64)
	if !ok || err1 != nil || err2 != nil || rank < 0 || !(frac >= 0 && frac < 1) {
		return fmt.Errorf("%q is not RANK@FRACTION, with 0 <= FRACTION < 1", s)
	}
	f[ftrma.Rank(rank)] = frac
	return nil
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
	flag.DurationVar(&cfg.lostGrace, "lost-wait", time.Second, "how long a lost checkpoint of a list another rank runs may stay lost before this rank recomputes the list")
	cfg.crash = map[ftrma.Rank]float64{}
	flag.Var(crashFlag(cfg.crash), "crash", "`RANK@FRACTION`: RANK SIGKILLs itself before the task at FRACTION (0 to 1) of its own list; may be repeated")
	flag.StringVar(&cfg.snapshot, "snapshot", "", "`DIR` of snapshots of the store, taken every -snapshot-every; a job started again with the same -snapshot (and -n) after the whole job was lost resumes from the newest complete one")
	flag.DurationVar(&cfg.snapEvery, "snapshot-every", 200*time.Millisecond, "interval of the snapshots (-snapshot)")
	flag.IntVar(&cfg.snapKeep, "snapshot-keep", 3, "complete snapshots kept under -snapshot; older ones are removed")
	flag.BoolVar(&cfg.respawn, "respawn", false, "replace failed ranks by spares (the job must have them: ftrun --respawn) instead of adopting their lists; adopt when no spare is left")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	err := cfg.validate()
	if err == nil {
		cfg.tree, err = newTree(*b0, *m, *q, *seed)
	}
	if err == nil && flag.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", flag.Arg(0))
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

// validate rejects flag values that make no sense.
func (cfg config) validate() error {
	switch {
	case cfg.tasks < 1:
		return fmt.Errorf("-tasks must be at least 1 (got %d)", cfg.tasks)
	case cfg.copies < 1:
		return fmt.Errorf("-copies must be at least 1 (got %d)", cfg.copies)
	case cfg.every < 0:
		return fmt.Errorf("-ckpt must not be negative (got %v)", cfg.every)
	case cfg.poll <= 0:
		return fmt.Errorf("-poll must be positive (got %v)", cfg.poll)
	case cfg.lostGrace < 0:
		return fmt.Errorf("-lost-wait must not be negative (got %v)", cfg.lostGrace)
	case cfg.snapshot != "" && cfg.respawn:
		return errors.New("-snapshot and -respawn do not go together yet")
	case cfg.snapshot != "" && cfg.snapEvery <= 0:
		return fmt.Errorf("-snapshot-every must be positive (got %v)", cfg.snapEvery)
	case cfg.snapshot != "" && cfg.snapKeep < 1:
		return fmt.Errorf("-snapshot-keep must be at least 1 (got %d)", cfg.snapKeep)
	}
	return nil
}

func run(ctx context.Context, cfg config) error {
	c, err := startup.Init(ctx)
	if errors.Is(err, comm.ErrReplace) {
		// A spare whose Replace was called off (a failure during it, or
		// spares ran out): a live rank in no communicator. The others go
		// on without it.
		fmt.Fprintf(os.Stderr, "ckpt: a spare not needed after all: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	opt := store.Config{Copies: min(cfg.copies, c.Size())}
	var s *store.Store
	replaces, isReplacement := c.Replaces()
	world := c
	restored := false
	var sc *comm.Comm // the store's own communicator with -snapshot
	switch {
	case isReplacement:
		s, c, err = store.JoinRespawned(ctx, c, opt)
	case cfg.snapshot != "":
		// The store on a communicator of its own: its snapshots are
		// collectives of a goroutine of their own (snapshots).
		if sc, err = c.Dup(ctx); err == nil {
			s, restored, err = openOrRestore(ctx, sc, cfg.snapshot, opt)
		}
	default:
		s, err = store.Open(ctx, c, opt)
	}
	if err != nil {
		world.Close()
		return fmt.Errorf("open store: %w", err)
	}
	rs := &respawner{c: c, s: s}
	defer world.Close() // after the store, which closes the communicators it made
	defer func() {
		// Collective while everyone lives; after failures it may fail, and
		// must not hold up the exit.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(cctx)
	}()

	for r := range cfg.crash {
		if int(r) >= c.Size() {
			return fmt.Errorf("-crash %d@...: the job has %d ranks", r, c.Size())
		}
	}
	start := time.Now()
	w := newWorker(c, s, cfg, os.Stdout, os.Stderr)
	w.crash = func() {
		syscall.Kill(os.Getpid(), syscall.SIGKILL) // -crash: this process, at once
		select {}
	}
	if cfg.respawn {
		w.replace = rs.replace
	}
	if isReplacement {
		if err := w.resume(ctx, fmt.Sprintf("replaces world rank %d", replaces)); err != nil {
			return err
		}
	}
	if restored {
		if err := w.resume(ctx, "restarts from the snapshot"); err != nil {
			return err
		}
	}
	stopSnapshots := func() {}
	if cfg.snapshot != "" {
		stopSnapshots = snapshots(ctx, sc, s, cfg, os.Stderr)
	}
	err = w.run(ctx)
	stopSnapshots()
	if err != nil {
		return err
	}
	fmt.Printf("rank %d ran %s in %.2f s\n", w.me, w.summary(), w.idle.Sub(start).Seconds())

	// Everyone has seen every list done. With -respawn, the failed ranks
	// are replaced once more, until a Replace finds none (every survivor
	// calls Replace at each failure, here or in the run, so the calls
	// match); then, or without spares, agree fault-tolerantly, so that
	// every failed rank is known at every survivor and the lowest survivor
	// is the same at all of them.
	for w.replace != nil {
		more, err := rs.replaceAtEnd(ctx)
		if errors.Is(err, comm.ErrReplace) {
			break
		}
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	c = rs.c
	c.AckFailed(c.Size())
	if _, err := c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return fmt.Errorf("final agreement: %w", err)
	}
	failed := c.Failed()
	if lowestLive(c.Size(), failed) != c.Rank() {
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
	line := fmt.Sprintf("result: %d tree nodes (tasks %d, survivors %d of %d, adopted ranks %v",
		total, cfg.tasks, c.Size()-len(failed), c.Size(), adopted)
	if cfg.respawn {
		line += fmt.Sprintf(", replaced ranks %v", rs.replaced)
	}
	fmt.Println(line + ")")
	return nil
}

// respawner replaces failed ranks (-respawn): store.Respawn on the
// current communicator, which replaces them by spares and grows the store
// onto the new one (the store closes the communicators it makes).
type respawner struct {
	c        *comm.Comm
	s        *store.Store
	replaced []ftrma.Rank // communicator ranks replaced, in order, repeats included
}

// replace replaces the failed ranks of the current communicator; an error
// wrapping comm.ErrReplace means no spare was left, at every survivor
// alike.
func (rs *respawner) replace(ctx context.Context) (group, error) {
	c, fresh, err := store.Respawn(ctx, rs.s, rs.c)
	rs.c = c
	rs.replaced = append(rs.replaced, fresh...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// replaceAtEnd is replace once every list is done: it reports whether it
// replaced a rank (and the next communicator must be checked again).
func (rs *respawner) replaceAtEnd(ctx context.Context) (bool, error) {
	before := rs.c
	if _, err := rs.replace(ctx); err != nil {
		return false, err
	}
	return rs.c != before, nil
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

// openOrRestore opens the store over c from the newest complete snapshot
// under dir, or empty when there is none yet (restored false).
func openOrRestore(ctx context.Context, c *comm.Comm, dir string, opt store.Config) (*store.Store, bool, error) {
	s, info, err := store.Restore(ctx, c, dir, opt)
	switch {
	case err == nil:
		if c.Rank() == 0 {
			fmt.Printf("restored the store from %s (%d incomplete snapshots after it skipped)\n", info.Dir, len(info.Skipped))
		}
		return s, true, nil
	case errors.Is(err, store.ErrNoSnapshot):
		s, err = store.Open(ctx, c, opt)
		return s, false, err
	}
	return nil, false, err
}

// snapshots snapshots the store every cfg.snapEvery until the returned
// function is called. Every rank runs it; rank 0's clock decides each round
// and broadcasts it, so that the ranks call Snapshot equally often, and
// rank 0's stop ends the rounds everywhere (it broadcasts the end). The
// other ranks' stop waits for that end, for a bounded time (a failure may
// have ended the rounds at rank 0 alone); a Snapshot that fails (the file
// system; a failed rank does not fail it) ends the rounds at its rank, and
// rank 0's failure ends them everywhere. Rank 0 keeps the newest
// -snapshot-keep complete snapshots.
func snapshots(ctx context.Context, sc *comm.Comm, s *store.Store, cfg config, log io.Writer) (stop func()) {
	loop, cancel := context.WithCancel(ctx)
	done, stopping := make(chan struct{}), make(chan struct{})
	ctrl, err := sc.Dup(ctx)
	if err != nil {
		fmt.Fprintf(log, "ckpt: no snapshots: %v\n", err)
		cancel()
		return func() {}
	}
	go func() {
		defer close(done)
		defer ctrl.Close()
		for {
			var round [1]byte
			if ctrl.Rank() == 0 {
				select {
				case <-time.After(cfg.snapEvery):
					round[0] = 1
				case <-stopping:
				}
			}
			b, err := ctrl.Bcast(loop, 0, round[:])
			if err != nil || len(b) != 1 || b[0] == 0 {
				return
			}
			if _, err := s.Snapshot(ctx, cfg.snapshot); err != nil {
				fmt.Fprintf(log, "ckpt: rank %d: snapshot: %v; no more snapshots\n", ctrl.Rank(), err)
				return
			}
			if ctrl.Rank() == 0 {
				if _, err := store.PruneSnapshots(ctx, cfg.snapshot, cfg.snapKeep); err != nil {
					fmt.Fprintf(log, "ckpt: pruning snapshots: %v\n", err)
				}
			}
		}
	}()
	return func() {
		close(stopping)
		select {
		case <-done:
		case <-time.After(cfg.snapEvery + 10*time.Second):
		}
		cancel()
		<-done
	}
}
