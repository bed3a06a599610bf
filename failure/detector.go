package failure

import (
	"fmt"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/overlay"
)

// Detector is one rank's heartbeat failure detector: a pure state machine
// driven by Tick, Heartbeat, Probe and Failed, whose output the caller
// collects with Ready and acknowledges with Advance. See the package
// documentation for the caller's duties. A Detector is not safe for
// concurrent use.
type Detector struct {
	cfg     Config // validated, defaults applied
	self, n int

	// failed holds every rank known to have failed, whoever found out. It
	// only grows.
	failed overlay.Set
	// absent[r] is set for a rank that has not started yet (a spare held
	// in reserve): the ring skips it as it skips a failed rank, but it is
	// not failed, never watched, probed or sent to. It only shrinks: Admit
	// makes a rank present, and so does a failure (Failed). Never set for
	// self or a failed rank.
	absent []bool

	// watch is the run of predecessors this detector watches, nearest
	// first. watch[0] is the observed rank: the nearest predecessor of self
	// (self-1, self-2, ... mod n) not in failed; watch is empty when there
	// is none. Each further entry is the nearest predecessor of the one
	// before it not in failed, never self: a rank probed after a suspicion
	// (see probeBeyond). Only the last entry can be answered, and watch[0]
	// never is. With AwaitConfirmation the reported entries form a prefix of
	// watch; without it no entry is reported.
	watch []watched

	// observer is the nearest successor of self (self+1, self+2, ... mod n)
	// not in failed, or -1 when there is none. beatDue is when the next
	// periodic heartbeat to it is due.
	observer int
	beatDue  time.Time

	// The output not yet acknowledged by Advance. heartbeats and probes
	// have no duplicates; without AwaitConfirmation suspected holds each
	// rank at most once over the detector's life.
	heartbeats []int
	probes     []int
	suspected  []int
}

// watched is one rank of Detector.watch.
type watched struct {
	rank int
	// since is the later of the last heartbeat heard from rank and the
	// moment we began watching it (as the observed rank, or by sending it
	// a probe). Unless answered, rank is suspected once now >= since+Timeout.
	since time.Time
	// answered is set on a probed rank (never watch[0]) that has sent a
	// heartbeat since the probe: it is alive, and the ranks beyond it are
	// its own to watch. It has no deadline until it becomes watch[0], when
	// it gets a fresh Timeout, since it may not be sending to us yet.
	answered bool
	// reported is set when rank was suspected and reported and awaits
	// confirmation (Config.AwaitConfirmation); reportedAt is when it was
	// last reported: while it stays silent it is reported again every
	// reportAgain. A reported rank counts as suspected until a heartbeat
	// refutes it or Failed confirms it.
	reported   bool
	reportedAt time.Time
}

// Ready is the output of a Detector that the caller must act on, in any
// order: send one heartbeat to each rank of Heartbeats, one probe to each
// rank of Probes, and announce each rank of Suspected to the job (a
// failure notice by reliable broadcast, or a report to the confirmer with
// Config.AwaitConfirmation).
type Ready struct {
	Heartbeats []int // send a heartbeat to each of these ranks now
	Probes     []int // send a probe to each of these ranks now
	Suspected  []int // ranks this detector has just declared failed (or reports)
}

// New returns the detector of rank self in a job of n ranks, started at now:
// every other rank is presumed alive, except the ranks listed in absent,
// which have not started (spares held in reserve: see Admit); self observes
// its nearest present predecessor (with a full Timeout of grace from now)
// and the first Ready already holds a heartbeat for its nearest present
// successor. It fails with an error wrapping ftrma.ErrInvalid on a bad
// Config, n < 1 or self listed as absent, and ftrma.ErrRankOutOfRange
// unless 0 <= self < n and every absent rank is in [0, n).
func New(cfg Config, self, n int, now time.Time, absent ...int) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("failure: job of %d ranks: %w", n, ftrma.ErrInvalid)
	}
	if self < 0 || self >= n {
		return nil, fmt.Errorf("failure: rank %d in a job of %d: %w", self, n, ftrma.ErrRankOutOfRange)
	}
	d := &Detector{
		cfg:      cfg.WithDefaults(),
		self:     self,
		n:        n,
		failed:   overlay.NewSet(n),
		absent:   make([]bool, n),
		observer: -1,
	}
	for _, r := range absent {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("failure: absent rank %d in a job of %d: %w", r, n, ftrma.ErrRankOutOfRange)
		}
		if r == self {
			return nil, fmt.Errorf("failure: rank %d cannot start absent from its own detector: %w", r, ftrma.ErrInvalid)
		}
		d.absent[r] = true
	}
	d.maybeReconnect(now)
	return d, nil
}

