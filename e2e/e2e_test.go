// Package e2e runs ftrma programs as real processes through ftrun over TCP and
// checks what they print and how they exit.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// bins builds ftrun and the test programs once per test binary, or returns
// FTRMA_E2E_BINDIR, where they were built beforehand (the RDMA guest of
// scripts/verbs-test.sh has no Go toolchain).
func bins(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("FTRMA_E2E_BINDIR"); dir != "" {
		return dir
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "ftrma-e2e-")
		if buildErr != nil {
			return
		}
		// Built without the race detector: these tests run real processes
		// at the detector's default timing, which a race build (several
		// times slower, 8-16 processes on 2 cores) cannot keep; the race
		// detector covers the same code in the in-process tests.
		cmd := exec.Command("go", "build", "-o", binDir+string(os.PathSeparator),
			"github.com/ftrma/ftrma/cmd/ftrun",
			"github.com/ftrma/ftrma/examples/rmademo",
			"github.com/ftrma/ftrma/examples/ftdemo",
			"github.com/ftrma/ftrma/examples/ckpt",
			"github.com/ftrma/ftrma/e2e/testprog")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// transport is the --transport of the jobs the running test starts ("":
// ftrun's default); eachTransport sets it. Tests run one at a time.
var transport string

func transportArgs() []string {
	// The jobs run more ranks than the CPUs of a test host (2).
	args := []string{"--oversubscribe"}
	if transport != "" {
		args = append(args, "--transport", transport)
	}
	if h := os.Getenv("FTRMA_E2E_HOSTS"); h != "" {
		args = append(args, "--hosts", h)
	}
	if hbTimeout() != detectorTimeout {
		args = append(args, "--hb-timeout", hbTimeout().String())
	}
	return args
}

// hbTimeout is the failure detector timeout of the jobs: FTRMA_E2E_HB_TIMEOUT
// (an emulated RDMA guest is many times slower than real hardware), else
// the detector's default.
func hbTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FTRMA_E2E_HB_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return detectorTimeout
}

// emulated reports whether the jobs run in an emulated guest
// (FTRMA_E2E_HB_TIMEOUT set): start-up takes seconds there, so kills that
// must land in a running job come later and runs last longer.
func emulated() bool { return hbTimeout() != detectorTimeout }

