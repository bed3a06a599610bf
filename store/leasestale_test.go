package store

import (
	"testing"
	"time"
)

// An operation that gives back the locks it holds under this rank's lease
// ends the lease with them (DESIGN.md F42). A deletion in Grow's dropping
// view that held the key under its rank's lease and could not lock a
// leftover copy gave the locks back and kept the lease record; its retry,
// and the rank's next put, then wrote under the lease — with no
// compare-and-swap, at the version the lease remembered — over locks
// another rank had taken since, and an acknowledged write was lost
// (explorer seed 4080). Here an operation takes the key under the lease and
// gives it back as that deletion did; then ranks take turns to put: every
// read after a put returns that put's value under a version no value of the
// key had before (versions never repeat). With the lease left behind, this
// rank's next put wrote the version the other rank's put had just taken.
func TestLeaseEndsWithItsLocks(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 4, smallOptions(3))
	a, b, reader := st[0], st[1], st[2]
	k := []byte("k")
	var last uint64
	step := func(s *Store, v string) {
		t.Helper()
		if err := s.Put(ctx, k, []byte(v)); err != nil {
			t.Fatalf("rank %d puts %q: %v", s.me, v, err)
		}
		got, ver, err := reader.GetVersion(ctx, k)
		if err != nil || string(got) != v {
			t.Fatalf("after rank %d put %q, a read returns %q, %v", s.me, v, got, err)
		}
		if ver <= last {
			t.Fatalf("rank %d's put of %q has version %d, not above the %d of the value before", s.me, v, ver, last)
		}
		last = ver
	}
	step(a, "a1") // a takes a lease on k
	err := a.inView(func(o *op) error {
		reps, leased, err := o.acquire(ctx, a.ident(k), true)
		if err != nil {
			return err
		}
		if !leased {
			t.Error("the put left no lease to take the key under")
		}
		o.unlockAll(ctx, reps)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	step(b, "b1")
	step(a, "a3")
	step(b, "b2")
	step(a, "a4")
}
