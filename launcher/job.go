package launcher

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
	"github.com/ftrma/ftrma/launcher/internal/members"
	"github.com/ftrma/ftrma/transport/shm"
)

// drainOutput waits until the output of a rank that was reaped is
// forwarded (fwd, its two forwarding goroutines), for outputGrace at most:
// children of the rank may hold its pipes open, which are then closed under
// them to stop forwarding. Then it closes the pipes and the rank's output
// files. ftrun does it for the ranks of its host, an agent for its own.
func drainOutput(fwd *sync.WaitGroup, pipes [2]*os.File, files [2]*rankFile) {
	drained := make(chan struct{})
	go func() { fwd.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
		pipes[0].Close()
		pipes[1].Close()
		<-drained
	}
	pipes[0].Close()
	pipes[1].Close()
	closeFiles(files)
}

// outputGrace is how long a rank's output is still forwarded after the rank
// exited, for children of the rank that hold its stdout or stderr open.
const outputGrace = 2 * time.Second

// Job is a running job: N ranks of one program, on this host or spread over
// hosts whose agents start them, the rendezvous server that connects them, and
// the timers of --kill and --timeout.
type Job struct {
	opts         Config // Transport resolved
	transportWhy string // why that transport
	id           string
	out          *sink
	rv           *rvServer
	links        []*agentLink   // the agents of the job's remote hosts
	dial         *dialBack      // the agents ftrun started, or nil
	members      *members.Group // ftrun's member of the job's host group, or nil
	arb          *arbDriver     // ftrun's node of the job's arbiter (--arbiter), or nil; set before any rank starts
	arbFile      *os.File       // its log file (--output-filename), or nil
	word         *arbWord       // what ftrun's node applied of ranks' ends (--arbiter over several hosts), or nil
	ending       chan struct{}  // closed when ftrun is told to end the job (a signal, --timeout): endOnce
	endOnce      sync.Once
	blocks       []hostBlock    // where the ranks run
	local        []ftrma.Rank   // the ranks ftrun runs itself, on this host; guarded by mu, grows (copied) as spares start
	tm           hostTiming     // the host layer's timing
	releaseShm   func()         // removes the job's owner file in its /dev/shm directory (claimShm), or nil; Start's goroutine, then finish's
	wg           sync.WaitGroup // one per started rank, done when its exit is recorded
	done         chan struct{}  // closed when every rank exited; result is then set

	// Spares (--respawn): world ranks opts.N..opts.N+spares-1.
	spares   int          // Config.Spares resolved
	secret   []byte       // the ranks' secret, from which each host's is derived (hostSecret); never given to a rank
	hostAddr string       // FTRMA_HOST_ADDR of this host's ranks, "" on one host
	path     string       // the program, resolved on this host; "" when this host runs no rank
	base     []string     // the environment of this host's ranks (before rankEnv)
	localCap int          // ranks this host may run at once without --oversubscribe
	hosts    []*jobHost   // every host of the job, where spares may go (spareplace.go)
	hostName string       // this host's name, in the report
	files    *outputFiles // --output-filename, or nil
	spawnMu  sync.Mutex   // serializes spawns

	// Injected failures beyond --kill (inject.go).
	cuts  []*cutPlan // --cut, planned once the agents are connected
	holes *holes     // ftrun's blackhole routes of --cut; nil without cuts

	mu         sync.Mutex  // guards the fields below, and every rankProc's running and killed
	ranks      []*rankProc // by rank; set up before any rank starts
	timers     []*time.Timer
	interrupts int            // SIGINT/SIGTERM received
	signal     syscall.Signal // the first of them, 0 if none
	timedOut   bool
	finished   bool       // every rank exited; timers do nothing
	quiet      bool       // start-up failed: the ranks' exits are not reported
	aborted    bool       // --no-ft: a rank failed and every rank was killed
	abortedBy  ftrma.Rank // the rank whose failure did it
	declared   []bool
	suspicions map[ftrma.Rank]*suspicion
	result     *Result
	start      time.Time
	nextSpare  int // the next spare to start; ranks below it started (or were tried)
}

// rankProc is one rank's process: started by this ftrun (cmd), or by the
// agent of link.
type rankProc struct {
	rank  ftrma.Rank
	cmd   *exec.Cmd      // nil for a remote rank
	pipes [2]*os.File    // read ends of the rank's stdout and stderr; nil for a remote rank
	fwd   sync.WaitGroup // the two forwarding goroutines, or the remote streams until they end

	link *agentLink     // the agent that runs the rank, or nil
	exit chan exitedMsg // a remote rank's exit, from link (buffer 1)
	host string         // where it runs, for the report; set before it starts

	files [2]*rankFile // --output-filename, a rank of this host: its stdout and stderr files

	running bool // guarded by Job.mu: started and not yet reaped, so its pid is its own
	killed  bool // guarded by Job.mu: --kill signalled it
	status  RankStatus
}

