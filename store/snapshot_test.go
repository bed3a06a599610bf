package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/internal/check/kvcheck"
)

// snapshotAll runs Snapshot at every rank of st (world w) into dir.
func snapshotAll(t *testing.T, ctx context.Context, st []*Store, dir string) SnapshotInfo {
	t.Helper()
	infos := make([]SnapshotInfo, len(st))
	errs := make([]error, len(st))
	var wg sync.WaitGroup
	for r, s := range st {
		wg.Go(func() { infos[r], errs[r] = s.Snapshot(ctx, dir) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: snapshot: %v", r, err)
		}
		if infos[r] != infos[0] {
			t.Fatalf("rank %d: snapshot %+v, rank 0 %+v", r, infos[r], infos[0])
		}
	}
	return infos[0]
}

// A store of 4 ranks snapshotted, then restored by a job of 3 ranks (a new
// world: the old one is gone): every key with its value, the deleted one
// absent; a second snapshot has a larger cut and is the one restored.
func TestSnapshotRestore(t *testing.T) { bothWorlds(t, testSnapshotRestore) }

func testSnapshotRestore(t *testing.T, newWorld worldFunc) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	_, st := openAllOn(t, newWorld, 4, smallOptions(2))
	for i := range 60 {
		if err := st[i%4].Put(ctx, fmt.Appendf(nil, "key/%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st[1].Delete(ctx, []byte("key/7")); err != nil {
		t.Fatal(err)
	}
	first := snapshotAll(t, ctx, st, dir)
	if first.Keys != 59 {
		t.Fatalf("first snapshot has %d keys, want 59", first.Keys)
	}
	if err := st[2].Put(ctx, []byte("key/0"), []byte("after the first")); err != nil {
		t.Fatal(err)
	}
	second := snapshotAll(t, ctx, st, dir)
	if second.Cut <= first.Cut || second.Keys != 59 {
		t.Fatalf("second snapshot %+v after %+v", second, first)
	}

	w := newWorld(t, 3)
	restored := make([]*Store, 3)
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, info, err := Restore(ctx, c, dir, smallOptions(2))
		if err == nil && info.Cut != second.Cut {
			err = fmt.Errorf("restored cut %d, want the newest, %d", info.Cut, second.Cut)
		}
		restored[c.Rank()] = s
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: restore: %v", r, err)
		}
	}
	defer func() {
		for _, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error { return restored[c.Rank()].Close(ctx) }) {
			if err != nil {
				t.Error(err)
			}
		}
	}()
	for i := range 60 {
		v, err := restored[i%3].Get(ctx, fmt.Appendf(nil, "key/%d", i))
		want := fmt.Sprintf("v%d", i)
		switch {
		case i == 7:
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("deleted key/7 restored: %q, %v", v, err)
			}
			continue
		case i == 0:
			want = "after the first"
		}
		if err != nil || string(v) != want {
			t.Errorf("key/%d restored as %q, %v; want %q", i, v, err, want)
		}
	}
}

