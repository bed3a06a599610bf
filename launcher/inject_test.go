package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
)

// The hosts of --kill-host and --cut are checked against the job's before
// anything starts: a host of the hostfile or --hosts (HOST:PORT, or HOST
// when one agent runs there), ftrun's own host refused for --kill-host, an
// unknown one named with the hosts there are; a cut needs several hosts and
// a ftrun that may add routes; a pause a rank of the job.
func TestPlanInjections(t *testing.T) {
	defer func(f func() error) { checkNetAdmin = f }(checkNetAdmin)
	checkNetAdmin = func() error { return nil }
	self, _ := os.Hostname()
	blocks := []hostBlock{
		{ranks: rankRange(0, 2)},
		{name: "h2", start: startSSH, ranks: rankRange(2, 2)},
		{name: "h3", start: startSSH, ranks: rankRange(4, 2)},
		{name: "10.0.0.5:7770", addr: "10.0.0.5:7770", ranks: rankRange(6, 1)},
		{name: "10.0.0.6:7771", addr: "10.0.0.6:7771", ranks: rankRange(7, 1)},
		{name: "10.0.0.6:7772", addr: "10.0.0.6:7772", ranks: rankRange(8, 1)},
	}
	for _, tt := range []struct {
		host  string
		block int    // for a host found: -1 ftrun's
		err   string // else
	}{
		{host: "h2", block: 1},
		{host: "h3", block: 2},
		{host: "10.0.0.5:7770", block: 3},
		{host: "10.0.0.5", block: 3},
		{host: "10.0.0.6:7772", block: 5},
		{host: "10.0.0.6", err: "names 2 agents"},
		{host: "local", block: -1},
		{host: "localhost", block: -1},
		{host: self, block: -1},
		{host: "h9", err: "no host h9 in the job; its hosts are h2, h3, 10.0.0.5:7770, 10.0.0.6:7771, 10.0.0.6:7772, and ftrun's own (local, or " + self + ")"},
	} {
		got, err := injectHost(tt.host, blocks)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("injectHost(%q) = %d, %v; want an error with %q", tt.host, got, err, tt.err)
			}
		} else if err != nil || got != tt.block {
			t.Errorf("injectHost(%q) = %d, %v; want %d", tt.host, got, err, tt.block)
		}
	}

	o := &Config{N: 9, KillHosts: []KillHostSpec{{"h3", time.Second}}, Cuts: []CutSpec{{"h2", time.Second, 0}, {"local", 0, time.Second}},
		Pauses: []PauseSpec{{Rank: 8, For: time.Second}}}
	kills, cuts, err := planInjections(o, blocks)
	if err != nil || len(kills) != 1 || kills[0].block != 2 || len(cuts) != 2 || cuts[0].block != 1 || cuts[1].block != -1 {
		t.Errorf("planInjections: %+v, %+v, %v", kills, cuts, err)
	}
	for _, tt := range []struct {
		o      Config
		blocks []hostBlock
		err    string
	}{
		{Config{N: 9, KillHosts: []KillHostSpec{{"local", time.Second}}}, blocks, "local is ftrun's own host, and the job depends on ftrun running there"},
		{Config{N: 9, KillHosts: []KillHostSpec{{self, time.Second}}}, blocks, "is ftrun's own host"},
		{Config{N: 9, KillHosts: []KillHostSpec{{"h9", time.Second}}}, blocks, "--kill-host h9@1s: no host h9"},
		{Config{N: 9, Cuts: []CutSpec{{"h9", time.Second, 0}}}, blocks, "--cut h9@1s: no host h9"},
		{Config{N: 2, Cuts: []CutSpec{{"local", time.Second, 0}}}, blocks[:1], "the job runs on one host"},
		{Config{N: 9, Pauses: []PauseSpec{{9, 0, time.Second}}}, blocks, "--pause 9@0s:1s: no rank 9 in a job of 9"},
	} {
		if _, _, err := planInjections(&tt.o, tt.blocks); err == nil || !strings.Contains(err.Error(), tt.err) || !errors.As(err, new(usageError)) {
			t.Errorf("planInjections(%+v): %v; want a usage error with %q", tt.o, err, tt.err)
		}
	}
	checkNetAdmin = func() error { return errors.New("no CAP_NET_ADMIN") }
	if _, _, err := planInjections(&Config{N: 9, Cuts: []CutSpec{{"h2", time.Second, 0}}}, blocks); err == nil || !strings.Contains(err.Error(), "ftrun cannot add blackhole routes on its host: no CAP_NET_ADMIN") {
		t.Errorf("cut without CAP_NET_ADMIN: %v", err)
	}
	if _, _, err := planInjections(&Config{N: 9, KillHosts: []KillHostSpec{{"h2", time.Second}}}, blocks); err != nil {
		t.Errorf("kill-host needs no CAP_NET_ADMIN: %v", err)
	}
}

