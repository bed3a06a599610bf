package launcher

import (
	"cmp"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
)

// agentTimeout bounds connecting to an agent, authenticating, and the agent's
// answer to a launch.
const agentTimeout = 10 * time.Second

// Link liveness: each side of an agent link sends a ping every linkPing and
// counts the link lost after linkTimeout without a frame from the other; the
// launcher then counts the host's ranks as failed, and the agent kills them.
// A cut link, a vanished host or a hung peer is so known within linkTimeout.
// These are the defaults; hostTiming scales them. linkTimeout is the
// chain's HostSilent at the default lease (failure.Chain).
const (
	linkPing    = jobwire.LeaseTerm / 4
	linkTimeout = 2 * jobwire.LeaseTerm
)

// hostTiming is the timing of a job's host layer: the agent links' pings,
// the host group's probes (memberlist) and the ranks' leases. It scales with
// the detector timeout the job asks for: --hb-timeout above the default
// (60 ms) says the cluster is slow (emulated, or overloaded), and the host
// layer stretches by the same factor, so that its verdicts stay slower than
// the ranks' own.
type hostTiming struct {
	scale         float64       // 1 for the defaults
	ping, timeout time.Duration // agent link
	lease         time.Duration // the ranks' lease term (jobwire.LeaseTerm scaled)
}

func timingFor(o *Config) hostTiming {
	// The detector timeout asked for (three periods where only --hb-period
	// is given), over the default one.
	asked := o.detector().WithDefaults().Timeout
	scale := max(1, float64(asked)/float64(failure.DefaultTimeout))
	// On a full host a rank waits its turn for a CPU behind the others
	// (the detector's timeout stretches the same way, failure.RanksPerCPU):
	// a lease of one term would expire under ranks that are merely slow,
	// 256 ranks on 2 CPUs starting up, and stop them.
	tm := scaledTiming(max(scale, float64(o.cpuStretch)))
	if o.arbitrated {
		// Under the replicated arbiter the lease does not stretch with
		// the crowding: a rank renews it five times a term from its
		// host's supervisor, a local channel, and a crowded rank keeps
		// it by renewing in time. A cut-off host's ranks are then
		// declared about a term and a half after the cut however full
		// the hosts are (issue 23's availability bars: the primary's
		// writes resume within 1.5 s at one rank per CPU, 3 s at four).
		// The links and memberlist, which only hint, still stretch.
		tm.lease = scaledTiming(scale).lease
	}
	return tm
}

func scaledTiming(scale float64) hostTiming {
	d := func(x time.Duration) time.Duration { return time.Duration(float64(x) * scale) }
	ch := failure.Chain{Lease: d(jobwire.LeaseTerm)}
	return hostTiming{scale: scale, ping: d(linkPing), timeout: ch.HostSilent(), lease: ch.Lease}
}

// chain is the job's chain of failure bounds as the host layer sees it
// (the ranks' detector timeout is theirs: failure.Chain.Verdict).
func (h hostTiming) chain() failure.Chain { return failure.Chain{Lease: h.lease} }

// leaseWait is how long after revoking a rank's lease ftrun waits before it
// counts the rank as failed (failure.Chain.LeaseWait: 1.5 lease terms).
func (h hostTiming) leaseWait() time.Duration { return h.chain().LeaseWait() }

// agentLink is the launcher's connection to the agent that runs one block of
// a job's ranks on a remote host.
type agentLink struct {
	addr  string // the agent's host:port, as in --hosts; or its host's name
	label string // the name of the link key of an agent ftrun started (boot.go)
	tm    hostTiming
	heard atomic.Int64 // when the last frame from the agent arrived (UnixNano)
	conn  net.Conn
	block hostBlock
	wg    sync.WaitGroup // the reader and writer goroutines, once run

	mu     sync.Mutex // guards the fields below
	queue  [][]byte   // frames for the writer
	wake   chan struct{}
	closed bool   // close was called: a broken connection is no news
	why    string // why fail cut the link, if it did
	// ranks is every rank the agent runs or is starting for the job: the
	// launch's (run), then spares (spawnRank). readLoop accepts their
	// output and exits, and when the link ends reports those that had
	// not exited as lost.
	ranks  map[ftrma.Rank]*linkRank
	spawns map[ftrma.Rank]chan spawnedRankMsg // spares waiting for the agent's answer
	down   bool                               // readLoop ended: the agent is lost, no rank can join
}

