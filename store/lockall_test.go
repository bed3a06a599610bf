package store

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// An attempt of lockAll whose posting stops at a failed replica tries none
// of the replicas after it, and must neither count them held nor give them
// back: their result words are the last attempt's, whose locks it gave back
// already, and another rank may hold them now (F30: a writer's unlockAll
// released a committing transaction's lock that way, and a repair then
// dropped its pending record while it decided).
func TestLockAllAttemptThatStopsEarlyGivesBackNothing(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 3, smallOptions(3))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	id := st[0].ident([]byte("k"))
	st[0].endLease(id)
	st[0].current().w.FlushAll(ctx)
	o := st[0].begin()
	defer o.end()
	reps, err := o.replicas(ctx, id, true)
	if err != nil || len(reps) != 3 {
		t.Fatalf("replicas: %d, %v; want 3", len(reps), err)
	}

	// Rank 2 fails; its replica goes first, so posting stops there. The
	// others carry what an earlier attempt left: a compare-and-swap that
	// found the lock free and took it (given back since).
	w.Crash(2)
	for !o.failed(2) {
		select {
		case <-ctx.Done():
			t.Fatal("rank 2's crash never became known")
		case <-time.After(time.Millisecond):
		}
	}
	var order []*replica
	for _, p := range reps {
		if p.r == 2 {
			order = append([]*replica{p}, order...)
		} else {
			order = append(order, p)
		}
	}
	var held *replica // rank 1's replica: rank 1 holds its lock now
	for _, p := range order[1:] {
		p.expect = lockWord(3, -1)
		p.res, p.done = int64(p.expect), true
		if p.r == 1 {
			held = p
		}
	}
	lockAddr := held.addr + slotLock*8
	setWord(ctx, t, st[0], 1, lockAddr, lockWord(3, 1))

	if err := o.lockAll(ctx, id, order); !errors.Is(err, errRetry) && !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("lockAll with a failed first replica: %v, want a retry", err)
	}
	for _, p := range order[1:] {
		if p.held {
			t.Errorf("rank %d's replica counts held though its lock was not tried", p.r)
		}
	}
	var got [8]byte
	if err := o.v().w.Get(1, lockAddr, got[:]); err != nil {
		t.Fatal(err)
	}
	if err := o.v().w.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if lw := binary.NativeEndian.Uint64(got[:]); lw != lockWord(3, 1) {
		t.Fatalf("rank 1's lock word is %#x after the attempt, want %#x: the attempt gave back a lock rank 1 holds", lw, lockWord(3, 1))
	}
}
