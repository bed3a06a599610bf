package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// The job's replicated arbiter (launcher/internal/arbiter; the default over several
// hosts, ftrun --no-arbiter turns it off) runs among ftrun (node 1) and the
// agents (node h+1 on the job's host h, in the order of the hosts): it
// elects its leader, grants host leases, which bound every rank's lease,
// and reaches the verdicts on ranks and hosts that the supervisors pass to
// the ranks (launcher/internal/arbiter/WIRING.md), and every node logs them. At the
// end ftrun logs one summary line (arbDriver.summary) that sets the
// arbiter's verdicts beside ftrun's.
//
// Set-up, on the agent links, after members and outfiles and before the
// launch (arbiterwire.go): ftrun has every agent listen (msgArbiterListen;
// each answers with its address, msgArbiterAddr), listens itself, then
// sends each agent its node's config (msgArbiterConfig: node id, voters,
// the peers' addresses and the keys of its own pairs, the timing), and
// starts its own node. Timing: arbiter.Config's defaults, with LeaseTerm
// the job's lease (hostTiming.lease: under the arbiter it does not stretch
// with the crowding) and Margin rankMargin's, so the arbiter's bounds
// compose with failure.Chain's. A job on one host
// runs no arbiter (ftrun alone decides there, as the arbiter's rule says
// of a single host): --arbiter is then a no-op, said once.
//
// The hosts' inputs: each host reports the exits of its own ranks
// (ReportExit: ftrun for its host's, each agent for its own), ftrun the
// suspicions its rendezvous gets (ReportSuspect), the spares it starts
// (ClaimSpare before the process starts, JoinSpare before any rank hears
// of it) and the first ranks' addresses (PublishAddresses); the agents'
// part in spares once ftrun is gone is agentspare.go's.
//
// The end: ftrun stops its node when every rank has ended, then closes the
// links, and each agent stops its node when its link closes. An agent
// whose link to ftrun is lost (broken or silent, not closed) keeps its
// node up to arbiter.VerdictBound longer, or until the log declares
// ftrun's host or its own failed and then two election timeouts more (for
// the others to apply it too: a leader that stopped at once would take
// its commit with it), so that the arbiter's verdict on a lost ftrun is
// reached and logged. An agent's ranks take their lease from it and
// outlive its link to ftrun while its node acts (supervisor.go,
// agentJob.outlive): a link that ends while ranks run counts as lost, and
// the node stays up, after them, as above.
// Each node's log lines go to its log (ftrun's standard error; an agent's,
// which ssh or srun hold and ftrun shows only when the agent fails to
// start) and, with --output-filename DIR, to DIR/1/arbiter.N on its own
// host (N the node id; each line after its time, RFC 3339): there they
// survive the loss of ftrun.

// rankMargin is the arbiter's Margin for a job whose ranks hold leases of
// term from their host's supervisor: how long past a silent host's last
// lease the leader waits before it declares the host failed. A rank's
// lease ends no later than its host's (supervisorGrant), and a rank that
// finds it run out asks once more and stops at the end of its rescue, a
// quarter term later (startup.Session); holding new collectives meanwhile,
// it exits then. The margin covers that quarter, the clocks' drift (2ρ of
// a term: 20 ms at a 1 s term) and an eighth of a term for the process to
// exit: three eighths (375 ms at a 1 s term), where the arbiter's default
// of half a term would keep the survivors' writes waiting 125 ms longer.
func rankMargin(term time.Duration) time.Duration { return term * 3 / 8 }

// arbiterConfig is node 1's arbiter configuration for a job over hosts
// hosts (ftrun's included) whose ranks' lease term is lease, without its
// membership (RankHost), defaults filled: the timing every node of the job
// runs with, from which the ranks' chain of bounds takes the arbiter's
// verdict bound (Config.hostVerdict).
func arbiterConfig(hosts int, lease time.Duration) arbiter.Config {
	return arbiter.Config{ID: 1, Hosts: hosts, Voters: arbiter.DefaultVoters(hosts),
		LeaseTerm: lease, Margin: rankMargin(lease)}.WithDefaults()
}

