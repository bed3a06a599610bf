package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/store"
)

// fakeStore is a store with one copy of each key, at a rank the test
// chooses, and the ranks' shared knowledge of failures: killing a rank loses
// the keys it held (Get returns store.ErrDataLost until they are put again).
type fakeStore struct {
	n    int
	home map[string]ftrma.Rank // where a key's copy goes; default: the next live rank after the key's hash

	mu     sync.Mutex // guards the fields below
	failed []ftrma.Rank
	vals   map[string]stored
	lost   map[string]bool
}

type stored struct {
	v  []byte
	at ftrma.Rank
}

func newFakeStore(n int, home map[string]ftrma.Rank) *fakeStore {
	return &fakeStore{n: n, home: home, vals: map[string]stored{}, lost: map[string]bool{}}
}

// kill makes r failed, and loses what it held.
func (st *fakeStore) kill(r ftrma.Rank) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.failed = append(st.failed, r)
	for k, s := range st.vals {
		if s.at == r {
			delete(st.vals, k)
			st.lost[k] = true
		}
	}
}

// done reports whether key holds a done checkpoint.
func (st *fakeStore) done(key string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	ck, err := decodeCheckpoint(st.vals[key].v)
	return err == nil && ck.done
}

// fakeRank is one rank's view of a fakeStore: a kv and a group.
type fakeRank struct {
	st *fakeStore
	me ftrma.Rank
}

func (f fakeRank) Rank() ftrma.Rank { return f.me }
func (f fakeRank) Size() int        { return f.st.n }

func (f fakeRank) Failed() []ftrma.Rank {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	return slices.Clone(f.st.failed)
}

func (f fakeRank) Put(_ context.Context, key, value []byte) error {
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	at, ok := st.home[string(key)]
	if !ok {
		at = ftrma.Rank(len(key) % st.n)
	}
	for slices.Contains(st.failed, at) {
		at = (at + 1) % ftrma.Rank(st.n)
	}
	st.vals[string(key)] = stored{v: slices.Clone(value), at: at}
	delete(st.lost, string(key))
	return nil
}

func (f fakeRank) Get(_ context.Context, key []byte) ([]byte, error) {
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.vals[string(key)]; ok {
		return slices.Clone(s.v), nil
	}
	if st.lost[string(key)] {
		return nil, store.ErrDataLost
	}
	return nil, store.ErrNotFound
}

// failureFree is the result of tasks tasks of the default trees.
func failureFree(t *testing.T, tasks int) uint64 {
	tr := testConfig(t, tasks).tree
	var sum uint64
	var stk []uint64
	for i := range tasks {
		var n uint64
		n, stk = tr.count(i, stk)
		sum += n
	}
	return sum
}

func testConfig(t *testing.T, tasks int) config {
	tr, err := newTree(300, 4, 0.2495, 1)
	if err != nil {
		t.Fatal(err)
	}
	return config{tasks: tasks, tree: tr, copies: 1, every: 0, poll: time.Millisecond, lostGrace: time.Minute, crash: map[ftrma.Rank]float64{}}
}

// runWorld runs a worker per rank of st in goroutines, except the ranks in
// absent, and returns them with their outputs when every one has returned
// or crashed (a crash calls beforeCrash, if not nil, then kills its rank in
// st and ends its goroutine).
func runWorld(t *testing.T, st *fakeStore, cfg config, beforeCrash func(ftrma.Rank), absent ...ftrma.Rank) (ws []*worker, outs, logs []*bytes.Buffer, errs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, errs = make([]*worker, st.n), make([]error, st.n)
	var wg sync.WaitGroup
	for r := range ftrma.Rank(st.n) {
		out, log := new(bytes.Buffer), new(bytes.Buffer)
		outs, logs = append(outs, out), append(logs, log)
		w := newWorker(fakeRank{st, r}, fakeRank{st, r}, cfg, out, log)
		w.crash = func() {
			if beforeCrash != nil {
				beforeCrash(r)
			}
			st.kill(r)
			runtime.Goexit()
		}
		ws[r] = w
		if slices.Contains(absent, r) {
			continue
		}
		wg.Go(func() { errs[r] = w.run(ctx) })
	}
	wg.Wait()
	return ws, outs, logs, errs
}

