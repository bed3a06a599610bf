package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/store"
)

// kv is what the worker needs of the store: *store.Store, or a fake in
// tests. Get returns store.ErrNotFound for a key never put and
// store.ErrDataLost for one whose every copy may be gone.
type kv interface {
	Put(ctx context.Context, key, value []byte) error
	Get(ctx context.Context, key []byte) ([]byte, error)
}

// group is what the worker needs of the communicator: *comm.Comm, or a
// fake in tests.
type group interface {
	Rank() ftrma.Rank
	Size() int
	Failed() []ftrma.Rank // grows only
}

// checkpoint is the progress of one rank's task list: the value of
// ckpt/<owner>.
type checkpoint struct {
	next int        // position in the list of the first task not in sum
	sum  uint64     // nodes of the list's tasks before next
	done bool       // the list is finished: next is its length
	by   ftrma.Rank // the rank that wrote the checkpoint
}

const checkpointSize = 8 + 8 + 1 + 8

func (ck checkpoint) encode() []byte {
	b := make([]byte, 0, checkpointSize)
	b = binary.BigEndian.AppendUint64(b, uint64(ck.next))
	b = binary.BigEndian.AppendUint64(b, ck.sum)
	if ck.done {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return binary.BigEndian.AppendUint64(b, uint64(ck.by))
}

func decodeCheckpoint(b []byte) (checkpoint, error) {
	if len(b) != checkpointSize || b[16] > 1 {
		return checkpoint{}, fmt.Errorf("malformed checkpoint %x", b)
	}
	return checkpoint{
		next: int(binary.BigEndian.Uint64(b)),
		sum:  binary.BigEndian.Uint64(b[8:]),
		done: b[16] == 1,
		by:   ftrma.Rank(binary.BigEndian.Uint64(b[17:])),
	}, nil
}

func checkpointKey(owner ftrma.Rank) []byte { return fmt.Appendf(nil, "ckpt/%d", owner) }

// list is a task list this rank runs: its own or an adopted one.
type list struct {
	owner ftrma.Rank
	ck    checkpoint // progress here; the stored checkpoint may lag behind
	saved time.Time  // when ck was last put
	ran   int        // tasks this rank ran of the list
}

// worker is one rank's part of the computation.
type worker struct {
	c        group
	s        kv
	cfg      config
	me       ftrma.Rank
	n        int
	out, log io.Writer // progress (stdout), lost checkpoints (stderr)
	stk      []uint64  // the tree search's stack, reused
	seen     int       // len(c.Failed()) when adoptions were last decided
	idle     time.Time // when this rank ran its last task

	// replace, when set (-respawn), is called on a new failure instead of
	// adopting: it replaces the failed ranks of the communicator by spares
	// and grows the store onto the new communicator (see respawner). It
	// returns the group to go on with; an error wrapping comm.ErrReplace
	// (no spare left) makes this rank adopt instead, from then on.
	replace func(ctx context.Context) (group, error)
	// start is where this rank's own list starts: a replacement resumes it
	// from the failed rank's checkpoint.
	start checkpoint

	// crashAt is the position in this rank's own list before whose task
	// crash is called (-crash); -1: never.
	crashAt int
	crash   func()
	// lostSince holds, for each list whose checkpoint this rank found lost
	// while another rank should run it, when it first found it so.
	lostSince map[ftrma.Rank]time.Time

	// lists holds this rank's own list, then the adopted ones in the order
	// of adoption; an owner appears at most once.
	lists []*list
	// final holds the done checkpoints of every list, read from the store:
	// final[:known] are all done.
	final []checkpoint
	known int
}

func newWorker(c group, s kv, cfg config, out, log io.Writer) *worker {
	w := &worker{c: c, s: s, cfg: cfg, me: c.Rank(), n: c.Size(), out: out, log: log, idle: time.Now(),
		final: make([]checkpoint, c.Size()), crashAt: -1, lostSince: map[ftrma.Rank]time.Time{}}
	if f, ok := cfg.crash[w.me]; ok {
		w.crashAt = int(f * float64(w.length(w.me)))
	}
	return w
}

// run runs this rank's list and the lists it adopts until every rank's list
// is done.
func (w *worker) run(ctx context.Context) error {
	if err := w.take(ctx, w.me, w.start); err != nil {
		return err
	}
	for {
		if err := w.adopt(ctx); err != nil {
			return err
		}
		if l := w.pick(); l != nil {
			if err := w.step(ctx, l); err != nil {
				return err
			}
			continue
		}
		all, err := w.allDone(ctx)
		if err != nil || all {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.cfg.poll):
		}
	}
}