// startArbiter starts the job's arbiter (see above). It reports and gives
// up (the job runs without it) when an agent cannot take part.
func (j *Job) startArbiter(root []byte, blocks []hostBlock) {
	fail := func(err error) {
		j.out.reportf("--arbiter: the arbiter does not run: %v", err)
	}
	hosts := 1 + len(j.links)
	names := []string{j.hostName}
	index := make(map[*agentLink]int)
	for i, l := range j.links {
		index[l] = i + 1
		names = append(names, l.addr)
	}
	rankHost := make([]int, j.opts.N)
	for _, b := range blocks {
		for _, r := range b.ranks {
			if int(r) < len(rankHost) && b.link != nil {
				rankHost[r] = index[b.link]
			}
		}
	}
	cfg := arbiterConfig(hosts, j.tm.lease)
	cfg.RankHost = rankHost
	if err := cfg.Validate(); err != nil {
		fail(err)
		return
	}
	addrs := make([]string, hosts)
	if err := j.arbiterAddrs(addrs[1:]); err != nil {
		fail(err) // the agents that listen stop when the launch comes
		return
	}
	ln, err := listenArbiter(j.hostAddr)
	if err != nil {
		fail(err)
		return
	}
	addrs[0] = ln.Addr().String()
	logDir := ""
	if j.files != nil {
		logDir = j.files.jobDir()
	}
	for i, l := range j.links {
		m := arbiterMsgFor(uint64(i+2), cfg, names, addrs, root, logDir)
		m.spareEnv = j.spareEnv(i + 1)
		l.conn.SetWriteDeadline(time.Now().Add(agentTimeout))
		jobwire.WriteFrame(l.conn, msgArbiterConfig, m.append(nil)) // a failed write fails the launch next
		l.conn.SetWriteDeadline(time.Time{})
	}
	own := arbiterMsgFor(1, cfg, names, addrs, root, logDir)
	level := slog.LevelInfo
	if j.opts.Verbose {
		level = slog.LevelDebug
	}
	file, ferr := openArbiterLog(logDir, 1)
	if ferr != nil {
		j.out.reportf("--arbiter: %v", ferr)
	}
	logger := arbiterLogger(j.out.reportf, level, file)
	mesh := startMesh(ln, 1, own.peers, meshTimingFor(cfg), logger)
	// ftrun's prober, for its own host's ranks: it asks, and answers
	// alive whatever comes back, since ftrun's own suspicion handling
	// (Job.suspect) kills a rank of its host that does not answer, and its
	// exit then goes to the arbiter (arbDriver's Probes).
	probe := func(r ftrma.Rank, d time.Duration) (bool, bool) {
		j.rv.probe(r, d)
		return true, true
	}
	d, err := startArbDriver(cfg, mesh, names, logger, probe)
	if err != nil {
		mesh.Close()
		if file != nil {
			file.Close()
		}
		fail(err)
		return
	}
	j.arb, j.arbFile = d, file
	j.word = newArbWord()
	for _, e := range d.onRankEnd(j.word.record) {
		j.word.record(e)
	}
	go j.watchQuorum(d, arbiter.VerdictBound(cfg))
	// The leases of ftrun's own host's ranks end no later than node 1's
	// host lease, as an agent's do with its node's (leaseBound), once the
	// node has acted: before that, while the arbiter comes up, ftrun's
	// grants are as without it.
	term := j.tm.lease
	j.rv.boundLeases(term, func() (bool, time.Time) {
		acting, end, acted := d.hostLeaseOnActing()
		if !acted {
			return true, time.Now().Add(term)
		}
		return acting, end
	})
	logger.Debug(fmt.Sprintf("arbiter: %d nodes, voters %v, lease term %v, tick %v, election timeout %v; verdict bound %v",
		hosts, cfg.Voters, cfg.LeaseTerm, cfg.Tick, cfg.ElectionTimeout(), arbiter.VerdictBound(cfg)))
}

// arbWord is what ftrun's node of the arbiter has applied about ranks'
// ends, and whether ftrun has left the job (watchQuorum). Under --arbiter
// ftrun does not declare a rank of an agent's host that it lost touch
// with by its own clock: the arbiter's word does (Job.waitRank).
type arbWord struct {
	mu   sync.Mutex
	ends map[ftrma.Rank]*rankEnd
	left chan struct{} // closed when ftrun leaves the job
}

// rankEnd is a rank's end as the arbiter applied it: done is closed once e
// holds it.
type rankEnd struct {
	done chan struct{}
	e    arbiter.Event
}

func newArbWord() *arbWord {
	return &arbWord{ends: make(map[ftrma.Rank]*rankEnd), left: make(chan struct{})}
}

// end returns rank r's end, done or to come.
func (w *arbWord) end(r ftrma.Rank) *rankEnd {
	w.mu.Lock()
	defer w.mu.Unlock()
	re := w.ends[r]
	if re == nil {
		re = &rankEnd{done: make(chan struct{})}
		w.ends[r] = re
	}
	return re
}

// record takes an applied end (arbDriver.onRankEnd); the first one counts.
func (w *arbWord) record(e arbiter.Event) {
	re := w.end(e.Rank)
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-re.done:
	default:
		re.e = e
		close(re.done)
	}
}

