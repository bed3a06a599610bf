package launcher

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/transport/shm"
)

// maxHandshakes bounds the unauthenticated handshakes an agent or ftrun
// runs at once; more connections are closed at once.
const maxHandshakes = 64

// AgentConfig configures an ftrun agent.
type AgentConfig struct {
	// Listen is the address to listen on, host:port. Required.
	Listen string
	// Secret is the master agent secret (seclink.ParseSecret of what
	// "ftrun agent --gen-secret" printed): the agent answers to a launcher
	// that proves the host key of whatever host name it asks for
	// (hostAgentKey). Host and HostKey instead are one host's secret (ftrun
	// agent --host-secret): the agent answers only to a launcher that names
	// it Host and proves HostKey. One of the two is required.
	Secret  []byte
	Host    string
	HostKey []byte
	// Once makes Serve return after the first authenticated job ended.
	// Connections are still handshaken concurrently: one that is slow or
	// silent does not hold up a launcher behind it. The first to
	// authenticate gets the job; the agent then stops listening and closes
	// the others.
	Once bool
	// Env is the base environment of the ranks (without FTRMA_ variables,
	// which the launcher sends); nil means os.Environ().
	Env []string
	// HandshakeTimeout bounds authentication and the launch message. Default
	// 10 s.
	HandshakeTimeout time.Duration
	// Logger reports jobs (info) and refused connections (warnings); nil
	// means ftrma.Logger().
	Logger *slog.Logger
}

// Agent is an ftrun agent: a per-host daemon that starts the ranks of remote
// ftrun jobs on its host. Each launcher connection is one job; when it closes,
// the agent kills that job's ranks.
type Agent struct {
	cfg  AgentConfig
	ln   net.Listener
	wg   sync.WaitGroup // one per connection being served
	quit chan struct{}  // closed by Close

	gate *seclink.Gate // bounds the handshakes under way
	// refusals rate-limits the log lines of refused connections.
	refusals *seclink.Refusals

	mu     sync.Mutex            // guards the fields below
	conns  map[net.Conn]struct{} // connections being served; Close closes them
	closed bool
	taken  bool // with Once: a connection authenticated and has the job
}

// ListenAgent starts listening for launchers; Serve serves them.
func ListenAgent(cfg AgentConfig) (*Agent, error) {
	if len(cfg.Secret) == 0 && (len(cfg.HostKey) == 0 || cfg.Host == "") {
		return nil, errAgentSecret
	}
	if cfg.Listen == "" {
		return nil, fmt.Errorf("launcher: agent: no listen address: %w", ftrma.ErrInvalid)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = ftrma.Logger()
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &Agent{cfg: cfg, ln: ln, quit: make(chan struct{}), conns: make(map[net.Conn]struct{}), gate: seclink.NewGate(maxHandshakes), refusals: seclink.NewRefusals(time.Second)}, nil
}

// Addr is the address the agent listens on.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Serve accepts launchers and serves each job, until Close or, with Once,
// until the first authenticated job ended. It waits for the jobs it started
// to end before it returns.
func (a *Agent) Serve() error {
	defer a.wg.Wait()
	warn := func(format string, args ...any) { a.cfg.Logger.Warn(fmt.Sprintf(format, args...)) }
	acceptEach(a.ln, a.quit, "agent", warn, func(c net.Conn) bool {
		if !a.track(c) {
			c.Close()
			return false
		}
		// Each connection on its own goroutine, with Once too: a handshake
		// waits up to HandshakeTimeout for a silent client.
		go func() {
			defer a.wg.Done()
			a.serve(c)
		}()
		return true
	})
	return nil
}

// take gives the job of a --once agent to connection c, the first to
// authenticate: it stops listening and closes every other connection (still
// in their handshakes, or late). It reports whether c got the job.
func (a *Agent) take(c net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.taken || a.closed {
		return false
	}
	a.taken = true
	a.ln.Close()
	for other := range a.conns {
		if other != c {
			other.Close()
		}
	}
	return true
}

// once reports whether a --once agent's job went to a connection already.
func (a *Agent) once() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.taken
}

// track registers a connection to serve; false if the agent is closing.
func (a *Agent) track(c net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.taken {
		return false
	}
	a.conns[c] = struct{}{}
	a.wg.Add(1)
	return true
}

// Close stops accepting and ends every job: their ranks are killed. It waits
// for the jobs to end.
func (a *Agent) Close() error {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.quit)
		a.ln.Close()
		for c := range a.conns {
			c.Close()
		}
	}
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}

// agentJob is one launcher connection's job on this host.
type agentJob struct {
	env  []string             // the ranks' base environment
	logf func(string, ...any) // the agent's log
	c    net.Conn
	spec *launchSpec
	wmu  sync.Mutex     // serializes writes on c
	wg   sync.WaitGroup // the ranks' waiting and forwarding goroutines
	path string         // the program, resolved on this host (start)
	dir  string         // the ranks' working directory, or "" (start)
	// files is where the ranks' output goes too (--output-filename), or
	// nil; host is this host's name, for its errors.
	files *outputFiles
	host  string
	arb   *agentArbiter // --arbiter: this host's node, or nil
	// sup is the ranks' lease endpoint under --arbiter (supervisor.go),
	// or nil: their lease comes from ftrun. With it, the ranks outlive
	// the link to ftrun while the node acts (outlive).
	sup *hostSupervisor
	// spares is this host's part in spares without ftrun, or nil (set
	// before the ranks start).
	spares *agentSpares
	// kill is closed when the agent was told to stop (a signal, Close):
	// the ranks are killed whatever the lease.
	kill <-chan struct{}

	cuts  bool   // the launcher checked that this agent can cut (--cut)
	holes *holes // the blackhole routes of --cut held here

	mu       sync.Mutex // guards procs, ranks, timers, stopping and every agentProc's running
	stopping bool       // supervise is killing what is left: no spare starts
	procs    []*agentProc
	ranks    []ftrma.Rank  // every rank started here: the launch's, then the spares'
	timers   []*time.Timer // of --pause and --cut; stopped when the job ends
	ended    bool          // the job ended here: no more timers
}

