//go:build linux

package shm

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"golang.org/x/sys/unix"
)

// progressState returns the scheduler state of the progress goroutines
// (those running (*Transport).run) as runtime.Stack prints it: "IO wait",
// "syscall", "runnable", ...
func progressStates() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var states []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte("shm.(*Transport).run(")) {
			continue
		}
		head, _, _ := strings.Cut(string(g), "\n")
		_, state, ok := strings.Cut(head, "[")
		if !ok {
			continue
		}
		state, _, _ = strings.Cut(state, "]")
		state, _, _ = strings.Cut(state, ",") // "IO wait, 2 minutes"
		states = append(states, state)
	}
	return states
}

// An idle progress goroutine parks in the network poller, where it holds no
// processor: with GOMAXPROCS=1 a goroutine parked in a raw futex wait
// ("syscall") keeps the rank's only processor until the runtime's monitor
// takes it back, delaying everything else the rank does (such as hearing
// from ftrun that a peer died) by up to tens of milliseconds.
func TestIdleProgressParksInPoller(t *testing.T) {
	ts, _, _ := cluster(t, 2, clusterOpts{cfg: func(c *Config) { c.Spin = 0 }})
	if err := ts[0].Send(1, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	parked := 0
	for i := 0; i < 2000 && parked < 20; i++ {
		states := progressStates()
		if len(states) != 2 {
			t.Fatalf("found %d progress goroutines, want 2: %q", len(states), states)
		}
		for _, s := range states {
			switch s {
			case "syscall":
				t.Fatalf("a progress goroutine parks in a system call, holding its processor: %q", states)
			case "IO wait":
				parked++
			}
		}
		time.Sleep(time.Millisecond)
	}
	if parked < 20 {
		t.Fatalf("the progress goroutines were seen parked in the poller %d times, want 20", parked)
	}
}

// allocated returns the bytes the file system holds for the control
// segment of rank r (its reserved blocks, not its length).
func allocated(t *testing.T, tr *Transport) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(tr.ctlPath, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// A ring takes memory only once its sender has sent into it: the shared
// memory of a job grows with the pairs of ranks that talk, not with the
// square of the number of ranks.
func TestRingsReservedByTheirSenders(t *testing.T) {
	const n, ring = 8, 256 << 10
	dir := t.TempDir()
	if d, err := os.MkdirTemp(DefaultDir, "ftrma-test-"); err == nil { // tmpfs, as in production
		dir = d
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	ts, rs, _ := cluster(t, n, clusterOpts{dir: dir, cfg: func(c *Config) { c.RingBytes = ring }})
	lay := ts[0].own.lay
	for _, tr := range ts {
		if a := allocated(t, tr); a < int64(lay.reserved) || a >= int64(lay.reserved)+ring {
			t.Fatalf("rank %d's control segment holds %d bytes before any message, want %d (no ring)", tr.cfg.Rank, a, lay.reserved)
		}
	}
	ctx := testCtx(t)
	for _, from := range []ftrma.Rank{0, 2, 5} {
		if err := ts[from].Send(1, []byte("hi")); err != nil {
			t.Fatal(err)
		}
	}
	rs[1].Await(t, ctx, "three messages", func() bool { return rs[1].Count() >= 3 })
	if a, want := allocated(t, ts[1]), int64(lay.reserved)+3*ring; a < want || a >= want+ring {
		t.Fatalf("rank 1's control segment holds %d bytes after messages from 3 ranks, want %d", a, want)
	}
	if a := allocated(t, ts[3]); a >= int64(lay.reserved)+ring {
		t.Fatalf("rank 3 got no message but holds %d bytes, want %d", a, lay.reserved)
	}
}

// The launcher's mark of a reaped rank cuts it off at every rank of the
// host: their progress goroutines, woken by their bells, report it down
// with transport.ErrPeerExited, and operations toward it fail with it. A
// rank that closed its transport is not marked: its goodbye stands.
func TestMarkExited(t *testing.T) {
	dir := t.TempDir()
	ts, rs, _ := cluster(t, 4, clusterOpts{dir: dir, cfg: func(c *Config) { c.Spin = -1 }})
	ctx := testCtx(t)
	mem := must(ts[2].Alloc(64))
	key := must(ts[2].Register(mem))
	if err := ts[3].Close(); err != nil {
		t.Fatal(err)
	}
	all := []ftrma.Rank{0, 1, 2, 3}
	if err := MarkExited(dir, "t", 3, all); err != nil {
		t.Fatal(err)
	}
	rs[0].Await(t, ctx, "rank 3's goodbye", func() bool { return len(rs[0].DownsOf(3)) == 1 })
	if err := rs[0].DownsOf(3)[0]; !errors.Is(err, transport.ErrPeerLeft) {
		t.Fatalf("rank 3 closed, then was marked: reported %v, want its goodbye", err)
	}
	// Rank 2's process is gone (as far as the launcher's mark goes).
	if err := MarkExited(dir, "t", 2, all); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 1} {
		rs[r].Await(t, ctx, "rank 2 down", func() bool { return len(rs[r].DownsOf(2)) == 1 })
		if err := rs[r].DownsOf(2)[0]; !errors.Is(err, transport.ErrPeerExited) || !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d got %v for rank 2, want ErrPeerExited and ErrProcFailed", r, err)
		}
	}
	if _, err := ts[1].Write(2, key, 0, []byte("late")); !errors.Is(err, transport.ErrPeerExited) {
		t.Fatalf("a write toward the reaped rank: %v, want ErrPeerExited", err)
	}
	if err := MarkExited(dir, "t", 7, all); err != nil {
		t.Fatalf("a rank without files: %v", err)
	}
}

// A sender that cannot reserve its ring because the receiver's files are
// gone (it closed, or died and was cleaned up) gets a peer-down error from
// Send and writes nothing into the unreserved ring.
func TestSendToRemovedPeer(t *testing.T) {
	ts, _, _ := cluster(t, 2, clusterOpts{})
	if err := os.Remove(ts[1].ctlPath); err != nil {
		t.Fatal(err)
	}
	err := ts[0].Send(1, []byte("hello"))
	if !errors.Is(err, ftrma.ErrProcFailed) || !errors.Is(err, transport.ErrPeerLeft) {
		t.Fatalf("Send to a rank whose control segment is gone: %v, want ErrProcFailed and ErrPeerLeft", err)
	}
	if tail := *ts[1].own.ring(0).tail; tail != 0 {
		t.Fatalf("the ring's tail moved to %d", tail)
	}
}
