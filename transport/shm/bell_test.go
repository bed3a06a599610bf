//go:build linux

package shm

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
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