// Tick advances the detector's clock to now. It must be called at least every
// Period/2 (or exactly when Deadline says): it sends the periodic heartbeat
// when one is due, suspects the observed rank once it has been silent for
// Timeout (and probes the ranks beyond it), and suspects each probed rank
// that has not answered within Timeout of its probe. A now earlier than a
// previous one is harmless.
func (d *Detector) Tick(now time.Time) {
	d.maybeSuspect(now)
	d.maybeBeat(now)
}

// Stalled tells the detector that this process itself did not run for gap
// (it was descheduled on an oversubscribed host, or paused by a long GC):
// heartbeats may be waiting unread, so the silence is no evidence against the
// watched ranks, whose deadlines are stretched by gap (Lifeguard's
// self-awareness). A caller that ticks on a fixed period notices a stall as a
// tick arriving late.
func (d *Detector) Stalled(gap time.Duration) {
	if gap <= 0 {
		return
	}
	for i := range d.watch {
		if w := &d.watch[i]; !w.answered && !w.reported {
			w.since = w.since.Add(gap)
		}
	}
}

// Heartbeat records a heartbeat from rank from, received at now. Only the
// heartbeats of watched ranks count: the observed rank's, and a probed
// rank's, which answers the probe (the probed rank is alive and is not
// suspected; the ranks beyond it are no longer probed). Any other (a rank
// that believes we watch it before we do, a late one from a rank we gave up
// on, a rank outside the job) is ignored. A heartbeat from a reported rank
// refutes the report: a later silence is reported anew.
func (d *Detector) Heartbeat(from int, now time.Time) {
	i := d.watching(from)
	if i < 0 || now.Before(d.watch[i].since) {
		return
	}
	w := &d.watch[i]
	w.since, w.reported, w.answered = now, false, i > 0
	d.watch = d.watch[:i+1]
}

// Probe records a probe from rank from, received at now: the prober
// suspects the rank it watches and asks whether we are alive. The next
// Ready holds a heartbeat to from, the answer (a one-shot heartbeat: from
// does not become our observer). The probe also counts as a heartbeat from
// from, which is alive. Probes from self, from ranks outside the job, from
// absent ranks (not admitted here yet: they cannot be answered) and from
// ranks known to have failed are ignored.
func (d *Detector) Probe(from int, now time.Time) {
	if from < 0 || from >= d.n || from == d.self || d.failed.Has(from) || d.absent[from] {
		return
	}
	queue(&d.heartbeats, from)
	d.Heartbeat(from, now)
}

// Failed records that rank r has failed, learned at now from elsewhere: a
// failure notice from another rank's detector, or the launcher (with
// AwaitConfirmation, the confirmation of a report). The ring closes over r
// at once: if r was observed, its nearest live predecessor is observed from
// now on (keeping the deadline of a probe it has not answered, else with a
// fresh Timeout); if r was the observer, the nearest live successor becomes
// the observer and gets a heartbeat in the next Ready. Ranks outside [0, n)
// are ignored. Failed(self) is recorded (the job has given this rank up,
// which the caller can see with IsFailed) but changes nothing else. An
// absent rank that fails (it started, and failed before this rank admitted
// it) is failed from then on, like any other: it is never admitted.
func (d *Detector) Failed(r int, now time.Time) {
	if r < 0 || r >= d.n {
		return
	}
	d.absent[r] = false
	if d.failed.Add(r) {
		d.maybeReconnect(now)
	}
}

// Admit makes the absent rank r present at now: a spare that has started.
// The ring re-forms to include it: if r lies between self and the rank it
// observed, self observes r from now on, with a full Timeout (r may not be
// sending to it yet), and stops probing the ranks beyond r, which are r's
// to watch; if r lies between self and its observer, r becomes the
// observer and gets a heartbeat in the next Ready. Admit reports whether r
// was absent; it does nothing for a rank that is present or failed (a
// failed rank is never admitted), for self, or for a rank outside [0, n).
func (d *Detector) Admit(r int, now time.Time) bool {
	if r < 0 || r >= d.n || !d.absent[r] {
		return false
	}
	d.absent[r] = false
	// The watched run is a run of consecutive present predecessors: the
	// ranks beyond r, if r falls inside it, are r's to watch now.
	for i := 1; i < len(d.watch); i++ {
		if d.between(r, d.watch[i-1].rank, d.watch[i].rank) {
			d.watch = d.watch[:i]
			break
		}
	}
	d.maybeReconnect(now)
	return true
}

