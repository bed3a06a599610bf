package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeMainJob returns the ftrun arguments of the README's main job (after
// "bin/ftrun", with bin/ckpt as the built program) and the failure-free
// result the README states; ok is false when the README is not at hand (a
// test binary run elsewhere, as in the RDMA guest).
func readmeMainJob(t *testing.T) (args []string, result string, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		return nil, "", false
	}
	cmd := regexp.MustCompile(`(?m)^    go build .*&& bin/ftrun (.*bin/ckpt.*)$`).FindSubmatch(b)
	res := regexp.MustCompile(`failure-free run \((\d+) tree nodes\)`).FindSubmatch(b)
	if cmd == nil || res == nil {
		t.Fatalf("README.md: no main job command or no failure-free result")
	}
	for _, a := range strings.Fields(string(cmd[1])) {
		if a == "bin/ckpt" {
			a = filepath.Join(bins(t), "ckpt")
		}
		args = append(args, a)
	}
	return args, string(res[1]), true
}

var ftrunFailedRE = regexp.MustCompile(`(?m)^ftrun: (\d+) rank\(s\) failed: (.*); (\d+) survived$`)

// failedRanks returns the ranks ftrun's closing report names as failed, in
// its order, after checking that it says each was killed by SIGKILL.
func failedRanks(t *testing.T, out string) []string {
	t.Helper()
	m := ftrunFailedRE.FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	var ranks []string
	for _, f := range regexp.MustCompile(`(\d+) \(at [\d.]+s\)`).FindAllStringSubmatch(m[2], -1) {
		ranks = append(ranks, f[1])
		if !regexp.MustCompile(`(?m)^ftrun: rank ` + f[1] + ` failed at [\d.]+s: was killed by signal 9 `).MatchString(out) {
			t.Errorf("rank %s failed, but not by SIGKILL", f[1])
		}
	}
	return ranks
}

// The README's main job: ranks 2 and 5 SIGKILL themselves a quarter and half
// way through their lists (-crash, failures after progress, which land
// whatever the machine's speed); ftrun reports exactly those two failed, and
// the result is the failure-free run's, which is also the README's number.
func TestCkptReadmeJobBothKillsLand(t *testing.T) { eachTransport(t, testCkptReadmeJobBothKillsLand) }

func testCkptReadmeJobBothKillsLand(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, "-n", "8", "--tag-output", prog)
	if code != 0 {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want, _, _ := ckptResult(t, out)
	t.Logf("failure-free run: %s nodes in %v", want, time.Since(start).Round(time.Millisecond))

	args, readme, ok := readmeMainJob(t)
	if !ok {
		args = []string{"-n", "8", "--tag-output", prog, "-crash", "2@0.25", "-crash", "5@0.5"}
	} else if readme != want {
		t.Errorf("the README's failure-free result is %s, the run's %s", readme, want)
	}
	out, code = ftrun(t, 2*time.Minute, args...)
	if code != 0 {
		t.Fatalf("ftrun %v: exit %d:\n%s", args, code, out)
	}
	if got, survivors, adopted := ckptResult(t, out); got != want || survivors != "6" || adopted != "2 5" {
		t.Errorf("with the kills: %s nodes, %s survivors, adopted [%s]; want %s, 6, [2 5]", got, survivors, adopted, want)
	}
	if failed := failedRanks(t, out); !slices.Equal(failed, []string{"2", "5"}) {
		t.Errorf("ftrun reports failed ranks %v, want [2 5]", failed)
	}
	for _, a := range []string{`\[3\] rank 3 adopts rank 2 at task \d+ `, `\[6\] rank 6 adopts rank 5 at task \d+ `} {
		if !regexp.MustCompile(`(?m)^` + a).MatchString(out) {
			t.Errorf("no line matching %q", a)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

var ckpt1024RE = regexp.MustCompile(`(?m)^\[\d\] result: (\d+) tree nodes \(tasks 1024, survivors (\d) of 8,`)

// A checkpoint whose every copy is lost: with one copy of each checkpoint,
// seven of eight ranks are killed at once, halfway through a failure-free
// run's time, so that the survivor finds checkpoints whose only copy died
// (the chance that none did is 8^-7). It recomputes those lists from their
// start, says so on stderr, and prints the failure-free result.
func TestCkptLostCheckpointRecomputed(t *testing.T) {
	eachTransport(t, testCkptLostCheckpointRecomputed)
}

func testCkptLostCheckpointRecomputed(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, "-n", "8", "--tag-output", prog, "-tasks", "1024", "-copies", "1")
	d := time.Since(start)
	m := ckpt1024RE.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want := m[1]
	at := (d / 2).Round(time.Millisecond) // mid-run: after the store opened, before the end
	t.Logf("failure-free run: %s nodes in %v; killing ranks 1 to 7 at %v", want, d.Round(time.Millisecond), at)

	args := []string{"-n", "8", "--tag-output"}
	for r := 1; r < 8; r++ {
		args = append(args, "--kill", fmt.Sprintf("%d@%v", r, at))
	}
	out, code = ftrun(t, 2*time.Minute, append(args, prog, "-tasks", "1024", "-copies", "1")...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if m := ckpt1024RE.FindStringSubmatch(out); m == nil || m[1] != want || m[2] != "1" {
		t.Errorf("result %q, want %s nodes and 1 survivor", m, want)
	}
	if failed := failedRanks(t, out); len(failed) != 7 {
		t.Errorf("ftrun reports failed ranks %v, want 1 to 7", failed)
	}
	lost := regexp.MustCompile(`(?m)^\[0\] rank 0 adopts rank (\d): its checkpoint is lost \(every copy may be gone\): recomputing rank (\d)'s list from its start$`).FindAllStringSubmatch(out, -1)
	if len(lost) == 0 {
		t.Errorf("no lost checkpoint was recomputed")
	}
	var lists []string
	for _, l := range lost {
		lists = append(lists, l[1])
	}
	t.Logf("lists recomputed from their start: %v", lists)
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
