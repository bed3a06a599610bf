package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// The published test vectors of SipHash-2-4 (key 00 01 .. 0f, message
// 00 01 .. n-1).
func TestSipHashVectors(t *testing.T) {
	k := sipKey{0x0706050403020100, 0x0f0e0d0c0b0a0908}
	msg := make([]byte, 64)
	for i := range msg {
		msg[i] = byte(i)
	}
	for _, c := range []struct {
		n    int
		want uint64
	}{
		{0, 0x726fdb47dd0e0e31}, {1, 0x74f839c593dc67fd}, {7, 0xab0200f58b01d137},
		{8, 0x93f5f5799a932462}, {15, 0xa129ca6149be45e5}, {63, 0x958a324ceb064572},
	} {
		if got := sipHash24(k, msg[:c.n]); got != c.want {
			t.Errorf("%d bytes: %#x, want %#x", c.n, got, c.want)
		}
	}
}

// collide makes every key hash to the same value for the test: the worst a
// chooser of keys could do if the hash were not keyed.
func collide(t *testing.T) {
	testHookHash.set(t, func([]byte) uint64 { return 0x5eed })
}

// Keys are their full bytes, not their hash: two keys with the same hash
// keep their own values through puts, deletes, transactions, and a reader
// on another rank.
func TestCollidingKeysKeepTheirValues(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		collide(t)
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		a, b, c := []byte("alpha"), []byte("beta"), []byte("b")
		if st[0].hash(a) != st[1].hash(b) {
			t.Fatal("the hook did not make the hashes collide")
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		expect := func(s *Store, key []byte, want string) {
			t.Helper()
			v, err := s.Get(ctx, key)
			if want == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("rank %d: get %s = %q, %v; want not found", s.me, key, v, err)
				}
				return
			}
			if err != nil || string(v) != want {
				t.Fatalf("rank %d: get %s = %q, %v; want %q", s.me, key, v, err, want)
			}
		}
		must(st[0].Put(ctx, a, []byte("A1")))
		must(st[1].Put(ctx, b, []byte("B1")))
		must(st[2].Put(ctx, c, []byte("C1"))) // a shorter key: its block ends sooner
		for _, s := range st {
			expect(s, a, "A1")
			expect(s, b, "B1")
			expect(s, c, "C1")
		}
		must(st[3].Delete(ctx, a))
		expect(st[0], a, "")
		expect(st[1], b, "B1")
		must(st[2].Put(ctx, a, []byte("A2")))
		must(st[0].Put(ctx, b, []byte("B2")))
		expect(st[3], a, "A2")
		expect(st[3], b, "B2")

		tx := st[1].Begin()
		must(tx.Put(a, []byte("A3")))
		must(tx.Put(b, []byte("B3")))
		must(tx.Delete(c))
		must(tx.Commit(ctx))
		for _, s := range st {
			expect(s, a, "A3")
			expect(s, b, "B3")
			expect(s, c, "")
		}
		for _, k := range [][]byte{a, b} {
			reps, err := st[0].Locate(ctx, k)
			must(err)
			for _, p := range reps {
				if !p.HasValue || !p.Complete {
					t.Fatalf("%s: replica %+v", k, p)
				}
			}
		}
	})
}

// Many writers racing to claim slots for colliding keys at once end with
// one slot per key at every rank.
func TestCollidingClaimsRace(t *testing.T) {
	collide(t)
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 4, smallOptions(2))
	errs := make(chan error, 4*8)
	for r, s := range st {
		go func() {
			for i := range 8 {
				key := fmt.Appendf(nil, "k%d", i)
				errs <- s.Put(ctx, key, fmt.Appendf(nil, "%d", r))
			}
		}()
	}
	for range 4 * 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	for _, s := range st {
		held += s.Stats().KeysHeld
	}
	if held != 8*2 {
		t.Fatalf("%d slots in use for 8 keys with 2 copies", held)
	}
	for i := range 8 {
		v, err := st[i%4].Get(ctx, fmt.Appendf(nil, "k%d", i))
		if err != nil || len(v) != 1 {
			t.Fatalf("k%d: %q %v", i, v, err)
		}
	}
}

// A crash leaves colliding keys with their values, and recovery restores
// both (it reads each slot's key from its key block).
func TestCollidingKeysSurviveACrash(t *testing.T) {
	collide(t)
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 5, smallOptions(2))
	var keys []string
	for i := range 6 {
		k := fmt.Sprintf("key-%d-%s", i, strings.Repeat("x", i))
		if err := st[i%5].Put(ctx, []byte(k), []byte(k)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	victim := st[0].current().place.replicas(0x5eed, noneFailed)[0]
	world.Net.Crash(victim)
	reader := st[(int(victim)+1)%5]
	waitWhole(ctx, t, reader, keys)
	for _, k := range keys {
		v, err := reader.Get(ctx, []byte(k))
		if err != nil || string(v) != k {
			t.Fatalf("%s: %q %v", k, v, err)
		}
	}
}

// The store's own keys (transaction decisions) start with a prefix that user
// keys may not use, and identity is the whole key: no user key can reach
// them, whatever its hash.
func TestDecisionKeysOutOfReach(t *testing.T) {
	collide(t)
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 3, smallOptions(2))
	dk := txKey(1)
	if err := st[0].Put(ctx, dk, []byte("x")); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("put of a decision key: %v", err)
	}
	tx := st[1].Begin()
	tx.Put([]byte("t"), []byte("committed"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Same hash as the decision key, not the same key.
	if err := st[2].Put(ctx, dk[1:], []byte("user")); err != nil {
		t.Fatal(err)
	}
	ok, err := st[0].txCommitted(context.Background(), txTag(1, 1))
	if err != nil || !ok {
		t.Fatalf("the transaction's decision: %v %v", ok, err)
	}
	if v, err := st[0].Get(ctx, dk[1:]); err != nil || string(v) != "user" {
		t.Fatalf("user key: %q %v", v, err)
	}
}

// The yielding copies, checksums and comparisons compute what the plain
// ones do, across piece boundaries.
func TestYieldingHelpers(t *testing.T) {
	b := make([]byte, 3*yieldEvery+17)
	for i := range b {
		b[i] = byte(i * 7)
	}
	c := cloneYielding(b)
	if !equalYielding(b, c) || !bytes.Equal(b, c) {
		t.Fatal("clone differs")
	}
	c[2*yieldEvery+3]++
	if equalYielding(b, c) {
		t.Fatal("equal after a change in the third piece")
	}
	if crcYielding(5, b) != crc32.Update(5, castagnoli, b) {
		t.Fatal("crc differs")
	}
	if cloneYielding(nil) != nil {
		t.Fatal("clone of nil is not nil")
	}
}
