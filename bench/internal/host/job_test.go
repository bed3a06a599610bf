package host

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A job's lines come from both streams, marked, and Output keeps them; the
// end of the context kills the whole group, a child that would sleep on
// included.
func TestJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := StartJob(ctx, []string{"sh", "-c", "echo out; echo err >&2"}, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for l := range j.Lines {
		if l.Stderr {
			got = append(got, "E "+l.Text)
		} else {
			got = append(got, "O "+l.Text)
		}
	}
	if err := j.Cmd.Wait(); err != nil || len(got) != 2 || !strings.Contains(strings.Join(got, ","), "O out") || !strings.Contains(strings.Join(got, ","), "E err") {
		t.Fatalf("lines %q, wait %v", got, err)
	}
	if out := j.Output(); !strings.Contains(out, "out\n") || !strings.Contains(out, "stderr: err\n") {
		t.Fatalf("output %q", out)
	}

	gctx, gcancel := context.WithCancel(ctx)
	g, err := StartJob(gctx, []string{"sh", "-c", "sleep 60 & echo $!; wait"}, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi((<-g.Lines).Text)
	if err != nil {
		t.Fatal(err)
	}
	gcancel()
	drained := make(chan struct{})
	go func() { g.Drain(); close(drained) }() // once the sleep, which holds the output open, is gone
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatalf("the group's sleep %d outlived the job's context: its output stays open", pid)
	}
	for syscall.Kill(pid, 0) == nil { // reaped by whoever inherited it
		select {
		case <-ctx.Done():
			t.Fatalf("the group's sleep %d outlived the job's context", pid)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