// RankStatus is how a rank ended.
type RankStatus struct {
	Rank   ftrma.Rank
	Code   int            // exit status; -1 if the rank was killed by a signal
	Signal syscall.Signal // the signal that killed the rank, or 0
	Killed bool           // the signal came from --kill
	// Failed: the rank's process died (a signal) or the job's failure
	// detector declared it failed; it does not count as a survivor.
	Failed bool
	// Declared: another rank's failure detector declared it failed.
	Declared bool
	// At is when the rank ended, from the start of the job.
	At   time.Duration
	err  error  // waiting for the rank failed (Code is -1)
	lost string // the connection to the rank's agent broke first; why (Code is -1)
}

// OK reports whether the rank exited with status 0.
func (s RankStatus) OK() bool { return s.Code == 0 && s.Signal == 0 && s.err == nil && s.lost == "" }

// String says how the rank ended, e.g. "exited with status 3".
func (s RankStatus) String() string {
	switch {
	case s.lost != "":
		return "was lost: " + s.lost
	case s.err != nil:
		return fmt.Sprintf("could not be waited for: %v", s.err)
	case s.Signal != 0:
		return fmt.Sprintf("was killed by signal %d (%v)", int(s.Signal), s.Signal)
	default:
		return fmt.Sprintf("exited with status %d", s.Code)
	}
}

// Result is how a job ended.
type Result struct {
	Ranks    []RankStatus   // by rank
	TimedOut bool           // --timeout expired and the job was killed
	Signal   syscall.Signal // the SIGINT or SIGTERM ftrun forwarded, or 0
	Aborted  bool           // --no-ft: a rank failed and the job was aborted
	// AbortedBy is the rank whose failure aborted the job (Aborted).
	AbortedBy ftrma.Rank
}

// ExitCode is ftrun's exit status for r (see the Exit constants): a timeout
// first, then an interrupt, then an abort, then the survivors: 0 when every
// rank that did not fail exited with status 0 and at least one survived.
func (r *Result) ExitCode() int {
	switch {
	case r.TimedOut:
		return ExitTimeout
	case r.Signal != 0:
		return exitSignaled + int(r.Signal)
	case r.Aborted:
		return r.abortStatus()
	}
	survivors := 0
	for _, s := range r.Ranks {
		if s.Failed {
			continue
		}
		if !s.OK() {
			return ExitFailed
		}
		survivors++
	}
	if survivors == 0 {
		return ExitFailed
	}
	return ExitOK
}

// abortStatus is ftrun's exit status after --no-ft aborted the job: that
// of the rank whose failure did it.
func (r *Result) abortStatus() int {
	if r.AbortedBy < 0 || int(r.AbortedBy) >= len(r.Ranks) {
		return ExitFailed
	}
	switch s := r.Ranks[r.AbortedBy]; {
	case s.Signal != 0:
		return exitSignaled + int(s.Signal)
	case s.Code > 0 && s.Code < 256:
		return s.Code
	}
	return ExitFailed
}

// Start starts the job opts describes: a fresh secret and job id, a
// rendezvous server, and opts.N ranks, each in a session of its own:
// on this host, or in blocks over opts.Hosts, where the ftrun agent of each
// remote host starts that host's ranks. The rendezvous listens on 127.0.0.1,
// or, when there are remote hosts, on this host's IP of the connection to the
// first agent. The --kill and --timeout timers start when every rank has
// started. If a rank cannot be started, the ranks already started are killed
// and Start returns an error.
func Start(opts *Config) (*Job, error) {
	o := *opts
	opts = &o
	plan, err := planJob(opts)
	if err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	blocks, size := plan.blocks, opts.N+opts.Spares
	j := &Job{opts: *opts, done: make(chan struct{}), ending: make(chan struct{}), transportWhy: plan.why, tm: timingFor(opts), local: plan.local,
		spares: opts.Spares, nextSpare: opts.N, path: plan.path, localCap: len(plan.local), hostName: hostName()}
	if opts.OutputFilename != "" {
		// DIR on this host first (ftrun writes the report here, whether
		// or not it runs ranks), then on the agents' hosts below.
		if err := j.prepareOutput(size); err != nil {
			return nil, fmt.Errorf("launcher: %w", err)
		}
	}
	if opts.Hostfile == "" && opts.HostList == "" && len(opts.Hosts) == 0 && !plan.multi {
		j.localCap = max(len(plan.local), localSlots()) // the job of this host alone: a slot per CPU
	}
	for _, b := range blocks {
		if !b.remote() {
			j.localCap = max(j.localCap, b.slots) // the hostfile's slots of this host
		}
	}
	j.opts.Transport = plan.transport
	j.out = &sink{stdout: opts.Stdout, stderr: opts.Stderr}
	if j.out.stdout == nil {
		j.out.stdout = os.Stdout
	}
	if j.out.stderr == nil {
		j.out.stderr = os.Stderr
	}
	// The job's root secret never leaves ftrun: the ranks get a key derived
	// from it, each host's agent link another.
	root := make([]byte, secretSize)
	rand.Read(root)
	j.secret = seclink.DeriveKey(root, "ftrma job ranks")
	id := make([]byte, 6)
	rand.Read(id)
	j.id = hex.EncodeToString(id)

	// The agents first: the connection to the first one says which of this
	// host's addresses the other hosts reach it at.
	listen := "127.0.0.1:0"
	if plan.multi {
		if err := j.connectHosts(blocks, root, plan.cuts); err != nil {
			return nil, fmt.Errorf("launcher: %w", err)
		}
		listen = net.JoinHostPort(j.hostAddr, "0")
	}
	j.placeRanks(blocks, size)
	if err := j.listenRendezvous(blocks, size, listen); err != nil {
		j.abandon()
		return nil, err
	}
	if seal, _ := sealOf(opts, os.Getenv); seal == jobwire.SealNone {
		how := "--data-plain"
		if !opts.DataPlain {
			how = jobwire.EnvSeal + "=" + seal
		}
		j.out.reportf("%s: the ranks' TCP data between hosts crosses the network in clear, authenticated only when each connection is made", how)
	}
	switch {
	case opts.arbitrated:
		j.startArbiter(root, blocks)
	case opts.Arbiter:
		j.out.reportf("--arbiter: the job runs on this host alone, where ftrun alone decides: no arbiter runs")
	}
	if jobwire.SharesMemory(plan.transport) && len(plan.local) > 0 {
		// Before any rank makes a segment: an ftrun killed by SIGKILL
		// leaves them, and the next ftrun sweeps them (shmsweep.go).
		if release, err := claimShm(j.id); err != nil {
			j.out.reportf("%v (a SIGKILL of ftrun would leave the job's shared memory)", err)
		} else {
			j.releaseShm = release
		}
	}
	j.base = append(os.Environ(), j.opts.Export...) // -x wins: exec keeps the last
	stdin, err := j.launch(blocks, size)
	if err != nil {
		j.failStart(stdin)
		return nil, fmt.Errorf("launcher: %w", err)
	}
	switch {
	case len(stdin) == 0:
	case stdinReadable():
		go forwardStdin(os.Stdin, stdin, j.out.reportf)
	default:
		j.out.reportf("ftrun runs in the background of its terminal: it forwards no standard input (--stdin)")
		forwardStdin(eofReader{}, stdin, j.out.reportf)
	}
	j.mu.Lock()
	for _, k := range opts.Kills {
		j.timers = append(j.timers, time.AfterFunc(k.After, func() { j.kill(k) }))
	}
	j.armInjectionsLocked(plan.kills)
	if opts.Timeout > 0 {
		j.timers = append(j.timers, time.AfterFunc(opts.Timeout, j.timeout))
	}
	j.mu.Unlock()
	go j.finish()
	return j, nil
}

