package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/store"
)

// Snapshots of a serving job. store.Snapshot is a collective: every live
// rank must call it, the same number of times, in the same order. A request
// arrives at one rank, a timer fires at each rank at a slightly different
// moment, and stop reaches the ranks one by one; so the ranks run numbered
// rounds, one at a time and all of them the same, and decide in each round
// together whether it snapshots and whether it is the last:
//
//   - Round i starts at a rank when it notices roundNotice+i (comm.Notify: a
//     reliable broadcast that tolerates failures), which a rank that has a
//     request for round i broadcasts; when its timer (--snapshot-every)
//     fires — every rank sets it when a round ends, so the ranks' timers
//     fire together, within the skew of the round's end; or once it has
//     stopped serving after a stop. Only requests broadcast: a notice stays
//     in every process for the job's life, so periodic rounds send none.
//   - In the round the live ranks agree (comm.Agree, which completes over
//     failures) on two bits: bit 0, set by a rank that has stopped serving
//     (every request it took is answered), and bit 1, cleared by a rank that
//     wants a snapshot (a request or its timer). The AND says: the round
//     snapshots when a rank wants one, and it is the last round when every
//     live rank has stopped serving — then it snapshots too, when the job
//     has a snapshot directory, so that what the job acknowledged is in the
//     snapshot a restart reads.
//   - A request waits for the round it asked for, which starts after the
//     request arrived, so that the snapshot holds every write acknowledged
//     before.
//
// After the last round the rank leaves; the rounds' collectives come before
// the server's own final agreement on every rank.

// roundNotice, with a round's number, is the notice that starts the round.
const roundNotice = "ftkv/round/"

// The bits of a round's vote.
const (
	voteStopped = 1 << 0 // this rank serves no more requests
	voteNoWant  = 1 << 1 // this rank wants no snapshot in this round
)

// errNoSnapshotDir is a snapshot request's error when the job was started
// without a snapshot directory.
var errNoSnapshotDir = errors.New("this job takes no snapshots: start it with --snapshot-dir DIR (or --restore DIR)")

// snapshotter runs a rank's rounds.
type snapshotter struct {
	c      *comm.Comm
	s      *store.Store
	dir    string        // where snapshots go ("": none)
	every  time.Duration // a snapshot at least this often (0: only on request)
	keep   int           // complete snapshots kept (0: all)
	stderr io.Writer

	stopped atomic.Bool // this rank serves no more requests

	mu   sync.Mutex
	next uint64                   // the first round that has not started here
	want map[uint64]*roundOutcome // the rounds requests here wait for
}

// roundOutcome is what a round did, once done is closed.
type roundOutcome struct {
	done chan struct{}
	info store.SnapshotInfo
	err  error
}

func newSnapshotter(c *comm.Comm, s *store.Store, dir string, every time.Duration, keep int, stderr io.Writer) *snapshotter {
	return &snapshotter{c: c, s: s, dir: dir, every: every, keep: keep, stderr: stderr, next: 1, want: map[uint64]*roundOutcome{}}
}

// request asks for a snapshot taken after it was made and waits for it, or
// for ctx (the round goes on without its requester).
func (sn *snapshotter) request(ctx context.Context) (store.SnapshotInfo, error) {
	if sn.dir == "" {
		return store.SnapshotInfo{}, errNoSnapshotDir
	}
	sn.mu.Lock()
	i := sn.next
	out := sn.want[i]
	if out == nil {
		out = &roundOutcome{done: make(chan struct{})}
		sn.want[i] = out
	}
	sn.mu.Unlock()
	sn.c.Notify(roundNotice + strconv.FormatUint(i, 10))
	select {
	case <-out.done:
		return out.info, out.err
	case <-ctx.Done():
		return store.SnapshotInfo{}, fmt.Errorf("waiting for snapshot round %d: %w", i, ctx.Err())
	}
}

// run runs rounds until the last; stop reports whether the job is stopping
// (the stop notice). Its collectives have no deadline: a rank that hangs is
// declared failed by the runtime, and the others go on without it.
func (sn *snapshotter) run(stop func() bool) {
	tick := time.NewTicker(stopPoll)
	defer tick.Stop()
	var timer *time.Timer
	var timed <-chan time.Time
	if sn.every > 0 {
		timer = time.NewTimer(sn.every)
		defer timer.Stop()
		timed = timer.C
	}
	for {
		sn.mu.Lock()
		i := sn.next
		sn.mu.Unlock()
		id := roundNotice + strconv.FormatUint(i, 10)
		fired := false
		for !sn.c.Noticed(id) && !fired && !(sn.stopped.Load() && stop()) {
			select {
			case <-tick.C:
			case <-timed:
				fired = true
			}
		}
		sn.mu.Lock()
		sn.next = i + 1
		out := sn.want[i]
		delete(sn.want, i)
		sn.mu.Unlock()

		vote := uint64(voteNoWant)
		if out != nil || fired {
			vote = 0
		}
		if sn.stopped.Load() {
			vote |= voteStopped
		}
		// The agreement's only error without a deadline reports failed
		// ranks: the survivors' value stands.
		all, _ := sn.c.Agree(context.Background(), vote)
		last := all&voteStopped != 0
		var info store.SnapshotInfo
		var err error
		if sn.dir != "" && (all&voteNoWant == 0 || last) {
			info, err = sn.s.Snapshot(context.Background(), sn.dir)
			if err != nil {
				fmt.Fprintf(sn.stderr, "ftkv serve: snapshot round %d: %v\n", i, err)
			} else if sn.keep > 0 && lowestLive(sn.c.Size(), sn.c.Failed()) == int(sn.c.Rank()) {
				if _, perr := store.PruneSnapshots(context.Background(), sn.dir, sn.keep); perr != nil {
					fmt.Fprintf(sn.stderr, "ftkv serve: removing old snapshots: %v\n", perr)
				}
			}
		} else if out != nil {
			err = errors.New("the round took no snapshot") // a request always wants one: not reached
		}
		if out != nil {
			out.info, out.err = info, err
			close(out.done)
		}
		if last {
			return
		}
		if timer != nil {
			timer.Reset(sn.every) // the others end the round about now: the timers fire together
		}
	}
}
