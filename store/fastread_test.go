package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Settled keys are read from their primary alone; a write under way, or one
// a writer left cut short, sends reads to every replica, which repair it.
func TestFastReads(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		for i := range 20 {
			if err := st[i%4].Put(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		before := st[1].Stats()
		for i := range 20 {
			if v, err := st[1].Get(ctx, fmt.Appendf(nil, "k%d", i)); err != nil || string(v) != fmt.Sprintf("v%d", i) {
				t.Fatalf("k%d: %q %v", i, v, err)
			}
		}
		fast := st[1].Stats().FastGets - before.FastGets
		if !st[1].current().w.WholeWords() {
			if fast != 0 {
				t.Fatalf("%d fast gets on a transport that may tear words", fast)
			}
			return
		}
		if fast != 20 {
			t.Fatalf("%d of 20 gets of settled keys were fast", fast)
		}
	})
}

// A write cut short at the primary alone (its writer crashed after it) is
// not read fast: the primary's done word is behind its version.
func TestNoFastReadOfAWriteCutShort(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 5, smallOptions(3))
	writer := st[4]
	var k []byte // a key the writer holds no copy of
	for i := 0; k == nil; i++ {
		c := fmt.Appendf(nil, "k%d", i)
		if !slices.Contains(writer.current().place.replicas(writer.hash(c), noneFailed), writer.me) {
			k = c
		}
	}
	if err := writer.Put(ctx, k, []byte("old")); err != nil {
		t.Fatal(err)
	}
	// Recovery would repair the key (its lock names the dead writer) before
	// the reader looks; hold it back until the reader has read.
	release := make(chan struct{})
	testHookRecover.set(t, func(ctx context.Context, s *Store) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock()
	testHookPublish.set(t, func(s *Store, reps []*replica, i int) {
		if s == writer && i == 1 {
			s.current().w.Flush(context.Background(), reps[0].r) // the primary has it
			world.Net.Crash(s.me)                                // the others do not
		}
	})
	writer.Put(ctx, k, []byte("new"))
	testHookPublish.clear()
	reader := st[0]
	for !reader.current().c.ProcFailed(writer.me) {
		time.Sleep(time.Millisecond)
	}
	reps, err := reader.Locate(ctx, k)
	if err != nil || len(reps) < 2 || reps[0].Version <= reps[1].Version {
		t.Fatalf("the primary does not hold a newer version than the others: %+v %v", reps, err)
	}
	before := reader.Stats()
	v, err := reader.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if reader.Stats().FastGets != before.FastGets {
		t.Fatalf("a get of a write cut short was answered by the primary alone (%q)", v)
	}
	unblock()
	// Whatever it chose, every later get agrees.
	for _, s := range st[:4] {
		if w, err := s.Get(ctx, k); err != nil || string(w) != string(v) {
			t.Fatalf("rank %d: %q %v after %q", s.me, w, err, v)
		}
	}
}
