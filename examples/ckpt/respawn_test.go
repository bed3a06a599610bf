package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
)

// fakeRespawn replaces the failed ranks of a fakeStore's world, as Replace
// and Grow do for the real one: the first survivor to call replace starts a
// replacement worker for each failed rank, with the same rank number, and
// the world has no failed rank afterwards. With spares 0 it fails as
// Replace does when none is left.
type fakeRespawn struct {
	t      *testing.T
	st     *fakeStore
	cfg    config
	spares int
	wg     *sync.WaitGroup

	mu      sync.Mutex
	workers map[ftrma.Rank][]*worker // by rank, first process first
	outs    []*bytes.Buffer
	errs    []error
}

func (fr *fakeRespawn) replacer(me ftrma.Rank) func(context.Context) (group, error) {
	return func(ctx context.Context) (group, error) {
		st := fr.st
		st.mu.Lock()
		failed := st.failed
		if len(failed) > fr.spares {
			st.mu.Unlock()
			return nil, fmt.Errorf("%w: %d of %d spares started", comm.ErrReplace, fr.spares, len(failed))
		}
		fr.spares -= len(failed)
		st.failed = nil
		st.mu.Unlock()
		for _, f := range failed {
			fr.start(ctx, f, true)
		}
		return fakeRank{st, me}, nil
	}
}

// start runs a worker for rank r in a goroutine: a replacement resumes r's
// list. A crash kills its rank in the store and ends the goroutine.
func (fr *fakeRespawn) start(ctx context.Context, r ftrma.Rank, replacement bool) {
	out := new(bytes.Buffer)
	w := newWorker(fakeRank{fr.st, r}, fakeRank{fr.st, r}, fr.cfg, out, out)
	w.crash = func() {
		fr.st.kill(r)
		runtime.Goexit()
	}
	if fr.cfg.respawn {
		w.replace = fr.replacer(r)
	}
	fr.mu.Lock()
	fr.workers[r] = append(fr.workers[r], w)
	fr.outs = append(fr.outs, out)
	i := len(fr.errs)
	fr.errs = append(fr.errs, nil)
	fr.mu.Unlock()
	fr.wg.Go(func() {
		var err error
		if replacement {
			err = w.resume(ctx, fmt.Sprintf("replaces world rank %d", r))
		}
		if err == nil {
			err = w.run(ctx)
		}
		fr.mu.Lock()
		fr.errs[i] = err
		fr.mu.Unlock()
	})
}

func runRespawn(t *testing.T, cfg config, n, spares int) *fakeRespawn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fr := &fakeRespawn{t: t, st: newFakeStore(n, nil), cfg: cfg, spares: spares, wg: new(sync.WaitGroup), workers: map[ftrma.Rank][]*worker{}}
	for r := range ftrma.Rank(n) {
		fr.start(ctx, r, false)
	}
	fr.wg.Wait()
	for _, err := range fr.errs {
		if err != nil {
			t.Error(err)
		}
	}
	return fr
}

func (fr *fakeRespawn) output() string {
	var b strings.Builder
	for _, o := range fr.outs {
		b.WriteString(o.String())
	}
	return b.String()
}

// With -respawn the replacements of crashed ranks 2 and 5 resume their own
// lists from the checkpoints (held at rank 6, which lives): nobody adopts,
// and every rank's last process ends with the failure-free result.
func TestRespawnResumesLists(t *testing.T) {
	const n, tasks = 8, 64
	want := failureFree(t, tasks)
	cfg := testConfig(t, tasks)
	cfg.respawn = true
	cfg.crash = map[ftrma.Rank]float64{2: 0.25, 5: 0.5}
	fr := runRespawn(t, cfg, n, 2)
	out := fr.output()
	for r := range ftrma.Rank(n) {
		ws := fr.workers[r]
		want := 1
		if r == 2 || r == 5 {
			want = 2
		}
		if len(ws) != want {
			t.Fatalf("rank %d had %d processes, want %d:\n%s", r, len(ws), want, out)
		}
	}
	for r := range ftrma.Rank(n) {
		last := fr.workers[r][len(fr.workers[r])-1]
		var sum uint64
		for _, ck := range last.final {
			sum += ck.sum
		}
		if sum != want {
			t.Errorf("rank %d's result: %d, want the failure-free %d", r, sum, want)
		}
	}
	for _, r := range []ftrma.Rank{2, 5} {
		line := fmt.Sprintf("rank %d replaces world rank %d: resuming its list at task ", r, r)
		if !strings.Contains(out, line) {
			t.Errorf("no line %q", line)
		}
		if l := fr.workers[r][1].running(r); l == nil || l.ran == 0 || l.ran >= fr.workers[r][1].length(r) {
			t.Errorf("rank %d's replacement did not resume its list part-way: %+v", r, l)
		}
	}
	if strings.Contains(out, "adopts") {
		t.Errorf("a rank adopted a list under -respawn:\n%s", out)
	}
	if t.Failed() {
		t.Log(out)
	}
}

// With no spare left the ranks adopt the failed ranks' lists, as without
// -respawn, and still end with the failure-free result.
func TestRespawnWithoutSparesAdopts(t *testing.T) {
	const n, tasks = 8, 64
	want := failureFree(t, tasks)
	cfg := testConfig(t, tasks)
	cfg.respawn = true
	cfg.crash = map[ftrma.Rank]float64{2: 0.25}
	fr := runRespawn(t, cfg, n, 0)
	out := fr.output()
	if len(fr.workers[2]) != 1 {
		t.Fatalf("rank 2 was replaced with no spare")
	}
	for r, ws := range fr.workers {
		if r == 2 {
			continue
		}
		var sum uint64
		for _, ck := range ws[0].final {
			sum += ck.sum
		}
		if sum != want {
			t.Errorf("rank %d's result: %d, want the failure-free %d", r, sum, want)
		}
	}
	if !strings.Contains(out, "rank 3 adopts rank 2 at task ") || !strings.Contains(out, "spares started: adopting the failed ranks' lists instead") {
		t.Errorf("rank 3 did not adopt rank 2 after the replace failed:\n%s", out)
	}
}
