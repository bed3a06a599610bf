package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// ftrun --arbiter over the cluster, ftrun SIGKILLed mid-run: ftrun in the
// root namespace (node 1 of the arbiter, no rank), the checkpointing
// example on h1..h4 with 2 slots each. The ranks take their lease from
// their agents, whose arbiter nodes elect a leader among themselves once
// ftrun is gone; the agents outlive their ssh sessions, and end by
// themselves once their ranks have. The survivors' output files (written
// by the agents on their hosts, --output-filename) hold the failure-free
// result, with every rank surviving. Without --arbiter the same kill ends
// the job with no result (the agents kill their ranks as their links
// break): the difference the arbiter makes. And with ftrun gone, ranks
// SIGKILLed a second later (both of h3's, 4 and 5, so that no rank on
// their host sees their shared memory marked) are still declared to the
// others: their agent reports the exits to the arbiter, and every agent
// passes the applied exits on to its ranks. The survivors adopt their
// lists and print the failure-free sum with 6 of 8 surviving (without the
// agents' notices the others' checkpoints give up on them after the
// verdict bound, and no result comes). And rank 5 SIGSTOPped a second after
// ftrun's kill (a hang: its connections stay open) is suspected by the
// others' detectors, whose suspicions go to their agents and the arbiter;
// the leader's probe goes to h3's agent, which finds rank 5 silent on its
// lease channel, kills it, and answers once it has reaped it: the others
// adopt its list (7 of 8). In each run with ftrun killed, the arbiter's
// leader at the job's end writes the job's report, DIR/report.
func TestSurviveFtrunKill(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 4, 2)
	work := t.TempDir()
	os.Chmod(work, 0o777)
	const tasks = "32768"

	// checkReport checks DIR/report, written by the arbiter's leader at
	// the job's end with ftrun gone: exit 0, the ranks of failed failed,
	// every other rank finished with status 0.
	checkReport := func(out outDir, failed ...int) {
		var b []byte
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var err error
			if b, err = os.ReadFile(filepath.Join(out.dir, "report")); err == nil || time.Now().After(deadline) {
				break
			}
		}
		rep := string(b)
		if !strings.Contains(rep, "ftrun report 1\n") || !strings.Contains(rep, "\nexit 0 ok\n") {
			t.Errorf("%s/report does not say the job ended ok:\n%s", out.dir, rep)
		}
		for r := range 8 {
			want := regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d host h\d finished status 0 at [\d.]+s$`, r))
			if slices.Contains(failed, r) {
				want = regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d host h\d failed at [\d.]+s: `, r))
			}
			if !want.MatchString(rep) {
				t.Errorf("%s/report: no line matching %v:\n%s", out.dir, want, rep)
			}
		}
	}
	signalRank := func(host string, r int, sig string) { signalCkptRank(t, dir, host, r, sig) }
	// run runs the job, SIGKILLs ftrun a second after every rank started
	// (with --no-arbiter unless arbiter), then after another second sends then's signal to ranks
	// 4 and 5 (KILL) or to rank 5 (STOP), and returns its output
	// directory once the agents are gone.
	run := func(name string, arbiter bool, then string) (outDir, string) {
		out := outDir{filepath.Join(work, name), 8}
		args := []string{"--hostfile", hf, "--tag-output", "--output-filename", out.dir, filepath.Join(bin, "ckpt"), "-tasks", tasks}
		if !arbiter {
			args = append([]string{"--no-arbiter"}, args...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), args...)
		job := startLive(t, cmd)
		out.awaitStart(t, job)
		time.Sleep(time.Second)
		cmd.Process.Kill()
		killed := time.Now()
		switch then {
		case "KILL":
			time.Sleep(time.Second)
			signalRank("h3", 4, "KILL")
			signalRank("h3", 5, "KILL")
		case "STOP":
			time.Sleep(time.Second)
			signalRank("h3", 5, "STOP")
		}
		o, e := job.finish()
		awaitAgentsGone(t, dir, []string{"h1", "h2", "h3", "h4"}, 2*time.Minute)
		t.Logf("%s: ftrun SIGKILLed %v after the start; the agents were all gone %v after the kill",
			name, killed.Sub(start).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
		return out, o + e
	}
	// check checks the one result line of a run.
	check := func(out outDir, want, what, ftrunOut string) {
		t.Helper()
		if got := out.results(); len(got) != 1 || got[0] != want {
			out.logFiles(t)
			t.Fatalf("under --arbiter, %s: result lines %q, want exactly %q; ftrun said:\n%s", what, got, want, ftrunOut)
		}
	}

	// The failure-free result (ckpt32k: every other test of the suite
	// checks it too).
	want := []string{"result: " + ckpt32k + " tree nodes (tasks 32768, survivors 8 of 8, adopted ranks [])"}

	out, ftrunOut := run("killed-arbiter", true, "")
	check(out, want[0], "ftrun SIGKILLed", ftrunOut)
	t.Logf("under --arbiter the job survived ftrun's SIGKILL: %s", want[0])
	checkReport(out)

	out, ftrunOut = run("killed-then-rank", true, "KILL")
	wantLost := strings.Replace(want[0], "survivors 8 of 8, adopted ranks []", "survivors 6 of 8, adopted ranks [4 5]", 1)
	check(out, wantLost, "ftrun SIGKILLed and then ranks 4 and 5", ftrunOut)
	t.Logf("under --arbiter the SIGKILL of ranks 4 and 5 after ftrun's reached the survivors: %s", wantLost)
	checkReport(out, 4, 5)

	out, ftrunOut = run("killed-then-hang", true, "STOP")
	wantHung := strings.Replace(want[0], "survivors 8 of 8, adopted ranks []", "survivors 7 of 8, adopted ranks [5]", 1)
	check(out, wantHung, "ftrun SIGKILLed and then rank 5 SIGSTOPped", ftrunOut)
	t.Logf("under --arbiter rank 5, hung after ftrun's SIGKILL, was probed, killed and declared through the arbiter: %s", wantHung)
	checkReport(out, 5)

	out, ftrunOut = run("killed-plain", false, "")
	if got := out.results(); len(got) != 0 {
		t.Errorf("without --arbiter, ftrun SIGKILLed: result lines %q, want none (the job dies with ftrun); ftrun said:\n%s", got, ftrunOut)
	}
}

