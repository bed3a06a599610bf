package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ftrma/ftrma/internal/kvcheck"
)

// The store under ftrun --arbiter with ftrun's host cut off. Ten ranks:
// 0 and 1 on ftrun's own host (localhost in the hostfile), 2..9 on h1..h4,
// run kvlin (two clients per rank put, delete, compare-and-swap and get
// four shared keys, Copies 3) while ftrun's host is cut from the four
// compute hosts (cluster.sh split DIR root h1,h2,h3,h4) a second in. The
// compute hosts hold the arbiter's quorum (4 of 5 voters) and go on; ranks
// 0 and 1 stop with node 1's host lease (status 76), and only once the
// compute hosts' leader has declared ftrun's host failed do their ranks
// take over the keys. The link is healed once ftrun has left the job.
// Checked over the histories of both sides together: they are
// linearizable (porcupine: no acknowledged write lost, no stale read,
// nothing the cut side did after the takeover counts); ranks 0 and 1
// stopped, every operation of theirs returned within stopBound of the
// cut; ranks 2..9 finish their clients (their output files, which the
// agents write, say "clients done"), and every key has 3 whole replicas
// again on the compute hosts.
func TestArbiterClusterStoreFtrunCut(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte("localhost slots=2\nh1 slots=2\nh2 slots=2\nh3 slots=2\nh4 slots=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hist := sharedTempDir(t)
	os.Chmod(hist, 0o777)
	work := t.TempDir()
	os.Chmod(work, 0o777)
	out := filepath.Join(work, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--arbiter", "--hostfile", hf, "--tag-output",
		"--output-filename", out, filepath.Join(bin, "testprog"), "kvlin", hist, "9s", "3", "4", "6ms")
	job := startLive(t, cmd)
	dump := time.AfterFunc(90*time.Second, func() {
		exec.Command("pkill", "-QUIT", "-f", "testprog kvlin "+hist).Run()
	})
	defer dump.Stop()
	waitHistories(t, hist, 10, 20*time.Second)
	time.Sleep(time.Second)
	if o, err := exec.Command(clusterScript(), "split", dir, "root", "h1,h2,h3,h4").CombinedOutput(); err != nil {
		t.Fatalf("split: %v\n%s", err, o)
	}
	cut := time.Now()
	joined := false
	join := func() {
		if !joined {
			joined = true
			if o, err := exec.Command(clusterScript(), "join", dir).CombinedOutput(); err != nil {
				t.Errorf("join: %v\n%s", err, o)
			}
		}
	}
	defer join()
	outText, errText := job.finish()
	ended := time.Since(cut)
	join()
	report := fmt.Sprintf("stdout:\n%s\nstderr:\n%s", outText, errText)
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end:\n%s", report)
	}
	for r := range 2 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^ftrun: rank %d exited with status 76$`, r)).MatchString(errText) {
			t.Errorf("rank %d, on ftrun's host, did not stop with its lost lease (status 76)", r)
		}
	}
	// The compute hosts finish by themselves.
	deadline := time.Now().Add(2 * time.Minute)
	for h := 1; h <= 4; h++ {
		for len(procsOn(t, dir, fmt.Sprintf("h%d", h), "[a]gent --boot")) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("an agent still runs on h%d two minutes after ftrun ended", h)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	stdout := func(r int) string {
		b, _ := os.ReadFile(filepath.Join(out, "1", fmt.Sprintf("rank.%02d", r), "stdout"))
		return string(b)
	}
	var all strings.Builder
	for r := range 10 {
		o := stdout(r)
		all.WriteString(o)
		if done := strings.Contains(o, "clients done\n"); done != (r >= 2) {
			t.Errorf("rank %d: clients done %v, want %v", r, done, r >= 2)
		}
	}
	for k := range 4 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)(^|\] )whole %d 3$`, k)).MatchString(all.String()) {
			t.Errorf("key %d did not get 3 whole replicas back", k)
		}
	}
	ops, completed, open := readHistory(t, hist)
	var cutOps, lateCut int
	for _, op := range ops {
		if op.ClientId/2 < 2 && op.Return != math.MaxInt64 {
			cutOps++
			if time.Unix(0, op.Return).After(cut.Add(stopBound)) {
				lateCut++
			}
		}
	}
	if cutOps == 0 {
		t.Errorf("ranks 0 and 1 completed no operation: the test did not test them")
	}
	if lateCut > 0 {
		t.Errorf("%d operations of ranks 0 and 1 returned more than %v after the cut", lateCut, stopBound)
	}
	res, info := porcupine.CheckOperationsVerbose(kvcheck.Model, ops, time.Minute)
	if res != porcupine.Ok {
		keep, _ := os.MkdirTemp("", "ftrma-arbiter-store-")
		files, _ := filepath.Glob(filepath.Join(hist, "hist.*"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				os.WriteFile(filepath.Join(keep, filepath.Base(f)), b, 0o644)
			}
		}
		porcupine.VisualizePath(kvcheck.Model, info, filepath.Join(keep, "history.html"))
		t.Errorf("history not linearizable (%v, %d ops, %d open): kept in %s", res, completed, open, keep)
	}
	if t.Failed() {
		for r := range 10 {
			b, _ := os.ReadFile(filepath.Join(out, "1", fmt.Sprintf("rank.%02d", r), "stderr"))
			t.Logf("rank %d's stderr:\n%s", r, b)
		}
		t.Logf("the ranks' stdout:\n%s", all.String())
		t.Log(report)
	}
	t.Logf("%d ops completed (%d by ranks 0 and 1, on ftrun's host), %d open; ftrun ended %v after the cut", completed, cutOps, open, ended.Round(time.Millisecond))
}