// jobPlan is what Start decides from the options before it starts anything.
type jobPlan struct {
	blocks    []hostBlock
	multi     bool         // the ranks run on more than this host
	local     []ftrma.Rank // the ranks ftrun runs itself, on this host
	path      string       // the program, looked up on this host when it runs ranks
	transport string
	why       string // why that transport (-v)
	kills     []hostInject
	cuts      []hostInject
}

// planJob checks the options and plans the job: the hosts' blocks of
// ranks, the injected failures, the transport. It fills in opts.Spares
// (--respawn without a count), cpuStretch, arbitrated and hostVerdict.
func planJob(opts *Config) (jobPlan, error) {
	var p jobPlan
	blocks, err := planHosts(opts)
	if err != nil {
		return p, err
	}
	if opts.N < 1 {
		return p, fmt.Errorf("job of %d ranks: %w", opts.N, ftrma.ErrInvalid)
	}
	if err := checkStdin(opts.Stdin, opts.N); err != nil {
		return p, fmt.Errorf("%w: %w", err, ftrma.ErrInvalid)
	}
	if opts.Spares < 0 {
		opts.Spares = opts.N // --respawn without a count
	}
	for _, k := range opts.Kills {
		if k.Rank < 0 || int(k.Rank) >= opts.N {
			return p, fmt.Errorf("--kill %v: no rank %d in a job of %d: %w", k, k.Rank, opts.N, ftrma.ErrInvalid)
		}
	}
	if p.kills, p.cuts, err = planInjections(opts, blocks); err != nil {
		return p, err
	}
	p.blocks, p.multi = blocks, multiHost(blocks)
	hosts := 1 // ftrun's, with its own ranks or none
	for _, b := range blocks {
		if b.remote() {
			hosts++
			continue
		}
		p.local = append(p.local, b.ranks...)
		if p.path, err = exec.LookPath(opts.Prog); err != nil {
			return p, err
		}
	}
	opts.cpuStretch = failure.RanksPerCPU(len(p.local), runtime.NumCPU())
	opts.arbitrated = !opts.NoArbiter && p.multi
	if opts.arbitrated {
		opts.hostVerdict = arbiter.VerdictBound(arbiterConfig(hosts, timingFor(opts).lease))
	}
	p.transport, p.why, err = chooseTransport(opts.Transport, opts.N+opts.Spares, opts.Spares, p.multi, opts.VerbsDevice, opts.VerbsGID)
	return p, err
}

// prepareOutput makes --output-filename's directory on this host.
func (j *Job) prepareOutput(size int) error {
	if err := checkOutputFilename(j.opts.OutputFilename); err != nil {
		return err
	}
	dir, err := filepath.Abs(j.opts.OutputFilename)
	if err != nil {
		return fmt.Errorf("--output-filename: %w", err)
	}
	j.files = &outputFiles{dir: dir, size: size, tag: j.opts.TagOutput}
	return j.files.prepare(j.hostName)
}

