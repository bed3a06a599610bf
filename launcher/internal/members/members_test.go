//go:build unix

// The tests run real memberlist groups on 127.0.0.1 with ephemeral ports.
// The stall and load tests start copies of the test binary (see TestMain):
// one runs a member that the test freezes with SIGSTOP, the others burn CPU.

package members

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// childEnv selects a child mode of the test binary: "member" or "burn".
const childEnv = "FTRMA_MEMBERS_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "member":
		os.Exit(childMember())
	case "burn":
		os.Exit(childBurn())
	default:
		os.Exit(2)
	}
}

// childMember runs a member named $FTRMA_MEMBERS_NAME with key
// $FTRMA_MEMBERS_KEY (hex) that joins $FTRMA_MEMBERS_JOIN, prints "joined"
// and stays until its standard input closes (at most a minute).
func childMember() int {
	key, err := hex.DecodeString(os.Getenv("FTRMA_MEMBERS_KEY"))
	if err != nil {
		fmt.Println("bad key:", err)
		return 1
	}
	g, err := Start(Config{Name: os.Getenv("FTRMA_MEMBERS_NAME"), BindAddr: "127.0.0.1", Key: key})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	defer g.Shutdown()
	if err := g.Join([]string{os.Getenv("FTRMA_MEMBERS_JOIN")}, 5*time.Second); err != nil {
		fmt.Println("join:", err)
		return 1
	}
	fmt.Println("joined")
	// $FTRMA_MEMBERS_SPIN goroutines keep this process busy.
	spin, _ := strconv.Atoi(os.Getenv("FTRMA_MEMBERS_SPIN"))
	for range spin {
		go func() {
			for x := uint64(1); x != 0; {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}()
	}
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-time.After(time.Minute):
	}
	return 0
}

// childBurn spins one thread for $FTRMA_MEMBERS_BURN (a duration).
func childBurn() int {
	d, err := time.ParseDuration(os.Getenv("FTRMA_MEMBERS_BURN"))
	if err != nil || d > 30*time.Second {
		return 1
	}
	runtime.GOMAXPROCS(1)
	x := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 100000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if x == 42 {
		fmt.Println(x)
	}
	return 0
}

// startChild starts the test binary in a child mode and stops it at cleanup:
// it resumes a stopped child, closes its input, and kills it if it has not
// exited within 5 s.
func startChild(t *testing.T, env ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		exited := make(chan struct{})
		go func() {
			io.Copy(io.Discard, stdout)
			cmd.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	return cmd, bufio.NewReader(stdout)
}

var testKey = DeriveKey([]byte("0123456789abcdef0123456789abcdef"), "ftrma members test")

// recorder keeps the callbacks a member received.
type recorder struct {
	mu     sync.Mutex // guards events and logs
	events []record
	logs   []string
}

func (r *recorder) log(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, line)
}

// countLogs returns how many log lines contain s.
func (r *recorder) countLogs(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.logs {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

type record struct {
	kind string // "join", "leave" or "dead"
	name string
	meta []byte
	at   time.Time
}

func (r *recorder) add(kind, name string, meta []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, record{kind, name, meta, time.Now()})
}

// all returns a copy of the events.
func (r *recorder) all() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// find returns the events of the given kind about name.
func (r *recorder) find(kind, name string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, e := range r.events {
		if e.kind == kind && e.name == name {
			out = append(out, e)
		}
	}
	return out
}

type member struct {
	*Group
	rec *recorder
}

// newMember starts a member named name with recorded callbacks and a log into
// t, and shuts it down at cleanup.
func newMember(t testing.TB, name string, key []byte, timing Timing) *member {
	t.Helper()
	rec := &recorder{}
	g, err := Start(Config{
		Name:     name,
		BindAddr: "127.0.0.1",
		Key:      key,
		Meta:     []byte("meta of " + name),
		Timing:   timing,
		OnJoin:   func(n string, m []byte) { rec.add("join", n, m) },
		OnLeave:  func(n string, m []byte) { rec.add("leave", n, m) },
		OnDead:   func(n string, m []byte) { rec.add("dead", n, m) },
		Logger: slog.New(ftrma.NewLogHandler(logFunc(func(line string) {
			rec.log(line)
			t.Logf("%s: %s", name, line)
		}), ftrma.LogOptions{})),
	})
	if err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	t.Cleanup(func() { g.Shutdown() })
	return &member{g, rec}
}

// newGroup starts n members h0..h(n-1); all join h0, and it waits until each
// sees all n.
func newGroup(t testing.TB, n int, timing Timing) []*member {
	t.Helper()
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = newMember(t, fmt.Sprintf("h%d", i), testKey, timing)
		if i > 0 {
			if err := ms[i].Join([]string{ms[0].Addr()}, 5*time.Second); err != nil {
				t.Fatalf("h%d joins h0: %v", i, err)
			}
		}
	}
	converged := func() bool {
		for _, m := range ms {
			if len(m.Members()) != n {
				return false
			}
		}
		return true
	}
	for end := time.Now().Add(10 * time.Second); !converged(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			for _, m := range ms {
				if got := m.Members(); len(got) != n {
					t.Errorf("%s sees %d: %v", m.Name(), len(got), got)
				}
			}
			t.Fatalf("the group of %d did not converge within 10 s", n)
		}
	}
	return ms
}

