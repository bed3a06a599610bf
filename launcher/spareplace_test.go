package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
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
	// h1 runs 2 ranks on 2 slots: full for a spare without a hint.
	if h, err := place(-1); h != "h4" || err != nil {
		t.Errorf("no hint, h1 full: %q, %v; want h4", h, err)
	}
	// Rank 2 failed but is not reaped yet: its slot counts as free.
	if h, err := place(2); h != "h1" || err != nil {
		t.Errorf("near 2 on a live h1, rank 2 not yet reaped: %q, %v; want h1", h, err)
	}
	// Rank 1 failed: h1 runs 1 rank on 2 slots.
	j.ranks[1].running = false
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
	plan := func(o *Config) ([]block, error) {
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
		o    Config
		want []block
		err  string
	}{
		{"no spares: hosts without ranks dropped", Config{N: 2, Hostfile: hf},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}}, ""},
		{"one spare: one host beyond -n", Config{N: 2, Hostfile: hf, Spares: 1},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", nil, 1, false}}, ""},
		{"--respawn: as many as ranks", Config{N: 2, Hostfile: hf, Spares: -1},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", nil, 1, false}, {"h4", nil, 1, false}}, ""},
		{"--spare-hosts", Config{N: 3, Hostfile: hf, Spares: 1, SpareHosts: "h9:2"},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", r(2), 1, false}, {"h9", nil, 2, true}}, ""},
		{"--spare-hosts too small: a host beyond -n too", Config{N: 2, Hostfile: hf, Spares: 2, SpareHosts: "h9"},
			[]block{{"h1", r(0), 1, false}, {"h2", r(1), 1, false}, {"h3", nil, 1, false}, {"h9", nil, 1, true}}, ""},
		{"--spare-hosts names a job host", Config{N: 3, Hostfile: hf, Spares: 1, SpareHosts: "h2"}, nil, "host h2 is named twice"},
		{"--spare-hosts with running agents", Config{N: 2, Hosts: []HostSpec{{Addr: "a:7770"}}, Spares: 1, SpareHosts: "b:7770:2"},
			[]block{{"a:7770", r(0, 1), 2, false}, {"b:7770", nil, 2, true}}, ""},
		{"--spare-hosts local", Config{N: 2, Hosts: []HostSpec{{Addr: "a:7770"}}, Spares: 1, SpareHosts: "local"}, nil, "this host is no spare host"},
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

// hostReplaceHelper is the rank program of TestProcessSpareOnHost: a job
// of 3 ranks and 1 spare. Every rank joins with startup.Init, passes a
// barrier and says it is ready; rank 2 then exits with status 3 (how
// "exit"; how "exit once there is PATH": once that file exists) or waits
// to be lost with its host (how "lost"). The others
// find the next barrier failed and call Replace; the spare's Init returns
// the communicator Replace made, and all three pass a barrier on it.
//
// A spare started where holdSpareEnv is set says so and waits, without
// joining, until it is killed with its host.
func hostReplaceHelper(rank int, how string) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	if _, spare := os.LookupEnv(jobwire.EnvSpawn); spare && os.Getenv(holdSpareEnv) == "1" {
		fmt.Printf("spare %d holds\n", rank)
		<-ctx.Done()
		return 0
	}
	c, err := startup.Init(ctx)
	if err != nil {
		return fail("init: %v", err)
	}
	defer c.Close()
	nc := c
	if was, ok := c.Replaces(); ok {
		fmt.Printf("rank %d replaces world rank %d as rank %d of %d\n", rank, was, c.Rank(), c.Size())
	} else {
		if err := c.Barrier(ctx); err != nil {
			return fail("first barrier: %v", err)
		}
		fmt.Printf("rank %d ready\n", rank)
		if rank == 2 {
			if how == "exit" || how == "exit, then host lost" {
				return 3
			}
			if marker, ok := strings.CutPrefix(how, "exit once there is "); ok {
				for {
					if _, err := os.Stat(marker); err == nil {
						return 3
					}
					select {
					case <-ctx.Done():
						return fail("no %s", marker)
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			<-ctx.Done() // killed with its host first
			return 0
		}
		if err := c.Barrier(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
			return fail("barrier after rank 2 was lost: %v, want ErrProcFailed", err)
		}
		if nc, err = c.Replace(ctx); err != nil {
			return fail("replace: %v", err)
		}
		defer nc.Close()
	}
	if err := nc.Barrier(ctx); err != nil {
		return fail("barrier on the new communicator: %v", err)
	}
	fmt.Printf("rank %d is %d of %d after replace\n", rank, nc.Rank(), nc.Size())
	return 0
}

// Spares on agents' hosts, through ftrun's job side over TCP: ranks 0 and 1
// here, rank 2 on the agent of host a, and host b (--spare-hosts) for a
// spare. When rank 2 exits, host a is alive with a free slot, and the
// spare replaces it there; when host a is lost (its agent closed, which
// kills rank 2), the spare goes to host b. Either way the survivors'
// Replace makes a communicator of 3 again with the spare as rank 2.
func TestProcessSpareOnHost(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	for _, how := range []string{"exit", "lost"} {
		t.Run(how, func(t *testing.T) {
			t.Setenv(helperEnv, "hostreplace")
			t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
			a, alogs := startAgent(t, "hostreplace", false)
			b, blogs := startAgent(t, "hostreplace", false)
			out := make(lineChan, 100)
			var errs logBuffer
			j, err := Start(&Config{N: 3, Spares: 1, Transport: TransportTCP,
				Hosts:      []HostSpec{{N: 2}, {Addr: a.Addr().String(), N: 1}},
				SpareHosts: b.Addr().String(), AgentSecret: testAgentSecret,
				Timeout: 2 * helperLife, Prog: selfPath(t), Args: []string{how}, Stdout: out, Stderr: &errs})
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for ready := 0; ready < 3; {
				select {
				case l := <-out:
					lines = append(lines, l)
					if strings.Contains(l, " ready") {
						ready++
					}
				case <-j.Done():
					t.Fatalf("job ended early; output %q; stderr:\n%s", lines, errs.String())
				}
			}
			if how == "lost" {
				a.Close() // host a lost: its agent ends and kills rank 2
			}
			res := j.Wait()
			wantReplaced(t, lines, out, 3, errs.String())
			host, logs, other := a.Addr().String(), alogs, blogs
			if how == "lost" {
				host, logs, other = b.Addr().String(), blogs, alogs
			}
			if want := "started spare rank 3 on " + host + " at rank 0's request"; !strings.Contains(errs.String(), want) {
				t.Errorf("ftrun does not say %q:\n%s", want, errs.String())
			}
			if !strings.Contains(logs.String(), "started spare rank 3") || strings.Contains(other.String(), "started spare rank 3") {
				t.Errorf("spare rank 3 did not start on %s alone; its agent's log:\n%s\nthe other agent's:\n%s", host, logs, other)
			}
			for _, r := range []int{0, 1, 3} {
				if !res.Ranks[r].OK() {
					t.Errorf("rank %d: %v", r, res.Ranks[r])
				}
			}
			if how == "lost" && !res.Ranks[2].Failed {
				t.Errorf("rank 2 of the lost host: %+v, want failed", res.Ranks[2])
			}
		})
	}
}

// holdSpareEnv makes a spare of hostReplaceHelper wait without joining.
const holdSpareEnv = "LAUNCHER_TEST_HOLD_SPARE"

// A spare's host lost before the spare joined: rank 2 exits, the spare
// replacing it starts on rank 2's host a (alive, a free slot), and host a
// is lost before the spare joins (its agent closes: a host dying takes a
// moment, in which its agent may still report a rank's death and take a
// spare, as TestClusterRespawn met under load). ftrun starts the next
// spare on host b, and the survivors' Replace succeeds with it; without
// the retry their Replace failed ("0 of 1 spares started").
func TestProcessSpareHostLostBeforeJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	t.Setenv(helperEnv, "hostreplace")
	t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	a, _ := startAgentEnv(t, "hostreplace", false, holdSpareEnv+"=1")
	b, blogs := startAgent(t, "hostreplace", false)
	out := make(lineChan, 100)
	var errs logBuffer
	j, err := Start(&Config{N: 3, Spares: 2, Transport: TransportTCP,
		Hosts:      []HostSpec{{N: 2}, {Addr: a.Addr().String(), N: 1}},
		SpareHosts: b.Addr().String(), AgentSecret: testAgentSecret,
		Timeout: 2 * helperLife, Prog: selfPath(t), Args: []string{"exit, then host lost"}, Stdout: out, Stderr: &errs})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for held := false; !held; {
		select {
		case l := <-out:
			lines = append(lines, l)
			held = l == "spare 3 holds\n"
		case <-j.Done():
			t.Fatalf("job ended before spare 3 started on host a; output %q; stderr:\n%s", lines, errs.String())
		}
	}
	a.Close() // host a lost, spare 3 with it, before it joined
	res := j.Wait()
	wantReplaced(t, lines, out, 4, errs.String())
	for _, want := range []string{"trying another host", "started spare rank 4 on " + b.Addr().String() + " at rank 0's request"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("ftrun does not say %q:\n%s", want, errs.String())
		}
	}
	if !strings.Contains(blogs.String(), "started spare rank 4") {
		t.Errorf("spare rank 4 did not start on host b; its agent's log:\n%s", blogs)
	}
	for _, r := range []int{0, 1, 4} {
		if !res.Ranks[r].OK() {
			t.Errorf("rank %d: %v", r, res.Ranks[r])
		}
	}
}

// wantReplaced reads the rest of a hostReplaceHelper job's output (out,
// after lines) and checks that spare took world rank 2's place and that
// all three members passed the barrier on the new communicator.
func wantReplaced(t *testing.T, lines []string, out lineChan, spare int, stderr string) {
	t.Helper()
	close(out)
	for l := range out {
		lines = append(lines, l)
	}
	all := strings.Join(lines, "")
	for _, want := range []string{
		fmt.Sprintf("rank %d replaces world rank 2 as rank 2 of 3\n", spare),
		"rank 0 is 0 of 3 after replace\n",
		"rank 1 is 1 of 3 after replace\n",
		fmt.Sprintf("rank %d is 2 of 3 after replace\n", spare),
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in the output:\n%s\nstderr:\n%s", want, all, stderr)
		}
	}
}
