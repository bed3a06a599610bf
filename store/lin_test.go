package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/internal/check/kvcheck"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/memnet"
)

// The store's operations on a few shared keys stay linearizable when a whole
// host fails: kvlin's workload (e2e/testprog/kv.go) on 8 ranks in 4 hosts of
// 2 (Config.Host), Copies 3 (so replicas go to distinct hosts), both ranks
// of one host failing at once in the middle, the history checked with
// porcupine, and every rank's slot table watched for a key with two slots.
//
// It was written to reproduce the stale reads the 4-host e2e partition runs
// found after a host was cut off (TestClusterStorePartition), and does not:
// none of its modes has failed in well over a hundred runs. So it runs only
// when FTRMA_LIN_RUNS is set (the number of runs of each mode);
// FTRMA_LIN_SEED sets the first seed, FTRMA_LIN_KEYS, FTRMA_LIN_CLIENTS
// (per rank) and FTRMA_LIN_PACE (pause of up to, between operations) the
// workload (default 4, 2, 6ms), FTRMA_LIN_DEFAULTS=1 the default Config
// instead of small ones. The modes:
//   - crash: memnet crashes both ranks; the others learn of it at once;
//   - cut: the host is isolated first (operations toward it hang), its
//     ranks crash a second later, and the survivors learn of both together,
//     as when ftrun declares a lost host's ranks failed;
//   - late: the transports lose both ranks at once (operations toward them
//     fail), the runtimes learn of it a second later, as when a connection
//     is lost under ftrun before ftrun's verdict;
//   - shm: shared memory (torn reads possible, no fault injection): no
//     failure;
//   - shmleave: shared memory, both ranks of the host leave (close).

func TestLinearizableAcrossHostFailure(t *testing.T) {
	runs, err := strconv.Atoi(os.Getenv("FTRMA_LIN_RUNS"))
	if err != nil || runs < 1 {
		t.Skip("set FTRMA_LIN_RUNS to run (it does not reproduce the e2e stale reads; see above)")
	}
	seed := uint64(1)
	if v, err := strconv.ParseUint(os.Getenv("FTRMA_LIN_SEED"), 10, 64); err == nil {
		seed = v
	}
	failed := 0
	modes := []string{"crash", "cut", "late", "shm", "shmleave"}
	for i := range runs {
		for _, mode := range modes {
			if !t.Run(fmt.Sprintf("%s/seed%d", mode, seed+uint64(i)), func(t *testing.T) { testLinHostFailure(t, seed+uint64(i), mode) }) {
				failed++
			}
		}
	}
	if runs > 1 {
		t.Logf("%d of %d runs failed", failed, len(modes)*runs)
	}
}

// openHosts opens a store on every rank of an n-rank world newWorld builds,
// rank r on host r/perHost.
func openHosts(t *testing.T, newWorld worldFunc, n, perHost int, opt Config) (*commtest.World, []*Store) {
	t.Helper()
	w := newWorld(t, n)
	ctx := testCtx(t, time.Minute)
	stores := make([]*Store, n)
	for r, err := range w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		o := opt
		o.Host = fmt.Sprintf("h%d", int(c.Rank())/perHost+1)
		s, err := Open(ctx, c, o)
		stores[c.Rank()] = s
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: open: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range stores {
			if s != nil && !s.closed.Swap(true) {
				close(s.stop)
				<-s.done
			}
		}
	})
	return w, stores
}

