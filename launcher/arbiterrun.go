package launcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// The arbiter's driver: the one goroutine that owns a node of the job's
// arbiter (launcher/internal/arbiter, a pure machine) and runs it on real time and
// real links. A ticker calls Tick every Config.Tick; messages from the mesh
// go to Step; reports from the host (rank exits, ftrun's suspicions, spares
// admitted) go in through a queue; after each input the driver carries out
// Ready: it sends the messages on the mesh, logs the events, answers the
// probes, and calls Advance. The clock is time.Now (monotonic).
//
// Shadow mode (ftrun --arbiter): while ftrun runs, its own verdicts stay
// the job's, and the node's decisions are logged beside them; the agents
// pass the applied exits and verdicts on to their ranks (onRankEnd,
// hostSupervisor.exited), which matters once ftrun is gone.
//
// Probes. The leader's node emits Probe{rank, host}. The driver asks the
// rank's own host: its local prober (setProbe) when the host is its own,
// else the host's node over the mesh (msgArbiterProbe; the answer comes
// back as msgArbiterProbeAnswer and goes to ProbeAnswer; the host says at
// once that it has the probe, which gives it a term to answer:
// ProbeHeard). An agent's
// prober asks the rank on its lease channel for as long as ftrun's own
// probe waits (failure.Chain.Probe, half a term), and when
// it gets no answer kills the rank and waits until it has reaped it before
// it answers "not alive": the arbiter never declares a rank that may act.
// ftrun's prober, for the ranks of its own host, asks on the supervision
// channel and always answers alive: ftrun's own suspicion handling kills a
// rank of its host that does not answer, and the exit is then reported. A
// host that does not answer (no prober, no link) is left to the arbiter's
// rule: the leader condemns it after half a term.
//
// Log lines (info): "arbiter: node N leads (term T)", "arbiter: host H
// failed: REASON", "arbiter: rank R failed: REASON", "arbiter: rank R
// exited: status C" (status 0 at debug level), "arbiter: node N stopped
// acting"; and at the end one summary line (summary).

// arbDriver runs one node of the job's arbiter.
type arbDriver struct {
	cfg   arbiter.Config // defaults applied
	node  *arbiter.Node  // the run goroutine's alone, once it made it
	mesh  *arbMesh
	log   *slog.Logger
	names []string // host names by index, for logs; may be short
	// probeMu guards probe: the local prober, set once this host's ranks
	// have a supervisor (setProbe); nil: probes of this host's ranks go
	// unanswered.
	probeMu   sync.Mutex
	probe     localProber
	probeWait time.Duration
	started   time.Time

	quit      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // run and the probes under way

	inMu    sync.Mutex
	inputs  []func(now time.Time) // reports for the run goroutine
	inWake  chan struct{}
	dropped int // inputs dropped: the queue was full

	probing map[ftrma.Rank]bool // the run goroutine's: probes under way
	// remote is the run goroutine's: probes asked by other nodes, under
	// way here, with who asked.
	remote map[ftrma.Rank][]uint64

	// reportMu guards rep: where and for which job the leader at the end
	// writes the job's report when ftrun's host is gone (setReport).
	reportMu sync.Mutex
	rep      *arbReport
	// endAt is the run goroutine's: when this node applied each rank's end.
	endAt map[ftrma.Rank]time.Time

	// endMu guards ends and endTo: the applied ends of ranks (RankFailed,
	// its host's included, and RankExited events), in log order, and who
	// is told of each (onRankEnd).
	endMu sync.Mutex
	ends  []arbiter.Event
	endTo []func(arbiter.Event)
	// spareTo and spareWait (under endMu) get the spare events
	// (arbiterspare.go): every one, and those of one rank.
	spareTo   []func(arbiter.Event)
	spareWait map[ftrma.Rank][]chan arbiter.Event

	mu      sync.Mutex // guards st, ended and changed
	st      arbStats
	ended   map[ftrma.Rank]bool // ranks with an end applied (st.ended counts them)
	changed chan struct{}       // closed and replaced on every change of st
}