// A cut's routes: the cut side blackholes every other side's address, the
// others the cut side's; sides that share an address, or sit on loopback,
// cannot be cut apart.
func TestPlanCut(t *testing.T) {
	a := netip.MustParseAddr
	h1, h2, h3 := &agentLink{}, &agentLink{}, &agentLink{}
	sides := []cutSide{
		{label: "ftrun's host", addrs: []netip.Addr{a("198.18.60.254")}},
		{link: h1, label: "h1", addrs: []netip.Addr{a("198.18.60.11")}},
		{link: h2, label: "h2", addrs: []netip.Addr{a("198.18.60.12")}},
		{link: h3, label: "h3", addrs: []netip.Addr{a("198.18.60.13")}},
	}
	c := CutSpec{Host: "h3", At: time.Second}
	p, err := planCut(c, h3, sides)
	if err != nil {
		t.Fatal(err)
	}
	want := &cutPlan{spec: c, label: "h3", ftrun: []netip.Addr{a("198.18.60.13")}, agents: map[*agentLink][]netip.Addr{
		h1: {a("198.18.60.13")}, h2: {a("198.18.60.13")}, h3: {a("198.18.60.11"), a("198.18.60.12"), a("198.18.60.254")},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("cut h3: %+v\nwant %+v", p, want)
	}
	p, err = planCut(CutSpec{Host: "local"}, nil, sides)
	if err != nil || !slices.Equal(p.ftrun, []netip.Addr{a("198.18.60.11"), a("198.18.60.12"), a("198.18.60.13")}) ||
		!slices.Equal(p.agents[h2], []netip.Addr{a("198.18.60.254")}) || len(p.agents) != 3 {
		t.Errorf("cut ftrun's host: %+v, %v", p, err)
	}

	shared := slices.Clone(sides)
	shared[2].addrs = []netip.Addr{a("198.18.60.13")}
	if _, err := planCut(c, h3, shared); err == nil || !strings.Contains(err.Error(), "h3 and h2 are both at 198.18.60.13") {
		t.Errorf("shared address: %v", err)
	}
	loop := slices.Clone(sides)
	loop[0].addrs = []netip.Addr{a("127.0.0.1")}
	if _, err := planCut(c, h3, loop); err == nil || !strings.Contains(err.Error(), "ftrun's host is reached at 127.0.0.1") {
		t.Errorf("loopback: %v", err)
	}
}

// Routes are counted: two cuts that want the same route keep it until
// both healed; close removes what is left, and nothing is added after it.
func TestHolesCount(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	var log []string
	h := newHoles()
	h.add = func(x netip.Addr) error { log = append(log, "+"+x.String()); return nil }
	h.del = func(x netip.Addr) error { log = append(log, "-"+x.String()); return nil }
	h.cut([]netip.Addr{a, b})
	h.cut([]netip.Addr{b})
	h.heal([]netip.Addr{b})
	if got := h.held(); !slices.Equal(got, []netip.Addr{a, b}) {
		t.Errorf("after one heal of two cuts: %v held", got)
	}
	h.heal([]netip.Addr{a, b})
	h.heal([]netip.Addr{a}) // nothing left to heal
	h.cut([]netip.Addr{a})
	if err := h.close(); err != nil {
		t.Fatal(err)
	}
	if err := h.cut([]netip.Addr{b}); !errors.Is(err, errHolesClosed) {
		t.Errorf("cut after close: %v", err)
	}
	if want := []string{"+10.0.0.1", "+10.0.0.2", "-10.0.0.1", "-10.0.0.2", "+10.0.0.1", "-10.0.0.1"}; !slices.Equal(log, want) {
		t.Errorf("routes %q, want %q", log, want)
	}

	// A route that could not be added is not held, and not removed.
	h = newHoles()
	log = nil
	h.add = func(x netip.Addr) error { return errors.New("EPERM") }
	h.del = func(x netip.Addr) error { log = append(log, "-"+x.String()); return nil }
	if err := h.cut([]netip.Addr{a}); err == nil || len(h.held()) != 0 {
		t.Errorf("failed add: %v, %v held", err, h.held())
	}
	h.close()
	if len(log) != 0 {
		t.Errorf("removed %q, never added", log)
	}
}

// Before the launch of a job with --cut, the agent says whether it can add
// routes: an agent without CAP_NET_ADMIN refuses, naming its host, and
// starts nothing.
func TestAgentCutCheck(t *testing.T) {
	defer func(f func() error) { checkNetAdmin = f }(checkNetAdmin)
	for _, can := range []bool{true, false} {
		checkNetAdmin = func() error {
			if can {
				return nil
			}
			return errors.New("no CAP_NET_ADMIN (test)")
		}
		l, a := net.Pipe()
		done := make(chan struct{})
		var logs logBuffer
		go func() { defer close(done); runAgentJob(a, nil, logs.logf, nil) }()
		l.SetDeadline(time.Now().Add(10 * time.Second))
		if err := jobwire.WriteFrame(l, msgCut, nil); err != nil {
			t.Fatal(err)
		}
		typ, p, err := jobwire.ReadFrame(l, jobwire.MaxSmallFrame)
		switch {
		case err != nil:
			t.Fatalf("can %v: %v", can, err)
		case can && (typ != msgCut || len(p) != 0):
			t.Errorf("agent that can cut answered %d %q", typ, p)
		case !can && (typ != jobwire.MsgError || !strings.Contains(string(p), "cannot add the blackhole routes of --cut: no CAP_NET_ADMIN (test)")):
			t.Errorf("agent that cannot cut answered %d %q", typ, p)
		}
		l.Close()
		<-done
	}
}

// ticksHelper is helper mode "ticks" (args: N): the rank prints "tick RANK
// UNIXNANO" N times, 10 ms apart, and exits 0. A rank stopped for D shows a
// gap of at least D between two ticks.
func ticksHelper(rank, n int) int {
	for range n {
		fmt.Printf("tick %d %d\n", rank, time.Now().UnixNano())
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// longestGap is the longest time between two ticks of rank r in lines.
func longestGap(lines []string, r int) (gap time.Duration, ticks int) {
	var last int64
	for _, l := range lines {
		var rank int
		var ns int64
		if _, err := fmt.Sscanf(l, "tick %d %d", &rank, &ns); err != nil || rank != r {
			continue
		}
		if ticks > 0 {
			gap = max(gap, time.Duration(ns-last))
		}
		last = ns
		ticks++
	}
	return gap, ticks
}

// --pause stops a rank for the time asked and lets it go on: a rank of
// ftrun's host (ftrun keeps the timer) and one of an agent's host (the
// agent keeps it). Each shows a gap of at least the pause between two
// ticks, and ends: the job exits 0 with nobody failed.
func TestProcessPause(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	t.Setenv(EnvAgentSecret, testAgentSecret)
	t.Setenv(helperEnv, "ticks") // for the local ranks
	t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	ag := startAgentDaemon(t, "ticks")
	const pause = 700 * time.Millisecond
	out := make(lineChan, 1000)
	var errs logBuffer
	j, err := Start(&Config{N: 4, Hosts: []HostSpec{{N: 2}, {Addr: ag.addr, N: 2}}, Oversubscribe: true,
		Timeout: helperLife, Prog: selfPath(t), Args: []string{"100"}, Stdout: out, Stderr: &errs})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	started := map[int]bool{}
	for !started[1] || !started[3] {
		select {
		case l := <-out:
			lines = append(lines, l)
			var r int
			if _, err := fmt.Sscanf(l, "tick %d", &r); err == nil {
				started[r] = true
			}
		case <-j.Done():
			t.Fatalf("job ended early; output %q; stderr:\n%s", lines, errs.String())
		}
	}
	j.pause(PauseSpec{Rank: 1, For: pause}) // what the --pause timers do
	j.pause(PauseSpec{Rank: 3, For: pause})
	res := j.Wait()
	close(out)
	for l := range out {
		lines = append(lines, l)
	}
	if code := res.ExitCode(); code != ExitOK {
		t.Errorf("exit %d, want 0; stderr:\n%s\nagent:\n%s", code, errs.String(), ag.logs)
	}
	for _, r := range []int{1, 3} {
		if gap, n := longestGap(lines, r); gap < pause || n != 100 {
			t.Errorf("rank %d: %d ticks, longest gap %v; want 100 ticks and a gap of at least the pause %v", r, n, gap, pause)
		}
	}
	if gap, n := longestGap(lines, 0); gap >= pause || n != 100 {
		t.Errorf("rank 0 (not paused): %d ticks, longest gap %v", n, gap)
	}
	for _, want := range []string{
		"ftrun: paused rank 1 for 700ms (--pause 1@0s:700ms): SIGSTOP now\n",
		"ftrun: resumed rank 1 (--pause 1@0s:700ms): SIGCONT\n",
		"ftrun: paused rank 3 for 700ms (--pause 3@0s:700ms): SIGSTOP now, SIGCONT by its agent on " + ag.addr + "\n",
	} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs.String())
		}
	}
	ag.wait(t)
	if !strings.Contains(ag.logs.String(), "resumed rank 3") {
		t.Errorf("the agent does not say it resumed rank 3:\n%s", ag.logs)
	}
}

