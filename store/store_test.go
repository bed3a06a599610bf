package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func smallOptions(copies int) Config {
	return Config{Copies: copies, Slots: 512, ChunkSize: 64 << 10, Chunks: 256, Reserve: 1, MaxValueSize: 1 << 20}
}

// worldFunc builds an n-rank world: commtest.New (memnet) or NewSHM.
type worldFunc func(testing.TB, int) *commtest.World

// bothWorlds runs f over memnet and over shared memory, as subtests.
func bothWorlds(t *testing.T, f func(t *testing.T, newWorld worldFunc)) {
	for _, m := range commtest.Worlds() {
		t.Run(m.Name, func(t *testing.T) { f(t, m.New) })
	}
}

// openAll opens a store on every rank of a new n-rank memnet world.
func openAll(t *testing.T, n int, opt Config) (*commtest.World, []*Store) {
	t.Helper()
	return openAllOn(t, commtest.New, n, opt)
}

// openAllOn is openAll on a world newWorld builds.
func openAllOn(t *testing.T, newWorld worldFunc, n int, opt Config) (*commtest.World, []*Store) {
	t.Helper()
	w := newWorld(t, n)
	ctx := testCtx(t, time.Minute)
	stores := make([]*Store, n)
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, err := Open(ctx, c, opt)
		stores[c.Rank()] = s
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: open: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range stores {
			if !s.closed.Swap(true) {
				close(s.stop)
				<-s.done
			}
		}
	})
	return w, stores
}

func TestPutGetDeleteAcrossRanks(t *testing.T) { bothWorlds(t, testPutGetDeleteAcrossRanks) }