// resume makes this rank take over its own list where the last process of
// its rank checkpointed it (from the start, with sum 0, if the checkpoint
// is lost): a replacement of a failed process, or a rank of a job started
// again from a snapshot; who says which, in its output line. A rank that
// resumes does not crash again (-crash is for the first process).
func (w *worker) resume(ctx context.Context, who string) error {
	w.crashAt = -1
	ck, lost, err := w.load(ctx, w.me)
	if err != nil {
		return err
	}
	if lost {
		fmt.Fprintf(w.log, "rank %d %s: its checkpoint is lost (every copy may be gone): recomputing its list from the start\n", w.me, who)
	} else {
		fmt.Fprintf(w.out, "rank %d %s: resuming its list at task %d of %d (%d of its %d tasks checkpointed)\n",
			w.me, who, int(w.me)+ck.next*w.n, w.cfg.tasks, ck.next, w.length(w.me))
	}
	w.start = ck
	return nil
}

// length is the number of tasks of owner's list.
func (w *worker) length(owner ftrma.Rank) int {
	return (w.cfg.tasks - int(owner) + w.n - 1) / w.n
}

// take starts running owner's list from ck.
func (w *worker) take(ctx context.Context, owner ftrma.Rank, ck checkpoint) error {
	l := &list{owner: owner, ck: ck, saved: time.Now()}
	w.lists = append(w.lists, l)
	if !ck.done && ck.next >= w.length(owner) { // an empty list
		l.ck.done = true
		return w.save(ctx, l)
	}
	return nil
}

// pick returns the unfinished list that is least far along, so that adopted
// lists advance beside this rank's own; nil when every list is done.
func (w *worker) pick() *list {
	var min *list
	for _, l := range w.lists {
		if !l.ck.done && (min == nil || l.ck.next < min.ck.next) {
			min = l
		}
	}
	return min
}

// step runs l's next task, and checkpoints l when it is time.
func (w *worker) step(ctx context.Context, l *list) error {
	if l.owner == w.me && l.ck.next == w.crashAt && w.crash != nil {
		w.crash() // -crash: does not return
	}
	var nodes uint64
	nodes, w.stk = w.cfg.tree.count(int(l.owner)+l.ck.next*w.n, w.stk)
	l.ck.next++
	l.ck.sum += nodes
	l.ran++
	w.idle = time.Now()
	l.ck.done = l.ck.next == w.length(l.owner)
	if l.ck.done || time.Since(l.saved) >= w.cfg.every {
		return w.save(ctx, l)
	}
	return nil
}

// save puts l's checkpoint.
func (w *worker) save(ctx context.Context, l *list) error {
	l.ck.by = w.me
	if err := w.s.Put(ctx, checkpointKey(l.owner), l.ck.encode()); err != nil {
		return fmt.Errorf("checkpoint rank %d's list: %w", l.owner, err)
	}
	l.saved = time.Now()
	return nil
}

// load reads owner's checkpoint; none yet means the list's start. lost
// reports that the checkpoint may be lost (store.ErrDataLost: every copy may
// be gone); ck is then the list's start.
func (w *worker) load(ctx context.Context, owner ftrma.Rank) (ck checkpoint, lost bool, err error) {
	b, err := w.s.Get(ctx, checkpointKey(owner))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return checkpoint{}, false, nil
	case errors.Is(err, store.ErrDataLost):
		return checkpoint{}, true, nil
	case err != nil:
		return checkpoint{}, false, fmt.Errorf("read rank %d's checkpoint: %w", owner, err)
	}
	ck, err = decodeCheckpoint(b)
	return ck, false, err
}