// maxArbInputs bounds the reports waiting for the driver.
const maxArbInputs = 1 << 16

// arbStats is what a driver has seen, for its summary and for tests.
type arbStats struct {
	leader, term uint64    // the node's view now (leader 0: none known)
	seen, seenIn uint64    // the last leader it knew, and its term
	elections    int       // leaders seen taking office: new (leader, term) pairs
	firstLeader  time.Time // when this node first learned of a leader
	leaderAt     time.Time // when it learned of the current one
	acting       bool
	actedOnce    bool
	leaseEnd     time.Time // the end of this node's host lease, by its clock
	stopped      time.Time // when it last stopped acting
	hosts        []arbVerdict
	ranks        []arbVerdict // RankFailed, in log order (a host's ranks included)
	exits        int
	ended        int // distinct ranks whose end (failed or exited) was applied
	finished     bool
	broken       error
	stepErrors   int
}

// arbVerdict is one verdict the log holds, as this node applied it.
type arbVerdict struct {
	host   int
	rank   ftrma.Rank
	reason arbiter.Reason
	at     time.Time     // when this node applied it
	silent time.Duration // a host's: how long this node had not heard from it
}

// startArbDriver starts the node cfg.ID over mesh. The node itself is
// made once the mesh links this node to a quorum of the voters, or an
// election timeout has passed: node 1 campaigns as it is made, and a
// campaign before its links are up is lost (the others would then elect
// one of themselves first). Reports made meanwhile wait for it.
func startArbDriver(cfg arbiter.Config, mesh *arbMesh, names []string, log *slog.Logger, probe localProber) (*arbDriver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	if c.Voters == nil {
		c.Voters = arbiter.DefaultVoters(c.Hosts)
	}
	d := &arbDriver{
		cfg: c, mesh: mesh, log: log, names: names, probe: probe, probeWait: failure.Chain{Lease: c.LeaseTerm}.Probe(),
		started: time.Now(), quit: make(chan struct{}), inWake: make(chan struct{}, 1),
		probing: make(map[ftrma.Rank]bool), spareWait: make(map[ftrma.Rank][]chan arbiter.Event), remote: make(map[ftrma.Rank][]uint64), endAt: make(map[ftrma.Rank]time.Time), changed: make(chan struct{}),
	}
	d.wg.Add(1)
	go d.run()
	return d, nil
}

// awaitLinks waits until the mesh links this node to a quorum of the
// voters (itself counted), at most an election timeout; false if the
// driver was closed meanwhile.
func (d *arbDriver) awaitLinks() bool {
	need := len(d.cfg.Voters)/2 + 1
	deadline := time.Now().Add(d.cfg.ElectionTimeout())
	for {
		n := 0
		for _, v := range d.cfg.Voters {
			if v == d.cfg.ID || d.mesh.linked(v) {
				n++
			}
		}
		if n >= need || time.Now().After(deadline) {
			return true
		}
		select {
		case <-d.quit:
			return false
		case <-time.After(d.cfg.Tick / 4):
		}
	}
}

// close stops the node and its mesh and waits for their goroutines.
func (d *arbDriver) close() {
	d.closeOnce.Do(func() { close(d.quit) })
	d.wg.Wait()
	d.mesh.Close()
}

// reportExit tells the node that rank r's process, on this host, ended
// with status code (-1 after a signal).
func (d *arbDriver) reportExit(r ftrma.Rank, code int) {
	d.input(func(now time.Time) { d.node.ReportExit(r, code, now) })
}

// reportSuspect tells the node that rank by's detector suspects rank r.
func (d *arbDriver) reportSuspect(r, by ftrma.Rank) {
	d.input(func(now time.Time) { d.node.ReportSuspect(r, by, now) })
}

// onRankEnd has f called with every end of a rank the log applies from
// now on (an EventRankFailed, its host's included, or an EventRankExited),
// on the driver's goroutine, which f must not block; it returns those
// applied so far. An event may be both returned and passed to f.
func (d *arbDriver) onRankEnd(f func(arbiter.Event)) []arbiter.Event {
	d.endMu.Lock()
	defer d.endMu.Unlock()
	d.endTo = append(d.endTo, f)
	return slices.Clone(d.ends)
}

