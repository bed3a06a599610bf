package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var ckptRespawnRE = regexp.MustCompile(`(?m)^\[\d+\] result: (\d+) tree nodes \(tasks \d+, survivors (\d+) of (\d+), adopted ranks \[([\d ]*)\], replaced ranks \[([\d ]*)\]\)$`)

// The checkpointing example with spares (ftrun --respawn, ckpt -respawn):
// ranks 2 and 5 crash part-way through their lists, the survivors replace
// them, the replacements resume the two lists from their checkpoints, and
// the job ends with 8 ranks, nobody adopting, and the failure-free result
// (the README's number). ftrun starts the spares on its own host.
func TestCkptRespawn(t *testing.T) { eachTransport(t, testCkptRespawn) }

func testCkptRespawn(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	_, want, ok := readmeMainJob(t)
	if !ok {
		want = "590500503"
	}
	checkCkptRespawn(t, want, "--oversubscribe", "--respawn=2", "-n", "8", "--tag-output",
		prog, "-respawn", "-crash", "2@0.25", "-crash", "5@0.5")
}

// The same with ftrun's --kill, from outside, at about a quarter and a
// half of the failure-free run (as TestCkptSameResultUnderKills). On a
// loaded machine a rank may have finished its list when it is killed: its
// replacement then resumes it at its end.
func TestCkptRespawnUnderKills(t *testing.T) { eachTransport(t, testCkptRespawnUnderKills) }

func testCkptRespawnUnderKills(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, "--oversubscribe", "-n", "8", "--tag-output", prog)
	d := time.Since(start)
	if code != 0 {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want, _, _ := ckptResult(t, out)
	k2, k5 := (d * 27 / 100).Round(time.Millisecond), (d * 54 / 100).Round(time.Millisecond)
	checkCkptRespawn(t, want, "--oversubscribe", "--respawn=2", "-n", "8", "--tag-output",
		"--kill", fmt.Sprintf("2@%v", k2), "--kill", fmt.Sprintf("5@%v", k5), prog, "-respawn")
}

// checkCkptRespawn runs ftrun with args, a ckpt -respawn job of 8 ranks
// in which ranks 2 and 5 fail, and checks that it ends with want nodes, 8
// ranks of 8, nobody adopting, ranks 2 and 5 replaced, and each
// replacement resuming its list (or finding it done).
func checkCkptRespawn(t *testing.T, want string, args ...string) {
	t.Helper()
	out, code := ftrun(t, 3*time.Minute, args...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	ms := ckptRespawnRE.FindAllStringSubmatch(out, -1)
	if len(ms) != 1 {
		t.Fatalf("%d result lines, want 1:\n%s", len(ms), out)
	}
	m := ms[0]
	replaced := strings.Fields(m[5])
	slices.Sort(replaced)
	if m[1] != want || m[2] != "8" || m[3] != "8" || m[4] != "" || !slices.Equal(replaced, []string{"2", "5"}) {
		t.Errorf("result %s nodes, survivors %s of %s, adopted [%s], replaced [%s]; want %s, 8 of 8, [], [2 5]", m[1], m[2], m[3], m[4], m[5], want)
	}
	for _, line := range []string{`rank 2 replaces world rank 2: resuming its list at task \d+ `, `rank 5 replaces world rank 5: resuming its list at task \d+ `} {
		if !regexp.MustCompile(`(?m)^\[\d+\] ` + line).MatchString(out) {
			t.Errorf("no line matching %q", line)
		}
	}
	if strings.Contains(out, " adopts rank ") {
		t.Errorf("a rank adopted a list although spares were left")
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