// watchQuorum says at once when ftrun's node stops acting (its host lease
// from the arbiter ran out: no quorum reaches it) and when it acts again;
// once it has not acted for bound (the arbiter's verdict bound: by then a
// side that holds a quorum has declared ftrun's host failed, for good, or
// no side acts at all), ftrun leaves the job (arbWord.left): it declares
// nothing more, and its lost ranks are reported as such. It ends with the
// node.
func (j *Job) watchQuorum(d *arbDriver, bound time.Duration) {
	where := "their output is lost with ftrun (--output-filename DIR keeps it on their hosts)"
	if j.files != nil {
		where = fmt.Sprintf("the ranks' output is in %s/rank.N on their hosts", j.files.jobDir())
	}
	tick := time.NewTicker(d.cfg.Tick)
	defer tick.Stop()
	var since time.Time // when the node stopped acting; zero while it acts
	for {
		select {
		case <-d.quit:
			return
		case <-tick.C:
		}
		acting, _, acted := d.hostLeaseOnActing()
		switch {
		case !acted:
		case acting && !since.IsZero():
			j.out.reportf("back in the job's quorum after %v: ftrun's arbiter node acts again", time.Since(since).Round(time.Millisecond))
			since = time.Time{}
		case !acting && since.IsZero():
			since = time.Now()
			j.out.reportf("lost the job's quorum (ftrun's arbiter node has no host lease): the job goes on without ftrun where the other hosts hold a quorum; %s", where)
		case !acting && time.Since(since) >= bound:
			j.out.reportf("leaving the job: cut off from the arbiter's quorum for %v, past its verdict bound %v; ftrun declares nothing more", time.Since(since).Round(time.Millisecond), bound.Round(time.Millisecond))
			close(j.word.left)
			return
		}
	}
}

// arbiterAddrs has every agent listen for the mesh, all at once, and
// collects their addresses (by link).
func (j *Job) arbiterAddrs(addrs []string) error {
	for _, l := range j.links {
		l.conn.SetDeadline(time.Now().Add(agentTimeout))
		if err := jobwire.WriteFrame(l.conn, msgArbiterListen, nil); err != nil {
			return fmt.Errorf("agent %s: %w", l.addr, err)
		}
	}
	var errs []error
	for i, l := range j.links {
		typ, p, err := jobwire.ReadFrame(l.conn, maxLaunch)
		l.conn.SetDeadline(time.Time{})
		if err == nil {
			err = jobwire.ExpectFrom(typ, p, msgArbiterAddr, "arbiter addr", "agent")
		}
		var m arbiterAddrMsg
		if err == nil {
			m, err = parseArbiterAddr(p)
		}
		if err == nil && m.addr == "" {
			err = errors.New(m.text)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", l.addr, err))
			continue
		}
		addrs[i] = m.addr
	}
	return errors.Join(errs...)
}

// stopArbiter stops ftrun's node; at the job's end (final) it logs the
// summary, with ftrun's own verdicts beside the arbiter's.
// arbiterCatchUp gives ftrun's arbiter node, at the job's end, a moment
// (arbiterCatchUpWait at most) to apply an end for every rank that ftrun
// started, so that its log and summary say how every rank ended: the
// ranks' exits reach ftrun straight from the agents, sooner than through
// the arbiter's log, and the links close right after (a CI run under -race
// summed up "exits 0" for a job whose four ranks had all ended). It waits
// for nothing on a job without an arbiter, or once the arbiter broke.
func (j *Job) arbiterCatchUp() {
	if j.arb == nil {
		return
	}
	j.mu.Lock()
	n := j.nextSpare
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), arbiterCatchUpWait)
	defer cancel()
	j.arb.waitFor(ctx, func(s *arbStats) bool { return s.ended >= n || s.finished || s.broken != nil })
}

// arbiterCatchUpWait bounds arbiterCatchUp: a few commits' time.
const arbiterCatchUpWait = 2 * time.Second

func (j *Job) stopArbiter(final bool) {
	if j.arb == nil {
		return
	}
	j.arb.close()
	if final {
		var verdicts []rankAt
		j.mu.Lock()
		for _, p := range j.ranks[:j.nextSpare] {
			if p.status.Failed {
				verdicts = append(verdicts, rankAt{rank: p.rank, at: p.status.At})
			}
		}
		j.mu.Unlock()
		slices.SortFunc(verdicts, func(a, b rankAt) int { return int(a.at - b.at) })
		if verdicts == nil {
			verdicts = []rankAt{}
		}
		j.arb.log.Info(j.arb.summary(j.start, verdicts))
	}
	if j.arbFile != nil {
		j.arbFile.Close()
	}
}