// waitFor polls cond every 5 ms and fails the test if it does not hold within
// limit: the limit says "never hangs", not how fast.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// checkGoroutines fails the test if, after its cleanups, the goroutine count
// has not come back to its value at the call within 5 s (memberlist's probe
// in flight at Shutdown ends within a ProbeInterval). Call it first, so its
// cleanup runs last.
func checkGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		end := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(end) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines left, %d before the test:\n%s",
					runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// percentile returns the p-th percentile (0..100, nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func TestCrashIsReportedDeadOnce(t *testing.T) {
	// init
	checkGoroutines(t)
	const n = 4
	ms := newGroup(t, n, Timing{})
	for _, m := range ms[1:] {
		if got := m.rec.find("join", "h0"); len(got) != 1 || string(got[0].meta) != "meta of h0" {
			t.Errorf("%s: OnJoin for h0: %+v, want one with h0's meta", m.Name(), got)
		}
	}
	victim, survivors := ms[n-1], ms[:n-1]

	// test
	crashed := time.Now()
	victim.Shutdown()
	waitFor(t, 10*time.Second, "every survivor reports the crash", func() bool {
		for _, m := range survivors {
			if len(m.rec.find("dead", victim.Name())) == 0 {
				return false
			}
		}
		return true
	})
	// Room for a duplicate or a late OnLeave to show up.
	time.Sleep(300 * time.Millisecond)

	// check
	var lat []time.Duration
	for _, m := range survivors {
		dead := m.rec.find("dead", victim.Name())
		if len(dead) != 1 {
			t.Errorf("%s: %d OnDead for %s, want 1", m.Name(), len(dead), victim.Name())
		}
		if left := m.rec.find("leave", victim.Name()); len(left) != 0 {
			t.Errorf("%s: OnLeave for crashed %s", m.Name(), victim.Name())
		}
		if string(dead[0].meta) != "meta of "+victim.Name() {
			t.Errorf("%s: OnDead meta %q", m.Name(), dead[0].meta)
		}
		if slices.Contains(m.Members(), victim.Name()) {
			t.Errorf("%s still lists %s: %v", m.Name(), victim.Name(), m.Members())
		}
		lat = append(lat, dead[0].at.Sub(crashed))
	}
	t.Logf("crash of 1 of %d: detection per survivor %v; p50 %v, max %v (nominal D(%d) = %v)",
		n, lat, percentile(lat, 50), percentile(lat, 100), n, Timing{}.Detection(n))
}

func TestLeaveIsReportedLeft(t *testing.T) {
	checkGoroutines(t)
	const n = 3
	ms := newGroup(t, n, Timing{})
	leaver, stayers := ms[1], []*member{ms[0], ms[2]}

	began := time.Now()
	if err := leaver.Leave(2 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	t.Logf("Leave took %v", time.Since(began))
	waitFor(t, 10*time.Second, "every member reports the leave", func() bool {
		for _, m := range stayers {
			if len(m.rec.find("leave", leaver.Name())) == 0 {
				return false
			}
		}
		return true
	})
	// A missed leave notice would turn into a suspicion and a death
	// within D(n); wait that long.
	time.Sleep(Timing{}.Detection(n))

	for _, m := range stayers {
		if got := m.rec.find("leave", leaver.Name()); len(got) != 1 {
			t.Errorf("%s: %d OnLeave for %s, want 1", m.Name(), len(got), leaver.Name())
		}
		if got := m.rec.find("dead", leaver.Name()); len(got) != 0 {
			t.Errorf("%s: OnDead for %s, which left", m.Name(), leaver.Name())
		}
		if want := []string{"h0", "h2"}; !slices.Equal(m.Members(), want) {
			t.Errorf("%s: members %v, want %v", m.Name(), m.Members(), want)
		}
	}
	if err := leaver.Leave(time.Second); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("second Leave: %v, want ErrClosed", err)
	}
	if err := leaver.Join([]string{ms[0].Addr()}, time.Second); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("Join after Leave: %v, want ErrClosed", err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Errorf("Shutdown after Leave: %v", err)
	}
}

