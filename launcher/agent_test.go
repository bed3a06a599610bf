package launcher

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/transport/verbs"
)

const testAgentSecret = "9720cf7780e4b5146ec3379c25c35b4431ffe4b3d29965fbe4c0a804442a201c" // ftrun agent --gen-secret

func TestParseHosts(t *testing.T) {
	for in, want := range map[string][]HostSpec{
		"local":                          {{}},
		"local:3":                        {{N: 3}},
		"h1":                             {{Addr: "h1:7770"}},
		"h1:9000":                        {{Addr: "h1:9000"}},
		"local:2,127.0.0.1:9000:2":       {{N: 2}, {Addr: "127.0.0.1:9000", N: 2}},
		"a,b:1234,c:7770:5":              {{Addr: "a:7770"}, {Addr: "b:1234"}, {Addr: "c:7770", N: 5}},
		"[::1]:7000:2,[fe80::1],local:1": {{Addr: "[::1]:7000", N: 2}, {Addr: "[fe80::1]:7770"}, {N: 1}},
	} {
		got, err := ParseHosts(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseHosts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"":                 "empty host",
		"a,,b":             "empty host",
		":7770":            "empty host",
		"[]:7770":          "empty host",
		"a:port":           "port",
		"a:0":              "port",
		"a:70000":          "port",
		"a:7770:0":         "rank count",
		"a:7770:x":         "rank count",
		"a:1:2:3":          "HOST[:PORT[:N]]",
		"local:0":          "rank count",
		"local:1:2":        "want local",
		"local,local:2":    "twice",
		"[::1":             "]",
		"[::1]7770":        "[ADDRESS]:PORT",
		"local:2,h:7770:x": "rank count",
	} {
		if _, err := ParseHosts(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseHosts(%q): %v, want an error about %q", in, err, msg)
		}
	}
}

func TestAssignRanks(t *testing.T) {
	h := func(addr string, n int) HostSpec { return HostSpec{Addr: addr, N: n} }
	b := func(addr string, first, n int) hostBlock {
		return hostBlock{addr: addr, name: addr, ranks: rankRange(first, n)}
	}
	for _, c := range []struct {
		hosts []HostSpec
		n     int
		want  []hostBlock
	}{
		{[]HostSpec{h("", 2), h("a:1", 2)}, 4, []hostBlock{b("", 0, 2), b("a:1", 2, 2)}},
		{[]HostSpec{h("a:1", 0), h("b:1", 0), h("c:1", 0)}, 8, []hostBlock{b("a:1", 0, 3), b("b:1", 3, 3), b("c:1", 6, 2)}},
		{[]HostSpec{h("a:1", 5), h("b:1", 0), h("c:1", 0)}, 8, []hostBlock{b("a:1", 0, 5), b("b:1", 5, 2), b("c:1", 7, 1)}},
		{[]HostSpec{h("", 0), h("b:1", 0), h("c:1", 0)}, 2, []hostBlock{b("", 0, 1), b("b:1", 1, 1)}}, // c gets none
		{[]HostSpec{h("a:1", 3), h("b:1", 0)}, 3, []hostBlock{b("a:1", 0, 3)}},
	} {
		got, err := assignRanks(c.hosts, c.n)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("assignRanks(%v, %d) = %v, %v; want %v", c.hosts, c.n, got, err, c.want)
		}
	}
	if _, err := assignRanks([]HostSpec{h("", 2), h("a:1", 1)}, 4); err == nil || !strings.Contains(err.Error(), "sum to 3, but -n is 4") {
		t.Errorf("counts below N: %v", err)
	}
	if _, err := assignRanks([]HostSpec{h("", 3), h("a:1", 0)}, 2); err == nil || !strings.Contains(err.Error(), "more than -n 2") {
		t.Errorf("counts above N: %v", err)
	}
}

func TestParseArgsHosts(t *testing.T) {
	o, err := ParseArgs([]string{"-n", "4", "--hosts", "local:2,10.0.0.2:7770:2", "prog"})
	if err != nil || !reflect.DeepEqual(o.Hosts, []HostSpec{{N: 2}, {Addr: "10.0.0.2:7770", N: 2}}) {
		t.Fatalf("--hosts: %+v, %v", o, err)
	}
	for _, c := range []struct{ args, err string }{
		{"-n 4 --hosts local:2,h:7770:1 prog", "sum to 3, but -n is 4"},
		{"-n 4 --hosts local:3,h:7770:3 prog", "sum to 6, but -n is 4"},
		{"-n 4 --hosts local,,h prog", "empty host"},
		{"-n 4 --hosts local:2,h:7770:2 --transport shm prog", "cannot share memory"},
	} {
		if _, err := ParseArgs(strings.Fields(c.args)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseArgs(%s): %v, want an error with %q", c.args, err, c.err)
		}
	}
	// On this host alone shm stays allowed, and auto means shm.
	if _, err := ParseArgs([]string{"-n", "2", "--hosts", "local", "--transport", "shm", "prog"}); err != nil {
		t.Errorf("--hosts local --transport shm: %v", err)
	}
	var stderr bytes.Buffer
	if code := Main([]string{"-n", "2", "--hosts", "local:1,h:7770:2", "prog"}, new(bytes.Buffer), &stderr); code != ExitUsage {
		t.Errorf("bad --hosts: exit %d, want %d; stderr %q", code, ExitUsage, stderr.String())
	}
}

