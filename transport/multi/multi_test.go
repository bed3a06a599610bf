//go:build linux

package multi_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/multi"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/tcp"
)

// regions has every rank allocate and register size bytes and returns the
// memory and the keys, by rank.
func (w *world) regions(tb testing.TB, size int) ([][]byte, []transport.Key) {
	tb.Helper()
	mems := make([][]byte, len(w.ts))
	keys := make([]transport.Key, len(w.ts))
	for r, m := range w.ts {
		mems[r] = must(m.Alloc(size))
		keys[r] = must(m.Register(mems[r]))
	}
	return mems, keys
}

func word(mem []byte, i int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[8*i])) }

// Routes: the ranks of a host go through shm, the others through tcp, and
// each sub-transport refuses the ranks it does not serve.
func TestRoutesByHost(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{})
	for me, m := range w.ts {
		for r := range w.ts {
			want := "tcp"
			if w.sameHost(ftrma.Rank(me), ftrma.Rank(r)) {
				want = "shm"
			}
			if got := m.Route(ftrma.Rank(r)); got != want {
				t.Errorf("rank %d: Route(%d) = %q, want %q", me, r, got, want)
			}
		}
		if got := m.Route(-1) + m.Route(4); got != "" {
			t.Errorf("rank %d: Route out of range = %q", me, got)
		}
		want := transport.CapOrdered | transport.CapRemoteCompletion | transport.CapLocalAtomics | transport.CapWholeWords
		if got := m.Caps(); got != want {
			t.Errorf("rank %d: Caps %b, want %b", me, got, want)
		}
		if got := m.RegionLimit(); got != 4096 {
			t.Errorf("rank %d: RegionLimit %d, want shm's 4096", me, got)
		}
		if m.Addr() != w.tcps[me].Addr() {
			t.Errorf("rank %d: Addr %q, want tcp's %q", me, m.Addr(), w.tcps[me].Addr())
		}
	}
	// The paths really are separate: shm does not reach the other host,
	// tcp does not reach this host's other rank.
	if _, err := w.shms[0].Write(2, 1, 0, make([]byte, 8)); !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "not served") {
		t.Errorf("shm of rank 0 toward rank 2: %v, want not served", err)
	}
	if err := w.tcps[0].Send(1, []byte("x")); !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "not a peer") {
		t.Errorf("tcp of rank 0 toward rank 1: %v, want not a peer", err)
	}
	if _, err := w.ts[0].Write(4, 1, 0, nil); !errors.Is(err, ftrma.ErrRankOutOfRange) {
		t.Errorf("write toward rank 4: %v", err)
	}
}

// Every operation between every pair of ranks, self included, through
// whichever transport the route names, with one key per region: on two
// hosts of two ranks, and on three hosts whose ranks are not contiguous,
// one of them alone on its host.
func TestEveryPair(t *testing.T) {
	for _, hosts := range [][][]ftrma.Rank{twoHosts, {{0, 3}, {1}, {4, 2}}} {
		t.Run(fmt.Sprint(hosts), func(t *testing.T) { everyPair(t, hosts) })
	}
}

