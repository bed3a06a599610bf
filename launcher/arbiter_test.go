package launcher

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// testArbiterMsg is the arbiter config of node 2 of a job of 3 hosts.
func testArbiterMsg() arbiterConfigMsg {
	cfg := arbiter.Config{Hosts: 3, RankHost: []int{0, 1, 1, 2}, LeaseTerm: 2 * time.Second}
	root := make([]byte, 32)
	m := arbiterMsgFor(2, cfg, []string{"this", "h1", "h2"}, []string{"10.0.0.1:5", "10.0.0.2:6", "[::1]:7"}, root, "/out/1")
	m.spareEnv = []string{"FTRMA_SPARES=2", "FTRMA_JOB=j1"}
	return m
}

// The arbiter config round trip, and what parseArbiterConfig refuses:
// every truncation, a trailing byte, and each field out of range.
func TestArbiterConfigWire(t *testing.T) {
	m := testArbiterMsg()
	good := m.append(nil)
	got, err := parseArbiterConfig(good)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, m)
	}
	c := got.config()
	if c.ID != 2 || c.Hosts != 3 || !slices.Equal(c.Voters, []uint64{1, 2, 3}) || c.LeaseTerm != 2*time.Second ||
		c.Margin != time.Second || c.MaxDrift != arbiter.DefaultMaxDrift || c.Tick != arbiter.DefaultTick {
		t.Errorf("config %+v", c)
	}
	if len(got.peers) != 2 || got.peers[0].id != 1 || got.peers[1].id != 3 || bytes.Equal(got.peers[0].key, got.peers[1].key) {
		t.Errorf("peers %+v: want nodes 1 and 3 with their own keys", got.peers)
	}
	for i := range good {
		if _, err := parseArbiterConfig(good[:i]); err == nil {
			t.Errorf("accepted %d of %d bytes", i, len(good))
		}
	}
	if _, err := parseArbiterConfig(append(slices.Clone(good), 0)); err == nil {
		t.Error("accepted a trailing byte")
	}
	for _, c := range []struct {
		name   string
		change func(m *arbiterConfigMsg)
	}{
		{"node 0", func(m *arbiterConfigMsg) { m.node = 0 }},
		{"node past the hosts", func(m *arbiterConfigMsg) { m.node = 4 }},
		{"one host", func(m *arbiterConfigMsg) {
			m.names = m.names[:1]
			m.node = 1
			m.peers = nil
			m.voters = []uint64{1}
			m.rankHost = nil
		}},
		{"a peer repeated", func(m *arbiterConfigMsg) { m.peers[1].id = 1 }},
		{"this node as a peer", func(m *arbiterConfigMsg) { m.peers[1].id = 2 }},
		{"a peer outside the job", func(m *arbiterConfigMsg) { m.peers[1].id = 4 }},
		{"a peer missing", func(m *arbiterConfigMsg) { m.peers = m.peers[:1] }},
		{"a bad address", func(m *arbiterConfigMsg) { m.peers[0].addr = "10.0.0.1" }},
		{"a rank on no host", func(m *arbiterConfigMsg) { m.rankHost[1] = 3 }},
		{"a relative log directory", func(m *arbiterConfigMsg) { m.logDir = "out/1" }},
		{"a drift of 100%", func(m *arbiterConfigMsg) { m.driftPPM = 1e6 }},
		{"a duration past an hour", func(m *arbiterConfigMsg) { m.lease = 2 * time.Hour }},
		{"a voter outside the job", func(m *arbiterConfigMsg) { m.voters = []uint64{1, 2, 9} }},
		{"heartbeat not below the election timeout", func(m *arbiterConfigMsg) { m.heartbeatTicks = m.electionTicks }},
		{"a margin too short for the drift", func(m *arbiterConfigMsg) { m.margin = time.Millisecond }},
		{"a spare variable not FTRMA_", func(m *arbiterConfigMsg) { m.spareEnv[1] = "PATH=/bin" }},
	} {
		bad := testArbiterMsg()
		c.change(&bad)
		if _, err := parseArbiterConfig(bad.append(nil)); !errors.Is(err, jobwire.ErrMalformed) {
			t.Errorf("%s: accepted (%v)", c.name, err)
		}
	}
	// A key of another length does not parse as one.
	bad := testArbiterMsg()
	bad.peers[0].key = bad.peers[0].key[:31]
	if _, err := parseArbiterConfig(bad.append(nil)); err == nil {
		t.Error("accepted a key of 31 bytes")
	}

	for _, a := range []arbiterAddrMsg{{addr: "10.0.0.2:40000"}, {text: "listen: no such address"}} {
		if got, err := parseArbiterAddr(a.append(nil)); err != nil || got != a {
			t.Errorf("addr round trip: %+v, %v; want %+v", got, err, a)
		}
	}
	for _, a := range []arbiterAddrMsg{{}, {addr: "10.0.0.2"}} {
		if _, err := parseArbiterAddr(a.append(nil)); err == nil {
			t.Errorf("parseArbiterAddr accepted %+v", a)
		}
	}
	if _, err := parseArbiterAddr([]byte{0, 0}); err == nil {
		t.Error("parseArbiterAddr accepted 2 bytes")
	}
}

