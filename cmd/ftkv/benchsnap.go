package main

import (
	"cmp"
	"context"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/internal/result"
	"github.com/ftrma/ftrma/store"
)

// snapPause is how long the writers of ftkv bench --snapshot-dir put before
// the snapshot and after it.
const snapPause = 200 * time.Millisecond

// snapshotRun is what the snapshot phase measured: the latencies (us) of
// the puts that ended before the snapshot began (base) and of those under
// way while it ran (during), pooled over ranks at rank 0, and the
// snapshot's time and bytes as rank 0 saw them.
type snapshotRun struct {
	base, during []float64
	took         time.Duration
	bytes        int64
}

// snapshotPhase runs this rank's writers without pause from their i-th put
// on, and one snapshot under dir while they do.
func snapshotPhase(ctx context.Context, c *comm.Comm, s *store.Store, mine []*writer, from int, dir string) (*snapshotRun, error) {
	var stop atomic.Bool
	spans := make([][]result.Span, len(mine))
	errs := make(chan error, len(mine))
	for i, w := range mine {
		go func() {
			for n := from; !stop.Load(); n++ {
				t := time.Now()
				if _, err := w.put(ctx, s, n); err != nil {
					errs <- err
					return
				}
				spans[i] = append(spans[i], result.Span{Start: t, End: time.Now()})
			}
			errs <- nil
		}()
	}
	time.Sleep(snapPause)
	t0 := time.Now()
	info, serr := s.Snapshot(ctx, dir)
	t1 := time.Now()
	if serr == nil {
		time.Sleep(snapPause)
	}
	stop.Store(true)
	var err error
	for range mine {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err = cmp.Or(serr, err); err != nil {
		return nil, err
	}
	run := &snapshotRun{took: t1.Sub(t0)}
	if files, err := os.ReadDir(info.Dir); err == nil {
		for _, f := range files {
			if fi, err := f.Info(); err == nil {
				run.bytes += fi.Size()
			}
		}
	}
	run.base, run.during = result.SplitAround(slices.Concat(spans...), t0, t1)
	return run, c.Barrier(ctx)
}

// append appends the phase's latencies to a rank's samples.
func (r *snapshotRun) append(b []byte) []byte {
	return append(b, encodeSamples(0, r.base, r.during)...)
}

// decode adds the latencies a rank appended at the start of b to r and
// returns what follows them.
func (r *snapshotRun) decode(b []byte) ([]byte, error) {
	_, base, during, rest, err := decodeSamples(b)
	r.base, r.during = append(r.base, base...), append(r.during, during...)
	return rest, err
}

// results are the phase's records.
func (r *snapshotRun) results() []result.Result {
	return append([]result.Result{
		{Bench: "snap_ms", Value: float64(r.took.Microseconds()) / 1e3, Unit: "ms"},
		{Bench: "snap_MBps", Value: float64(r.bytes) / 1e6 / r.took.Seconds(), Unit: "MB/s"},
	}, result.PauseResults("snap_put", r.base, r.during)...)
}