func TestChooseTransportMultiHost(t *testing.T) {
	defer func(p func(string, int) (verbs.Choice, error)) { probeVerbs = p }(probeVerbs)
	probeVerbs = func(string, int) (verbs.Choice, error) { return verbs.Choice{}, verbs.ErrNoDevice }
	if tr, why, err := chooseTransport("auto", 4, 0, true, "", ""); err != nil || tr != TransportHybrid || !strings.Contains(why, "several hosts") || !strings.Contains(why, "no usable RDMA device") {
		t.Errorf("auto over hosts without RDMA: %q, %q, %v", tr, why, err)
	}
	probeVerbs = func(string, int) (verbs.Choice, error) {
		return verbs.Choice{Device: "mlx5_0", Why: "mlx5_0 port 1"}, nil
	}
	if tr, why, err := chooseTransport("auto", 4, 0, true, "", ""); err != nil || tr != TransportVerbsHybrid || !strings.Contains(why, "mlx5_0") || !strings.Contains(why, "shared memory") {
		t.Errorf("auto over hosts with RDMA: %q, %q, %v", tr, why, err)
	}
	if tr, why, err := chooseTransport("auto", 4, 1, true, "", ""); err != nil || tr != TransportVerbs || !strings.Contains(why, "spares") {
		t.Errorf("auto over hosts with RDMA and a spare: %q, %q, %v", tr, why, err)
	}
	if !verbs.Built {
		// Asked for by name, verbs needs a build with them (TestResolveTransport).
	} else if tr, why, err := chooseTransport("verbs", 4, 0, true, "", ""); err != nil || tr != TransportVerbs || why != "as asked, on mlx5_0 port 1" {
		t.Errorf("verbs as asked: %q, %q, %v", tr, why, err)
	} else if _, _, err := chooseTransport("shm+verbs", 4, 1, true, "", ""); err == nil || !strings.Contains(err.Error(), "spares") {
		t.Errorf("shm+verbs with a spare: %v, want refused", err)
	}
	if tr, _, err := chooseTransport("tcp", 4, 0, true, "", ""); err != nil || tr != TransportTCP {
		t.Errorf("tcp over hosts: %q, %v", tr, err)
	}
	if _, _, err := chooseTransport("shm", 4, 0, true, "", ""); err == nil {
		t.Error("shm over hosts accepted")
	}
}

func TestAgentWire(t *testing.T) {
	spec := &launchSpec{job: "ab12", prog: "./prog", dir: "/tmp", args: []string{"-x", ""}, size: 5,
		ranks: []launchRank{{rank: 3, env: []string{"FTRMA_RANK=3"}}, {rank: 4, env: nil}}, export: []string{"OMP_NUM_THREADS=2", "E="}, bind: true, stdin: []ftrma.Rank{3}}
	got, err := parseLaunch(spec.append(nil))
	spec.ranks[1].env = []string{} // decoded as empty, not nil
	if err != nil || !reflect.DeepEqual(got, spec) {
		t.Errorf("launch round trip: %+v, %v; want %+v", got, err, spec)
	}
	good := spec.append(nil)
	for i := range good {
		if _, err := parseLaunch(good[:i]); err == nil {
			t.Errorf("parseLaunch accepted %d of %d bytes", i, len(good))
		}
	}
	if _, err := parseLaunch(append(good, 0)); err == nil {
		t.Error("parseLaunch accepted a trailing byte")
	}
	pids := []rankPID{{1, 100, -1}, {2, 200, 3}}
	if got, err := parseStarted(appendStarted(nil, pids)); err != nil || !reflect.DeepEqual(got, pids) {
		t.Errorf("started round trip: %v, %v", got, err)
	}
	o := outputMsg{rank: 7, stream: streamStderr, flags: outStart | outLast, data: []byte("line\n")}
	if got, err := parseOutput(o.append(nil)); err != nil || !reflect.DeepEqual(got, o) {
		t.Errorf("output round trip: %+v, %v", got, err)
	}
	if _, err := parseOutput([]byte{0, 0, 0, 1, 3, 0}); err == nil {
		t.Error("parseOutput accepted stream 3")
	}
	e := exitedMsg{rank: 2, code: -1, signal: syscall.SIGKILL}
	if got, err := parseExited(e.append(nil)); err != nil || got != e {
		t.Errorf("exited round trip: %+v, %v", got, err)
	}
	if r, sig, err := parseSignal(signalPayload(9, syscall.SIGINT)); err != nil || r != 9 || sig != syscall.SIGINT {
		t.Errorf("signal round trip: %d, %v, %v", r, sig, err)
	}
}

