//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// The process tests run this test binary again as rank 1 of a two-rank job,
// with SHM_CHILD naming what the child does.
func TestMain(m *testing.M) {
	if role := os.Getenv("SHM_CHILD"); role != "" {
		if err := runChild(role); err != nil {
			fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChild starts the child process in role for the job in dir.
func startChild(t *testing.T, role, dir, job string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SHM_CHILD="+role, "SHM_DIR="+dir, "SHM_JOB="+job)
	cmd.Env = append(cmd.Env, env...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

// childRecv is the child's receiver: messages on a channel.
type childRecv struct{ msgs chan []byte }

func (c childRecv) HandleMessage(from ftrma.Rank, msg []byte) { c.msgs <- bytes.Clone(msg) }
func (c childRecv) HandlePeerDown(ftrma.Rank, error)          {}

func runChild(role string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Open(Config{Rank: 1, Size: 2, Job: os.Getenv("SHM_JOB"), Dir: os.Getenv("SHM_DIR")})
	if err != nil {
		return err
	}
	defer tr.Close()
	recv := childRecv{make(chan []byte, 16)}
	tr.SetReceiver(recv)
	if err := tr.Connect(ctx); err != nil {
		return err
	}
	key0, err := strconv.ParseUint(os.Getenv("SHM_KEY"), 10, 32)
	if err != nil {
		return err
	}
	mem, err := tr.Alloc(4096)
	if err != nil {
		return err
	}
	key1, err := tr.Register(mem)
	if err != nil {
		return err
	}
	for i := range 64 {
		mem[i] = 0xab
	}
	counter := (*uint64)(unsafe.Pointer(&mem[64]))
	if err := tr.Send(0, binary.BigEndian.AppendUint32([]byte("key "), uint32(key1))); err != nil {
		return err
	}
	expect := func(want string) ([]byte, error) {
		select {
		case m := <-recv.msgs:
			if !strings.HasPrefix(string(m), want) {
				return nil, fmt.Errorf("got message %q, want %q", m, want)
			}
			return m, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %q: %w", want, ctx.Err())
		}
	}
	switch role {
	case "atomics":
		// CAS increments of rank 0's counter and fetch-and-adds of its own,
		// while rank 0 does the same.
		n, _ := strconv.Atoi(os.Getenv("SHM_N"))
		for range n {
			if err := casIncrement(ctx, tr, 0, transport.Key(key0), 0); err != nil {
				return err
			}
			if seq, err := tr.FetchAndAdd64(1, key1, 64, 1, nil); err != nil || tr.Wait(ctx, 1, seq) != nil {
				return fmt.Errorf("fetch-and-add: %v", err)
			}
		}
		if err := tr.Send(0, []byte("done")); err != nil {
			return err
		}
		if _, err := expect("finished"); err != nil {
			return err
		}
		if err := tr.Send(0, binary.BigEndian.AppendUint64([]byte("count "), atomic.LoadUint64(counter))); err != nil {
			return err
		}
		_, err := expect("bye")
		return err
	case "late":
		// Write ones to the key of rank 0 that rank 0 stores at word 16 of
		// this rank's memory, counting attempts at word 24, each access
		// waiting announced before it writes (spinInAccess), until fenced.
		spins, _ := strconv.Atoi(os.Getenv("SHM_SPINS"))
		testHookFast = func() { spin(spins) }
		cur, attempts := (*uint64)(unsafe.Pointer(&mem[128])), (*uint64)(unsafe.Pointer(&mem[136]))
		ones := bytes.Repeat([]byte{0xff}, 64)
		for {
			if k := atomic.LoadUint64(cur); k != 0 {
				if _, err := tr.Write(0, transport.Key(k), 0, ones); errors.Is(err, ftrma.ErrProcFailed) {
					return nil
				}
				atomic.AddUint64(attempts, 1)
			}
		}
	case "spin":
		// Increment rank 0's counter until killed.
		for {
			if _, err := tr.FetchAndAdd64(0, transport.Key(key0), 0, 1, nil); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("unknown role %q", role)
}

// casIncrement increments a counter with compare-and-swap and counts the
// failed attempts in casRetries.
func casIncrement(ctx context.Context, tr *Transport, peer ftrma.Rank, key transport.Key, off uint64) error {
	var cur, old uint64
	for first := true; ; first = false {
		if !first {
			casRetries.Add(1)
		}
		seq, err := tr.CompareAndSwap64(peer, key, off, cur, cur+1, &old)
		if err == nil {
			err = tr.Wait(ctx, peer, seq)
		}
		if err != nil {
			return fmt.Errorf("compare-and-swap: %w", err)
		}
		if old == cur {
			return nil
		}
		cur = old
	}
}

var casRetries atomic.Int64

// parent opens rank 0 of the two-rank job in dir with a counter registered.
func parent(t *testing.T, dir, job string) (*Transport, *recorder, *logSink, []byte, transport.Key) {
	logs := &logSink{}
	tr, err := Open(Config{Rank: 0, Size: 2, Job: job, Dir: dir, Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	rec := newRecorder()
	tr.SetReceiver(rec)
	mem := must(tr.Alloc(64))
	return tr, rec, logs, mem, must(tr.Register(mem))
}

// nextFrom waits for the next message from rank 1 after the first k.
func nextFrom(t *testing.T, ctx context.Context, rec *recorder, k int, out *bytes.Buffer) []byte {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := rec.From(1); len(m) > k {
			return m[k]
		}
		select {
		case <-rec.Changed():
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for message %d of the child: %v; child output:\n%s", k, ctx.Err(), out)
		}
	}
}

// Two processes map each other's memory and increment each other's counters
// with hardware atomics: no increment is lost.
func TestCrossProcessAtomics(t *testing.T) {
	const n = 20000
	dir, job := t.TempDir(), "atomics"
	ctx := testCtx(t)
	tr, rec, _, mem, key0 := parent(t, dir, job)
	cmd, out := startChild(t, "atomics", dir, job, "SHM_KEY="+strconv.Itoa(int(key0)), "SHM_N="+strconv.Itoa(n))
	if err := tr.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	m := nextFrom(t, ctx, rec, 0, out)
	if !bytes.HasPrefix(m, []byte("key ")) {
		t.Fatalf("first message %q", m)
	}
	key1 := transport.Key(binary.BigEndian.Uint32(m[4:]))
	// The child's memory, read across processes.
	page := make([]byte, 64)
	if seq, err := tr.Read(1, key1, 0, page); err != nil || tr.Wait(ctx, 1, seq) != nil || !bytes.Equal(page, bytes.Repeat([]byte{0xab}, 64)) {
		t.Fatalf("read of the child's memory: %v, %x", err, page)
	}
	for range n {
		if err := casIncrement(ctx, tr, 0, key0, 0); err != nil {
			t.Fatal(err)
		}
		if seq, err := tr.FetchAndAdd64(1, key1, 64, 1, nil); err != nil || tr.Wait(ctx, 1, seq) != nil {
			t.Fatal(err)
		}
	}
	if m := nextFrom(t, ctx, rec, 1, out); string(m) != "done" {
		t.Fatalf("message %q, want done", m)
	}
	if got := atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[0]))); got != 2*n {
		t.Fatalf("rank 0's counter is %d, want %d", got, 2*n)
	}
	t.Logf("%d increments each way; rank 0's compare-and-swaps lost %d races", n, casRetries.Load())
	if err := tr.Send(1, []byte("finished")); err != nil {
		t.Fatal(err)
	}
	m = nextFrom(t, ctx, rec, 2, out)
	if got := binary.BigEndian.Uint64(m[len("count "):]); !bytes.HasPrefix(m, []byte("count ")) || got != 2*n {
		t.Fatalf("the child's counter is %d (%q), want %d", got, m, 2*n)
	}
	if err := tr.Send(1, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	// The child closed its transport: a goodbye, and its files are gone.
	rec.Await(t, ctx, "the goodbye", func() bool { return len(rec.DownsOf(1)) == 1 })
	if err := rec.DownsOf(1)[0]; !errors.Is(err, transport.ErrPeerLeft) {
		t.Fatalf("peer-down error %v, want ErrPeerLeft", err)
	}
	if _, err := tr.Write(1, key1, 0, []byte{1}); !errors.Is(err, transport.ErrPeerLeft) {
		t.Fatalf("write toward the departed child: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("%d files left, the first %s", len(ents), ents[0].Name())
	}
}

// A child killed in the middle of its operations: the parent keeps working,
// fails cleanly toward it after PeerDown, and RemoveJob removes its files.
func TestKilledChild(t *testing.T) {
	dir, job := t.TempDir(), "killed"
	ctx := testCtx(t)
	tr, rec, logs, mem, key0 := parent(t, dir, job)
	cmd, out := startChild(t, "spin", dir, job, "SHM_KEY="+strconv.Itoa(int(key0)))
	if err := tr.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	m := nextFrom(t, ctx, rec, 0, out)
	key1 := transport.Key(binary.BigEndian.Uint32(m[4:]))
	counter := (*uint64)(unsafe.Pointer(&mem[0]))
	for atomic.LoadUint64(counter) < 10000 {
		time.Sleep(time.Millisecond)
	}
	if open, err := OpenRanks(dir, job); err != nil || !slices.Equal(open, []ftrma.Rank{0, 1}) {
		t.Fatalf("OpenRanks while both run: %v, %v; want [0 1]", open, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Its lock went with it; its control segment is still there.
	if open, err := OpenRanks(dir, job); err != nil || !slices.Equal(open, []ftrma.Rank{0}) {
		t.Fatalf("OpenRanks after the child was killed: %v, %v; want [0]", open, err)
	}
	// The dead rank's memory stays mapped here: operations toward it still
	// work until the launcher says it is gone.
	page := make([]byte, 64)
	if seq, err := tr.Read(1, key1, 0, page); err != nil || tr.Wait(ctx, 1, seq) != nil || page[0] != 0xab {
		t.Fatalf("read of the killed child's memory: %v", err)
	}
	v := atomic.LoadUint64(counter)
	time.Sleep(20 * time.Millisecond)
	if atomic.LoadUint64(counter) != v {
		t.Fatal("the counter moves after the child was killed")
	}
	cause := fmt.Errorf("launcher: the process of rank 1 exited: %w", ftrma.ErrProcFailed)
	tr.PeerDown(1, cause)
	if _, err := tr.Read(1, key1, 0, page); !errors.Is(err, ftrma.ErrProcFailed) || !errors.Is(err, cause) {
		t.Fatalf("read after PeerDown: %v", err)
	}
	if err := tr.Flush(ctx, 1); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("flush after PeerDown: %v", err)
	}
	rec.Await(t, ctx, "the peer-down event", func() bool { return len(rec.DownsOf(1)) == 1 })
	if !logs.Contains("lost rank 1") {
		t.Errorf("the loss was not logged:\n%s", logs.String())
	} else if !logs.Contains("rank=0 peer=1 level=WARN") {
		t.Errorf("the loss was not logged as a warning with its rank and peer:\n%s", logs.String())
	}
	// The child may have died counted active in rank 0's memory.
	start := time.Now()
	if err := tr.Deregister(key0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Deregister took %v", d)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"ftrma-killed-1-bell", "ftrma-killed-1-ctl", "ftrma-killed-1-seg-1"}; strings.Join(left, " ") != strings.Join(want, " ") {
		t.Fatalf("files left by the killed child: %v, want %v", left, want)
	}
	if err := RemoveJob(dir, job); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("%d files left after RemoveJob", len(ents))
	}
}