// linkRank is what readLoop has seen of one rank of the link.
type linkRank struct {
	exited bool
	ended  [2]bool // ended[stream-1]: the stream ended
}

// Keys of running agents ("ftrun agent --listen", ftrun --hosts). ftrun
// holds the master agent secret (ftrun agent --gen-secret); the agent of a
// host holds that host's secret, derived from the master for the host's
// name as ftrun names it in --hosts (ftrun agent --host-secret HOST):
//
//	host key = HKDF(master, "ftrma agent host " + HOST)
//
// where HOST is the host part of the agent's --hosts address, in lower
// case (hostLabel). ftrun dials the agent, sends HOST in a label frame
// before TLS (as an agent that dials back does), and both sides prove the
// host key in the handshake. So the secret of one host answers only for
// that host: whoever reads it cannot pose as another host's agent to
// ftrun, nor command any other agent. An agent given the master secret
// instead answers for any host name (it logs a warning when it starts).

// hostSecretMagic starts the text of a host secret: "ftrma-host1 HOST HEX".
const hostSecretMagic = "ftrma-host1"

// hostAgentKey is the key of the running agent ftrun names host, from the
// master agent secret.
func hostAgentKey(master []byte, host string) []byte {
	return seclink.DeriveKey(master, "ftrma agent host "+host)
}

// hostLabel is the name ftrun gives the running agent at addr (host:port):
// the host, in lower case.
func hostLabel(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return strings.ToLower(host)
}

// hostSecretText is the host secret of host, as ftrun agent --host-secret
// prints it.
func hostSecretText(master []byte, host string) string {
	return hostSecretMagic + " " + host + " " + hex.EncodeToString(hostAgentKey(master, host))
}

// parseHostSecret reads a host secret (hostSecretText); ok is false if s
// is not one.
func parseHostSecret(s string) (host string, key []byte, ok bool, err error) {
	f := strings.Fields(s)
	if len(f) == 0 || f[0] != hostSecretMagic {
		return "", nil, false, nil
	}
	if len(f) != 3 || f[1] == "" || len(f[1]) > 255 {
		return "", nil, true, errors.New("agent secret: a host secret is \"" + hostSecretMagic + " HOST KEY\" (ftrun agent --host-secret HOST)")
	}
	key, err = hex.DecodeString(f[2])
	if err != nil || len(key) != seclink.KeySize {
		return "", nil, true, errors.New("agent secret: the key of the host secret is not 64 hex digits")
	}
	return f[1], key, true, nil
}

// dialAgent connects to the running agent at addr, names the host whose
// key it expects, and authenticates both ways with a TLS 1.3 handshake
// keyed by that host's key; every later frame is encrypted and
// authenticated.
func dialAgent(addr string, master []byte) (*agentLink, error) {
	c, err := net.DialTimeout("tcp", addr, agentTimeout)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", addr, err)
	}
	deadline := time.Now().Add(agentTimeout)
	c.SetDeadline(deadline)
	host := hostLabel(addr)
	err = jobwire.WriteFrame(c, msgLinkLabel, []byte(host))
	var tc *tls.Conn
	if err == nil {
		tc, err = seclink.Client(c, hostAgentKey(master, host), deadline)
	}
	if err != nil {
		c.Close()
		if errors.Is(err, seclink.ErrUnknownKey) {
			err = fmt.Errorf("%w (the agent must hold the master agent secret or host %s's: ftrun agent --host-secret %s)", err, host, host)
		}
		return nil, fmt.Errorf("agent %s: %w", addr, err)
	}
	return &agentLink{addr: addr, conn: tc, wake: make(chan struct{}, 1)}, nil
}