// between reports whether r comes after a and before b on the way from a
// to b through predecessors (a-1, a-2, ... mod n).
func (d *Detector) between(r, a, b int) bool {
	for k := 1; k < d.n; k++ {
		x := ((a-k)%d.n + d.n) % d.n
		if x == b {
			return false
		}
		if x == r {
			return true
		}
	}
	return false
}

// IsAbsent reports whether rank r has not started yet (it was absent at New
// and has been neither admitted nor learned failed since).
func (d *Detector) IsAbsent(r int) bool { return r >= 0 && r < d.n && d.absent[r] }

// IsFailed reports whether rank r is known to have failed.
func (d *Detector) IsFailed(r int) bool { return d.failed.Has(r) }

// FailedRanks returns the ranks known to have failed, ascending, in a new
// slice.
func (d *Detector) FailedRanks() []int { return d.failed.Ranks() }

// Observed returns the rank this detector watches, -1 if none.
func (d *Detector) Observed() int {
	if len(d.watch) == 0 {
		return -1
	}
	return d.watch[0].rank
}

// Observer returns the rank this detector sends heartbeats to, -1 if none.
func (d *Detector) Observer() int { return d.observer }

// Deadline returns the next time at which Tick has something to do (a
// heartbeat falls due, a watched rank's Timeout expires, or a report is
// due again), and false if there is no other live rank and hence nothing to
// wait for. Heartbeat, Probe and Failed can move it; a caller that ticks at
// Deadline instead of every Period/2 must ask again after each call.
func (d *Detector) Deadline() (time.Time, bool) {
	var t time.Time
	ok := false
	consider := func(x time.Time) {
		if !ok || x.Before(t) {
			t, ok = x, true
		}
	}
	// Mirrors maybeSuspect: reported ranks are passed over, the first
	// unreported one stops the walk.
	for _, w := range d.watch {
		if w.answered {
			break
		}
		if w.reported {
			consider(w.reportedAt.Add(d.reportAgain()))
			continue
		}
		consider(w.since.Add(d.cfg.Timeout))
		break
	}
	if d.observer >= 0 {
		consider(d.beatDue)
	}
	return t, ok
}

// HasReady reports whether Ready has anything to act on.
func (d *Detector) HasReady() bool {
	return len(d.heartbeats) > 0 || len(d.probes) > 0 || len(d.suspected) > 0
}

// Ready returns the output accumulated since the last Advance. The caller
// owns the slices; calling Ready again before Advance returns the same
// output, possibly grown.
func (d *Detector) Ready() Ready {
	return Ready{Heartbeats: d.heartbeats, Probes: d.probes, Suspected: d.suspected}
}

// Advance acknowledges the output of the last Ready: the detector forgets it.
func (d *Detector) Advance() {
	d.heartbeats, d.probes, d.suspected = nil, nil, nil
}

// maybeSuspect suspects the watched ranks that have been silent for Timeout,
// nearest first, up to the first one that has not (or that answered a
// probe); when it suspects the last watched rank it probes the ranks beyond.
// Without AwaitConfirmation a suspicion is final and the ring closes over the
// suspect at once.
func (d *Detector) maybeSuspect(now time.Time) {
	if d.cfg.AwaitConfirmation {
		d.maybeReport(now)
		return
	}
	for len(d.watch) > 0 {
		w := d.watch[0] // never answered
		if now.Before(w.since.Add(d.cfg.Timeout)) {
			return
		}
		if len(d.watch) == 1 {
			d.probeBeyond(w.rank, now)
		}
		queue(&d.suspected, w.rank)
		d.failed.Add(w.rank)
		d.maybeReconnect(now)
	}
}

// maybeReport is maybeSuspect with AwaitConfirmation: each silent rank is
// reported and stays watched, without closing the ring over it, until
// Failed confirms it or a heartbeat refutes it; while it stays silent it is
// reported again every reportAgain.
func (d *Detector) maybeReport(now time.Time) {
	for i := 0; i < len(d.watch); i++ {
		w := &d.watch[i]
		if w.answered || !w.reported && now.Before(w.since.Add(d.cfg.Timeout)) {
			return
		}
		if !w.reported || !now.Before(w.reportedAt.Add(d.reportAgain())) {
			w.reported, w.reportedAt = true, now
			queue(&d.suspected, w.rank)
		}
		if i == len(d.watch)-1 {
			d.probeBeyond(w.rank, now) // may grow d.watch: w is not used again
		}
	}
}