// agentProc is one rank process of an agentJob.
type agentProc struct {
	rank    ftrma.Rank
	cmd     *exec.Cmd
	pipes   [2]*os.File    // read ends of stdout and stderr
	files   [2]*rankFile   // --output-filename: its stdout and stderr files, or nil
	fwd     sync.WaitGroup // the two forwarding goroutines
	running bool           // guarded by agentJob.mu: started and not reaped
	reaped  chan struct{}  // closed once it is reaped
	// stdin takes the rank's part of ftrun's standard input (msgStdin) for
	// the goroutine that writes it to the rank; nil when the rank reads
	// /dev/null. Guarded by agentJob.mu, as are stdinEnded and stdinFull.
	stdin                 chan []byte
	stdinEnded, stdinFull bool
}

// serve runs one connection: authentication, the launch, then supervision
// until the launcher closes the connection, when the job's ranks are killed.
// It reports whether the connection authenticated and launched a job.
func (a *Agent) serve(c net.Conn) bool {
	defer func() {
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
	}()
	release := a.gate.Admit(c)
	deadline := time.Now().Add(a.cfg.HandshakeTimeout)
	c.SetDeadline(deadline)
	var tc *tls.Conn
	key, err := a.keyFor(c)
	if errors.Is(err, errNotThisHost) {
		// The handshake runs anyway, with this host's key: it fails, and
		// the launcher learns that this agent does not hold the key it
		// asked for.
		seclink.Server(c, a.cfg.HostKey, deadline)
	} else if err == nil {
		tc, err = seclink.Server(c, key, deadline)
	}
	release()
	if err != nil {
		select {
		case <-a.quit:
		default:
			if ok, skipped := a.refusals.Note(c.RemoteAddr(), time.Now()); ok && !a.once() {
				a.cfg.Logger.Warn(fmt.Sprintf("refused connection from %s: %v%s", c.RemoteAddr(), err, seclink.Suffix(skipped)))
			}
		}
		return false
	}
	defer tc.Close()
	if a.cfg.Once && !a.take(c) {
		return false
	}
	tc.SetDeadline(time.Now().Add(a.cfg.HandshakeTimeout))
	runAgentJob(tc, a.cfg.Env, logfOf(a.cfg.Logger), a.quit)
	return true
}

// errNotThisHost: a launcher asked an agent holding a host secret for
// another host's key.
var errNotThisHost = errors.New("not this host")

// keyFor reads the label frame a launcher sends first on c, the name of
// the host it takes this agent for, and returns that host's key.
func (a *Agent) keyFor(c net.Conn) ([]byte, error) {
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
	if err != nil {
		return nil, err
	}
	if typ != msgLinkLabel || len(p) == 0 || len(p) > 255 {
		return nil, errors.New("no host label")
	}
	host := string(p)
	if len(a.cfg.Secret) > 0 {
		return hostAgentKey(a.cfg.Secret, host), nil
	}
	if host != a.cfg.Host {
		return nil, fmt.Errorf("%w: the launcher takes this agent for host %q; it holds host %q's secret", errNotThisHost, jobwire.Printable(p), a.cfg.Host)
	}
	return a.cfg.HostKey, nil
}

// runAgentJob serves one authenticated launcher connection: it reads the
// launch (within the connection's deadline), starts the ranks, and
// supervises them until the connection closes or goes silent for
// linkTimeout, when it kills them (under --arbiter, when their host lease
// ends: agentJob.outlive), or kill is closed.
func runAgentJob(c net.Conn, env []string, logf func(string, ...any), kill <-chan struct{}) {
	st := &agentSetup{c: c, logf: logf, leaveGroup: func() {}}
	lost := false // the link to ftrun was lost: the arbiter node waits for its verdict before it stops
	defer func() { st.arb.finish(lost) }()
	defer func() { st.leaveGroup() }()
	typ, p, err := jobwire.ReadFrame(c, maxLaunch)
	for err == nil && st.wants(typ, p) {
		if !st.handle(typ, p) {
			return
		}
		typ, p, err = jobwire.ReadFrame(c, maxLaunch)
	}
	if st.arbLn != nil {
		st.arbLn.Close() // no config came
	}
	spec, err := checkLaunch(typ, p, err)
	if err != nil {
		jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText(err.Error()))
		logf("launcher %s: %v", c.RemoteAddr(), err)
		return
	}
	c.SetDeadline(time.Time{})
	if st.files != nil {
		st.files.size = spec.size
	}
	// ftrun's -x comes after the agent's own: it wins (exec keeps the last).
	env = append(slices.Clip(env), spec.export...)
	j := &agentJob{env: env, logf: logf, c: c, spec: spec, files: st.files, host: hostName(), cuts: st.cuts, holes: newHoles(), arb: st.arb, kill: kill}
	stopLeases := j.startLeases()
	defer stopLeases()
	st.arb.launched(spec.job, spec.size)
	job := jobwire.Printable([]byte(spec.job))
	logf("job %s from %s: starting ranks %v of %d", job, c.RemoteAddr(), spec.rankList(), spec.size)
	if st.files != nil {
		logf("job %s: the ranks' output goes to files under %s too", job, st.files.jobDir())
	}
	// An agent killed by SIGKILL leaves its ranks' shared memory (shm+tcp):
	// its owner file lets the next ftrun on this host sweep it.
	release := func() {}
	if spec.sharesMemory() {
		r, err := claimShm(spec.job)
		if err != nil {
			logf("job %s: %v", job, err)
		} else {
			release = r
		}
	}
	defer func() { release() }()
	if err := j.start(); err != nil {
		jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText(err.Error()))
		logf("job %s: %v", job, err)
		return
	}
	lost = j.supervise()
	j.endInjections()
	// A killed rank cannot remove its shared memory (shm+tcp): do it here,
	// for this host's ranks only. The job's other ranks go on, and their
	// files may be in the same directory (hosts that are network namespaces
	// of one machine share /dev/shm): removing them would make their peers'
	// accesses fail (ftrma.ErrUnknownRegion). ftrun removes what is left
	// when the job ends.
	if err := shm.RemoveRanks("", spec.job, j.rankList()); err != nil {
		logf("job %s: removing its shared memory: %v", job, err)
	}
	release()
	release = func() {}
	logf("job %s: ended", job)
}

