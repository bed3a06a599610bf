package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
	"golang.org/x/sys/unix"
)

// runJob runs ftrun with flags over the helper in mode and returns its output
// and exit status.
func runJob(t *testing.T, mode string, flags []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runJobIn(t, nil, mode, flags, args...)
}

// runJobIn is runJob with in as ftrun's standard input (nil: /dev/null).
func runJobIn(t *testing.T, in io.Reader, mode string, flags []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd := helperCmd(t, ctx, mode, flags, args...)
	cmd.Stdin = in
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("ftrun: %v\nstderr:\n%s", err, errs.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not finish in time\nstdout:\n%s\nstderr:\n%s", out.String(), errs.String())
	}
	return out.String(), errs.String(), code
}

// sortedLines returns s's lines, sorted (ranks write concurrently).
func sortedLines(s string) []string {
	l := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	sort.Strings(l)
	return l
}

func TestProcessTaggedOutput(t *testing.T) {
	stdout, stderr, code := runJob(t, "print", []string{"-n", "3", "--tag-output", "--timeout", "60s"})
	if code != ExitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	wantOut := []string{"[0] hello from rank 0", "[1] hello from rank 1", "[2] hello from rank 2"}
	wantErr := []string{"[0] warning from rank 0", "[1] warning from rank 1", "[2] warning from rank 2"}
	if got := sortedLines(stdout); !equal(got, wantOut) {
		t.Errorf("stdout %q, want %q", got, wantOut)
	}
	if got := sortedLines(stderr); !equal(got, wantErr) {
		t.Errorf("stderr %q, want %q", got, wantErr)
	}
}

func TestProcessUntaggedOutput(t *testing.T) {
	stdout, stderr, code := runJob(t, "print", []string{"-n", "2"})
	want := []string{"hello from rank 0", "hello from rank 1"}
	if got := sortedLines(stdout); code != ExitOK || !equal(got, want) {
		t.Fatalf("exit %d, stdout %q; want 0, %q; stderr:\n%s", code, got, want, stderr)
	}
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestProcessExitStatus(t *testing.T) {
	stdout, stderr, code := runJob(t, "exit", []string{"-n", "3"}, "1", "3")
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitFailed, stdout, stderr)
	}
	if !strings.Contains(stderr, "ftrun: rank 1 exited with status 3\n") {
		t.Errorf("stderr does not report rank 1's status:\n%s", stderr)
	}
	if strings.Contains(stderr, "rank 0") || strings.Contains(stderr, "rank 2") {
		t.Errorf("stderr reports a rank that exited 0:\n%s", stderr)
	}
	_, stderr, code = runJob(t, "exit", []string{"-n", "3"}, "-1", "3")
	if code != ExitOK || stderr != "" {
		t.Fatalf("all ranks exit 0: ftrun exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
}

func TestProcessEnvironment(t *testing.T) {
	const n = 3
	stdout, stderr, code := runJob(t, "env", []string{"-n", fmt.Sprint(n), "--tag-output"})
	if code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	vars := make([]map[string]string, n)
	for i := range vars {
		vars[i] = make(map[string]string)
	}
	line := regexp.MustCompile(`^\[(\d)\] (FTRMA_\w+)=(.*)$`)
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected line %q", l)
		}
		vars[m[1][0]-'0'][m[2]] = m[3]
	}
	for r, v := range vars {
		if v[jobwire.EnvRank] != fmt.Sprint(r) || v[jobwire.EnvSize] != fmt.Sprint(n) || v[jobwire.EnvLocalSize] != fmt.Sprint(n) {
			t.Errorf("rank %d: %v", r, v)
		}
		if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(v[jobwire.EnvRendezvous]) {
			t.Errorf("rank %d: FTRMA_RENDEZVOUS=%q, want 127.0.0.1:port", r, v[jobwire.EnvRendezvous])
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(v[jobwire.EnvSecret]) {
			t.Errorf("rank %d: FTRMA_SECRET is not 32 bytes of hex", r)
		}
		if v[jobwire.EnvJob] == "" {
			t.Errorf("rank %d: FTRMA_JOB empty", r)
		}
		for _, name := range []string{jobwire.EnvRendezvous, jobwire.EnvSecret, jobwire.EnvJob} {
			if v[name] != vars[0][name] {
				t.Errorf("rank %d: %s differs from rank 0's", r, name)
			}
		}
	}
	// A fresh secret per job.
	stdout2, _, _ := runJob(t, "env", []string{"-n", "1"})
	if strings.Contains(stdout2, vars[0][jobwire.EnvSecret]) {
		t.Error("two jobs got the same secret")
	}
}

