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
	"github.com/ftrma/ftrma/internal/arbiter"
)

// The arbiter's driver: the one goroutine that owns a node of the job's
// arbiter (internal/arbiter, a pure machine) and runs it on real time and
// real links. A ticker calls Tick every Config.Tick; messages from the mesh
// go to Step; reports from the host (rank exits, ftrun's suspicions, spares
// admitted) go in through a queue; after each input the driver carries out
// Ready: it sends the messages on the mesh, logs the events, answers the
// probes, and calls Advance. The clock is time.Now (monotonic).
//
// Shadow mode (ftrun --arbiter): the node's decisions are logged and
// counted, and nothing acts on them: ftrun's own verdicts stay the job's.
// Probes are answered by asking the existing supervision path where that
// is cheap: on ftrun's node, the rendezvous's probe of the rank's
// supervision channel (rvServer.probe, the one ftrun's own suspicions
// use), waited for a quarter term (the arbiter gives up on a probe after
// half a term). An agent's node, which leads only once ftrun's is lost, has
// no such channel: it answers alive at once, and logs that it did.
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
	// probe asks rank r's supervision channel whether it runs, waiting at
	// most d; nil: the node answers alive without asking.
	probe     func(r ftrma.Rank, d time.Duration) bool
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

	// goneMu guards gone and goneTo: the ranks the applied log says are
	// gone (failed, or exited with a status other than 0), in log order,
	// and who is told of each (onGone).
	goneMu sync.Mutex
	gone   []ftrma.Rank
	goneTo []func(ftrma.Rank)

	mu      sync.Mutex // guards st and changed
	st      arbStats
	changed chan struct{} // closed and replaced on every change of st
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
func startArbDriver(cfg arbiter.Config, mesh *arbMesh, names []string, log *slog.Logger, probe func(ftrma.Rank, time.Duration) bool) (*arbDriver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	if c.Voters == nil {
		c.Voters = arbiter.DefaultVoters(c.Hosts)
	}
	d := &arbDriver{
		cfg: c, mesh: mesh, log: log, names: names, probe: probe, probeWait: c.LeaseTerm / 4,
		started: time.Now(), quit: make(chan struct{}), inWake: make(chan struct{}, 1),
		probing: make(map[ftrma.Rank]bool), changed: make(chan struct{}),
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

// admitSpare tells the node that spare rank r runs on host h from now on.
func (d *arbDriver) admitSpare(r ftrma.Rank, h int) {
	d.input(func(now time.Time) { d.node.AdmitSpare(r, h, now) })
}

// onGone has f called with every rank the applied log says is gone from
// now on (a RankFailed verdict, its host's included, or a RankExited with a
// status other than 0: a rank that exits 0 has finished), on the driver's
// goroutine, which f must not block; it returns the ranks gone so far. A
// rank may be both returned and passed to f.
func (d *arbDriver) onGone(f func(ftrma.Rank)) []ftrma.Rank {
	d.goneMu.Lock()
	defer d.goneMu.Unlock()
	d.goneTo = append(d.goneTo, f)
	return slices.Clone(d.gone)
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
			if e.Kind == arbiter.EventRankFailed || e.Kind == arbiter.EventRankExited && e.Code != 0 {
				d.goneMu.Lock()
				d.gone = append(d.gone, e.Rank)
				to := slices.Clone(d.goneTo)
				d.goneMu.Unlock()
				for _, f := range to {
					f(e.Rank)
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
		d.st.ranks = append(d.st.ranks, arbVerdict{host: -1, rank: e.Rank, reason: e.Reason, at: now})
		level := slog.LevelInfo
		if e.Reason == arbiter.ReasonHostFailed {
			level = slog.LevelDebug // its host's line said it
		}
		d.log.Log(context.Background(), level, fmt.Sprintf("arbiter: rank %d failed: %v", e.Rank, e.Reason))
	case arbiter.EventRankExited:
		d.st.exits++
		level := slog.LevelInfo
		if e.Code == 0 {
			level = slog.LevelDebug
		}
		d.log.Log(context.Background(), level, fmt.Sprintf("arbiter: rank %d exited: status %d", e.Rank, e.Code))
	case arbiter.EventSpareAdmitted:
		d.log.Info(fmt.Sprintf("arbiter: spare rank %d admitted on host %d", e.Rank, e.Host))
	case arbiter.EventFinished:
		d.st.finished = true
		d.log.Debug("arbiter: every rank of the job has ended")
	}
}

// name is host h's name, or "".
func (d *arbDriver) name(h int) string {
	if h >= 0 && h < len(d.names) {
		return d.names[h]
	}
	return ""
}

// answer carries out one probe (see the shadow mode above). The node
// repeats a probe until it is answered: one under way is not asked again.
func (d *arbDriver) answer(p arbiter.Probe, now time.Time) {
	if d.probing[p.Rank] {
		return
	}
	if d.probe == nil {
		d.log.Info(fmt.Sprintf("arbiter: probe of rank %d on host %d: answered alive without asking (shadow mode: this node has no supervision channel)", p.Rank, p.Host))
		d.node.ProbeAnswer(p.Rank, true, now)
		return
	}
	d.probing[p.Rank] = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		alive := d.probe(p.Rank, d.probeWait)
		d.input(func(now time.Time) {
			delete(d.probing, p.Rank)
			d.log.Debug(fmt.Sprintf("arbiter: probe of rank %d on host %d: alive %v", p.Rank, p.Host, alive))
			d.node.ProbeAnswer(p.Rank, alive, now)
		})
	}()
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
