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
// So the process that runs a job's ranks on a host records itself in an
// owner file beside the job's segments, before any rank starts:
//
//	ftrma-<job>-owner-<pid>   "<pid> <start>\n", mode 0600, made with O_EXCL
//
// where start is the process's start time (field 22 of /proc/<pid>/stat;
// "-" where there is no /proc), which tells a pid reused by another process
// from the owner. The owner removes the file last, after the job's segments.
//
// A job is stale, and sweepShm removes its files, when all of these hold:
//   - it has at least one owner file, and every owner file belongs to this
//     user (a job of another user is never touched);
//   - no owner is alive: its pid is gone, or now runs a process that started
//     at another time;
//   - no process of this user still has FTRMA_JOB=<job> in its environment
//     (a rank, or a rank's child, that outlived its owner; where /proc can
//     be read).
//
// Only the job's files that belong to this user are removed. A job without
// an owner file (one started otherwise, or by an older ftrun) is left alone.

// ownerTag is the part of an owner file's name after the job id.
const ownerTag = "-owner-"

// shmDir is the directory swept and the one owner files go to (a variable
// for tests; shm.DefaultDir, where the ranks put their segments).
var shmDir = shm.DefaultDir

// procDir is where process information is read (a variable for tests).
var procDir = "/proc"

// ownerName is the owner file of job for process pid.
func ownerName(job string, pid int) string {
	return "ftrma-" + job + ownerTag + strconv.Itoa(pid)
}

// claimShm writes this process's owner file for job in shmDir and returns a
// function that removes it. job must be a hex job id. It fails if the file
// exists already (O_EXCL).
func claimShm(job string) (release func(), err error) {
	if !isHexJob(job) {
		return nil, fmt.Errorf("shared memory owner: job id %q is not hex", job)
	}
	pid := os.Getpid()
	name := filepath.Join(shmDir, ownerName(job, pid))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shared memory owner: %w", err)
	}
	_, werr := fmt.Fprintf(f, "%d %s\n", pid, procStart(pid))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(name)
		return nil, fmt.Errorf("shared memory owner: %w", werr)
	}
	return func() { os.Remove(name) }, nil
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
	type jobState struct {
		owners  []int
		foreign bool // an owner file of another user, or unreadable
		alive   bool
	}
	jobs := map[string]*jobState{}
	var order []string
	for _, e := range ents {
		job, pidText, ok := strings.Cut(strings.TrimPrefix(e.Name(), "ftrma-"), ownerTag)
		if !ok || !strings.HasPrefix(e.Name(), "ftrma-") || !isHexJob(job) {
			continue
		}
		st := jobs[job]
		if st == nil {
			st = &jobState{}
			jobs[job] = st
			order = append(order, job)
		}
		path := filepath.Join(shmDir, e.Name())
		if fileUID(path) != uid {
			st.foreign = true
			continue
		}
		pid, start, ok := readOwner(path)
		if !ok || strconv.Itoa(pid) != pidText {
			// Being written (claimShm has not filled it in yet) or
			// damaged: not proof that the owner is gone.
			st.alive = true
			continue
		}
		st.owners = append(st.owners, pid)
		st.alive = st.alive || ownerAlive(pid, start)
	}
	var stale []string
	for _, job := range order {
		if st := jobs[job]; !st.foreign && !st.alive && len(st.owners) > 0 {
			stale = append(stale, job)
		}
	}
	if len(stale) == 0 {
		return nil, nil
	}
	running := jobsInEnvironments(uid)
	var out []sweptJob
	for _, job := range stale {
		if running[job] {
			continue
		}
		s := sweptJob{Job: job, Owners: jobs[job].owners}
		var errs []error
		var owners []string
		for _, e := range ents {
			name := e.Name()
			if !strings.HasPrefix(name, "ftrma-"+job+"-") {
				continue
			}
			if strings.HasPrefix(name, "ftrma-"+job+ownerTag) {
				owners = append(owners, name) // removed last
				continue
			}
			if err := removeOwn(filepath.Join(shmDir, name), uid, &s); err != nil {
				errs = append(errs, err)
			}
		}
		for _, name := range owners {
			if err := removeOwn(filepath.Join(shmDir, name), uid, &s); err != nil {
				errs = append(errs, err)
			}
		}
		s.Err = errors.Join(errs...)
		out = append(out, s)
	}
	return out, nil
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
// agent's host (their FTRMA_TRANSPORT is shm or shm+tcp).
func (l *launchSpec) sharesMemory() bool {
	for _, r := range l.ranks {
		for _, kv := range r.env {
			if kv == jobwire.EnvTransport+"="+jobwire.TransportHybrid || kv == jobwire.EnvTransport+"="+jobwire.TransportSHM {
				return true
			}
		}
	}
	return false
}
