package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/store"
)

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
	c    *comm.Comm
	s    *store.Store
	cfg  config
	me   ftrma.Rank
	n    int
	stk  []uint64  // the tree search's stack, reused
	seen int       // len(c.Failed()) when adoptions were last decided
	idle time.Time // when this rank ran its last task

	// lists holds this rank's own list, then the adopted ones in the order
	// of adoption; an owner appears at most once.
	lists []*list
	// final holds the done checkpoints of every list, read from the store:
	// final[:known] are all done.
	final []checkpoint
	known int
}

func newWorker(c *comm.Comm, s *store.Store, cfg config) *worker {
	return &worker{c: c, s: s, cfg: cfg, me: c.Rank(), n: c.Size(), idle: time.Now(), final: make([]checkpoint, c.Size())}
}

// run runs this rank's list and the lists it adopts until every rank's list
// is done.
func (w *worker) run(ctx context.Context) error {
	if err := w.take(ctx, w.me, checkpoint{}); err != nil {
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

// load reads owner's checkpoint; none yet means the list's start.
func (w *worker) load(ctx context.Context, owner ftrma.Rank) (checkpoint, error) {
	b, err := w.s.Get(ctx, checkpointKey(owner))
	if errors.Is(err, store.ErrNotFound) {
		return checkpoint{}, nil
	}
	if err != nil {
		return checkpoint{}, fmt.Errorf("read rank %d's checkpoint: %w", owner, err)
	}
	return decodeCheckpoint(b)
}

// adopt takes over the lists of the failed ranks this rank is the adopter of.
func (w *worker) adopt(ctx context.Context) error {
	failed := w.c.Failed()
	if len(failed) == w.seen { // the set only grows
		return nil
	}
	w.seen = len(failed)
	for _, f := range failed {
		if adopter(f, w.n, failed) != w.me || w.taking(f) {
			continue
		}
		ck, err := w.load(ctx, f)
		if err != nil {
			return err
		}
		if ck.done {
			fmt.Printf("rank %d adopts rank %d: its list was done\n", w.me, f)
		} else {
			fmt.Printf("rank %d adopts rank %d at task %d of %d (%d of its %d tasks checkpointed)\n",
				w.me, f, int(f)+ck.next*w.n, w.cfg.tasks, ck.next, w.length(f))
		}
		if err := w.take(ctx, f, ck); err != nil {
			return err
		}
	}
	return nil
}

func (w *worker) taking(owner ftrma.Rank) bool {
	for _, l := range w.lists {
		if l.owner == owner {
			return true
		}
	}
	return false
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
// and reports whether every list is done.
func (w *worker) allDone(ctx context.Context) (bool, error) {
	for w.known < w.n {
		ck, err := w.load(ctx, ftrma.Rank(w.known))
		if err != nil || !ck.done {
			return false, err
		}
		w.final[w.known] = ck
		w.known++
	}
	return true, nil
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