// --kill-host: the agent SIGKILLs its ranks and itself, sending nothing
// more; both of its ranks count as failed (lost with the host), the ranks
// of ftrun's host get their exit notices and the job exits 0.
func TestProcessKillHost(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	t.Setenv(EnvAgentSecret, testAgentSecret)
	t.Setenv(helperEnv, "notice")
	t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	ag := startAgentDaemon(t, "notice")
	out := make(lineChan, 100)
	var errs logBuffer
	j, err := Start(&Config{N: 4, Hosts: []HostSpec{{N: 2}, {Addr: ag.addr, N: 2}}, Oversubscribe: true,
		TagOutput: true, Timeout: helperLife, Prog: selfPath(t), Args: []string{"3"}, Stdout: out, Stderr: &errs})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for joined := 0; joined < 4; {
		select {
		case l := <-out:
			lines = append(lines, l)
			if strings.Contains(l, "joined") {
				joined++
			}
		case <-j.Done():
			t.Fatalf("job ended early; output %q; stderr:\n%s", lines, errs.String())
		}
	}
	k := KillHostSpec{Host: ag.addr, At: 0}
	j.killHost(k, j.blocks[1].link) // what the --kill-host timer does
	res := j.Wait()
	close(out)
	for l := range out {
		lines = append(lines, l)
	}
	if code := res.ExitCode(); code != ExitOK {
		t.Errorf("exit %d, want 0; result %+v; stderr:\n%s", code, res, errs.String())
	}
	for r := 2; r < 4; r++ {
		if st := res.Ranks[r]; !st.Failed || st.lost == "" {
			t.Errorf("rank %d: %+v, want lost with its host", r, st)
		}
	}
	for r := range 2 {
		if want := fmt.Sprintf("[%d] rank %d got the exit notice of rank 3\n", r, r); !slices.Contains(lines, want) {
			t.Errorf("no %q in %q", want, lines)
		}
	}
	for _, want := range []string{
		"ftrun: killing host " + ag.addr + " (--kill-host " + ag.addr + "@0s): its agent SIGKILLs its ranks [2 3] and itself\n",
		"ftrun: rank 2 failed at ", "ftrun: rank 3 failed at ",
	} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs.String())
		}
	}
	select {
	case <-ag.drained:
	case <-time.After(10 * time.Second):
		t.Errorf("the agent still runs after --kill-host; its log:\n%s", ag.logs)
		ag.cmd.Process.Kill()
	}
	if code := ag.wait(t); code != -1 {
		t.Errorf("agent exited with status %d, want killed by a signal; its log:\n%s", code, ag.logs)
	}
	if !strings.Contains(ag.logs.String(), "--kill-host: killing the ranks and this agent") {
		t.Errorf("agent log:\n%s", ag.logs)
	}
}

