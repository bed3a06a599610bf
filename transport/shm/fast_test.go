//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// The grace period the unmappers rely on: ReadMemStats does not return
// while a goroutine is pinned. The pinned goroutine watches, pinned, for
// grace to have returned; it would see it if grace did not wait.
func TestGraceWaitsForPinned(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: a pinned goroutine holds its own")
	}
	for round := range 20 {
		var pinned, returned atomic.Bool
		done := make(chan bool)
		go func() {
			procPin()
			pinned.Store(true)
			seen := false
			for i := 0; i < 2_000_000; i++ {
				if returned.Load() {
					seen = true
					break
				}
			}
			procUnpin()
			done <- seen
		}()
		for !pinned.Load() {
			runtime.Gosched()
		}
		grace()
		returned.Store(true)
		if <-done {
			t.Fatalf("round %d: grace returned while a goroutine was pinned", round)
		}
	}
}

// The fast path is taken when both ranks registered for the barrier, and
// not with Config.SlowPath; both give the same results.
func TestFastPathTaken(t *testing.T) {
	if !registerBarrier() {
		t.Skip("NOT RUN: this kernel (or a system-call filter) refuses membarrier's global expedited registration: the fast path is off here")
	}
	for _, slow := range []bool{false, true} {
		ts, _, _ := cluster(t, 2, clusterOpts{cfg: func(c *Config) { c.SlowPath = slow }})
		if ts[0].fast == slow {
			t.Fatalf("SlowPath %v: fast %v (membarrier registration failed?)", slow, ts[0].fast)
		}
		mem := must(ts[1].Alloc(64))
		key := must(ts[1].Register(mem))
		var fast atomic.Int64
		testHookFast = func() { fast.Add(1) }
		for i := range 10 {
			if _, err := ts[0].Write(1, key, 8, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		var old uint64
		if _, err := ts[0].FetchAndAdd64(1, key, 0, 5, &old); err != nil || old != 0 {
			t.Fatalf("fetch-and-add: %v, old %d", err, old)
		}
		testHookFast = nil
		if mem[8] != 9 || mem[0] != 5 {
			t.Fatalf("SlowPath %v: memory %x", slow, mem[:16])
		}
		// The first access resolves the key on the slow path.
		if want := int64(10); !slow && fast.Load() != want {
			t.Fatalf("%d accesses on the fast path, want %d", fast.Load(), want)
		}
		if slow && fast.Load() != 0 {
			t.Fatalf("%d accesses on the fast path with SlowPath", fast.Load())
		}
	}
}

// spinInAccess makes every fast access wait, announced, right before it
// touches the target's memory: the window in which a Deregister, a Fence
// or an unmapping that does not wait for it would let it land late.
func spinInAccess(t *testing.T, spins int) {
	testHookFast = func() { spin(spins) }
	t.Cleanup(func() { testHookFast = nil })
}

// spin busy-waits for n loads of a word nobody writes.
func spin(n int) {
	for i := 0; i < n; i++ {
		if spinSink.Load() != 0 {
			return
		}
	}
}

var spinSink atomic.Int64

// lateWrites runs rounds of: rank 1 writes ones into a region of rank 0
// over and over, rank 0 cuts it off (Deregister, or Fence), clears the
// region and lets rank 1 try again at least 200 times; it returns the
// rounds in which a write landed after the cut returned.
func lateWrites(t *testing.T, rounds int, fence bool) (late int) {
	ctx := testCtx(t)
	if !fence {
		ts, _, _ := cluster(t, 2, clusterOpts{})
		return lateRound(t, ctx, ts, false, rounds)
	}
	for range rounds { // a fence is for good: a new pair of ranks each round
		ts, _, _ := cluster(t, 2, clusterOpts{})
		late += lateRound(t, ctx, ts, true, 1)
	}
	return late
}

// lateRound runs n rounds (one for a fence) on the pair ts.
func lateRound(t *testing.T, ctx context.Context, ts []*Transport, fence bool, n int) (late int) {
	mem := must(ts[0].Alloc(4096))
	var cur atomic.Uint32 // the key rank 1 aims at
	var attempts atomic.Int64
	var fenced atomic.Bool // rank 1 saw the fence: nothing it does lands now
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ones := bytes.Repeat([]byte{0xff}, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if k := cur.Load(); k != 0 {
				if _, err := ts[1].Write(0, transport.Key(k), 0, ones); errors.Is(err, ftrma.ErrProcFailed) {
					fenced.Store(true)
					return
				}
				attempts.Add(1)
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i := range n {
		region := mem[64*(i%64) : 64*(i%64)+64]
		k := must(ts[0].Register(region))
		cur.Store(uint32(k))
		for region[0] != 0xff { // rank 1 reaches it (on the fast path after its first write)
			if ctx.Err() != nil {
				t.Fatalf("round %d: rank 1 never wrote", i)
			}
			runtime.Gosched()
		}
		if fence {
			if err := ts[0].Fence(1); err != nil {
				t.Fatal(err)
			}
		} else if err := ts[0].Deregister(k); err != nil {
			t.Fatal(err)
		}
		clear(region)
		for a := attempts.Load(); attempts.Load() < a+200 && !fenced.Load(); {
			if ctx.Err() != nil {
				t.Fatalf("round %d: rank 1 stopped trying", i)
			}
			runtime.Gosched()
		}
		if !bytes.Equal(region, make([]byte, 64)) {
			late++
		}
	}
	return late
}

// No write lands after Deregister or Fence returns, though every access
// waits announced right before it writes; with the wait for announced
// accesses (drainFast) left out on purpose, writes do land late: the test
// can see what it guards against. (The ranks are goroutines of one process;
// TestNoLateWriteAcrossProcesses has the writer in a process of its own.)
func TestNoLateWriteOnFastPath(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector slows the spinning writers too much to matter; TestNoWriteAfterDeregister runs")
	}
	for _, fence := range []bool{false, true} {
		name := "deregister"
		if fence {
			name = "fence"
		}
		t.Run(name, func(t *testing.T) {
			spinInAccess(t, 50_000)
			if late := lateWrites(t, 40, fence); late != 0 {
				t.Fatalf("a write landed after %s returned in %d of 40 rounds", name, late)
			}
			if fence {
				// Fence's drop of the peer waits a grace period, which in
				// one process also waits for the peer's accesses: the
				// broken handshake shows across processes only.
				return
			}
			testSkipDrainFast = true
			defer func() { testSkipDrainFast = false }()
			if late := lateWrites(t, 40, fence); late == 0 {
				t.Fatalf("with the handshake broken, no late write in 40 rounds: the test cannot see one")
			}
		})
	}
}

// TestNoLateWriteOnFastPath with the writer in a process of its own, where
// only the barrier makes its announcement visible: 40 Deregisters, then a
// Fence. With drainFast left out on purpose, writes land late.
func TestNoLateWriteAcrossProcesses(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector slows the spinning writer too much to matter")
	}
	for _, broken := range []bool{false, true} {
		late := lateWritesOfChild(t, broken)
		t.Logf("handshake broken %v: %d of 41 rounds with a late write", broken, late)
		switch {
		case !broken && late != 0:
			t.Fatalf("a write of the child landed after Deregister or Fence returned in %d rounds", late)
		case broken && late == 0:
			t.Fatal("with the handshake broken, no late write of the child: the test cannot see one")
		}
	}
}

func lateWritesOfChild(t *testing.T, broken bool) (late int) {
	dir, job := t.TempDir(), "late"
	ctx := testCtx(t)
	tr, rec, _, _, _ := parent(t, dir, job)
	cmd, out := startChild(t, "late", dir, job, "SHM_KEY=0", "SHM_SPINS=50000")
	if err := tr.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	m := nextFrom(t, ctx, rec, 0, out)
	key1 := transport.Key(binary.BigEndian.Uint32(m[4:]))
	testSkipDrainFast = broken
	defer func() { testSkipDrainFast = false }()
	mem := must(tr.Alloc(4096))
	word := make([]byte, 8)
	attempts := func() uint64 {
		if seq, err := tr.Read(1, key1, 136, word); err != nil || tr.Wait(ctx, 1, seq) != nil {
			t.Fatalf("read of the child's count: %v\n%s", err, out)
		}
		return binary.NativeEndian.Uint64(word)
	}
	const rounds = 40
	for i := range rounds + 1 {
		fence := i == rounds
		region := mem[64*(i%64) : 64*(i%64)+64]
		k := must(tr.Register(region))
		binary.NativeEndian.PutUint64(word, uint64(k))
		if seq, err := tr.Write(1, key1, 128, word); err != nil || tr.Wait(ctx, 1, seq) != nil {
			t.Fatalf("write of the key to the child: %v", err)
		}
		for region[0] != 0xff {
			if ctx.Err() != nil {
				t.Fatalf("round %d: the child never wrote:\n%s", i, out)
			}
			runtime.Gosched()
		}
		if fence {
			if err := tr.Fence(1); err != nil {
				t.Fatal(err)
			}
			clear(region)
			if err := cmd.Wait(); err != nil { // it sees the fence, and stops
				t.Fatalf("child: %v\n%s", err, out)
			}
		} else {
			if err := tr.Deregister(k); err != nil {
				t.Fatal(err)
			}
			clear(region)
			for a := attempts(); attempts() < a+200; {
				runtime.Gosched()
			}
		}
		if !bytes.Equal(region, make([]byte, 64)) {
			late++
		}
	}
	return late
}

// An unmapping (PeerDown's drop of the peer's mappings, or Close's of
// everything) waits for the fast access under way: a read is held
// announced, right before it touches the peer's memory, for about 1e8
// loads (the hook cannot wait for another goroutine: the grace period stops
// them all), and the unmapping call must return only after it let go. Run
// again in a child process with the grace period left out on purpose, the
// call returns at once, and the read, let go, dies of the access to
// unmapped memory.
func TestNoAccessAfterUnmap(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the held read holds its own")
	}
	broken := os.Getenv("SHM_BREAK_GRACE") == "1"
	if broken {
		testSkipGrace = true
	}
	var armed, held, release, letGo atomic.Bool
	testHookFast = func() {
		if armed.CompareAndSwap(true, false) {
			held.Store(true)
			for i := 0; i < 100_000_000 && !release.Load(); i++ {
			}
			letGo.Store(true)
		}
	}
	defer func() { testHookFast = nil }()
	ctx := testCtx(t)
	for _, cut := range []struct {
		name  string
		cut   func(*Transport)
		after error // what a read fails with afterwards
	}{
		{"PeerDown", func(tr *Transport) { tr.PeerDown(1, errors.New("gone")) }, ftrma.ErrProcFailed},
		{"Close", func(tr *Transport) { tr.Close() }, ftrma.ErrClosed},
	} {
		if broken && os.Getenv("SHM_CUT") != cut.name {
			continue
		}
		for round := range 5 {
			ts, _, _ := cluster(t, 2, clusterOpts{})
			mem := must(ts[1].Alloc(1 << 16))
			key := must(ts[1].Register(mem))
			buf := make([]byte, 4096)
			if _, err := ts[0].Read(1, key, 0, buf); err != nil { // resolves the key
				t.Fatal(err)
			}
			held.Store(false)
			release.Store(false)
			letGo.Store(false)
			armed.Store(true)
			errc := make(chan error, 1)
			go func() {
				_, err := ts[0].Read(1, key, 0, buf)
				errc <- err
			}()
			for !held.Load() {
				if ctx.Err() != nil {
					t.Fatal("the read was not held")
				}
				runtime.Gosched()
			}
			cut.cut(ts[0])
			if !letGo.Load() {
				if !broken {
					t.Fatalf("%s, round %d: returned, the memory unmapped, under a read", cut.name, round)
				}
				release.Store(true) // the read goes on into unmapped memory
			}
			if err := <-errc; err != nil { // it began before the cut
				t.Fatalf("%s, round %d: held read: %v", cut.name, round, err)
			}
			if _, err := ts[0].Read(1, key, 0, buf); !errors.Is(err, cut.after) {
				t.Fatalf("%s, round %d: read afterwards: %v, want %v", cut.name, round, err, cut.after)
			}
		}
	}
	if broken {
		return
	}
	for _, name := range []string{"PeerDown", "Close"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNoAccessAfterUnmap$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SHM_BREAK_GRACE=1", "SHM_CUT="+name)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s with the grace period left out: the held read never touched unmapped memory:\n%s", name, out)
		}
		if s := string(out); !strings.Contains(s, "fault") && !strings.Contains(s, "SIGSEGV") {
			t.Fatalf("%s with the grace period left out: the test failed, but not of a fault: %v\n%s", name, err, out)
		}
	}
}