// The cut is one moment of the whole job: a writer puts a/i then b/i for
// i = 1, 2, ... (b/i acknowledged only after a/i) while every rank
// snapshots; in the snapshot b is a or one behind it — never ahead, never
// two behind. A snapshot of each rank's keys taken at different moments
// would show b ahead of a or far behind it.
func TestSnapshotIsACut(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	_, st := openAll(t, 4, smallOptions(2))
	var stop atomic.Bool
	var wg sync.WaitGroup
	putErrs := make([]error, 3)
	for p := range 3 { // three pairs, from three ranks
		a, b := fmt.Appendf(nil, "a/%d", p), fmt.Appendf(nil, "b/%d", p)
		wg.Go(func() {
			for i := 1; !stop.Load(); i++ {
				v := strconv.AppendInt(nil, int64(i), 10)
				if err := st[p].Put(ctx, a, v); err != nil {
					putErrs[p] = err
					return
				}
				if err := st[p].Put(ctx, b, v); err != nil {
					putErrs[p] = err
					return
				}
			}
		})
	}
	for range 5 {
		time.Sleep(5 * time.Millisecond)
		info := snapshotAll(t, ctx, st, dir)
		ls, err := loadSnapshot(info.Dir, 1024, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]int{}
		for _, d := range ls.data {
			for _, r := range d.records {
				n, _ := strconv.Atoi(string(r.value))
				vals[string(r.key)] = n
			}
		}
		for p := range 3 {
			a, b := vals[fmt.Sprintf("a/%d", p)], vals[fmt.Sprintf("b/%d", p)]
			if b > a || a > b+1 {
				t.Errorf("cut %d: pair %d has a=%d, b=%d: not one moment", info.Cut, p, a, b)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	for p, err := range putErrs {
		if err != nil {
			t.Errorf("writer %d: %v", p, err) // a snapshot must hold writers back, not fail them
		}
	}
}

// Restore without a complete snapshot fails at every rank with
// ErrNoSnapshot; a snapshot whose manifest is missing is skipped for the
// complete one before it.
func TestRestoreRefusesIncomplete(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	w := commtest.New(t, 4)
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		_, _, err := Restore(ctx, c, dir, smallOptions(2))
		if !errors.Is(err, ErrNoSnapshot) {
			return fmt.Errorf("restore from an empty directory: %v, want ErrNoSnapshot", err)
		}
		return nil
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	_, st := openAll(t, 2, smallOptions(2))
	if err := st[0].Put(ctx, []byte("k"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	good := snapshotAll(t, ctx, st, dir)
	if err := st[0].Put(ctx, []byte("k"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	torn := snapshotAll(t, ctx, st, dir)
	os.Remove(filepath.Join(torn.Dir, snapManifestName)) // as if the job died before writing it
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, info, err := Restore(ctx, c, dir, smallOptions(2))
		if err != nil {
			return err
		}
		defer s.Close(ctx)
		if info.Cut != good.Cut || len(info.Skipped) != 1 {
			return fmt.Errorf("restored %+v, want cut %d with the torn one skipped", info, good.Cut)
		}
		if c.Rank() == 0 {
			if v, err := s.Get(ctx, []byte("k")); err != nil || string(v) != "old" {
				return fmt.Errorf("k restored as %q, %v; want old", v, err)
			}
		}
		return c.Barrier(ctx)
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A rank that failed before the snapshot is left out of it: the
// survivors' snapshot completes with every key (the live replicas hold the
// failed rank's), and a job of another size restores it.
func TestSnapshotWithAFailedRank(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	w, st := openAll(t, 4, smallOptions(2))
	want := putKeys(ctx, t, st, 40)
	w.Crash(3)
	info := snapshotAll(t, ctx, st[:3], dir)
	if info.Keys != len(want) {
		t.Errorf("snapshot over the survivors has %d keys, want %d", info.Keys, len(want))
	}
	checkRestored(t, ctx, dir, 2, info.Cut, want)
	for r := range 3 {
		if err := st[r].Put(ctx, fmt.Appendf(nil, "after/%d", r), []byte("x")); err != nil {
			t.Errorf("rank %d: put after the snapshot: %v", r, err)
		}
	}
}

// A rank that fails during the snapshot — right after the cut, after
// copying its keys, after writing its file, after writing the manifest —
// leaves the survivors with
// a complete snapshot holding every key, all of them returning the same
// cut, the rank's keys from their other replica.
func TestSnapshotRankFailsDuring(t *testing.T) {
	for _, at := range []string{"cut", "copied", "file", "manifest"} {
		t.Run(at, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			dir := t.TempDir()
			w, st := openAll(t, 4, smallOptions(2))
			want := putKeys(ctx, t, st, 40)
			const victim = 1
			var once sync.Once
			testHookSnapshot.set(t, func(s *Store, point string) {
				if s == st[victim] && point == at {
					once.Do(func() { w.Crash(victim) })
				}
			})
			vctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				st[victim].Snapshot(vctx, dir) // crashed midway: its result is nobody's
			}()
			live := []*Store{st[0], st[2], st[3]}
			info := snapshotAll(t, ctx, live, dir)
			cancel()
			<-done
			if info.Keys != len(want) {
				t.Errorf("snapshot has %d keys, want %d", info.Keys, len(want))
			}
			checkRestored(t, ctx, dir, 3, info.Cut, want)
		})
	}
}

// checkRestored restores the snapshot under dir in a new world of n ranks
// and checks that it is the one with cut cut and holds exactly want.
func checkRestored(t *testing.T, ctx context.Context, dir string, n int, cut uint64, want map[string]string) {
	t.Helper()
	ls, _, err := newestSnapshot(dir, 1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ls.data {
		for _, r := range d.records {
			if _, dup := got[string(r.key)]; dup {
				t.Errorf("%s is in two files", r.key)
			}
			got[string(r.key)] = string(r.value)
		}
	}
	if ls.manifest.cut != cut || !maps.Equal(got, want) {
		t.Fatalf("newest snapshot: cut %d with %d keys (%v), want cut %d with %d keys", ls.manifest.cut, len(got), got, cut, len(want))
	}
	w := commtest.New(t, n)
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, info, err := Restore(ctx, c, dir, smallOptions(2))
		if err != nil {
			return err
		}
		defer s.Close(ctx)
		if info.Cut != cut {
			return fmt.Errorf("restored cut %d, want %d", info.Cut, cut)
		}
		for k, v := range want {
			if got, err := s.Get(ctx, []byte(k)); err != nil || string(got) != v {
				return fmt.Errorf("%s restored as %q, %v; want %q", k, got, err, v)
			}
		}
		return c.Barrier(ctx)
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Snapshots under concurrent writers, checked against the history: each
// key's value in a snapshot is read as if by a get that began when the
// first rank called Snapshot and ended when the last returned, and the
// history with those reads is linearizable (porcupine, kvcheck's model).
// TestSnapshotIsACut checks the other half: that every key's read is of one
// moment.
func TestSnapshotLinearizable(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	const keys = 6
	_, st := openAll(t, 4, smallOptions(2))
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var ops []porcupine.Operation
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r, s := range st {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 28))
			for i := 0; !stop.Load(); i++ {
				k := rng.IntN(keys)
				in := kvcheck.Input{Kind: "put", Key: k, Value: fmt.Sprintf("%d.%d", r, i)}
				switch rng.IntN(4) {
				case 0:
					in = kvcheck.Input{Kind: "del", Key: k}
				case 1:
					in = kvcheck.Input{Kind: "get", Key: k}
				}
				op := porcupine.Operation{ClientId: r, Input: in, Call: now()}
				out, err := callKV(ctx, s, fmt.Appendf(nil, "lin/%d", k), in)
				op.Return, op.Output = now(), out
				if err != nil {
					t.Errorf("rank %d: %s: %v", r, in.Kind, err) // nothing fails here
					return
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}
		})
	}
	for n := range 4 {
		time.Sleep(3 * time.Millisecond)
		call := now()
		info := snapshotAll(t, ctx, st, dir)
		ret := now()
		ls, err := loadSnapshot(info.Dir, 1024, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range ls.data {
			for _, r := range d.records {
				got[string(r.key)] = string(r.value)
			}
		}
		mu.Lock()
		for k := range keys {
			ops = append(ops, porcupine.Operation{ClientId: len(st) + n, Call: call, Return: ret,
				Input: kvcheck.Input{Kind: "get", Key: k}, Output: kvcheck.Output{Value: got[fmt.Sprintf("lin/%d", k)]}})
		}
		mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
	if len(ops) < 100 {
		t.Fatalf("%d operations recorded: too few to check anything", len(ops))
	}
	checkLin(t, ops, 0)
}

// Two snapshots racing: every rank calls Snapshot from two goroutines at
// once while a writer puts. Both complete, with two cuts, and the newer is
// the one restored. Ranks that name different directories get ErrInvalid,
// all of them, and no snapshot.
func TestSnapshotsRacing(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	_, st := openAll(t, 4, smallOptions(2))
	want := putKeys(ctx, t, st, 20)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if err := st[0].Put(ctx, []byte("moving"), strconv.AppendInt(nil, int64(i), 10)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	infos := make([]SnapshotInfo, 2*len(st))
	errs := make([]error, 2*len(st))
	var snaps sync.WaitGroup
	for i := range infos {
		snaps.Go(func() { infos[i], errs[i] = st[i/2].Snapshot(ctx, dir) })
	}
	snaps.Wait()
	stop.Store(true)
	wg.Wait()
	cuts := map[uint64]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d, call %d: %v", i/2, i%2, err)
		}
		cuts[infos[i].Cut]++
	}
	if len(cuts) != 2 {
		t.Fatalf("cuts %v: want two, each returned at every rank", cuts)
	}
	for cut, n := range cuts {
		if n != len(st) {
			t.Errorf("cut %d returned at %d ranks, want %d", cut, n, len(st))
		}
		if _, err := loadSnapshot(filepath.Join(dir, snapDirName(cut)), 1024, 1<<20); err != nil {
			t.Errorf("cut %d: %v", cut, err)
		}
	}
	ls, _, err := newestSnapshot(dir, 1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if ls.manifest.cut != max(infos[0].Cut, infos[1].Cut) {
		t.Errorf("newest snapshot %d, want the larger of %v", ls.manifest.cut, cuts)
	}
	for _, d := range ls.data {
		for _, r := range d.records {
			if v, ok := want[string(r.key)]; ok && v != string(r.value) {
				t.Errorf("%s = %q in the snapshot, want %q", r.key, r.value, v)
			}
		}
	}

	other := t.TempDir()
	for r := range st {
		errs[r] = nil
	}
	for r, s := range st {
		snaps.Go(func() {
			d := dir
			if r == 2 {
				d = other
			}
			_, errs[r] = s.Snapshot(ctx, d)
		})
	}
	snaps.Wait()
	for r, err := range errs[:len(st)] {
		if !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("rank %d: snapshot with rank 2 naming another directory: %v, want ErrInvalid", r, err)
		}
	}
	if n, _ := os.ReadDir(other); len(n) != 0 {
		t.Errorf("%d entries written under the other directory", len(n))
	}
}

// A snapshot after transactions: the keys a transaction wrote (records that
// name it, read the long way) are in it with their values, the key it
// deleted is not, and the store's own keys (the transaction decisions) are
// left out: a restore into 2 ranks serves exactly the user's keys.
func TestSnapshotAfterTransactions(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	_, st := openAll(t, 4, smallOptions(2))
	want := putKeys(ctx, t, st, 12)
	for i, s := range st[:2] {
		tx := s.Begin()
		k := fmt.Sprintf("tx/%d", i)
		if err := tx.Put([]byte(k), []byte("by a transaction")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Delete(fmt.Appendf(nil, "k%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want[k] = "by a transaction"
		delete(want, fmt.Sprintf("k%d", i))
	}
	info := snapshotAll(t, ctx, st, dir)
	if info.Keys != len(want) {
		t.Errorf("snapshot of %d keys, want %d", info.Keys, len(want))
	}
	checkRestored(t, ctx, dir, 2, info.Cut, want)
}

// The records of the cut are read after the gates open, while writers go
// on: a writer that overwrites every key many times before a rank reads
// them (so that the chunks holding the cut's records empty out, which
// would hand them back to writers) changes nothing in the snapshot, which
// holds the values of the cut. It fails when the heap is not pinned.
func TestSnapshotReadsAfterTheCut(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	_, st := openAll(t, 4, smallOptions(2))
	want := map[string]string{}
	old := make([]byte, 1000)
	for i := range 40 {
		k := fmt.Sprintf("key/%d", i)
		copy(old, fmt.Sprintf("old %d", i))
		if err := st[i%4].Put(ctx, []byte(k), old); err != nil {
			t.Fatal(err)
		}
		want[k] = string(old)
	}
	var once sync.Once
	var churnErr error
	testHookSnapshot.set(t, func(s *Store, at string) {
		if s != st[0] || at != "read" {
			return
		}
		once.Do(func() {
			v := make([]byte, 1000)
			for round := range 30 {
				for i := range 40 {
					copy(v, fmt.Sprintf("round %d of %d", round, i))
					if err := st[0].Put(ctx, fmt.Appendf(nil, "key/%d", i), v); err != nil {
						churnErr = err
						return
					}
				}
				time.Sleep(time.Millisecond) // the housekeeping's turn
			}
		})
	})
	info := snapshotAll(t, ctx, st, dir)
	if churnErr != nil {
		t.Fatal(churnErr)
	}
	checkRestored(t, ctx, dir, 2, info.Cut, want)
}

// A key whose every copy is gone names the last snapshot: Get's error wraps
// ErrDataLost and is a DataLostError saying whether that snapshot holds the
// key — a key put before it does, one put after it does not.
func TestDataLostNamesSnapshot(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	world, st := openAll(t, 4, smallOptions(2))
	// Two keys whose copies are both on ranks 2 and 3.
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("key/%d", i)
		if err := st[0].Put(ctx, []byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
		reps, err := st[0].Locate(ctx, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) == 2 && reps[0].Rank >= 2 && reps[1].Rank >= 2 {
			keys = append(keys, k)
			if len(keys) == 1 {
				snapshotAll(t, ctx, st, dir) // holds the first, not the second
			}
		}
	}
	info, _ := loadSnapshot(mustNewest(t, dir), 1024, 1<<20)
	world.Crash(2)
	world.Crash(3)
	for _, r := range []ftrma.Rank{2, 3} {
		for !st[0].current().c.ProcFailed(r) {
			if ctx.Err() != nil {
				t.Fatalf("rank 0 never learned of rank %d's crash", r)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, k := range keys {
		_, err := st[0].Get(ctx, []byte(k))
		var dl *DataLostError
		if !errors.Is(err, ErrDataLost) || !errors.As(err, &dl) {
			t.Fatalf("get of %s with both copies gone: %v, want a DataLostError", k, err)
		}
		if dl.Snapshot != info.dir || dl.Cut != info.manifest.cut || dl.InSnapshot != (i == 0) || string(dl.Key) != k {
			t.Errorf("get of %s: %+v; want snapshot %s, in it: %v", k, dl, info.dir, i == 0)
		}
		t.Log(err)
	}
}

// mustNewest is the directory of the newest complete snapshot under dir.
func mustNewest(t *testing.T, dir string) string {
	t.Helper()
	ls, _, err := newestSnapshot(dir, 1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return ls.dir
}

// PruneSnapshots keeps the newest complete snapshots and removes what is
// older (incomplete ones too), never a newer incomplete one (a snapshot
// under way), and nothing when fewer than keep are complete.
func TestPruneSnapshots(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	_, st := openAll(t, 2, smallOptions(2))
	var cuts []uint64
	for range 4 {
		cuts = append(cuts, snapshotAll(t, ctx, st, dir).Cut)
	}
	os.Remove(filepath.Join(dir, snapDirName(cuts[1]), snapManifestName)) // incomplete, old
	underWay := filepath.Join(dir, snapDirName(cuts[3]+1))
	os.Mkdir(underWay, 0o755)
	if removed, err := PruneSnapshots(ctx, dir, 5); err != nil || len(removed) != 0 {
		t.Errorf("keep 5 of 3 complete: removed %v, %v", removed, err)
	}
	removed, err := PruneSnapshots(ctx, dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, snapDirName(cuts[0])), filepath.Join(dir, snapDirName(cuts[1]))}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	left, _ := os.ReadDir(dir)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{snapDirName(cuts[2]), snapDirName(cuts[3]), filepath.Base(underWay)}) {
		t.Errorf("left %v", names)
	}
	if _, err := PruneSnapshots(ctx, dir, 0); err == nil {
		t.Error("keep 0 accepted")
	}
}

// Snapshot while a Grow is under way at this rank is
// refused at once, before any communication (the other ranks call nothing
// here: a Snapshot that went on would wait for them until ctx ends).
func TestSnapshotRefused(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 2, smallOptions(2))
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st[0].growing.Store(true)
	_, err := st[0].Snapshot(short, t.TempDir())
	st[0].growing.Store(false)
	if !errors.Is(err, ftrma.ErrInvalid) || short.Err() != nil {
		t.Errorf("snapshot during a Grow: %v, want ErrInvalid at once", err)
	}
}
