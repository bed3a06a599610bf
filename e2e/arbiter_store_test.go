package e2e

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The store under ftrun --arbiter with ftrun on the minority side of a
// split. kvlin (two clients per rank put, delete, compare-and-swap and get
// four shared keys, Copies 3) runs on 10 ranks, two per host, a second
// before the split (cluster.sh split), in two cases:
//
//   - "ftrun's host alone": ranks 0 and 1 on ftrun's own host (localhost
//     in the hostfile), 2..9 on h1..h4; ftrun's host is cut from the four.
//   - "1+3, ftrun with the 1": ranks 0..1 on ftrun's host, 2..3 on h1,
//     4..9 on h2..h4; ftrun's host and h1 are cut from h2..h4.
//
// The side without ftrun holds the arbiter's quorum (3 or 4 of 5 voters)
// and goes on; the ranks of ftrun's side stop with their hosts' leases
// (status 76 for ftrun's own), and only once the other side's leader has
// declared their hosts failed do its ranks take over the keys. The split
// is healed once ftrun has left the job. Checked over the histories of
// both sides together: they are linearizable (porcupine: no acknowledged
// write lost, no stale read, nothing the cut side did after the takeover
// counts); the ranks of ftrun's side stopped, every operation of theirs
// returned within stopBound of the split; the others finish their clients
// (their output files, which the agents write, say "clients done"), and
// every key has 3 whole replicas again.
func TestArbiterClusterStoreFtrunCut(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	for _, c := range []struct {
		name     string
		hostfile string
		sides    []string // cluster.sh split's two sides
		cut      int      // ranks 0..cut-1 are on ftrun's side
	}{
		{"ftrun's host alone", "localhost slots=2\nh1 slots=2\nh2 slots=2\nh3 slots=2\nh4 slots=2", []string{"root", "h1,h2,h3,h4"}, 2},
		{"1+3, ftrun with the 1", "localhost slots=2\nh1 slots=2\nh2 slots=2\nh3 slots=2\nh4 slots=2", []string{"root,h1", "h2,h3,h4"}, 4},
	} {
		t.Run(c.name, func(t *testing.T) { testArbiterStoreSplit(t, dir, bin, c.hostfile, c.sides, c.cut) })
	}
}

func testArbiterStoreSplit(t *testing.T, dir, bin, hostfile string, sides []string, cutRanks int) {
	hf := writeHostfile(t, hostfile)
	hist := sharedTempDir(t)
	os.Chmod(hist, 0o777)
	cmd, job, out := startWithOutput(t, dir, 10, []string{filepath.Join(bin, "ftrun"), "--arbiter", "--hostfile", hf, "--tag-output"},
		filepath.Join(bin, "testprog"), "kvlin", hist, "9s", "3", "4", "6ms")
	dump := time.AfterFunc(90*time.Second, func() {
		exec.Command("pkill", "-QUIT", "-f", "testprog kvlin "+hist).Run()
	})
	defer dump.Stop()
	waitHistories(t, hist, 10, 20*time.Second)
	time.Sleep(time.Second)
	join := splitCluster(t, dir, sides[0], sides[1])
	cut := time.Now()
	outText, errText := job.finish()
	ended := time.Since(cut)
	join()
	report := fmt.Sprintf("stdout:\n%s\nstderr:\n%s", outText, errText)
	if !cmd.ProcessState.Exited() {
		t.Fatalf("ftrun did not end:\n%s", report)
	}
	for r := range 2 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^ftrun: rank %d exited with status 76$`, r)).MatchString(errText) {
			t.Errorf("rank %d, on ftrun's host, did not stop with its lost lease (status 76)", r)
		}
	}
	// The other side finishes by itself.
	awaitAgentsGone(t, dir, []string{"h1", "h2", "h3", "h4"}, 2*time.Minute)
	all := out.stdout()
	for r := range 10 {
		if done := strings.Contains(out.read(r, "stdout"), "clients done\n"); done != (r >= cutRanks) {
			t.Errorf("rank %d: clients done %v, want %v", r, done, r >= cutRanks)
		}
	}
	for k := range 4 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)(^|\] )whole %d 3$`, k)).MatchString(all) {
			t.Errorf("key %d did not get 3 whole replicas back", k)
		}
	}
	ops, completed, open := readHistory(t, hist)
	var cutOps, lateCut int
	for _, op := range ops {
		if op.ClientId/2 < cutRanks && op.Return != math.MaxInt64 {
			cutOps++
			if time.Unix(0, op.Return).After(cut.Add(stopBound)) {
				lateCut++
			}
		}
	}
	if cutOps == 0 {
		t.Errorf("the ranks of ftrun's side completed no operation: the test did not test them")
	}
	if lateCut > 0 {
		t.Errorf("%d operations of the ranks of ftrun's side returned more than %v after the split", lateCut, stopBound)
	}
	checkLinearizable(t, hist, ops, completed, open)
	if t.Failed() {
		out.logFiles(t)
		t.Logf("the ranks' stdout:\n%s", all)
		t.Log(report)
	}
	t.Logf("%d ops completed (%d by the %d ranks of ftrun's side), %d open; ftrun ended %v after the split", completed, cutOps, cutRanks, open, ended.Round(time.Millisecond))
}