// Flush orders this rank's stores before its later loads, as MPI's flush
// does: of two ranks that each write 1 to a word of the other, flush, and
// then read the other's word of their own, at least one reads 1 (the store
// buffer litmus test). Without the barrier Flush runs (left out on purpose,
// by hand) both read 0 in about 1 of 100,000 rounds on this project's
// machines, as x86 lets a load pass an earlier store: 200,000 rounds catch
// a missing barrier most of the time, not always.
func TestFlushOrdersLaterLoads(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the ranks run at once")
	}
	both := func(rounds int) (zeros int) {
		ts, _, _ := cluster(t, 2, clusterOpts{})
		ctx := testCtx(t)
		keys := make([]transport.Key, 2)
		mems := make([][]byte, 2)
		for r := range 2 {
			mems[r] = must(ts[r].Alloc(4096))
			keys[r] = must(ts[r].Register(mems[r]))
		}
		var start [2]atomic.Int64 // each rank's phase: 2i+1 in round i, 2i+2 once done with it
		got := make([][]uint64, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			got[r] = make([]uint64, rounds)
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := 1 - r
				one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
				buf := make([]byte, 8)
				for i := range rounds {
					// Word i of rank r's memory is the one rank o writes in round i
					// (fresh zeros each round, on lines of their own).
					off := uint64(64 * (i % 64))
					sync2 := func(phase int64) { // both ranks reach phase
						start[r].Store(phase)
						for start[o].Load() < phase {
						}
					}
					sync2(int64(2*i + 1))
					ts[r].Write(ftrma.Rank(o), keys[o], off, one)
					ts[r].Flush(ctx, ftrma.Rank(o))
					ts[r].Read(ftrma.Rank(r), keys[r], off, buf) // rank o's write to rank r
					got[r][i] = binary.NativeEndian.Uint64(buf)
					sync2(int64(2*i + 2))
					clear(mems[r][off : off+8]) // for round i+64; rank o read it in round i already

				}
			}()
		}
		wg.Wait()
		for i := range rounds {
			if got[0][i] == 0 && got[1][i] == 0 {
				zeros++
			}
		}
		return zeros
	}
	if z := both(200000); z != 0 {
		t.Fatalf("in %d of 200000 rounds both ranks read 0 after Flush", z)
	}
}