// connectHosts starts the agents of the other hosts and links to them,
// learning the address of this host they reach (j.hostAddr), and prepares
// their output directories and the injected cuts.
func (j *Job) connectHosts(blocks []hostBlock, root []byte, cuts []hostInject) error {
	if err := j.connectAgents(blocks, root); err != nil {
		return err
	}
	j.hostAddr = j.links[0].localIP()
	if j.files != nil {
		if err := j.prepareAgentFiles(); err != nil {
			j.abandon()
			return err
		}
	}
	if err := j.prepareCuts(cuts, blocks); err != nil {
		j.abandon()
		return err
	}
	return nil
}

// placeRanks makes the job's table of ranks and hosts.
func (j *Job) placeRanks(blocks []hostBlock, size int) {
	j.declared = make([]bool, size)
	j.suspicions = make(map[ftrma.Rank]*suspicion)
	j.ranks = make([]*rankProc, size)
	for r := range j.ranks {
		j.ranks[r] = &rankProc{rank: ftrma.Rank(r)}
	}
	for _, b := range blocks {
		host := j.hostName
		if b.remote() {
			host = b.label()
		}
		for _, r := range b.ranks {
			j.ranks[r].host = host
		}
	}
	j.start = time.Now()
	j.blocks = blocks
	for _, b := range blocks {
		j.hosts = append(j.hosts, &jobHost{link: b.link, label: b.label(), slots: b.capacity(), spare: b.spare, ranks: b.ranks})
	}
}

// listenRendezvous starts the rendezvous server the ranks join at listen.
func (j *Job) listenRendezvous(blocks []hostBlock, size int, listen string) error {
	rc := rvConfig{Size: size, Initial: j.opts.N, Secret: j.secret, HostOf: make([]int, j.opts.N), ListenAddr: listen,
		Logger: logfLogger(j.out.reportf, "", slog.LevelInfo), Suspect: j.suspect}
	for _, b := range blocks {
		for _, r := range b.ranks {
			rc.HostOf[r] = j.hostIndex(b.link)
		}
	}
	if j.spares > 0 {
		rc.Spawn, rc.Complete = j.spawn, j.publishBook
	}
	var err error
	j.rv, err = listenRendezvous(rc)
	return err
}

// launch starts the ranks of every block: this host's itself, the others'
// through their agents. It returns the ranks that get ftrun's standard
// input, also those started before an error.
func (j *Job) launch(blocks []hostBlock, size int) ([]*stdinDest, error) {
	stdinRanks := j.opts.stdinRanks()
	var stdin []*stdinDest
	cwd, _ := os.Getwd()
	for _, b := range blocks {
		var err error
		if b.link != nil {
			err = j.launchRemote(b, cwd, stdinRanks, &stdin)
		} else {
			err = j.launchLocal(b, size, stdinRanks, &stdin)
		}
		if err != nil {
			return stdin, err
		}
	}
	return stdin, nil
}

// launchLocal starts block b's ranks on this host, each bound to a CPU of
// its own with --bind-to core.
func (j *Job) launchLocal(b hostBlock, size int, stdinRanks []ftrma.Rank, stdin *[]*stdinDest) error {
	cpus := make([]int, len(b.ranks))
	for i := range cpus {
		cpus[i] = -1
	}
	if j.opts.BindTo == BindCore {
		var err error
		if cpus, err = bindCPUs(len(b.ranks)); err != nil {
			return err
		}
	}
	for i, r := range b.ranks {
		vars := rankVars(r, size, b.ranks, j.rv.addr(), j.hostSecret(0), 0, j.id, j.hostAddr, &j.opts)
		var in *os.File
		if slices.Contains(stdinRanks, r) {
			var w *os.File
			var err error
			if in, w, err = os.Pipe(); err != nil {
				return err
			}
			*stdin = append(*stdin, &stdinDest{rank: r, w: w})
		}
		err := j.startRank(j.path, j.ranks[r], rankEnv(j.base, vars, len(b.ranks)), cpus[i], in)
		if in != nil {
			in.Close() // the rank holds its own
		}
		if err != nil {
			return fmt.Errorf("start rank %d: %w", r, err)
		}
		if j.opts.ReportBindings {
			j.out.reportf("rank %d on %s: %s", r, j.hostName, bindingText(cpus[i]))
		}
	}
	return nil
}

// failStart undoes a start-up that failed while starting ranks: every rank
// started is killed, the agents end theirs, the rendezvous closes.
func (j *Job) failStart(stdin []*stdinDest) {
	j.mu.Lock()
	j.quiet = true
	for _, p := range j.ranks {
		j.signalLocked(p, syscall.SIGKILL)
	}
	j.mu.Unlock()
	j.abandon() // the agents kill their ranks; the links report them lost
	for _, d := range stdin {
		if d.w != nil {
			d.w.Close()
		}
	}
	j.wg.Wait()
	j.rv.close()
	j.removeShm()
}

// abandon closes the agents' links, ends the agents ftrun started and
// leaves the host group: a start-up that failed.
func (j *Job) abandon() {
	j.stopArbiter(false)
	for _, l := range j.links {
		l.close()
	}
	if j.dial != nil {
		j.dial.stop(j.tm.timeout)
	}
	j.stopMembers()
}

