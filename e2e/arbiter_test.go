package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ftrun --arbiter over the cluster: ftrun in the root namespace (node 1 of
// the arbiter, no rank), the checkpointing example on h1..h4 with 2 slots
// each (nodes 2..5: all five vote), and 1 s after the ranks started,
// ftrun's host is cut from every compute host (cluster.sh split DIR root
// h1,h2,h3,h4).
//
// ftrun, cut from everyone, says at once that it lost the job's quorum
// (its node's host lease ran out) and where the output is; it declares no
// rank by its own clock (the ranks' leases come from their agents): once
// its node has not acted for the arbiter's verdict bound it leaves the
// job, reports every rank lost with no verdict, tells nobody anything, and
// exits 1. On the compute hosts the ranks go on while their hosts' nodes
// act, and the link is healed as soon as ftrun has exited, while they
// still run: nothing stale of ftrun's reaches them, and they finish the
// job: the ranks' files, which the agents write, hold the failure-free
// result with all 8 ranks surviving.
//
// What the arbiter decides meanwhile, read from the agents' logs, which
// they write on their own hosts (--output-filename DIR: DIR/1/arbiter.N,
// each line after its time): the four agents elect a leader among
// themselves and declare host 0, ftrun's, failed (host silent). The times
// from the cut are logged.
func TestArbiterClusterFtrunCut(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	cmd, job, out := startWithOutput(t, dir, 8, []string{filepath.Join(bin, "ftrun"), "--arbiter", "--hostfile", hostfile(t, 4, 2), "--tag-output"},
		filepath.Join(bin, "ckpt"), "-tasks", "32768")
	out.awaitStart(t, job)
	time.Sleep(time.Second)
	join := splitCluster(t, dir, "root", "h1,h2,h3,h4")
	cut := time.Now()
	outText, errText := job.finish()
	ended := time.Since(cut)
	if !cmd.ProcessState.Exited() {
		t.Fatalf("ftrun did not end:\n%s\n%s", outText, errText)
	}
	report := fmt.Sprintf("stdout:\n%s\nstderr:\n%s", outText, errText)

	// Heal at once, while the compute hosts still run the job.
	join()
	// ftrun leaves the job, every rank lost without a verdict.
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1 (ftrun left the job):\n%s", code, report)
	}
	for r := range 8 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^ftrun: rank %d failed at [0-9.]+s: was lost: .*; no verdict came before ftrun left the job`, r)).MatchString(errText) {
			t.Errorf("ftrun does not report rank %d lost without a verdict:\n%s", r, report)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ftrun: arbiter: node 1 leads \(term \d+\)`),
		regexp.MustCompile(`(?m)^ftrun: arbiter: node 1 stopped acting`),
		regexp.MustCompile(`(?m)^ftrun: lost the job's quorum \(ftrun's arbiter node has no host lease\): .* the ranks' output is in \S+/1/rank\.N on their hosts`),
		regexp.MustCompile(`(?m)^ftrun: leaving the job: cut off from the arbiter's quorum for `),
	} {
		if !want.MatchString(errText) {
			t.Errorf("ftrun's stderr does not match %v:\n%s", want, report)
		}
	}
	t.Logf("the job ended %v after the cut; %s", ended.Round(time.Millisecond), regexp.MustCompile(`(?m)^ftrun: arbiter: summary.*$`).FindString(errText))

	// The agents' arbiter: each logs its summary as its node stops, once
	// the verdict came or VerdictBound passed after its link was lost.
	files := map[int]string{}
	deadline := time.Now().Add(time.Minute)
	for node := 2; node <= 5; node++ {
		for {
			b, _ := os.ReadFile(filepath.Join(out.dir, "1", fmt.Sprintf("arbiter.%d", node)))
			if strings.Contains(string(b), "arbiter: summary of node") || time.Now().After(deadline) {
				files[node] = string(b)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	leadRE := regexp.MustCompile(`(?m)^(\S+) arbiter: node (\d) leads \(term (\d+)\)`)
	failRE := regexp.MustCompile(`(?m)^(\S+) arbiter: host 0 failed: host silent.*$`)
	for node := 2; node <= 5; node++ {
		f := files[node]
		if !strings.Contains(f, "arbiter: summary of node") {
			t.Errorf("node %d's log has no summary a minute after the job's end:\n%s", node, f)
		}
		if !strings.Contains(f, "arbiter: the link to ftrun is lost") {
			t.Errorf("node %d's log does not say the link to ftrun was lost:\n%s", node, f)
		}
		// A leader among the agents, after the cut.
		var led string
		for _, m := range leadRE.FindAllStringSubmatch(f, -1) {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err == nil && at.After(cut) && m[2] != "1" {
				led = fmt.Sprintf("node %s leads (term %s) %v after the cut", m[2], m[3], at.Sub(cut).Round(time.Millisecond))
				break
			}
		}
		if led == "" {
			t.Errorf("node %d saw no agent take over after the cut:\n%s", node, f)
		}
		// The verdict on ftrun's host.
		m := failRE.FindStringSubmatch(f)
		if m == nil {
			t.Errorf("node %d did not apply host 0's (ftrun's) failure:\n%s", node, f)
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || !at.After(cut) {
			t.Errorf("node %d: host 0 declared at %q, not after the cut (%v)", node, m[1], err)
		}
		t.Logf("node %d: %s; host 0 declared %v after the cut (%s)", node, led, at.Sub(cut).Round(time.Millisecond), strings.TrimSpace(m[0][len(m[1]):]))
	}
	if t.Failed() {
		for node := 2; node <= 5; node++ {
			t.Logf("node %d's log:\n%s", node, files[node])
		}
	}

	// The compute hosts finish the job without ftrun, the cut still in
	// place: their agents end once their ranks have, and the ranks' files
	// (written by the agents) hold the failure-free result, every rank
	// surviving.
	awaitAgentsGone(t, dir, []string{"h1", "h2", "h3", "h4"}, 2*time.Minute)
	finished := time.Since(cut)
	want := "result: " + ckpt32k + " tree nodes (tasks 32768, survivors 8 of 8, adopted ranks [])"
	if results := out.results(); len(results) != 1 || results[0] != want {
		out.logFiles(t)
		t.Fatalf("with ftrun's host cut off: result lines %q, want exactly %q", results, want)
	}
	t.Logf("the compute hosts finished without ftrun %v after the cut (healed %v after it): %s", finished.Round(time.Millisecond), ended.Round(time.Millisecond), want)
}

// As TestArbiterClusterFtrunCut, with 2 of the job's 10 ranks on ftrun's
// own host (localhost in the hostfile): once ftrun's host is cut off, its
// arbiter node stops acting, and so do ranks 0 and 1, whose leases from
// ftrun are bounded by that node's host lease (they exit with status 76,
// ExitLostPrimary); the compute hosts' leader declares host 0 failed, the
// agents pass the verdict on to their ranks, and ranks 2..9 adopt the lists
// of 0 and 1 and end with the failure-free sum, 8 of 10 surviving. (With 10
// ranks the output directories are rank.00 .. rank.09, as Open MPI pads
// them.)
func TestArbiterClusterFtrunCutWithRanks(t *testing.T) {
	dir := needCluster(t)
	sum16k, _ := ckptFailureFree(t, "-tasks", "16384") // cached: the suite's other tests run it too
	bin := bins(t)
	hf := writeHostfile(t, "localhost slots=2", "h1 slots=2", "h2 slots=2", "h3 slots=2", "h4 slots=2")
	cmd, job, out := startWithOutput(t, dir, 10, []string{filepath.Join(bin, "ftrun"), "--arbiter", "--hostfile", hf, "--tag-output"},
		filepath.Join(bin, "ckpt"), "-tasks", "16384")
	out.awaitStart(t, job)
	time.Sleep(time.Second)
	join := splitCluster(t, dir, "root", "h1,h2,h3,h4")
	cut := time.Now()
	outText, errText := job.finish()
	ended := time.Since(cut)
	join()
	report := fmt.Sprintf("stdout:\n%s\nstderr:\n%s", outText, errText)
	if !cmd.ProcessState.Exited() {
		t.Fatalf("ftrun did not end:\n%s", report)
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1 (ftrun left the job):\n%s", code, report)
	}
	for r := range 2 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^ftrun: rank %d exited with status 76$`, r)).MatchString(errText) {
			t.Errorf("rank %d, on ftrun's host, did not stop with its lost lease (status 76):\n%s", r, report)
		}
	}
	for _, want := range []string{"ftrun: lost the job's quorum", "ftrun: leaving the job: cut off from the arbiter's quorum"} {
		if !strings.Contains(errText, want) {
			t.Errorf("ftrun does not say %q:\n%s", want, report)
		}
	}
	awaitAgentsGone(t, dir, []string{"h1", "h2", "h3", "h4"}, 2*time.Minute)
	want := "result: " + sum16k + " tree nodes (tasks 16384, survivors 8 of 10, adopted ranks [0 1])"
	results := out.results()
	if len(results) != 1 || results[0] != want {
		out.logFiles(t)
		t.Fatalf("with ftrun's host (ranks 0 and 1) cut off: result lines %q, want exactly %q; ftrun said:\n%s", results, want, report)
	}
	t.Logf("ftrun ended %v after the cut; the compute hosts finished without ftrun's host: %s", ended.Round(time.Millisecond), results[0])
}

// As TestArbiterClusterFtrunCut, but ftrun is interrupted (SIGTERM) once it
// has said that it lost the job's quorum: it cannot reach the agents to stop
// their ranks, so it does not wait for the arbiter's word on them; it exits
// within a few seconds with 143, reporting every rank as lost while it was
// ending the job, and tells nobody anything. The compute hosts hold the
// quorum and finish the job without it: the ranks' files hold the
// failure-free result, every rank surviving.
func TestArbiterClusterFtrunCutInterrupted(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	cmd, job, out := startWithOutput(t, dir, 8, []string{filepath.Join(bin, "ftrun"), "--hostfile", hostfile(t, 4, 2), "--tag-output"},
		filepath.Join(bin, "ckpt"), "-tasks", "32768")
	out.awaitStart(t, job)
	time.Sleep(time.Second)
	heal := splitCluster(t, dir, "root", "h1,h2,h3,h4")
	cut := time.Now()
	if !job.waitStderr(`lost the job's quorum`, 10*time.Second) {
		t.Fatalf("ftrun did not say it lost the quorum within 10s of the cut:\n%s", job.stderrSoFar())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	signalled := time.Now()
	outText, errText := job.finish()
	took := time.Since(signalled)
	heal()
	report := fmt.Sprintf("stdout:\n%s\nstderr:\n%s", outText, errText)
	if !cmd.ProcessState.Exited() || took > 5*time.Second {
		t.Fatalf("ftrun took %v to end after SIGTERM, cut off, want within 5s:\n%s", took.Round(time.Millisecond), report)
	}
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("exit %d, want 143 (SIGTERM):\n%s", code, report)
	}
	for r := range 8 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^ftrun: rank %d failed at [0-9.]+s: was lost: .*; ftrun was ending the job before a verdict came`, r)).MatchString(errText) {
			t.Errorf("ftrun does not report rank %d lost while ending the job:\n%s", r, report)
		}
	}
	awaitAgentsGone(t, dir, []string{"h1", "h2", "h3", "h4"}, 2*time.Minute)
	want := "result: " + ckpt32k + " tree nodes (tasks 32768, survivors 8 of 8, adopted ranks [])"
	if results := out.results(); len(results) != 1 || results[0] != want {
		out.logFiles(t)
		t.Fatalf("after ftrun, cut off, was interrupted: result lines %q, want exactly %q:\n%s", results, want, report)
	}
	t.Logf("SIGTERM %v after the cut; ftrun ended %v after it; the compute hosts finished without it", signalled.Sub(cut).Round(time.Millisecond), took.Round(time.Millisecond))
}