// FuzzParseArbiterConfig: an agent parses its arbiter config from ftrun.
// The parsers never panic, and a config parseArbiterConfig accepts is the
// canonical encoding of what it returns, and passes arbiter.Config's
// checks (arbiter.New accepts it).
func FuzzParseArbiterConfig(f *testing.F) {
	f.Add(testArbiterMsg().append(nil))
	f.Add(arbiterAddrMsg{addr: "1.2.3.4:5"}.append(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		parseArbiterAddr(p)
		m, err := parseArbiterConfig(p)
		if err != nil {
			return
		}
		if again := m.append(nil); !bytes.Equal(again, p) {
			t.Fatalf("%x parsed as %+v, which encodes as %x", p, m, again)
		}
		if _, err := arbiter.New(m.config(), time.Now()); err != nil {
			t.Fatalf("accepted %+v, which arbiter.New refuses: %v", m, err)
		}
	})
}

// Pair keys: one per pair, the same both ways, none like another.
func TestArbiterPairKeys(t *testing.T) {
	root := make([]byte, 32)
	rand.Read(root)
	seen := map[string]string{}
	for a := uint64(1); a <= 5; a++ {
		for b := a + 1; b <= 5; b++ {
			k := arbiterPairKey(root, a, b)
			if !bytes.Equal(k, arbiterPairKey(root, b, a)) {
				t.Errorf("pair %d-%d: the key depends on the order", a, b)
			}
			if other, ok := seen[string(k)]; ok {
				t.Errorf("pairs %d-%d and %s share a key", a, b, other)
			}
			seen[string(k)] = fmt.Sprintf("%d-%d", a, b)
		}
	}
	m := arbiterMsgFor(3, arbiter.Config{Hosts: 4}, []string{"a", "b", "c", "d"}, []string{"x:1", "x:2", "x:3", "x:4"}, root, "")
	for _, p := range m.peers {
		if !bytes.Equal(p.key, arbiterPairKey(root, 3, p.id)) {
			t.Errorf("node 3's key toward node %d is not their pair's", p.id)
		}
	}
}

// meshDial connects to the mesh at ln as node claim with key, and sends
// msg if it gets in.
func meshDial(t *testing.T, ln net.Listener, claim uint64, key []byte, msg arbiter.Message) error {
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	c.SetDeadline(deadline)
	jobwire.WriteFrame(c, msgArbiterLabel, binary.BigEndian.AppendUint32(nil, uint32(claim)))
	tc, err := seclink.Client(c, key, deadline)
	if err != nil {
		return err
	}
	b, _ := msg.AppendBinary(nil)
	if err := jobwire.WriteFrame(tc, msgArbiterMsg, b); err != nil {
		return err
	}
	// The server's first bytes (a ping, or a close) tell the
	// handshake was accepted.
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = jobwire.ReadFrame(tc, maxArbiterFrame)
	return err
}