// signalCkptRank sends sig to the checkpointing example's rank r on host
// of the cluster in dir.
func signalCkptRank(t *testing.T, dir, host string, r int, sig string) {
	t.Helper()
	for _, pid := range procsOn(t, dir, host, "[c]kpt -tasks") {
		env, _ := os.ReadFile("/proc/" + pid + "/environ")
		if slices.Contains(strings.Split(string(env), "\x00"), fmt.Sprintf("FTRMA_RANK=%d", r)) {
			if err := exec.Command("kill", "-"+sig, pid).Run(); err != nil {
				t.Fatalf("kill -%s rank %d (pid %s): %v", sig, r, pid, err)
			}
			return
		}
	}
	t.Fatalf("rank %d does not run on %s", r, host)
}

// Spares while ftrun is gone: the checkpointing example with a spare
// (--respawn=1, ckpt -respawn) on h1..h4 with 2 slots each, ftrun in the
// root namespace SIGKILLed a second after every rank started, and rank 4
// SIGKILLed a second after that. The survivors' Replace goes to their
// agents; once the arbiter has declared ftrun's host failed, rank 0's
// agent claims spare 8 on rank 4's host, h3, whose agent starts it with
// its own rendezvous; every agent admits it, and it resumes rank 4's list
// from its checkpoint: the failure-free result with 8 of 8 ranks and
// rank 4 replaced, in the output files, and the leader's report. Without
// the agents' part the Replace fails and the survivors adopt rank 4's
// list instead (or give up).
func TestSurviveFtrunKillRespawn(t *testing.T) {
	dir := needCluster(t)
	sum16k, _ := ckptFailureFree(t, "-tasks", "16384") // cached: the suite's other tests run it too
	bin := bins(t)
	hf := hostfile(t, 4, 2)
	work := t.TempDir()
	os.Chmod(work, 0o777)
	out := outDir{filepath.Join(work, "out"), 9}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "-n", "8", "--respawn=1", "--tag-output",
		"--output-filename", out.dir, filepath.Join(bin, "ckpt"), "-tasks", "16384", "-respawn")
	job := startLive(t, cmd)
	outDir{out.dir, 8}.awaitStart(t, job)
	time.Sleep(time.Second)
	cmd.Process.Kill()
	killed := time.Now()
	time.Sleep(time.Second)
	signalCkptRank(t, dir, "h3", 4, "KILL")
	rankKilled := time.Now()
	o, e := job.finish()
	awaitAgentsGone(t, dir, []string{"h1", "h2", "h3", "h4"}, 2*time.Minute)
	gone := time.Since(killed)
	want := "result: " + sum16k + " tree nodes (tasks 16384, survivors 8 of 8, adopted ranks [], replaced ranks [4])"
	if got := out.results(); len(got) != 1 || got[0] != want {
		out.logFiles(t)
		t.Fatalf("ftrun SIGKILLed, then rank 4: result lines %q, want exactly %q; ftrun said:\n%s\n%s", got, want, o, e)
	}
	if !regexp.MustCompile(`(?m)^\[8\] rank 4 replaces world rank 4: resuming its list at task \d+ `).MatchString(out.read(8, "stdout")) {
		t.Errorf("spare 8 did not resume rank 4's list; its output:\n%s", out.read(8, "stdout"))
	}
	rep, _ := os.ReadFile(filepath.Join(out.dir, "report"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^rank 8 host h3 finished status 0 at [\d.]+s$`),
		regexp.MustCompile(`(?m)^rank 4 host h3 failed at [\d.]+s: `),
		regexp.MustCompile(`(?m)^exit 0 ok$`),
	} {
		if !want.MatchString(string(rep)) {
			t.Errorf("%s/report does not match %v:\n%s", out.dir, want, rep)
		}
	}
	t.Logf("ftrun SIGKILLed, rank 4 a second later: spare 8 took its place on h3 without ftrun, and the agents were gone %v after ftrun's kill: %s",
		gone.Round(time.Millisecond), want)
	// When h3's node applied spare 8's claim and join (its log file's
	// times), after rank 4's kill.
	log, _ := os.ReadFile(filepath.Join(out.dir, "1", "arbiter.4"))
	for _, what := range []string{"spare rank 8 claimed", "spare rank 8 joined"} {
		for _, line := range strings.Split(string(log), "\n") {
			if stamp, rest, ok := strings.Cut(line, " "); ok && strings.Contains(rest, what) {
				if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
					t.Logf("%s %v after rank 4's kill", what, at.Sub(rankKilled).Round(time.Millisecond))
				}
				break
			}
		}
	}
}

// ftrun's whole host killed (cluster.sh killhost: every process of its
// namespace SIGKILLed, its sockets closed by the kernel): ftrun runs on h1,
// the checkpointing example's 6 ranks on h2..h4 (nodes 2..4 of the
// arbiter; nodes 1..3 vote). The two voters left elect a leader between
// themselves, the compute hosts finish the job with the failure-free
// result and every rank surviving, written by their agents to
// --output-filename, and the leader at the end writes DIR/report.
func TestSurviveFtrunHostKilled(t *testing.T) {
	dir := needCluster(t)
	sum16k, _ := ckptFailureFree(t, "-tasks", "16384") // cached: the suite's other tests run it too
	bin := bins(t)
	hf := writeHostfile(t, "h2 slots=2", "h3 slots=2", "h4 slots=2")
	// ftrun runs on h1 (cluster.sh on), so that killhost h1 kills it.
	_, job, out := startWithOutput(t, dir, 6, []string{clusterScript(), "on", dir, "h1", filepath.Join(bin, "ftrun"), "--arbiter", "--hostfile", hf, "--tag-output"},
		filepath.Join(bin, "ckpt"), "-tasks", "16384")
	out.awaitStart(t, job)
	time.Sleep(time.Second)
	if o, err := exec.Command(clusterScript(), "killhost", dir, "h1").CombinedOutput(); err != nil {
		t.Fatalf("killhost h1: %v\n%s", err, o)
	}
	defer func() { // the suite's other tests need h1's sshd
		if o, err := exec.Command(clusterScript(), "revive", dir, "h1").CombinedOutput(); err != nil {
			t.Errorf("revive h1: %v\n%s", err, o)
		}
	}()
	killed := time.Now()
	o, e := job.finish()
	awaitAgentsGone(t, dir, []string{"h2", "h3", "h4"}, 2*time.Minute)
	gone := time.Since(killed)
	want := "result: " + sum16k + " tree nodes (tasks 16384, survivors 6 of 6, adopted ranks [])"
	if results := out.results(); len(results) != 1 || results[0] != want {
		out.logFiles(t)
		t.Fatalf("with ftrun's host killed: result lines %q, want exactly %q; ftrun said:\n%s\n%s", results, want, o, e)
	}
	rep, _ := os.ReadFile(filepath.Join(out.dir, "report"))
	if !strings.Contains(string(rep), "\nexit 0 ok\n") || strings.Count(string(rep), " finished status 0 at ") != 6 {
		t.Errorf("%s/report does not say all 6 ranks finished and the job ended ok:\n%s", out.dir, rep)
	}
	t.Logf("h1 (ftrun's host) killed 1 s after every rank started: the compute hosts finished by themselves %v later: %s", gone.Round(time.Millisecond), want)
}