// A killed rank does not fail the job when the survivors exit 0, and ftrun
// says which rank failed and when.
func TestProcessKill(t *testing.T) {
	stdout, stderr, code := runJob(t, "sleep", []string{"-n", "3", "--kill", "1@200ms", "--timeout", "60s"}, "1")
	if code != ExitOK {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitOK, stdout, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`ftrun: killed rank 1 \(--kill 1@200ms\)\n`),
		regexp.MustCompile(`ftrun: rank 1 failed at \d+\.\d{3}s: was killed by signal 9 \(killed\)\n`),
		regexp.MustCompile(`ftrun: 1 rank\(s\) failed: 1 \(at \d+\.\d{3}s\); 2 survived\n`),
	} {
		if !want.MatchString(stderr) {
			t.Fatalf("stderr:\n%s\nwant it to match %v", stderr, want)
		}
	}
	if strings.Contains(stderr, "rank 0") || strings.Contains(stderr, "rank 2") || strings.Contains(stderr, "timeout") {
		t.Errorf("stderr reports more than rank 1's kill:\n%s", stderr)
	}
}

// With --no-ft the first failure aborts the job: the other ranks are
// killed, and ftrun exits with the failed rank's status, as mpirun does:
// 128 + the signal that killed it.
func TestProcessKillNoFT(t *testing.T) {
	stdout, stderr, code := runJob(t, "hang", []string{"-n", "3", "--no-ft", "--kill", "1@300ms", "--timeout", "60s"})
	if want := 128 + int(syscall.SIGKILL); code != want {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, want, stdout, stderr)
	}
	if !strings.Contains(stderr, "ftrun: --no-ft: rank 1 failed: aborting the job\n") {
		t.Fatalf("no abort report in stderr:\n%s", stderr)
	}
}

// With --no-ft a rank that exits non-zero aborts the job, and its status
// is ftrun's.
func TestProcessExitNoFT(t *testing.T) {
	_, stderr, code := runJob(t, "exit", []string{"-n", "3", "--no-ft", "--timeout", "60s"}, "2", "7")
	if code != 7 || !strings.Contains(stderr, "ftrun: --no-ft: rank 2 failed: aborting the job\n") {
		t.Fatalf("exit %d, want 7 and the abort report; stderr:\n%s", code, stderr)
	}
}

// The survivors decide the exit status: a survivor exiting non-zero fails the
// job even when another rank was killed.
func TestProcessSurvivorFails(t *testing.T) {
	_, stderr, code := runJob(t, "exit", []string{"-n", "3", "--timeout", "60s"}, "2", "7")
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitFailed, stderr)
	}
}

func TestProcessTimeout(t *testing.T) {
	_, stderr, code := runJob(t, "sleep", []string{"-n", "2", "--timeout", "300ms"}, "0")
	if code != ExitTimeout || !strings.Contains(stderr, "ftrun: timeout (300ms) expired: killing the job\n") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and a timeout report", code, stderr, ExitTimeout)
	}
}

func TestProcessJoin(t *testing.T) {
	const n = 4
	stdout, stderr, code := runJob(t, "join", []string{"-n", fmt.Sprint(n), "--tag-output", "--timeout", "60s"})
	if code != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	got := sortedLines(stdout)
	if len(got) != n {
		t.Fatalf("stdout %q, want %d lines", got, n)
	}
	for r, l := range got {
		want := regexp.MustCompile(fmt.Sprintf(`^\[%d\] rank %d of %d in job [0-9a-f]+: exchanged with %d peers$`, r, r, n, n-1))
		if !want.MatchString(l) {
			t.Errorf("line %q does not match %v", l, want)
		}
	}
}