// A checkpoint lost with the rank that held its only copy: the adopter
// recomputes that list from its start, says so on stderr, and every
// survivor ends with the failure-free result. Rank 2 dies holding its own
// checkpoint (lost: rank 3 recomputes list 2); rank 5 dies holding rank 0's,
// once rank 0's list is done (rank 0 saves it again: nobody recomputes it),
// while rank 6 holds rank 5's (adopted where it was).
func TestLostCheckpointRecomputed(t *testing.T) {
	const n, tasks = 8, 64
	want := failureFree(t, tasks)
	cfg := testConfig(t, tasks)
	cfg.crash = map[ftrma.Rank]float64{2: 0.25, 5: 0.5}
	cfg.lostGrace = 3 * time.Second // far above the time rank 0 takes to save its checkpoint again
	st := newFakeStore(n, map[string]ftrma.Rank{"ckpt/0": 5, "ckpt/1": 1, "ckpt/2": 2, "ckpt/3": 3, "ckpt/4": 4, "ckpt/5": 6, "ckpt/6": 6, "ckpt/7": 7})
	ws, outs, logs, errs := runWorld(t, st, cfg, func(r ftrma.Rank) {
		for r == 5 && !st.done("ckpt/0") {
			time.Sleep(time.Millisecond)
		}
	})
	var allLogs strings.Builder
	for r, w := range ws {
		allLogs.WriteString(logs[r].String())
		if r == 2 || r == 5 {
			continue
		}
		if errs[r] != nil {
			t.Errorf("rank %d: %v", r, errs[r])
			continue
		}
		var sum uint64
		for _, ck := range w.final {
			sum += ck.sum
		}
		if sum != want {
			t.Errorf("rank %d's result: %d, want the failure-free %d", r, sum, want)
		}
	}
	if got := strings.Count(allLogs.String(), "recomputing"); got != 1 || !strings.Contains(logs[3].String(), "rank 3 adopts rank 2: its checkpoint is lost (every copy may be gone): recomputing rank 2's list from its start\n") {
		t.Errorf("want one recomputation, list 2's by rank 3; stderr:\n%s", allLogs.String())
	}
	if !strings.Contains(outs[6].String(), "rank 6 adopts rank 5 at task ") {
		t.Errorf("rank 6 did not adopt rank 5 from its checkpoint:\n%s", outs[6].String())
	}
	if t.Failed() {
		for r := range ws {
			t.Logf("rank %d:\n%s%s", r, outs[r].String(), logs[r].String())
		}
	}
}

// A rank waiting for a list whose checkpoint is lost while its runner lives
// (say, a runner done with everything that no longer saves) waits lostGrace
// for the runner to save it again, then recomputes it itself.
func TestLostCheckpointOfLiveRunner(t *testing.T) {
	const n, tasks = 2, 6
	want := failureFree(t, tasks)
	cfg := testConfig(t, tasks)
	cfg.lostGrace = 50 * time.Millisecond
	st := newFakeStore(n, nil)
	st.lost["ckpt/0"] = true // rank 0 lives but does not run
	start := time.Now()
	ws, _, logs, errs := runWorld(t, st, cfg, nil, 0)
	if errs[1] != nil {
		t.Fatal(errs[1])
	}
	if d := time.Since(start); d < cfg.lostGrace {
		t.Errorf("done after %v, before the grace period of %v", d, cfg.lostGrace)
	}
	var sum uint64
	for _, ck := range ws[1].final {
		sum += ck.sum
	}
	if sum != want {
		t.Errorf("result %d, want %d", sum, want)
	}
	if line := fmt.Sprintf("rank 1: rank 0's checkpoint is lost (every copy may be gone) and was not written again within %v: recomputing rank 0's list from its start\n", cfg.lostGrace); logs[1].String() != line {
		t.Errorf("stderr %q, want %q", logs[1].String(), line)
	}
}
