package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var ckptResultRE = regexp.MustCompile(`(?m)^\[\d+\] result: (\d+) tree nodes \(tasks \d+, survivors (\d+) of \d+, adopted ranks \[([\d ]*)\]\)$`)

// ckptResult returns the node count, survivors and adopted ranks of the one
// result line in a ckpt job's output.
func ckptResult(t *testing.T, out string) (nodes, survivors, adopted string) {
	t.Helper()
	ms := ckptResultRE.FindAllStringSubmatch(out, -1)
	if len(ms) != 1 {
		t.Fatalf("%d result lines, want 1:\n%s", len(ms), out)
	}
	return ms[0][1], ms[0][2], ms[0][3]
}

// The README's main job: the checkpointing example with ranks 2 and 5 killed
// mid-run ends with exactly the failure-free result, ftrun exits 0 (every
// survivor did), and the killed ranks' task lists were adopted part-way by
// the next ranks, 3 and 6.
func TestCkptSameResultUnderKills(t *testing.T) { eachTransport(t, testCkptSameResultUnderKills) }

func testCkptSameResultUnderKills(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, "-n", "8", "--tag-output", prog)
	d := time.Since(start)
	if code != 0 {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want, survivors, adopted := ckptResult(t, out)
	if survivors != "8" || adopted != "" {
		// A rank declared failed under outside load (a false suspicion) is
		// killed and adopted like any other; the result must not change.
		t.Logf("failure-free run: %s survivors, adopted [%s]", survivors, adopted)
	}

	// The kills land at about a quarter and a half of the failure-free
	// run: 1 s and 2 s on a 2-core machine, as in the README's
	// --kill 2@1s --kill 5@2s, and mid-run on faster machines too.
	k2, k5 := (d * 27 / 100).Round(time.Millisecond), (d * 54 / 100).Round(time.Millisecond)
	t.Logf("failure-free run: %v, %s nodes; killing rank 2 at %v and rank 5 at %v", d.Round(time.Millisecond), want, k2, k5)
	out, code = ftrun(t, 2*time.Minute, "-n", "8", "--tag-output",
		"--kill", fmt.Sprintf("2@%v", k2), "--kill", fmt.Sprintf("5@%v", k5), prog)
	if code != 0 {
		t.Fatalf("run with kills: exit %d:\n%s", code, out)
	}
	got, survivors, adopted := ckptResult(t, out)
	if got != want {
		t.Errorf("result with kills %s nodes, without %s", got, want)
	}
	// ftrun's kills land at times taken from the failure-free run: a rank
	// may have finished its list by then (ranks' speeds differ by half),
	// and its adopter finds it done and the result does not count it as
	// adopted (the README's job kills after progress, see
	// TestCkptReadmeJobBothKillsLand, which checks adoption mid-list).
	ad := strings.Fields(adopted)
	for _, c := range []struct{ killed, adopter string }{{"2", "3"}, {"5", "6"}} {
		mid := regexp.MustCompile(fmt.Sprintf(`(?m)^\[%s\] rank %s adopts rank %s at task \d+ `, c.adopter, c.adopter, c.killed)).MatchString(out)
		done := regexp.MustCompile(fmt.Sprintf(`(?m)^\[%s\] rank %s adopts rank %s: its list was done`, c.adopter, c.adopter, c.killed)).MatchString(out)
		switch {
		case !mid && !done:
			t.Errorf("rank %s did not adopt rank %s", c.adopter, c.killed)
		case mid != slices.Contains(ad, c.killed):
			t.Errorf("rank %s adopted mid-list: %v, but the result's adopted ranks are [%s]", c.killed, mid, adopted)
		}
	}
	if survivors != "6" {
		t.Errorf("%s survivors, want 6", survivors)
	}
	if f := failedRanks(t, out); !slices.Equal(f, []string{"2", "5"}) && !slices.Equal(f, []string{"5", "2"}) {
		t.Errorf("ftrun reports ranks %v failed, want 2 and 5, by SIGKILL", f)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	} else {
		t.Logf("with kills: %s", strings.Join(regexp.MustCompile(`(?m)^\[\d\] rank \d adopts .*$`).FindAllString(out, -1), "; "))
	}
}

// The whole job lost, and started again: the checkpointing example with
// -snapshot takes snapshots of its store while it runs; every rank is
// SIGKILLed at about half of the failure-free run (nothing of the job's
// memory survives); the same command started again restores the store from
// the newest complete snapshot, each rank resumes its list where its
// checkpoint in the snapshot says, and the result is the failure-free one.
func TestCkptRestartsFromSnapshot(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	dir := t.TempDir()
	args := []string{"--oversubscribe", "-n", "4", "--tag-output"}
	job := []string{prog, "-tasks", "8192", "-snapshot", dir, "-snapshot-every", "100ms"}
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, append(args, prog, "-tasks", "8192")...)
	d := time.Since(start)
	if code != 0 {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want, _, _ := ckptResult(t, out)

	half := (d / 2).Round(time.Millisecond)
	kill := []string{}
	for r := range 4 {
		kill = append(kill, "--kill", fmt.Sprintf("%d@%v", r, half))
	}
	out, _ = ftrun(t, 2*time.Minute, slices.Concat(args, kill, job)...)
	if ckptResultRE.MatchString(out) {
		t.Fatalf("the killed job printed a result (killed at %v of a %v run):\n%s", half, d, out)
	}
	out, code = ftrun(t, 2*time.Minute, slices.Concat(args, job)...)
	if code != 0 {
		t.Fatalf("restarted run: exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "restored the store from ") {
		t.Fatalf("the restarted job did not restore a snapshot:\n%s", out)
	}
	resumed := regexp.MustCompile(`(?m)^\[\d\] rank \d restarts from the snapshot: resuming its list at task \d+ of 8192 \((\d+) of its 2048 tasks checkpointed\)$`).FindAllStringSubmatch(out, -1)
	if len(resumed) != 4 {
		t.Fatalf("%d ranks resumed from the snapshot, want 4:\n%s", len(resumed), out)
	}
	progress := 0
	for _, m := range resumed {
		n, _ := strconv.Atoi(m[1])
		progress += n
	}
	if progress == 0 {
		t.Fatalf("the snapshot held no progress at all (killed at %v of %v):\n%s", half, d, out)
	}
	if got, _, _ := ckptResult(t, out); got != want {
		t.Errorf("result after the restart %s nodes, failure-free %s", got, want)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 || len(entries) > 4 {
		// -snapshot-keep 3: three complete ones, and one the kill cut short
		t.Errorf("%d snapshot directories left (%v), want 1 to 4", len(entries), err)
	}
	t.Logf("failure-free %v; killed at %v; the snapshot held %d of 8192 tasks", d.Round(time.Millisecond), half, progress)
}