// A rank that exits before joining makes the others' Join fail instead of
// waiting forever.
func TestProcessJoinFailsWhenRankExits(t *testing.T) {
	stdout, stderr, code := runJob(t, "join", []string{"-n", "3", "--tag-output", "--timeout", "60s"}, "2")
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitFailed, stdout, stderr)
	}
	for _, want := range []string{
		"ftrun: rank 2 exited with status 7\n",
		"[0] launcher: rank 0: rendezvous with 127.0.0.1:",
		"[1] launcher: rank 1: rendezvous with 127.0.0.1:",
		"launcher says: rank 2 exited with status 7 before the rendezvous completed\n",
		"ftrun: rank 0 exited with status 1\n",
		"ftrun: rank 1 exited with status 1\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
}

// lineReader hands out the lines of r as they arrive.
func lineReader(r io.Reader) <-chan string {
	c := make(chan string, 100)
	go func() {
		defer close(c)
		s := bufio.NewScanner(r)
		for s.Scan() {
			c <- s.Text()
		}
	}()
	return c
}

// waitLines reads lines until n of them contain sub, or the test times out.
func waitLines(t *testing.T, lines <-chan string, sub string, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(helperLife)
	for len(got) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended after %q, want %d lines with %q", got, n, sub)
			}
			if strings.Contains(l, sub) {
				got = append(got, l)
			}
		case <-timeout:
			t.Fatalf("got %q, want %d lines with %q", got, n, sub)
		}
	}
	return got
}

// SIGINT to ftrun reaches every rank; ftrun exits 128+SIGINT.
func TestProcessInterrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd := helperCmd(t, ctx, "hang", []string{"-n", "2", "--tag-output", "--timeout", "60s"})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := lineReader(stdout)
	waitLines(t, lines, "ready", 2)
	cmd.Process.Signal(syscall.SIGINT)
	waitLines(t, lines, "got interrupt", 2)
	for range lines {
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("ftrun: %v, want exit status %d; stderr:\n%s", err, 128+int(syscall.SIGINT), errs.String())
	}
	if !strings.Contains(errs.String(), "ftrun: got interrupt: forwarding it to the ranks") {
		t.Errorf("stderr does not report the forwarded signal:\n%s", errs.String())
	}
}

// Ranks do not outlive a launcher killed with SIGKILL (Pdeathsig).
func TestProcessRanksDieWithLauncher(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	cmd, pids := startPIDJob(t, 2)
	cmd.Process.Kill()
	cmd.Wait()
	for _, pid := range pids {
		if !waitFor(func() bool { return !alive(pid) }) {
			t.Errorf("rank process %d outlived its launcher", pid)
		}
	}
}

// startPIDJob starts ftrun over n helper ranks that print their pid and
// sleep, and returns ftrun's command, stopped with the test, and the
// ranks' pids.
func startPIDJob(t *testing.T, n int) (*exec.Cmd, []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	cmd := helperCmd(t, ctx, "pid", []string{"-n", strconv.Itoa(n), "--timeout", "60s"})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	var pids []int
	for _, l := range waitLines(t, lineReader(stdout), "pid ", n) {
		var pid int
		fmt.Sscanf(l, "pid %d", &pid)
		pids = append(pids, pid)
	}
	return cmd, pids
}