func TestWrongKeyCannotJoin(t *testing.T) {
	checkGoroutines(t)
	ms := newGroup(t, 2, Timing{})
	otherKey := DeriveKey([]byte("another job's secret, 32 bytes.."), "ftrma members test")
	intruder := newMember(t, "intruder", otherKey, Timing{})

	err := intruder.Join([]string{ms[0].Addr(), ms[1].Addr()}, 3*time.Second)
	var je *JoinError
	if !errors.As(err, &je) {
		t.Fatalf("Join with the wrong key: %v, want a *JoinError", err)
	}
	t.Logf("Join with the wrong key: %v", err)
	if je.Joined != 0 || !slices.Equal(je.Addrs, []string{ms[0].Addr(), ms[1].Addr()}) {
		t.Errorf("JoinError names %v (joined %d), want both addresses", je.Addrs, je.Joined)
	}
	// Let a few probe and gossip rounds pass: nothing of the intruder may
	// leak in.
	time.Sleep(5 * DefaultTiming().ProbeInterval)
	for _, m := range ms {
		if slices.Contains(m.Members(), "intruder") || len(m.rec.find("join", "intruder")) > 0 {
			t.Errorf("%s sees the intruder: members %v", m.Name(), m.Members())
		}
	}
	if got := intruder.Members(); !slices.Equal(got, []string{"intruder"}) {
		t.Errorf("intruder's members: %v, want only itself", got)
	}
	if evs := intruder.rec.all(); len(evs) > 0 {
		t.Errorf("intruder got events %+v", evs)
	}
}

func TestJoinErrorNamesUnreachable(t *testing.T) {
	checkGoroutines(t)
	ms := newGroup(t, 2, Timing{})
	// A port nobody listens on: take one from a member and shut it.
	gone := newMember(t, "gone", testKey, Timing{})
	goneAddr := gone.Addr()
	gone.Shutdown()

	m := newMember(t, "late", testKey, Timing{})
	err := m.Join([]string{ms[0].Addr(), goneAddr}, 2*time.Second)
	var je *JoinError
	if !errors.As(err, &je) || je.Joined != 1 || !slices.Equal(je.Addrs, []string{goneAddr}) {
		t.Fatalf("Join: %v, want a JoinError naming only %s", err, goneAddr)
	}
	if !strings.Contains(err.Error(), goneAddr) {
		t.Errorf("error %q does not name %s", err, goneAddr)
	}
	waitFor(t, 5*time.Second, "the late member is in the group", func() bool {
		return len(ms[1].Members()) == 3
	})
}

func TestBadConfig(t *testing.T) {
	checkGoroutines(t)
	good := Config{Name: "h0", BindAddr: "127.0.0.1", Key: testKey}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"no key", func(c *Config) { c.Key = nil }},
		{"16-byte key", func(c *Config) { c.Key = testKey[:16] }},
		{"empty name", func(c *Config) { c.Name = "" }},
		{"no bind address", func(c *Config) { c.BindAddr = "" }},
		{"host name", func(c *Config) { c.BindAddr = "localhost" }},
		{"unspecified address", func(c *Config) { c.BindAddr = "0.0.0.0" }},
		{"port out of range", func(c *Config) { c.BindPort = 70000 }},
		{"meta too large", func(c *Config) { c.Meta = make([]byte, MaxMetaSize+1) }},
		{"probe timeout above interval", func(c *Config) { c.Timing.ProbeTimeout = time.Second }},
		{"negative interval", func(c *Config) { c.Timing.GossipInterval = -time.Second }},
	} {
		c := good
		tc.edit(&c)
		g, err := Start(c)
		if !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("%s: Start: %v, want ErrInvalid", tc.name, err)
		}
		if g != nil {
			g.Shutdown()
		}
	}

	g, err := Start(good)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown()
	if err := g.Join(nil, time.Second); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Join(nil): %v, want ErrInvalid", err)
	}
	if err := g.Join([]string{"127.0.0.1:1"}, 0); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Join with no timeout: %v, want ErrInvalid", err)
	}
	if err := g.Leave(0); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Leave(0): %v, want ErrInvalid", err)
	}
	taken := good
	_, port, _ := strings.Cut(g.Addr(), ":")
	taken.BindPort, _ = strconv.Atoi(port)
	if _, err := Start(taken); err == nil || errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Start on a taken port: %v, want an error other than ErrInvalid", err)
	} else {
		t.Logf("Start on a taken port: %v", err)
	}
}

