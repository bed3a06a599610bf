package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/shm"
)

// Stale shared memory. The ranks of a job remove their segments when they
// close, and ftrun removes what killed ranks left when the job ends; but an
// ftrun (or agent) killed by SIGKILL removes nothing, and its job's files
// stay in /dev/shm until reboot (a 4-rank job: 32 files, 28 MB of RAM).
//
// A job's files are in its private directory, shm.JobDir = /dev/shm/ftrma-<job>
// (mode 0700; see transport/shm, "A private place"). The process that runs
// a job's ranks on a host (ftrun, or an agent) makes that directory, before
// any rank starts, and records itself in an owner file in it:
//
//	ftrma-<job>/owner-<pid>   "<pid> <start>\n", mode 0600, made with O_EXCL
//
// where start is the process's start time (field 22 of /proc/<pid>/stat;
// "-" where there is no /proc), which tells a pid reused by another process
// from the owner. The owner holds an exclusive open-file-description lock
// (F_OFD_SETLK) on its file from before it writes it until it removes it,
// last, after the job's segments; the kernel drops the lock when the owner
// dies. Several owners share a directory where hosts share /dev/shm
// (network namespaces of one machine).
//
// A job is stale, and sweepShm removes its directory, only when it can
// prove every process of the job gone, in whatever PID namespace it runs
// (containers of one pod share /dev/shm but not pids):
//   - the directory and every file in it belong to this user (a job of
//     another user is never touched), and it has at least one owner file;
//   - no owner file's lock is held, and no owner file is being written
//     (empty or unreadable: proof of nothing);
//   - no owner's pid runs here with the recorded start time (a second
//     check, where pids can be seen);
//   - no rank holds its control segment open (shm.OpenRanks: each open
//     rank holds a lock on it);
//   - no process of this user still has FTRMA_JOB=<job> in its environment
//     (a rank, or a rank's child, that outlived its owner; where /proc can
//     be read).
//
// A directory without an owner file (a job whose ranks were started
// otherwise, or an owner that died between making the directory and its
// file) is left alone.

// ownerPrefix starts an owner file's name, before the pid.
const ownerPrefix = "owner-"

// shmDir is the directory swept, where the job directories are (a variable
// for tests; shm.DefaultDir, where the ranks put them).
var shmDir = shm.DefaultDir

// procDir is where process information is read (a variable for tests).
var procDir = "/proc"

// ownerPath is the owner file of job for process pid.
func ownerPath(job string, pid int) string {
	return filepath.Join(shm.JobDir(shmDir, job), ownerPrefix+strconv.Itoa(pid))
}

// claimShm makes job's directory (shm.PrepareDir) if it is missing, writes
// this process's owner file there, locked, and returns a function that
// removes it, and the directory if that leaves it empty. job must be a hex
// job id. It fails if the file exists already (O_EXCL) or the directory is
// not this user's private place.
func claimShm(job string) (release func(), err error) {
	if !isHexJob(job) {
		return nil, fmt.Errorf("shared memory owner: job id %q is not hex", job)
	}
	pid := os.Getpid()
	dir, name := shm.JobDir(shmDir, job), ownerPath(job, pid)
	var f *os.File
	for try := 0; ; try++ {
		if err := shm.PrepareDir(dir); err != nil {
			return nil, fmt.Errorf("shared memory owner: %w", err)
		}
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		// Another owner of the job on this machine (a host that is a
		// network namespace) may have removed the directory as its part
		// of the job ended, between the two calls: make it again.
		if err == nil || !errors.Is(err, fs.ErrNotExist) || try == 2 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("shared memory owner: %w", err)
	}
	err = lockOwner(f)
	if err == nil {
		_, err = fmt.Fprintf(f, "%d %s\n", pid, procStart(pid))
	}
	if err != nil {
		os.Remove(name)
		f.Close()
		return nil, fmt.Errorf("shared memory owner: %s: %w", name, err)
	}
	return func() {
		os.Remove(name)
		f.Close()
		os.Remove(dir) // only if empty: other owners, or the ranks' files, keep it
	}, nil
}

// isHexJob reports whether job is a job id as ftrun makes them: lower-case
// hex digits, not empty.
func isHexJob(job string) bool {
	return job != "" && strings.Trim(job, "0123456789abcdef") == ""
}

// procStart returns the start time of process pid (field 22 of its stat
// file, in clock ticks since boot), or "-" where it cannot be read.
func procStart(pid int) string {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return "-"
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count the fields after its closing parenthesis (field 3 on).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "-"
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "-"
	}
	return f[19]
}

// ownerAlive reports whether the owner recorded as pid, started at start
// ("-" when unknown), still runs.
func ownerAlive(pid int, start string) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false // ESRCH: gone
	}
	// The pid runs something: the owner, unless the pid was reused.
	if now := procStart(pid); start != "-" && now != "-" && now != start {
		return false
	}
	return true
}