// arbReport is what a node needs to write the job's report (DIR/report).
type arbReport struct {
	path   string // DIR/report
	job    string
	ranks  int // the world's ranks; the others, up to the state's, are spares
	spares int
	start  time.Time // when the ranks started, by this node's clock
}

// setReport has this node write the job's report to r.path at the job's
// end, should it lead then with ftrun's host declared failed (ftrun
// writes it otherwise).
func (d *arbDriver) setReport(r arbReport) {
	d.reportMu.Lock()
	d.rep = &r
	d.reportMu.Unlock()
}

// writeReport writes the job's report when the log says every rank has
// ended, if this node leads and ftrun's host (0) is declared failed: the
// state says each rank's end (a RankExited's status, a verdict's reason),
// this node's clock when it applied it.
func (d *arbDriver) writeReport(now time.Time) {
	d.reportMu.Lock()
	rep := d.rep
	d.reportMu.Unlock()
	st := d.node.State()
	if rep == nil || !d.node.IsLeader() || !st.Host(0).Failed {
		return
	}
	r := JobReport{Job: rep.job, Ranks: rep.ranks, Spares: rep.spares, Took: now.Sub(rep.start)}
	survivors, bad := 0, false
	for k := range max(st.NumRanks(), rep.ranks+rep.spares) {
		ri := st.Rank(ftrma.Rank(k))
		rr := RankReport{Rank: k, Host: d.name(ri.Host), At: d.endAt[ftrma.Rank(k)].Sub(rep.start)}
		switch ri.Status {
		case arbiter.RankAbsent:
			rr = RankReport{Rank: k, State: RankNotStarted}
		case arbiter.RankExited:
			if ri.Code < 0 {
				rr.State, rr.Reason = RankFailed, "its process was killed by a signal (its agent reported it to the arbiter)"
			} else {
				rr.State, rr.Code = RankFinished, ri.Code
				survivors++
				bad = bad || ri.Code != 0
			}
		case arbiter.RankFailed:
			rr.State, rr.Reason = RankFailed, fmt.Sprintf("declared failed by the job's arbiter: %v", ri.Reason)
		}
		r.Rank = append(r.Rank, rr)
	}
	r.Exit, r.End = ExitOK, "ok"
	if bad || survivors == 0 {
		r.Exit, r.End = ExitFailed, "failed"
	}
	f, err := os.OpenFile(rep.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err == nil {
		err = WriteReport(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		d.log.Error(fmt.Sprintf("arbiter: the job's report: %v", err))
		return
	}
	d.log.Info(fmt.Sprintf("arbiter: node %d, leading at the job's end with ftrun's host gone, wrote the job's report to %s", d.cfg.ID, rep.path))
}

// gone reports whether the end e of a rank means it is gone for the
// others (a verdict, or an exit with a status other than 0: a rank that
// exits 0 has finished).
func gone(e arbiter.Event) bool {
	return e.Kind == arbiter.EventRankFailed || e.Kind == arbiter.EventRankExited && e.Code != 0
}

// input queues f for the run goroutine; it never blocks (a full queue
// drops f: the reports are retried by their senders or are not needed
// for safety, and the count says so in the summary).
func (d *arbDriver) input(f func(time.Time)) {
	d.inMu.Lock()
	if len(d.inputs) >= maxArbInputs {
		d.dropped++
		d.inMu.Unlock()
		return
	}
	d.inputs = append(d.inputs, f)
	d.inMu.Unlock()
	select {
	case d.inWake <- struct{}{}:
	default:
	}
}

func (d *arbDriver) run() {
	defer d.wg.Done()
	if !d.awaitLinks() {
		return
	}
	now := time.Now()
	node, err := arbiter.New(d.cfg, now)
	if err != nil { // Validate passed: cannot happen
		d.log.Error(fmt.Sprintf("arbiter: %v", err))
		return
	}
	d.node = node
	d.after(now) // New's Ready: node 1's campaign
	tick := time.NewTicker(d.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-d.quit:
			return
		case <-tick.C:
			d.node.Tick(time.Now())
		case m := <-d.mesh.recv:
			if err := d.node.Step(m, time.Now()); err != nil {
				d.mu.Lock()
				d.st.stepErrors++
				d.mu.Unlock()
				d.log.Debug(fmt.Sprintf("arbiter: %v", err))
			}
		case q := <-d.mesh.probes:
			d.probeFrame(q)
		case id := <-d.mesh.gone:
			if lead, _ := d.node.Leader(); lead == id && id != d.cfg.ID {
				d.log.Info(fmt.Sprintf("arbiter: the link to leader node %d closed: its process may have ended; electing another now", id))
			}
			d.node.LeaderGone(id, time.Now())
		case <-d.inWake:
			d.inMu.Lock()
			in := d.inputs
			d.inputs = nil
			d.inMu.Unlock()
			for _, f := range in {
				f(time.Now())
			}
		}
		d.after(time.Now())
	}
}

// after carries out the node's Ready and notes what changed: the leader,
// whether this node acts.
func (d *arbDriver) after(now time.Time) {
	for d.node.HasReady() {
		rd := d.node.Ready()
		for _, m := range rd.Messages {
			d.mesh.send(m)
		}
		for _, e := range rd.Events {
			d.event(e, now)
			if e.Kind == arbiter.EventFinished {
				d.writeReport(now)
			}
			if spareEvent(e) {
				d.dispatchSpare(e)
			}
			if e.Kind == arbiter.EventRankFailed || e.Kind == arbiter.EventRankExited {
				if _, ok := d.endAt[e.Rank]; !ok {
					d.endAt[e.Rank] = now
				}
				d.endMu.Lock()
				d.ends = append(d.ends, e)
				to := slices.Clone(d.endTo)
				d.endMu.Unlock()
				for _, f := range to {
					f(e)
				}
			}
		}
		probes := append([]arbiter.Probe(nil), rd.Probes...)
		d.node.Advance()
		for _, p := range probes {
			d.answer(p, now)
		}
	}
	lead, term := d.node.Leader()
	acting := d.node.Acting(now)
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := false
	if e := d.node.LeaseExpiry(); !e.Equal(d.st.leaseEnd) {
		d.st.leaseEnd = e
		changed = true
	}
	if lead != d.st.leader || term != d.st.term {
		d.st.leader, d.st.term = lead, term
		changed = true
	}
	if lead != 0 && (lead != d.st.seen || term != d.st.seenIn) {
		prev := d.st.seen
		d.st.seen, d.st.seenIn, d.st.leaderAt = lead, term, now
		d.st.elections++
		if d.st.firstLeader.IsZero() {
			d.st.firstLeader = now
		}
		changed = true
		args := []any{}
		switch {
		case prev == 0:
			args = append(args, "after", now.Sub(d.started).Round(time.Millisecond))
		case prev != d.cfg.ID:
			// How long after the previous leader last spoke to this node.
			if h := d.mesh.heard(prev); !h.IsZero() {
				args = append(args, "previous", prev, "silent", now.Sub(h).Round(time.Millisecond))
			}
		}
		d.log.Info(fmt.Sprintf("arbiter: node %d leads (term %d)", lead, term), args...)
	}
	if acting != d.st.acting {
		d.st.acting = acting
		changed = true
		switch {
		case acting && !d.st.actedOnce:
			d.st.actedOnce = true
			d.log.Debug(fmt.Sprintf("arbiter: node %d acts", d.cfg.ID))
		case acting:
			d.log.Info(fmt.Sprintf("arbiter: node %d acts again", d.cfg.ID))
		default:
			d.st.stopped = now
			d.log.Info(fmt.Sprintf("arbiter: node %d stopped acting", d.cfg.ID), "lease_end", d.node.LeaseExpiry().Sub(d.started).Round(time.Millisecond))
		}
	}
	if err := d.node.Broken(); err != nil && d.st.broken == nil {
		d.st.broken = err
		changed = true
		d.log.Error(fmt.Sprintf("arbiter: %v", err))
	}
	if changed {
		d.notifyLocked()
	}
}

// event records and logs one event of the log.
func (d *arbDriver) event(e arbiter.Event, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.notifyLocked()
	switch e.Kind {
	case arbiter.EventHostFailed:
		v := arbVerdict{host: e.Host, rank: -1, reason: e.Reason, at: now}
		args := []any{"node", e.Host + 1}
		if n := d.name(e.Host); n != "" {
			args = append(args, "name", n)
		}
		if id := uint64(e.Host + 1); id != d.cfg.ID {
			if h := d.mesh.heard(id); !h.IsZero() {
				v.silent = now.Sub(h)
				args = append(args, "silent", v.silent.Round(time.Millisecond))
			}
		}
		d.st.hosts = append(d.st.hosts, v)
		d.log.Info(fmt.Sprintf("arbiter: host %d failed: %v", e.Host, e.Reason), args...)
	case arbiter.EventRankFailed:
		d.endedLocked(e.Rank)
		d.st.ranks = append(d.st.ranks, arbVerdict{host: -1, rank: e.Rank, reason: e.Reason, at: now})
		level := slog.LevelInfo
		if e.Reason == arbiter.ReasonHostFailed {
			level = slog.LevelDebug // its host's line said it
		}
		d.log.Log(context.Background(), level, fmt.Sprintf("arbiter: rank %d failed: %v", e.Rank, e.Reason))
	case arbiter.EventRankExited:
		d.endedLocked(e.Rank)
		d.st.exits++
		level := slog.LevelInfo
		if e.Code == 0 {
			level = slog.LevelDebug
		}
		d.log.Log(context.Background(), level, fmt.Sprintf("arbiter: rank %d exited: status %d", e.Rank, e.Code))
	case arbiter.EventSpareAdmitted:
		d.log.Info(fmt.Sprintf("arbiter: spare rank %d admitted on host %d", e.Rank, e.Host))
	case arbiter.EventSpareClaimed:
		d.log.Info(fmt.Sprintf("arbiter: spare rank %d claimed on host %d by node %d", e.Rank, e.Host, e.By+1))
	case arbiter.EventSpareJoined:
		d.log.Info(fmt.Sprintf("arbiter: spare rank %d joined on host %d", e.Rank, e.Host))
	case arbiter.EventSpareLost:
		d.log.Info(fmt.Sprintf("arbiter: spare rank %d on host %d ended before it joined", e.Rank, e.Host))
	case arbiter.EventFinished:
		d.st.finished = true
		d.log.Debug("arbiter: every rank of the job has ended")
	}
}

// endedLocked counts rank r's end once. The caller holds d.mu.
func (d *arbDriver) endedLocked(r ftrma.Rank) {
	if d.ended == nil {
		d.ended = make(map[ftrma.Rank]bool)
	}
	if !d.ended[r] {
		d.ended[r] = true
		d.st.ended++
	}
}

// name is host h's name, or "".
func (d *arbDriver) name(h int) string {
	if h >= 0 && h < len(d.names) {
		return d.names[h]
	}
	return ""
}

// localProber asks rank r, on this node's host, whether it still acts,
// within about d: alive; or not alive once it surely no longer acts (killed
// and reaped); ok false when it cannot tell (no answer is then given).
type localProber func(r ftrma.Rank, d time.Duration) (alive, ok bool)

// setProbe installs the prober of this host's ranks.
func (d *arbDriver) setProbe(f localProber) {
	d.probeMu.Lock()
	d.probe = f
	d.probeMu.Unlock()
}

// answer carries out one probe of the leader's node (see Probes above).
// The node repeats a probe until it is answered: one under way is not
// asked again.
func (d *arbDriver) answer(p arbiter.Probe, now time.Time) {
	if d.probing[p.Rank] {
		return
	}
	if id := uint64(p.Host + 1); id != d.cfg.ID {
		d.mesh.sendFrame(id, msgArbiterProbe, jobwire.RankPayload(p.Rank))
		return
	}
	d.probing[p.Rank] = true
	d.node.ProbeHeard(p.Rank, now) // this host has it
	d.probeHere(p.Rank, func(alive, ok bool, now time.Time) {
		delete(d.probing, p.Rank)
		d.log.Debug(fmt.Sprintf("arbiter: probe of rank %d on this host: alive %v (answered %v)", p.Rank, alive, ok))
		if ok {
			d.node.ProbeAnswer(p.Rank, alive, now)
		}
	})
}

// probeHere runs the local prober on rank r off the run goroutine, and
// then done on it; without a prober, done gets no answer at once.
func (d *arbDriver) probeHere(r ftrma.Rank, done func(alive, ok bool, now time.Time)) {
	d.probeMu.Lock()
	f := d.probe
	d.probeMu.Unlock()
	if f == nil {
		done(false, false, time.Now())
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		alive, ok := f(r, d.probeWait)
		d.input(func(now time.Time) { done(alive, ok, now) })
	}()
}

// probeFrame handles a probe frame from another node: a probe of one of
// this host's ranks (asked by that node's leader), or the answer to one
// this node forwarded.
func (d *arbDriver) probeFrame(q meshProbe) {
	switch q.typ {
	case msgArbiterProbe:
		d.mesh.sendFrame(q.from, msgArbiterProbeAnswer, probeAnswerPayload(q.rank, probeHeard))
		askers := d.remote[q.rank]
		if !slices.Contains(askers, q.from) {
			d.remote[q.rank] = append(askers, q.from)
		}
		if len(askers) > 0 {
			return // under way
		}
		d.probeHere(q.rank, func(alive, ok bool, _ time.Time) {
			for _, id := range d.remote[q.rank] {
				if ok {
					state := probeNotAlive
					if alive {
						state = probeAlive
					}
					d.mesh.sendFrame(id, msgArbiterProbeAnswer, probeAnswerPayload(q.rank, state))
				}
			}
			delete(d.remote, q.rank)
		})
	case msgArbiterProbeAnswer:
		// Only the rank's own host answers for it.
		ri := d.node.State().Rank(q.rank)
		switch {
		case ri.Status == arbiter.RankAbsent || uint64(ri.Host+1) != q.from:
		case q.state == probeHeard:
			d.node.ProbeHeard(q.rank, time.Now())
		default:
			d.log.Debug(fmt.Sprintf("arbiter: probe of rank %d on node %d: alive %v", q.rank, q.from, q.state == probeAlive))
			d.node.ProbeAnswer(q.rank, q.state == probeAlive, time.Now())
		}
	}
}

func (d *arbDriver) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// stats returns a copy of what the driver has seen.
func (d *arbDriver) stats() arbStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.st
	s.hosts = append([]arbVerdict(nil), s.hosts...)
	s.ranks = append([]arbVerdict(nil), s.ranks...)
	return s
}