// Every rank leads a session of its own, whether ftrun or an agent starts
// it: where the kernel shares the CPU among sessions first
// (sched_autogroup), a host's busy ranks would otherwise share one share
// with their agent and starve it (proc_linux.go).
func TestProcessRanksLeadSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	leads := func(who string, pid int) {
		t.Helper()
		sid, err := unix.Getsid(pid)
		if err != nil {
			t.Fatalf("%s (pid %d): getsid: %v", who, pid, err)
		}
		pgid, err := unix.Getpgid(pid)
		if err != nil {
			t.Fatalf("%s (pid %d): getpgid: %v", who, pid, err)
		}
		if sid != pid || pgid != pid {
			t.Errorf("%s (pid %d) is in session %d, process group %d; want its own", who, pid, sid, pgid)
		}
	}
	_, pids := startPIDJob(t, 2)
	for _, pid := range pids {
		leads("a rank ftrun started", pid)
	}

	a, _ := startAgent(t, "pid", false)
	l, err := dialAgent(a.Addr().String(), testAgentKey())
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	started, err := l.launch(&launchSpec{job: "t", prog: selfPath(t), size: 2,
		ranks: []launchRank{{rank: 1, env: []string{"FTRMA_RANK=1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range started {
		leads("a rank an agent started", p.pid)
	}
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// --bind-to core runs each rank on a CPU of its own, the i-th rank on the
// i-th CPU ftrun may use, and --report-bindings says so; without it the
// ranks may run wherever ftrun may. More ranks than CPUs cannot be bound.
func TestProcessBindToCore(t *testing.T) {
	mine := allowedCPUs()
	if len(mine) < 2 {
		t.Skip("NOT RUN: binding two ranks needs two CPUs; this process may use ", len(mine))
	}
	stdout, stderr, code := runJob(t, "affinity", []string{"-n", "2", "--bind-to", "core", "--report-bindings"})
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for r := range 2 {
		if want := fmt.Sprintf("rank %d cpus [%d]\n", r, mine[r]); !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
		if want := regexp.MustCompile(fmt.Sprintf(`ftrun: rank %d on \S+: bound to cpu %d\n`, r, mine[r])); !want.MatchString(stderr) {
			t.Errorf("stderr does not match %v:\n%s", want, stderr)
		}
	}
	stdout, stderr, code = runJob(t, "affinity", []string{"-n", "2", "--report-bindings"})
	if code != ExitOK || !strings.Contains(stdout, fmt.Sprintf("rank 1 cpus %v\n", mine)) || !strings.Contains(stderr, "rank 1 on ") || !strings.Contains(stderr, ": not bound\n") {
		t.Errorf("unbound: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	n := len(mine) + 1
	_, stderr, code = runJob(t, "affinity", []string{"-n", strconv.Itoa(n), "--oversubscribe", "--bind-to", "core"})
	if code != ExitLaunch || !strings.Contains(stderr, fmt.Sprintf("--bind-to core: %d ranks on this host", n)) {
		t.Errorf("%d ranks bound on %d CPUs: exit %d, stderr:\n%s", n, len(mine), code, stderr)
	}
	var usage bytes.Buffer
	if code := Main([]string{"-n", "1", "--bind-to", "socket", "prog"}, new(bytes.Buffer), &usage); code != ExitUsage || !strings.Contains(usage.String(), "want core or none") {
		t.Errorf("--bind-to socket: exit %d, %q", code, usage.String())
	}
}

// --stdin: ftrun's standard input goes to rank 0 by default (mpirun's
// rule), to one rank, to every rank, or to none; a rank without it reads
// /dev/null, and a bad value is a usage error.
func TestProcessStdin(t *testing.T) {
	const text = "line one\nline two\n"
	for _, c := range []struct {
		flags []string
		get   []bool // by rank
	}{
		{nil, []bool{true, false, false}},
		{[]string{"--stdin", "2"}, []bool{false, false, true}},
		{[]string{"--stdin", "all"}, []bool{true, true, true}},
		{[]string{"--stdin", "none"}, []bool{false, false, false}},
	} {
		stdout, stderr, code := runJobIn(t, strings.NewReader(text), "stdin", append([]string{"-n", "3"}, c.flags...))
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr:\n%s", c.flags, code, stderr)
		}
		for r, get := range c.get {
			want := ""
			if get {
				want = text
			}
			if line := fmt.Sprintf("rank %d read %q, <nil>\n", r, want); !strings.Contains(stdout, line) {
				t.Errorf("%v: stdout lacks %q:\n%s", c.flags, line, stdout)
			}
		}
	}
	var usage bytes.Buffer
	if code := Main([]string{"-n", "2", "--stdin", "2", "prog"}, new(bytes.Buffer), &usage); code != ExitUsage || !strings.Contains(usage.String(), "want none, all or a rank") {
		t.Errorf("--stdin 2 of 2 ranks: exit %d, %q", code, usage.String())
	}
}

// A rank that does not read its standard input does not hold up ftrun: what
// does not fit in its queue is dropped, with a report, and the job ends when
// the rank does.
func TestProcessStdinNotRead(t *testing.T) {
	in := bytes.NewReader(make([]byte, 3*stdinQueue*stdinChunk))
	_, stderr, code := runJobIn(t, in, "nostdin", []string{"-n", "1"})
	if code != ExitOK || !strings.Contains(stderr, "ftrun: rank 0 does not read its standard input: ftrun drops the rest of it for that rank\n") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}