func testPutGetDeleteAcrossRanks(t *testing.T, newWorld worldFunc) {
	ctx := testCtx(t, time.Minute)
	_, st := openAllOn(t, newWorld, 5, smallOptions(3))
	for r, s := range st {
		for i := range 20 {
			key := fmt.Appendf(nil, "k%d.%d", r, i)
			if err := s.Put(ctx, key, bytes.Repeat([]byte{byte(r), byte(i)}, i*37)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for r := range st {
		for i := range 20 {
			key := fmt.Appendf(nil, "k%d.%d", r, i)
			reader := st[(r+i)%len(st)]
			v, err := reader.Get(ctx, key)
			if err != nil {
				t.Fatalf("get %s at rank %d: %v", key, reader.me, err)
			}
			if want := bytes.Repeat([]byte{byte(r), byte(i)}, i*37); !bytes.Equal(v, want) {
				t.Fatalf("get %s: %d bytes, want %d", key, len(v), len(want))
			}
			reps, err := reader.Locate(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			ranks := map[ftrma.Rank]bool{}
			for _, p := range reps {
				if p.Version != 1 || !p.HasValue || !p.Complete {
					t.Fatalf("%s: replica %+v", key, p)
				}
				ranks[p.Rank] = true
			}
			if len(ranks) != 3 {
				t.Fatalf("%s: replicas on %v, want 3 distinct ranks", key, reps)
			}
		}
	}
	if err := st[1].Delete(ctx, []byte("k0.3")); err != nil {
		t.Fatal(err)
	}
	if _, err := st[4].Get(ctx, []byte("k0.3")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := st[2].Get(ctx, []byte("never")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a missing key: %v", err)
	}
	if err := st[3].Put(ctx, []byte("k0.3"), []byte("again")); err != nil {
		t.Fatal(err)
	}
	if v, err := st[0].Get(ctx, []byte("k0.3")); err != nil || string(v) != "again" {
		t.Fatalf("get after re-put: %q %v", v, err)
	}
}

// Overwriting keys many times, with sizes that cross chunk boundaries and
// values larger than a chunk, reuses heap space instead of growing without
// end.
func TestHeapReuse(t *testing.T) { bothWorlds(t, testHeapReuse) }

func testHeapReuse(t *testing.T, newWorld worldFunc) {
	ctx := testCtx(t, time.Minute)
	opt := smallOptions(2)
	_, st := openAllOn(t, newWorld, 3, opt)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 100, 3000, 20000, 40000, 200000}
	last := map[string][]byte{}
	for i := range 300 {
		key := fmt.Sprintf("key%d", i%7)
		v := make([]byte, sizes[rng.IntN(len(sizes))])
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := st[i%3].Put(ctx, []byte(key), v); err != nil {
			t.Fatal(err)
		}
		last[key] = v
	}
	for k, want := range last {
		got, err := st[2].Get(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want %d bytes", k, len(got), err, len(want))
		}
	}
	var attached, live uint64
	for _, s := range st {
		attached += s.Stats().HeapAttached
		live += s.Stats().HeapLive
	}
	t.Logf("heap: %d bytes attached, %d live", attached, live)
	if live > 7*2*(200000+200) {
		t.Fatalf("%d bytes live for 7 keys of at most 200 kB, 2 copies", live)
	}
	// 7 keys × ≤256 KiB × 2 copies live at once; 300 puts of up to 200 KB
	// without reuse would need ~60 MiB.
	if attached > 16<<20 {
		t.Fatalf("heap grew to %d bytes for 7 keys", attached)
	}
}

func TestBadInput(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 3, smallOptions(2))
	s := st[0]
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"empty key", s.Put(ctx, nil, []byte("x")), ftrma.ErrInvalid},
		{"empty key get", func() error { _, err := s.Get(ctx, []byte{}); return err }(), ftrma.ErrInvalid},
		{"oversized value", s.Put(ctx, []byte("k"), make([]byte, 1<<20+1)), ftrma.ErrInvalid},
		{"oversized key", s.Put(ctx, make([]byte, 1025), nil), ftrma.ErrInvalid},
		{"reserved key", s.Put(ctx, []byte(reservedPrefix+"x"), nil), ftrma.ErrInvalid},
		{"tx oversized", s.Begin().Put([]byte("k"), make([]byte, 1<<20+1)), ftrma.ErrInvalid},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	tx := s.Begin()
	tx.Put([]byte("a"), []byte("1"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("second commit: %v", err)
	}
	if err := tx.Put([]byte("b"), nil); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("put after commit: %v", err)
	}
	s.closed.Store(true)
	if err := s.Put(ctx, []byte("k"), nil); !errors.Is(err, ErrClosed) || !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("put on a closed store: %v", err)
	}
	if _, err := s.Get(ctx, []byte("k")); !errors.Is(err, ErrClosed) {
		t.Errorf("get on a closed store: %v", err)
	}
	s.closed.Store(false)
}

func TestConfigChecked(t *testing.T) {
	for _, o := range []Config{{Copies: 4}, {Copies: -1}, {ChunkSize: 100}, {Slots: 3}} {
		if err := o.withDefaults(3); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestTransaction(t *testing.T) { bothWorlds(t, testTransaction) }

func testTransaction(t *testing.T, newWorld worldFunc) {
	ctx := testCtx(t, time.Minute)
	_, st := openAllOn(t, newWorld, 4, smallOptions(3))
	st[0].Put(ctx, []byte("gone"), []byte("soon"))
	tx := st[1].Begin()
	for i := range 5 {
		tx.Put(fmt.Appendf(nil, "t%d", i), fmt.Appendf(nil, "v%d", i))
	}
	tx.Delete([]byte("gone"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		v, err := st[3].Get(ctx, fmt.Appendf(nil, "t%d", i))
		if err != nil || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("t%d: %q %v", i, v, err)
		}
	}
	if _, err := st[2].Get(ctx, []byte("gone")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted in a transaction: %v", err)
	}
}

// Concurrent writers on distinct and shared keys from every rank and from
// several goroutines of one rank; every key ends with one of the values put.
func TestConcurrentWriters(t *testing.T) { bothWorlds(t, testConcurrentWriters) }

func testConcurrentWriters(t *testing.T, newWorld worldFunc) {
	ctx := testCtx(t, 2*time.Minute)
	_, st := openAllOn(t, newWorld, 4, smallOptions(3))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r, s := range st {
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					key := fmt.Appendf(nil, "shared%d", i%3)
					if i%2 == 0 {
						key = fmt.Appendf(nil, "own%d.%d", r, g)
					}
					if err := s.Put(ctx, key, fmt.Appendf(nil, "%d.%d.%d", r, g, i)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 3 {
		v, err := st[i].Get(ctx, fmt.Appendf(nil, "shared%d", i))
		if err != nil || len(v) == 0 {
			t.Fatalf("shared%d: %q %v", i, v, err)
		}
		reps, _ := st[0].Locate(ctx, fmt.Appendf(nil, "shared%d", i))
		for _, p := range reps[1:] {
			if p.Version != reps[0].Version {
				t.Fatalf("shared%d: replicas disagree: %+v", i, reps)
			}
		}
	}
	for r := range st {
		for g := range 2 {
			v, err := st[(r+1)%4].Get(ctx, fmt.Appendf(nil, "own%d.%d", r, g))
			if want := fmt.Sprintf("%d.%d.38", r, g); err != nil || string(v) != want {
				t.Fatalf("own%d.%d = %q %v, want %s", r, g, v, err, want)
			}
		}
	}
}

// Close on every rank; Stats and operations afterwards answer without
// touching released memory (on shm it is unmapped).
func TestCloseThenUse(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		w, st := openAllOn(t, newWorld, 3, smallOptions(2))
		if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
			return st[c.Rank()].Close(ctx)
		}) {
			if err != nil {
				t.Fatalf("rank %d: close: %v", r, err)
			}
		}
		if got := st[0].Stats(); got.Puts != 1 || got.KeysHeld != 0 {
			t.Errorf("stats after close: %+v", got)
		}
		if _, err := st[1].Get(ctx, []byte("k")); !errors.Is(err, ErrClosed) {
			t.Errorf("get after close: %v", err)
		}
		if err := st[2].Close(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("second close: %v", err)
		}
	})
}

// peek is an operation's handle on the current view for a test that looks
// at the store from outside: it does not count in the view (a Grow does not
// wait for it).
func (s *Store) peek() *op { return &op{Store: s, view: s.current()} }
