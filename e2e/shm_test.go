package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
		if left := shmFilesOf(t, m[1]); len(left) > 0 {
			t.Fatalf("job %d (seed %d, %s): left %s", i, seed, strings.Join(args[5:len(args)-3], " "), strings.Join(left, " "))
		}
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Fatalf("/dev/shm: %v", err)
	}
}

// shmFilesOf lists what job has in /dev/shm: its directory and the files in
// it, and any file named after it directly in /dev/shm.
func shmFilesOf(t *testing.T, job string) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"ftrma-" + job + "*", "ftrma-" + job + "/*"} {
		m, err := filepath.Glob(filepath.Join("/dev/shm", pattern))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// needRootTools skips the test unless the named commands exist and it runs as
// root; scripts/test.sh counts such a skip on a root machine as a failure.
func needRootTools(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("NOT RUN: needs root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("NOT RUN: no %s", tool)
		}
	}
}

// jobIDRE finds the job id in ftrun's -v start line.
var jobIDRE = regexp.MustCompile(`ftrun: job ([0-9a-f]+),`)

// An ftrun started in another PID namespace (containers of one pod sharing
// /dev/shm) cannot see a running job's processes; its start-up sweep must
// still leave the job's shared memory alone, and the job finishes.
func TestSHMSweepFromAnotherPIDNamespace(t *testing.T) {
	needRootTools(t, "unshare")
	dir := bins(t)
	cmd := exec.Command(filepath.Join(dir, "ftrun"), "--oversubscribe", "--transport", "shm", "-v", "-n", "3", "--tag-output",
		filepath.Join(dir, "testprog"), "watchfail", "3s")
	j := startLive(t, cmd)
	defer cmd.Process.Kill()
	j.waitReady(t, 3)
	m := jobIDRE.FindStringSubmatch(j.stderrSoFar())
	if m == nil {
		t.Fatalf("no job id in ftrun's output:\n%s", j.stderrSoFar())
	}
	job := m[1]
	before := shmFilesOf(t, job)
	if len(before) == 0 {
		t.Fatalf("job %s has nothing in /dev/shm", job)
	}
	sweep := exec.Command("unshare", "--pid", "--fork", "--mount-proc", filepath.Join(dir, "ftrun"), "--cleanup")
	out, err := sweep.CombinedOutput()
	if err != nil {
		t.Fatalf("ftrun --cleanup in a new PID namespace: %v\n%s", err, out)
	}
	if strings.Contains(string(out), job) {
		t.Errorf("the sweep in another PID namespace removed the running job %s:\n%s", job, out)
	}
	if after := shmFilesOf(t, job); !slices.Equal(before, after) {
		t.Errorf("the job's files changed under the sweep:\nbefore %v\nafter  %v", before, after)
	}
	stdout, stderr := j.finish()
	if code := cmd.ProcessState.ExitCode(); code != 0 || strings.Count(stdout, "failed 0") != 3 {
		t.Fatalf("the job after the sweep: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if left := shmFilesOf(t, job); len(left) > 0 {
		t.Errorf("the job left %v", left)
	}
}

// Another local user who watches /dev/shm and makes the names a job's ranks
// will use next (segments, control segments, bells) can neither make the
// job fail nor put a file in its way: the names are in a directory only the
// job's user can enter.
func TestSHMOtherUserCannotTakeNames(t *testing.T) {
	needRootTools(t, "setpriv", "timeout")
	dir := bins(t)
	// The watcher: as uid 65534, it creates every name the ranks 0-3 of
	// any job it sees would make, in /dev/shm and in any ftrma- directory.
	script := `while :; do
  for d in /dev/shm/ftrma-*; do
    j=${d#/dev/shm/ftrma-}; j=${j%%-*}
    [ -n "$j" ] || continue
    for r in 0 1 2 3; do
      for n in ctl ctl.tmp bell seg-1 seg-2 seg-3 seg-4; do
        : > "/dev/shm/ftrma-$j-$r-$n" 2>/dev/null
        : > "$d/ftrma-$j-$r-$n" 2>/dev/null
      done
    done
  done
done`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watcher := exec.CommandContext(ctx, "timeout", "120", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script)
	if err := watcher.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		watcher.Process.Kill()
		watcher.Wait()
		// What the watcher made directly in /dev/shm: its files, never ours.
		junk, _ := filepath.Glob("/dev/shm/ftrma-*")
		for _, f := range junk {
			if fi, err := os.Lstat(f); err == nil && !fi.IsDir() && fileOwner(fi) == 65534 {
				os.Remove(f)
			}
		}
	}()
	for i := range 3 {
		out, code := ftrun(t, time.Minute, "--transport", "shm", "-v", "-n", "4", "--tag-output",
			filepath.Join(dir, "testprog"), "idle", "300ms")
		if code != 0 || strings.Count(out, "failed 0") != 4 {
			t.Fatalf("job %d beside the watcher: exit %d\n%s", i, code, out)
		}
		m := jobIDRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("job %d: no job id:\n%s", i, out)
		}
		for _, f := range shmFilesOf(t, m[1]) {
			if fi, err := os.Lstat(f); err == nil && fileOwner(fi) != 65534 {
				t.Errorf("job %d left %s", i, f)
			}
		}
	}
}

// window.AllocateShared between processes: three ranks fill their shared
// memory and read each other's directly; rank 1 SIGKILLs itself; the
// survivors, once they count it failed, still read what it stored (their
// mappings of its memory are their own, kept until Free) and write into it,
// through Shrink too, and the job ends with status 0.
func TestSharedMemoryOfKilledRank(t *testing.T) {
	out, code := ftrun(t, 2*time.Minute, "--transport", "shm", "-n", "3", "--tag-output",
		filepath.Join(bins(t), "testprog"), "sharedkill", "1")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, r := range []string{"0", "2"} {
		if !strings.Contains(out, "["+r+"] rank "+r+": the killed rank's shared memory was kept") {
			t.Fatalf("rank %s did not find the killed rank's memory kept:\n%s", r, out)
		}
	}
}