func everyPair(t *testing.T, hosts [][]ftrma.Rank) {
	w := newWorld(t, hosts, worldOpts{})
	ctx := testCtx(t)
	n := len(w.ts)
	// Per target region: word 4i is origin i's written word, 4i+1 its CAS
	// word, 4i+2 its fetch-add word.
	mems, keys := w.regions(t, 4*8*n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range w.ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				for j := range n {
					tr, key, base := ftrma.Rank(j), keys[j], uint64(32*i)
					val := make([]byte, 8)
					binary.NativeEndian.PutUint64(val, uint64(100*i+j))
					if _, err := m.Write(tr, key, base, val); err != nil {
						return err
					}
					var old uint64
					if _, err := m.CompareAndSwap64(tr, key, base+8, 0, uint64(i+1), &old); err != nil {
						return err
					}
					var prev uint64
					for range 3 {
						if _, err := m.FetchAndAdd64(tr, key, base+16, 5, &prev); err != nil {
							return err
						}
					}
					if err := m.Flush(ctx, tr); err != nil {
						return fmt.Errorf("flush %d: %w", j, err)
					}
					if old != 0 || prev != 10 {
						return fmt.Errorf("toward %d: CAS saw %d, last fetch-add saw %d", j, old, prev)
					}
					got := make([]byte, 24)
					seq, err := m.Read(tr, key, base, got)
					if err != nil {
						return err
					}
					if err := m.Wait(ctx, tr, seq); err != nil {
						return err
					}
					if a, b, c := binary.NativeEndian.Uint64(got), binary.NativeEndian.Uint64(got[8:]), binary.NativeEndian.Uint64(got[16:]); a != uint64(100*i+j) || b != uint64(i+1) || c != 15 {
						return fmt.Errorf("read back from %d: %d %d %d", j, a, b, c)
					}
					// Out of bounds is the operation's error, reported by Flush.
					m.Write(tr, key, uint64(len(mems[j])), val)
					if err := m.Flush(ctx, tr); !errors.Is(err, ftrma.ErrOutOfBounds) {
						return fmt.Errorf("out-of-bounds write to %d: flush says %v", j, err)
					}
					if err := m.Send(tr, fmt.Appendf(nil, "%d->%d", i, j)); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
	// The owner sees every origin's words in its memory.
	for j := range n {
		for i := range n {
			if a, b, c := atomic.LoadUint64(word(mems[j], 4*i)), atomic.LoadUint64(word(mems[j], 4*i+1)), atomic.LoadUint64(word(mems[j], 4*i+2)); a != uint64(100*i+j) || b != uint64(i+1) || c != 15 {
				t.Errorf("rank %d's memory, origin %d: %d %d %d", j, i, a, b, c)
			}
		}
	}
	for j, rec := range w.recs {
		for i := range n {
			want := fmt.Sprintf("%d->%d", i, j)
			rec.Await(t, ctx, want, func() bool { return len(rec.From(ftrma.Rank(i))) == 1 })
			if got := string(rec.From(ftrma.Rank(i))[0]); got != want {
				t.Errorf("rank %d got %q from %d, want %q", j, got, i, want)
			}
		}
	}
}

// N ranks' fetch-adds on one word, through shm from the target's host and
// through tcp from the other, and the owner's own CPU atomics on it, sum
// exactly; so do CAS-loop increments over both paths.
func TestAtomicsMixedPathsExact(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{})
	ctx := testCtx(t)
	const k = 2000
	n := len(w.ts)
	mems, keys := w.regions(t, 64)
	for _, target := range []ftrma.Rank{0, 3} {
		var wg sync.WaitGroup
		errs := make([]error, n+1)
		for i, m := range w.ts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range k {
					if _, err := m.FetchAndAdd64(target, keys[target], 0, 1, nil); err != nil {
						errs[i] = err
						return
					}
					// A CAS-loop increment of word 1.
					for guess := uint64(0); ; {
						var old uint64
						seq, err := m.CompareAndSwap64(target, keys[target], 8, guess, guess+1, &old)
						if err == nil {
							err = m.Wait(ctx, target, seq)
						}
						if err != nil {
							errs[i] = err
							return
						}
						if old == guess {
							break
						}
						guess = old
					}
				}
				errs[i] = m.Flush(ctx, target)
			}()
		}
		wg.Add(1)
		go func() { // the owner's own atomics (CapLocalAtomics)
			defer wg.Done()
			for range k {
				atomic.AddUint64(word(mems[target], 0), 1)
			}
		}()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", i, err)
			}
		}
		if got, want := atomic.LoadUint64(word(mems[target], 0)), uint64((n+1)*k); got != want {
			t.Errorf("target %d: fetch-add sum %d, want %d", target, got, want)
		}
		if got, want := atomic.LoadUint64(word(mems[target], 1)), uint64(n*k); got != want {
			t.Errorf("target %d: CAS-loop count %d, want %d", target, got, want)
		}
	}
}