// removeShm removes what is left of the job's shared memory once its ranks
// here have ended, then the job's owner file. Ranks remove their own
// segments when they close; a killed rank cannot, so the launcher removes
// whatever of the job is left.
func (j *Job) removeShm() {
	switch j.opts.Transport {
	case TransportSHM:
		if err := shm.RemoveJob("", j.id); err != nil {
			j.out.reportf("removing the job's shared memory: %v", err)
		}
	case TransportHybrid, TransportVerbsHybrid:
		// Only this host's ranks: the agents remove their own, and the
		// others' files may be in use still where hosts share /dev/shm
		// (namespaces of one machine, containers), their ranks alive
		// without ftrun (--arbiter).
		j.mu.Lock()
		local := slices.Clone(j.local)
		j.mu.Unlock()
		if err := shm.RemoveRanks("", j.id, local); err != nil {
			j.out.reportf("removing the job's shared memory: %v", err)
		}
	}
	if j.releaseShm != nil {
		j.releaseShm()
		j.releaseShm = nil
	}
}

// Size is the number of ranks of the job.
func (j *Job) Size() int { return j.opts.N }

// Placement says where the ranks run, one line per host, e.g.
// "h2: ranks [4 5 6 7] (agent started by ssh)".
func (j *Job) Placement() []string {
	var out []string
	for _, b := range j.blocks {
		how := "started by ftrun"
		switch {
		case b.start != "":
			how = "agent started by " + b.start
		case b.addr != "":
			how = "running agent"
		}
		what := fmt.Sprintf("ranks %v", b.ranks)
		if len(b.ranks) == 0 {
			what = "spare ranks only, " + plural(b.capacity(), "slot")
		}
		out = append(out, fmt.Sprintf("%s: %s (%s)", b.label(), what, how))
	}
	return out
}

// launchRemote has the agent of b start b's ranks, then follows them.
func (j *Job) launchRemote(b hostBlock, cwd string, stdinRanks []ftrma.Rank, stdin *[]*stdinDest) error {
	size := j.opts.N + j.spares
	spec := &launchSpec{job: j.id, prog: j.opts.Prog, dir: cwd, args: j.opts.Args, size: size, linkTimeout: j.tm.timeout, export: j.opts.Export,
		bind: j.opts.BindTo == BindCore}
	for _, r := range b.ranks {
		// The agent adds FTRMA_HOST_ADDR: only it knows its address.
		h := j.hostIndex(b.link)
		spec.ranks = append(spec.ranks, launchRank{rank: r, env: rankVars(r, size, b.ranks, j.rv.addr(), j.hostSecret(h), h, j.id, "", &j.opts)})
		if slices.Contains(stdinRanks, r) {
			spec.stdin = append(spec.stdin, r)
		}
	}
	pids, err := b.link.launch(spec)
	if err != nil {
		return err
	}
	for _, r := range spec.stdin {
		*stdin = append(*stdin, &stdinDest{rank: r, link: b.link})
	}
	if j.opts.ReportBindings {
		host := b.name
		if host == "" {
			host = b.link.addr
		}
		for _, p := range pids {
			j.out.reportf("rank %d on %s: %s", p.rank, host, bindingText(p.cpu))
		}
	}
	j.mu.Lock()
	for _, r := range b.ranks {
		p := j.ranks[r]
		p.link, p.exit, p.running = b.link, make(chan exitedMsg, 1), true
		p.fwd.Add(2)
		j.wg.Add(1)
		go j.waitRank(p)
	}
	j.mu.Unlock()
	b.link.run(j)
	return nil
}

// prefix is what --tag-output puts before rank r's lines.
func (j *Job) prefix(r ftrma.Rank) string {
	if !j.opts.TagOutput {
		return ""
	}
	return "[" + strconv.Itoa(int(r)) + "] "
}

// ID is the job's id, as the ranks see it in FTRMA_JOB.
func (j *Job) ID() string { return j.id }

// Transport is the transport the ranks use (TransportSHM or TransportTCP)
// and why it was chosen.
func (j *Job) Transport() (string, string) { return j.opts.Transport, j.transportWhy }

// Done is closed when every rank has exited.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait waits for every rank to exit and returns how the job ended.
func (j *Job) Wait() *Result {
	<-j.done
	return j.result
}

// Interrupt forwards sig (SIGINT or SIGTERM, as ftrun received it) to every
// running rank's process group. A second Interrupt kills the ranks with SIGKILL.
func (j *Job) Interrupt(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	j.interrupts++
	j.endOnce.Do(func() { close(j.ending) })
	if j.interrupts == 1 {
		j.signal = sig
		j.out.reportf("got %v: forwarding it to the ranks (again to kill them)", sig)
		for _, p := range j.ranks {
			j.signalLocked(p, sig)
		}
		return
	}
	j.out.reportf("got %v again: killing the ranks", sig)
	for _, p := range j.ranks {
		j.signalLocked(p, syscall.SIGKILL)
	}
}

