package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Many ranks on this 2-core machine over shared memory: 16 and 32 ranks
// finish the CAS-loop, fetch-and-add and lock counters (no busy-spin
// starvation).
func TestManyRanksSHM(t *testing.T) {
	for _, n := range []string{"16", "32"} {
		t.Run(n, func(t *testing.T) {
			out, code := ftrun(t, 3*time.Minute, "--transport", "shm", "-n", n, "--tag-output",
				filepath.Join(bins(t), "rmademo"), "-iters", "300", "-rounds", "50")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if !regexp.MustCompile(`\[0\] verified: ` + n + ` ranks;`).MatchString(out) {
				t.Fatalf("no verified result:\n%s", out)
			}
		})
	}
}

// Twenty jobs whose ranks are SIGKILLed at random moments leave nothing of
// theirs in /dev/shm.
func TestSHMNoLeftoversAfterKills(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	idRE := regexp.MustCompile(`ftrun: job ([0-9a-f]+),`)
	for i := range 20 {
		args := []string{"--transport", "shm", "-v", "-n", "4", "--tag-output"}
		for k := range 1 + rng.IntN(2) {
			args = append(args, "--kill", fmt.Sprintf("%d@%dms", (k+1+rng.IntN(3))%4, 20+rng.IntN(300)))
		}
		args = append(args, filepath.Join(bins(t), "testprog"), "idle", "400ms")
		out, _ := ftrun(t, time.Minute, args...)
		m := idRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("job %d (seed %d): no job id in the output:\n%s", i, seed, out)
		}
		left, err := filepath.Glob(filepath.Join("/dev/shm", "ftrma-"+m[1]+"-*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Fatalf("job %d (seed %d, %s): left %s", i, seed, strings.Join(args[5:len(args)-3], " "), strings.Join(left, " "))
		}
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Fatalf("/dev/shm: %v", err)
	}
}
