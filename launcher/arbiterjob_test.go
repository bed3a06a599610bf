package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ftrun --arbiter over three hosts on loopback (this one and two running
// agents, "ftrun agent --once"): every node hears that node 1, ftrun's,
// leads; each agent writes its node's log to DIR/1/arbiter.N
// (--output-filename); rank 3 (on the second agent), silent and suspected
// by rank 0 a second in (by then every node has heard its leader: a job
// that ended sooner once left a node's log without it), ends in the
// arbiter's log too, and ftrun's summary line sets
// the arbiter's verdicts beside its own. Nothing of the job changes: ftrun
// kills rank 3 on its own verdict, and the others exit 0.
func TestArbiterJob(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag1 := startAgentDaemon(t, "notice")
	ag2 := startAgentDaemon(t, "notice")
	dir := t.TempDir()
	stdout, stderr, code := runJob(t, "notice", []string{"-n", "4", "--hosts", "local:2," + ag1.addr + ":1," + ag2.addr + ":1",
		"--tag-output", "--timeout", "60s", "--arbiter", "--output-filename", dir}, "3", "0", "1s")
	report := "stdout:\n" + stdout + "\nstderr:\n" + stderr
	if code != ExitOK {
		t.Fatalf("exit %d; %s\nagent 1:\n%s\nagent 2:\n%s", code, report, ag1.logs, ag2.logs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ftrun: arbiter: node 1 leads \(term \d+\)`),
		regexp.MustCompile(`(?m)^ftrun: arbiter: summary of node 1: leader 1 \(term \d+\), .*; ftrun's verdicts: rank 3 at \d+\.\d{3}s`),
		regexp.MustCompile(`(?m)^ftrun: arbiter: rank 3 (failed: unresponsive|exited: status -1)$`),
	} {
		if !want.MatchString(stderr) {
			t.Errorf("stderr does not match %v:\n%s", want, report)
		}
	}
	for r := range 3 {
		if !strings.Contains(stdout, fmt.Sprintf("rank %d got the exit notice of rank 3", r)) {
			t.Errorf("rank %d did not get rank 3's exit notice:\n%s", r, report)
		}
	}
	ag1.wait(t)
	ag2.wait(t)
	for node, ag := range map[int]*agentDaemon{2: ag1, 3: ag2} {
		b, err := os.ReadFile(filepath.Join(dir, "1", fmt.Sprintf("arbiter.%d", node)))
		if err != nil {
			t.Errorf("node %d's log file: %v", node, err)
			continue
		}
		file := string(b)
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^\S+ arbiter: node 1 leads \(term \d+\)`),
			regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ arbiter: summary of node %d: leader (\d|none) \(term \d+\)`, node)),
		} {
			if !want.MatchString(file) {
				t.Errorf("node %d's log file does not match %v:\n%s", node, want, file)
			}
		}
		// The same lines in the agent's own log.
		if !strings.Contains(ag.logs.String(), "ftrun agent: arbiter: node 1 leads (term ") {
			t.Errorf("agent of node %d does not log the leader:\n%s", node, ag.logs)
		}
	}
	if m := regexp.MustCompile(`(?m)^ftrun: arbiter: summary.*$`).FindString(stderr); m != "" {
		t.Log(m)
	}
}

// --arbiter on one host is a no-op, said once.
func TestArbiterOneHost(t *testing.T) {
	_, stderr, code := runJob(t, "print", []string{"-n", "2", "--arbiter"})
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if strings.Count(stderr, "ftrun: --arbiter: the job runs on this host alone, where ftrun alone decides: no arbiter runs\n") != 1 || strings.Contains(stderr, "arbiter: node") {
		t.Errorf("stderr:\n%s", stderr)
	}
}
