package launcher

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// fakeSSH writes a stand-in for ssh that runs the remote command on this
// host, records the agent's pid in dir/HOST.pid, and, for the hosts in
// refuse, fails as ssh does when it cannot connect; for hosts named hang*
// it hangs, as ssh toward a host that drops packets. (Real ssh and sshd are
// exercised by the multi-host suite in network namespaces, e2e/cluster.)
func fakeSSH(t *testing.T, refuse ...string) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "ssh")
	var cases strings.Builder
	for _, h := range refuse {
		fmt.Fprintf(&cases, "%s) echo \"ssh: connect to host %s port 22: Connection refused\" >&2; exit 255;;\n", h, h)
	}
	script := fmt.Sprintf(`#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -o|-F) shift 2;; -T) shift;; *) break;; esac; done
host=$1; shift
case "$host" in
%shang*) exec sleep 60;;
esac
echo $$ > %s/$host.pid
exec sh -c "exec $*"
`, cases.String(), dir)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// agentPID reads the pid fakeSSH recorded for host's agent.
func agentPID(t *testing.T, dir, host string) int {
	t.Helper()
	var pid int
	if !waitFor(func() bool {
		b, err := os.ReadFile(filepath.Join(dir, host+".pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}) {
		t.Fatalf("no agent pid for %s", host)
	}
	return pid
}

// ftrun starts the agents of a -H list itself, by the ssh command, and they
// dial back: the job runs over both "hosts", placed as --map-by says.
func TestStartedAgentsRunJob(t *testing.T) {
	ssh, _ := fakeSSH(t)
	for _, c := range []struct {
		mapBy string
		hosts []string // the placement lines -v prints
	}{
		{"slot", []string{"fakehost1: ranks [0 1] (agent started by ssh)", "fakehost2: ranks [2 3] (agent started by ssh)"}},
		{"node", []string{"fakehost1: ranks [0 2] (agent started by ssh)", "fakehost2: ranks [1 3] (agent started by ssh)"}},
	} {
		stdout, stderr, code := runJob(t, "join", []string{"-H", "fakehost1:2,fakehost2:2", "--map-by", c.mapBy, "--ssh", ssh, "--tag-output", "-v", "--timeout", "60s"})
		if code != ExitOK {
			t.Fatalf("--map-by %s: exit %d; stdout:\n%s\nstderr:\n%s", c.mapBy, code, stdout, stderr)
		}
		got := sortedLines(stdout)
		if len(got) != 4 {
			t.Fatalf("--map-by %s: stdout %q, want 4 lines", c.mapBy, got)
		}
		for r, l := range got {
			if !regexp.MustCompile(fmt.Sprintf(`^\[%d\] rank %d of 4 in job [0-9a-f]+: exchanged with 3 peers$`, r, r)).MatchString(l) {
				t.Errorf("--map-by %s: line %q", c.mapBy, l)
			}
		}
		for _, h := range c.hosts {
			if !strings.Contains(stderr, h) {
				t.Errorf("--map-by %s: stderr does not say %q:\n%s", c.mapBy, h, stderr)
			}
		}
	}
}

// A job that does not end well shows what its agents logged, each line
// after the name of what started the agent; a job that ends well does not.
func TestFailedJobShowsItsAgentsLogs(t *testing.T) {
	ssh, _ := fakeSSH(t)
	flags := []string{"-H", "fakehost1:2,fakehost2:2", "--ssh", ssh, "--timeout", "60s"}
	_, stderr, code := runJob(t, "exit", flags, "3", "7")
	if code != ExitFailed {
		t.Fatalf("rank 3 exited with 7: ftrun's exit %d, want %d; stderr:\n%s", code, ExitFailed, stderr)
	}
	for _, h := range []string{"fakehost1: .*ranks \\[0 1\\]", "fakehost2: .*ranks \\[2 3\\]"} {
		if !regexp.MustCompile(`(?m)^ftrun: ssh ` + h + ` of 4$`).MatchString(stderr) {
			t.Errorf("stderr does not show the log of the agent on %s:\n%s", h, stderr)
		}
	}
	_, stderr, code = runJob(t, "exit", flags, "9", "7") // there is no rank 9
	if code != ExitOK || strings.Contains(stderr, "ftrun agent:") {
		t.Errorf("a job that ended well: exit %d, and its agents' logs in stderr:\n%s", code, stderr)
	}
}

// An agent that cannot be started fails the job before any rank starts,
// naming the host and what ssh said.
func TestAgentStartFailureNamesHost(t *testing.T) {
	ssh, _ := fakeSSH(t, "fakehost2")
	start := time.Now()
	stdout, stderr, code := runJob(t, "print", []string{"-H", "fakehost1:2,fakehost2:2", "--ssh", ssh})
	if code != ExitLaunch {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitLaunch, stderr)
	}
	if stdout != "" {
		t.Errorf("ranks ran: %q", stdout)
	}
	for _, want := range []string{"cannot start the agent on fakehost2", "Connection refused"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	t.Logf("failed after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
}

// silenceHost runs a job of helper mode over fakehost1 and fakehost2 (two
// ranks each, agents by the stand-in ssh), waits for n lines containing
// ready, then stops fakehost2's agent: to ftrun the host falls silent, as
// one whose link is cut or that hangs. The agent is killed at the end of
// the test (its ranks die with it).
func silenceHost(t *testing.T, ctx context.Context, mode, ready string, n int, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	ssh, dir := fakeSSH(t)
	cmd := helperCmd(t, ctx, mode, []string{"-H", "fakehost1:2,fakehost2:2", "--ssh", ssh, "--tag-output"}, args...)
	errs := new(bytes.Buffer)
	cmd.Stderr = errs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitLines(t, lineReader(out), ready, n)
	pid := agentPID(t, dir, "fakehost2")
	syscall.Kill(pid, syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return cmd, errs
}

// An agent that never connects (ssh hangs toward an unreachable host)
// fails the job within the agents' bound, naming the host, before any rank
// starts.
func TestAgentNeverConnects(t *testing.T) {
	ssh, _ := fakeSSH(t)
	start := time.Now()
	stdout, stderr, code := runJob(t, "print", []string{"-H", "fakehost1:2,hanghost:2", "--ssh", ssh})
	took := time.Since(start)
	if code != ExitLaunch || !strings.Contains(stderr, "the agents on hanghost did not connect within 10s") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("ranks ran: %q", stdout)
	}
	t.Logf("failed after %v", took.Round(time.Millisecond))
}

// The host group's verdict that a host is dead is ignored while the
// host's agent link is alive (the gossip was wrong), and acted on once the
// link is silent too.
func TestHostDeadVerdictNeedsASilentLink(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	l := &agentLink{addr: "h2", conn: a, wake: make(chan struct{}, 1), tm: scaledTiming(1)}
	l.heard.Store(time.Now().UnixNano())
	l.hostDead()
	l.mu.Lock()
	why := l.why
	l.mu.Unlock()
	if why != "" {
		t.Fatalf("a verdict against a live link cut it: %q", why)
	}
	l.heard.Store(time.Now().Add(-time.Second).UnixNano())
	l.hostDead()
	l.mu.Lock()
	why = l.why
	l.mu.Unlock()
	if why != "memberlist declared host h2 dead" {
		t.Fatalf("a verdict against a silent link: %q", why)
	}
	if _, err := b.Write([]byte{0}); err == nil {
		t.Error("the link was not closed")
	}
}

// A host that goes silent has its ranks counted as failed: by the arbiter's
// verdict on the host (the default over several hosts); the job ends with
// the survivors' status instead of waiting forever. (With --no-arbiter
// ftrun counts them failed within the link timeout, as e2e's partition
// matrix checks.)
func TestSilentHostCountsAsFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd, errs := silenceHost(t, ctx, "sleep", "rank 2 sleeping", 1, "2")
	stopped := time.Now()
	err := cmd.Wait()
	took := time.Since(stopped)
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end after the host went silent; stderr:\n%s", errs.String())
	}
	if err != nil {
		t.Errorf("ftrun: %v (the survivors exited 0); stderr:\n%s", err, errs.String())
	}
	for _, want := range []string{
		`ftrun: arbiter: host 2 failed: host silent`,
		// Rank 2 sleeps; rank 3 may have ended before the silence.
		`ftrun: rank 2 failed at [0-9.]+s: .*the arbiter declared it failed: host failed`,
		// A job that lost ranks ends with its agents' logs, though the
		// survivors ended well: the live agent's, at least.
		`(?m)^ftrun: ssh fakehost1: ftrun agent: job [0-9a-f]+ from .*: starting ranks \[0 1\] of 4$`,
	} {
		if !regexp.MustCompile(want).MatchString(errs.String()) {
			t.Errorf("stderr does not match %q:\n%s", want, errs.String())
		}
	}
	t.Logf("ftrun ended %v after the host went silent; stderr:\n%s", took.Round(time.Millisecond), errs.String())
}

// SIGTERM ends ftrun within a bound even when a host cannot be reached.
func TestInterruptWithSilentHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd, errs := silenceHost(t, ctx, "hang", "ready", 4)
	cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end after SIGTERM; stderr:\n%s", errs.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitSignaled+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitSignaled+int(syscall.SIGTERM), errs.String())
	}
	t.Logf("ftrun ended %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
}

// A suspicion counts only from a rank in good standing: one from a rank
// already declared failed, or gone (lost with its host), kills nobody.
func TestSuspicionFromOutsideIgnored(t *testing.T) {
	var out, errs bytes.Buffer
	j := &Job{out: &sink{stdout: &out, stderr: &errs}, declared: make([]bool, 4), start: time.Now()}
	for r := range 4 {
		// running, but no process or link: signalLocked has nothing to kill.
		j.ranks = append(j.ranks, &rankProc{rank: ftrma.Rank(r)})
	}
	j.ranks[0].running, j.ranks[1].running = true, true
	j.declared[3] = true
	j.suspect(0, 3) // from a declared rank
	j.suspect(1, 2) // from a rank that is gone
	if j.declared[0] || j.declared[1] {
		t.Errorf("a suspicion from outside declared a rank failed: %v\n%s", j.declared, errs.String())
	}
	if strings.Count(errs.String(), "ignored rank") != 2 {
		t.Errorf("the ignored suspicions are not reported:\n%s", errs.String())
	}
	j.suspect(2, 0) // from a rank in good standing
	if !j.declared[2] {
		t.Error("a suspicion from a live rank was ignored")
	}
}

// Stopping the starters of two hosts that never end their sessions (both
// cut off: ssh waits for packets that never come) kills both once the grace
// has passed; the second is not left waiting for a deadline the first used.
func TestStopKillsEveryStuckStarter(t *testing.T) {
	d, err := listenDialBack(make([]byte, 32), "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	for _, h := range []string{"hang1", "hang2"} {
		// Ignores its input closing, as ssh toward a silent host does.
		if err := d.run("ssh "+h, []string{h}, "sh", []string{"-c", "exec sleep 60 </dev/null"}, "boot line\n"); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make(chan struct{})
	go func() {
		d.stop(50 * time.Millisecond)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("stop did not return: a starter was never killed")
	}
	for _, s := range d.starters {
		ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("%s ended with %v, want killed", s.what, s.cmd.ProcessState)
		}
	}
}

// Two ranks that cannot reach each other (the link between their hosts cut,
// both reach ftrun) accuse each other, and neither answers ftrun's probe
// in time: only one is declared failed, the other's accuser being gone.
func TestMutualSuspicionsKillOne(t *testing.T) {
	rv, _ := startServer(t, 4)
	var out, errs bytes.Buffer
	j := &Job{out: &sink{stdout: &out, stderr: &errs}, declared: make([]bool, 4), start: time.Now(),
		rv: rv, suspicions: make(map[ftrma.Rank]*suspicion), tm: hostTiming{lease: time.Second}}
	for r := range 4 {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		j.ranks = append(j.ranks, &rankProc{rank: ftrma.Rank(r), running: true, cmd: cmd})
	}
	j.suspect(2, 1)
	j.suspect(1, 2)
	// Whichever accusation is taken up first wins; the other is ignored
	// (then it leaves no suspicion behind) or probed to its end.
	probing := func(r ftrma.Rank) bool { s := j.suspicions[r]; return s != nil && s.probing }
	if !waitFor(func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return (j.declared[1] || j.declared[2]) && !probing(1) && !probing(2)
	}) {
		t.Fatalf("neither was declared:\n%s", errs.String())
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.declared[1] && j.declared[2] {
		t.Errorf("both ranks of a mutual accusation were declared failed:\n%s", errs.String())
	}
}

// mungeUID reads unmunge's numeric metadata, and nothing else.
func TestMungeUID(t *testing.T) {
	for _, c := range []struct {
		meta string
		uid  int
		ok   bool
	}{
		{"UID:             1000\n", 1000, true},
		{"GID: 5\nUID: 0\n", 0, true},
		{"UID:             root (0)\n", 0, false},
		{"UID: -1\n", 0, false},
		{"", 0, false},
	} {
		if uid, ok := mungeUID(c.meta); uid != c.uid || ok != c.ok {
			t.Errorf("mungeUID(%q) = %d, %v; want %d, %v", c.meta, uid, ok, c.uid, c.ok)
		}
	}
}