// agentSetup is what an agent sets up from the messages ftrun sends before
// the launch: the host group, --output-filename's files, --cut's routes
// and, under --arbiter, the job's arbiter node of this host
// (arbiterjob.go).
type agentSetup struct {
	c    net.Conn
	logf func(string, ...any)

	joined     bool
	leaveGroup func() // leaves the host group; set once joined
	files      *outputFiles
	cuts       bool
	arbAsked   bool
	arbLn      net.Listener // the arbiter node's listener, until its config comes
	arb        *agentArbiter
}

// wants reports whether a message of type typ is one of the setup's, not
// yet seen (anything else should be the launch).
func (st *agentSetup) wants(typ byte, p []byte) bool {
	switch typ {
	case msgMembers:
		return !st.joined
	case msgOutputFiles:
		return st.files == nil
	case msgCut:
		return len(p) == 0 && !st.cuts
	case msgArbiterListen:
		return !st.arbAsked
	case msgArbiterConfig:
		return st.arbAsked && st.arb == nil
	}
	return false
}

// handle carries out one setup message; false means the connection is
// done with (the reason logged, and told ftrun where it can be).
func (st *agentSetup) handle(typ byte, p []byte) bool {
	c, logf := st.c, st.logf
	switch typ {
	case msgCut:
		// The job has --cut: can this agent add blackhole routes?
		if nerr := checkNetAdmin(); nerr != nil {
			why := fmt.Sprintf("host %s cannot add the blackhole routes of --cut: %v", agentHostName(), nerr)
			jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText(why))
			logf("launcher %s: %s", c.RemoteAddr(), why)
			return false
		}
		if err := jobwire.WriteFrame(c, msgCut, nil); err != nil {
			logf("launcher %s: %v", c.RemoteAddr(), err)
			return false
		}
		st.cuts = true
	case msgMembers:
		// Join the job's host group first; without it the link's pings
		// still watch ftrun.
		st.joined = true
		g, jerr := agentJoin(p, c.LocalAddr(), logf)
		if jerr != nil {
			logf("host membership: %v", jerr)
		} else {
			st.leaveGroup = func() {
				g.Leave(leaveTimeout)
				g.Shutdown()
			}
		}
	case msgOutputFiles:
		// --output-filename: this host's files, ready before any rank of
		// the job starts anywhere.
		m, ferr := parseOutputFiles(p)
		if ferr == nil {
			st.files = &outputFiles{dir: m.dir, tag: m.tag}
			ferr = st.files.prepare(hostName())
		}
		var text string
		if ferr != nil {
			text = ferr.Error()
		}
		werr := jobwire.WriteFrame(c, msgOutputReady, jobwire.ErrorText(text))
		if ferr != nil || werr != nil {
			logf("launcher %s: %v", c.RemoteAddr(), cmp.Or(ferr, werr))
			return false
		}
	case msgArbiterListen:
		st.arbAsked = true
		var m arbiterAddrMsg
		st.arbLn, m = agentArbiterListen(c.LocalAddr())
		if err := jobwire.WriteFrame(c, msgArbiterAddr, m.append(nil)); err != nil {
			if st.arbLn != nil {
				st.arbLn.Close()
			}
			logf("launcher %s: %v", c.RemoteAddr(), err)
			return false
		}
	case msgArbiterConfig:
		var aerr error
		if st.arbLn == nil {
			aerr = errors.New("a config, but no listener")
		} else {
			st.arb, aerr = startAgentArbiter(p, st.arbLn, logf)
			st.arbLn = nil // the node's, or closed
		}
		if aerr != nil {
			logf("arbiter: %v; the job goes on without this host's node", aerr)
		}
	}
	return true
}

// startLeases, under --arbiter, starts the ranks' lease endpoint on this
// host (their lease then comes from the arbiter, not ftrun) and the spares
// started without ftrun; it returns what stops them.
func (j *agentJob) startLeases() func() {
	arb, job := j.arb, jobwire.Printable([]byte(j.spec.job))
	if arb == nil {
		return func() {}
	}
	sup, err := startSupervisor(j.spec, arb, j.logf)
	if err != nil {
		j.logf("job %s: the ranks' lease endpoint: %v; their lease comes from ftrun", job, err)
		return func() {}
	}
	j.sup = sup
	arb.d.setProbe(j.probeRank)
	stopSup := func() {
		arb.d.setProbe(nil)
		sup.close()
	}
	if len(arb.spareEnv) == 0 {
		return stopSup
	}
	sp, err := startAgentSpares(j, arb, sup)
	if err != nil {
		j.logf("job %s: spares without ftrun: %v", job, err)
	}
	j.spares = sp
	return func() {
		sp.close()
		stopSup()
	}
}

// readLaunch reads and checks the launch message.
func readLaunch(c net.Conn) (*launchSpec, error) {
	typ, p, err := jobwire.ReadFrame(c, maxLaunch)
	return checkLaunch(typ, p, err)
}