// The messages of --pause, --kill-host and --cut round-trip, and their
// parsers refuse anything else: short, long, zero or negative durations,
// addresses that are not canonical IPs.
func TestAgentWireInjections(t *testing.T) {
	pm := pauseMsg{rank: 7, d: 1500 * time.Millisecond}
	good := pm.append(nil)
	if got, err := parsePauseMsg(good); err != nil || got != pm {
		t.Errorf("pause round trip: %+v, %v; want %+v", got, err, pm)
	}
	for i := range good {
		if _, err := parsePauseMsg(good[:i]); err == nil {
			t.Errorf("parsePauseMsg accepted %d of %d bytes", i, len(good))
		}
	}
	for _, bad := range [][]byte{append(good, 0), pauseMsg{rank: 1, d: 0}.append(nil), pauseMsg{rank: 1, d: -time.Second}.append(nil)} {
		if m, err := parsePauseMsg(bad); err == nil {
			t.Errorf("parsePauseMsg(%x) = %+v", bad, m)
		}
	}

	if err := parseKillHostMsg(nil); err != nil {
		t.Errorf("kill-host: %v", err)
	}
	if err := parseKillHostMsg([]byte{0}); err == nil {
		t.Error("kill-host with a payload accepted")
	}

	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	for _, cm := range []cutMsg{
		{after: time.Second, heal: 2 * time.Second, addrs: []netip.Addr{a("198.18.60.254"), a("198.18.60.11")}},
		{after: 0, heal: 0, addrs: []netip.Addr{a("fd00::13")}},
	} {
		good := cm.append(nil)
		if got, err := parseCutMsg(good); err != nil || !reflect.DeepEqual(got, cm) {
			t.Errorf("cut round trip: %+v, %v; want %+v", got, err, cm)
		}
		for i := range good {
			if _, err := parseCutMsg(good[:i]); err == nil {
				t.Errorf("parseCutMsg accepted %d of %d bytes", i, len(good))
			}
		}
		if _, err := parseCutMsg(append(good, 0)); err == nil {
			t.Error("parseCutMsg accepted a trailing byte")
		}
	}
	raw := func(after, heal int64, addrs ...string) []byte {
		b := binary.BigEndian.AppendUint64(nil, uint64(after))
		b = binary.BigEndian.AppendUint64(b, uint64(heal))
		return appendStrings(b, addrs)
	}
	for _, bad := range [][]byte{
		raw(1, 0),                          // no address
		raw(-1, 0, "10.0.0.1"),             // negative
		raw(1, -1, "10.0.0.1"),             // negative heal
		raw(1, 0, "h3"),                    // a name
		raw(1, 0, "010.0.0.1"),             // not canonical
		raw(1, 0, "::ffff:10.0.0.1"),       // not canonical
		raw(1, 0, "fe80::1%eth0"),          // zoned
		raw(1, 0, "10.0.0.1", "10.0.0.1 "), // a space
	} {
		if m, err := parseCutMsg(bad); err == nil {
			t.Errorf("parseCutMsg(%q) = %+v", bad, m)
		}
	}
}

// The rendezvous (internal/jobwire) and the agent protocol share one
// numbering of message types: no number may mean two things.
func TestMessageTypesDistinct(t *testing.T) {
	types := map[string]byte{
		"hello": jobwire.MsgHello, "auth": jobwire.MsgAuth, "proof": jobwire.MsgProof, "publish": jobwire.MsgPublish,
		"addrs": jobwire.MsgAddrs, "error": jobwire.MsgError, "exit": jobwire.MsgExit, "suspect": jobwire.MsgSuspect,
		"leaving": jobwire.MsgLeaving, "connected": jobwire.MsgConnected, "start": jobwire.MsgStart,
		"launch": msgLaunch, "started": msgStarted, "output": msgOutput, "exited": msgExited, "signal": msgSignal,
		"ping": msgPing, "agent hello": msgAgentHello, "link label": msgLinkLabel, "members": msgMembers,
		"spawn rank": msgSpawnRank, "spawned rank": msgSpawnedRank, "lease ask": jobwire.MsgLeaseAsk, "lease grant": jobwire.MsgLeaseGrant,
		"probe": jobwire.MsgProbe, "probe reply": jobwire.MsgProbeReply, "spawn": jobwire.MsgSpawn, "spawned": jobwire.MsgSpawned,
		"admit": jobwire.MsgAdmit, "roster": jobwire.MsgRoster,
		"output files": msgOutputFiles, "output ready": msgOutputReady,
		"pause": msgPause, "kill host": msgKillHost, "cut": msgCut,
		"arbiter listen": msgArbiterListen, "arbiter addr": msgArbiterAddr, "arbiter config": msgArbiterConfig,
		"arbiter label": msgArbiterLabel, "arbiter msg": msgArbiterMsg,
		"arbiter probe": msgArbiterProbe, "arbiter probe answer": msgArbiterProbeAnswer, "host proof": msgHostProof, "host": jobwire.MsgHost,
	}
	seen := make(map[byte]string)
	for name, typ := range types {
		if other, ok := seen[typ]; ok {
			t.Errorf("message type %d is both %s and %s", typ, name, other)
		}
		seen[typ] = name
	}
}

func FuzzParseAgentFrames(f *testing.F) {
	f.Add((&launchSpec{job: "j", prog: "p", args: []string{"a"}, size: 2, ranks: []launchRank{{rank: 1, env: []string{"FTRMA_X=1"}}}}).append(nil))
	f.Add(appendStarted(nil, []rankPID{{0, 1, -1}}))
	f.Add(spawnRankMsg{rank: 3, env: []string{"FTRMA_RANK=3"}}.append(nil))
	f.Add(spawnedRankMsg{rank: 3, pid: 9, text: "x"}.append(nil))
	f.Add(outputFilesMsg{dir: "/out", tag: true}.append(nil))
	f.Add(pauseMsg{rank: 2, d: time.Second}.append(nil))
	f.Add(cutMsg{after: time.Second, heal: 2 * time.Second, addrs: []netip.Addr{netip.MustParseAddr("198.18.60.13"), netip.MustParseAddr("fd00::1")}}.append(nil))
	f.Fuzz(func(t *testing.T, p []byte) {
		// The injection messages parse strictly: what they accept is
		// exactly what their encoders write.
		if m, err := parsePauseMsg(p); err == nil && !bytes.Equal(m.append(nil), p) {
			t.Fatalf("pause %x parsed as %+v, which encodes as %x", p, m, m.append(nil))
		}
		if m, err := parseCutMsg(p); err == nil && !bytes.Equal(m.append(nil), p) {
			t.Fatalf("cut %x parsed as %+v, which encodes as %x", p, m, m.append(nil))
		}
		if parseKillHostMsg(p) == nil && len(p) != 0 {
			t.Fatalf("kill-host accepted %x", p)
		}
		parseSpawnRank(p)
		parseSpawnedRank(p)
		parseLaunch(p)
		parseStarted(p)
		parseOutput(p)
		parseExited(p)
		parseSignal(p)
		parseOutputFiles(p)
	})
}

