package launcher

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Spares without ftrun (agentspare.go): ftrun, with no rank of its own,
// and two running agents on loopback: ranks 0 and 1 on agent a, rank 2
// on agent b, one spare, the output in files (--output-filename). Once
// every rank passed its first barrier ftrun is SIGKILLed, and then rank 2
// exits with status 3. The survivors' Replace goes to their agent (their
// channel to ftrun broke), which waits until the arbiter has declared
// ftrun's host failed and claims spare 3 on rank 2's host, b; b's agent
// starts it with a rendezvous of its own, the log's join makes every
// agent admit it to its ranks, and the new communicator of 3 passes a
// barrier. The ranks' output files hold it, and the arbiter's leader at
// the end writes the report: spare 3 finished, rank 2 with status 3.
// Without the agents' part the survivors' Replace fails: their spawn
// request would go to ftrun's broken channel.
func TestSpareWithoutFtrun(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	t.Setenv(EnvAgentSecret, testAgentSecret)
	a := startAgentDaemon(t, "hostreplace")
	b := startAgentDaemon(t, "hostreplace")
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "go")
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd := helperCmd(t, ctx, "hostreplace", []string{"-n", "3", "--respawn=1", "--transport", "tcp",
		"--hosts", a.addr + ":2," + b.addr + ":1", "--output-filename", dir}, "exit once there is "+marker)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr logBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for ready := 0; ready < 3 && sc.Scan(); {
		if strings.HasSuffix(sc.Text(), " ready") {
			ready++
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed := time.Now()
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	b.wait(t)
	t.Logf("ftrun SIGKILLed; the agents were gone %v later", time.Since(killed).Round(time.Millisecond))
	logs := fmt.Sprintf("ftrun's stderr:\n%s\nagent a:\n%s\nagent b:\n%s", stderr.String(), a.logs, b.logs)
	out := func(r int) string {
		b, _ := os.ReadFile(filepath.Join(dir, "1", fmt.Sprintf("rank.%d", r), "stdout"))
		return string(b)
	}
	for r, want := range map[int][]string{
		0: {"rank 0 is 0 of 3 after replace"},
		1: {"rank 1 is 1 of 3 after replace"},
		3: {"rank 3 replaces world rank 2 as rank 2 of 3", "rank 3 is 2 of 3 after replace"},
	} {
		for _, w := range want {
			if !strings.Contains(out(r), w+"\n") {
				t.Errorf("rank %d's output lacks %q:\n%s", r, w, out(r))
			}
		}
	}
	if !strings.Contains(b.logs.String(), "started spare rank 3 (ftrun is gone)") {
		t.Errorf("agent b did not start spare rank 3")
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "report"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^rank 3 host \S+ finished status 0 at [\d.]+s$`),
		regexp.MustCompile(`(?m)^rank 2 host \S+ finished status 3 at [\d.]+s$`),
	} {
		if !want.MatchString(string(rep)) {
			t.Errorf("%s/report does not match %v:\n%s", dir, want, rep)
		}
	}
	if t.Failed() {
		t.Log(logs)
	}
}
