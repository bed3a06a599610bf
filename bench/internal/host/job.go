package host

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Job is a launcher (mpirun, ftrun) a benchmark driver runs: its standard
// output and error come line by line on Lines, each in the order read,
// until both end (Lines then closes), and Output keeps all of it. Run with
// Group, the launcher leads a process group of its own, and the end of the
// context kills the whole group, the ranks with it.
type Job struct {
	Cmd   *exec.Cmd
	Lines <-chan Line

	group   bool
	mu      sync.Mutex
	out     strings.Builder
	scanErr chan error
}

// Line is a line of a Job's output.
type Line struct {
	Text   string
	Stderr bool
}

// StartJob starts argv under ctx. waitDelay is how long Cmd.Wait waits for
// the output pipes to close after the launcher exits (exec.Cmd.WaitDelay).
func StartJob(ctx context.Context, argv []string, group bool, waitDelay time.Duration) (*Job, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = waitDelay
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan Line, 256)
	j := &Job{Cmd: cmd, Lines: lines, group: group, scanErr: make(chan error, 2)}
	var wg sync.WaitGroup
	for _, src := range []struct {
		r      io.Reader
		stderr bool
	}{{stdout, false}, {stderr, true}} {
		wg.Go(func() {
			sc := bufio.NewScanner(src.r)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				j.mu.Lock()
				if src.stderr {
					j.out.WriteString("stderr: ")
				}
				j.out.WriteString(sc.Text() + "\n")
				j.mu.Unlock()
				lines <- Line{sc.Text(), src.stderr}
			}
			if err := sc.Err(); err != nil {
				j.scanErr <- err
				io.Copy(io.Discard, src.r) // keep the launcher from blocking on a full pipe
			}
		})
	}
	go func() { wg.Wait(); close(lines) }()
	return j, nil
}

// Output is everything the job printed so far, its standard error's lines
// marked "stderr: ".
func (j *Job) Output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

// ScanErr is the error reading the output met (a line over 1 MiB), if
// any: ask once Lines has closed.
func (j *Job) ScanErr() error {
	select {
	case err := <-j.scanErr:
		return err
	default:
		return nil
	}
}

// Drain reads what is left of Lines and waits for the launcher.
func (j *Job) Drain() error {
	for range j.Lines {
	}
	return j.Cmd.Wait()
}

// KillGroup kills what is left of the job's process group (with Group).
func (j *Job) KillGroup() {
	if j.group {
		syscall.Kill(-j.Cmd.Process.Pid, syscall.SIGKILL)
	}
}