// logBuffer collects log lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

// logger returns a logger whose lines (every level) l records.
func (l *logBuffer) logger() *slog.Logger { return logfLogger(l.logf, "", slog.LevelDebug) }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startAgent runs an in-process agent on 127.0.0.1 whose ranks run this test
// binary in helper mode; the test's cleanup closes it (killing its ranks).
func startAgent(t *testing.T, mode string, once bool) (*Agent, *logBuffer) {
	t.Helper()
	return startAgentEnv(t, mode, once)
}

// startAgentEnv is startAgent with extra variables for the ranks it starts.
func startAgentEnv(t *testing.T, mode string, once bool, extra ...string) (*Agent, *logBuffer) {
	t.Helper()
	logs := new(logBuffer)
	env := append(os.Environ(), helperEnv+"="+mode, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	env = append(env, extra...)
	a, err := ListenAgent(AgentConfig{Listen: "127.0.0.1:0", Secret: testAgentKey(), Once: once, Env: env, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { a.Serve(); close(served) }()
	t.Cleanup(func() {
		a.Close()
		<-served
	})
	return a, logs
}

// selfPath is this test binary, the helper rank program.
func selfPath(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// An agent that holds one host's secret answers only to a launcher that
// names it that host: the launcher with the master secret reaches it under
// its name and is refused under another (both sides say why), and whoever
// holds the secret of another host cannot pose as this one's launcher.
func TestHostSecretAnswersOnlyForItsHost(t *testing.T) {
	master := testAgentKey()
	host, key, ok, err := parseHostSecret(hostSecretText(master, "127.0.0.1"))
	if !ok || err != nil || host != "127.0.0.1" {
		t.Fatalf("parseHostSecret(hostSecretText): %q, %v, %v", host, ok, err)
	}
	logs := new(logBuffer)
	a, err := ListenAgent(AgentConfig{Listen: "127.0.0.1:0", Host: host, HostKey: key, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { a.Serve(); close(served) }()
	defer func() { a.Close(); <-served }()
	_, port, _ := net.SplitHostPort(a.Addr().String())

	l, err := dialAgent(net.JoinHostPort("127.0.0.1", port), master)
	if err != nil {
		t.Fatalf("the launcher naming the agent's host: %v", err)
	}
	l.close()
	_, err = dialAgent(net.JoinHostPort("localhost", port), master)
	if err == nil || !strings.Contains(err.Error(), "ftrun agent --host-secret localhost") {
		t.Errorf("the launcher naming another host: %v, want a refusal pointing at --host-secret localhost", err)
	}
	if !waitFor(func() bool {
		return strings.Contains(logs.String(), `takes this agent for host "localhost"; it holds host "127.0.0.1"'s secret`)
	}) {
		t.Errorf("the agent does not say why it refused:\n%s", logs)
	}
	// Host h2's secret, in the hands of whoever broke into h2, proves
	// nothing to this host's agent, under any name.
	stolen := hostAgentKey(master, "h2")
	for _, name := range []string{"127.0.0.1", "h2"} {
		c, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		jobwire.WriteFrame(c, msgLinkLabel, []byte(name))
		if tc, err := seclink.Client(c, stolen, time.Now().Add(10*time.Second)); err == nil {
			tc.Close()
			t.Errorf("host h2's secret, naming %s, opened a link to the agent of 127.0.0.1", name)
		}
		c.Close()
	}
	// ftrun needs the master secret, and says so when given a host's.
	t.Setenv(EnvAgentSecret, hostSecretText(master, "h2"))
	if _, err := agentSecretFrom(""); err == nil || !strings.Contains(err.Error(), "master agent secret") {
		t.Errorf("ftrun with a host secret: %v", err)
	}
	// ftrun agent --host-secret prints what the agent reads.
	t.Setenv(EnvAgentSecret, testAgentSecret)
	var out, errs bytes.Buffer
	if code := RunAgent([]string{"--host-secret", "h2"}, &out, &errs); code != ExitOK {
		t.Fatalf("--host-secret: exit %d: %s", code, errs.String())
	}
	if h, k, ok, err := parseHostSecret(out.String()); !ok || err != nil || h != "h2" || !bytes.Equal(k, stolen) {
		t.Errorf("--host-secret h2 printed %q: %q, %v, %v", out.String(), h, ok, err)
	}
	if code := RunAgent([]string{"--host-secret", "H2"}, &out, &errs); code != ExitUsage {
		t.Errorf("--host-secret H2 (not as ftrun names hosts): exit %d", code)
	}
}

// Both sides of the agent connection prove the agent secret: the agent
// refuses a launcher with another secret, and the launcher an agent that
// cannot prove it.
func TestAgentSecretRefused(t *testing.T) {
	a, logs := startAgent(t, "print", false)
	other, _ := seclink.ParseSecret(seclink.GenSecret())
	if _, err := dialAgent(a.Addr().String(), other); err == nil || !strings.Contains(err.Error(), "does not know the key") {
		t.Errorf("launcher with a wrong secret: %v", err)
	}
	if !waitFor(func() bool { return strings.Contains(logs.String(), "does not know the key") }) {
		t.Errorf("agent log does not report the refusal:\n%s", logs)
	}
	key, _ := seclink.ParseSecret(testAgentSecret)
	l, err := dialAgent(a.Addr().String(), key)
	if err != nil {
		t.Fatalf("the right secret: %v", err)
	}
	l.close()

	// A fake agent that does not know the secret.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, label, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame); err == nil {
			seclink.Server(c, hostAgentKey(other, string(label)), time.Now().Add(10*time.Second))
		}
	}()
	if _, err := dialAgent(ln.Addr().String(), key); err == nil || !strings.Contains(err.Error(), "does not know the key") {
		t.Errorf("agent with a wrong secret: %v", err)
	}

	// A passphrase is no agent secret, on either side.
	t.Setenv(EnvAgentSecret, "correct horse battery staple")
	if _, err := Start(&Config{N: 2, Hosts: []HostSpec{{N: 1}, {Addr: "127.0.0.1:1", N: 1}}, Prog: selfPath(t)}); err == nil || !strings.Contains(err.Error(), "--gen-secret") {
		t.Errorf("launcher with a passphrase: %v", err)
	}
	var out, errs bytes.Buffer
	if code := RunAgent([]string{"--listen", "127.0.0.1:0"}, &out, &errs); code != ExitUsage || !strings.Contains(errs.String(), "--gen-secret") {
		t.Errorf("agent with a passphrase: exit %d, stderr %q", code, errs.String())
	}

	// Neither side runs without a secret.
	t.Setenv(EnvAgentSecret, "")
	out.Reset()
	errs.Reset()
	if code := RunAgent([]string{"--listen", "127.0.0.1:0"}, &out, &errs); code != ExitUsage || !strings.Contains(errs.String(), EnvAgentSecret) {
		t.Errorf("agent without secret: exit %d, stderr %q", code, errs.String())
	}
	if _, err := Start(&Config{N: 2, Hosts: []HostSpec{{N: 1}, {Addr: "127.0.0.1:1", N: 1}}, Prog: selfPath(t)}); err == nil || !strings.Contains(err.Error(), EnvAgentSecret) {
		t.Errorf("launcher without secret: %v", err)
	}
}

// When the launcher's connection drops, the agent kills the job's ranks, and
// it goes on serving other jobs; closing the agent kills those ranks too.
func TestAgentKillsRanksOnDrop(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	a, _ := startAgent(t, "pid", false)
	launch := func() (*agentLink, []rankPID) {
		t.Helper()
		l, err := dialAgent(a.Addr().String(), testAgentKey())
		if err != nil {
			t.Fatal(err)
		}
		spec := &launchSpec{job: "t", prog: selfPath(t), size: 3,
			ranks: []launchRank{{rank: 1, env: []string{"FTRMA_RANK=1"}}, {rank: 2, env: []string{"FTRMA_RANK=2"}}}}
		pids, err := l.launch(spec)
		if err != nil {
			l.close()
			t.Fatal(err)
		}
		for _, p := range pids {
			if !alive(p.pid) {
				t.Errorf("rank %d (pid %d) is not running", p.rank, p.pid)
			}
		}
		return l, pids
	}
	gone := func(pids []rankPID, after string) {
		t.Helper()
		for _, p := range pids {
			if !waitFor(func() bool { return !alive(p.pid) }) {
				t.Errorf("rank %d (pid %d) outlived %s", p.rank, p.pid, after)
			}
		}
	}
	l, pids := launch()
	l.close()
	gone(pids, "the launcher's connection")

	_, pids = launch() // still serving
	a.Close()
	gone(pids, "the agent")
}

// A job over two hosts: two ranks here, two through an agent (a separate
// "ftrun agent --once" process); every rank joins and talks to every other,
// the output arrives tagged, and the agent exits after the job.
func TestMultiHostJoin(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "join")
	stdout, stderr, code := runJob(t, "join", []string{"-n", "4", "--hosts", "local:2," + ag.addr + ":2", "--tag-output", "--timeout", "60s"})
	if code != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s\nagent:\n%s", code, stdout, stderr, ag.logs)
	}
	got := sortedLines(stdout)
	if len(got) != 4 {
		t.Fatalf("stdout %q, want 4 lines", got)
	}
	for r, l := range got {
		want := regexp.MustCompile(fmt.Sprintf(`^\[%d\] rank %d of 4 in job [0-9a-f]+: exchanged with 3 peers$`, r, r))
		if !want.MatchString(l) {
			t.Errorf("line %q does not match %v", l, want)
		}
	}
	if !strings.Contains(stderr, "transport shm+tcp (auto: the ranks run on several hosts; RDMA verbs unusable here (") {
		t.Errorf("stderr does not name the transport:\n%s", stderr)
	}
	if code := ag.wait(t); code != 0 {
		t.Errorf("agent --once exited %d after the job; log:\n%s", code, ag.logs)
	}
	if !strings.Contains(ag.logs.String(), "starting ranks [2 3] of 4") {
		t.Errorf("agent log:\n%s", ag.logs)
	}
}

// Ranks on each host get that host's FTRMA_LOCAL_SIZE and FTRMA_HOST_ADDR.
func TestMultiHostEnvironment(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "env")
	stdout, stderr, code := runJob(t, "env", []string{"-n", "4", "--hosts", "local:1," + ag.addr, "--tag-output"})
	if code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for r, local := range []int{1, 3, 3, 3} {
		for _, want := range []string{
			fmt.Sprintf("[%d] %s=%d\n", r, jobwire.EnvRank, r),
			fmt.Sprintf("[%d] %s=%d\n", r, jobwire.EnvLocalSize, local),
			fmt.Sprintf("[%d] %s=127.0.0.1\n", r, jobwire.EnvHostAddr),
			fmt.Sprintf("[%d] %s=127.0.0.1:", r, jobwire.EnvRendezvous),
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	}
	if strings.Contains(stdout, EnvAgentSecret) || strings.Contains(stdout, testAgentSecret) {
		t.Error("a rank saw the agent secret")
	}
}

// A remote rank killed with --kill is reported, counts as failed, and the
// survivors on both hosts get its exit notice; the exit status is that of the
// survivors.
func TestMultiHostKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	t.Setenv(helperEnv, "notice") // for the local ranks and the agent's
	t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	a, _ := startAgent(t, "notice", true)
	out := make(lineChan, 100)
	var errs logBuffer
	j, err := Start(&Config{N: 4, Hosts: []HostSpec{{N: 2}, {Addr: a.Addr().String(), N: 2}}, AgentSecret: testAgentSecret,
		TagOutput: true, Timeout: 2 * helperLife, Prog: selfPath(t), Args: []string{"3"}, Stdout: out, Stderr: &errs})
	if err != nil {
		t.Fatal(err)
	}
	joined := 0
	var lines []string
	for joined < 4 {
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
	j.kill(KillSpec{Rank: 3}) // what the --kill timer does, once every rank is in
	res := j.Wait()
	close(out)
	for l := range out {
		lines = append(lines, l)
	}
	if code := res.ExitCode(); code != ExitOK {
		t.Errorf("exit %d, want 0; result %+v; stderr:\n%s", code, res, errs.String())
	}
	if st := res.Ranks[3]; !st.Killed || st.Signal != syscall.SIGKILL || !st.Failed {
		t.Errorf("rank 3: %+v, want killed by SIGKILL", st)
	}
	for r := range 3 {
		want := fmt.Sprintf("[%d] rank %d got the exit notice of rank 3\n", r, r)
		if !strings.Contains(strings.Join(lines, ""), want) {
			t.Errorf("no %q in %q", want, lines)
		}
		if !res.Ranks[r].OK() {
			t.Errorf("rank %d: %v", r, res.Ranks[r])
		}
	}
	for _, want := range []string{"ftrun: killed rank 3 (--kill 3@0s)\n", "ftrun: rank 3 failed at "} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs.String())
		}
	}
}