// The launcher's exit notice reaches the transport that serves the peer:
// shm's PeerDown for a rank of this host, a fence for a tcp peer. Either
// way the receiver hears of the peer once, with the launcher's cause, and
// operations toward it fail.
func TestPeerDownFromLauncher(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{})
	ctx := testCtx(t)
	_, keys := w.regions(t, 64)
	m, rec := w.ts[0], w.recs[0]
	for _, r := range []ftrma.Rank{1, 2} {
		cause := fmt.Errorf("launcher: the process of rank %d exited: %w", r, ftrma.ErrProcFailed)
		m.PeerDown(r, cause)
		m.PeerDown(r, cause) // a second notice changes nothing
		rec.Await(t, ctx, fmt.Sprintf("rank %d down", r), func() bool { return len(rec.DownsOf(r)) > 0 })
		err := rec.DownsOf(r)[0]
		if !errors.Is(err, ftrma.ErrProcFailed) || !strings.Contains(err.Error(), "launcher") {
			t.Errorf("rank %d (%s): peer-down error %v, want the launcher's cause", r, m.Route(r), err)
		}
		if _, err := m.Write(r, keys[r], 0, make([]byte, 8)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("write toward %d after PeerDown: %v", r, err)
		}
		if err := m.Flush(ctx, r); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("flush toward %d after PeerDown: %v", r, err)
		}
		if err := m.Send(r, []byte("x")); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("send toward %d after PeerDown: %v", r, err)
		}
	}
	// The others still work, over both paths.
	for _, r := range []ftrma.Rank{0, 3} {
		if _, err := m.FetchAndAdd64(r, keys[r], 0, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx, r); err != nil {
			t.Errorf("flush toward %d: %v", r, err)
		}
	}
	// Rank 2 loses rank 0 (its connection was cut), and rank 1 is told
	// nothing (shm's PeerDown only raises the fence flag it reads when it
	// next touches rank 0).
	w.recs[2].Await(t, ctx, "rank 2 sees rank 0 go", func() bool { return len(w.recs[2].DownsOf(0)) > 0 })
	for _, m := range w.ts {
		m.Close()
	}
	for _, r := range []ftrma.Rank{1, 2} {
		if n := len(rec.DownsOf(r)); n != 1 {
			t.Errorf("rank 0 heard of rank %d %d times: %v", r, n, rec.DownsOf(r))
		}
	}
}

// A peer that closes is reported down once, over either path, as having
// left.
func TestClosedPeer(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{})
	ctx := testCtx(t)
	_, keys := w.regions(t, 64)
	w.ts[3].Close()
	for r := range 3 {
		rec := w.recs[r]
		rec.Await(t, ctx, fmt.Sprintf("rank %d sees rank 3 leave", r), func() bool { return len(rec.DownsOf(3)) > 0 })
		if err := rec.DownsOf(3)[0]; !errors.Is(err, ftrma.ErrProcFailed) || !errors.Is(err, transport.ErrPeerLeft) {
			t.Errorf("rank %d (route %s): peer-down error %v", r, w.ts[r].Route(3), err)
		}
		if _, err := w.ts[r].Write(3, keys[3], 0, make([]byte, 8)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d: write toward the closed rank: %v", r, err)
		}
	}
}

// Fencing a peer cuts it off on the path that serves it: operations toward
// it fail, and it learns it was fenced.
func TestFenceEachPath(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{})
	ctx := testCtx(t)
	_, keys := w.regions(t, 64)
	for _, r := range []ftrma.Rank{1, 2} {
		if err := w.ts[0].Fence(r); err != nil {
			t.Fatal(err)
		}
		if _, err := w.ts[0].Write(r, keys[r], 0, make([]byte, 8)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("write toward fenced rank %d (%s): %v", r, w.ts[0].Route(r), err)
		}
	}
	if err := w.ts[0].Fence(0); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("fence self: %v", err)
	}
	for _, r := range []ftrma.Rank{1, 2} {
		m, rec := w.ts[r], w.recs[r]
		// The fenced rank finds out at its next operation (shm reads the
		// flag) or when its connection breaks (tcp).
		rec.Await(t, ctx, fmt.Sprintf("rank %d fenced", r), func() bool {
			if _, err := m.Write(0, keys[0], 0, make([]byte, 8)); err == nil {
				m.Flush(ctx, 0)
			}
			return len(rec.DownsOf(0)) > 0
		})
		if _, err := m.Write(0, keys[0], 0, make([]byte, 8)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d (%s): write toward the rank that fenced it: %v", r, m.Route(0), err)
		}
		w.recs[0].Await(t, ctx, fmt.Sprintf("rank 0 hears of fenced rank %d", r), func() bool { return len(w.recs[0].DownsOf(r)) > 0 })
	}
	for _, m := range w.ts {
		m.Close()
	}
	for _, r := range []ftrma.Rank{1, 2} {
		if n := len(w.recs[0].DownsOf(r)); n != 1 {
			t.Errorf("rank 0 heard of rank %d %d times", r, n)
		}
	}
}