// agentSecretText returns the text of the agent secret: given, or
// FTRMA_AGENT_SECRET, or the file FTRMA_AGENT_SECRET_FILE names.
func agentSecretText(given string) (string, error) {
	s := cmp.Or(given, os.Getenv(EnvAgentSecret))
	if s == "" {
		if f := os.Getenv(EnvAgentSecretFile); f != "" {
			b, err := readSecretFile(f)
			if err != nil {
				return "", fmt.Errorf("%s: %w", EnvAgentSecretFile, err)
			}
			s = string(b)
		}
	}
	if strings.TrimSpace(s) == "" {
		return "", errAgentSecret
	}
	return s, nil
}

// agentSecretFrom returns the master agent secret, from agentSecretText. A
// secret that is not what "ftrun agent --gen-secret" makes is refused, a
// host secret with a word on what ftrun needs.
func agentSecretFrom(given string) ([]byte, error) {
	s, err := agentSecretText(given)
	if err != nil {
		return nil, err
	}
	if _, _, ok, _ := parseHostSecret(s); ok {
		return nil, errors.New("agent secret: this is one host's secret; ftrun needs the master agent secret (ftrun agent --gen-secret)")
	}
	key, err := seclink.ParseSecret(s)
	if err != nil {
		return nil, fmt.Errorf("agent secret: %w", err)
	}
	return key, nil
}

// readSecretFile reads a secret from the file at path, refusing one that
// others than its owner may read or write (as ssh refuses such a key): the
// secret commands every agent that holds it.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is open to others (mode %#o): the agent secret must be readable by its owner alone (chmod 600 %s)", path, perm, path)
	}
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

// localIP is this host's IP on the connection to the agent: an address the
// agent's host reaches this one at.
func (l *agentLink) localIP() string { return addrIP(l.conn.LocalAddr()) }

// launch asks the agent to start the ranks of spec and waits for its answer.
func (l *agentLink) launch(spec *launchSpec) ([]rankPID, error) {
	l.conn.SetDeadline(time.Now().Add(agentTimeout))
	defer l.conn.SetDeadline(time.Time{})
	if err := jobwire.WriteFrame(l.conn, msgLaunch, spec.append(nil)); err != nil {
		return nil, fmt.Errorf("agent %s: send launch: %w", l.addr, err)
	}
	typ, p, err := jobwire.ReadFrame(l.conn, maxLaunch)
	if err != nil {
		return nil, fmt.Errorf("agent %s: read launch answer: %w", l.addr, err)
	}
	if err := jobwire.ExpectFrom(typ, p, msgStarted, "started", "agent"); err != nil {
		return nil, fmt.Errorf("agent %s: %w", l.addr, err)
	}
	pids, err := parseStarted(p)
	if err == nil && len(pids) != len(spec.ranks) {
		err = fmt.Errorf("%w: %d ranks started, %d asked for", jobwire.ErrMalformed, len(pids), len(spec.ranks))
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", l.addr, err)
	}
	return pids, nil
}

// run starts the goroutines that carry the job's traffic with the agent: the
// ranks' output, exits and signals. The ranks of the link are those of its
// block, and the spares spawnRank adds.
func (l *agentLink) run(j *Job) {
	l.mu.Lock()
	if l.ranks == nil {
		l.ranks = make(map[ftrma.Rank]*linkRank)
		l.spawns = make(map[ftrma.Rank]chan spawnedRankMsg)
	}
	for _, r := range l.block.ranks {
		l.ranks[r] = &linkRank{}
	}
	l.mu.Unlock()
	l.wg.Add(2)
	go l.writeLoop()
	go l.readLoop(j)
}

// signal asks the agent to send sig to rank r's process group. It does not
// block.
func (l *agentLink) signal(r ftrma.Rank, sig syscall.Signal) {
	l.send(msgSignal, signalPayload(r, sig))
}

