package store

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// A lease keeps the replica list of the put that took it, and is used only
// while that list is still the key's: a failed rank that is not among the
// key's replicas leaves the lease as it is (the placement is the same); a
// failed replica ends it before the next put tries to write there, and
// that put writes the key's new replica set, the rank that took the failed
// one's place included, before it returns.
func TestLeaseEndsWhenAReplicaFails(t *testing.T) {
	old := leaseIdle
	leaseIdle = time.Hour // only the failures end the lease
	t.Cleanup(func() { leaseIdle = old })
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 7, smallOptions(3))
	writer := st[0]
	key := keyAwayFrom(writer, writer.me)
	id := writer.ident(key)
	place := writer.current().place.replicas(id.h, noneFailed)
	var other ftrma.Rank // neither the writer nor a replica
	for r := range ftrma.Rank(len(st)) {
		if r != writer.me && !slices.Contains(place, r) {
			other = r
			break
		}
	}
	crash := func(r ftrma.Rank) {
		t.Helper()
		world.Crash(r)
		for !writer.current().c.ProcFailed(r) {
			if ctx.Err() != nil {
				t.Fatalf("the writer never learned of rank %d's failure", r)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var tr Trace
	put := func(i int) {
		t.Helper()
		if err := writer.Put(WithTrace(ctx, &tr), key, fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	put(0)
	put(1)
	if !leasedNow(writer, id) || hasPhase(&tr, "lock") {
		t.Fatalf("the writer's second put did not use a lease: the test does not test leases\n%s", traceString(&tr))
	}

	crash(other)
	put(2)
	if hasPhase(&tr, "lock") || !leasedNow(writer, id) {
		t.Errorf("rank %d, no replica of the key, failed, and the writer's put did not use its lease:\n%s", other, traceString(&tr))
	}

	victim := place[1]
	crash(victim)
	put(3)
	if !hasPhase(&tr, "lock") || hasPhase(&tr, "retry") {
		t.Errorf("replica %d failed, and the writer's put did not end its lease before writing (a retry: it wrote to the failed replica):\n%s", victim, traceString(&tr))
	}
	// Every replica of the key now, the new one included, holds the put
	// once it returned.
	reps, err := writer.Locate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, ver, err := writer.get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	whole := len(reps) == 3
	for _, p := range reps {
		whole = whole && p.Rank != victim && p.Version == ver && p.HasValue && p.Complete
	}
	if !whole {
		t.Fatalf("after replica %d failed, the put of version %d left the key's replicas %+v", victim, ver, reps)
	}
	if v, err := writer.Get(ctx, key); err != nil || string(v) != "v3" {
		t.Fatalf("got %q %v; want v3", v, err)
	}
}

// A lease is not used in a view other than the one it was taken in (Grow
// installs views; the key's replicas may differ there with none of the
// lease's failed: a replaced rank is live again), even one with the same
// placement: the put takes the locks again.
func TestLeaseEndsWithItsView(t *testing.T) {
	old := leaseIdle
	leaseIdle = time.Hour
	t.Cleanup(func() { leaseIdle = old })
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		s := st[0]
		key := []byte("k")
		id := s.ident(key)
		var tr Trace
		for i := range 2 {
			if err := s.Put(WithTrace(ctx, &tr), key, fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if !leasedNow(s, id) || hasPhase(&tr, "lock") {
			t.Fatalf("the second put did not use a lease: the test does not test leases\n%s", traceString(&tr))
		}
		// A view like the current one, as Grow would install after it.
		v := s.current()
		s.cur.Store(&view{w: v.w, c: v.c, tables: v.tables, hosts: v.hosts, place: v.place, fast: v.fast,
			arenas: v.arenas, keyArenas: v.keyArenas, old: v.old, replaced: v.replaced})
		if err := s.Put(WithTrace(ctx, &tr), key, []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if !hasPhase(&tr, "lock") {
			t.Errorf("a put in a new view used the lease of the view before:\n%s", traceString(&tr))
		}
		if v, err := st[1].Get(ctx, key); err != nil || string(v) != "v2" {
			t.Fatalf("got %q %v; want v2", v, err)
		}
	})
}

// leasedNow reports whether s holds a lease on id.
func leasedNow(s *Store, id ident) bool {
	s.leases.Lock()
	defer s.leases.Unlock()
	return s.leases.m[id] != nil
}

// keyAwayFrom returns a key none of whose replicas is rank r.
func keyAwayFrom(s *Store, r ftrma.Rank) []byte {
	for i := 0; ; i++ {
		k := fmt.Appendf(nil, "away%d", i)
		if !slices.Contains(s.current().place.replicas(s.hash(k), noneFailed), r) {
			return k
		}
	}
}

// A lease taken before a Grow that replaced one of its ranks is of an
// earlier epoch: its slot address at that rank is the old process's
// memory, which the new process does not have. Answering asks ends such a
// lease without reading its want words there (F29: the read failed with
// "access out of bounds", and the failure reached whatever else the
// process flushed toward the rank next — another operation's write). In
// the explorer such a lease outlived the Grow; here the lease the writer
// took is put back after the Grow, as it would be had its idle end not come
// yet.
func TestLeaseOfAnEarlierEpochEndsUnread(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openSpares(t, 3, 1, smallOptions(3))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	id := st[0].ident([]byte("k"))
	st[0].leases.Lock()
	l := st[0].leases.m[id]
	st[0].leases.Unlock()
	if l == nil || !slices.ContainsFunc(l.reps, func(lr leased) bool { return lr.r == 2 }) {
		t.Fatal("rank 0 holds no lease on the key it wrote, with rank 2 among its replicas")
	}
	respawnInBackground(ctx, t, w, st, 2)()
	if t.Failed() {
		t.FailNow()
	}

	st[0].leases.Lock()
	st[0].leases.m[id] = l
	st[0].leases.Unlock()
	o := st[0].begin()
	ask := atomic.LoadUint64(&o.table[hdrAsk])
	o.answerAsks(ctx, ask+1) // an ask came: the ask word moved since seen
	err := o.v().w.Flush(ctx, 2)
	o.end()
	kept := leasedNow(st[0], id)
	if err != nil {
		t.Errorf("a flush toward the replaced rank after answering asks: %v", err)
	}
	if kept {
		t.Error("a lease of the epoch before the Grow was kept after an ask: its want words were read at the replaced rank")
	}
}
