package store

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// setWord writes word i (a byte offset) of rank r's table through s's window.
func setWord(ctx context.Context, t *testing.T, s *Store, r ftrma.Rank, addr, v uint64) {
	t.Helper()
	w := s.current().w
	if err := w.Put(r, addr, binary.NativeEndian.AppendUint64(nil, v)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, r); err != nil {
		t.Fatal(err)
	}
}

// A live rank that holds what others wait for and never lets go (a broken
// holder: here rank 2's name written into a key's lock words and into a
// rank's claim lock, which rank 2 knows nothing of) holds them up for
// holdBound, not for ever: a Put with a context that never ends returns an
// error wrapping ftrma.ErrLockHeld (the bound is shortened for the test).
func TestBrokenHolderIsBounded(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 3, smallOptions(3))
	if err := st[1].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	st[0].holdFor = 200 * time.Millisecond
	o := st[0].peek()
	id := st[0].ident([]byte("k"))
	st[1].endLease(id) // its writer's lease: rank 1 lets go of it when asked
	st[1].current().w.FlushAll(ctx)

	bounded := func(name string, f func(context.Context) error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f(context.Background()) }()
		select {
		case err := <-done:
			if !errors.Is(err, ftrma.ErrLockHeld) {
				t.Fatalf("%s: %v, want an error wrapping ErrLockHeld", name, err)
			}
			t.Logf("%s: %v", name, err)
		case <-ctx.Done():
			t.Fatalf("%s still waits on the broken holder", name)
		}
	}

	// The key's lock at every replica, in rank 1's name.
	for r := range ftrma.Rank(3) {
		sl, _, err := o.probe(ctx, r, id)
		if err != nil || sl.idx < 0 {
			t.Fatalf("rank %d has no slot for k: %v", r, err)
		}
		addr := o.slotAddr(r, sl.idx) + slotLock*8
		var cur [8]byte
		if err := o.v().w.Get(r, addr, cur[:]); err != nil {
			t.Fatal(err)
		}
		if err := o.v().w.Flush(ctx, r); err != nil {
			t.Fatal(err)
		}
		setWord(ctx, t, st[0], r, addr, lockWord(lockVersion(binary.NativeEndian.Uint64(cur[:])), 2))
	}
	bounded("put of a key whose locks a broken live rank holds", func(ctx context.Context) error {
		return st[0].Put(ctx, []byte("k"), []byte("w"))
	})

	// A pending record at one replica too: a read of every replica (the
	// slow path of Get, recovery's check) waits for its writer.
	sl, _, err := o.probe(ctx, 0, id)
	if err != nil {
		t.Fatal(err)
	}
	setWord(ctx, t, st[0], 0, o.slotAddr(0, sl.idx)+slotPAddr*8, 8)
	bounded("read of a key a broken live rank is writing", func(ctx context.Context) error {
		o := st[0].begin()
		defer o.end()
		_, _, err := o.getAll(ctx, id)
		return err
	})

	// Rank 1's claim lock, in rank 2's name: a new key (placed on every
	// rank: Copies 3) needs a slot claimed there.
	setWord(ctx, t, st[0], 1, o.v().tables[1]+hdrClaim*8, 2+1)
	bounded("put of a new key while a broken live rank holds a claim lock", func(ctx context.Context) error {
		return st[0].Put(ctx, []byte("new key"), []byte("w"))
	})
}