// checkLaunch checks a frame read as the launch message.
func checkLaunch(typ byte, p []byte, err error) (*launchSpec, error) {
	if err != nil {
		return nil, fmt.Errorf("read launch: %w", err)
	}
	if err := jobwire.ExpectFrom(typ, p, msgLaunch, "launch", "launcher"); err != nil {
		return nil, err
	}
	spec, err := parseLaunch(p)
	if err != nil {
		return nil, err
	}
	// A launch of no rank is a host for spares (msgSpawnRank).
	if spec.size < 1 || len(spec.ranks) > spec.size {
		return nil, fmt.Errorf("launch of %d ranks of a job of %d", len(spec.ranks), spec.size)
	}
	seen := make(map[ftrma.Rank]bool)
	for _, r := range spec.ranks {
		if r.rank < 0 || int(r.rank) >= spec.size || seen[r.rank] {
			return nil, fmt.Errorf("launch: rank %d repeated or not in [0, %d)", r.rank, spec.size)
		}
		seen[r.rank] = true
		for _, kv := range r.env {
			if !strings.HasPrefix(kv, "FTRMA_") || !strings.Contains(kv, "=") {
				return nil, fmt.Errorf("launch: rank %d: environment entry %q is not an FTRMA_ variable", r.rank, jobwire.Printable([]byte(kv)))
			}
		}
	}
	for i, r := range spec.stdin {
		if !slices.ContainsFunc(spec.ranks, func(l launchRank) bool { return l.rank == r }) || slices.Contains(spec.stdin[:i], r) {
			return nil, fmt.Errorf("launch: standard input for rank %d, not a rank of the launch or named twice", r)
		}
	}
	for _, kv := range spec.export {
		name, _, ok := strings.Cut(kv, "=")
		err := checkExport(name)
		if err == nil && !ok {
			err = errors.New("no NAME=VALUE")
		}
		if err != nil {
			return nil, fmt.Errorf("launch: exported entry %q: %v", jobwire.Printable([]byte(kv)), err)
		}
	}
	return spec, nil
}

// program resolves the launch's program on this host: relative to the
// launcher's directory if that exists here, else to the agent's, or through
// PATH when it names no directory.
func (j *agentJob) program() (path, dir string, err error) {
	if st, err := os.Stat(j.spec.dir); err == nil && st.IsDir() && filepath.IsAbs(j.spec.dir) {
		dir = j.spec.dir
	}
	path = j.spec.prog
	if strings.Contains(path, "/") && !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	path, err = exec.LookPath(path)
	return path, dir, err
}

// start starts every rank of the launch and says so to the launcher; if one
// cannot be started, the ones started are killed and reaped.
func (j *agentJob) start() error {
	path, dir, err := j.program()
	if err != nil {
		return fmt.Errorf("on %s: %w", j.c.LocalAddr(), err)
	}
	j.path, j.dir = path, dir
	j.ranks = j.spec.rankList()
	hostIP := addrIP(j.c.LocalAddr())
	var pids []rankPID
	cpus := make([]int, len(j.spec.ranks))
	for i := range cpus {
		cpus[i] = -1
	}
	if j.spec.bind {
		if cpus, err = bindCPUs(len(j.spec.ranks)); err != nil {
			return fmt.Errorf("on %s: %w", agentHostName(), err)
		}
	}
	for i, r := range j.spec.ranks {
		vars := append(append([]string(nil), r.env...), jobwire.EnvHostAddr+"="+hostIP)
		if j.sup != nil {
			vars = append(vars, jobwire.EnvSupervisor+"="+j.sup.addr())
		}
		p, err := j.startRank(path, dir, r.rank, rankEnv(j.env, vars, len(j.spec.ranks)), cpus[i], j.spec.wantsStdin(r.rank))
		if err != nil {
			for _, p := range j.procs {
				syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				p.cmd.Wait()
				p.pipes[0].Close()
				p.pipes[1].Close()
				closeFiles(p.files)
			}
			return fmt.Errorf("on %s: start rank %d: %w", j.c.LocalAddr(), r.rank, err)
		}
		j.procs = append(j.procs, p)
		pids = append(pids, rankPID{rank: r.rank, pid: p.cmd.Process.Pid, cpu: cpus[i]})
	}
	// started goes out before any output or exit of the ranks.
	if err := j.send(msgStarted, appendStarted(nil, pids)); err != nil {
		j.killAll()
	}
	for _, p := range j.procs {
		j.follow(p)
	}
	return nil
}

// follow starts the goroutines that forward p's output and wait for it.
func (j *agentJob) follow(p *agentProc) {
	j.wg.Add(3)
	go func() { defer j.wg.Done(); defer p.fwd.Done(); j.forward(p, streamStdout) }()
	go func() { defer j.wg.Done(); defer p.fwd.Done(); j.forward(p, streamStderr) }()
	go func() { defer j.wg.Done(); j.wait(p) }()
}

// spawn starts spare rank m.rank at the launcher's request (msgSpawnRank)
// and answers: the rank runs, or why it could not be started. It runs on
// supervise's goroutine, so never after the ranks were killed.
func (j *agentJob) spawn(m spawnRankMsg) {
	answer := spawnedRankMsg{rank: m.rank}
	if err := j.checkSpawn(m); err != nil {
		answer.text = err.Error()
		j.logf("job %s: spare rank %d: %v", jobwire.Printable([]byte(j.spec.job)), m.rank, err)
		j.send(msgSpawnedRank, answer.append(nil))
		return
	}
	_, err := j.startSpareProc(m.rank, m.env, func(p *agentProc) {
		answer.pid = p.cmd.Process.Pid
		j.logf("job %s: started spare rank %d", jobwire.Printable([]byte(j.spec.job)), m.rank)
		// spawned goes out before any output or exit of the rank.
		if err := j.send(msgSpawnedRank, answer.append(nil)); err != nil {
			j.killAll()
		}
	})
	if err != nil {
		answer.text = fmt.Sprintf("on %s: start spare rank %d: %v", j.c.LocalAddr(), m.rank, err)
		j.logf("job %s: %s", jobwire.Printable([]byte(j.spec.job)), answer.text)
		j.send(msgSpawnedRank, answer.append(nil))
	}
}

