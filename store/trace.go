package store

import (
	"context"
	"time"

	"github.com/ftrma/ftrma"
)

// Tracing. A Put, Get or Delete whose context carries a Trace (WithTrace)
// records in it the phases its code went through — finding the key's slots,
// taking the locks, publishing, ... — with the wall time of each, and the
// round trips it waited for in each: every blocking wait for remote
// completion on its path (a window Flush: the store makes no other blocking
// call toward a peer, bar the flush that settles what a failure cut short,
// see op.completed, which is not counted). It is a diagnostic (ftkv bench
// -v) of where an operation's time goes; a call without a Trace pays one
// context look-up at each phase and flush, and records nothing.
//
// The trace travels in the context, not in the store, so that each call —
// of any goroutine — records into its own, and the housekeeping's flushes
// into none.

// Trace is where one call's time went. A call made with WithTrace(ctx, t)
// first resets t, so t holds the last traced call's phases; read it after
// the call returns. A Trace records one call at a time: give each
// goroutine its own.
type Trace struct {
	Op     string  // the call traced: "put", "get" or "delete"
	Phases []Phase // in the order first entered; a phase entered again (a retry) adds to its entry

	on    bool      // a call is being traced
	cur   int       // index in Phases of the phase under way
	since time.Time // when it began
	fresh bool      // the next Flush starts a round trip
}

// Phase is one phase of a traced call.
type Phase struct {
	Name string
	Time time.Duration // wall time spent in it
	// RoundTrips counts the waits for remote completion made in it, one
	// after another: a batch of Flushes toward several ranks, posted
	// together (a Push to each, then a Flush of each), counts as one.
	RoundTrips int
	// Flushes counts the Flush calls of those round trips: the ranks
	// waited for (this rank's own included).
	Flushes int
	// Waited counts the Flushes that did not return at once (over
	// waitedAfter): their answers had not come yet, so the caller spun or
	// parked and was woken. The others found them already there.
	Waited int
	// Sending is the part of Time spent in the Pushes that send a batch's
	// operations toward each rank before its Flushes (on tcp a system call
	// each, which wakes the target). A lone Flush sends within itself.
	Sending time.Duration
}

// waitedAfter is how long a Flush of operations already complete takes at
// most (a few atomics and a lock).
const waitedAfter = time.Microsecond

// WithTrace returns a context that makes the store's Put, Get and Delete
// record into t where their time goes (see Trace). The other calls record
// nothing.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

type traceKey struct{}

// traceOf returns ctx's trace, nil when there is none. A nil *Trace's
// methods do nothing.
func traceOf(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}

// Reset empties t, keeping its memory.
func (t *Trace) Reset() {
	*t = Trace{Phases: t.Phases[:0]}
}

// Total is the sum of t's phases (Name "total").
func (t *Trace) Total() Phase {
	sum := Phase{Name: "total"}
	for _, p := range t.Phases {
		sum.Time += p.Time
		sum.RoundTrips += p.RoundTrips
		sum.Flushes += p.Flushes
		sum.Waited += p.Waited
		sum.Sending += p.Sending
	}
	return sum
}

// begin starts tracing call op, in phase "start".
func (t *Trace) begin(op string) {
	if t == nil {
		return
	}
	t.Reset()
	t.Op, t.on = op, true
	t.Phases = append(t.Phases, Phase{Name: "start"})
	t.since = time.Now()
}

// phase ends the phase under way and enters phase name.
func (t *Trace) phase(name string) {
	if t == nil || !t.on {
		return
	}
	now := time.Now()
	t.Phases[t.cur].Time += now.Sub(t.since)
	t.since = now
	for i := range t.Phases {
		if t.Phases[i].Name == name {
			t.cur = i
			return
		}
	}
	t.cur = len(t.Phases)
	t.Phases = append(t.Phases, Phase{Name: name})
}

// end ends the traced call.
func (t *Trace) end() {
	if t == nil || !t.on {
		return
	}
	t.Phases[t.cur].Time += time.Since(t.since)
	t.on = false
}

// batch starts a round trip: the Flushes counted until the next batch are
// waited for together.
func (t *Trace) batch() {
	if t != nil {
		t.fresh = true
	}
}

// now is the time a Flush starts (zero when not tracing).
func (t *Trace) now() time.Time {
	if t == nil || !t.on {
		return time.Time{}
	}
	return time.Now()
}

// sent counts the time since start, of Pushes before a batch's Flushes.
func (t *Trace) sent(start time.Time) {
	if t == nil || !t.on {
		return
	}
	t.Phases[t.cur].Sending += time.Since(start)
}

// flushed counts a Flush, started at start, in the round trip under way.
func (t *Trace) flushed(start time.Time) {
	if t == nil || !t.on {
		return
	}
	p := &t.Phases[t.cur]
	if t.fresh {
		p.RoundTrips++
		t.fresh = false
	}
	p.Flushes++
	if time.Since(start) > waitedAfter {
		p.Waited++
	}
}

// flush is the operation's window's Flush toward r, counted in ctx's trace
// as a round trip of its own.
func (o *op) flush(ctx context.Context, r ftrma.Rank) error {
	t := traceOf(ctx)
	if t == nil {
		return o.v().w.Flush(ctx, r)
	}
	t.batch()
	start := t.now()
	err := o.v().w.Flush(ctx, r)
	t.flushed(start)
	return err
}