// startRank starts rank p on this host and the goroutines that forward its
// output and wait for it.
func (j *Job) startRank(path string, p *rankProc, env []string, cpu int, stdin *os.File) error {
	var files [2]*rankFile
	if j.files != nil {
		var err error
		if files, err = j.files.open(p.rank, j.hostName); err != nil {
			return err
		}
		for _, f := range files {
			f.report = func(err error) { j.out.reportf("rank %d: writing its output: %v", p.rank, err) }
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(files)
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		closeFiles(files)
		return err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{j.opts.Prog}, j.opts.Args...),
		Env:         env,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: sysProcAttr(),
	}
	if stdin != nil { // else /dev/null (a typed nil would not do)
		cmd.Stdin = stdin
	}
	err = startOn(cmd, cpu)
	outW.Close() // the rank holds its own copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		closeFiles(files)
		return err
	}
	prefix := j.prefix(p.rank)
	j.mu.Lock()
	p.cmd, p.pipes, p.files, p.running = cmd, [2]*os.File{outR, errR}, files, true
	j.mu.Unlock()
	p.fwd.Add(2)
	go func() { defer p.fwd.Done(); forwardLines(j.out, j.out.stdout, outR, prefix, files[0]) }()
	go func() { defer p.fwd.Done(); forwardLines(j.out, j.out.stderr, errR, prefix, files[1]) }()
	j.wg.Add(1)
	go j.waitRank(p)
	return nil
}

// waitRank reaps p (or learns from its agent that it was reaped), lets the
// rendezvous know, drains p's output and reports an unclean exit.
func (j *Job) waitRank(p *rankProc) {
	defer j.wg.Done()
	st := RankStatus{Rank: p.rank, Code: -1}
	unheard := false // ftrun left the job without a word on the rank: tell nobody
	if p.link != nil {
		m := j.awaitRemoteEnd(p)
		switch {
		case m.lost != "" && j.rv.giveUpSpare(p.rank, m.lost):
			// A spare lost before its admission: nobody heard of it.
			st.lost = m.lost
		case m.lost != "" && j.word != nil:
			// Under the arbiter the rank's lease comes from its agent,
			// not from ftrun: ftrun's clock proves nothing, and the
			// arbiter's word decides (it applies the rank's exit, its
			// failure, or its host's), or the process's own hang-up.
			// If ftrun leaves the job first (watchQuorum), or is told to
			// end it, the rank is reported lost, and nobody is told
			// anything.
			end := j.word.end(p.rank)
			select {
			case <-end.done:
				switch e := end.e; {
				case e.Kind == arbiter.EventRankExited && e.Code == 0:
					st.Code = 0
				case e.Kind == arbiter.EventRankExited:
					st.lost = fmt.Sprintf("%s; its agent reported to the arbiter that it exited with status %d", m.lost, e.Code)
				default:
					st.lost = fmt.Sprintf("%s; the arbiter declared it failed: %v", m.lost, e.Reason)
				}
			case <-j.rv.hungUpChan(p.rank):
				// The process is gone. Its agent reports how it ended to
				// the arbiter: a short wait lets a clean exit count as one.
				st.lost = m.lost + "; its process closed its connection to ftrun"
				select {
				case <-end.done:
					if e := end.e; e.Kind == arbiter.EventRankExited && e.Code == 0 {
						st.lost, st.Code = "", 0
					}
				case <-time.After(j.tm.chain().Notice()):
				}
			case <-j.word.left:
				st.lost = m.lost + "; no verdict came before ftrun left the job"
				unheard = true
			case <-j.ending:
				// A signal or --timeout: ftrun cannot reach the rank to
				// stop it, and does not wait for the arbiter's word.
				st.lost = m.lost + "; ftrun was ending the job before a verdict came"
				unheard = true
			}
		case m.lost != "":
			// Nobody saw the process end: it may still run, cut off.
			// It stops by itself once its lease runs out; only then do
			// the others hear that it failed.
			// Unless the process itself hung up on ftrun: then it is
			// gone (rvServer.hangUp), as when a host's processes are
			// all killed and only its agent's link told ftrun.
			at := j.rv.revoke(p.rank)
			wait := time.NewTimer(time.Until(at.Add(j.tm.leaseWait())))
			select {
			case <-wait.C:
				st.lost = m.lost
			case <-j.rv.hungUpChan(p.rank):
				wait.Stop()
				st.lost = m.lost + "; its process closed its connection to ftrun"
			}
		case m.text != "":
			st.err = errors.New(m.text)
		case m.signal != 0:
			st.Signal = m.signal
		default:
			st.Code = m.code
		}
	} else {
		err := p.cmd.Wait()
		// The process is gone: the ranks of this host learn it from its
		// shared memory at once, before the exit notice reaches them.
		j.mu.Lock()
		wake := j.local
		j.mu.Unlock()
		if err := shm.MarkExited("", j.id, p.rank, wake); err != nil {
			j.out.reportf("%v", err)
		}
		if ps := p.cmd.ProcessState; ps == nil {
			st.err = err
		} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = ws.Signal()
		} else {
			st.Code = ps.ExitCode()
		}
		if j.arb != nil {
			j.arb.reportExit(p.rank, st.Code) // this host's rank: ftrun saw it end
		}
	}
	j.mu.Lock()
	p.running = false
	killed, quiet, declared := p.killed, j.quiet, j.declared[p.rank]
	j.mu.Unlock()
	st.Killed, st.Declared, st.At = killed, declared, time.Since(j.start)
	// A spare that ended before it was admitted failed to start: its
	// spawn reported it; it is no survivor either way.
	st.Failed = st.Signal != 0 || declared || st.lost != "" || !st.OK() && !j.rv.isPresent(p.rank)
	if !unheard {
		j.rv.rankExited(p.rank, st.String(), st.OK())
	}
	if j.opts.NoFT && !st.OK() {
		j.abort(p.rank)
	}

	if p.link != nil {
		p.fwd.Wait() // the agent bounds it (outputGrace), or the broken link ends it
	} else {
		drainOutput(&p.fwd, p.pipes, p.files)
	}
	j.mu.Lock()
	p.status = st
	aborted := j.aborted
	j.mu.Unlock()
	switch {
	case quiet:
	case st.Failed:
		j.out.reportf("rank %d failed at %.3fs: %v", p.rank, st.At.Seconds(), st)
	case !st.OK() && !(aborted && st.Signal == syscall.SIGKILL):
		j.out.reportf("rank %d %v", p.rank, st)
	}
}

