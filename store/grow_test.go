package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/ftrma/ftrma/window"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/internal/check/kvcheck"
)

// openSpares opens a store on the n ranks of a memnet world with spares.
func openSpares(t *testing.T, n, spares int, opt Config) (*commtest.World, []*Store) {
	t.Helper()
	w := commtest.NewSpares(t, n, spares)
	ctx := testCtx(t, time.Minute)
	st := make([]*Store, n)
	ranks := make([]ftrma.Rank, n)
	for r := range ranks {
		ranks[r] = ftrma.Rank(r)
	}
	for r, err := range w.RunRanks(ctx, ranks, func(ctx context.Context, c *comm.Comm) error {
		s, err := Open(ctx, c, opt)
		st[c.Rank()] = s
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: open: %v", r, err)
		}
	}
	t.Cleanup(func() { stopAll(st) })
	return w, st
}

// putKeys puts n keys k0.. with values "value 0".. from ranks 0 to 5 (or
// to the last of st) in turn and returns them.
func putKeys(ctx context.Context, t *testing.T, st []*Store, n int) map[string]string {
	t.Helper()
	want := map[string]string{}
	for i := range n {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("value %d", i)
		if err := st[i%min(6, len(st))].Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	return want
}

// stopAll stops the housekeeping of every store (not a collective Close).
func stopAll(st []*Store) {
	for _, s := range st {
		if s != nil && !s.closed.Swap(true) {
			close(s.stop)
			<-s.done
		}
	}
}

// crashAndWait crashes the victims and waits until every other store knows.
func crashAndWait(ctx context.Context, t *testing.T, w *commtest.World, st []*Store, victims ...ftrma.Rank) {
	t.Helper()
	for _, v := range victims {
		w.Crash(v)
	}
	for r, s := range st {
		if slices.Contains(victims, ftrma.Rank(r)) {
			continue
		}
		for _, v := range victims {
			for !s.current().c.ProcFailed(v) {
				if ctx.Err() != nil {
					t.Fatalf("rank %d never learned of %d's failure", r, v)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// describeKey tells, for a failure message, where key k is placed and what
// each live rank's slot of it holds.
func describeKey(ctx context.Context, st []*Store, k string) string {
	var s0 *Store
	for _, s := range st {
		if s != nil {
			s0 = s
			break
		}
	}
	cv := s0.current()
	id := s0.ident([]byte(k))
	out := fmt.Sprintf("  placement %v", cv.place.replicas(id.h, cv.c.ProcFailed))
	if cv.old != nil {
		out += fmt.Sprintf(" (a transition view: also %v)", cv.replicas(id.h, cv.c.ProcFailed))
	}
	for r, s := range st {
		if s == nil || cv.c.ProcFailed(ftrma.Rank(r)) {
			continue
		}
		sl, _, err := s0.peek().probe(ctx, ftrma.Rank(r), id)
		switch {
		case err != nil:
			out += fmt.Sprintf("\n  rank %d: %v", r, err)
		case sl.idx < 0:
			out += fmt.Sprintf("\n  rank %d: no slot", r)
			for i := range s.opt.Slots {
				sw := s.table[hdrWords+i*slotWords:][:slotWords]
				if atomic.LoadUint64(&sw[slotHash]) == id.h {
					out += fmt.Sprintf("; slot %d has its hash, key word %#x, generation %d, current version %d at %#x",
						i, atomic.LoadUint64(&sw[slotKey]), atomic.LoadUint64(&sw[slotGen]), atomic.LoadUint64(&sw[slotCurVer]), atomic.LoadUint64(&sw[slotCurAddr]))
				}
			}
		default:
			sw := s.table[hdrWords+sl.idx*slotWords:][:slotWords]
			out += fmt.Sprintf("\n  rank %d: slot %d, hash word %#x, lock owner %d version %d, current version %d at %#x, pending %#x",
				r, sl.idx, atomic.LoadUint64(&sw[slotHash]), lockOwner(atomic.LoadUint64(&sw[slotLock])), lockVersion(atomic.LoadUint64(&sw[slotLock])),
				atomic.LoadUint64(&sw[slotCurVer]), atomic.LoadUint64(&sw[slotCurAddr]), atomic.LoadUint64(&sw[slotPAddr]))
		}
	}
	return out
}

// stacksIfSlow logs every goroutine's stack if the returned func is not
// called within d: a Grow that hangs shows where.
func stacksIfSlow(t *testing.T, d time.Duration) (stop func()) {
	var mu sync.Mutex
	ended := false
	tm := time.AfterFunc(d, func() {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			t.Logf("still running after %v; goroutines:\n%s", d, buf)
		}
	})
	return func() {
		tm.Stop()
		mu.Lock()
		ended = true
		mu.Unlock()
	}
}

// replaceAndGrow has the survivors of st Replace their communicators and
// Grow, and the spares Join. It returns the stores by rank and each rank's
// error.
func replaceAndGrow(ctx context.Context, t *testing.T, w *commtest.World, st []*Store, victims []ftrma.Rank) ([]*Store, map[ftrma.Rank]error) {
	t.Helper()
	out := slices.Clone(st)
	errs := map[ftrma.Rank]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r, s := range st {
		if slices.Contains(victims, ftrma.Rank(r)) {
			out[r] = nil
			continue
		}
		wg.Go(func() {
			nc, err := w.Comms[r].Replace(ctx)
			if err == nil {
				err = s.Grow(ctx, nc)
			}
			mu.Lock()
			errs[ftrma.Rank(r)] = err
			mu.Unlock()
		})
	}
	for range victims {
		var j commtest.Joined
		select {
		case j = <-w.Joined():
		case <-ctx.Done():
			t.Fatal("no spare joined")
		}
		if j.Err != nil {
			t.Fatalf("spare %d: %v", j.Rank, j.Err)
		}
		wg.Go(func() {
			s, err := Join(ctx, j.Comm, Config{})
			mu.Lock()
			out[j.Comm.Rank()], errs[j.Comm.Rank()] = s, err
			mu.Unlock()
		})
	}
	stop := stacksIfSlow(t, 30*time.Second)
	wg.Wait()
	stop()
	t.Cleanup(func() { stopAll(out) })
	return out, errs
}

// checkPlaced checks that every rank has a slot for each key exactly when
// the key's placement includes it, and that every rank reads its value.
func checkPlaced(ctx context.Context, t *testing.T, st []*Store, want map[string]string) {
	t.Helper()
	for k, val := range want {
		id := st[0].ident([]byte(k))
		place := st[0].current().place.replicas(id.h, st[0].current().c.ProcFailed)
		for r, s := range st {
			if s == nil || st[0].current().c.ProcFailed(ftrma.Rank(r)) {
				continue
			}
			sl, _, err := st[0].peek().probe(ctx, ftrma.Rank(r), id)
			if err != nil {
				t.Fatalf("probe %s at %d: %v", k, r, err)
			}
			if has, placed := sl.idx >= 0, slices.Contains(place, ftrma.Rank(r)); has != placed {
				t.Errorf("%s: rank %d has a copy %v, places it %v; copies:\n%s", k, r, has, placed, describeKey(ctx, st, k))
			}
			got, err := s.Get(ctx, []byte(k))
			if err != nil || string(got) != val {
				t.Errorf("%s at rank %d: %q, %v; want %q", k, r, got, err, val)
			}
		}
	}
}

// 6 ranks, Copies 3, 500 keys. Rank 4 fails, the survivors restore three
// copies, Replace gives its number to a spare, and Grow/Join extend the
// store: every key reads back from every rank; the new rank holds exactly
// the keys whose placement includes it, and no survivor a key it does not
// place; the moves counted are those keys, once each.
func TestGrowAfterReplace(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	w, st := openSpares(t, 6, 1, smallOptions(3))
	want := map[string]string{}
	var keys []string
	for i := range 500 {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("value %d", i)
		if err := st[i%min(6, len(st))].Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
		keys = append(keys, k)
	}
	crashAndWait(ctx, t, w, st, 4)
	waitWhole(ctx, t, st[0], keys)
	nst, errs := replaceAndGrow(ctx, t, w, st, []ftrma.Rank{4})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	checkPlaced(ctx, t, nst, want)
	moved, onNew := uint64(0), 0
	for _, k := range keys {
		if slices.Contains(nst[0].current().place.replicas(nst[0].hash([]byte(k)), nst[0].current().c.ProcFailed), 4) {
			onNew++
		}
	}
	var bytes uint64
	for _, s := range nst {
		moved += s.Stats().GrowKeys
		bytes += s.Stats().GrowBytes
	}
	if held := nst[4].Stats().KeysHeld; held != onNew {
		t.Errorf("new rank holds %d keys, %d placed there", held, onNew)
	}
	if moved != uint64(onNew) || onNew == 0 {
		t.Errorf("%d keys moved, %d placed on the new rank", moved, onNew)
	}
	t.Logf("%d of %d keys moved to the new rank, %d bytes", moved, len(keys), bytes)
}

// Copies 2: rank 1 fails and its keys get new copies, then rank 3 does the
// same, then both are replaced at once. The keys placed on ranks 1 and 3
// (now two new, empty ranks) live only on other ranks by then: they keep
// their values, as does every other (the transition view reads the old
// copies; a store that switched to the new placement at once would find
// nothing).
func TestGrowBothCopiesNew(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	w, st := openSpares(t, 6, 2, smallOptions(2))
	want := putKeys(ctx, t, st, 300)
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	crashAndWait(ctx, t, w, st, 1)
	waitWhole(ctx, t, st[0], keys)
	crashAndWait(ctx, t, w, st, 3)
	waitWhole(ctx, t, st[0], keys)
	onlyNew := 0
	for k := range want {
		p := st[0].current().place.replicas(st[0].hash([]byte(k)), func(ftrma.Rank) bool { return false })
		if slices.Equal(slices.Sorted(slices.Values(p)), []ftrma.Rank{1, 3}) {
			onlyNew++
		}
	}
	if onlyNew == 0 {
		t.Fatal("no key is placed on the two replaced ranks alone: the test tests nothing")
	}
	// The survivors rewrite some keys: their new values must survive too.
	for i := range 300 {
		if i%5 == 0 {
			k := fmt.Sprintf("k%d", i)
			if err := st[[]int{0, 2, 4, 5}[i%4]].Put(ctx, []byte(k), []byte("again")); err != nil {
				t.Fatal(err)
			}
			want[k] = "again"
		}
	}
	nst, errs := replaceAndGrow(ctx, t, w, st, []ftrma.Rank{1, 3})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	checkPlaced(ctx, t, nst, want)
	t.Logf("%d keys placed on the two new ranks alone", onlyNew)
}

// Bad input: a communicator of another size, Grow twice with the same one,
// Join on a rank that is not a replacement. Each is a clear error.
func TestGrowBadInput(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openSpares(t, 4, 1, smallOptions(2))
	if _, err := Join(ctx, w.Comms[0], Config{}); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Join on an original rank: %v, want ErrInvalid", err)
	}
	if err := st[0].Grow(ctx, w.Comms[0]); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Grow on the store's own communicator: %v, want ErrInvalid", err)
	}
	// A communicator of 3 ranks.
	errs := w.RunRanks(ctx, []ftrma.Rank{0, 1, 2, 3}, func(ctx context.Context, c *comm.Comm) error {
		sub, err := c.Split(ctx, int(c.Rank())/3, int(c.Rank()))
		if err != nil {
			return err
		}
		if sub.Size() != 3 {
			return nil
		}
		if err := st[c.Rank()].Grow(ctx, sub); !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("Grow with %d ranks: %v, want ErrInvalid", sub.Size(), err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Error(r, err)
		}
	}
	crashAndWait(ctx, t, w, st, 2)
	nst, gerrs := replaceAndGrow(ctx, t, w, st, []ftrma.Rank{2})
	for r, err := range gerrs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := nst[0].Grow(ctx, nst[2].current().c); err == nil || !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("second Grow with the same communicator: %v, want ErrInvalid", err)
	}
}

// Puts and Gets from every rank on a few keys go on while a rank is
// replaced and the store grows; the history is linearizable.
func TestGrowLinearizable(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	w, st := openSpares(t, 5, 1, smallOptions(2))
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var ops []porcupine.Operation
	var stop atomic.Bool
	var wg sync.WaitGroup
	const keys = 4
	// client runs operations on s until stop; s may be swapped for the
	// rank's store after Join (cur).
	client := func(id int, cur func() *Store, rank ftrma.Rank) {
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		for seq := 0; !stop.Load(); seq++ {
			s := cur()
			if s == nil {
				time.Sleep(time.Millisecond)
				continue
			}
			k := rng.IntN(keys)
			in := kvcheck.Input{Kind: "get", Key: k}
			if rng.IntN(2) == 0 {
				in = kvcheck.Input{Kind: "put", Key: k, Value: fmt.Sprintf("%d.%d", id, seq)}
			}
			op := porcupine.Operation{ClientId: id, Input: in, Call: now()}
			octx, cancel := context.WithTimeout(ctx, 20*time.Second)
			var out kvcheck.Output
			key := []byte(fmt.Sprint("lin", k))
			if in.Kind == "put" {
				if err := s.Put(octx, key, []byte(in.Value)); err != nil {
					out.Unknown = true
				}
			} else {
				v, err := s.Get(octx, key)
				switch {
				case errors.Is(err, ErrNotFound):
				case err != nil:
					cancel()
					continue // a failed read says nothing
				default:
					out.Value = string(v)
				}
			}
			cancel()
			op.Output, op.Return = out, now()
			if out.Unknown {
				op.Return = math.MaxInt64
			}
			mu.Lock()
			ops = append(ops, op)
			mu.Unlock()
			time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
		}
	}
	var joined atomic.Pointer[Store]
	for r := range 5 {
		if r == 3 {
			continue
		}
		for c := range 2 {
			wg.Go(func() { client(2*r+c, func() *Store { return st[r] }, ftrma.Rank(r)) })
		}
	}
	wg.Go(func() { client(2*3, func() *Store { return joined.Load() }, 3) })
	// awaitOps waits until client id (-1: any) has done k more operations:
	// the phases of the run each hold some of the history.
	awaitOps := func(id, k int) {
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, op := range ops {
				if id < 0 || op.ClientId == id {
					n++
				}
			}
			return n
		}
		for want := count() + k; count() < want; {
			if ctx.Err() != nil {
				t.Errorf("client %d did not do %d more operations: %v", id, k, ctx.Err())
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	awaitOps(-1, 40)
	crashAndWait(ctx, t, w, st, 3)
	awaitOps(-1, 40)
	nst, errs := replaceAndGrow(ctx, t, w, st, []ftrma.Rank{3})
	joined.Store(nst[3])
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	awaitOps(2*3, 20) // the replacement's client too
	stop.Store(true)
	wg.Wait()
	t.Logf("%d operations", len(ops))
	checkLin(t, ops, 0)
}

// A rank crashes in the middle of Grow's move: a survivor (rank 1, while
// it copies keys), or the new rank (while rank 0 copies keys to it). Every
// other survivor's Grow returns (nil or an error wrapping
// ftrma.ErrProcFailed) within the context, and every key is still
// readable at every live survivor with its value: the old replicas count
// until the move is done, and recovery works in whatever view is current.
func TestGrowFailsMidMove(t *testing.T) {
	const spare = 6 // the world rank of the one spare, which takes number 4
	for _, c := range []struct {
		name   string
		mover  int          // the survivor whose move sets the crash off
		victim ftrma.Rank   // the world rank crashed
		dead   []ftrma.Rank // the ranks of the new communicator then dead
	}{
		{"survivor", 1, 1, []ftrma.Rank{1}},
		{"new rank", 0, spare, []ftrma.Rank{4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t, 2*time.Minute)
			w, st := openSpares(t, 6, 1, smallOptions(3))
			want := putKeys(ctx, t, st, 300)
			crashAndWait(ctx, t, w, st, 4)
			var once sync.Once
			var fired atomic.Bool
			testHookMove.set(t, func(s *Store, i int) {
				if int(s.me) == c.mover && i == 10 {
					once.Do(func() { w.Crash(c.victim); fired.Store(true) })
				}
			})
			// The crashed rank's own Grow may only end with its context.
			short, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			nst, errs := replaceAndGrow(short, t, w, st, []ftrma.Rank{4})
			if !fired.Load() {
				t.Fatalf("rank %d moved fewer than 11 keys: the crash never happened", c.mover)
			}
			for r, err := range errs {
				if !slices.Contains(c.dead, r) && err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			for _, r := range c.dead {
				nst[r] = nil
			}
			for k, val := range want {
				for r, s := range nst {
					if s == nil {
						continue
					}
					got, err := s.Get(ctx, []byte(k))
					if err != nil || string(got) != val {
						t.Fatalf("%s at rank %d: %q, %v; want %q", k, r, got, err, val)
					}
				}
			}
		})
	}
}

// A survivor crashes once the window is rebuilt, before Grow's exchange:
// Grow fails at every survivor and Join at the new rank, all with
// ftrma.ErrProcFailed, and the store stays as it was. Every member of the
// new communicator, the new rank included, then Replaces the crashed rank
// too, and Grow and Join on the result succeed: the new rank takes part in
// the window's second rebuild with the window of its failed Join (the
// survivors' window counts it a member since the first). Every key then
// reads back from every rank, placed where its placement says.
func TestGrowRetriedAfterFailedExchange(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	defer stacksIfSlow(t, 50*time.Second)()
	w, st := openSpares(t, 6, 2, smallOptions(3))
	want := putKeys(ctx, t, st, 300)
	crashAndWait(ctx, t, w, st, 4)
	var once sync.Once
	var fired atomic.Bool
	testHookGrow.set(t, func(_ *Store, at string) {
		if at != "exchange" {
			return
		}
		once.Do(func() { w.Crash(1); fired.Store(true) })
	})
	survivors := []ftrma.Rank{0, 2, 3, 5} // and rank 1, until the hook
	var mu sync.Mutex
	ncs := map[ftrma.Rank]*comm.Comm{}
	errs := map[ftrma.Rank]error{}
	var wg sync.WaitGroup
	for _, r := range append([]ftrma.Rank{1}, survivors...) {
		wg.Go(func() {
			nc, err := w.Comms[r].Replace(ctx)
			if err == nil {
				err = st[r].Grow(ctx, nc)
			}
			mu.Lock()
			ncs[r], errs[r] = nc, err
			mu.Unlock()
		})
	}
	var first commtest.Joined
	select {
	case first = <-w.Joined():
	case <-ctx.Done():
		t.Fatal("no spare joined")
	}
	if first.Err != nil {
		t.Fatalf("spare %d: %v", first.Rank, first.Err)
	}
	if _, err := Join(ctx, first.Comm, Config{}); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("first Join: %v, want ErrProcFailed", err)
	}
	wg.Wait()
	if !fired.Load() {
		t.Fatal("no survivor reached the exchange")
	}
	for _, r := range survivors {
		if err := errs[r]; ncs[r] == nil || !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d's first Grow: %v, want ErrProcFailed after a Replace", r, err)
		}
	}
	delete(errs, 1)
	// The second round, over the communicator of the first Replace.
	nst := slices.Clone(st)
	nst[1], nst[4] = nil, nil
	for _, r := range survivors {
		wg.Go(func() {
			nc, err := ncs[r].Replace(ctx)
			if err == nil {
				err = st[r].Grow(ctx, nc)
			}
			mu.Lock()
			errs[r] = err
			mu.Unlock()
		})
	}
	wg.Go(func() {
		nc, err := first.Comm.Replace(ctx)
		var s *Store
		if err == nil {
			s, err = Join(ctx, nc, Config{})
		}
		mu.Lock()
		nst[4], errs[4] = s, err
		mu.Unlock()
	})
	var second commtest.Joined
	select {
	case second = <-w.Joined():
	case <-ctx.Done():
		t.Fatal("no second spare joined")
	}
	if second.Err != nil {
		t.Fatalf("spare %d: %v", second.Rank, second.Err)
	}
	s, err := Join(ctx, second.Comm, Config{})
	wg.Wait()
	nst[1], errs[1] = s, err
	t.Cleanup(func() { stopAll(nst) })
	for _, r := range slices.Sorted(maps.Keys(errs)) {
		if err := errs[r]; err != nil {
			t.Errorf("rank %d, second round: %v", r, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	checkPlaced(ctx, t, nst, want)
}

// exchangeComm is a communicator for exchange alone: its Allgathers return
// rounds, its agreement says ok, and ProcFailed names the failed ranks.
type exchangeComm struct {
	window.Comm
	rounds [][][]byte
	agreed uint64
	failed map[ftrma.Rank]bool
}

func (c *exchangeComm) Size() int { return 3 }
func (c *exchangeComm) Allgather(context.Context, []byte) ([][]byte, error) {
	r := c.rounds[0]
	c.rounds = c.rounds[1:]
	return r, nil
}
func (c *exchangeComm) Agree(_ context.Context, flag uint64) (uint64, error) {
	return min(flag, c.agreed), nil
}
func (c *exchangeComm) ProcFailed(r ftrma.Rank) bool { return c.failed[r] }

// Grow's exchange reads a round that is not whole (a new rank's without
// its table): when a rank failed meanwhile, the failure is the cause, and
// every member says ErrProcFailed alike so that all of them replace it and
// try again (DESIGN.md F22: a survivor said ErrInvalid, its Respawn gave
// up, and the new rank waited for a Replace that never came); with no
// failure it stays the error of the round itself.
func TestExchangeBlamesAFailure(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	broken := [][]byte{{1}, {2}, {3}} // no rank's round parses
	second := func([][]byte) ([]byte, error) { return []byte{4}, nil }
	for _, c := range []struct {
		name   string
		failed map[ftrma.Rank]bool
		agreed uint64
		fails  bool // ErrProcFailed expected
	}{
		{"a rank failed", map[ftrma.Rank]bool{2: true}, 0, true},
		{"no failure", nil, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc := &exchangeComm{rounds: [][][]byte{broken, broken}, agreed: c.agreed, failed: c.failed}
			_, err := exchange(ctx, nc, nil, []byte{1}, second)
			if err == nil {
				t.Fatal("exchange of broken rounds succeeded")
			}
			if got := errors.Is(err, ftrma.ErrProcFailed); got != c.fails {
				t.Fatalf("exchange: %v; ErrProcFailed %v, want %v", err, got, c.fails)
			}
		})
	}
}