// startSpareProc starts spare rank r here with vars (FTRMA_ variables;
// the host's address and its supervisor's are added), calls started, and
// follows it (its output, its exit), at ftrun's request (spawn) or, with
// ftrun gone, the arbiter's (agentspare.go). Once the job has ended here
// none starts.
func (j *agentJob) startSpareProc(r ftrma.Rank, vars []string, started func(*agentProc)) (*agentProc, error) {
	j.mu.Lock()
	switch {
	case j.stopping:
		j.mu.Unlock()
		return nil, errors.New("the job has ended on this host")
	case slices.Contains(j.ranks, r):
		j.mu.Unlock()
		return nil, fmt.Errorf("rank %d was started here before", r)
	}
	j.ranks = append(j.ranks, r)
	here := len(j.ranks)
	j.wg.Add(1) // until it is followed: supervise waits for it
	j.mu.Unlock()
	defer j.wg.Done()
	vars = append(slices.Clone(vars), jobwire.EnvHostAddr+"="+addrIP(j.c.LocalAddr()))
	if j.sup != nil {
		vars = append(vars, jobwire.EnvSupervisor+"="+j.sup.addr())
	}
	p, err := j.startRank(j.path, j.dir, r, rankEnv(j.env, vars, here), -1, false)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.procs = append(j.procs, p)
	j.mu.Unlock()
	if started != nil {
		started(p)
	}
	j.follow(p)
	return p, nil
}

// checkSpawn checks a spawn request as checkLaunch checks a launch: a rank
// of the job not started here before, FTRMA_ variables only.
func (j *agentJob) checkSpawn(m spawnRankMsg) error {
	if m.rank < 0 || int(m.rank) >= j.spec.size {
		return fmt.Errorf("no rank %d in a job of %d", m.rank, j.spec.size)
	}
	j.mu.Lock()
	started := slices.Contains(j.ranks, m.rank)
	j.mu.Unlock()
	if started {
		return fmt.Errorf("rank %d was started here before", m.rank)
	}
	for _, kv := range m.env {
		if !strings.HasPrefix(kv, "FTRMA_") || !strings.Contains(kv, "=") {
			return fmt.Errorf("environment entry %q is not an FTRMA_ variable", jobwire.Printable([]byte(kv)))
		}
	}
	return nil
}

// rankList is every rank started here, the spares included.
func (j *agentJob) rankList() []ftrma.Rank {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.ranks)
}

// startRank starts one rank in a session and process group of its own, as ftrun does,
// with its output files (--output-filename) open.
func (j *agentJob) startRank(path, dir string, r ftrma.Rank, env []string, cpu int, stdin bool) (*agentProc, error) {
	var files [2]*rankFile
	if j.files != nil {
		var err error
		if files, err = j.files.open(r, j.host); err != nil {
			return nil, err
		}
		for _, f := range files {
			f.report = func(err error) {
				j.logf("job %s: rank %d: writing its output: %v", jobwire.Printable([]byte(j.spec.job)), r, err)
			}
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(files)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		closeFiles(files)
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{j.spec.prog}, j.spec.args...),
		Env:         env,
		Dir:         dir,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: sysProcAttr(),
	}
	var in, inW *os.File
	if stdin {
		if in, inW, err = os.Pipe(); err != nil {
			outR.Close()
			errR.Close()
			outW.Close()
			errW.Close()
			closeFiles(files)
			return nil, err
		}
		cmd.Stdin = in
	}
	err = startOn(cmd, cpu)
	if in != nil {
		in.Close() // the rank holds its own
		if err != nil {
			inW.Close()
		}
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		closeFiles(files)
		return nil, err
	}
	p := &agentProc{rank: r, cmd: cmd, pipes: [2]*os.File{outR, errR}, files: files, running: true, reaped: make(chan struct{})}
	if inW != nil {
		p.stdin = make(chan []byte, stdinQueue)
		go func() {
			broken := false
			for b := range p.stdin {
				if !broken {
					_, werr := inW.Write(b)
					broken = werr != nil // the rank closed its input or ended
				}
			}
			inW.Close()
		}()
	}
	p.fwd.Add(2)
	return p, nil
}

// forward sends one output stream of p to the launcher, line by line,
// and with --output-filename writes each line to p's file first: the file
// does not depend on the link.
func (j *agentJob) forward(p *agentProc, stream byte) {
	buf := make([]byte, 0, 256)
	var prefix string
	if j.files != nil {
		prefix = j.files.prefix(p.rank)
	}
	scanLines(p.pipes[stream-1], func(piece []byte, start, last bool) {
		if f := p.files[stream-1]; f != nil {
			buf = appendPiece(buf[:0], prefix, piece, start, last)
			f.write(buf)
		}
		m := outputMsg{rank: p.rank, stream: stream, data: piece}
		if start {
			m.flags |= outStart
		}
		if last {
			m.flags |= outLast
		}
		buf = m.append(buf[:0])
		j.send(msgOutput, buf) // a broken connection ends the job anyway
	})
}

// wait reaps p, reports its exit, and stops forwarding its output
// outputGrace after it exited, should children of the rank hold it open.
func (j *agentJob) wait(p *agentProc) {
	err := p.cmd.Wait()
	j.mu.Lock()
	p.running = false
	if p.stdin != nil && !p.stdinEnded {
		p.stdinEnded = true // its input goes nowhere now; its writer ends
		close(p.stdin)
	}
	j.mu.Unlock()
	close(p.reaped)
	// The process is gone: the ranks of this host learn it from its shared
	// memory at once, before the exit notice makes its way through ftrun.
	if err := shm.MarkExited("", j.spec.job, p.rank, j.rankList()); err != nil {
		j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
	}
	m := exitedMsg{rank: p.rank, code: -1}
	if ps := p.cmd.ProcessState; ps == nil {
		m.text = err.Error()
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		m.signal = ws.Signal()
	} else {
		m.code = ps.ExitCode()
	}
	j.arb.reportExit(p.rank, m.code)
	j.send(msgExited, m.append(nil))
	drainOutput(&p.fwd, p.pipes, p.files)
}