// lineChan is a Writer that passes on each write (ftrun writes whole lines).
type lineChan chan string

func (c lineChan) Write(p []byte) (int, error) {
	c <- string(p)
	return len(p), nil
}

// A remote rank declared failed by a rank's detector is killed through its
// agent, and the survivors get its exit notice: under the arbiter its
// leader probes the rank through its agent, which kills it, and the log
// ends it; with --no-arbiter ftrun does both.
func TestMultiHostSuspect(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	for _, c := range []struct {
		name    string
		flags   []string
		declare string
	}{
		// The agent kills the rank that does not answer the probe, and
		// reports its exit (status -1) to the arbiter as the leader
		// proposes its failure: whichever commits first is its end.
		{"arbiter", nil, `ftrun: arbiter: rank 3 (failed: unresponsive|exited: status -1)\n`},
		{"no arbiter", []string{"--no-arbiter"}, `ftrun: rank 3 was declared failed by rank 0's detector at \d+\.\d{3}s: killing it\n`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ag := startAgentDaemon(t, "notice")
			args := append(slices.Clone(c.flags), "-n", "4", "--hosts", "local:2,"+ag.addr+":2", "--tag-output", "--timeout", "60s")
			stdout, stderr, code := runJob(t, "notice", args, "3", "0")
			if code != ExitOK {
				t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s\nagent:\n%s", code, stdout, stderr, ag.logs)
			}
			for r := range 3 {
				if want := fmt.Sprintf("[%d] rank %d got the exit notice of rank 3\n", r, r); !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(c.declare),
				regexp.MustCompile(`ftrun: rank 3 failed at \d+\.\d{3}s: was killed by signal 9 \(killed\)\n`),
			} {
				if !want.MatchString(stderr) {
					t.Errorf("stderr does not match %v:\n%s", want, stderr)
				}
			}
		})
	}
}

