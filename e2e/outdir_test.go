package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the multi-host tests that read a job's --output-filename
// directory (the agents write it on their hosts; the hosts share the
// machine's files) and split the cluster.

// outDir is a job's --output-filename DIR with n ranks.
type outDir struct {
	dir string
	n   int
}

// rank returns the path of rank r's file name (stdout or stderr): Open
// MPI's DIR/1/rank.N, N padded to the width of the number of ranks (as
// launcher/outfiles.go does it: rank.00 .. rank.09 for 10 ranks).
func (o outDir) rank(r int, name string) string {
	width := len(fmt.Sprint(max(o.n, 1)))
	return filepath.Join(o.dir, "1", fmt.Sprintf("rank.%0*d", width, r), name)
}

// read returns rank r's file name ("" if there is none).
func (o outDir) read(r int, name string) string {
	b, _ := os.ReadFile(o.rank(r, name))
	return string(b)
}

// stdout returns every rank's stdout, in rank order.
func (o outDir) stdout() string {
	var b strings.Builder
	for r := range o.n {
		b.WriteString(o.read(r, "stdout"))
	}
	return b.String()
}

var resultLineRE = regexp.MustCompile(`(?m)result: .*$`)

// results returns the result lines of the checkpointing example in every
// rank's stdout.
func (o outDir) results() []string { return resultLineRE.FindAllString(o.stdout(), -1) }

// logFiles logs every rank's stderr and the logs of the arbiter's nodes
// (DIR/1/arbiter.N), for a test that failed.
func (o outDir) logFiles(t *testing.T) {
	t.Helper()
	for r := range o.n {
		t.Logf("rank %d's stderr:\n%s", r, o.read(r, "stderr"))
	}
	logs, _ := filepath.Glob(filepath.Join(o.dir, "1", "arbiter.*"))
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		t.Logf("%s:\n%s", filepath.Base(f), b)
	}
}

// awaitStart waits until the highest rank's directory exists (its agent or
// ftrun makes it as it starts the rank), at most a minute; else it kills
// the job and fails the test with its output.
func (o outDir) awaitStart(t *testing.T, job *liveJob) {
	t.Helper()
	last := filepath.Dir(o.rank(o.n-1, "stdout"))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(last); err == nil {
			return
		}
		if time.Now().After(deadline) {
			job.cmd.Process.Kill()
			out, errs := job.finish()
			t.Fatalf("rank %d did not start within a minute:\n%s\n%s", o.n-1, out, errs)
		}
	}
}

// awaitAgentsGone waits until no agent runs on any of hosts (h1.. names),
// at most within; else it fails the test.
func awaitAgentsGone(t *testing.T, dir string, hosts []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, h := range hosts {
		for len(procsOn(t, dir, h, "[a]gent --boot")) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("an agent still runs on %s %v on", h, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// splitCluster splits the cluster (cluster.sh split DIR args...) and returns
// the function that heals it (cluster.sh join), which does so once however
// often it is called; the test heals it at its end in any case.
func splitCluster(t *testing.T, dir string, args ...string) (heal func()) {
	t.Helper()
	if o, err := exec.Command(clusterScript(), append([]string{"split", dir}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("split: %v\n%s", err, o)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			if o, err := exec.Command(clusterScript(), "join", dir).CombinedOutput(); err != nil {
				t.Errorf("join: %v\n%s", err, o)
			}
		})
	}
	t.Cleanup(heal)
	return heal
}

// startWithOutput starts cmd... (ftrun, or what runs it) in the root
// namespace with --output-filename into a fresh world-writable directory
// inserted before the program (prog and its arguments), for a job of n
// ranks, bounded by 3 minutes; it returns the command, the live job and
// its output directory.
func startWithOutput(t *testing.T, dir string, n int, cmd []string, prog ...string) (*exec.Cmd, *liveJob, outDir) {
	t.Helper()
	work := t.TempDir()
	os.Chmod(work, 0o777)
	out := outDir{filepath.Join(work, "out"), n}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	args := append(append(append([]string{}, cmd[1:]...), "--output-filename", out.dir), prog...)
	c := clusterCmd(ctx, t, dir, cmd[0], args...)
	return c, startLive(t, c), out
}

// writeHostfile writes a hostfile of lines ("localhost slots=2" names
// ftrun's own host) and returns its path.
func writeHostfile(t *testing.T, lines ...string) string {
	t.Helper()
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return hf
}

// reportedFailed returns the ranks ftrun reported failed in its standard
// error ("rank N failed at Ts").
func reportedFailed(stderr string) map[int]bool {
	lost := map[int]bool{}
	for _, m := range failedAtRE.FindAllStringSubmatch(stderr, -1) {
		r, _ := strconv.Atoi(m[1])
		lost[r] = true
	}
	return lost
}

var failedAtRE = regexp.MustCompile(`rank (\d+) failed at [0-9.]+s`)