// fakeT is a tcp transport with other capabilities, for New's checks.
type fakeT struct {
	*tcp.Transport
	caps transport.Caps
}

func (f fakeT) Caps() transport.Caps { return f.caps }

func TestNewRefusesWhatCannotBeCombined(t *testing.T) {
	w := newWorld(t, [][]ftrma.Rank{{0, 1}}, worldOpts{noConnect: true})
	other := must(shm.Open(shm.Config{Rank: 0, Size: 2, Job: "t", Dir: t.TempDir()}))
	defer other.Close()
	rank1 := must(tcp.Listen(tcp.Config{Rank: 1, Size: 2, Secret: secret}))
	defer rank1.Close()
	st, tt := w.shms[0], w.tcps[0]
	cases := []struct {
		name  string
		subs  []multi.Sub
		route []int
		want  string
	}{
		{"no transports", nil, []int{0, 0}, "no transports"},
		{"no name", []multi.Sub{{T: st}}, []int{0, 0}, "no name"},
		{"other rank", []multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: rank1}}, []int{0, 1}, "rank 1 of 2"},
		{"short route", []multi.Sub{{Name: "shm", T: st}}, []int{0}, "route of 1 ranks"},
		{"bad index", []multi.Sub{{Name: "shm", T: st}}, []int{0, 2}, "routed to transport 2"},
		{"two key choosers", []multi.Sub{{Name: "shm", T: st}, {Name: "shm2", T: other}}, []int{0, 1}, "both choose"},
		{"two reaching every rank", []multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt, Reach: true}, {Name: "tcp2", T: tt, Reach: true}}, []int{0, 1}, "both reach every rank"},
		{"hca atomics", []multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: fakeT{tt, transport.CapOrdered | transport.CapWholeWords}}}, []int{0, 1}, "not atomic with the CPU"},
	}
	for _, c := range cases {
		_, err := multi.New(c.subs, c.route)
		if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", c.name, err, c.want)
		}
	}
	// shm opened for ranks {0} cannot be routed rank 1.
	lone := must(shm.Open(shm.Config{Rank: 0, Size: 2, Job: "u", Dir: t.TempDir(), Ranks: []ftrma.Rank{0}}))
	defer lone.Close()
	if _, err := multi.New([]multi.Sub{{Name: "shm", T: lone}}, []int{0, 0}); !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "does not connect") {
		t.Errorf("rank routed to an shm that does not serve it: %v", err)
	}
	// A transport without ranks is idle: its capabilities and keys do not
	// count, and the multi transport works as the other alone.
	m, err := multi.New([]multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: fakeT{tt, 0}}}, []int{0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if m.Caps() != st.Caps() {
		t.Errorf("caps %b with an idle transport, want shm's %b", m.Caps(), st.Caps())
	}
}

// Registered memory must suit every transport: with shm in use, Alloc
// comes from shm; heap memory registers too (target-executed over shm,
// RegistersForeign), and both paths reach it in place; one key reaches the
// region through both paths; Deregister withdraws it from both.
func TestRegisterOneKeyBothPaths(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{})
	ctx := testCtx(t)
	m := w.ts[1]
	if !m.RegistersForeign() {
		t.Error("multi over shm and tcp does not register foreign memory")
	}
	heap := make([]uint64, 8)
	hk := must(m.Register(unsafe.Slice((*byte)(unsafe.Pointer(&heap[0])), 64)))
	for _, origin := range []ftrma.Rank{0, 2} { // shm (executed by rank 1), then tcp
		seq, err := w.ts[origin].FetchAndAdd64(1, hk, 8, 1, nil)
		if err == nil {
			err = w.ts[origin].Wait(ctx, 1, seq)
		}
		if err != nil {
			t.Fatalf("fetch-and-add on heap memory from rank %d: %v", origin, err)
		}
	}
	if atomic.LoadUint64(&heap[1]) != 2 {
		t.Errorf("heap memory after a fetch-and-add through each path: %d, want 2", heap[1])
	}
	if err := m.Deregister(hk); err != nil {
		t.Fatal(err)
	}
	mem := must(m.Alloc(64))
	key := must(m.Register(mem))
	for _, origin := range []ftrma.Rank{0, 2} { // shm, then tcp
		if _, err := w.ts[origin].FetchAndAdd64(1, key, 0, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.ts[origin].Flush(ctx, 1); err != nil {
			t.Errorf("rank %d (%s): %v", origin, w.ts[origin].Route(1), err)
		}
	}
	if got := atomic.LoadUint64(word(mem, 0)); got != 2 {
		t.Errorf("word %d, want 2", got)
	}
	if err := m.Release(mem); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("release of registered memory: %v", err)
	}
	if err := m.Deregister(key); err != nil {
		t.Fatal(err)
	}
	if err := m.Deregister(key); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Errorf("second deregister: %v", err)
	}
	for _, origin := range []ftrma.Rank{0, 2} {
		w.ts[origin].FetchAndAdd64(1, key, 0, 1, nil)
		if err := w.ts[origin].Flush(ctx, 1); !errors.Is(err, ftrma.ErrUnknownRegion) {
			t.Errorf("rank %d (%s) after deregister: %v", origin, w.ts[origin].Route(1), err)
		}
	}
	if err := m.Release(mem); err != nil {
		t.Error(err)
	}
}

