package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma/bench/internal/host"
	"github.com/ftrma/ftrma/bench/internal/ulfm"
)

// mpirunArgv is the command of one job: n ranks of bin under ULFM
// (ulfm.MPI.Argv), with MPI_Comm_spawn's map_by info key when mapBy is set.
func mpirunArgv(mpi ulfm.MPI, bin, transport string, n int, mapBy string) []string {
	if mapBy != "" {
		return mpi.Argv(bin, transport, n, "-map-by", mapBy)
	}
	return mpi.Argv(bin, transport, n)
}

// outcome is one job's result: its times, or why it gave none.
type outcome struct {
	times    jobTimes
	err      error
	lingered bool   // mpirun was still running 10 s after the last check line and was killed
	output   string // the job's output, for -v and failures
}

// runJob runs one job of n ranks: it waits for the victim's pid and the
// survivors' ready lines, waits settle more, SIGKILLs the victim and
// collects the steps. The whole job is bounded by timeout: mpirun's process
// group is then killed and the error says which step each process reached.
func runJob(ctx context.Context, argv []string, n int, settle, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	job, err := host.StartJob(ctx, argv, true, 2*time.Second)
	if err != nil {
		return outcome{err: err}
	}
	defer job.KillGroup() // leftovers of the group, if any
	cmd := job.Cmd
	var stdout <-chan host.Line = job.Lines
	output := job.Output
	lines := make(chan string, 256) // the launcher's standard output
	go func() {
		for l := range stdout {
			if !l.Stderr {
				lines <- l.Text
			}
		}
		close(lines)
	}()

	var evs []event
	var pid int
	var kill int64
	ready := map[int]bool{}
	done := map[string]bool{} // processes that printed check
	var settleC <-chan time.Time
	fail := func(err error) outcome {
		cancel()
		for range lines {
		}
		cmd.Wait()
		return outcome{err: err, output: output()}
	}
	for {
		if kill != 0 && len(done) == n {
			break
		}
		select {
		case line, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				if ctx.Err() != nil {
					return fail(timedOut(kill, evs, n, timeout))
				}
				return outcome{err: fmt.Errorf("mpirun ended (%v) before every process finished; last steps: %s", err, lastSteps(evs, n)), output: output()}
			}
			ev, ok, err := parseEvent(line)
			if err != nil {
				return fail(err)
			}
			if !ok {
				continue
			}
			switch ev.kind {
			case kPid:
				if ev.rank != n-1 {
					return fail(fmt.Errorf("rank %d printed a pid: only the victim %d should", ev.rank, n-1))
				}
				pid = ev.pid
			case kReady:
				ready[ev.rank] = true
			case kError:
				return fail(fmt.Errorf("%s", strings.TrimSpace(line)))
			case kAt:
				if kill == 0 {
					return fail(fmt.Errorf("%q before the kill", line))
				}
				evs = append(evs, ev)
			case kCheck:
				evs = append(evs, ev)
				who := "old " + strconv.Itoa(ev.rank)
				if ev.isNew {
					who = "new"
				}
				done[who] = true
			}
			if kill == 0 && settleC == nil && pid != 0 && len(ready) == n-1 {
				settleC = time.After(settle)
			}
		case <-settleC:
			settleC = nil
			at, err := host.KillDescendant(cmd.Process.Pid, pid)
			if err != nil {
				return fail(fmt.Errorf("kill the victim: %w", err))
			}
			kill = at
		case <-ctx.Done():
			return fail(timedOut(kill, evs, n, timeout))
		}
	}
	times, err := summarize(evs, n, kill)
	// The value is taken; mpirun is given a short while to finish (its exit
	// status after a killed rank does not matter here).
	lingered := make(chan bool, 1)
	go func() {
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			lingered <- true
			cancel()
		case <-ctx.Done():
		}
	}()
	for range lines {
	}
	cmd.Wait()
	cancel()
	return outcome{times: times, err: err, lingered: len(lingered) > 0, output: output()}
}

// timedOut is the error of a job that hit its time limit.
func timedOut(kill int64, evs []event, n int, timeout time.Duration) error {
	if kill == 0 {
		return fmt.Errorf("no kill within %v: the ranks never all reported ready", timeout)
	}
	return fmt.Errorf("timed out %v after start; last steps: %s", timeout, lastSteps(evs, n))
}
