package launcher

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
)

// The rank programs of this file's tests. They start from init, before
// TestMain, so that helper_test.go's list of modes stays as it is.
func init() {
	switch os.Getenv(helperEnv) {
	case "hybridreplace": // args: DIE
		rank, _ := strconv.Atoi(os.Getenv(jobwire.EnvRank))
		die, _ := strconv.Atoi(os.Args[len(os.Args)-1])
		os.Exit(hybridReplaceHelper(rank, die))
	case "hybriddie":
		rank, _ := strconv.Atoi(os.Getenv(jobwire.EnvRank))
		os.Exit(hybridDieHelper(rank))
	}
}

// router is the multi transport's Route.
type router interface{ Route(ftrma.Rank) string }

// hybridReplaceHelper is the rank program of TestProcessReplaceHybrid:
// every rank joins with startup.Init and passes a barrier; rank die then exits
// with status 3. The others find the next barrier failed and call Replace;
// ftrun starts a spare, whose Init returns the communicator Replace made.
// On it every rank passes a barrier and a window round with every other
// rank: it puts its world rank+1000 into its slot of every peer's window,
// and after a barrier checks that every peer's value landed in its own
// window, and gets every peer's own value (the last slot) back. It prints
// the path (multi.Transport.Route) to each peer.
func hybridReplaceHelper(rank, die int) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	nc, old, err := replaceAfterExit(ctx, rank, die, false)
	if err != nil {
		return fail("%v", err)
	}
	if old != nil {
		defer old.Close()
	}
	defer nc.Close()
	if err := nc.Barrier(ctx); err != nil {
		return fail("barrier on the new communicator: %v", err)
	}
	n := nc.Size()
	win, err := window.Allocate(ctx, nc, 8*(n+1))
	if err != nil {
		return fail("allocate: %v", err)
	}
	value := func(p ftrma.Rank) uint64 { return uint64(nc.TransportRank(p)) + 1000 }
	me := nc.Rank()
	binary.LittleEndian.PutUint64(win.Bytes()[8*n:], value(me))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], value(me))
	var paths []string
	rt, _ := nc.Transport().(router)
	for p := range ftrma.Rank(n) {
		if p == me {
			continue
		}
		if err := win.PutSync(ctx, p, uint64(8*me), b[:]); err != nil {
			return fail("put to %d: %v", p, err)
		}
		if rt != nil {
			paths = append(paths, fmt.Sprintf("%d %s", nc.TransportRank(p), rt.Route(nc.TransportRank(p))))
		}
	}
	if err := nc.Barrier(ctx); err != nil {
		return fail("barrier after put: %v", err)
	}
	for p := range ftrma.Rank(n) {
		if p == me {
			continue
		}
		if got := binary.LittleEndian.Uint64(win.Bytes()[8*p:]); got != value(p) {
			return fail("slot of %d holds %d, want %d", p, got, value(p))
		}
		var g [8]byte
		if err := win.Get(p, uint64(8*n), g[:]); err != nil {
			return fail("get from %d: %v", p, err)
		}
		if err := win.Flush(ctx, p); err != nil {
			return fail("flush %d: %v", p, err)
		}
		if got := binary.LittleEndian.Uint64(g[:]); got != value(p) {
			return fail("got %d from %d, want %d", got, p, value(p))
		}
	}
	if err := win.Free(ctx); err != nil {
		return fail("free: %v", err)
	}
	fmt.Printf("rank %d is %d of %d, put and get with every rank; paths: %s\n", rank, me, n, strings.Join(paths, ", "))
	return 0
}

// Through ftrun --respawn=1 over shm+tcp: rank 1 of 3 exits, the
// survivors' Replace starts the spare (world rank 3) on ftrun's host,
// which takes number 1; a barrier and a put and get with every rank work
// on the new communicator. On one host every path is shm. Over two hosts
// (rank 0 on an agent's, ranks 1 and 2 on ftrun's) the spare reaches rank
// 2 through shm and rank 0 through tcp, and they it the same ways.
func TestProcessReplaceHybrid(t *testing.T) {
	t.Run("one host", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		cmd := helperCmd(t, ctx, "hybridreplace", []string{"-n", "3", "--respawn=1", "--transport", "shm+tcp"}, "1")
		out, _ := cmd.CombinedOutput() // rank 1's exit fails the job
		wantLines(t, string(out),
			`rank 3 replaces world rank 1 as rank 1 of 3`,
			`rank 0 is 0 of 3, put and get with every rank; paths: 3 shm, 2 shm`,
			`rank 3 is 1 of 3, put and get with every rank; paths: 0 shm, 2 shm`,
			`rank 2 is 2 of 3, put and get with every rank; paths: 0 shm, 3 shm`,
		)
	})
	t.Run("two hosts", func(t *testing.T) {
		t.Setenv(EnvAgentSecret, testAgentSecret)
		ag := startAgentDaemon(t, "hybridreplace")
		stdout, stderr, _ := runJob(t, "hybridreplace", []string{"-n", "3", "--respawn=1", "--hosts", ag.addr + ":1,local:2", "--transport", "shm+tcp"}, "1")
		out := stdout + stderr
		wantLines(t, out,
			`rank 3 replaces world rank 1 as rank 1 of 3`,
			`rank 0 is 0 of 3, put and get with every rank; paths: 3 tcp, 2 tcp`,
			`rank 3 is 1 of 3, put and get with every rank; paths: 0 tcp, 2 shm`,
			`rank 2 is 2 of 3, put and get with every rank; paths: 0 tcp, 3 shm`,
		)
		if t.Failed() {
			t.Logf("agent:\n%s", ag.logs)
		}
	})
}