// Without an allocator among the transports, Alloc and Release use the Go
// heap, and keys are counted by the multi transport.
func TestHeapWithoutAllocator(t *testing.T) {
	ts := make([]*tcp.Transport, 2)
	addrs := make([]string, 2)
	for r := range ts {
		ts[r] = must(tcp.Listen(tcp.Config{Rank: ftrma.Rank(r), Size: 2, Secret: secret}))
		addrs[r] = ts[r].Addr()
	}
	ms := make([]*multi.Transport, 2)
	for r := range ms {
		ms[r] = must(multi.New([]multi.Sub{{Name: "tcp", T: ts[r]}}, []int{0, 0}))
		defer ms[r].Close()
	}
	ctx := testCtx(t)
	errc := make(chan error, 2)
	for _, m := range ms {
		go func() { errc <- m.Connect(ctx, addrs) }()
	}
	for range ms {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	mem := must(ms[1].Alloc(16))
	key := must(ms[1].Register(mem))
	if key != 1 {
		t.Errorf("first key %d, want 1", key)
	}
	ms[0].Write(1, key, 8, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	if err := ms[0].Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if mem[8] != 1 || mem[15] != 8 {
		t.Errorf("memory %v", mem)
	}
	if err := ms[1].Release(make([]byte, 8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("release of foreign memory: %v", err)
	}
	if err := ms[1].Release(mem); err != nil {
		t.Error(err)
	}
}

// Messages and peer-down events that come before SetReceiver are held by
// the transport that carries them and delivered to the receiver first.
func TestHeldUntilReceiver(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{noReceiver: true})
	ctx := testCtx(t)
	for _, r := range []ftrma.Rank{1, 2} {
		w.ts[r].SetReceiver(w.recs[r])
		if err := w.ts[r].Send(0, fmt.Appendf(nil, "early from %d", r)); err != nil {
			t.Fatal(err)
		}
	}
	w.ts[0].PeerDown(3, fmt.Errorf("launcher: gone: %w", ftrma.ErrProcFailed))
	rec := w.recs[0]
	w.ts[0].SetReceiver(rec)
	for _, r := range []ftrma.Rank{1, 2} {
		rec.Await(t, ctx, fmt.Sprintf("early message from %d", r), func() bool { return len(rec.From(r)) == 1 })
	}
	rec.Await(t, ctx, "held peer-down event", func() bool { return len(rec.DownsOf(3)) == 1 })
}

// reachOnly is a transport that reaches the ranks of its set alone.
type reachOnly struct {
	transport.Transport
	ranks []ftrma.Rank
}

func (r reachOnly) Reaches(q ftrma.Rank) bool { return slices.Contains(r.ranks, q) }

// AskRoute gives each rank the first transport that reaches it, absent
// ranks Absent, and fails for a rank no transport reaches.
func TestAskRoute(t *testing.T) {
	local := reachOnly{ranks: []ftrma.Rank{1, 3}}
	route, err := multi.AskRoute(5, []ftrma.Rank{4}, local, reachOnly{ranks: []ftrma.Rank{0, 1, 2, 3}})
	if err != nil || !slices.Equal(route, []int{1, 0, 1, 0, multi.Absent}) {
		t.Fatalf("route %v, %v", route, err)
	}
	if _, err := multi.AskRoute(3, nil, local); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("a rank nobody reaches: %v, want ErrInvalid", err)
	}
}
