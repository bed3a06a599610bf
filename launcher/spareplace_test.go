package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// The host of a spare: the replaced rank's host when it is alive with a
// free slot, else a --spare-hosts host, else a host with slots beyond -n,
// else this host if it runs ranks, else an error that says why for each.
func TestChooseSpareHost(t *testing.T) {
	local := hostState{label: "this host", local: true, runs: true, alive: true, running: 2, slots: 2}
	h1 := hostState{label: "host h1", alive: true, running: 0, slots: 1}
	h2 := hostState{label: "host h2", alive: true, running: 1, slots: 2}
	spare := hostState{label: "host h4", alive: true, spare: true, running: 0, slots: 1}
	dead := func(h hostState) hostState { h.alive = false; return h }
	full := func(h hostState) hostState { h.running = h.slots; return h }
	for _, c := range []struct {
		name  string
		hosts []hostState
		near  int
		over  bool
		want  int    // -1: an error
		why   string // in the error
	}{
		{"near alive with a free slot", []hostState{local, h1, full(h2), spare}, 1, false, 1, ""},
		{"near dead: the spare host", []hostState{local, dead(h1), h2, spare}, 1, false, 3, ""},
		{"near full: the spare host", []hostState{local, full(h1), h2, spare}, 1, false, 3, ""},
		{"spare host full: a slot beyond -n", []hostState{local, dead(h1), h2, full(spare)}, 1, false, 2, ""},
		{"spare host dead: a slot beyond -n", []hostState{local, dead(h1), h2, dead(spare)}, 1, false, 2, ""},
		{"no hint: the spare host first", []hostState{local, h1, spare}, -1, false, 2, ""},
		{"remote hosts full: this host", []hostState{{label: "this host", local: true, runs: true, alive: true, running: 1, slots: 2}, dead(h1), full(h2)}, 1, false, 0, ""},
		{"near full, oversubscribed", []hostState{full(local), full(h1)}, 1, true, 1, ""},
		{"this host full, oversubscribed", []hostState{full(local), dead(h1)}, 1, true, 0, ""},
		{"this host runs no rank", []hostState{{label: "this host", local: true, alive: true, slots: 4}, dead(h1)}, 1, false, -1,
			"no host can take a spare rank: the replaced rank's host host h1 is lost; this host runs no rank of the job; no --spare-hosts given"},
		{"all full or lost", []hostState{full(local), dead(h1), full(h2), dead(spare)}, 1, false, -1,
			"no host can take a spare rank: the replaced rank's host host h1 is lost; this host is full (2 ranks run on 2 slots); host h2 is full (2 ranks run on 2 slots); host h4 is lost"},
		{"one host, full", []hostState{full(local)}, 0, false, -1,
			"no host can take a spare rank: the replaced rank's host this host is full (2 ranks run on 2 slots); no --spare-hosts given"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := chooseSpareHost(c.hosts, c.near, c.over)
			if c.want >= 0 {
				if err != nil || got != c.want {
					t.Errorf("chooseSpareHost = %d, %v; want %d", got, err, c.want)
				}
				return
			}
			if err == nil || err.Error() != c.why {
				t.Errorf("chooseSpareHost = %d, %v; want the error %q", got, err, c.why)
			}
		})
	}
}

