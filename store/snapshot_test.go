package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
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

// A rank that has failed makes Snapshot fail at the survivors with an error
// wrapping ftrma.ErrProcFailed, within their context, leaving no manifest;
// their gates open again: the store goes on taking writes and reads.
func TestSnapshotWithAFailedRank(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	w, st := openAll(t, 4, smallOptions(2))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	w.Crash(3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() { _, errs[r] = st[r].Snapshot(ctx, dir) })
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d: snapshot with rank 3 failed: %v, want ErrProcFailed", r, err)
		}
	}
	if _, _, err := newestSnapshot(dir, 64, 64); !errors.Is(err, errNoSnapshot) {
		t.Errorf("a complete snapshot after the failed one: %v", err)
	}
	for r := range 3 {
		if err := st[r].Put(ctx, fmt.Appendf(nil, "after/%d", r), []byte("x")); err != nil {
			t.Errorf("rank %d: put after the failed snapshot: %v", r, err)
		}
	}
	if v, err := st[1].Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Errorf("get after the failed snapshot: %q, %v", v, err)
	}
}