// waitFor waits until cond holds of the driver's stats, or ctx ends; it
// reports whether cond held.
func (d *arbDriver) waitFor(ctx context.Context, cond func(*arbStats) bool) bool {
	for {
		d.mu.Lock()
		ok, ch := cond(&d.st), d.changed
		d.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// hostLease is whether this node acted at its last input and when its host
// lease ends (the zero Time before its first): what the host supervisor
// grants by (supervisorGrant). A lease that ran out since then is seen by
// the end, which only moves forward.
func (d *arbDriver) hostLease() (acting bool, end time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st.acting, d.st.leaseEnd
}

// hostLeaseOnActing is hostLease once this node has acted; before that
// (the arbiter is still coming up) acted is false.
func (d *arbDriver) hostLeaseOnActing() (acting bool, end time.Time, acted bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st.acting, d.st.leaseEnd, d.st.actedOnce
}

// hostFailed reports whether the log declared host h failed.
func (s *arbStats) hostFailed(h int) bool {
	for _, v := range s.hosts {
		if v.host == h {
			return true
		}
	}
	return false
}

// rankAt is a rank and a time of the job (for the summary).
type rankAt struct {
	rank ftrma.Rank
	at   time.Duration
}

// summary is the driver's one-line account, times from base: the leader
// it knows and its term, the elections it saw, the hosts and ranks the
// arbiter declared failed, and, when ftrun gives them (others non-nil),
// ftrun's own verdicts to compare: the measurement of shadow mode.
func (d *arbDriver) summary(base time.Time, others []rankAt) string {
	s := d.stats()
	var b strings.Builder
	leader := "none"
	if s.leader != 0 {
		leader = fmt.Sprint(s.leader)
	}
	fmt.Fprintf(&b, "arbiter: summary of node %d: leader %s (term %d), %d leader(s) seen", d.cfg.ID, leader, s.term, s.elections)
	if !s.firstLeader.IsZero() {
		fmt.Fprintf(&b, ", the first %.3fs after the start", s.firstLeader.Sub(d.started).Seconds())
	}
	fmt.Fprintf(&b, "; hosts failed: %s", listVerdicts(s.hosts, base, true))
	fmt.Fprintf(&b, "; ranks failed: %s; exits %d", listVerdicts(s.ranks, base, false), s.exits)
	if others != nil {
		fmt.Fprintf(&b, "; ftrun's verdicts: %s", listRanks(others))
	}
	if s.stepErrors > 0 {
		fmt.Fprintf(&b, "; %d message(s) refused", s.stepErrors)
	}
	if n := d.mesh.dropped.Load(); n > 0 {
		fmt.Fprintf(&b, "; %d message(s) dropped", n)
	}
	if n := d.mesh.refused.Load(); n > 0 {
		fmt.Fprintf(&b, "; %d connection(s) refused", n)
	}
	return b.String()
}

// summaryLimit bounds the entries of a list of the summary.
const summaryLimit = 32

func listVerdicts(vs []arbVerdict, base time.Time, hosts bool) string {
	if len(vs) == 0 {
		return "none"
	}
	var parts []string
	for i, v := range vs {
		if i == summaryLimit {
			parts = append(parts, fmt.Sprintf("and %d more", len(vs)-i))
			break
		}
		if hosts {
			parts = append(parts, fmt.Sprintf("host %d at %.3fs (%v)", v.host, v.at.Sub(base).Seconds(), v.reason))
		} else {
			parts = append(parts, fmt.Sprintf("rank %d at %.3fs (%v)", v.rank, v.at.Sub(base).Seconds(), v.reason))
		}
	}
	return strings.Join(parts, ", ")
}

func listRanks(rs []rankAt) string {
	if len(rs) == 0 {
		return "none"
	}
	var parts []string
	for i, r := range rs {
		if i == summaryLimit {
			parts = append(parts, fmt.Sprintf("and %d more", len(rs)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("rank %d at %.3fs", r.rank, r.at.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// openArbiterLog opens node id's log file under dir, DIR/1 of
// --output-filename; nil without dir.
func openArbiterLog(dir string, id uint64) (*os.File, error) {
	if dir == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("arbiter.%d", id)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, outputFileMode)
	if err != nil {
		return nil, fmt.Errorf("arbiter: its log file: %w", unwrapPath(err))
	}
	return f, nil
}

// arbiterLogger is a node's logger: text lines from level up to logf and,
// when file is not nil, to file after their time.
func arbiterLogger(logf func(string, ...any), level slog.Level, file *os.File) *slog.Logger {
	var w io.Writer = logfWriter(logf)
	if file != nil {
		w = io.MultiWriter(w, stampedWriter{file})
	}
	return slog.New(ftrma.NewLogHandler(w, ftrma.LogOptions{Level: level}))
}

// stampedWriter writes each line after the time (RFC 3339, nanoseconds);
// errors are ignored (a log file that cannot be written loses lines).
type stampedWriter struct{ w io.Writer }

func (s stampedWriter) Write(p []byte) (int, error) {
	s.w.Write(append([]byte(time.Now().Format(time.RFC3339Nano)+" "), p...))
	return len(p), nil
}
