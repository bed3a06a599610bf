package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma/comm/commtest"
)

// waitWhole waits until every key has Copies complete replicas agreeing on
// one version, at the placement the survivors compute.
func waitWhole(ctx context.Context, t *testing.T, s *Store, keys []string) {
	t.Helper()
	for _, k := range keys {
		for {
			reps, err := s.Locate(ctx, []byte(k))
			if err != nil {
				t.Fatalf("locate %s: %v", k, err)
			}
			whole := len(reps) == s.opt.Copies
			for _, p := range reps {
				whole = whole && p.Complete && p.Version == reps[0].Version && p.Version > 0 && !s.current().c.ProcFailed(p.Rank)
			}
			if whole {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never got %d whole replicas back: %+v", k, s.opt.Copies, reps)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Copies−1 simultaneous crashes lose no acknowledged put, and recovery
// restores Copies replicas of every key on the survivors.
func TestCrashesLoseNothing(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	world, st := openAll(t, 7, smallOptions(3))
	var keys []string
	want := map[string]string{}
	for r, s := range st {
		for i := range 15 {
			k := fmt.Sprintf("ckpt/%d/%d", r, i)
			v := fmt.Sprintf("value %d of rank %d", i, r)
			if err := s.Put(ctx, []byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
			want[k] = v
		}
	}
	world.Net.Crash(2)
	world.Net.Crash(5)
	alive := []*Store{st[0], st[1], st[3], st[4], st[6]}
	for _, s := range alive {
		for s.current().c.ProcFailed(2) == false || s.current().c.ProcFailed(5) == false {
			time.Sleep(time.Millisecond)
		}
	}
	for i, k := range keys {
		v, err := alive[i%len(alive)].Get(ctx, []byte(k))
		if err != nil || string(v) != want[k] {
			t.Fatalf("%s after the crashes: %q, %v; want %q", k, v, err, want[k])
		}
	}
	waitWhole(ctx, t, st[0], keys)
	// The survivors keep writing, and the data stays whole.
	for i, k := range keys[:20] {
		if err := alive[i%len(alive)].Put(ctx, []byte(k), []byte("after")); err != nil {
			t.Fatal(err)
		}
	}
	waitWhole(ctx, t, st[6], keys)
	var repairs uint64
	for _, s := range alive {
		repairs += s.Stats().Repairs
	}
	if repairs == 0 {
		t.Fatal("no rank repaired anything")
	}
}

// A key whose every copy was on crashed ranks reports ErrDataLost, not
// ErrNotFound.
func TestDataLost(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 4, smallOptions(2))
	if err := st[0].Put(ctx, []byte("precious"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	reps, _ := st[0].Locate(ctx, []byte("precious"))
	// A reader that holds no copy (one that does would be crashed below
	// and never learn of the others' failure).
	reader := st[slices.IndexFunc(st, func(s *Store) bool {
		return !slices.ContainsFunc(reps, func(p Replica) bool { return p.Rank == s.me })
	})]
	for _, p := range reps {
		world.Net.Crash(p.Rank)
	}
	for _, p := range reps {
		for !reader.current().c.ProcFailed(p.Rank) {
			if ctx.Err() != nil {
				t.Fatalf("rank %d never learned of rank %d's crash", reader.me, p.Rank)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := reader.Get(ctx, []byte("precious")); !errors.Is(err, ErrDataLost) {
		t.Fatalf("get with both copies gone: %v", err)
	}
}

// A writer crashed in the middle of a put, after one replica has the new
// value: every reader gets the old value or the new one, all the same one,
// never a mix, and the replicas agree afterwards.
func TestWriterCrashMidPut(t *testing.T) {
	for _, at := range []int{1, 2} {
		t.Run(fmt.Sprintf("after%d", at), func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			world, st := openAll(t, 5, smallOptions(3))
			key := []byte("task/17")
			old, neu := bytes.Repeat([]byte("o"), 5000), bytes.Repeat([]byte("n"), 5000)
			if err := st[1].Put(ctx, key, old); err != nil {
				t.Fatal(err)
			}
			reps, _ := st[1].Locate(ctx, key)
			writer := st[slices.IndexFunc(st, func(s *Store) bool {
				return !slices.ContainsFunc(reps, func(p Replica) bool { return p.Rank == s.me })
			})]
			testHookPublish.set(t, func(s *Store, reps []*replica, i int) {
				if s == writer && i == at {
					for _, p := range reps[:i] {
						s.current().w.Flush(ctx, p.r)
					}
					world.Net.Crash(s.me)
				}
			})
			if err := writer.Put(ctx, key, neu); err == nil {
				t.Fatal("put by a crashed writer succeeded")
			}
			testHookPublish.clear()
			var first []byte
			for _, s := range st {
				if s == writer {
					continue
				}
				for !s.current().c.ProcFailed(writer.me) {
					time.Sleep(time.Millisecond)
				}
				v, err := s.Get(ctx, key)
				if err != nil {
					t.Fatalf("rank %d: %v", s.me, err)
				}
				if !bytes.Equal(v, old) && !bytes.Equal(v, neu) {
					t.Fatalf("rank %d read a mixed value", s.me)
				}
				if first == nil {
					first = v
				} else if !bytes.Equal(v, first) {
					t.Fatalf("rank %d read %c…, an earlier reader %c…", s.me, v[0], first[0])
				}
			}
			waitWhole(ctx, t, st[(int(writer.me)+1)%len(st)], []string{string(key)})
		})
	}
}

// A writer crashed during a transaction's commit: before the commit point
// nothing is visible, after it everything is.
func TestWriterCrashMidCommit(t *testing.T) {
	for _, c := range []struct {
		stage   string
		visible bool
	}{{"pending", false}, {"decided", true}, {"published-one", true}} {
		t.Run(c.stage, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			world, st := openAll(t, 5, smallOptions(3))
			writer := st[3]
			keys := []string{"a", "b", "c", "d", "e", "f"}
			for _, k := range append(keys, "gone") {
				if err := writer.Put(ctx, []byte(k), []byte("old "+k)); err != nil {
					t.Fatal(err)
				}
			}
			testHookCommit.set(t, func(s *Store, stage string) {
				if s == writer && stage == c.stage {
					world.Net.Crash(s.me)
				}
			})
			tx := writer.Begin()
			for _, k := range keys {
				tx.Put([]byte(k), []byte("new "+k))
			}
			tx.Delete([]byte("gone"))
			tx.Commit(ctx) // its result does not matter: the writer is dead
			testHookCommit.clear()
			for _, s := range st {
				if s == writer {
					continue
				}
				for !s.current().c.ProcFailed(writer.me) {
					time.Sleep(time.Millisecond)
				}
				for _, k := range keys {
					v, err := s.Get(ctx, []byte(k))
					want := "old " + k
					if c.visible {
						want = "new " + k
					}
					if err != nil || string(v) != want {
						t.Fatalf("rank %d, %s: %q %v; want %q", s.me, k, v, err, want)
					}
				}
				// The deletion is rolled forward as a deletion.
				v, err := s.Get(ctx, []byte("gone"))
				if c.visible && !errors.Is(err, ErrNotFound) || !c.visible && string(v) != "old gone" {
					t.Fatalf("rank %d, the deleted key: %q %v (deletion visible: %v)", s.me, v, err, c.visible)
				}
			}
			waitWhole(ctx, t, st[0], keys)
		})
	}
}

// Localized recovery: after a crash only the ranks that shared keys with the
// crashed rank repair anything; the others do nothing.
func TestRecoveryIsLocal(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 8, smallOptions(2))
	// Rank 7 is kept apart from the victim: no key the victim holds has
	// rank 7 among its replicas, before or after the failure.
	const victim, apart = 2, 7
	var keys []string
	shared := make([]bool, 8)
	for i := 0; len(keys) < 40; i++ {
		k := fmt.Sprintf("k%d", i)
		reps := st[0].current().place.replicas(st[0].hash([]byte(k)), noneFailed)
		after := st[0].current().place.replicas(st[0].hash([]byte(k)), failedSet(victim))
		if slices.Contains(reps, victim) && (slices.Contains(reps, apart) || slices.Contains(after, apart)) {
			continue
		}
		if err := st[i%8].Put(ctx, []byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		if slices.Contains(reps, victim) {
			for _, r := range append(reps, after...) {
				shared[r] = true
			}
		}
	}
	// Let the writers' leases lapse, so that no rank holds a key's lock.
	time.Sleep(2 * leaseIdle)
	before := make([]Stats, 8)
	for r, s := range st {
		before[r] = s.Stats()
	}
	world.Net.Crash(victim)
	waitWhole(ctx, t, st[apart], keys)
	acted := 0
	for r, s := range st {
		if r == victim {
			continue
		}
		d := s.Stats().Repairs - before[r].Repairs
		c := s.Stats().RecoveryChecks - before[r].RecoveryChecks
		if !shared[r] && (d != 0 || c != 0) {
			t.Errorf("rank %d shared no key with rank %d but checked %d keys and repaired %d", r, victim, c, d)
		}
		if shared[r] {
			acted += int(d)
		}
	}
	if acted == 0 {
		t.Error("no rank that shared keys with the victim repaired anything")
	}
}

// A rank that leaves the job (closes its communicator) is not a replica any
// more: puts of keys it held go to the next ranks and succeed, and the keys
// keep Copies replicas on the ranks that remain.
func TestDepartedRankLeavesPlacement(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 4, smallOptions(2))
	const leaver = 3
	var keys []string
	for i := 0; len(keys) < 10; i++ {
		k := fmt.Sprintf("k%d", i)
		if slices.Contains(st[0].current().place.replicas(st[0].hash([]byte(k)), noneFailed), leaver) {
			if err := st[0].Put(ctx, []byte(k), []byte("before")); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
	}
	st[leaver].closed.Store(true)
	close(st[leaver].stop)
	<-st[leaver].done
	world.Comms[leaver].Close()
	for _, k := range keys {
		if err := st[1].Put(ctx, []byte(k), []byte("after")); err != nil {
			t.Fatalf("put %s after rank %d left: %v", k, leaver, err)
		}
		if v, err := st[2].Get(ctx, []byte(k)); err != nil || string(v) != "after" {
			t.Fatalf("get %s: %q %v", k, v, err)
		}
	}
	waitWhole(ctx, t, st[0], keys)
}

// A put whose replica fails in the middle of it writes again, but must not
// bring its value back over a later write or deletion. Rank A's put of x
// reaches two of the key's three replicas; the third fails; rank C reads
// x's new value; rank B then puts another value (or deletes the key) and
// returns; A's put goes on and returns. The key holds B's value (or none):
// x's was seen before B wrote. A deletion leaves no copy to compare
// versions with, so A's retry once took "no copy anywhere" for "my write
// landed nowhere" and wrote x again (DESIGN.md F20): a copy A wrote at a
// replica still live and gone since can only have been deleted.
func TestRetryKeepsLaterWrite(t *testing.T) {
	for _, later := range []string{"put", "delete"} {
		t.Run(later, func(t *testing.T) { testRetryKeepsLater(t, later == "delete") })
	}
}

func testRetryKeepsLater(t *testing.T, del bool) {
	ctx := testCtx(t, time.Minute)
	w, st := openAllOn(t, commtest.New, 6, smallOptions(3))
	key := []byte("x")
	place := st[0].current().place.replicas(st[0].hash(key), noneFailed)
	var others []*Store // the ranks that are not replicas of the key
	for _, s := range st {
		if !slices.Contains(place, s.me) {
			others = append(others, s)
		}
	}
	a, b, c := others[0], others[1], others[2]
	if err := b.Put(ctx, key, []byte("old")); err != nil {
		t.Fatal(err)
	}
	a.contended(a.ident(key)) // no lease: A's put releases the locks it publishes
	var once sync.Once
	var seen, bErr error
	var seenVal []byte
	testHookPublish.set(t, func(s *Store, reps []*replica, i int) {
		if s != a || i != 2 {
			return
		}
		once.Do(func() {
			for _, p := range reps[:2] {
				s.current().w.Flush(ctx, p.r) // x is at two replicas
			}
			crashAndWait(ctx, t, w, st, reps[2].r)
			seenVal, seen = c.Get(ctx, key)
			if del {
				bErr = b.Delete(ctx, key)
			} else {
				bErr = b.Put(ctx, key, []byte("later"))
			}
		})
	})
	if err := a.Put(ctx, key, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if seenVal == nil && seen == nil {
		t.Fatal("A's put never reached its third replica: the test tests nothing")
	}
	if seen != nil || string(seenVal) != "new" {
		t.Fatalf("C's get during A's put: %q, %v; want \"new\"", seenVal, seen)
	}
	if bErr != nil {
		t.Fatalf("B's write: %v", bErr)
	}
	got, err := c.Get(ctx, key)
	switch {
	case del && !errors.Is(err, ErrNotFound):
		t.Fatalf("after both: %q, %v; want ErrNotFound (C saw \"new\" before B deleted the key)", got, err)
	case !del && (err != nil || string(got) != "later"):
		t.Fatalf("after both puts: %q, %v; want \"later\" (C saw \"new\" before B put \"later\")", got, err)
	}
}