// suspect handles rank by's report that its failure detector declared rank r
// failed: r no longer counts as a survivor and, should it still run (a false
// suspicion, or a stopped process), it is killed so that it cannot act on
// the survivors' memory.
//
// Only a rank in good standing accuses: a suspicion from a rank that is
// itself declared failed or gone (ended, killed, or lost with its host) is
// dropped. Such a rank was cut off from the others, and its suspicions,
// held up on a cut link, arrive after a heal; acting on them would kill the
// side that went on.
func (j *Job) suspect(r, by ftrma.Rank) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished || j.declared[r] {
		return
	}
	if j.arb != nil {
		j.arb.reportSuspect(r, by) // the arbiter has its own rules (it probes)
	}
	if j.rv != nil && !j.rv.isPresent(r) {
		j.out.reportf("ignored rank %d's suspicion of rank %d: rank %d is a spare not admitted", by, r, r)
		return
	}
	if j.declared[by] || !j.ranks[by].running {
		j.out.reportf("ignored rank %d's suspicion of rank %d: rank %d is itself declared failed or gone", by, r, by)
		return
	}
	if j.rv == nil { // no supervision channels to ask (tests)
		j.declareLocked(r, by)
		return
	}
	// A slow rank is not a failed one: ask the suspect first. A process
	// that answers on its supervision channel is running; it is left
	// alone, and its observer, which reports it again while it stays
	// silent, sees its heartbeats come back. One that does not answer
	// within half a lease term, or stays suspected for three terms, is
	// killed.
	now := time.Now()
	ep := j.suspicions[r]
	if ep == nil || now.Sub(ep.last) > j.tm.lease {
		ep = &suspicion{first: now}
		j.suspicions[r] = ep
	}
	ep.last = now
	if ep.probing {
		return
	}
	ep.probing = true
	go func() {
		alive := now.Sub(ep.first) < j.tm.chain().Persist() && j.rv.probe(r, j.tm.chain().Probe())
		j.mu.Lock()
		defer j.mu.Unlock()
		ep.probing = false
		if j.finished || j.declared[r] {
			return
		}
		if j.declared[by] {
			// Two ranks that cannot reach each other (a link cut
			// between them) accuse each other; once one is declared,
			// the other's accuser is gone: one is enough.
			j.out.reportf("dropped rank %d's suspicion of rank %d: rank %d was declared failed meanwhile", by, r, by)
			return
		}
		if alive {
			j.out.reportf("rank %d, suspected by rank %d's detector at %.3fs, answered ftrun: slow, not failed; not killed", r, by, time.Since(j.start).Seconds())
			return
		}
		j.declareLocked(r, by)
	}()
}

// suspicion is an episode of suspicions of one rank (Job.suspect).
type suspicion struct {
	first, last time.Time
	probing     bool
}

// declareLocked declares rank r failed on rank by's suspicion and kills it
// should it still run; the others hear of it when it is reaped, or, if its
// host cannot be reached, once its lease has surely run out. j.mu is held.
func (j *Job) declareLocked(r, by ftrma.Rank) {
	j.declared[r] = true
	p := j.ranks[r]
	if p.running {
		j.out.reportf("rank %d was declared failed by rank %d's detector at %.3fs: killing it", r, by, time.Since(j.start).Seconds())
		j.signalLocked(p, syscall.SIGKILL) // kills a stopped process too, without letting it run
	}
}

// abort carries out --no-ft after rank r ended abnormally: every other rank
// is killed.
func (j *Job) abort(r ftrma.Rank) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished || j.aborted {
		return
	}
	j.aborted, j.abortedBy = true, r
	j.out.reportf("--no-ft: rank %d failed: aborting the job", r)
	for _, p := range j.ranks {
		j.signalLocked(p, syscall.SIGKILL)
	}
}

