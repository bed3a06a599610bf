package launcher

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/transport"
)

// lateSegHelper is helper mode "lateseg" (args: GOFILE): over the hybrid
// transport, rank 0 allocates and registers a region and sends its key to
// rank 1, which reads it only once GOFILE exists (the test creates it after
// the other host's agent has ended); ranks 2 and up sleep (to be lost with
// their host). Rank 1 prints "rank 1 read: ok 42" or the read's error.
func lateSegHelper(args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	size, _ := strconv.Atoi(os.Getenv(jobwire.EnvSize))
	recv := newChanReceiver(size)
	go func() { // peer-down events, up to two per lost peer: not to block the transports
		for range recv.down {
		}
	}()
	s, err := startup.Join(ctx, recv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	t := s.Transport()
	defer t.Close()
	fail := func(format string, a ...any) int {
		fmt.Printf("rank %d: "+format+"\n", append([]any{s.Rank()}, a...)...)
		return 1
	}
	// message waits for a control message from rank from.
	message := func(from ftrma.Rank) (string, bool) {
		for {
			select {
			case m := <-recv.msgs:
				if m.from == from {
					return m.msg, true
				}
			case <-ctx.Done():
				return "", false
			}
		}
	}
	switch s.Rank() {
	case 0:
		a, ok := t.(transport.Allocator)
		if !ok {
			return fail("transport %T allocates no memory", t)
		}
		mem, err := a.Alloc(4096)
		if err != nil {
			return fail("alloc: %v", err)
		}
		mem[0] = 42
		key, err := t.Register(mem)
		if err != nil {
			return fail("register: %v", err)
		}
		if err := t.Send(1, []byte(strconv.Itoa(int(key)))); err != nil {
			return fail("send: %v", err)
		}
		fmt.Printf("rank 0 ready\n")
		if _, ok := message(1); !ok {
			return fail("no word from rank 1")
		}
		return 0
	case 1:
		m, ok := message(0)
		if !ok {
			return fail("no key from rank 0")
		}
		key, _ := strconv.Atoi(m)
		fmt.Printf("rank 1 ready\n")
		for {
			if _, err := os.Stat(args[0]); err == nil {
				break
			}
			if ctx.Err() != nil {
				return fail("no go")
			}
			time.Sleep(10 * time.Millisecond)
		}
		buf := make([]byte, 8)
		_, err := t.Read(0, transport.Key(key), 0, buf)
		if err == nil {
			err = t.Flush(ctx, 0)
		}
		t.Send(0, []byte("done"))
		if err != nil {
			return fail("read: %v", err)
		}
		fmt.Printf("rank 1 read: ok %d\n", buf[0])
		return 0
	default:
		fmt.Printf("rank %d ready\n", s.Rank())
		time.Sleep(helperLife)
		return 0
	}
}

// Without the arbiter (--no-arbiter), when a host is lost (its agent's link
// to ftrun falls silent), the agent kills its ranks and removes their
// shared memory, but only theirs: the
// ranks of the other hosts of the job, which on a machine that runs several
// "hosts" (network namespaces, this test's stand-in ssh) share the
// shared-memory directory, still reach each other's memory, also memory
// they had not mapped yet. Before, the agent removed every file of the job,
// and a survivor's first access to a neighbour's segment failed with
// "unknown memory region".
func TestHostLossKeepsOtherHostsSharedMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	ssh, dir := fakeSSH(t)
	goFile := filepath.Join(t.TempDir(), "go")
	cmd := helperCmd(t, ctx, "lateseg", []string{"--no-arbiter", "-H", "fakehost1:2,fakehost2:2", "--ssh", ssh, "--tag-output", "--transport", "shm+tcp"}, goFile)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	errs := new(logBuffer)
	failed := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stderr)
		closed := false
		for s.Scan() {
			errs.Write([]byte(s.Text() + "\n"))
			if !closed && strings.Contains(s.Text(), "count as failed") {
				close(failed)
				closed = true
			}
		}
	}()
	lines := lineReader(stdout)
	waitLines(t, lines, "ready", 4)
	pid := agentPID(t, dir, "fakehost2")
	syscall.Kill(pid, syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	select {
	case <-failed:
	case <-time.After(helperLife):
		t.Fatalf("ftrun did not count fakehost2's ranks failed; stderr:\n%s", errs.String())
	}
	// The agent wakes to a silent link: it kills its ranks, removes their
	// shared memory and exits.
	syscall.Kill(pid, syscall.SIGCONT)
	if !waitFor(func() bool { return !alive(pid) }) {
		t.Fatalf("fakehost2's agent did not end; stderr:\n%s", errs.String())
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := waitLines(t, lines, "rank 1", 1)
	if !strings.Contains(got[0], "rank 1 read: ok 42") {
		t.Errorf("rank 1: %q; stderr:\n%s", got[0], errs.String())
	}
	cmd.Wait()
}
