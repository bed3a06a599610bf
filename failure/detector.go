package failure

import (
	"fmt"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/overlay"
)

// Detector is one rank's heartbeat failure detector: a pure state machine
// driven by Tick, Heartbeat and Failed, whose output the caller collects with
// Ready and acknowledges with Advance. See the package documentation for the
// caller's duties. A Detector is not safe for concurrent use.
type Detector struct {
	cfg     Config // validated, defaults applied
	self, n int

	// failed holds every rank known to have failed, whoever found out. It
	// only grows.
	failed overlay.Set

	// observed is the nearest predecessor of self (self-1, self-2, ... mod
	// n) not in failed, or -1 when there is none. heardAt is the later of
	// the last heartbeat heard from it and the moment we began observing
	// it: the observed rank is suspected once now >= heardAt+Timeout.
	observed int
	heardAt  time.Time
	// reported is the observed rank when it was suspected and reported
	// and awaits confirmation (Config.AwaitConfirmation), else -1;
	// reportedAt is when it was last reported: while it stays silent it is
	// reported again every reportAgain.
	reported   int
	reportedAt time.Time

	// observer is the nearest successor of self (self+1, self+2, ... mod n)
	// not in failed, or -1 when there is none. beatDue is when the next
	// periodic heartbeat to it is due.
	observer int
	beatDue  time.Time

	// The output not yet acknowledged by Advance. heartbeats has no
	// duplicates; suspected holds each rank at most once over the
	// detector's life.
	heartbeats []int
	suspected  []int
}

// Ready is the output of a Detector that the caller must act on, in any
// order: send one heartbeat to each rank of Heartbeats, and announce each
// rank of Suspected to the job (a failure notice by reliable broadcast).
type Ready struct {
	Heartbeats []int // send a heartbeat to each of these ranks now
	Suspected  []int // ranks this detector has just declared failed
}

// New returns the detector of rank self in a job of n ranks, started at now:
// every other rank is presumed alive, self observes self-1 (with a full
// Timeout of grace from now) and the first Ready already holds a heartbeat
// for self+1. It fails with an error wrapping ftrma.ErrInvalid on a bad
// Config or n < 1, and ftrma.ErrRankOutOfRange unless 0 <= self < n.
func New(cfg Config, self, n int, now time.Time) (*Detector, error) {
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
		cfg:      cfg.withDefaults(),
		self:     self,
		n:        n,
		failed:   overlay.NewSet(n),
		observed: -1,
		observer: -1,
		reported: -1,
	}
	d.maybeReconnect(now)
	return d, nil
}

// Tick advances the detector's clock to now. It must be called at least every
// Period/2 (or exactly when Deadline says): it sends the periodic heartbeat
// when one is due and suspects the observed rank once it has been silent for
// Timeout. A now earlier than a previous one is harmless.
func (d *Detector) Tick(now time.Time) {
	d.maybeSuspect(now)
	d.maybeBeat(now)
}

// Stalled tells the detector that this process itself did not run for gap
// (it was descheduled on an oversubscribed host, or paused by a long GC):
// heartbeats may be waiting unread, so the silence is no evidence against the
// observed rank, whose deadline is stretched by gap (Lifeguard's
// self-awareness). A caller that ticks on a fixed period notices a stall as a
// tick arriving late.
func (d *Detector) Stalled(gap time.Duration) {
	if d.observed >= 0 && gap > 0 {
		d.heardAt = d.heardAt.Add(gap)
	}
}

// Heartbeat records a heartbeat from rank from, received at now. Only the
// observed rank's heartbeats count; any other (a rank that believes we watch
// it before we do, a late one from a rank we gave up on, a rank outside the
// job) is ignored.
func (d *Detector) Heartbeat(from int, now time.Time) {
	if from == d.observed && from >= 0 && now.After(d.heardAt) {
		d.heardAt = now
		d.reported = -1 // alive after all: a later silence is reported anew
	}
}

// Failed records that rank r has failed, learned at now from elsewhere: a
// failure notice from another rank's detector, or the launcher. The ring
// closes over r at once: if r was observed, its nearest live predecessor is
// observed from now on with a fresh Timeout; if r was the observer, the
// nearest live successor becomes the observer and gets a heartbeat in the
// next Ready. Ranks outside [0, n) are ignored. Failed(self) is recorded (the
// job has given this rank up, which the caller can see with IsFailed) but
// changes nothing else.
func (d *Detector) Failed(r int, now time.Time) {
	if r < 0 || r >= d.n {
		return
	}
	if d.failed.Add(r) {
		d.maybeReconnect(now)
	}
}

// IsFailed reports whether rank r is known to have failed.
func (d *Detector) IsFailed(r int) bool { return d.failed.Has(r) }