// testMesh starts node 2's mesh of a 3-node arbiter with a fresh root key,
// expecting node 1 (the lower dials); the test's connections send no
// pings.
func testMesh(t *testing.T) (root []byte, ln net.Listener, mesh *arbMesh, logs *logBuffer) {
	root = make([]byte, 32)
	rand.Read(root)
	ln, err := listenArbiter("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := arbiter.Config{Hosts: 3, Tick: 10 * time.Millisecond}
	m := arbiterMsgFor(2, cfg, []string{"a", "b", "c"}, []string{"127.0.0.1:1", ln.Addr().String(), "127.0.0.1:1"}, root, "")
	logs = new(logBuffer)
	tm := meshTimingFor(cfg)
	tm.idle = time.Minute
	mesh = startMesh(ln, 2, m.peers[:1], tm, logs.logger())
	t.Cleanup(func() { mesh.Close() })
	return root, ln, mesh, logs
}

// A node proves on the mesh the id it claims: node 2's mesh refuses a
// dialler that claims node 1 but holds another pair's key (1-3, or 2-3: the
// keys node 3 has), and one that claims a higher node (the lower dials);
// the one that holds the 1-2 key gets in, and even then a message it sends
// in another node's name is dropped.
func TestArbiterMeshRefusesOtherKeys(t *testing.T) {
	root, ln, mesh, logs := testMesh(t)

	ask := func(from, to uint64) arbiter.Message {
		return arbiter.Message{From: from, To: to, Kind: arbiter.KindLeaseAsk, Seq: 7}
	}
	for _, c := range []struct {
		name  string
		claim uint64
		key   []byte
	}{
		{"claims node 1 with the 1-3 key", 1, arbiterPairKey(root, 1, 3)},
		{"claims node 1 with the 2-3 key", 1, arbiterPairKey(root, 2, 3)},
		{"claims node 3 with the 2-3 key", 3, arbiterPairKey(root, 2, 3)},
	} {
		if err := meshDial(t, ln, c.claim, c.key, ask(c.claim, 2)); err == nil {
			t.Errorf("%s: got in", c.name)
		}
	}
	// The server counts a refusal once its side of the handshake has
	// failed, which may come after the client's side has.
	for deadline := time.Now().Add(10 * time.Second); mesh.refused.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := mesh.refused.Load(); n != 3 {
		t.Errorf("%d connections refused, want 3; log:\n%s", n, logs)
	}
	select {
	case msg := <-mesh.recv:
		t.Fatalf("a refused connection delivered %v", msg)
	default:
	}
	// Node 1's key: in. A message in node 3's name is dropped; its own
	// arrives.
	if err := meshDial(t, ln, 1, arbiterPairKey(root, 1, 2), ask(3, 2)); err != nil {
		t.Fatalf("node 1 with its key: %v", err)
	}
	if err := meshDial(t, ln, 1, arbiterPairKey(root, 1, 2), ask(1, 2)); err != nil {
		t.Fatalf("node 1 with its key: %v", err)
	}
	select {
	case msg := <-mesh.recv:
		if msg.From != 1 || msg.To != 2 || msg.Kind != arbiter.KindLeaseAsk {
			t.Errorf("delivered %v, want node 1's ask", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node 1's message was not delivered")
	}
	select {
	case msg := <-mesh.recv:
		t.Errorf("delivered %v too", msg)
	default:
	}
}

// testArbiterConfig is a fast arbiter for the in-process tests: a 20 ms
// tick, so a 200 ms election timeout, a 400 ms lease term and a 200 ms
// margin; two ranks per host.
func testArbiterConfig(hosts int) arbiter.Config {
	cfg := arbiter.Config{Hosts: hosts, Tick: 20 * time.Millisecond, LeaseTerm: 400 * time.Millisecond}
	for h := range hosts {
		cfg.RankHost = append(cfg.RankHost, h, h)
	}
	return cfg
}

// arbTestJob is n drivers on loopback TLS links, with the real clock.
type arbTestJob struct {
	t       *testing.T
	cfg     arbiter.Config
	drivers []*arbDriver
	logs    []*logBuffer
	start   time.Time
	closed  []bool
}

func startArbTestJob(t *testing.T, n int) *arbTestJob {
	t.Helper()
	root := make([]byte, 32)
	rand.Read(root)
	j := &arbTestJob{t: t, cfg: testArbiterConfig(n).WithDefaults(), closed: make([]bool, n)}
	j.cfg.Voters = arbiter.DefaultVoters(n)
	var lns []net.Listener
	var names, addrs []string
	for i := range n {
		ln, err := listenArbiter("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		names = append(names, fmt.Sprintf("host%d", i))
		addrs = append(addrs, ln.Addr().String())
	}
	j.start = time.Now()
	for i := range n {
		// Through the wire, as an agent gets it.
		m, err := parseArbiterConfig(arbiterMsgFor(uint64(i+1), j.cfg, names, addrs, root, "").append(nil))
		if err != nil {
			t.Fatal(err)
		}
		logs := new(logBuffer)
		logger := arbiterLogger(logs.logf, slog.LevelInfo, nil)
		mesh := startMesh(lns[i], m.node, m.peers, meshTimingFor(m.config()), logger)
		d, err := startArbDriver(m.config(), mesh, names, logger, nil)
		if err != nil {
			t.Fatal(err)
		}
		j.drivers = append(j.drivers, d)
		j.logs = append(j.logs, logs)
	}
	t.Cleanup(func() {
		for i, d := range j.drivers {
			if !j.closed[i] {
				d.close()
			}
		}
		if t.Failed() {
			for i, l := range j.logs {
				t.Logf("node %d's log:\n%s", i+1, l)
			}
		}
	})
	return j
}

// live returns the indexes of the drivers not closed.
func (j *arbTestJob) live() []int {
	var l []int
	for i := range j.drivers {
		if !j.closed[i] {
			l = append(l, i)
		}
	}
	return l
}

// wait waits until cond holds of every driver of nodes, failing the test
// after a generous deadline (no timing is asserted).
func (j *arbTestJob) wait(what string, nodes []int, cond func(*arbStats) bool) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, i := range nodes {
		if !j.drivers[i].waitFor(ctx, cond) {
			j.t.Fatalf("node %d: %s: not within 60 s; its view: %+v", i+1, what, j.drivers[i].stats())
		}
	}
}

// agreedLeader waits until the drivers of nodes know the same leader, in
// the same term, other than not, and every one of them acts; it returns
// the leader.
func (j *arbTestJob) agreedLeader(nodes []int, not uint64) uint64 {
	j.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s0 := j.drivers[nodes[0]].stats()
		agree := s0.leader != 0 && s0.leader != not
		for _, i := range nodes {
			s := j.drivers[i].stats()
			agree = agree && s.leader == s0.leader && s.term == s0.term && s.acting
		}
		if agree {
			return s0.leader
		}
		if time.Now().After(deadline) {
			for _, i := range nodes {
				j.t.Logf("node %d: %+v", i+1, j.drivers[i].stats())
			}
			j.t.Fatalf("nodes %v agree on no leader (other than %d) within 60 s", plus1(nodes), not)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func plus1(is []int) []int {
	out := make([]int, len(is))
	for k, i := range is {
		out[k] = i + 1
	}
	return out
}

// checkVerdicts fails the test if a driver of nodes declared a host other
// than want failed, or (with want -1) any host.
func (j *arbTestJob) checkVerdicts(nodes []int, want int) {
	j.t.Helper()
	for _, i := range nodes {
		for _, v := range j.drivers[i].stats().hosts {
			if v.host != want {
				j.t.Errorf("node %d: host %d declared failed (%v), want only host %d", i+1, v.host, v.reason, want)
			}
		}
	}
}

// 3 and 5 nodes over real loopback TLS links elect a leader (node 1, which
// campaigns at start, unless it lost the race); when the leader's driver is
// closed the others elect another and declare the old leader's host
// failed. Times are logged, not asserted.
func TestArbiterTakeover(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			j := startArbTestJob(t, n)
			all := j.live()
			lead := j.agreedLeader(all, 0)
			var elected time.Duration
			for _, i := range all {
				elected = max(elected, j.drivers[i].stats().leaderAt.Sub(j.start))
			}
			j.checkVerdicts(all, -1)

			gone := int(lead - 1)
			cut := time.Now()
			j.drivers[gone].close()
			j.closed[gone] = true
			rest := j.live()
			next := j.agreedLeader(rest, lead)
			took := time.Since(cut)
			j.wait(fmt.Sprintf("host %d (the old leader's) declared failed", gone), rest, func(s *arbStats) bool { return s.hostFailed(gone) })
			var verdict time.Duration
			for _, i := range rest {
				for _, v := range j.drivers[i].stats().hosts {
					verdict = max(verdict, v.at.Sub(cut))
				}
			}
			j.checkVerdicts(rest, gone)
			// The closed links told every other node that the leader's
			// process ended (arbMesh.gone, Node.LeaderGone): each logs it.
			lapsed := 0
			for _, i := range rest {
				if !strings.Contains(j.logs[i].String(), fmt.Sprintf("arbiter: the link to leader node %d closed", lead)) {
					t.Errorf("node %d does not say its link to the leader closed", i+1)
				}
				if !j.drivers[i].stats().stopped.IsZero() {
					lapsed++
				}
			}
			t.Logf("%d of %d nodes went without a lease during the take-over", lapsed, len(rest))
			bound := arbiter.VerdictBound(j.cfg)
			t.Logf("%d nodes: node %d led %v after the start; after its driver closed, node %d took over within %v and every other node applied host %d's failure after %v (VerdictBound %v, ET %v, T %v)",
				n, lead, elected.Round(time.Millisecond), next, took.Round(time.Millisecond), gone, verdict.Round(time.Millisecond), bound, j.cfg.ElectionTimeout(), j.cfg.LeaseTerm)
		})
	}
}

// Isolating one node that does not lead (all its links dropped, none
// made): the others declare its host failed (host silent), only after its
// lease ended, and it stops acting. Times are logged, not asserted.
func TestArbiterIsolation(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			j := startArbTestJob(t, n)
			all := j.live()
			lead := j.agreedLeader(all, 0)
			x := n - 1 // the last node: never the first leader
			if uint64(x+1) == lead {
				x = n - 2
			}
			cut := time.Now()
			j.drivers[x].mesh.isolate(true)
			var others []int
			for _, i := range all {
				if i != x {
					others = append(others, i)
				}
			}
			j.wait(fmt.Sprintf("host %d declared failed", x), others, func(s *arbStats) bool { return s.hostFailed(x) })
			j.wait("stopped acting", []int{x}, func(s *arbStats) bool { return !s.acting })
			// No verdict while the host may act: the cut node's lease,
			// by its own clock (this process's), ended before any other
			// node applied the verdict.
			xs := j.drivers[x].stats()
			var verdict time.Duration
			for _, i := range others {
				for _, v := range j.drivers[i].stats().hosts {
					if v.host != x {
						continue
					}
					verdict = max(verdict, v.at.Sub(cut))
					if !v.at.After(xs.leaseEnd) {
						t.Errorf("node %d applied host %d's failure at %v, before its lease ended at %v", i+1, x, v.at.Sub(cut), xs.leaseEnd.Sub(cut))
					}
					if v.reason != arbiter.ReasonHostSilent {
						t.Errorf("node %d: host %d failed for %v, want %v", i+1, x, v.reason, arbiter.ReasonHostSilent)
					}
				}
			}
			j.checkVerdicts(others, x)
			if hs := xs.hosts; len(hs) != 0 {
				t.Errorf("the cut node %d applied verdicts: %+v", x+1, hs)
			}
			t.Logf("%d nodes: node %d cut off; it stopped acting %v after the cut (its lease ended at %v); every other node applied its host's failure within %v (VerdictBound %v)",
				n, x+1, xs.stopped.Sub(cut).Round(time.Millisecond), xs.leaseEnd.Sub(cut).Round(time.Millisecond), verdict.Round(time.Millisecond), arbiter.VerdictBound(j.cfg))
		})
	}
}