// testLinHostFailure runs the workload once; the victim host crashes (its
// ranks' transports shut down: the others learn of it at once), or with cut
// its links are cut silently and its ranks' clients stop, so that the
// others' operations toward it hang until the failure detector declares
// its ranks failed, as when a real host is cut off.
func testLinHostFailure(t *testing.T, seed uint64, mode string) {
	const (
		ranks, perHost = 8, 2
		after          = 700 * time.Millisecond // run on after every survivor knows of the failure
		stall          = time.Second            // cut: from the cut to the failure becoming known
	)
	keys, clients, pace := 4, 2, 6*time.Millisecond // keys, clients per rank, pause of up to pace
	if v, err := strconv.Atoi(os.Getenv("FTRMA_LIN_KEYS")); err == nil {
		keys = v
	}
	if v, err := strconv.Atoi(os.Getenv("FTRMA_LIN_CLIENTS")); err == nil {
		clients = v
	}
	if v, err := time.ParseDuration(os.Getenv("FTRMA_LIN_PACE")); err == nil {
		pace = v
	}
	rng := rand.New(rand.NewPCG(seed, 0x11a))
	victimHost := rng.IntN(ranks / perHost)
	failAt := time.Duration(300+rng.IntN(500)) * time.Millisecond
	ctx := testCtx(t, 2*time.Minute)
	newWorld, cut := commtest.New, mode == "cut"
	var late []*lateDown
	switch mode {
	case "shm", "shmleave":
		newWorld = commtest.NewSHM
	case "late":
		newWorld = func(tb testing.TB, n int) *commtest.World {
			var w *commtest.World
			w, late = newLateWorld(tb, n)
			return w
		}
	}
	opt := smallOptions(3)
	if os.Getenv("FTRMA_LIN_DEFAULTS") != "" {
		opt = Config{Copies: 3}
	}
	world, st := openHosts(t, newWorld, ranks, perHost, opt)
	key := func(k int) []byte { return fmt.Appendf(nil, "lin/%d", k) }
	if mode == "shm" {
		victimHost = -1 // no failure (shared memory cannot crash a rank)
	}
	victim := func(r int) bool { return r/perHost == victimHost }

	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var failed atomic.Int64 // when the victims failed, 0 before
	var end atomic.Int64    // when the clients stop, 0 while unknown

	var mu sync.Mutex // guards ops, pending and errs
	var ops []porcupine.Operation
	errs := map[string]int{}
	pending := make([]*porcupine.Operation, ranks*clients) // a victim client's operation under way
	var survivors, victims sync.WaitGroup
	for r, s := range st {
		var seenMu sync.Mutex
		var seen []string // values gets returned lately, for compare-and-swaps
		for g := range clients {
			cl := r*clients + g
			crng := rand.New(rand.NewPCG(seed, uint64(cl)))
			wg := &survivors
			if victim(r) {
				wg = &victims
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; ; seq++ {
					time.Sleep(time.Duration(crng.Int64N(int64(pace) + 1)))
					if e := end.Load(); e != 0 && now() > e || victim(r) && failed.Load() != 0 {
						return
					}
					k := crng.IntN(keys)
					in := kvcheck.Input{Key: k}
					switch x := crng.IntN(10); {
					case x < 4:
						in.Kind, in.Value = "put", fmt.Sprintf("c%d.%d", cl, seq)
					case x < 5:
						in.Kind = "del"
					case x < 6:
						in.Kind, in.Value = "cas", fmt.Sprintf("c%d.%d", cl, seq)
						seenMu.Lock()
						if o := crng.IntN(2*len(seen) + 1); o < len(seen) {
							in.Old = seen[o]
						}
						seenMu.Unlock()
					default:
						in.Kind = "get"
					}
					op := porcupine.Operation{ClientId: cl, Input: in, Call: now()}
					if victim(r) {
						mu.Lock()
						pending[cl] = &op
						mu.Unlock()
					}
					out, err := callKV(ctx, s, key(k), in)
					op.Return = now()
					mu.Lock()
					if victim(r) {
						if pending[cl] == nil {
							mu.Unlock()
							return // counted as under way at the failure
						}
						pending[cl] = nil
					}
					if err != nil && !victim(r) {
						errs[in.Kind+": "+err.Error()]++
					}
					if err != nil && in.Kind == "get" {
						mu.Unlock()
						continue // no effect
					}
					if err != nil {
						out = kvcheck.Output{Unknown: true}
						op.Return = math.MaxInt64
					}
					op.Output = out
					ops = append(ops, op)
					mu.Unlock()
					if in.Kind == "get" && out.Value != "" {
						seenMu.Lock()
						seen = append(seen[max(0, len(seen)-15):], out.Value)
						seenMu.Unlock()
					}
				}
			}()
		}
	}
	// hostFails fails the victim host.
	hostFails := func() {
		// The victims stop: what they had under way may or may not take
		// effect (a write), or says nothing (a read of a dead rank may be
		// stale), whenever it returns.
		mu.Lock()
		failed.Store(now())
		for _, op := range pending {
			if op != nil && op.Input.(kvcheck.Input).Kind != "get" {
				ops = append(ops, porcupine.Operation{ClientId: op.ClientId, Input: op.Input, Call: op.Call,
					Output: kvcheck.Output{Unknown: true}, Return: math.MaxInt64})
			}
		}
		clear(pending)
		mu.Unlock()
		if late != nil {
			// The transports lose the host's ranks at once (operations
			// toward them fail), the runtimes learn of their failure
			// later, as when ftrun reports what the transport found.
			for _, l := range late {
				for r := range ranks {
					if victim(r) {
						l.hold(ftrma.Rank(r))
					}
				}
			}
			for r := range ranks {
				if victim(r) {
					world.Net.Crash(ftrma.Rank(r))
				}
			}
			time.Sleep(stall)
			for _, l := range late {
				l.release()
			}
		}
		if cut {
			// Silence first, as when a host's links go: operations toward it
			// hang. Then the survivors learn of both failures together, as
			// when ftrun declares a lost host's ranks failed.
			for r := range ranks {
				if victim(r) {
					world.Net.Isolate(ftrma.Rank(r))
				}
			}
			time.Sleep(stall)
		}
		for r := range ranks {
			switch {
			case !victim(r):
			case world.Net != nil:
				world.Net.Crash(ftrma.Rank(r))
			default:
				// Shared memory cannot crash a rank: it leaves.
				s := st[r]
				s.closed.Store(true)
				close(s.stop)
				<-s.done
				world.Comms[r].Close()
			}
		}
		for r, s := range st {
			for v := range ranks {
				for !victim(r) && victim(v) && !s.current().c.ProcFailed(ftrma.Rank(v)) {
					if ctx.Err() != nil {
						t.Fatalf("rank %d never learned of rank %d's failure", r, v)
					}
					time.Sleep(time.Millisecond)
				}
			}
		}
	}
	watchDone := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-watchDone:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for r, s := range st {
				if victim(r) && failed.Load() != 0 {
					continue
				}
				for k, sl := range dupSlots(ctx, s) {
					t.Errorf("%.3f ms: rank %d holds key %s in slots %v", float64(now())/1e6, r, k, sl)
				}
			}
		}
	}()
	defer func() { close(watchDone); watch.Wait() }()
	time.Sleep(failAt)
	if mode != "shm" {
		hostFails()
	}
	known := now()
	end.Store(known + int64(after))
	survivors.Wait()
	if mode == "shm" {
		t.Logf("%d operations", len(ops))
	} else {
		t.Logf("%d operations; host h%d failed at %.3f ms, known at %.3f ms", len(ops), victimHost+1,
			float64(failed.Load())/1e6, float64(known)/1e6)
	}
	for e, n := range errs {
		t.Logf("%d× %s", n, e)
	}
	checkLin(t, ops, failed.Load())
}

