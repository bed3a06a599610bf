package main

import (
	"strings"
	"testing"

	"github.com/ftrma/ftrma/bench/internal/ulfm"
)

func TestParseEvent(t *testing.T) {
	good := []struct {
		line string
		want event
	}{
		{"pid 3 4242", event{kind: kPid, rank: 3, pid: 4242}},
		{"ready 0", event{kind: kReady, rank: 0}},
		{"[1,2] ready 2", event{kind: kReady, rank: 2}},
		{"at old 1 shrink 1700000000123456789", event{kind: kAt, rank: 1, step: "shrink", nanos: 1700000000123456789}},
		{"at new 7 init 1700000000000000001", event{kind: kAt, isNew: true, rank: 7, step: "init", nanos: 1700000000000000001}},
		{"check new 7 7 8 28", event{kind: kCheck, isNew: true, rank: 7, newRank: 7, size: 8, sum: 28}},
		{"error old 2 spawn MPI_ERR_SPAWN: could not spawn processes", event{kind: kError, rank: 2, step: "spawn", text: "MPI_ERR_SPAWN: could not spawn processes"}},
	}
	for _, c := range good {
		ev, ok, err := parseEvent(c.line)
		if err != nil || !ok {
			t.Errorf("parseEvent(%q) = ok %v, err %v; want an event", c.line, ok, err)
			continue
		}
		if ev != c.want {
			t.Errorf("parseEvent(%q) = %+v, want %+v", c.line, ev, c.want)
		}
	}
	for _, line := range []string{"", "prterun: some warning", "--------", "[host:123] mca: base: open", "readiness 3"} {
		if _, ok, err := parseEvent(line); ok || err != nil {
			t.Errorf("parseEvent(%q) = ok %v, err %v; want not the program's line", line, ok, err)
		}
	}
	for _, line := range []string{
		"pid 3", "pid 3 0", "pid x 5", "ready", "ready -1",
		"at old 1 shrink", "at mid 1 shrink 5", "at old 1 dance 5", "at new 1 shrink 5", "at old 1 knew 0", "at old 1 knew -5",
		"check old 1 1 8", "check old 1 1 8 x", "check who 1 1 8 28",
		"error old 2", "error odd 2 spawn x",
	} {
		if _, ok, err := parseEvent(line); ok || err == nil {
			t.Errorf("parseEvent(%q) = ok %v, err %v; want an error", line, ok, err)
		}
	}
}

// events of a good job of n = 4 ranks (victim 3), the kill at 1000 ms, each
// process's step times in ms.
func goodJob() []event {
	const ms = int64(1_000_000)
	var evs []event
	old := map[int][]int64{0: {1002, 1004, 1030, 1040, 1041}, 1: {1003, 1005, 1031, 1042, 1043}, 2: {1001, 1006, 1029, 1038, 1044}}
	for r := range 3 {
		for i, s := range oldSteps {
			evs = append(evs, event{kind: kAt, rank: r, step: s, nanos: old[r][i] * ms})
		}
		evs = append(evs, event{kind: kCheck, rank: r, newRank: r, size: 4, sum: 6})
	}
	for i, s := range newSteps {
		evs = append(evs, event{kind: kAt, isNew: true, rank: 3, step: s, nanos: []int64{1010, 1025, 1039, 1045}[i] * ms})
	}
	return append(evs, event{kind: kCheck, isNew: true, rank: 3, newRank: 3, size: 4, sum: 6})
}

func TestSummarize(t *testing.T) {
	const kill = 1000 * 1_000_000
	got, err := summarize(goodJob(), 4, kill)
	if err != nil {
		t.Fatal(err)
	}
	want := jobTimes{knew: 3, shrink: 6, spawn: 31, merge: 42, full: 45, newMain: 10, newInit: 25}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}

	bad := []struct {
		name string
		edit func([]event) []event
		want string
	}{
		{"survivor step missing", func(e []event) []event { return e[1:] }, "rank 0 knew"},
		{"new process missing", func(e []event) []event { return e[:len(e)-5] }, "the new process main"},
		{"check missing", func(e []event) []event { return e[:len(e)-1] }, "the new process check"},
		{"wrong final rank", func(e []event) []event { e[len(e)-1].newRank = 2; return e }, "final communicator rank 2"},
		{"wrong size", func(e []event) []event { e[5].size = 3; return e }, "size 3"},
		{"before the kill", func(e []event) []event { e[0].nanos = kill - 1; return e }, "before the kill"},
		{"twice", func(e []event) []event { return append(e, e[0]) }, "twice"},
		{"victim as survivor", func(e []event) []event { e[0].rank = 3; return e }, "not a survivor"},
		{"new replaces another", func(e []event) []event { e[len(e)-1].rank = 1; return e }, "replaces rank 1"},
	}
	for _, c := range bad {
		_, err := summarize(c.edit(goodJob()), 4, kill)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestLastSteps(t *testing.T) {
	evs := []event{
		{kind: kAt, rank: 0, step: "knew"}, {kind: kAt, rank: 0, step: "shrink"}, {kind: kAt, rank: 0, step: "spawn"},
		{kind: kAt, rank: 2, step: "knew"}, {kind: kCheck, rank: 2},
	}
	got := lastSteps(evs, 4)
	want := "rank 0: spawn; rank 1: none; rank 2: knew; the new process: not started"
	if got != want {
		t.Errorf("lastSteps = %q, want %q", got, want)
	}
}

func TestMpirunArgv(t *testing.T) {
	mpi := ulfm.MPI{Mpirun: "/o/bin/mpirun"}
	got := strings.Join(mpirunArgv(mpi, "/t/ulfm_replace", "tcp", 8, ""), " ")
	want := "/o/bin/mpirun --allow-run-as-root --oversubscribe --with-ft ulfm --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo -n 8 /t/ulfm_replace"
	if got != want {
		t.Errorf("tcp:\n got %s\nwant %s", got, want)
	}
	got = strings.Join(mpirunArgv(mpi, "b", "shm", 4, ":OVERSUBSCRIBE"), " ")
	want = "/o/bin/mpirun --allow-run-as-root --oversubscribe --with-ft ulfm --mca pml ob1 --mca btl self,sm,tcp --mca btl_tcp_if_include lo -n 4 b -map-by :OVERSUBSCRIBE"
	if got != want {
		t.Errorf("shm:\n got %s\nwant %s", got, want)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-n", "4, 8,4", "-transport", "tcp"})
	if err != nil || len(o.sizes) != 2 || o.sizes[1] != 8 || len(o.transports) != 1 || o.transports[0] != "tcp" || o.runs != 3 {
		t.Errorf("got %+v, %v", o, err)
	}
	for _, args := range [][]string{{"-n", "1"}, {"-n", "x"}, {"-transport", "udp"}, {"-runs", "0"}, {"-timeout", "0s"}, {"extra"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}
