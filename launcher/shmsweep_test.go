package launcher

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/transport/shm"
)

// deadPID returns the pid of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("no true to run: %v", err)
	}
	return cmd.Process.Pid
}

// fakeJob writes the files a job of two ranks leaves, and an owner file
// naming pid started at start, into the job's directory under dir; it
// returns their names relative to dir, the directory's last.
func fakeJob(t *testing.T, dir, job string, pid int, start string) []string {
	t.Helper()
	jobDir := shm.JobDir(dir, job)
	if err := os.Mkdir(jobDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range []string{"0-ctl", "0-bell", "0-seg-1", "1-ctl", "1-seg-2"} {
		name := filepath.Join(filepath.Base(jobDir), "ftrma-"+job+"-"+n)
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	owner := filepath.Join(filepath.Base(jobDir), ownerPrefix+strconv.Itoa(pid))
	if err := os.WriteFile(filepath.Join(dir, owner), []byte(strconv.Itoa(pid)+" "+start+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(names, owner, filepath.Base(jobDir))
}

func present(t *testing.T, dir string, names []string) (n int) {
	t.Helper()
	for _, name := range names {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if _, err := os.Lstat(name); err == nil {
			n++
		}
	}
	return n
}

func withShmDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	old := shmDir
	shmDir = dir
	t.Cleanup(func() { shmDir = old })
	return dir
}

// A job whose owner is gone is swept, files and owner file; one whose owner
// runs is kept; a pid reused by another process does not keep a job; files
// of another job, of no owner and of no job are left alone.
func TestSweepStaleJobs(t *testing.T) {
	dir := withShmDir(t)
	self := os.Getpid()
	dead := fakeJob(t, dir, "0000000000d1", deadPID(t), "12345")
	live := fakeJob(t, dir, "0000000000a1", self, procStart(self))
	reused := fakeJob(t, dir, "0000000000e1", self, "1") // our pid, but another start
	ownerless := []string{"ftrma-0000000000b1", "ftrma-0000000000b1/ftrma-0000000000b1-0-ctl", "ftrma-0000000000b1/ftrma-0000000000b1-0-seg-1"}
	os.Mkdir(filepath.Join(dir, ownerless[0]), 0o700)
	loose := []string{"other-file", "ftrma-0000000000b2-0-ctl"} // not in a job directory
	for _, n := range append(ownerless[1:], loose...) {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
	}
	swept, err := sweepShm()
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, s := range swept {
		jobs = append(jobs, s.Job)
		if s.Err != nil || len(s.Files) != 6 || s.Bytes < 5*4096 || len(s.Owners) != 1 {
			t.Errorf("swept %+v, want 6 files of at least 20 KiB, one owner", s)
		}
	}
	slices.Sort(jobs)
	if want := []string{"0000000000d1", "0000000000e1"}; !slices.Equal(jobs, want) {
		t.Errorf("swept jobs %v, want %v", jobs, want)
	}
	if n := present(t, dir, dead); n != 0 {
		t.Errorf("%d files of the job whose owner is gone are left", n)
	}
	if n := present(t, dir, reused); n != 0 {
		t.Errorf("%d files of the job whose owner's pid was reused are left", n)
	}
	if n := present(t, dir, live); n != len(live) {
		t.Errorf("the live job's files: %d of %d left", n, len(live))
	}
	if n := present(t, dir, ownerless); n != len(ownerless) {
		t.Errorf("files of no owner: %d of %d left", n, len(ownerless))
	}
	if n := present(t, dir, loose); n != len(loose) {
		t.Errorf("files outside job directories: %d of %d left", n, len(loose))
	}
	if again, err := sweepShm(); err != nil || len(again) != 0 {
		t.Errorf("second sweep: %v, %v", again, err)
	}
}

// A job whose owner's pid cannot be seen (it runs in another PID
// namespace: here, a pid that is gone) is kept while the owner holds its
// file's lock, and so is one whose owner is gone but whose rank holds its
// control segment open; each is swept once the lock is let go.
func TestSweepKeepsLockedJobs(t *testing.T) {
	dir := withShmDir(t)
	owned := fakeJob(t, dir, "0000000000c2", deadPID(t), "3")
	f, err := os.OpenFile(filepath.Join(dir, owned[5]), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := lockOwner(f); err != nil {
		t.Fatal(err)
	}
	ranked := fakeJob(t, dir, "0000000000c3", deadPID(t), "3")
	os.Remove(filepath.Join(dir, ranked[0])) // rank 0's control segment and bell: the transport makes them
	os.Remove(filepath.Join(dir, ranked[1]))
	tr, err := shm.Open(shm.Config{Rank: 0, Size: 2, Job: "0000000000c3", Dir: shm.JobDir(dir, "0000000000c3")})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if swept, err := sweepShm(); err != nil || len(swept) != 0 {
		t.Fatalf("swept %v, %v: a locked owner file and an open rank prove their jobs alive", swept, err)
	}
	if present(t, dir, owned) != len(owned) || present(t, dir, ranked) != len(ranked) {
		t.Fatalf("files of a live job were removed")
	}
	f.Close()
	tr.Close()
	swept, err := sweepShm()
	if err != nil || len(swept) != 2 {
		t.Fatalf("once the locks are gone: swept %v, %v; want both jobs", swept, err)
	}
	if present(t, dir, owned) != 0 || present(t, dir, ranked) != 0 {
		t.Errorf("files left after the sweep")
	}
}

// A job whose owner is gone but one of whose processes still runs (its
// environment names the job) is kept.
func TestSweepKeepsJobWithLiveRank(t *testing.T) {
	if _, err := os.Stat(filepath.Join(procDir, "self", "environ")); err != nil {
		t.Skip("no /proc to read environments from")
	}
	dir := withShmDir(t)
	job := "0000000000c1"
	files := fakeJob(t, dir, job, deadPID(t), "7")
	rank := exec.Command("sleep", "60")
	rank.Env = append(os.Environ(), "FTRMA_JOB="+job)
	if err := rank.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	t.Cleanup(func() { rank.Process.Kill(); rank.Wait() })
	if swept, err := sweepShm(); err != nil || len(swept) != 0 || present(t, dir, files) != len(files) {
		t.Fatalf("a job with a live rank was swept: %v, %v", swept, err)
	}
	rank.Process.Kill()
	rank.Wait()
	if swept, err := sweepShm(); err != nil || len(swept) != 1 || present(t, dir, files) != 0 {
		t.Fatalf("once its rank ended, the job was not swept: %v, %v", swept, err)
	}
}

// Files of another user are never removed: neither a job whose directory
// is another user's, nor a job of ours with another user's file in it (no
// proof of anything: it is kept whole).
func TestSweepKeepsOtherUsersFiles(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	dir := withShmDir(t)
	const other = 4242
	theirs := fakeJob(t, dir, "0000000000f1", deadPID(t), "9")
	for _, n := range theirs {
		if err := os.Chown(filepath.Join(dir, n), other, other); err != nil {
			t.Fatal(err)
		}
	}
	mixed := fakeJob(t, dir, "0000000000f2", deadPID(t), "9")
	foreign := "ftrma-0000000000f2/ftrma-0000000000f2-7-ctl"
	os.WriteFile(filepath.Join(dir, foreign), []byte("x"), 0o600)
	if err := os.Chown(filepath.Join(dir, foreign), other, other); err != nil {
		t.Fatal(err)
	}
	ours := fakeJob(t, dir, "0000000000f3", deadPID(t), "9")
	swept, err := sweepShm()
	if err != nil || len(swept) != 1 || swept[0].Job != "0000000000f3" {
		t.Fatalf("swept %v, %v; want our job only", swept, err)
	}
	if n := present(t, dir, theirs); n != len(theirs) {
		t.Errorf("another user's job: %d of %d files left", n, len(theirs))
	}
	if n := present(t, dir, append(mixed, foreign)); n != len(mixed)+1 {
		t.Errorf("our job with another user's file: %d of %d files left", n, len(mixed)+1)
	}
	if n := present(t, dir, ours); n != 0 {
		t.Errorf("our stale job: %d files left", n)
	}
}

// claimShm writes the owner file with O_EXCL, and what it writes is what
// the sweep reads as a live owner.
func TestClaimShm(t *testing.T) {
	dir := withShmDir(t)
	job := "0000000000aa"
	release, err := claimShm(job)
	if err != nil {
		t.Fatal(err)
	}
	name := ownerPath(job, os.Getpid())
	fi, err := os.Stat(name)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("owner file: %v, %v", fi, err)
	}
	if di, err := os.Lstat(shm.JobDir(dir, job)); err != nil || !di.IsDir() || di.Mode().Perm() != 0o700 {
		t.Fatalf("job directory: %v, %v; want mode 0700", di, err)
	}
	if pid, start, ok := readOwner(name); !ok || pid != os.Getpid() || !ownerAlive(pid, start) {
		t.Errorf("owner file reads as pid %d start %q ok %v", pid, start, ok)
	}
	if held, err := ownerLocked(name); err != nil || !held {
		t.Errorf("owner file not locked: %v, %v", held, err)
	}
	if _, err := claimShm(job); err == nil {
		t.Errorf("a second claim of the same job succeeded")
	}
	if _, err := claimShm("../x"); err == nil {
		t.Errorf("a job id that is not hex was accepted")
	}
	if swept, _ := sweepShm(); len(swept) != 0 {
		t.Errorf("a live claim was swept: %v", swept)
	}
	release()
	if _, err := os.Lstat(shm.JobDir(dir, job)); !os.IsNotExist(err) {
		t.Errorf("release left the owner file or the job's directory: %v", err)
	}
}

// ftrun --cleanup removes the stale jobs and says what it removed.
func TestCleanupFlag(t *testing.T) {
	dir := withShmDir(t)
	files := fakeJob(t, dir, "0000000000d2", deadPID(t), "5")
	var out, errs bytes.Buffer
	if code := Main([]string{"--cleanup"}, &out, &errs); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
	if !strings.Contains(out.String(), "removed stale job 0000000000d2") || !strings.Contains(out.String(), "6 files") {
		t.Errorf("stdout %q", out.String())
	}
	if present(t, dir, files) != 0 {
		t.Errorf("files left")
	}
	out.Reset()
	if code := Main([]string{"--cleanup"}, &out, &errs); code != ExitOK || out.String() != "ftrun: no stale jobs\n" {
		t.Errorf("second run: exit %d, stdout %q", code, out.String())
	}
}

// An ftrun killed by SIGKILL leaves its job's shared memory; the next ftrun
// sweeps it, once the ranks (killed with their parent) are gone.
func TestSweepAfterFtrunKilled(t *testing.T) {
	if _, err := os.Stat(shmDir); err != nil {
		t.Skipf("no %s", shmDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd := helperCmd(t, ctx, "sleep", []string{"-v", "--transport", "shm", "-n", "2"}, "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var job string
	for sc := bufio.NewScanner(stderr); job == "" && sc.Scan(); {
		if f := strings.Fields(sc.Text()); len(f) > 2 && f[0] == "ftrun:" && f[1] == "job" {
			job = strings.TrimSuffix(f[2], ",")
		}
	}
	if !bufio.NewScanner(stdout).Scan() || job == "" { // "rank 0 sleeping": every rank started
		t.Fatalf("job %q did not start", job)
	}
	owner := ownerPath(job, cmd.Process.Pid)
	if _, err := os.Stat(owner); err != nil {
		t.Fatalf("ftrun wrote no owner file: %v", err)
	}
	// What the ranks' transports would have made.
	seg := filepath.Join(shm.JobDir(shmDir, job), "ftrma-"+job+"-0-seg-1")
	if err := os.WriteFile(seg, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(seg); os.Remove(owner) })
	if swept, _ := sweepShm(); slices.ContainsFunc(swept, func(s sweptJob) bool { return s.Job == job }) {
		t.Fatalf("the running job was swept")
	}
	cmd.Process.Kill()
	cmd.Wait()
	for {
		swept, err := sweepShm()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(swept, func(s sweptJob) bool { return s.Job == job }) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s never swept after ftrun was killed", job)
		case <-time.After(20 * time.Millisecond): // its rank is still dying
		}
	}
	if present(t, shmDir, []string{seg, owner, shm.JobDir(shmDir, job)}) != 0 {
		t.Errorf("files left after the sweep")
	}
}