// supervise carries out the launcher's signals until the connection closes,
// then kills every rank still running and waits for them. It reports
// whether the link was lost (it broke or went silent) rather than closed.
func (j *agentJob) supervise() (lost bool) {
	stop := make(chan struct{})
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		tick := time.NewTicker(j.spec.timeout() / 8)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if j.send(msgPing, nil) != nil {
					return
				}
			}
		}
	}()
	defer close(stop)
	for {
		j.c.SetReadDeadline(time.Now().Add(j.spec.timeout()))
		typ, p, err := jobwire.ReadFrame(j.c, maxLaunch)
		if err != nil {
			if j.sup != nil && !j.told() && (j.running() > 0 || j.sparesAwaited(2*j.arb.d.cfg.ElectionTimeout())) {
				// --arbiter: the ranks' lease is their host's, not
				// ftrun's: they go on while this host's node acts.
				j.logf("job %s: the link to the launcher ended (%v): the ranks go on under this host's lease", jobwire.Printable([]byte(j.spec.job)), err)
				lost = true
				j.c.Close() // unblocks forwarding to a launcher that is gone
				j.outlive()
				break
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				j.logf("job %s: the link to the launcher is lost (%v): killing the ranks", jobwire.Printable([]byte(j.spec.job)), err)
				lost = true
			}
			break
		}
		switch typ {
		case msgPing:
		case msgSignal:
			r, sig, err := parseSignal(p)
			if err != nil {
				j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
				continue
			}
			j.signal(r, sig)
		case msgStdin:
			r, data, err := parseStdin(p)
			if err != nil {
				j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
				continue
			}
			j.stdinFor(r, data)
		case msgSpawnRank:
			m, err := parseSpawnRank(p)
			if err != nil {
				j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
				continue
			}
			j.spawn(m)
		case msgPause:
			m, err := parsePauseMsg(p)
			if err != nil {
				j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
				continue
			}
			j.pause(m)
		case msgKillHost:
			if err := parseKillHostMsg(p); err != nil {
				j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
				continue
			}
			j.dieHost()
		case msgCut:
			m, err := parseCutMsg(p)
			if err == nil && !j.cuts {
				err = errors.New("a cut's schedule without the check before the launch; ignored")
			}
			if err != nil {
				j.logf("job %s: %v", jobwire.Printable([]byte(j.spec.job)), err)
				continue
			}
			j.scheduleCut(m)
		case jobwire.MsgError:
			j.logf("job %s: launcher says: %s", jobwire.Printable([]byte(j.spec.job)), jobwire.Printable(p))
		default:
			j.logf("job %s: unexpected message type %d; ignored", jobwire.Printable([]byte(j.spec.job)), typ)
		}
	}
	j.mu.Lock()
	j.stopping = true
	j.mu.Unlock()
	j.killAll()
	j.c.Close() // unblocks forwarding to a launcher that is gone
	j.wg.Wait()
	return lost
}

// running is how many ranks run here (started and not reaped).
func (j *agentJob) running() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, p := range j.procs {
		if p.running {
			n++
		}
	}
	return n
}

// told reports whether the agent was told to stop (kill closed).
func (j *agentJob) told() bool {
	select {
	case <-j.kill:
		return true
	default:
		return false
	}
}

// outlive waits, once the link to ftrun ended under --arbiter, until every
// rank here has exited (reported to the node as they go: wait), or the
// agent is told to stop. Once the node stops acting (the host lease is
// lost) the ranks stop by themselves as their leases run out, within a
// term and its quarter-term rescue: when it has not acted again for that
// long, outlive returns, and supervise kills what is left, as a backstop.
func (j *agentJob) outlive() {
	term := j.arb.d.cfg.LeaseTerm
	tick := time.NewTicker(term / 20)
	defer tick.Stop()
	var stopped time.Time
	for j.running() > 0 || j.sparesAwaited(0) {
		select {
		case <-j.kill:
			return
		case <-tick.C:
		}
		now := time.Now()
		acting, end := j.arb.d.hostLease()
		switch acts := acting && now.Before(end); {
		case acts:
			stopped = time.Time{} // a take-over may leave a gap: the rescue covers it
		case stopped.IsZero():
			stopped = now
			j.logf("job %s: this host's arbiter node does not act: its ranks stop as their leases run out; what is left is killed in %v unless it acts again", jobwire.Printable([]byte(j.spec.job)), term+term/4)
		case now.Sub(stopped) >= term+term/4:
			return
		}
	}
}

// sparesAwaited reports whether this host may still be asked to start a
// spare without ftrun (agentspare.go): the job has spares to start here
// and the log does not say every rank has ended, within wait (at ftrun's
// normal end the last exits may still be on their way to the log).
func (j *agentJob) sparesAwaited(wait time.Duration) bool {
	if j.spares == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return !j.arb.d.waitFor(ctx, func(s *arbStats) bool { return s.finished })
}

// probeRank is the agent's prober for the job's arbiter (arbDriver's
// Probes): it asks rank r on its lease channel whether it runs, waiting
// at most d. A rank that does not answer is SIGKILLed, and reported not
// alive only once it is reaped (within rankReapWait; else no answer: the
// arbiter then condemns this host by its own rule). A rank reaped already
// is not alive; one that never ran here gets no answer.
func (j *agentJob) probeRank(r ftrma.Rank, d time.Duration) (alive, ok bool) {
	var p *agentProc
	j.mu.Lock()
	for _, q := range j.procs {
		if q.rank == r {
			p = q
		}
	}
	j.mu.Unlock()
	if p == nil {
		return false, false
	}
	select {
	case <-p.reaped:
		return false, true
	default:
	}
	if j.sup.probe(r, d) {
		return true, true
	}
	j.logf("job %s: rank %d does not answer the arbiter's probe within %v: killing it", jobwire.Printable([]byte(j.spec.job)), r, d)
	j.signal(r, syscall.SIGKILL)
	select {
	case <-p.reaped:
		return false, true
	case <-time.After(rankReapWait):
		return false, false
	}
}