// hybridDieHelper is the rank program of TestProcessSpareWhileRankDies: a
// job of 4 ranks and 1 spare, ranks 0 and 1 on an agent's host. Rank 2
// asks for the spare (4); rank 0 exits (status 3) as soon as it has
// admitted it, while the spare connects. The spare's Join must end all
// the same, and the live ranks (1, 2, 3 and the spare) then exchange
// messages and Writes with each other and see rank 0 down.
func hybridDieHelper(rank int) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	size, _ := strconv.Atoi(os.Getenv(jobwire.EnvSize))
	recv := newChanReceiver(size)
	s, err := startup.Join(ctx, recv)
	if err != nil {
		return fail("join: %v", err)
	}
	defer s.Close()
	t := s.Transport()
	defer t.Close()
	admits := make(chan ftrma.Rank, 4)
	s.OnAdmit(func(r ftrma.Rank, _ string, _ []byte) {
		if rank == 0 {
			os.Exit(3)
		}
		admits <- r
	})
	_, spawned := s.Spawned()
	if !spawned {
		if rank == 2 {
			if ranks, err := s.Spawn(ctx, 1, nil); err != nil || len(ranks) != 1 || ranks[0] != 4 {
				return fail("spawn: %v %v", ranks, err)
			}
		}
		select {
		case <-admits:
		case <-ctx.Done():
			return fail("no admission")
		}
	}
	peers := []ftrma.Rank{1, 2, 3, 4}
	peers = slices.DeleteFunc(peers, func(p ftrma.Rank) bool { return int(p) == rank })
	x := &xfer{ctx: ctx, t: t, recv: recv, peers: peers, mayDie: []ftrma.Rank{0}}
	if err := x.exchangeWrites(rank, size); err != nil {
		return fail("%v", err)
	}
	// Rank 0's exit is reported to every live rank (ftrun's notice, at
	// least): wait for it.
	for len(x.down) == 0 {
		select {
		case <-recv.down:
			x.down = append(x.down, 0)
		case <-ctx.Done():
			return fail("rank 0 never reported down")
		}
	}
	fmt.Printf("rank %d exchanged messages and writes with ranks %v; rank 0 down\n", rank, peers)
	if err := x.sendAll("bye"); err != nil {
		return fail("%v", err)
	}
	// The others may be gone by now: a best-effort wait.
	deadline := time.After(2 * time.Second)
	for n := 0; n < len(peers); {
		select {
		case m := <-recv.msgs:
			if m.msg == "bye" {
				n++
			}
		case <-recv.down:
		case <-deadline:
			n = len(peers)
		}
	}
	return 0
}

// A spare admitted while another rank dies: over shm+tcp, on two hosts
// (ranks 0 and 1 on an agent's, 2, 3 and the spare 4 on ftrun's), rank
// 0 exits as soon as it admits the spare. The spare's Join still ends (it
// is told of rank 0's exit, which it dials through tcp, while it
// connects), and ranks 1 to 4 exchange messages and Writes through shm
// and tcp.
func TestProcessSpareWhileRankDies(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "hybriddie")
	stdout, stderr, _ := runJob(t, "hybriddie", []string{"-n", "4", "--respawn=1", "--hosts", ag.addr + ":2,local:2", "--transport", "shm+tcp"})
	out := stdout + stderr
	for _, r := range []int{1, 2, 3, 4} {
		var peers []string
		for _, p := range []int{1, 2, 3, 4} {
			if p != r {
				peers = append(peers, strconv.Itoa(p))
			}
		}
		wantLines(t, out, fmt.Sprintf(`rank %d exchanged messages and writes with ranks \[%s\]; rank 0 down`, r, strings.Join(peers, " ")))
	}
	if t.Failed() {
		t.Logf("agent:\n%s", ag.logs)
	}
}
