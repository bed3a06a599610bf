package e2e

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// liveJob is a job whose standard output the test reads while it runs
// (testprog modes that print "ready PID" once set up).
type liveJob struct {
	cmd  *exec.Cmd
	sc   *bufio.Scanner
	out  bytes.Buffer // stdout read so far
	errs syncBuffer   // stderr, complete after finish
}

// waitStderr reports whether the job's standard error matched pattern
// within d (it polls what ftrun wrote so far).
func (j *liveJob) waitStderr(pattern string, d time.Duration) bool {
	re := regexp.MustCompile(pattern)
	return waitUntil(d, func() bool { return re.MatchString(j.errs.String()) })
}

// stderrSoFar is what the job wrote to its standard error so far.
func (j *liveJob) stderrSoFar() string { return j.errs.String() }

// startLive starts cmd with its output captured.
func startLive(t *testing.T, cmd *exec.Cmd) *liveJob {
	t.Helper()
	j := &liveJob{cmd: cmd}
	cmd.Stderr = &j.errs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j.sc = bufio.NewScanner(stdout)
	return j
}

var readyRE = regexp.MustCompile(`^\[(\d+)\] ready (\d+)$`)

// waitReady reads until n ranks said "ready PID" and returns their pids by
// rank; it fails the test if the job ends first.
func (j *liveJob) waitReady(t *testing.T, n int) map[int]int {
	t.Helper()
	pids := map[int]int{}
	for len(pids) < n {
		if !j.sc.Scan() {
			j.cmd.Wait()
			t.Fatalf("the job ended before %d ranks were ready:\n%s\n%s", n, j.out.String(), j.errs.String())
		}
		j.out.WriteString(j.sc.Text() + "\n")
		if m := readyRE.FindStringSubmatch(j.sc.Text()); m != nil {
			r, _ := strconv.Atoi(m[1])
			pids[r], _ = strconv.Atoi(m[2])
		}
	}
	return pids
}

// finish reads the rest of the output and waits for the job; it returns
// stdout and stderr.
func (j *liveJob) finish() (stdout, stderr string) {
	for j.sc.Scan() {
		j.out.WriteString(j.sc.Text() + "\n")
	}
	j.cmd.Wait()
	return j.out.String(), j.errs.String()
}