// adopt reacts to new failures: it saves again the checkpoints of the lists
// this rank runs (a failed rank may have held their copies), then takes over
// the lists of the failed ranks this rank is the adopter of. A list whose
// checkpoint is lost starts again from its beginning, with sum 0: the sum
// travels in the checkpoint, so every task still counts exactly once.
func (w *worker) adopt(ctx context.Context) error {
	failed := w.c.Failed()
	if len(failed) == w.seen { // the set only grows
		return nil
	}
	w.seen = len(failed)
	for _, l := range w.lists {
		if err := w.save(ctx, l); err != nil {
			return err
		}
	}
	if w.replace != nil {
		c, err := w.replace(ctx)
		switch {
		case err == nil:
			w.c, w.seen = c, 0 // failures of c itself, if any, next time
			return nil
		case !errors.Is(err, comm.ErrReplace):
			return err
		}
		fmt.Fprintf(w.log, "rank %d: %v: adopting the failed ranks' lists instead\n", w.me, err)
		w.replace = nil
	}
	for _, f := range failed {
		if adopter(f, w.n, failed) != w.me || w.running(f) != nil {
			continue
		}
		ck, lost, err := w.load(ctx, f)
		if err != nil {
			return err
		}
		switch {
		case lost:
			fmt.Fprintf(w.log, "rank %d adopts rank %d: its checkpoint is lost (every copy may be gone): recomputing rank %d's list from its start\n", w.me, f, f)
		case ck.done:
			fmt.Fprintf(w.out, "rank %d adopts rank %d: its list was done\n", w.me, f)
		default:
			fmt.Fprintf(w.out, "rank %d adopts rank %d at task %d of %d (%d of its %d tasks checkpointed)\n",
				w.me, f, int(f)+ck.next*w.n, w.cfg.tasks, ck.next, w.length(f))
		}
		if err := w.take(ctx, f, ck); err != nil {
			return err
		}
	}
	return nil
}

// adopter returns the adopter of failed rank f among n ranks: the first rank
// after f, cyclically, not in failed; -1 when every rank failed. Ranks may
// know different failures, but two live ranks never both name themselves: of
// the two, the one nearer after f would have to be known failed by the other.
func adopter(f ftrma.Rank, n int, failed []ftrma.Rank) ftrma.Rank {
	dead := make(map[ftrma.Rank]bool, len(failed))
	for _, r := range failed {
		dead[r] = true
	}
	for k := 1; k < n; k++ {
		if r := (f + ftrma.Rank(k)) % ftrma.Rank(n); !dead[r] {
			return r
		}
	}
	return -1
}

// allDone reads the checkpoints in rank order up to the first unfinished one
// and reports whether every list is done. For a list this rank runs it
// looks at its own progress instead. A lost checkpoint of a list that
// another rank runs is not done yet: its runner saves it again when it
// learns of the failure, or, if it was the failed rank, its adopter
// recomputes it. Should it stay lost for cfg.lostGrace (its runner may have
// finished and stopped saving), this rank recomputes the list itself.
func (w *worker) allDone(ctx context.Context) (bool, error) {
	for w.known < w.n {
		owner := ftrma.Rank(w.known)
		var ck checkpoint
		if l := w.running(owner); l != nil {
			ck = l.ck
		} else {
			var lost bool
			var err error
			if ck, lost, err = w.load(ctx, owner); err != nil {
				return false, err
			}
			if lost {
				return false, w.lostElsewhere(ctx, owner)
			}
			delete(w.lostSince, owner)
		}
		if !ck.done {
			return false, nil
		}
		w.final[w.known] = ck
		w.known++
	}
	return true, nil
}

// lostElsewhere handles owner's lost checkpoint, which this rank does not
// run: past the grace period, it recomputes the list.
func (w *worker) lostElsewhere(ctx context.Context, owner ftrma.Rank) error {
	since, ok := w.lostSince[owner]
	if !ok {
		w.lostSince[owner] = time.Now()
		return nil
	}
	if time.Since(since) < w.cfg.lostGrace {
		return nil
	}
	delete(w.lostSince, owner)
	fmt.Fprintf(w.log, "rank %d: rank %d's checkpoint is lost (every copy may be gone) and was not written again within %v: recomputing rank %d's list from its start\n",
		w.me, owner, w.cfg.lostGrace, owner)
	return w.take(ctx, owner, checkpoint{})
}

// running returns the list of owner this rank runs, or nil.
func (w *worker) running(owner ftrma.Rank) *list {
	for _, l := range w.lists {
		if l.owner == owner {
			return l
		}
	}
	return nil
}

// summary describes what this rank ran.
func (w *worker) summary() string {
	total := 0
	var parts []string
	for _, l := range w.lists {
		total += l.ran
		if l.owner != w.me {
			parts = append(parts, fmt.Sprintf("%d of rank %d's", l.ran, l.owner))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d tasks", total)
	}
	return fmt.Sprintf("%d tasks (%d of its own, %s)", total, w.lists[0].ran, strings.Join(parts, ", "))
}