// --kill through the command line, the exit status of a remote rank, and
// --timeout over hosts.
func TestMultiHostExitStatus(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	hosts := func(ag *agentDaemon) []string { return []string{"-n", "4", "--hosts", "local:2," + ag.addr + ":2"} }

	ag := startAgentDaemon(t, "sleep")
	_, stderr, code := runJob(t, "sleep", append(hosts(ag), "--kill", "3@200ms", "--timeout", "60s"), "3")
	if code != ExitOK || !strings.Contains(stderr, "ftrun: killed rank 3 (--kill 3@200ms)\n") ||
		!regexp.MustCompile(`ftrun: rank 3 failed at \d+\.\d{3}s: was killed by signal 9`).MatchString(stderr) {
		t.Errorf("--kill 3@200ms: exit %d, stderr:\n%s", code, stderr)
	}

	ag = startAgentDaemon(t, "exit")
	_, stderr, code = runJob(t, "exit", append(hosts(ag), "--timeout", "60s"), "3", "5")
	if code != ExitFailed || !strings.Contains(stderr, "ftrun: rank 3 exited with status 5\n") {
		t.Errorf("remote rank exits 5: exit %d, stderr:\n%s", code, stderr)
	}

	ag = startAgentDaemon(t, "sleep")
	_, stderr, code = runJob(t, "sleep", append(hosts(ag), "--timeout", "300ms"), "2")
	if code != ExitTimeout || !strings.Contains(stderr, "ftrun: timeout (300ms) expired: killing the job\n") {
		t.Errorf("--timeout: exit %d, stderr:\n%s", code, stderr)
	}
}

