package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm/commtest"
)

// A deleted key frees its slots: Slots bounds the live keys, not the keys
// ever put. With 8 slots a rank, 200 distinct keys put and deleted in turn
// (by Delete and by transactions) fit, and the key blocks go back to the
// heap.
func TestDeletedKeysFreeTheirSlots(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		opt := smallOptions(2)
		opt.Slots = 8
		_, st := openAllOn(t, newWorld, 3, opt)
		for i := range 200 {
			k := fmt.Appendf(nil, "key-%d", i)
			s := st[i%3]
			if err := s.Put(ctx, k, []byte("v")); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
			if i%2 == 0 {
				if err := st[(i+1)%3].Delete(ctx, k); err != nil {
					t.Fatalf("delete %s: %v", k, err)
				}
			} else {
				tx := s.Begin()
				tx.Delete(k)
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("commit of the deletion of %s: %v", k, err)
				}
			}
			if _, err := st[(i+2)%3].Get(ctx, k); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get of deleted %s: %v", k, err)
			}
		}
		// Live keys still fill the table: 3 ranks × 8 slots hold 12 keys of
		// 2 copies, and slots of live keys are not taken.
		held := 0
		for _, s := range st {
			held += s.Stats().KeysHeld
		}
		// Only the writers' transaction decision keys remain.
		if held > 3*2 {
			t.Errorf("%d slots still held after every user key was deleted", held)
		}
	})
}

// A rank that remembered where a key's slot was finds out when the key was
// deleted and the slot taken by another key: its get of the deleted key is
// not found (not the other key's value), and its put goes to a slot of its
// own without touching the other key.
func TestReusedSlotIsNotTheOldKeys(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		collide(t) // every key starts its probe at the same slot
		ctx := testCtx(t, time.Minute)
		opt := smallOptions(3)
		_, st := openAllOn(t, newWorld, 3, opt)
		a, b := []byte("a"), []byte("b")
		if err := st[0].Put(ctx, a, []byte("A")); err != nil {
			t.Fatal(err)
		}
		if v, err := st[2].Get(ctx, a); err != nil || string(v) != "A" {
			t.Fatalf("get a: %q %v", v, err)
		}
		slotsOfA := st[2].slotsOf(a)
		time.Sleep(2 * leaseIdle) // rank 0's lease on a ends
		if err := st[1].Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := st[1].Put(ctx, b, []byte("B")); err != nil {
			t.Fatal(err)
		}
		got := st[1].slotsOf(b)
		for r, i := range slotsOfA {
			if got[r] != i {
				t.Fatalf("b's slots %v are not a's old ones %v: the test does not test reuse", got, slotsOfA)
			}
		}
		// Rank 2 and rank 0 still remember a's slots.
		if v, err := st[2].Get(ctx, a); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get of deleted a through a reused slot: %q %v", v, err)
		}
		if err := st[0].Put(ctx, a, []byte("A2")); err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if v, err := s.Get(ctx, b); err != nil || string(v) != "B" {
				t.Fatalf("rank %d: get b: %q %v", s.me, v, err)
			}
			if v, err := s.Get(ctx, a); err != nil || string(v) != "A2" {
				t.Fatalf("rank %d: get a: %q %v", s.me, v, err)
			}
		}
	})
}

// slotsOf is where this rank remembers key's slots, by rank.
func (s *Store) slotsOf(key []byte) map[int]int {
	out := map[int]int{}
	s.cache.Lock()
	defer s.cache.Unlock()
	for k, sl := range s.cache.slot {
		if k.key == string(key) {
			out[int(k.rank)] = sl.idx
		}
	}
	return out
}