// rankReapWait bounds the wait for a killed rank's reaping in probeRank.
const rankReapWait = 5 * time.Second

// signal sends sig to rank r's process group if r runs here and has not been
// reaped (after that its pid may be another process's).
func (j *agentJob) signal(r ftrma.Rank, sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.procs {
		if p.rank == r && p.running {
			syscall.Kill(-p.cmd.Process.Pid, sig)
		}
	}
}

// stdinFor queues a piece of ftrun's standard input for rank r (none: the
// input ended). It never waits: a rank whose queue is full loses the rest.
func (j *agentJob) stdinFor(r ftrma.Rank, data []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.procs {
		if p.rank != r || p.stdin == nil || p.stdinEnded {
			continue
		}
		switch {
		case len(data) == 0:
			p.stdinEnded = true
			close(p.stdin)
		case p.stdinFull:
		default:
			select {
			case p.stdin <- data:
			default:
				p.stdinFull = true
				j.logf("job %s: rank %d does not read its standard input: the rest of it is dropped", jobwire.Printable([]byte(j.spec.job)), r)
			}
		}
	}
}

// pause carries out a --pause: SIGSTOP to rank m.rank's process group if it
// runs here, and SIGCONT m.d later by this agent's own timer.
func (j *agentJob) pause(m pauseMsg) {
	job := jobwire.Printable([]byte(j.spec.job))
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.procs {
		if p.rank == m.rank && p.running && !j.ended {
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP)
			j.logf("job %s: paused rank %d for %v (--pause)", job, m.rank, m.d)
			j.timers = append(j.timers, time.AfterFunc(m.d, func() {
				j.mu.Lock()
				defer j.mu.Unlock()
				if p.running { // not reaped meanwhile: its pid is its own
					syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
					j.logf("job %s: resumed rank %d", job, m.rank)
				}
			}))
			return
		}
	}
	j.logf("job %s: --pause: rank %d does not run here; ignored", job, m.rank)
}

// scheduleCut arms this side's timers of a --cut: blackhole routes to
// m.addrs after m.after, removed m.heal later (0: when the job ends here).
func (j *agentJob) scheduleCut(m cutMsg) {
	job := jobwire.Printable([]byte(j.spec.job))
	report := func(what string, err error) {
		if err == nil || errors.Is(err, errHolesClosed) {
			return
		}
		j.logf("job %s: --cut: %s: %v", job, what, err)
		j.send(jobwire.MsgError, jobwire.ErrorText(fmt.Sprintf("host %s: --cut: %s: %v", agentHostName(), what, err)))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended {
		return
	}
	j.timers = append(j.timers, time.AfterFunc(m.after, func() {
		j.logf("job %s: --cut: blackhole routes to %v", job, m.addrs)
		report("cut", j.holes.cut(m.addrs))
	}))
	if m.heal > 0 {
		j.timers = append(j.timers, time.AfterFunc(m.after+m.heal, func() {
			j.logf("job %s: --cut: healed: routes to %v removed", job, m.addrs)
			report("heal", j.holes.heal(m.addrs))
		}))
	}
}

// endInjections stops the timers of --pause and --cut and removes every
// route this agent still holds: the job ended here.
func (j *agentJob) endInjections() {
	j.mu.Lock()
	j.ended = true
	for _, t := range j.timers {
		t.Stop()
	}
	j.mu.Unlock()
	if err := j.holes.close(); err != nil {
		j.logf("job %s: %v (remove it by hand: ip route del blackhole ADDRESS)", jobwire.Printable([]byte(j.spec.job)), err)
	}
}

// agentDie ends this agent's process at once, as if its host died
// (--kill-host).
var agentDie = func() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute) // SIGKILL is on its way
}

// dieHost carries out a --kill-host: SIGKILL every rank of the job here and
// then this agent, with nothing more sent to the launcher (a dead host says
// nothing); the routes of --cut go first, so that the host is not left
// cut off for good.
func (j *agentJob) dieHost() {
	j.logf("job %s: --kill-host: killing the ranks and this agent", jobwire.Printable([]byte(j.spec.job)))
	j.wmu.Lock() // never unlocked: no exit or output goes out any more
	j.killAll()
	j.endInjections()
	agentDie()
}