// FailedRanks returns the ranks known to have failed, ascending, in a new
// slice.
func (d *Detector) FailedRanks() []int { return d.failed.Ranks() }

// Observed returns the rank this detector watches, -1 if none.
func (d *Detector) Observed() int { return d.observed }

// Observer returns the rank this detector sends heartbeats to, -1 if none.
func (d *Detector) Observer() int { return d.observer }

// Deadline returns the next time at which Tick has something to do (a
// heartbeat falls due, or the observed rank's Timeout expires), and false if
// there is no other live rank and hence nothing to wait for. Heartbeat and
// Failed can move it; a caller that ticks at Deadline instead of every
// Period/2 must ask again after each call.
func (d *Detector) Deadline() (time.Time, bool) {
	var t time.Time
	ok := false
	if d.observed >= 0 {
		t, ok = d.heardAt.Add(d.cfg.Timeout), true
		if d.reported == d.observed {
			t = d.reportedAt.Add(d.reportAgain())
		}
	}
	if d.observer >= 0 && (!ok || d.beatDue.Before(t)) {
		t, ok = d.beatDue, true
	}
	return t, ok
}

// HasReady reports whether Ready has anything to act on.
func (d *Detector) HasReady() bool {
	return len(d.heartbeats) > 0 || len(d.suspected) > 0
}

// Ready returns the output accumulated since the last Advance. The caller
// owns the slices; calling Ready again before Advance returns the same
// output, possibly grown.
func (d *Detector) Ready() Ready {
	return Ready{Heartbeats: d.heartbeats, Suspected: d.suspected}
}

// Advance acknowledges the output of the last Ready: the detector forgets it.
func (d *Detector) Advance() {
	d.heartbeats, d.suspected = nil, nil
}

// maybeSuspect declares the observed rank failed if it has been silent for
// Timeout, and closes the ring over it.
func (d *Detector) maybeSuspect(now time.Time) {
	if d.observed < 0 || now.Before(d.heardAt.Add(d.cfg.Timeout)) {
		return
	}
	r := d.observed
	if d.cfg.AwaitConfirmation {
		if d.reported != r || !now.Before(d.reportedAt.Add(d.reportAgain())) {
			d.reported, d.reportedAt = r, now
			d.suspected = append(d.suspected, r)
		}
		return
	}
	d.suspected = append(d.suspected, r)
	d.failed.Add(r)
	d.maybeReconnect(now)
}

// reportAgain is how often a suspect awaiting confirmation is reported
// again while it stays silent (its confirmer may have found it alive: a
// slow process, whose heartbeats should come back).
func (d *Detector) reportAgain() time.Duration { return 4 * d.cfg.Timeout }

// maybeBeat queues the periodic heartbeat to the observer if it is due.
func (d *Detector) maybeBeat(now time.Time) {
	if d.observer < 0 || now.Before(d.beatDue) {
		return
	}
	d.queueBeat(d.observer)
	// Keep the cadence of the schedule, but never owe a burst after a late
	// tick.
	d.beatDue = d.beatDue.Add(d.cfg.Period)
	if !d.beatDue.After(now) {
		d.beatDue = now.Add(d.cfg.Period)
	}
}

// maybeReconnect recomputes the ring's neighbours after the failed set grew
// (or at start), and starts observing, or sending to, new ones.
func (d *Detector) maybeReconnect(now time.Time) {
	if p := d.nearestLive(-1); p != d.observed {
		d.becomeObserverOf(p, now)
	}
	if s := d.nearestLive(+1); s != d.observer {
		d.becomeObservedBy(s, now)
	}
}

// becomeObserverOf starts watching rank p, granting it a full Timeout from
// now: it may not have been sending to us before.
func (d *Detector) becomeObserverOf(p int, now time.Time) {
	d.observed = p
	d.heardAt = now
	d.reported = -1
}

// becomeObservedBy makes rank s the observer and sends it a heartbeat at once,
// since it starts its Timeout for us as soon as it learns the ring changed.
func (d *Detector) becomeObservedBy(s int, now time.Time) {
	d.observer = s
	if s < 0 {
		return
	}
	d.queueBeat(s)
	d.beatDue = now.Add(d.cfg.Period)
}

// nearestLive returns the first rank self+dir, self+2·dir, ... (mod n) not
// known to have failed, or -1 if every other rank has.
func (d *Detector) nearestLive(dir int) int {
	for k := 1; k < d.n; k++ {
		r := ((d.self+dir*k)%d.n + d.n) % d.n
		if !d.failed.Has(r) {
			return r
		}
	}
	return -1
}

func (d *Detector) queueBeat(r int) {
	if !slices.Contains(d.heartbeats, r) {
		d.heartbeats = append(d.heartbeats, r)
	}
}