// sweptJob is one stale job sweepShm removed.
type sweptJob struct {
	Job    string
	Owners []int    // the dead owners' pids
	Files  []string // the files removed (names in the directory)
	Bytes  int64    // their size
	Err    error    // what could not be removed, if anything
}

// String is how ftrun --cleanup reports a removed job.
func (s sweptJob) String() string {
	msg := fmt.Sprintf("removed stale job %s (owner pid %s gone): %s, %d KiB",
		s.Job, joinInts(s.Owners), plural(len(s.Files), "file"), (s.Bytes+1023)>>10)
	if s.Err != nil {
		msg += "; " + s.Err.Error()
	}
	return msg
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// sweepShm removes the stale jobs of this user from shmDir (see above) and
// returns what it removed. A missing directory is not an error.
func sweepShm() ([]sweptJob, error) {
	ents, err := os.ReadDir(shmDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweeping %s: %w", shmDir, err)
	}
	uid := os.Getuid()
	type staleJob struct {
		job    string
		owners []int
		files  []fs.DirEntry
	}
	var stale []staleJob
	for _, e := range ents {
		job, ok := strings.CutPrefix(e.Name(), "ftrma-")
		if !ok || !isHexJob(job) || !e.IsDir() {
			continue // e.IsDir is false for a symbolic link
		}
		dir := filepath.Join(shmDir, e.Name())
		if fileUID(dir) != uid {
			continue
		}
		files, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		owners, dead := deadOwners(dir, files, uid)
		if !dead {
			continue
		}
		if open, err := shm.OpenRanks(dir, job); err != nil || len(open) > 0 {
			continue
		}
		stale = append(stale, staleJob{job, owners, files})
	}
	if len(stale) == 0 {
		return nil, nil
	}
	running := jobsInEnvironments(uid)
	var out []sweptJob
	for _, sj := range stale {
		if running[sj.job] {
			continue
		}
		dir := shm.JobDir(shmDir, sj.job)
		s := sweptJob{Job: sj.job, Owners: sj.owners}
		var errs []error
		// The owner files last: until then, a second sweep sees a job.
		for _, owners := range []bool{false, true} {
			for _, e := range sj.files {
				if strings.HasPrefix(e.Name(), ownerPrefix) != owners {
					continue
				}
				if err := removeOwn(filepath.Join(dir, e.Name()), uid, &s); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		s.Err = errors.Join(errs...)
		out = append(out, s)
	}
	return out, nil
}

// deadOwners reads the owner files among files, the entries of job
// directory dir, and reports whether they prove the job's owners all gone:
// there is at least one, every file in dir is uid's, and no owner file is
// locked, being written, or names a process that runs. It returns the
// owners' pids.
func deadOwners(dir string, files []fs.DirEntry, uid int) (pids []int, dead bool) {
	for _, e := range files {
		path := filepath.Join(dir, e.Name())
		if fileUID(path) != uid {
			return nil, false
		}
		pidText, ok := strings.CutPrefix(e.Name(), ownerPrefix)
		if !ok {
			continue
		}
		if held, err := ownerLocked(path); err != nil || held {
			return nil, false
		}
		pid, start, ok := readOwner(path)
		if !ok || strconv.Itoa(pid) != pidText || ownerAlive(pid, start) {
			return nil, false
		}
		pids = append(pids, pid)
	}
	return pids, len(pids) > 0
}

// removeOwn removes path if it belongs to uid, counting it in s.
func removeOwn(path string, uid int, s *sweptJob) error {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid {
		return nil // another user's file: never ours to remove
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	s.Files = append(s.Files, filepath.Base(path))
	s.Bytes += fi.Size()
	return nil
}

// fileUID returns the owner of path, or -1.
func fileUID(path string) int {
	fi, err := os.Lstat(path)
	if err != nil {
		return -1
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1
	}
	return int(st.Uid)
}

// readOwner reads an owner file: the pid and start time it records.
func readOwner(path string) (pid int, start string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64 {
		return 0, "", false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, "", false
	}
	pid, err = strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	return pid, f[1], true
}

// jobsInEnvironments returns the job ids (FTRMA_JOB) in the environments of
// uid's processes, as far as procDir shows them.
func jobsInEnvironments(uid int) map[string]bool {
	jobs := map[string]bool{}
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return jobs
	}
	key := []byte(jobwire.EnvJob + "=")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		if fileUID(dir) != uid {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, key); ok {
				jobs[string(v)] = true
			}
		}
	}
	return jobs
}

// sharesMemory reports whether the launch's ranks use shared memory on the
// agent's host (their FTRMA_TRANSPORT is shm, shm+tcp or shm+verbs).
func (l *launchSpec) sharesMemory() bool {
	for _, r := range l.ranks {
		for _, kv := range r.env {
			if tr, ok := strings.CutPrefix(kv, jobwire.EnvTransport+"="); ok && jobwire.SharesMemory(tr) {
				return true
			}
		}
	}
	return false
}