// backlog is the number of frames queued for the agent.
func (l *agentLink) backlog() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// send queues a frame for the agent. It does not block.
func (l *agentLink) send(typ byte, payload []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.queue = append(l.queue, jobwire.AppendFrame(nil, typ, payload))
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// checkCut asks the agent, before the launch, whether it can add the
// blackhole routes of --cut, and waits for its answer.
func (l *agentLink) checkCut() error {
	l.conn.SetDeadline(time.Now().Add(agentTimeout))
	defer l.conn.SetDeadline(time.Time{})
	if err := jobwire.WriteFrame(l.conn, msgCut, nil); err != nil {
		return fmt.Errorf("agent %s: %w", l.addr, err)
	}
	typ, p, err := jobwire.ReadFrame(l.conn, jobwire.MaxSmallFrame)
	if err == nil {
		err = jobwire.ExpectFrom(typ, p, msgCut, "cut", "agent")
	}
	if err == nil && len(p) != 0 {
		err = fmt.Errorf("%w: cut answer of %d bytes", jobwire.ErrMalformed, len(p))
	}
	if err != nil {
		return fmt.Errorf("agent %s: %w", l.addr, err)
	}
	return nil
}

// alive reports whether the link runs: the agent was not found lost (its
// link broken or silent, or its host declared dead by the host group).
func (l *agentLink) alive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.down && !l.closed && l.why == ""
}

// spawnRank has the agent start spare rank r with env (FTRMA_ variables)
// and waits for its answer, at most d. The caller has made ready what
// readLoop delivers for a rank of the link (Job.ranks[r]'s exit channel
// and two output streams), before the call. When spawnRank fails the
// rank is no longer the link's and nothing more is delivered for it,
// unless the link was lost meanwhile: then readLoop reported it lost, as
// every rank of the link. Either way the rank does not run.
func (l *agentLink) spawnRank(r ftrma.Rank, env []string, d time.Duration) (int, error) {
	ch := make(chan spawnedRankMsg, 1)
	l.mu.Lock()
	if l.down || l.closed || l.why != "" {
		l.mu.Unlock()
		return 0, fmt.Errorf("the agent of host %s is lost", l.addr)
	}
	if l.ranks[r] != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("rank %d was started on host %s before", r, l.addr)
	}
	l.ranks[r] = &linkRank{}
	l.spawns[r] = ch
	l.queue = append(l.queue, jobwire.AppendFrame(nil, msgSpawnRank, spawnRankMsg{rank: r, env: env}.append(nil)))
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	var err error
	select {
	case m, ok := <-ch:
		switch {
		case !ok:
			return 0, fmt.Errorf("the agent of host %s was lost while it started spare rank %d", l.addr, r)
		case m.text != "":
			err = fmt.Errorf("agent %s: %s", l.addr, m.text)
		default:
			return m.pid, nil
		}
	case <-timer.C:
		err = fmt.Errorf("the agent of host %s did not start spare rank %d within %v", l.addr, r, d)
		l.signal(r, syscall.SIGKILL) // should it start after all
	}
	l.mu.Lock()
	if !l.down {
		delete(l.ranks, r)
	}
	delete(l.spawns, r)
	l.mu.Unlock()
	return 0, err
}

// close closes the connection, which makes the agent kill whatever of the
// job still runs there, and waits for the goroutines of run.
func (l *agentLink) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.conn.Close()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	l.wg.Wait()
}

// hostDead acts on the host group's verdict that the agent's host is
// dead: unless the link itself heard from the agent within two pings (a
// false verdict: the agent runs and reaches ftrun), it cuts the link.
func (l *agentLink) hostDead() {
	if since := time.Since(time.Unix(0, l.heard.Load())); since < 2*l.tm.ping {
		return
	}
	l.fail(fmt.Sprintf("memberlist declared host %s dead", l.addr))
}

// fail cuts the link because the agent's host is known lost (why): the
// agent, should it still run, kills its ranks when its link closes, and
// the launcher counts them as failed, with why.
func (l *agentLink) fail(why string) {
	l.mu.Lock()
	if l.why == "" {
		l.why = why
	}
	l.mu.Unlock()
	l.conn.Close()
}