// callKV makes the store call in describes on key, as a history records
// it: a get that finds nothing returns "" and no error.
func callKV(ctx context.Context, s *Store, key []byte, in kvcheck.Input) (out kvcheck.Output, err error) {
	switch in.Kind {
	case "put":
		err = s.Put(ctx, key, []byte(in.Value))
	case "del":
		err = s.Delete(ctx, key)
	case "cas":
		var old []byte
		if in.Old != "" {
			old = []byte(in.Old)
		}
		out.Swapped, err = s.CompareAndSwap(ctx, key, old, []byte(in.Value))
	case "get":
		var v []byte
		v, err = s.Get(ctx, key)
		out.Value = string(v)
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
	}
	return out, err
}

// checkLin checks the history key by key and, for a key that is not
// linearizable, logs its operations around the point where every
// linearization the checker tried got stuck.
func checkLin(t *testing.T, ops []porcupine.Operation, crashed int64) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(kvcheck.Model, ops, 30*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Logf("porcupine timed out on %d operations", len(ops))
		return
	}
	ms := func(ns int64) string {
		if ns == math.MaxInt64 {
			return "   never"
		}
		return fmt.Sprintf("%8.3f", float64(ns)/1e6)
	}
	parts := kvcheck.Model.Partition(ops)
	for i, lins := range info.PartialLinearizationsOperations() {
		if len(lins) == 0 || len(parts[i]) == 0 {
			continue
		}
		longest := 0
		for _, l := range lins {
			longest = max(longest, len(l))
		}
		if longest == len(parts[i]) {
			continue // this key is fine
		}
		// Where the checker got stuck: after the latest return among the
		// operations of its longest partial linearizations.
		var stuck int64
		for _, l := range lins {
			if len(l) == longest {
				for _, op := range l {
					if op.Return != math.MaxInt64 {
						stuck = max(stuck, op.Return)
					}
				}
			}
		}
		p := slices.Clone(parts[i])
		slices.SortFunc(p, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		var b strings.Builder
		for _, op := range p {
			if op.Call > stuck+20e6 || op.Return != math.MaxInt64 && op.Return < stuck-40e6 {
				continue
			}
			fmt.Fprintf(&b, "r%d c%-2d %s..%s %s\n", op.ClientId/2, op.ClientId, ms(op.Call), ms(op.Return),
				kvcheck.Model.DescribeOperation(op.Input, op.Output))
		}
		t.Errorf("key %d not linearizable (%d ops, crash at %s ms, stuck near %s ms):\n%s",
			p[0].Input.(kvcheck.Input).Key, len(p), ms(crashed), ms(stuck), b.String())
	}
	if !t.Failed() {
		t.Errorf("history not linearizable (%d ops)", len(ops))
	}
}