// A lease that is not written again does not hold up another writer: the
// holder ends it when asked, not when it expires (here: never, within the
// test).
func TestIdleLeaseEndsWhenAsked(t *testing.T) {
	old := leaseIdle
	leaseIdle = time.Hour
	t.Cleanup(func() { leaseIdle = old })
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, 30*time.Second)
		_, st := openAllOn(t, newWorld, 3, smallOptions(3))
		k := []byte("k")
		if err := st[0].Put(ctx, k, []byte("0")); err != nil {
			t.Fatal(err)
		}
		if _, leased := st[0].peek().leased(st[0].ident(k)); !leased {
			t.Fatal("rank 0 holds no lease on k: the test does not test leases")
		}
		for r := 1; r < 3; r++ {
			if err := st[r].Put(ctx, k, fmt.Appendf(nil, "%d", r)); err != nil {
				t.Fatalf("rank %d: put of a key rank 0 leased and left idle: %v", r, err)
			}
		}
		if v, err := st[0].Get(ctx, k); err != nil || string(v) != "2" {
			t.Fatalf("get: %q %v", v, err)
		}
	})
}

// A key slot freed by a deletion (a tombstone) keeps the deleted key's
// version; when recovery claims it to copy another key there, that version
// must not count as a newer deletion of the copied key. Keys a and b share
// a probe chain but no replica: a, written to version 5 and deleted, leaves
// tombstones at its three ranks; b (version 1) loses a replica, and its
// new replica is one of a's ranks, whose claim takes a's tombstone. b
// keeps its value, in three whole copies.
func TestReusedTombstoneKeepsKey(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	opt := smallOptions(3)
	w, st := openAllOn(t, commtest.New, 6, opt)
	p := st[0].current().place
	hA := uint64(0x5eed00) // a multiple of Slots: both chains start at slot 0
	hB := uint64(0)
	for k := uint64(1); k < 4096 && hB == 0; k++ {
		h := hA + k*uint64(opt.Slots)
		if !slices.ContainsFunc(p.replicas(h, noneFailed), func(r ftrma.Rank) bool {
			return slices.Contains(p.replicas(hA, noneFailed), r)
		}) {
			hB = h
		}
	}
	if hB == 0 {
		t.Fatal("no hash whose replicas are apart from a's")
	}
	testHookHash.set(t, func(key []byte) uint64 {
		if string(key) == "a" {
			return hA
		}
		return hB
	})
	for i := range 5 {
		if err := st[0].Put(ctx, []byte("a"), fmt.Appendf(nil, "a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st[0].Delete(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := st[0].Put(ctx, []byte("b"), []byte("bee")); err != nil {
		t.Fatal(err)
	}
	repsB := p.replicas(hB, noneFailed)
	victim := repsB[0]
	if victim == 0 {
		victim = repsB[1]
	}
	crashAndWait(ctx, t, w, st, victim)
	reader := st[slices.IndexFunc(st, func(s *Store) bool {
		return s.me != victim && slices.Contains(repsB, s.me)
	})]
	var reps []Replica
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		reps, err = reader.Locate(ctx, []byte("b"))
		if err != nil {
			t.Fatal(err)
		}
		whole := len(reps) == 3
		for _, r := range reps {
			whole = whole && r.HasValue && r.Complete && r.Version == 1
		}
		if whole || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range st {
		if s.me == victim {
			continue
		}
		if got, err := s.Get(ctx, []byte("b")); err != nil || string(got) != "bee" {
			t.Fatalf("rank %d: get b: %q, %v; want \"bee\" (copies %+v)", s.me, got, err, reps)
		}
	}
	for _, r := range reps {
		if !r.HasValue || !r.Complete || r.Version != 1 {
			t.Fatalf("b's copies after recovery: %+v; want three whole copies of version 1", reps)
		}
	}
}

// A slot holding a value whose hash word was lost (cleared by a tombstone
// cut short, or a claim's hash word that never landed) is seen by the
// scans of the rank's own slots all the same: ownSlot takes the hash from
// the slot's key block and writes it back.
func TestOwnSlotRestoresHash(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAllOn(t, commtest.New, 3, smallOptions(3))
	for i := range 20 {
		if err := st[0].Put(ctx, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	s := st[1]
	want := map[int]uint64{}
	for i := range s.opt.Slots {
		sw := s.table[hdrWords+i*slotWords:][:slotWords]
		if k := atomic.LoadUint64(&sw[slotKey]); k != 0 && k != slotTomb {
			want[i] = atomic.SwapUint64(&sw[slotHash], 0)
		}
	}
	if len(want) != 20 {
		t.Fatalf("rank 1 holds %d keys, want 20", len(want))
	}
	o := s.begin()
	defer o.end()
	for i, h := range want {
		if _, got := o.ownSlot(ctx, i); got != h {
			t.Errorf("slot %d: ownSlot's hash %#x, want %#x", i, got, h)
		}
		if got := atomic.LoadUint64(&s.table[hdrWords+i*slotWords+slotHash]); got != h {
			t.Errorf("slot %d: hash word %#x after ownSlot, want %#x", i, got, h)
		}
	}
}

// A claimer that dies right after its claim landed leaves no slot that
// names a key without its hash word (DESIGN.md F21: the scans of recovery,
// Grow and Scan go by the hash word, so such a copy was hidden from them):
// the hash word goes before the key word.
func TestClaimCutShortKeepsHash(t *testing.T) {
	for _, at := range []string{"claimed"} {
		t.Run(at, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			w, st := openAll(t, 4, smallOptions(3))
			claimer := st[3]
			testHookPosted.set(t, func(_ context.Context, s *Store, point, key string) {
				if s == claimer && point == at && key == "fresh" {
					w.Net.Crash(s.me)
				}
			})
			if err := claimer.Put(ctx, []byte("fresh"), []byte("v")); err == nil {
				t.Fatal("the crashed claimer's put succeeded")
			}
			testHookPosted.clear()
			keyed := 0
			for _, s := range st {
				for i := range s.opt.Slots {
					sw := s.table[hdrWords+i*slotWords:][:slotWords]
					key, h := atomic.LoadUint64(&sw[slotKey]), atomic.LoadUint64(&sw[slotHash])
					if key != 0 && key != slotTomb {
						keyed++
						if h == 0 {
							t.Errorf("rank %d's slot %d names a key without its hash word", s.me, i)
						}
					}
				}
			}
			if keyed == 0 {
				t.Fatal("the claim landed nowhere: nothing was cut short")
			}
		})
	}
}

// A claimer that waits for another operation of its process to finish a
// claim at the same rank gives up when its own context ends: the other's
// wait (here, for a claim lock that a live rank keeps) is bounded by the
// hold bound, which is minutes, not by the waiter's context.
func TestClaimWaiterKeepsItsContext(t *testing.T) {
	_, st := openAll(t, 3, smallOptions(3))
	ctx := testCtx(t, 10*time.Second)
	// Live rank 2 holds rank 0's claim lock and does not let go.
	atomic.StoreUint64(&st[0].table[hdrClaim], 2+1)
	defer atomic.StoreUint64(&st[0].table[hdrClaim], 0)

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var aDone atomic.Bool
	aErr := make(chan error, 1)
	go func() {
		err := st[1].Put(actx, []byte("a"), []byte("1")) // waits for rank 2's claim lock
		aDone.Store(true)
		aErr <- err
	}()
	// Once rank 1's first claim waits at rank 0, a second one there must
	// wait for it in this process.
	for len(st[1].claiming[0].c()) == 0 {
		time.Sleep(time.Millisecond)
	}
	bctx, bcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer bcancel()
	err := st[1].Put(bctx, []byte("b"), []byte("2"))
	if aDone.Load() {
		t.Fatalf("the second put returned (%v) only after the first one ended", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the second put: %v, want its context's deadline", err)
	}
	cancel()
	if err := <-aErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first put: %v, want its context's end", err)
	}
}