// sharedTempDir is a temporary directory every rank of a job can write:
// t.TempDir, or, when the jobs span hosts, one under FTRMA_E2E_SHARED_DIR (a
// directory both hosts see, like the guests' 9p share).
func sharedTempDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("FTRMA_E2E_SHARED_DIR")
	if base == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(base, "e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// multiHost reports whether the jobs are spread over hosts
// (FTRMA_E2E_HOSTS, e.g. "local,198.18.0.2:7770"): ranks in the first block
// run here, where the tests can signal them by pid.
func multiHost() bool { return os.Getenv("FTRMA_E2E_HOSTS") != "" }

// eachTransport runs f once per transport, as subtests: FTRMA_E2E_TRANSPORTS
// (comma-separated), by default tcp and shm.
func eachTransport(t *testing.T, f func(t *testing.T)) {
	trs := []string{"tcp", "shm"}
	if v := os.Getenv("FTRMA_E2E_TRANSPORTS"); v != "" {
		trs = strings.Split(v, ",")
	}
	for _, tr := range trs {
		t.Run(tr, func(t *testing.T) {
			transport = tr
			defer func() { transport = "" }()
			f(t)
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	clusterDown()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// cpuHog keeps the CPUs busy beside a job until the test ends, or life
// passes: a busy loop in each of twice as many child processes as there are
// CPUs, each in a session of its own. A rank leads a session of its own
// (launcher/proc_linux.go), and where the kernel shares the CPU among
// sessions first (sched_autogroup) a single loop, or several in one
// session, would get one share against one per rank: the job would barely
// notice it.
func cpuHog(t *testing.T, life time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), life)
	var hogs []*exec.Cmd
	t.Cleanup(func() {
		cancel()
		for _, h := range hogs {
			h.Wait()
		}
	})
	for range 2 * runtime.NumCPU() {
		h := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		h.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := h.Start(); err != nil {
			t.Fatalf("cpu hog: %v", err)
		}
		hogs = append(hogs, h)
	}
}

// ftrun runs ftrun with args, bounded by timeout, and returns its combined
// output and exit code.
func ftrun(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	dir := bins(t)
	args = append(transportArgs(), args...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "ftrun"), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ftrun %v did not finish within %v:\n%s", args, timeout, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ftrun: %v", err)
	}
	return out.String(), code
}

// TestCountersAndLocksOverTCP is the acceptance run of the foundation: 8 ranks
// as processes, 2,000 CAS-loop and 2,000 FetchAndOp increments each (16,000
// per counter), 500 lock/get/put/unlock rounds each (4,000), and put/get
// through a third rank up to 4 MiB.
func TestCountersAndLocks(t *testing.T) { eachTransport(t, testCountersAndLocks) }

func testCountersAndLocks(t *testing.T) {
	iters, rounds := 2000, 500
	if hbTimeout() != detectorTimeout {
		iters, rounds = 250, 60 // an emulated guest: a tenth of the work in about the same time
	}
	out, code := ftrun(t, 5*time.Minute, "-n", "8", "--tag-output", filepath.Join(bins(t), "rmademo"),
		"-iters", fmt.Sprint(iters), "-rounds", fmt.Sprint(rounds), "-max-size", fmt.Sprint(4<<20))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	want := regexp.MustCompile(fmt.Sprintf(`\[0\] verified: 8 ranks; CAS-loop counter %d, FetchAndOp counter %d .*locked counter %d `, 8*iters, 8*iters, 8*rounds))
	if !want.MatchString(out) {
		t.Fatalf("no verified result in output:\n%s", out)
	}
}

// TestIntruderRefused starts a job whose rank 0 publishes its transport
// address; the test connects to it without the job secret, first with a
// forged handshake and then with garbage, and checks that the rank refuses
// and logs both, and that the job still completes and verifies its data.
func TestIntruderRefused(t *testing.T) {
	dir := bins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The intruder attacks rank 0's TCP listener.
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "ftrun"), "--transport", "tcp", "--oversubscribe", "-n", "3", "--tag-output", filepath.Join(dir, "testprog"), "intruder")
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	addrRE := regexp.MustCompile(`^\[0\] address (\S+)$`)
	intruded := false
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if m := addrRE.FindStringSubmatch(line); m != nil && !intruded {
			intruded = true
			// The address carries rank 0's host key after a '#'.
			netAddr, key, ok := strings.Cut(m[1], "#")
			if !ok || len(key) != 64 {
				t.Errorf("rank 0's address %q carries no host key", m[1])
			}
			intrude(t, netAddr)
			// Tell rank 0 the intrusion is over through a file it polls.
			os.WriteFile(filepath.Join(dir, "intruded"), []byte("done"), 0o644)
		}
	}
	err = cmd.Wait()
	all := strings.Join(lines, "\n") + "\n" + stderr.String()
	if err != nil {
		t.Fatalf("job failed: %v\n%s", err, all)
	}
	if !intruded {
		t.Fatalf("rank 0 never published its address:\n%s", all)
	}
	// Both are refused; the second, from the same source within a
	// second, is left out of the log (one line per source a second).
	if n := strings.Count(all, "refused connection"); n < 1 {
		t.Fatalf("want the refused connections logged, got %d lines:\n%s", n, all)
	}
	if !strings.Contains(all, "[0] intruder test verified") {
		t.Fatalf("job did not verify its data:\n%s", all)
	}
}

// intrude connects to addr twice without the job secret.
func intrude(t *testing.T, addr string) {
	t.Helper()
	// 1: a well-formed hello claiming to be rank 1, then a forged proof.
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hello := append([]byte("ftrmatc1"), 0, 0, 0, 1, 0, 0, 0, 0)
	nonce := make([]byte, 32)
	rand.Read(nonce)
	conn.Write(append(hello, nonce...))
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	reply := make([]byte, 64)
	if _, err := io_ReadFull(conn, reply); err == nil {
		forged := make([]byte, 32)
		rand.Read(forged)
		conn.Write(forged)
		if n, _ := conn.Read(make([]byte, 1)); n == 1 {
			// A byte may come back only as a refusal (0).
		}
	}
	conn.Close()
	// 2: garbage.
	conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 4096)
	rand.Read(garbage)
	conn.Write(garbage)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Read(make([]byte, 1))
	conn.Close()
}

func io_ReadFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestExitStatus checks that a failing rank makes ftrun fail.
func TestExitStatus(t *testing.T) {
	out, code := ftrun(t, time.Minute, "-n", "2", filepath.Join(bins(t), "testprog"), "fail-rank", "1")
	if code == 0 {
		t.Fatalf("ftrun exited 0 although rank 1 failed:\n%s", out)
	}
}