// dupSlots returns, for each key that has more than one live slot at s's
// rank, the slots (a key never has two slots at a rank).
func dupSlots(ctx context.Context, s *Store) map[string][]int {
	by := map[string][]int{}
	for i := range s.opt.Slots {
		base := hdrWords + i*slotWords
		ka := atomic.LoadUint64(&s.table[base+slotKey])
		if ka == 0 || ka == slotTomb {
			continue
		}
		var hdr [keyHeader]byte
		if s.current().w.Get(s.me, ka, hdr[:]) != nil || s.current().w.Flush(ctx, s.me) != nil {
			continue
		}
		n := word(hdr[:], 1)
		if n == 0 || n > 64 {
			continue
		}
		b := make([]byte, keyBlockLen(int(n)))
		if s.current().w.Get(s.me, ka, b) != nil || s.current().w.Flush(ctx, s.me) != nil {
			continue
		}
		k := string(b[keyHeader : keyHeader+n])
		if atomic.LoadUint64(&s.table[base+slotKey]) == ka {
			by[k] = append(by[k], i)
		}
	}
	for k, v := range by {
		if len(v) < 2 {
			delete(by, k)
		}
	}
	return by
}

// lateDown is a memnet endpoint whose runtime hears of lost peers only when
// the test says so: the transport fails operations toward a held peer at
// once, while the runtime (and so the store) does not count it failed yet,
// as under ftrun, where a lost connection is only a suspicion until ftrun
// reports the peer's exit.
type lateDown struct {
	*memnet.Transport

	mu   sync.Mutex // guards the fields below
	recv transport.Receiver
	held map[ftrma.Rank]error // peers whose loss is held back (nil: not lost yet)
}

func (l *lateDown) SetReceiver(r transport.Receiver) {
	l.mu.Lock()
	l.recv = r
	l.mu.Unlock()
	l.Transport.SetReceiver(l)
}

func (l *lateDown) HandleMessage(from ftrma.Rank, msg []byte) {
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	r.HandleMessage(from, msg)
}

func (l *lateDown) HandlePeerDown(peer ftrma.Rank, err error) {
	l.mu.Lock()
	r := l.recv
	if _, ok := l.held[peer]; ok {
		l.held[peer] = err
		r = nil
	}
	l.mu.Unlock()
	if r != nil {
		r.HandlePeerDown(peer, err)
	}
}

// hold holds back the loss of peer.
func (l *lateDown) hold(peer ftrma.Rank) {
	l.mu.Lock()
	l.held[peer] = nil
	l.mu.Unlock()
}

// release passes on the losses held back.
func (l *lateDown) release() {
	l.mu.Lock()
	held, r := l.held, l.recv
	l.held = map[ftrma.Rank]error{}
	l.mu.Unlock()
	for p, err := range held {
		if err != nil {
			r.HandlePeerDown(p, err)
		}
	}
}

// newLateWorld is commtest.New over lateDown endpoints.
func newLateWorld(tb testing.TB, n int) (*commtest.World, []*lateDown) {
	w := &commtest.World{Net: memnet.New(n), Comms: make([]*comm.Comm, n)}
	ls := make([]*lateDown, n)
	for r := range n {
		ls[r] = &lateDown{Transport: w.Net.Endpoint(ftrma.Rank(r)), held: map[ftrma.Rank]error{}}
		cfg := commtest.TestConfig()
		cfg.OnDeclaredFailed = func(string) {}
		var err error
		if w.Comms[r], err = comm.New(ls[r], cfg); err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	tb.Cleanup(w.Close)
	return w, ls
}
