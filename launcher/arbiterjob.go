package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/arbiter"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// ftrun --arbiter (experimental): the job's replicated arbiter
// (internal/arbiter) runs among ftrun (node 1) and the agents (node h+1 on
// the job's host h, in the order of the hosts), in shadow mode: it runs on
// the real links, elects its leader, grants host leases and reaches its
// verdicts, and every node logs them; nothing acts on them yet, ftrun's
// own verdicts stay the job's. At the end ftrun logs one summary line
// (arbDriver.summary) that sets the arbiter's verdicts beside ftrun's.
//
// Set-up, on the agent links, after members and outfiles and before the
// launch (arbiterwire.go): ftrun has every agent listen (msgArbiterListen;
// each answers with its address, msgArbiterAddr), listens itself, then
// sends each agent its node's config (msgArbiterConfig: node id, voters,
// the peers' addresses and the keys of its own pairs, the timing), and
// starts its own node. Timing: arbiter.Config's defaults, with LeaseTerm
// the job's lease as the host layer stretches it (hostTiming.lease), so
// the arbiter's bounds compose with failure.Chain's. A job on one host
// runs no arbiter (ftrun alone decides there, as the arbiter's rule says
// of a single host): --arbiter is then a no-op, said once.
//
// The hosts' inputs: each host reports the exits of its own ranks
// (ReportExit: ftrun for its host's, each agent for its own), ftrun the
// suspicions its rendezvous gets (ReportSuspect) and the spares it admits
// (AdmitSpare).
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
	cfg := arbiter.Config{ID: 1, Hosts: hosts, Voters: arbiter.DefaultVoters(hosts), RankHost: rankHost, LeaseTerm: j.tm.lease}.WithDefaults()
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
	d, err := startArbDriver(cfg, mesh, names, logger, j.rv.probe)
	if err != nil {
		mesh.Close()
		if file != nil {
			file.Close()
		}
		fail(err)
		return
	}
	j.arb, j.arbFile = d, file
	logger.Debug(fmt.Sprintf("arbiter: %d nodes, voters %v, lease term %v, tick %v, election timeout %v; verdict bound %v",
		hosts, cfg.Voters, cfg.LeaseTerm, cfg.Tick, cfg.ElectionTimeout(), arbiter.VerdictBound(cfg)))
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
	d    *arbDriver
	file *os.File
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
	return &agentArbiter{d: d, file: file}, nil
}

// finish stops the agent's node at the end of its job, lost: its link to
// ftrun was lost (see above), and logs its summary.
func (a *agentArbiter) finish(lost bool) {
	if a == nil {
		return
	}
	if lost {
		bound := arbiter.VerdictBound(a.d.cfg)
		self := int(a.d.cfg.ID - 1)
		a.d.log.Info(fmt.Sprintf("arbiter: the link to ftrun is lost: node %d stays up to %v for the arbiter's verdict", a.d.cfg.ID, bound.Round(time.Millisecond)))
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		decided := a.d.waitFor(ctx, func(s *arbStats) bool { return s.hostFailed(0) || s.hostFailed(self) })
		cancel()
		if decided {
			// The others may not have applied it yet: a leader that left
			// at once would take the commit with it. Two election
			// timeouts carry it (the leader's heartbeats come every two
			// ticks).
			select {
			case <-time.After(2 * a.d.cfg.ElectionTimeout()):
			case <-a.d.quit:
			}
		}
	}
	a.d.close()
	a.d.log.Info(a.d.summary(a.d.started, nil))
	if a.file != nil {
		a.file.Close()
	}
}

// reportExit is agentJob's report of a rank's exit; nothing without a node.
func (a *agentArbiter) reportExit(r ftrma.Rank, code int) {
	if a != nil {
		a.d.reportExit(r, code)
	}
}