// -x exports a variable to every rank, on ftrun's host and an agent's
// (started before the variable was set, so its ranks see it through -x
// alone), with ftrun's value or the given one, over the host's own; a
// variable not exported reaches the agent's ranks not at all.
func TestMultiHostExport(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "env")
	t.Setenv("LAUNCHER_X1", "from ftrun")
	t.Setenv("LAUNCHER_X2", "old")
	t.Setenv("LAUNCHER_X3", "not exported")
	stdout, stderr, code := runJob(t, "env", []string{"-n", "4", "--hosts", "local:2," + ag.addr + ":2", "--tag-output",
		"-x", "LAUNCHER_X1", "-x", "LAUNCHER_X2=new=value"}, "LAUNCHER_X1", "LAUNCHER_X2", "LAUNCHER_X3")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for r := range 4 {
		x3 := "not exported"
		if r >= 2 {
			x3 = "-"
		}
		for _, want := range []string{"LAUNCHER_X1=from ftrun", "LAUNCHER_X2=new=value", "LAUNCHER_X3=" + x3} {
			if line := fmt.Sprintf("[%d] rank %d: %s\n", r, r, want); !strings.Contains(stdout, line) {
				t.Errorf("stdout lacks %q:\n%s", line, stdout)
			}
		}
	}
}

// --bind-to core binds the ranks an agent starts too, on its host's CPUs,
// and --report-bindings says where each runs.
func TestMultiHostBind(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	mine := allowedCPUs()
	ag := startAgentDaemon(t, "affinity")
	stdout, stderr, code := runJob(t, "affinity", []string{"-n", "4", "--hosts", "local:2," + ag.addr + ":2", "--oversubscribe",
		"--bind-to", "core", "--report-bindings"})
	if len(mine) < 2 {
		if code != ExitLaunch || !strings.Contains(stderr, "--bind-to core") {
			t.Errorf("two ranks bound on one CPU: exit %d, stderr:\n%s", code, stderr)
		}
		return
	}
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for r := range 4 {
		cpu := mine[r%2]
		if want := fmt.Sprintf("rank %d cpus [%d]\n", r, cpu); !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
		if want := fmt.Sprintf("ftrun: rank %d on ", r); !strings.Contains(stderr, want) || !strings.Contains(stderr, fmt.Sprintf("bound to cpu %d\n", cpu)) {
			t.Errorf("stderr lacks rank %d's binding:\n%s", r, stderr)
		}
	}
	if !strings.Contains(stderr, "ftrun: rank 3 on "+ag.addr+": bound to cpu") {
		t.Errorf("stderr does not name the agent's host for rank 3:\n%s", stderr)
	}
}

// --stdin reaches a rank on an agent's host through the link.
func TestMultiHostStdin(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "stdin")
	const text = "to the far rank\n"
	stdout, stderr, code := runJobIn(t, strings.NewReader(text), "stdin", []string{"-n", "2", "--hosts", "local:1," + ag.addr + ":1", "--stdin", "1"})
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for r, want := range []string{"", text} {
		if line := fmt.Sprintf("rank %d read %q, <nil>\n", r, want); !strings.Contains(stdout, line) {
			t.Errorf("stdout lacks %q:\n%s", line, stdout)
		}
	}
}