func TestDeriveKey(t *testing.T) {
	a := DeriveKey([]byte("secret"), "ftrma members v1")
	if len(a) != KeySize {
		t.Fatalf("key has %d bytes", len(a))
	}
	if !bytes.Equal(a, DeriveKey([]byte("secret"), "ftrma members v1")) {
		t.Error("DeriveKey is not deterministic")
	}
	if bytes.Equal(a, DeriveKey([]byte("secret"), "ftrma members v2")) ||
		bytes.Equal(a, DeriveKey([]byte("secreT"), "ftrma members v1")) {
		t.Error("DeriveKey ignores its label or secret")
	}
}

func TestDetectionFormula(t *testing.T) {
	d := Timing{}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		// 2·200 ms + 3·200 ms + ⌈log3 n⌉·100 ms
		{2, 1100 * time.Millisecond},
		{3, 1100 * time.Millisecond},
		{4, 1200 * time.Millisecond},
		{9, 1200 * time.Millisecond},
		{10, 1300 * time.Millisecond},
		// 2·200 ms + 3·log10(32)·200 ms + 4·100 ms
		{32, 1703 * time.Millisecond},
	} {
		if got := d.Detection(tc.n).Round(time.Millisecond); got != tc.want {
			t.Errorf("Detection(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	slow := Timing{ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 4}
	if got, want := slow.Detection(4), 6200*time.Millisecond; got != want {
		t.Errorf("memberlist-like Detection(4) = %v, want %v", got, want)
	}
}

// TestStalledMemberSurvives freezes a member's whole process (SIGSTOP) for
// less than the suspicion time, then for longer.
func TestStalledMemberSurvives(t *testing.T) {
	checkGoroutines(t)
	ms := newGroup(t, 3, Timing{})
	child, out := startChild(t, childEnv+"=member", "FTRMA_MEMBERS_NAME=stalled",
		"FTRMA_MEMBERS_KEY="+hex.EncodeToString(testKey), "FTRMA_MEMBERS_JOIN="+ms[0].Addr())
	if line, err := out.ReadString('\n'); line != "joined\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	waitFor(t, 5*time.Second, "every member sees the stalled one", func() bool {
		for _, m := range ms {
			if len(m.Members()) != 4 {
				return false
			}
		}
		return true
	})

	// Stalls of two probe intervals, within the tolerance of about 0.7 s:
	// probes fail and it may be suspected, but it refutes in time.
	const short, stalls = 400 * time.Millisecond, 2
	for range stalls {
		child.Process.Signal(syscall.SIGSTOP)
		time.Sleep(short)
		child.Process.Signal(syscall.SIGCONT)
		time.Sleep(700 * time.Millisecond)
	}
	time.Sleep(Timing{}.Detection(4))
	suspicions := 0
	for _, m := range ms {
		suspicions += m.rec.countLogs("Suspect stalled has failed")
		if got := m.rec.find("dead", "stalled"); len(got) > 0 {
			t.Errorf("%s declared the member dead after a %v stall", m.Name(), short)
		}
	}
	t.Logf("%d stalls of %v: %d failed probes of the stalled member, no death", stalls, short, suspicions)

	// A stall past the detection time is a death; when the process runs
	// again, it refutes and rejoins.
	stopped := time.Now()
	child.Process.Signal(syscall.SIGSTOP)
	waitFor(t, 10*time.Second, "the long-stalled member is declared dead", func() bool {
		for _, m := range ms {
			if len(m.rec.find("dead", "stalled")) == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("a stalled member is declared dead by all after %v", time.Since(stopped))
	child.Process.Signal(syscall.SIGCONT)
	waitFor(t, 10*time.Second, "the resumed member is back", func() bool {
		for _, m := range ms {
			if len(m.rec.find("join", "stalled")) < 2 {
				return false
			}
		}
		return true
	})
}

// TestLoadCausesNoDeaths runs a group while four processes spin on the
// machine's cores.
func TestLoadCausesNoDeaths(t *testing.T) {
	checkGoroutines(t)
	const burn = 3 * time.Second
	ms := newGroup(t, 4, Timing{})
	for range 4 {
		startChild(t, childEnv+"=burn", "FTRMA_MEMBERS_BURN="+burn.String())
	}
	time.Sleep(burn)
	for _, m := range ms {
		for _, e := range m.rec.all() {
			if e.kind != "join" {
				t.Errorf("%s: %s of %s under load", m.Name(), e.kind, e.name)
			}
		}
	}
}

// The measurements below run with FTRMA_LONG=1.

func longOnly(t *testing.T) {
	if os.Getenv("FTRMA_LONG") != "1" {
		t.Skip("set FTRMA_LONG=1 to measure")
	}
}

// TestMeasureDetection measures, for groups of 3 and 8 (and the sizes in
// $FTRMA_MEMBERS_SIZES), the time from a crash to the last survivor's
// OnDead, over $FTRMA_MEMBERS_RUNS runs (default 20).
func TestMeasureDetection(t *testing.T) {
	longOnly(t)
	runs := 20
	if s := os.Getenv("FTRMA_MEMBERS_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	sizes := []int{3, 8}
	for _, s := range strings.Fields(os.Getenv("FTRMA_MEMBERS_SIZES")) {
		n, _ := strconv.Atoi(s)
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		var first, last []time.Duration
		for range runs {
			f, l := measureOnce(t, n)
			first, last = append(first, f), append(last, l)
		}
		t.Logf("n=%d, %d runs: first survivor p50 %v; last survivor p50 %v, p99 %v, max %v; nominal D(n) %v",
			n, runs, percentile(first, 50), percentile(last, 50), percentile(last, 99),
			percentile(last, 100), Timing{}.Detection(n))
		slices.Sort(last)
		t.Logf("n=%d, last survivor, sorted: %v", n, last)
	}
}

func measureOnce(t *testing.T, n int) (first, last time.Duration) {
	var res [2]time.Duration
	t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
		ms := newGroup(t, n, Timing{})
		// Let the probe rounds settle to a random phase.
		time.Sleep(time.Duration(rand.N(400)) * time.Millisecond)
		v := rand.N(n)
		victim := ms[v]
		survivors := slices.Delete(slices.Clone(ms), v, v+1)
		crashed := time.Now()
		victim.Shutdown()
		waitFor(t, 10*time.Second, "every survivor reports the crash", func() bool {
			for _, m := range survivors {
				if len(m.rec.find("dead", victim.Name())) == 0 {
					return false
				}
			}
			return true
		})
		res[0] = time.Hour
		for _, m := range survivors {
			d := m.rec.find("dead", victim.Name())[0].at.Sub(crashed)
			res[0], res[1] = min(res[0], d), max(res[1], d)
		}
	})
	return res[0], res[1]
}

// TestMeasureIdleCPU reports the process CPU time of an idle group of 4
// members over 5 s.
func TestMeasureIdleCPU(t *testing.T) {
	longOnly(t)
	newGroup(t, 4, Timing{})
	time.Sleep(time.Second)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const span = 5 * time.Second
	c0, w0 := cpu(), time.Now()
	time.Sleep(span)
	used, wall := cpu()-c0, time.Since(w0)
	t.Logf("idle group of 4 in one process: %v CPU in %v = %.2f%% of one core (%.2f%% per member)",
		used, wall.Round(time.Millisecond), 100*used.Seconds()/wall.Seconds(), 25*used.Seconds()/wall.Seconds())
}

// logFunc is an io.Writer that hands f each line written, without its
// newline.
type logFunc func(line string)

func (f logFunc) Write(p []byte) (int, error) {
	f(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// memberlist's level tags become slog levels, and the lines that report a
// suspected or failed member are warnings.
func TestMemberlistLevel(t *testing.T) {
	for _, c := range []struct {
		line, msg string
		level     slog.Level
	}{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4", "memberlist: Stream connection from=1.2.3.4", slog.LevelDebug},
		{"[INFO] memberlist: Suspect b has failed, no acks received", "memberlist: Suspect b has failed, no acks received", slog.LevelWarn},
		{"[INFO] memberlist: Marking b as failed, suspect timeout reached (0 peer confirmations)", "memberlist: Marking b as failed, suspect timeout reached (0 peer confirmations)", slog.LevelWarn},
		{"[INFO] memberlist: joined", "memberlist: joined", slog.LevelInfo},
		{"[WARN] memberlist: Refuting a suspect message", "memberlist: Refuting a suspect message", slog.LevelWarn},
		{"[ERR] memberlist: Failed to decrypt", "memberlist: Failed to decrypt", slog.LevelError},
		{"no tag", "no tag", slog.LevelInfo},
	} {
		level, msg := memberlistLevel(c.line)
		if level != c.level || msg != c.msg {
			t.Errorf("%q: %v %q, want %v %q", c.line, level, msg, c.level, c.msg)
		}
	}
}
