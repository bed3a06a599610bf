package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ftrma/ftrma/bench/internal/ulfm"
)

// kind is the type of one line printed by ulfm_replace.c.
type kind int

const (
	kNone  kind = iota // not a line of the program
	kPid               // pid <rank> <pid>: the victim, ready to be killed
	kReady             // ready <rank>: a survivor about to block
	kAt                // at old|new <rank> <step> <unixnano>: a step returned
	kCheck             // check old|new <rank> <newrank> <size> <sum>
	kError             // error old|new <rank> <step> <text>: a call failed
)

// Steps of a survivor and of the new process, in order.
var (
	oldSteps = []string{"knew", "shrink", "spawn", "merge", "full"}
	newSteps = []string{"main", "init", "merge", "full"}
)

// event is one parsed line.
type event struct {
	kind    kind
	isNew   bool   // kAt, kCheck, kError: printed by the new process
	rank    int    // the old rank (the new process: the rank it replaces)
	pid     int    // kPid
	step    string // kAt, kError
	nanos   int64  // kAt: wall clock, ns since 1970
	newRank int    // kCheck: rank in the final communicator
	size    int    // kCheck: its size
	sum     int    // kCheck: allreduce of the ranks over it
	text    string // kError: the MPI error string
}

// parseEvent parses one output line of ulfm_replace. A first field in
// brackets (a launcher's tag such as "[1,0]") is ignored. ok is false for
// lines that are not the program's (mpirun's messages); err is set for a line
// that starts with a keyword but is malformed.
func parseEvent(line string) (ev event, ok bool, err error) {
	f := ulfm.Fields(line)
	if len(f) == 0 || !slices.Contains(keywords, f[0]) {
		return event{}, false, nil
	}
	bad := func(why string) (event, bool, error) {
		return event{}, false, fmt.Errorf("ulfm_replace output %q: %s", line, why)
	}
	nat := ulfm.Nat
	role := func(s string) (bool, bool) {
		return s == "new", s == "old" || s == "new"
	}
	switch f[0] {
	case "pid", "ready":
		want := map[string]int{"pid": 3, "ready": 2}[f[0]]
		if len(f) != want {
			return bad(fmt.Sprintf("want %d fields", want))
		}
		r, ok := nat(f[1])
		if !ok {
			return bad("bad rank")
		}
		ev.rank = int(r)
		ev.kind = kReady
		if f[0] == "pid" {
			p, ok := nat(f[2])
			if !ok || p == 0 {
				return bad("bad pid")
			}
			ev.kind, ev.pid = kPid, int(p)
		}
		return ev, true, nil
	case "at":
		if len(f) != 5 {
			return bad("want at old|new RANK STEP UNIXNANO")
		}
		isNew, ok := role(f[1])
		if !ok {
			return bad("want old or new")
		}
		steps := oldSteps
		if isNew {
			steps = newSteps
		}
		if !slices.Contains(steps, f[3]) {
			return bad("unknown step")
		}
		r, ok1 := nat(f[2])
		t, ok2 := nat(f[4])
		if !ok1 || !ok2 || t == 0 {
			return bad("bad rank or time")
		}
		return event{kind: kAt, isNew: isNew, rank: int(r), step: f[3], nanos: t}, true, nil
	case "check":
		if len(f) != 6 {
			return bad("want check old|new RANK NEWRANK SIZE SUM")
		}
		isNew, ok := role(f[1])
		if !ok {
			return bad("want old or new")
		}
		v, ok := ulfm.Nats(f[2:6])
		if !ok {
			return bad("bad number")
		}
		return event{kind: kCheck, isNew: isNew, rank: int(v[0]), newRank: int(v[1]), size: int(v[2]), sum: int(v[3])}, true, nil
	case "error":
		if len(f) < 4 {
			return bad("want error old|new RANK STEP TEXT")
		}
		isNew, ok := role(f[1])
		if !ok {
			return bad("want old or new")
		}
		r, ok := nat(f[2])
		if !ok {
			return bad("bad rank")
		}
		return event{kind: kError, isNew: isNew, rank: int(r), step: f[3], text: strings.Join(f[4:], " ")}, true, nil
	}
	return event{}, false, nil
}