// Node logs say who leads, in the words the brief's measurement greps.
func TestArbiterLogLines(t *testing.T) {
	j := startArbTestJob(t, 3)
	lead := j.agreedLeader(j.live(), 0)
	want := fmt.Sprintf("arbiter: node %d leads (term ", lead)
	for i, l := range j.logs {
		if !strings.Contains(l.String(), want) {
			t.Errorf("node %d's log lacks %q:\n%s", i+1, want, l)
		}
	}
	s := j.drivers[0].summary(j.start, []rankAt{{rank: 3, at: time.Second}})
	for _, w := range []string{fmt.Sprintf("leader %d (term ", lead), "hosts failed: none", "ranks failed: none", "ftrun's verdicts: rank 3 at 1.000s"} {
		if !strings.Contains(s, w) {
			t.Errorf("summary %q lacks %q", s, w)
		}
	}
}

// A suspicion reported on any node reaches the leader, whose probe goes to
// the node of the suspect's host over the mesh (msgArbiterProbe); that
// node's prober answers, and the answer comes back (msgArbiterProbeAnswer):
// "alive" drops the suspicion, "not alive" (the prober has killed and
// reaped the rank) makes the rank failed, unresponsive, at every node, and
// no host is declared. Nodes other than the rank's host are never asked.
func TestArbiterProbeGoesToTheRanksHost(t *testing.T) {
	j := startArbTestJob(t, 3)
	all := j.live()
	lead := int(j.agreedLeader(all, 0) - 1)
	host := (lead + 1) % 3 // not the leader's: its node is asked over the mesh
	alive, dead := ftrma.Rank(2*host), ftrma.Rank(2*host+1)
	var mu sync.Mutex
	asked := map[int][]ftrma.Rank{} // node index → ranks it was asked about
	for i, d := range j.drivers {
		d.setProbe(func(r ftrma.Rank, _ time.Duration) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			asked[i] = append(asked[i], r)
			return r == alive, true
		})
	}
	// The suspicions come in at a node that does not lead.
	from := (lead + 2) % 3
	j.drivers[from].reportSuspect(alive, 0)
	j.drivers[from].reportSuspect(dead, 0)
	j.wait(fmt.Sprintf("rank %d failed", dead), all, func(s *arbStats) bool {
		return slices.ContainsFunc(s.ranks, func(v arbVerdict) bool { return v.rank == dead })
	})
	for _, i := range all {
		st := j.drivers[i].stats()
		for _, v := range st.ranks {
			if v.rank != dead || v.reason != arbiter.ReasonUnresponsive {
				t.Errorf("node %d: rank %d failed (%v), want only rank %d, unresponsive", i+1, v.rank, v.reason, dead)
			}
		}
		if len(st.hosts) > 0 {
			t.Errorf("node %d: hosts declared: %+v", i+1, st.hosts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, rs := range asked {
		if i != host {
			t.Errorf("node %d (not the ranks' host) was asked about ranks %v", i+1, rs)
		}
	}
	if !slices.Contains(asked[host], alive) || !slices.Contains(asked[host], dead) {
		t.Errorf("node %d was asked about ranks %v, want %d and %d", host+1, asked[host], alive, dead)
	}
}

// A probe answer from a node that is not the rank's host is ignored: with
// no prober on the host, the leader condemns the host after half a term
// and declares it once its lease has run out, so the rank fails with its
// host, never as unresponsive on another node's word.
func TestArbiterProbeAnswerOnlyFromTheHost(t *testing.T) {
	j := startArbTestJob(t, 3)
	all := j.live()
	lead := int(j.agreedLeader(all, 0) - 1)
	host := (lead + 1) % 3
	other := (lead + 2) % 3
	r := ftrma.Rank(2*host + 1)
	d := j.drivers[lead]
	d.reportSuspect(r, 0)
	d.input(func(time.Time) {
		for _, from := range []int{lead, other} {
			d.probeFrame(meshProbe{from: uint64(from + 1), typ: msgArbiterProbeAnswer, rank: r, state: probeNotAlive})
		}
	})
	j.wait(fmt.Sprintf("host %d failed", host), []int{lead, other}, func(s *arbStats) bool { return s.hostFailed(host) })
	for _, v := range d.stats().ranks {
		if v.reason == arbiter.ReasonUnresponsive {
			t.Errorf("rank %d failed as unresponsive on another node's word", v.rank)
		}
	}
}

// Silent connections, more than the mesh runs handshakes at once, and a
// thousand junk ones do not keep a node out of another's mesh: the oldest
// silent handshake is cut off (seclink.Gate), and the junk is logged once
// per source a second.
func TestArbiterMeshSilentAndJunkConnections(t *testing.T) {
	root, ln, mesh, logs := testMesh(t)
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range maxHandshakes + 8 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	for range 1000 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			continue
		}
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.Close()
	}
	if err := meshDial(t, ln, 1, arbiterPairKey(root, 1, 2), arbiter.Message{From: 1, To: 2, Kind: arbiter.KindLeaseAsk, Seq: 7}); err != nil {
		t.Fatalf("node 1 behind %d silent and 1,000 junk connections: %v", len(silent), err)
	}
	select {
	case msg := <-mesh.recv:
		if msg.From != 1 {
			t.Fatalf("got %v", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("node 1's message never arrived; log:\n%s", logs)
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 20 {
		t.Errorf("%d log lines for the junk connections of one source:\n%s", lines, logs)
	}
}
