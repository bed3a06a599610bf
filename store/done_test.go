package store

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/tcp"
)

// newTCPWorld builds a world of n ranks over TCP transports on the
// loopback (no Net: crashes cannot be injected), closed at the end of the
// test.
func newTCPWorld(tb testing.TB, n int) *commtest.World {
	tb.Helper()
	ts := make([]*tcp.Transport, n)
	addrs := make([]string, n)
	for r := range n {
		tt, err := tcp.Listen(tcp.Config{Rank: ftrma.Rank(r), Size: n, Secret: []byte("store"), Spin: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			tb.Fatal(err)
		}
		ts[r], addrs[r] = tt, tt.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for _, tt := range ts {
		go func() { errs <- tt.Connect(ctx, addrs) }()
	}
	for range n {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
	w := &commtest.World{Comms: make([]*comm.Comm, n)}
	for r, tt := range ts {
		cfg := commtest.TestConfig()
		cfg.OnDeclaredFailed = func(by string) { tb.Errorf("rank %d declared failed by %s", r, by) }
		c, err := comm.New(tt, cfg)
		if err != nil {
			tb.Fatal(err)
		}
		w.Comms[r] = c
	}
	tb.Cleanup(w.Close)
	return w
}

// allWorlds runs f over the worlds of bothWorlds and over TCP, whose
// transport holds posted operations for a batch (up to its nudge) where
// the others send them at once.
func allWorlds(t *testing.T, f func(t *testing.T, newWorld worldFunc)) {
	bothWorlds(t, f)
	t.Run("tcp", func(t *testing.T) { f(t, newTCPWorld) })
}

// doneWord is the done word of key's slot at its primary, read in the
// primary's own memory, and the version the writer last put; the writer
// knows the slot (it wrote the key), so finding it sends nothing.
func doneWord(ctx context.Context, t *testing.T, writer *Store, st []*Store, key []byte) (done, ver *uint64) {
	t.Helper()
	o := writer.peek()
	id := writer.ident(key)
	primary := o.v().replicas(id.h, o.failed)[0]
	sl, err := o.findSlot(ctx, primary, id, false)
	if err != nil || sl.idx < 0 {
		t.Fatalf("the writer does not know the key's slot at its primary %d: %v %v", primary, sl, err)
	}
	base := hdrWords + sl.idx*slotWords
	return &st[primary].table[base+slotDone], &st[primary].table[base+slotCurVer]
}

// A put marks its version done at the key's primary without a send of its
// own, nor a wait: with one copy in the put's own batch (done when the put
// returns, on every transport), with three after the put's flush, posted
// only. The posted word still arrives without any later operation of the
// writer: at once on shared memory (an operation takes effect when posted),
// soon on memnet (the peer's goroutine executes it), and on TCP within the
// transport's nudge (1 ms after it held the frame; the bound here is wide
// for loaded machines, but far below the lease expiry and heartbeats that
// would otherwise carry it: leases are made long, and the median is held to
// a tighter bound).
func TestDoneWordArrivesUnpushed(t *testing.T) {
	old := leaseIdle
	leaseIdle = time.Hour // no lease expiry sends what the writer holds
	t.Cleanup(func() { leaseIdle = old })
	allWorlds(t, func(t *testing.T, newWorld worldFunc) {
		for _, copies := range []int{1, 3} {
			t.Run(fmt.Sprintf("copies%d", copies), func(t *testing.T) {
				ctx := testCtx(t, time.Minute)
				world, st := openAllOn(t, newWorld, 4, smallOptions(copies))
				writer := st[0]
				key := keyAwayFrom(writer, writer.me)
				_, atOnce := world.Comms[0].Transport().(*shm.Transport)
				var delays []time.Duration
				for i := range 20 {
					if err := writer.Put(ctx, key, fmt.Appendf(nil, "v%d", i)); err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					done, ver := doneWord(ctx, t, writer, st, key)
					v := atomic.LoadUint64(ver)
					at := atomic.LoadUint64(done)
					if (copies == 1 || atOnce) && at != v {
						t.Fatalf("put %d: done word %d when the put returned; want its version %d", i, at, v)
					}
					for at != v {
						if time.Since(start) > time.Second {
							t.Fatalf("put %d: the done word is still %d after %v; want %d: a posted operation was left unsent", i, at, time.Since(start), v)
						}
						time.Sleep(50 * time.Microsecond)
						at = atomic.LoadUint64(done)
					}
					delays = append(delays, time.Since(start))
				}
				sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
				med := delays[len(delays)/2]
				t.Logf("the done word landed %v after the put returned (median; max %v)", med, delays[len(delays)-1])
				if med > 25*time.Millisecond {
					t.Errorf("the done word landed %v after the put returned (median): later than the transport's nudge would send it", med)
				}
			})
		}
	})
}

// A get right after another rank's put returns the put's value, whether
// its done word has landed (a fast read from the primary) or not (the read
// of every replica); and the writer's own get reads fast, its flush toward
// the primary having sent the done word first.
func TestGetRightAfterPut(t *testing.T) {
	allWorlds(t, func(t *testing.T, newWorld worldFunc) {
		for _, copies := range []int{1, 3} {
			t.Run(fmt.Sprintf("copies%d", copies), func(t *testing.T) {
				ctx := testCtx(t, time.Minute)
				_, st := openAllOn(t, newWorld, 4, smallOptions(copies))
				writer := st[0]
				key := keyAwayFrom(writer, writer.me)
				fastBefore := [4]uint64{}
				for r, s := range st {
					fastBefore[r] = s.Stats().FastGets
				}
				const n = 100
				for i := range n {
					want := fmt.Sprintf("v%d", i)
					if err := writer.Put(ctx, key, []byte(want)); err != nil {
						t.Fatal(err)
					}
					reader := st[1+i%3]
					if v, err := reader.Get(ctx, key); err != nil || string(v) != want {
						t.Fatalf("put %d: rank %d got %q %v right after it; want %q", i, reader.me, v, err, want)
					}
					if v, err := writer.Get(ctx, key); err != nil || string(v) != want {
						t.Fatalf("put %d: the writer got %q %v; want %q", i, v, err, want)
					}
				}
				fast := make([]uint64, len(st))
				for r, s := range st {
					fast[r] = s.Stats().FastGets - fastBefore[r]
				}
				t.Logf("fast gets per rank (the writer first): %v of %d", fast, n)
				if writer.current().fast && fast[0] != n {
					t.Errorf("%d of the writer's %d gets right after its puts were fast", fast[0], n)
				}
			})
		}
	})
}