// -x refuses what it cannot export: an unset variable, an FTRMA_ one, a
// name that is none.
func TestExportRefused(t *testing.T) {
	os.Unsetenv("LAUNCHER_UNSET")
	for _, c := range []struct{ arg, want string }{
		{"LAUNCHER_UNSET", "not set in ftrun's environment"},
		{"FTRMA_RANK=3", "ftrun sets the FTRMA_ variables"},
		{"1X=2", "not a variable name"},
		{"A-B", "not a variable name"},
		{"=x", "not a variable name"},
	} {
		var stderr bytes.Buffer
		if code := Main([]string{"-n", "1", "-x", c.arg, "prog"}, new(bytes.Buffer), &stderr); code != ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("-x %s: exit %d, stderr %q; want %d and %q", c.arg, code, stderr.String(), ExitUsage, c.want)
		}
	}
	// An agent refuses a launch that would export one all the same.
	for _, kv := range []string{"FTRMA_RANK=3", "NOEQUALS", "1X=y"} {
		spec := &launchSpec{job: "ab12", prog: "p", size: 1, ranks: []launchRank{{rank: 0}}, export: []string{kv}}
		if _, err := checkLaunch(msgLaunch, spec.append(nil), nil); err == nil || !strings.Contains(err.Error(), "exported entry") {
			t.Errorf("an agent's launch exporting %q: %v", kv, err)
		}
	}
	o, err := ParseArgs([]string{"-n", "1", "-x", "A=1", "-x", "B=", "prog"})
	if err != nil || !slices.Equal(o.Export, []string{"A=1", "B="}) {
		t.Errorf("-x A=1 -x B=: %q, %v", o.Export, err)
	}
}

// SIGINT to ftrun reaches the remote ranks through their agent.
func TestMultiHostInterrupt(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd := helperCmd(t, ctx, "hang", []string{"-n", "3", "--hosts", "local:1," + ag.addr + ":2", "--tag-output", "--timeout", "60s"})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := lineReader(stdout)
	waitLines(t, lines, "ready", 3)
	cmd.Process.Signal(syscall.SIGINT)
	got := waitLines(t, lines, "got interrupt", 3)
	for range lines {
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("ftrun: %v, want exit status %d; stderr:\n%s", err, 128+int(syscall.SIGINT), errs.String())
	}
	for r := range 3 {
		if !strings.Contains(strings.Join(got, "\n"), fmt.Sprintf("[%d] rank %d got interrupt", r, r)) {
			t.Errorf("rank %d did not get the interrupt: %q", r, got)
		}
	}
}

// agentDaemon is an "ftrun agent --once" process.
type agentDaemon struct {
	addr    string
	logs    *logBuffer
	cmd     *exec.Cmd
	drained chan struct{} // its stderr ended
	waited  bool
	code    int
}

// startAgentDaemon starts "ftrun agent --once" on 127.0.0.1 with the helper
// mode in its environment (so in its ranks'). The test's cleanup waits for it
// to exit, stopping it with SIGTERM if it has not.
func startAgentDaemon(t *testing.T, mode string) *agentDaemon {
	t.Helper()
	cmd := exec.Command(ftrun(t), "agent", "--once", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"), EnvAgentSecret+"="+testAgentSecret)
	cmd.WaitDelay = 5 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ag := &agentDaemon{logs: new(logBuffer), cmd: cmd, drained: make(chan struct{})}
	lines := lineReader(stderr)
	first := waitLines(t, lines, "listening on ", 1)[0]
	ag.addr = first[strings.Index(first, "listening on ")+len("listening on "):]
	go func() {
		defer close(ag.drained)
		for l := range lines {
			ag.logs.Write([]byte(l + "\n"))
		}
	}()
	t.Cleanup(func() {
		if !ag.waited {
			ag.wait(t)
		}
	})
	return ag
}

// wait waits for the agent to exit by itself (SIGTERM after helperLife) and
// returns its exit status.
func (ag *agentDaemon) wait(t *testing.T) int {
	ag.waited = true
	select {
	case <-ag.drained:
	case <-time.After(helperLife):
		t.Errorf("agent %s did not exit by itself", ag.addr)
		ag.cmd.Process.Signal(syscall.SIGTERM)
		<-ag.drained
	}
	err := ag.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Errorf("agent: %v", err)
		return -1
	}
	return 0
}

// testAgentKey is the key of testAgentSecret.
func testAgentKey() []byte {
	k, err := seclink.ParseSecret(testAgentSecret)
	if err != nil {
		panic(err)
	}
	return k
}

// The agent secret from a file (FTRMA_AGENT_SECRET_FILE): read when only
// its owner may read it; refused, saying why, when others may read or
// write it, or when it is not a regular file.
func TestAgentSecretFilePermissions(t *testing.T) {
	t.Setenv(EnvAgentSecret, "")
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	secret := seclink.GenSecret()
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvAgentSecretFile, path)
	want, _ := seclink.ParseSecret(secret)
	if got, err := agentSecretFrom(""); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("mode 0600: %x, %v", got, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o666} {
		os.Chmod(path, mode)
		if _, err := agentSecretFrom(""); err == nil || !strings.Contains(err.Error(), "readable by its owner alone") {
			t.Errorf("mode %#o: %v, want refused", mode, err)
		}
	}
	t.Setenv(EnvAgentSecretFile, dir)
	if _, err := agentSecretFrom(""); err == nil {
		t.Error("a directory as the secret file: accepted")
	}
}

// Connections that never start a handshake do not shut a launcher out:
// with as many silent connections as the agent holds handshakes, ftrun's
// own connection still gets through at once (the oldest silent one is cut
// off), where it used to be refused until theirs timed out.
func TestAgentSilentConnectionsDoNotShutOut(t *testing.T) {
	a, _ := startAgent(t, "print", false)
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range maxHandshakes + 8 {
		c, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	time.Sleep(100 * time.Millisecond) // the agent has taken them all
	key, _ := seclink.ParseSecret(testAgentSecret)
	l, err := dialAgent(a.Addr().String(), key)
	if err != nil {
		t.Fatalf("a launcher behind %d silent connections: %v", len(silent), err)
	}
	l.close()
}