// reportAgain is how often a suspect awaiting confirmation is reported
// again while it stays silent (its confirmer may have found it alive: a
// slow process, whose heartbeats should come back).
func (d *Detector) reportAgain() time.Duration { return 4 * d.cfg.Timeout }

// probeBeyond starts watching the ranks beyond x, the last watched rank,
// which has just been suspected: the next ProbeWindow predecessors of x not
// known to have failed, stopping at self. Each gets a probe now and is
// suspected unless it answers within Timeout. Those ranks may well be dead
// with x (one host, one cut link), and a live one sends its heartbeats to
// its own observer, not to us, until it learns of the failures in between:
// only a probe can tell them apart in time.
func (d *Detector) probeBeyond(x int, now time.Time) {
	for k, added := 1, 0; added < d.cfg.ProbeWindow; k++ {
		r := ((x-k)%d.n + d.n) % d.n
		if r == d.self {
			return
		}
		if d.failed.Has(r) || d.absent[r] {
			continue
		}
		d.watch = append(d.watch, watched{rank: r, since: now})
		queue(&d.probes, r)
		added++
	}
}

// maybeBeat queues the periodic heartbeat to the observer if it is due.
func (d *Detector) maybeBeat(now time.Time) {
	if d.observer < 0 || now.Before(d.beatDue) {
		return
	}
	queue(&d.heartbeats, d.observer)
	// Keep the cadence of the schedule, but never owe a burst after a late
	// tick.
	d.beatDue = d.beatDue.Add(d.cfg.Period)
	if !d.beatDue.After(now) {
		d.beatDue = now.Add(d.cfg.Period)
	}
}

// maybeReconnect brings the ring's neighbours up to date after the failed
// set grew (or at start): it forgets watched ranks that failed, starts
// observing, or sending to, new neighbours, and with AwaitConfirmation
// probes beyond a reported last watched rank whose answered successor in
// the run failed.
func (d *Detector) maybeReconnect(now time.Time) {
	// Dropping failed ranks keeps watch a run of consecutive predecessors
	// not in failed, since failed only grows.
	d.watch = slices.DeleteFunc(d.watch, func(w watched) bool { return d.failed.Has(w.rank) })
	if p := d.nearestLive(-1); len(d.watch) == 0 || d.watch[0].rank != p {
		d.becomeObserverOf(p, now)
	} else if w := &d.watch[0]; w.answered {
		// A probed rank that answered is observed now: it gets a full
		// Timeout, like any new observed rank. One that has not answered
		// keeps its probe's deadline.
		w.answered = false
		if now.After(w.since) {
			w.since = now
		}
	}
	if s := d.nearestLive(+1); s != d.observer {
		d.becomeObservedBy(s, now)
	}
	if n := len(d.watch); n > 0 && d.watch[n-1].reported {
		d.probeBeyond(d.watch[n-1].rank, now)
	}
}

// becomeObserverOf starts watching rank p alone, granting it a full Timeout
// from now: it may not have been sending to us before.
func (d *Detector) becomeObserverOf(p int, now time.Time) {
	d.watch = d.watch[:0]
	if p >= 0 {
		d.watch = append(d.watch, watched{rank: p, since: now})
	}
}

// becomeObservedBy makes rank s the observer and sends it a heartbeat at once,
// since it starts its Timeout for us as soon as it learns the ring changed.
func (d *Detector) becomeObservedBy(s int, now time.Time) {
	d.observer = s
	if s < 0 {
		return
	}
	queue(&d.heartbeats, s)
	d.beatDue = now.Add(d.cfg.Period)
}

// nearestLive returns the first rank self+dir, self+2·dir, ... (mod n) not
// known to have failed and not absent, or -1 if there is none.
func (d *Detector) nearestLive(dir int) int {
	for k := 1; k < d.n; k++ {
		r := ((d.self+dir*k)%d.n + d.n) % d.n
		if !d.failed.Has(r) && !d.absent[r] {
			return r
		}
	}
	return -1
}

// watching returns the index of rank r in watch, or -1.
func (d *Detector) watching(r int) int {
	if r < 0 {
		return -1
	}
	return slices.IndexFunc(d.watch, func(w watched) bool { return w.rank == r })
}

// queue appends r to the output list *out unless it is already there.
func queue(out *[]int, r int) {
	if !slices.Contains(*out, r) {
		*out = append(*out, r)
	}
}