// The Job's view of its hosts: a spare replacing a rank of a lost agent
// host goes to the spare host; the ranks running on a host count against
// its slots, and a spare started there counts too.
func TestPlaceSpare(t *testing.T) {
	l1 := &agentLink{addr: "h1"}
	l4 := &agentLink{addr: "h4"}
	j := &Job{path: "/bin/prog", localCap: 1, local: []ftrma.Rank{0}, ranks: make([]*rankProc, 5)}
	for r := range j.ranks {
		j.ranks[r] = &rankProc{rank: ftrma.Rank(r), running: r < 3}
	}
	j.hosts = []*jobHost{
		{label: "", slots: 1, ranks: []ftrma.Rank{0}},
		{link: l1, label: "h1", slots: 2, ranks: []ftrma.Rank{1, 2}},
		{link: l4, label: "h4", slots: 1, spare: true},
	}
	place := func(near ftrma.Rank) (string, error) {
		j.mu.Lock()
		defer j.mu.Unlock()
		h, err := j.placeSpareLocked(near)
		if err != nil {
			return "", err
		}
		return h.label, nil
	}
	// Rank 2 failed: h1 runs 1 rank on 2 slots.
	j.ranks[2].running = false
	if h, err := place(2); h != "h1" || err != nil {
		t.Errorf("near 2 on a live h1 with a free slot: %q, %v; want h1", h, err)
	}
	// h1 lost (what fail and readLoop's end record): the spare host.
	l1.mu.Lock()
	l1.down = true
	l1.mu.Unlock()
	if h, err := place(2); h != "h4" || err != nil {
		t.Errorf("near 2 on a lost h1: %q, %v; want h4", h, err)
	}
	// h4 full with a spare: this host is full too.
	j.hosts[2].ranks = []ftrma.Rank{3}
	j.ranks[3].running = true
	_, err := place(2)
	if err == nil || !strings.Contains(err.Error(), "host h1 is lost") || !strings.Contains(err.Error(), "host h4 is full") || !strings.Contains(err.Error(), "this host is full") {
		t.Errorf("every host lost or full: %v", err)
	}
}

// A hostfile's hosts beyond -n hold spares (as many as they need), and
// --spare-hosts adds hosts for spares only; a host named in both is an
// error, as is --spare-hosts without --respawn.
func TestPlanSpareHosts(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "")
	dir := t.TempDir()
	hf := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hf, []byte("h1 slots=1\nh2 slots=1\nh3 slots=1\nh4 slots=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type block struct {
		Name  string
		Ranks []ftrma.Rank
		Slots int
		Spare bool
	}
	plan := func(o *Options) ([]block, error) {
		bs, err := planHosts(o)
		var out []block
		for _, b := range bs {
			out = append(out, block{b.label(), b.ranks, b.capacity(), b.spare})
		}
		return out, err
	}
	r := func(rs ...ftrma.Rank) []ftrma.Rank { return rs }
	for _, c := range []struct {
		name string
		o    Options
		want []block
		err  string
	}{
		{"no spares: hosts without ranks dropped", Options{N: 2, Hostfile: hf},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}}, ""},
		{"one spare: one host beyond -n", Options{N: 2, Hostfile: hf, Spares: 1},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", nil, 1, false}}, ""},
		{"--respawn: as many as ranks", Options{N: 2, Hostfile: hf, Spares: -1},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", nil, 1, false}, {"h4", nil, 1, false}}, ""},
		{"--spare-hosts", Options{N: 3, Hostfile: hf, Spares: 1, SpareHosts: "h9:2"},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", r(2), 1, false}, {"h9", nil, 2, true}}, ""},
		{"--spare-hosts too small: a host beyond -n too", Options{N: 2, Hostfile: hf, Spares: 2, SpareHosts: "h9"},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", nil, 1, false}, {"h9", nil, 1, true}}, ""},
		{"--spare-hosts names a job host", Options{N: 3, Hostfile: hf, Spares: 1, SpareHosts: "h2"}, nil, "host h2 is named twice"},
		{"--spare-hosts with running agents", Options{N: 2, Hosts: []HostSpec{{Addr: "a:7770"}}, Spares: 1, SpareHosts: "b:7770:2"},
			[]block{{"a:7770", r(0, 1), 2, false}, {"b:7770", nil, 2, true}}, ""},
		{"--spare-hosts local", Options{N: 2, Hosts: []HostSpec{{Addr: "a:7770"}}, Spares: 1, SpareHosts: "local"}, nil, "this host is no spare host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := plan(&c.o)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("planHosts = %v, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("planHosts = %+v, %v;\nwant %+v", got, err, c.want)
			}
		})
	}
	if _, err := ParseArgs([]string{"-n", "2", "--spare-hosts", "h4", "prog"}); err == nil || !strings.Contains(err.Error(), "needs --respawn") {
		t.Errorf("--spare-hosts without --respawn: %v", err)
	}
	if o, err := ParseArgs([]string{"-n", "2", "--respawn", "--spare-hosts", "h4:2,h5", "prog"}); err != nil || o.SpareHosts != "h4:2,h5" {
		t.Errorf("--spare-hosts h4:2,h5: %+v, %v", o, err)
	}
	if _, err := ParseArgs([]string{"-n", "2", "--respawn", "--spare-hosts", "h4:x", "prog"}); err == nil || !strings.Contains(err.Error(), "--spare-hosts") {
		t.Errorf("--spare-hosts h4:x: %v", err)
	}
}