// agentHostName is this agent's host name, as Slurm or the system says.
func agentHostName() string {
	if h := os.Getenv("SLURMD_NODENAME"); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

// killAll sends SIGKILL to every rank still running.
func (j *agentJob) killAll() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.procs {
		if p.running {
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// send writes one frame to the launcher.
func (j *agentJob) send(typ byte, payload []byte) error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	j.c.SetWriteDeadline(time.Now().Add(j.spec.timeout()))
	return jobwire.WriteFrame(j.c, typ, payload)
}

// addrIP returns the IP of a TCP address as text.
func addrIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, _ := net.SplitHostPort(a.String())
	return host
}

// AgentUsage is the help text of "ftrun agent".
const AgentUsage = `usage: ftrun agent --listen HOST[:PORT] [--once]
       ftrun agent --gen-secret
       ftrun agent --host-secret HOST

ftrun agent is the per-host daemon of multi-host ftrun jobs. ftrun starts
it by itself on the hosts of a hostfile, -H list or Slurm allocation (over
ssh or srun, as "ftrun agent --boot", which reads what it needs on its
standard input: through srun, with --munge, the line must be sealed with
munge by the agent's own user); start one by hand with --listen only for
ftrun --hosts.
The agent starts its host's ranks, forwards their output and exits, and
carries out ftrun's kills and signals. When ftrun's link closes or is
silent for 2 s, the agent kills the job's ranks; under ftrun --arbiter it
grants its ranks their lease and keeps them while its host's arbiter node
acts, then exits once they have.

ftrun --hosts holds the master agent secret, made by "ftrun agent
--gen-secret" (a passphrase is refused), in FTRMA_AGENT_SECRET (or in the
file FTRMA_AGENT_SECRET_FILE names, which only its owner may read or
write). Each running agent holds its own host's secret, in the same
variables: "ftrun agent --host-secret HOST" prints it from the master, for
HOST as ftrun --hosts names the host (the part before the port, in lower
case). A link runs mutual TLS 1.3 keyed by that host's key: both sides
prove it, and every frame is encrypted and authenticated; the secret of
one host does not let its reader command another host's agent. (An agent
given the master secret answers for any host name, and warns so.)

Flags:
  --listen HOST[:PORT]    where to listen for ftrun (the port defaults to
                          7770)
  --once                  serve one job, then exit (the first launcher to
                          authenticate gets it; a silent connection does not
                          hold it up)
  --gen-secret            print a new master agent secret and exit
  --host-secret HOST      print the secret of the agent of HOST (from the
                          master secret in FTRMA_AGENT_SECRET or
                          FTRMA_AGENT_SECRET_FILE) and exit
  -h, --help              print this help and exit

The ranks get the agent's environment without its FTRMA_ variables, plus the
job's FTRMA_ variables from ftrun and FTRMA_HOST_ADDR: the agent's IP on its
link to ftrun, where their transports listen. SIGINT or SIGTERM kills the
ranks of every job and ends the agent.
`

// RunAgent is "ftrun agent": args are the arguments after "agent". It serves
// jobs until SIGINT or SIGTERM (or one job with --once, or the job of
// --boot) and returns the exit status: 0, or ExitUsage for a bad command
// line or agent secret, or ExitLaunch if it cannot listen or reach ftrun.
func RunAgent(args []string, stdout, stderr io.Writer) int {
	var listen, hostSecret string
	var once, help, gen, boot, munge bool
	fs := flag.NewFlagSet("ftrun agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&listen, "listen", "", "address to listen on")
	fs.BoolVar(&once, "once", false, "serve one job")
	fs.BoolVar(&gen, "gen-secret", false, "print a new agent secret")
	fs.StringVar(&hostSecret, "host-secret", "", "print the secret of this host")
	fs.BoolVar(&boot, "boot", false, "started by ftrun: read the boot line on stdin")
	fs.BoolVar(&munge, "munge", false, "with --boot: obey only a boot line sealed with munge by this user")
	fs.BoolVar(&help, "help", false, "print help")
	fs.BoolVar(&help, "h", false, "print help")
	usage := func(err error) int {
		fmt.Fprintf(stderr, "ftrun agent: %v\nRun 'ftrun agent --help' for usage.\n", err)
		return ExitUsage
	}
	if err := fs.Parse(args); err != nil {
		return usage(err)
	}
	// The agent's log is its standard error: "ftrun agent: " lines, at
	// the level and in the format of ftrma.EnvLog and ftrma.EnvLogFormat.
	lo, lerr := ftrma.LogOptionsFromEnv(nil)
	lo.Prefix = "ftrun agent: "
	logger := slog.New(ftrma.NewLogHandler(stderr, lo))
	if lerr != nil {
		logger.Warn(fmt.Sprintf("ignoring a bad log setting: %v", lerr))
	}
	logf := logfOf(logger)
	switch {
	case help:
		io.WriteString(stdout, AgentUsage)
		return ExitOK
	case fs.NArg() > 0:
		return usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case gen:
		fmt.Fprintln(stdout, seclink.GenSecret())
		return ExitOK
	case boot:
		return runBootAgent(os.Stdin, munge, logf)
	case listen == "" && hostSecret == "":
		return usage(errors.New("--listen HOST[:PORT] is required"))
	}
	text, err := agentSecretText("")
	os.Unsetenv(EnvAgentSecret)
	if err != nil {
		return usage(err)
	}
	if hostSecret != "" {
		// Print host hostSecret's secret, from the master secret.
		master, err := agentSecretFrom(text)
		if err != nil {
			return usage(err)
		}
		if h := strings.ToLower(hostSecret); h != hostSecret || strings.ContainsAny(h, " \t\n") {
			return usage(fmt.Errorf("--host-secret %q: give the host as ftrun --hosts names it, in lower case, without spaces", hostSecret))
		}
		fmt.Fprintln(stdout, hostSecretText(master, hostSecret))
		return ExitOK
	}
	cfg := AgentConfig{Listen: agentListenAddr(listen), Once: once, Logger: logger}
	host, key, isHost, err := parseHostSecret(text)
	switch {
	case err != nil:
		return usage(err)
	case isHost:
		cfg.Host, cfg.HostKey = host, key
	default:
		if cfg.Secret, err = agentSecretFrom(text); err != nil {
			return usage(err)
		}
	}
	a, err := ListenAgent(cfg)
	if err != nil {
		logf("%v", err)
		return ExitLaunch
	}
	if isHost {
		logf("listening on %s, as host %s", a.Addr(), host)
	} else {
		logf("listening on %s", a.Addr())
		logger.Warn("this agent holds the master agent secret: whoever reads it can command every agent of it; give each host its own (ftrun agent --host-secret HOST)")
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	served := make(chan struct{})
	go func() {
		select {
		case sig := <-sigc:
			logf("got %v: killing the ranks and exiting", sig)
			a.Close()
		case <-served:
		}
	}()
	a.Serve()
	close(served)
	a.Close()
	return ExitOK
}

// agentListenAddr adds the default port to an address without one.
func agentListenAddr(s string) string {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), strconv.Itoa(DefaultAgentPort))
}