func (l *agentLink) writeLoop() {
	defer l.wg.Done()
	tick := time.NewTicker(l.tm.ping)
	defer tick.Stop()
	ping := jobwire.AppendFrame(nil, msgPing, nil)
	for {
		var q [][]byte
		select {
		case <-l.wake:
			l.mu.Lock()
			q = l.queue
			l.queue = nil
			l.mu.Unlock()
		case <-tick.C:
			q = [][]byte{ping}
		}
		l.mu.Lock()
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return
		}
		for _, f := range q {
			l.conn.SetWriteDeadline(time.Now().Add(l.tm.timeout))
			if _, err := l.conn.Write(f); err != nil {
				l.conn.Close() // the reader sees the broken connection too
				return
			}
		}
	}
}

// readLoop takes the agent's messages until the connection closes. Then
// every rank of the link that has not exited counts as lost with it, and
// its output as ended; spares being started fail.
func (l *agentLink) readLoop(j *Job) {
	defer l.wg.Done()
	// rank returns the state of r, a rank of the link; nil if it is not.
	rank := func(r ftrma.Rank) *linkRank {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ranks[r]
	}
	var err error
	for {
		var typ byte
		var p []byte
		l.conn.SetReadDeadline(time.Now().Add(l.tm.timeout))
		if typ, p, err = jobwire.ReadFrame(l.conn, maxLaunch); err != nil {
			break
		}
		l.heard.Store(time.Now().UnixNano())
		switch typ {
		case msgPing:
		case msgOutput:
			m, perr := parseOutput(p)
			st := rank(m.rank)
			if perr != nil || st == nil || st.ended[m.stream-1] {
				j.out.reportf("agent %s: bad output message; ignored", l.addr)
				continue
			}
			w := j.out.stdout
			if m.stream == streamStderr {
				w = j.out.stderr
			}
			last := m.flags&outLast != 0
			j.out.writePiece(w, j.prefix(m.rank), m.data, m.flags&outStart != 0, last)
			if last {
				st.ended[m.stream-1] = true
				j.ranks[m.rank].fwd.Done()
			}
		case msgExited:
			m, perr := parseExited(p)
			st := rank(m.rank)
			if perr != nil || st == nil || st.exited {
				j.out.reportf("agent %s: bad exit message; ignored", l.addr)
				continue
			}
			st.exited = true
			j.ranks[m.rank].exit <- m
		case msgSpawnedRank:
			m, perr := parseSpawnedRank(p)
			l.mu.Lock()
			ch := l.spawns[m.rank]
			delete(l.spawns, m.rank)
			l.mu.Unlock()
			if perr != nil || ch == nil {
				j.out.reportf("agent %s: bad or late spawned message; ignored", l.addr)
				continue
			}
			ch <- m // buffered
		case jobwire.MsgError:
			j.out.reportf("agent %s says: %s", l.addr, jobwire.Printable(p))
		default:
			j.out.reportf("agent %s: unexpected message type %d; ignored", l.addr, typ)
		}
	}
	l.mu.Lock()
	l.down = true
	closed, why := l.closed, l.why
	ranks := l.ranks
	for r, ch := range l.spawns {
		close(ch)
		delete(l.spawns, r)
	}
	l.mu.Unlock()
	if why == "" {
		why = fmt.Sprintf("the connection to agent %s broke (%v)", l.addr, err)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			why = fmt.Sprintf("agent %s was silent for %v", l.addr, l.tm.timeout)
		}
	}
	lost := 0
	for r, st := range ranks { // no rank joins once down is set
		if !st.exited {
			lost++
			j.ranks[r].exit <- exitedMsg{rank: r, code: -1, lost: why}
		}
		for s := range st.ended {
			if !st.ended[s] {
				j.ranks[r].fwd.Done()
			}
		}
	}
	switch {
	case closed || lost == 0:
	case j.word != nil:
		// Under the arbiter ftrun's link proves nothing of the ranks:
		// their host's lease from the arbiter decides (Job.waitRank).
		j.out.reportf("%s: ftrun lost touch with its %d running rank(s); the arbiter decides their fate", why, lost)
	default:
		j.out.reportf("%s: its %d running rank(s) count as failed", why, lost)
	}
}
