package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A host lost, its rank respawned on a spare host. Ranks 0, 1, 2 run on
// h1, h2, h3 (one rank per host, so the transport is TCP alone: shm+tcp
// with spares is another piece of work), with h4 for spares only
// (--spare-hosts h4, its agent started by ssh with the job's). Every
// process on h2 is killed; the survivors' Replace asks ftrun for a spare
// near rank 1, whose host is lost, so the spare (world rank 3) starts on
// h4 and takes rank 1's number. The new communicator is full size again,
// its members report their hosts, and the job ends with status 0.
func TestClusterRespawn(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "-n", "3", "--respawn=1", "--spare-hosts", "h4",
		"--transport", "tcp", "-v", "--tag-output", filepath.Join(bin, "testprog"), "replacehost", "1")
	job := startLive(t, cmd)
	job.waitReady(t, 3)
	time.Sleep(300 * time.Millisecond)
	lost := time.Now()
	if o, err := exec.Command(clusterScript(), "killhost", dir, "h2").CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh killhost h2: %v\n%s", err, o)
	}
	defer exec.Command(clusterScript(), "revive", dir, "h2").Run()
	outText, errText := job.finish()
	took := time.Since(lost)
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end:\n%s\n%s", outText, errText)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d, want 0 (every survivor and the spare exited 0):\n%s\n%s", code, outText, errText)
	}
	for _, want := range []string{
		"[3] replaces 1 as rank 1 of 3 on h4",
		"[0] members 0@h1 3@h4 2@h3",
		"[0] done 0 of 3", "[3] done 1 of 3", "[2] done 2 of 3",
	} {
		if !strings.Contains(outText, want+"\n") {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, outText, errText)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`ftrun: h4: spare ranks only, 1 slot \(agent started by ssh\)`),
		regexp.MustCompile(`rank 1 failed at [0-9.]+s: was lost`),
		regexp.MustCompile(`started spare rank 3 on h4 at rank 0's request`),
	} {
		if !want.MatchString(errText) {
			t.Errorf("stderr does not match %v:\n%s", want, errText)
		}
	}
	t.Logf("h2 lost to the job's end (detect, agree, spawn on h4, connect, two collectives): %v", took.Round(time.Millisecond))
}
