package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A slow rank is not a failed one. A rank stopped for a moment (as a
// process starved of CPU, or in a long pause) is suspected by its observer,
// but it answers ftrun's question once it runs again and is not killed:
// the job ends with every rank. A rank that stays stopped does not answer
// and is killed, and the others go on.
func TestSlowRankNotKilled(t *testing.T) { eachTransport(t, testSlowRankNotKilled) }

func testSlowRankNotKilled(t *testing.T) {
	for _, c := range []struct {
		pause  time.Duration
		killed bool
	}{{350 * time.Millisecond, false}, {0, true}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := append(transportArgs(), "-n", "4", "--tag-output", filepath.Join(bins(t), "testprog"), "watchfail", "5s")
		cmd := exec.CommandContext(ctx, filepath.Join(bins(t), "ftrun"), args...)
		job := startLive(t, cmd)
		pid := job.waitReady(t, 4)[2]
		time.Sleep(1500 * time.Millisecond) // past the start-up, whose stalls the detectors forgive
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("stop rank 2: %v", err)
		}
		if c.pause > 0 {
			time.Sleep(c.pause)
			syscall.Kill(pid, syscall.SIGCONT)
		}
		outText, errText := job.finish()
		all := outText + errText
		if c.killed {
			if !strings.Contains(all, "rank 2 was declared failed") || !strings.Contains(all, "[0] failed 1") {
				t.Errorf("a rank stopped for good was not declared failed:\n%s", all)
			}
			continue
		}
		if strings.Contains(all, "declared failed") || strings.Count(all, "failed 0") != 4 {
			t.Errorf("a rank paused for %v was declared failed:\n%s", c.pause, all)
		}
		if cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("exit %d:\n%s", cmd.ProcessState.ExitCode(), all)
		}
		line := regexp.MustCompile(`(?m)^ftrun: rank 2, suspected.*answered ftrun: slow, not failed; not killed$`).FindString(all)
		if line == "" {
			t.Errorf("a rank paused for %v was not suspected and asked (the pause tested nothing):\n%s", c.pause, all)
		}
		t.Logf("paused %v: %s", c.pause, line)
	}
}