// Injections that cannot work are refused before any rank starts, with
// ftrun's usage status: a cut of a job on one host, a cut whose hosts are
// on loopback (all on one machine), a kill of ftrun's own host, a host the
// job does not have.
func TestProcessInjectionsRefused(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	self := selfPath(t)
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"-n", "2", "--cut", "local@1s", self}, "--cut local@1s: the job runs on one host: there is no link between hosts to cut"},
		{[]string{"--hosts", "local:1,127.0.0.1:1:1", "--kill-host", "local@1s", self}, "is ftrun's own host, and the job depends on ftrun running there"},
		{[]string{"--hosts", "local:1,127.0.0.1:1:1", "--kill-host", "h9@1s", self}, "no host h9 in the job; its hosts are 127.0.0.1:1, and ftrun's own"},
		{[]string{"--hosts", "local:1,127.0.0.1:1:1", "--cut", "h9@1s:1s", self}, "no host h9"},
		{[]string{"-n", "2", "--pause", "1@1s:0s", self}, "a pause of 0"},
	} {
		var out, errs bytes.Buffer
		if code := Main(append([]string{"-n", "2", "--oversubscribe"}, tt.args...), &out, &errs); code != ExitUsage || !strings.Contains(errs.String(), tt.err) {
			t.Errorf("ftrun %q: exit %d, stderr %q; want %d and %q", tt.args, code, errs.String(), ExitUsage, tt.err)
		}
	}
	if testing.Short() {
		return
	}
	// A real agent, on loopback: refused once the link says where it is,
	// before any rank prints a line.
	ag := startAgentDaemon(t, "print")
	stdout, stderr, code := runJob(t, "print", []string{"-n", "4", "--hosts", "local:2," + ag.addr + ":2", "--cut", ag.addr + "@1s"})
	if code != ExitUsage || !strings.Contains(stderr, "is reached at 127.0.0.1: a cut needs every host of the job at an address of its own, not loopback") || stdout != "" {
		t.Errorf("cut on loopback: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}
