package host

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	idle, total, ok := parseCPULine([]byte("cpu  10 2 3 80 5 0 0 0 0 0\ncpu0 1 1 1 1 1 1 1 1 1 1\n"))
	if !ok || idle != 85 || total != 100 {
		t.Fatalf("got idle %d total %d ok %v, want 85 100 true", idle, total, ok)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5", "cpu 1 2"} {
		if _, _, ok := parseCPULine([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestDescribeHaltPoll(t *testing.T) {
	if s := describeHaltPoll("0"); !strings.Contains(s, "halt at once") {
		t.Errorf("guest_halt_poll_ns 0: %q does not say idle CPUs halt at once", s)
	}
	if s := describeHaltPoll("200000"); !strings.Contains(s, "poll for 200000 ns") {
		t.Errorf("guest_halt_poll_ns 200000: %q does not give the polling time", s)
	}
}

func TestParentPID(t *testing.T) {
	tests := []struct {
		stat string
		want int
		err  bool
	}{
		{stat: "4242 (ft-rank) S 4200 4242 4200 0 -1 4194560 ...", want: 4200},
		{stat: "17 (a (b) c) R 3 17 3 0", want: 3}, // comm with spaces and parentheses
		{stat: "17 ft-rank S 3", err: true},
		{stat: "17 (x) S", err: true},
		{stat: "17 (x) S y", err: true},
	}
	for _, tt := range tests {
		got, err := ParentPID(tt.stat)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParentPID(%q) = %v, %v; want %v, error %v", tt.stat, got, err, tt.want, tt.err)
		}
	}
}

// KillDescendant kills a process below the given root and refuses one that
// is not: here two children of the test, each the other's sibling.
func TestKillDescendant(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: KillDescendant refuses everything here")
	}
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	a, b := start(), start()
	if _, err := KillDescendant(a.Process.Pid, b.Process.Pid); err == nil {
		t.Fatalf("killed pid %d as a descendant of its sibling %d", b.Process.Pid, a.Process.Pid)
	}
	before := time.Now().UnixNano()
	at, err := KillDescendant(os.Getpid(), b.Process.Pid)
	if err != nil {
		t.Fatalf("KillDescendant of the test's own child: %v", err)
	}
	if at < before {
		t.Errorf("kill time %d before the call (%d)", at, before)
	}
	err = b.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the child ended with %v, want killed by SIGKILL", err)
	}
}