// finish waits for every rank, stops the timers, the agents' connections and
// the rendezvous server, and records the result.
func (j *Job) finish() {
	j.wg.Wait()
	j.removeHoles()
	j.arbiterCatchUp()
	// The agents first: a link closed at the job's end stops an agent's
	// node at once, while ftrun's mesh closing first would look to it like
	// ftrun's death and start an election (arbiter.Node.LeaderGone).
	for _, l := range j.links {
		l.close()
	}
	j.stopArbiter(true)
	if j.dial != nil {
		j.dial.stop(j.tm.timeout) // the agents end with their links
	}
	j.stopMembers()
	j.removeShm()
	j.mu.Lock()
	j.finished = true
	for _, t := range j.timers {
		t.Stop()
	}
	res := &Result{TimedOut: j.timedOut, Signal: j.signal, Aborted: j.aborted, AbortedBy: j.abortedBy}
	var failed []string
	survivors := 0
	for _, p := range j.ranks[:j.nextSpare] { // spares never started are no ranks of the result
		res.Ranks = append(res.Ranks, p.status)
		if p.status.Failed {
			failed = append(failed, fmt.Sprintf("%d (at %.3fs)", p.rank, p.status.At.Seconds()))
		} else {
			survivors++
		}
	}
	j.result = res
	quiet := j.quiet
	var report JobReport
	if j.files != nil {
		report = j.reportLocked(res)
	}
	j.mu.Unlock()
	if j.dial != nil && !quiet && (res.ExitCode() != ExitOK || len(failed) > 0) {
		// What the agents logged says why a remote rank was lost, also
		// when the survivors ended well.
		j.dial.reportLogs(j.out)
	}
	if len(failed) > 0 && !quiet && !res.Aborted {
		j.out.reportf("%d rank(s) failed: %s; %d survived", len(failed), strings.Join(failed, ", "), survivors)
	}
	if j.files != nil {
		if err := WriteReportFile(j.files.dir, report); err != nil {
			j.out.reportf("--output-filename: cannot write the job's report on host %s: %v", j.hostName, err)
		}
	}
	j.rv.close()
	close(j.done)
}

// reportLocked is the job's report (DIR/report) for its result res. j.mu
// is held.
func (j *Job) reportLocked(res *Result) JobReport {
	r := JobReport{Job: j.id, Ranks: j.opts.N, Spares: j.spares, Exit: res.ExitCode(), End: endWord(res), Took: time.Since(j.start)}
	for _, p := range j.ranks {
		if int(p.rank) >= j.nextSpare {
			r.Rank = append(r.Rank, RankReport{Rank: int(p.rank), State: RankNotStarted})
			continue
		}
		r.Rank = append(r.Rank, rankReport(p.status, p.host, res, j.opts.Kills, j.opts.Timeout))
	}
	return r
}

// kill carries out one --kill.
func (j *Job) kill(k KillSpec) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	p := j.ranks[k.Rank]
	if !p.running {
		j.out.reportf("--kill %v: rank %d had already exited", k, k.Rank)
		return
	}
	p.killed = true
	j.signalLocked(p, syscall.SIGKILL)
	// Reported under j.mu, so before the rank's exit is.
	j.out.reportf("killed rank %d (--kill %v)", k.Rank, k)
}

// timeout carries out --timeout.
func (j *Job) timeout() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	j.timedOut = true
	j.endOnce.Do(func() { close(j.ending) })
	j.out.reportf("timeout (%v) expired: killing the job", j.opts.Timeout)
	for _, p := range j.ranks {
		j.signalLocked(p, syscall.SIGKILL)
	}
}

// signalLocked sends sig to p's process group if p has not been reaped (once
// reaped, its pid may belong to another process); for a remote rank it asks
// the agent to. j.mu must be held.
func (j *Job) signalLocked(p *rankProc, sig syscall.Signal) {
	if !p.running {
		return
	}
	if p.link != nil {
		p.link.signal(p.rank, sig) // the agent, too, signals only an unreaped rank
		return
	}
	// ESRCH (the rank is dead but not yet reaped) needs no action.
	syscall.Kill(-p.cmd.Process.Pid, sig)
}

// awaitRemoteEnd waits for the end of rank p of an agent's host: its
// agent's word (an exit, or the link lost). Under the arbiter a verdict on
// the rank (its failure, or its host's) ends the wait too: the rank is
// declared once the arbiter says so, not once ftrun's own link to the
// host times out (memberlist and the link stretch with the crowding, and
// took two seconds more at four ranks per CPU: the survivors' writes
// waited for them). The verdict is then in j.word, and the message says
// that the agent had not reported the rank's end; but a rank the arbiter
// found unresponsive, which its agent killed and reaped before it answered
// the probe, gets a notice's time for that report (its exit status).
func (j *Job) awaitRemoteEnd(p *rankProc) exitedMsg {
	if j.word == nil {
		return <-p.exit
	}
	end := j.word.end(p.rank)
	select {
	case m := <-p.exit:
		return m
	case <-end.done:
	}
	switch {
	case end.e.Kind == arbiter.EventRankExited:
		return <-p.exit // an exit: its agent's report has the code and the output
	case end.e.Reason == arbiter.ReasonUnresponsive:
		// Its agent killed and reaped it before it answered the
		// arbiter's probe: its report of the exit is on the way.
		select {
		case m := <-p.exit:
			return m
		case <-time.After(j.tm.chain().Notice()):
		}
	}
	return exitedMsg{rank: p.rank, code: -1, lost: "its agent had not reported its end"}
}