var keywords = []string{"pid", "ready", "at", "check", "error"}

// jobTimes is what one job measured, in ms after the kill.
type jobTimes struct {
	knew, shrink, spawn, merge, full float64 // the last survivor's step (full: also the new process's)
	newMain, newInit                 float64 // the new process's main began, its MPI_Init returned
}

// summarize computes one job's times from its at and check events: for each
// step the last process's time minus kill. It fails unless each of the n-1
// survivors (ranks 0..n-2) and the new process (replacing n-1) reported
// every step once, and every check shows rank == old rank, size n and the
// sum of 0..n-1; and when a step is dated before the kill.
func summarize(evs []event, n int, kill int64) (jobTimes, error) {
	victim := n - 1
	last := map[string]int64{}
	seen := map[[2]string]bool{}
	checks := map[string]bool{}
	for _, e := range evs {
		who := "rank " + strconv.Itoa(e.rank)
		if e.isNew {
			who = "the new process"
		}
		switch {
		case e.kind != kAt && e.kind != kCheck:
			continue
		case e.isNew && e.rank != victim:
			return jobTimes{}, fmt.Errorf("the new process says it replaces rank %d, not %d", e.rank, victim)
		case !e.isNew && (e.rank < 0 || e.rank >= victim):
			return jobTimes{}, fmt.Errorf("a line from rank %d, which is not a survivor of %d ranks", e.rank, n)
		}
		if e.kind == kCheck {
			want := n * (n - 1) / 2
			if e.newRank != e.rank || e.size != n || e.sum != want {
				return jobTimes{}, fmt.Errorf("%s: final communicator rank %d size %d sum %d, want rank %d size %d sum %d",
					who, e.newRank, e.size, e.sum, e.rank, n, want)
			}
			if checks[who] {
				return jobTimes{}, fmt.Errorf("%s checked twice", who)
			}
			checks[who] = true
			continue
		}
		key := [2]string{who, e.step}
		if seen[key] {
			return jobTimes{}, fmt.Errorf("%s reported %s twice", who, e.step)
		}
		seen[key] = true
		if e.nanos < kill {
			return jobTimes{}, fmt.Errorf("%s: %s at %d, before the kill at %d", who, e.step, e.nanos, kill)
		}
		step := e.step
		if e.isNew && step != "full" {
			step = "new" + step
		}
		last[step] = max(last[step], e.nanos)
	}
	var missing []string
	for r := range victim {
		who := "rank " + strconv.Itoa(r)
		for _, s := range oldSteps {
			if !seen[[2]string{who, s}] {
				missing = append(missing, who+" "+s)
			}
		}
		if !checks[who] {
			missing = append(missing, who+" check")
		}
	}
	for _, s := range newSteps {
		if !seen[[2]string{"the new process", s}] {
			missing = append(missing, "the new process "+s)
		}
	}
	if !checks["the new process"] {
		missing = append(missing, "the new process check")
	}
	if len(missing) > 0 {
		return jobTimes{}, fmt.Errorf("missing: %s", strings.Join(missing, ", "))
	}
	ms := func(step string) float64 { return float64(last[step]-kill) / 1e6 }
	return jobTimes{knew: ms("knew"), shrink: ms("shrink"), spawn: ms("spawn"), merge: ms("merge"), full: ms("full"),
		newMain: ms("newmain"), newInit: ms("newinit")}, nil
}

// lastSteps says, for a job that did not finish, the last step each process
// reported: "rank 0: spawn; rank 1: shrink; the new process: none".
func lastSteps(evs []event, n int) string {
	lastOld := make([]string, max(n-1, 0))
	lastNew := "not started"
	for _, e := range evs {
		if e.kind != kAt {
			continue
		}
		switch {
		case e.isNew:
			lastNew = e.step
		case e.rank < len(lastOld):
			lastOld[e.rank] = e.step
		}
	}
	var parts []string
	for r, s := range lastOld {
		if s == "" {
			s = "none"
		}
		parts = append(parts, fmt.Sprintf("rank %d: %s", r, s))
	}
	parts = append(parts, "the new process: "+lastNew)
	return strings.Join(parts, "; ")
}