// agentArbiter is an agent's node of the job's arbiter.
type agentArbiter struct {
	d      *arbDriver
	file   *os.File
	logDir string // --output-filename's DIR/1, or ""
	// spareEnv is the job's common FTRMA_ variables in a job with
	// spares (arbiterConfigMsg.spareEnv), else empty.
	spareEnv []string
}

// agentArbiterListen is the agent's side of msgArbiterListen: it listens
// on local's IP (its side of the link to ftrun, the host's address in the
// job) and says where, or why not.
func agentArbiterListen(local net.Addr) (net.Listener, arbiterAddrMsg) {
	ln, err := listenArbiter(addrIP(local))
	if err != nil {
		return nil, arbiterAddrMsg{text: err.Error()}
	}
	return ln, arbiterAddrMsg{addr: ln.Addr().String()}
}

// startAgentArbiter starts the agent's node from a msgArbiterConfig, on ln
// (which it owns from then on, or closes).
func startAgentArbiter(p []byte, ln net.Listener, logf func(string, ...any)) (*agentArbiter, error) {
	m, err := parseArbiterConfig(p)
	if err != nil {
		ln.Close()
		return nil, err
	}
	file, ferr := openArbiterLog(m.logDir, m.node)
	if ferr != nil {
		logf("%v", ferr)
	}
	logger := arbiterLogger(logf, slog.LevelInfo, file)
	cfg := m.config()
	mesh := startMesh(ln, m.node, m.peers, meshTimingFor(cfg), logger)
	d, err := startArbDriver(cfg, mesh, m.names, logger, nil)
	if err != nil {
		mesh.Close()
		if file != nil {
			file.Close()
		}
		return nil, err
	}
	return &agentArbiter{d: d, file: file, logDir: m.logDir, spareEnv: m.spareEnv}, nil
}

// finish stops the agent's node at the end of its job, lost: its link to
// ftrun was lost (see above), and logs its summary. With the link lost the
// node stays, whether or not its own ranks have ended, until the arbiter
// has applied every rank's end (then two election timeouts more, so that
// the others apply the last commit too: a leader that left at once would
// take it with it), or until this host is out of the job: declared failed,
// or its node has not acted for the verdict bound (by then the others
// have declared it). A node that left early would take a vote with it: two
// such, of five voters, and the hosts still running would lose their
// quorum, and their ranks.
func (a *agentArbiter) finish(lost bool) {
	if a == nil {
		return
	}
	if lost {
		bound := arbiter.VerdictBound(a.d.cfg)
		self := int(a.d.cfg.ID - 1)
		a.d.log.Info(fmt.Sprintf("arbiter: the link to ftrun is lost: node %d stays until the job's end, or until its host is out of the job (not acting for %v)", a.d.cfg.ID, bound.Round(time.Millisecond)))
		tick := time.NewTicker(a.d.cfg.Tick)
		var stopped time.Time
	wait:
		for {
			select {
			case <-tick.C:
			case <-a.d.quit:
				break wait
			}
			s := a.d.stats()
			switch {
			case s.finished:
				a.d.log.Info("arbiter: every rank of the job has ended")
				select {
				case <-time.After(2 * a.d.cfg.ElectionTimeout()):
				case <-a.d.quit:
				}
				break wait
			case s.hostFailed(self):
				break wait
			case s.acting:
				stopped = time.Time{}
			case stopped.IsZero():
				stopped = time.Now()
			case time.Since(stopped) >= bound:
				a.d.log.Info(fmt.Sprintf("arbiter: node %d has not acted for %v: its host is out of the job", a.d.cfg.ID, bound.Round(time.Millisecond)))
				break wait
			}
		}
		tick.Stop()
	}
	a.d.close()
	a.d.log.Info(a.d.summary(a.d.started, nil))
	if a.file != nil {
		a.file.Close()
	}
}

// launched tells the node of the job it runs (its id and the world's
// size, spares included): with --output-filename it writes the job's
// report to DIR/report should it lead at the end with ftrun's host gone.
func (a *agentArbiter) launched(job string, size int) {
	if a == nil || a.logDir == "" {
		return
	}
	ranks := len(a.d.cfg.RankHost)
	a.d.setReport(arbReport{path: filepath.Join(filepath.Dir(a.logDir), "report"), job: job,
		ranks: ranks, spares: max(0, size-ranks), start: time.Now()})
}

// reportExit is agentJob's report of a rank's exit; nothing without a node.
func (a *agentArbiter) reportExit(r ftrma.Rank, code int) {
	if a != nil {
		a.d.reportExit(r, code)
	}
}