func TestSpawnRankWire(t *testing.T) {
	m := spawnRankMsg{rank: 5, env: []string{"FTRMA_RANK=5", "FTRMA_SPAWN=eA=="}}
	if got, err := parseSpawnRank(m.append(nil)); err != nil || !reflect.DeepEqual(got, m) {
		t.Errorf("spawn round trip: %+v, %v", got, err)
	}
	good := m.append(nil)
	for i := range good {
		if _, err := parseSpawnRank(good[:i]); err == nil {
			t.Errorf("parseSpawnRank accepted %d of %d bytes", i, len(good))
		}
	}
	for _, a := range []spawnedRankMsg{{rank: 5, pid: 1234}, {rank: 6, text: "exec: no such file"}} {
		if got, err := parseSpawnedRank(a.append(nil)); err != nil || got != a {
			t.Errorf("spawned round trip: %+v, %v; want %+v", got, err, a)
		}
	}
	if _, err := parseSpawnedRank([]byte{0, 0, 0, 1}); err == nil {
		t.Error("parseSpawnedRank accepted 4 bytes")
	}
}

// An agent launched with no ranks (a host for spares) starts a spare on
// request and answers with its pid, then delivers its output; it refuses
// a rank started before and a variable that is not FTRMA_. When the link
// closes, the agent kills the spare, and ftrun counts it lost; a spare
// asked for on a closed link fails at once.
func TestAgentSpawnsSpare(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	a, logs := startAgent(t, "pid", false)
	l, err := dialAgent(a.Addr().String(), testAgentKey())
	if err != nil {
		t.Fatal(err)
	}
	if pids, err := l.launch(&launchSpec{job: "t", prog: selfPath(t), size: 3}); err != nil || len(pids) != 0 {
		l.close()
		t.Fatalf("launch of no ranks: %v, %v", pids, err)
	}
	out := lineChan(make(chan string, 16))
	j := &Job{out: &sink{stdout: out, stderr: out}, ranks: make([]*rankProc, 3)}
	for r := range j.ranks {
		j.ranks[r] = &rankProc{rank: ftrma.Rank(r)}
	}
	l.tm = scaledTiming(1)
	l.run(j)
	defer l.close()
	p := j.ranks[2]
	p.link, p.exit = l, make(chan exitedMsg, 1)
	p.fwd.Add(2)
	pid, err := l.spawnRank(2, []string{"FTRMA_RANK=2"}, agentTimeout)
	if err != nil || !alive(pid) {
		t.Fatalf("spawnRank = %d, %v; want a running pid", pid, err)
	}
	if line := <-out; line != fmt.Sprintf("pid %d\n", pid) {
		t.Errorf("the spare's output: %q, want its pid %d", line, pid)
	}
	if _, err := l.spawnRank(2, []string{"FTRMA_RANK=2"}, agentTimeout); err == nil || !strings.Contains(err.Error(), "rank 2 was started on host") {
		t.Errorf("spawn of rank 2 again: %v", err)
	}
	j.ranks[1].exit = make(chan exitedMsg, 1)
	if _, err := l.spawnRank(1, []string{"PATH=/x"}, agentTimeout); err == nil || !strings.Contains(err.Error(), "not an FTRMA_ variable") {
		t.Errorf("spawn with PATH: %v", err)
	}
	l.close()
	select {
	case m := <-p.exit:
		if m.lost == "" {
			t.Errorf("the spare's exit after the link closed: %+v, want lost", m)
		}
	case <-time.After(testTimeout):
		t.Fatal("no exit for the spare after the link closed")
	}
	if !waitFor(func() bool { return !alive(pid) }) {
		t.Errorf("spare (pid %d) outlived the link; agent log:\n%s", pid, logs)
	}
	if _, err := l.spawnRank(0, nil, agentTimeout); err == nil || !strings.Contains(err.Error(), "is lost") {
		t.Errorf("spawn on a closed link: %v", err)
	}
}
