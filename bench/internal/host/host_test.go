package host

import (
	"strings"
	"testing"
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
