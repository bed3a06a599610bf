package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// The core of every operation: the view it works in (view), its handle on
// the store (op), and how it starts again or retries.
//
// Views. Every operation works in one view of the store: the window, the
// communicator, each rank's table address and the placement rule (Grow
// moves the store from view to view: grow.go). An operation takes the view
// current when it starts and counts itself in it (hold), and uses that view
// alone at every step (op); Grow installs a new view and waits until the
// operations of the one before have ended (drain).
//
// Two ways to try again, for two causes (store/DESIGN.md §5.1):
//
//   - errNewView: an attempt met a failure or a wait in a view that is no
//     longer current. It gives up what it holds and the operation starts
//     again, from its outermost call (inView), in the current view; what it
//     took through a window rebuilt under it is let go through the current
//     one (live, completed).
//   - errRetry: a replica failed (or a remembered slot was reused). The
//     operation tries again in the same view once this rank's view of the
//     failures has moved on, paced by a retrier, which gives up only when
//     no verdict came for the runtime's verdict bound.

// view is what an operation works with: see above.
type view struct {
	w      *window.Window
	c      window.Comm
	tables []uint64 // address of each rank's table region
	hosts  []string // each rank's host
	place  *placement
	fast   bool // fast reads allowed (see fastread.go)
	// epoch numbers the processes the ranks are: a transition view, whose
	// replaced ranks are new processes, has the next one; the caches keep
	// what they learn under it (keyAt, slotRef, regionRef).
	epoch uint64

	arenas    []*arena // this rank's allocations of records, by target rank
	keyArenas []*arena // and of key blocks

	// In the transition view: the placement before, and the ranks whose
	// process was replaced (failed in the old placement).
	old      *placement
	replaced []bool
	// dropping marks the new view while ranks drop the copies it no longer
	// places (old and replaced are still set): it places keys as the new
	// view does, but a deletion also deletes the copies at the old
	// placement's ranks (leftovers).
	dropping bool
	// interim marks the view a Grow installs at a survivor once it has
	// rebuilt the window, until its transition view: its ranks' tables
	// are known only to the survivors, so a deletion here could not reach
	// a copy that another rank, already in the transition view, wrote at a
	// new rank; a deletion waits it out (outsideInterim, DESIGN.md F39).
	interim atomic.Bool

	ops atomic.Int64 // operations working in this view

	next atomic.Pointer[view] // the view installed after this one (setView)
}

// setView makes v the current view, after the one current until now.
func (s *Store) setView(v *view) {
	if prev := s.cur.Load(); prev != nil {
		prev.next.Store(v)
	}
	s.cur.Store(v)
}

// sameProcess reports whether rank r is, in the current view, the live
// process it was in the operation's view: not failed, and not replaced by
// a Grow since (a transition view installed after the operation's marks
// it). Writes meant for what the operation's view's process held go
// through the current window only then (clearPending, free).
func (o *op) sameProcess(r ftrma.Rank) bool {
	for v := o.view.next.Load(); v != nil; v = v.next.Load() {
		if v.old != nil && !v.dropping && v.replaced[r] {
			return false
		}
	}
	return !o.current().c.ProcFailed(r)
}

// current returns the current view. Operations use the view they hold
// (op.v), never this one.
func (s *Store) current() *view { return s.cur.Load() }

// hold returns the current view, counting the caller as working in it until
// it calls v.done().
func (s *Store) hold() *view {
	for {
		v := s.cur.Load()
		v.ops.Add(1)
		if s.cur.Load() == v {
			return v
		}
		v.ops.Add(-1)
	}
}

func (v *view) done() { v.ops.Add(-1) }

// op is one operation's handle on the store: the store, and the view the
// operation works in from its start to its end (or to errNewView). Every
// step of an operation — replica sets, window, tables, failed ranks, arenas
// — comes from that one view, so an operation never mixes two.
type op struct {
	*Store
	view *view
	// moving marks the operation of Grow's move: the writes of its repairs
	// count in Stats.GrowKeys and GrowBytes.
	moving bool
}

// begin starts an operation in the current view; end it with o.end.
func (s *Store) begin() *op { return &op{Store: s, view: s.hold()} }

func (o *op) end() { o.view.done() }

// v is the operation's view.
func (o *op) v() *view { return o.view }

// failed reports whether rank r is out of the store in the operation's
// view: failed, or departed (the runtime counts a rank that closed its
// transport as gone too).
func (o *op) failed(r ftrma.Rank) bool { return o.view.c.ProcFailed(r) }

// stale reports whether Grow has installed a view after the operation's.
func (o *op) stale() bool { return o.Store.cur.Load() != o.view }

// renew moves the operation to the current view, after errNewView.
func (o *op) renew() {
	o.view.done()
	o.view = o.Store.hold()
}

// errNewView: the operation's view is no longer current and an attempt of
// it met a failure (the window of the view was rebuilt, or a replica
// failed) or a wait that the next view ends; it gives up what it holds and
// starts again, from its outermost call, in the current view. Operations
// retry after a failure anyway, so an attempt given up is one they know how
// to leave.
var errNewView = errors.New("store view changed: start again in the new one")

// restart reports whether the operation is to start again in the current
// view after err: errNewView, or a use of its view's window that a Grow
// rebuilt meanwhile.
func (o *op) restart(err error) bool {
	return errors.Is(err, errNewView) || errors.Is(err, window.ErrRebuilt) && o.stale()
}

// completed reports whether the operations this rank posted toward r,
// whose flush failed with err, completed all the same, so that the results
// of its compare-and-swaps are known and what they took can be let go.
// Two failures leave posted operations under way: the view's window was
// rebuilt (they went to the transport; a flush through the current window
// completes them), or ctx ended — and the window may be rebuilt after that,
// before the flush here (F33). The flush here is bounded by the verdict
// bound, not by ctx: a live rank answers within a round trip, and one that
// does not is declared failed within it.
func (o *op) completed(ctx context.Context, r ftrma.Rank, err error) bool {
	w := o.v().w
	switch {
	case errors.Is(err, window.ErrRebuilt):
		if w = o.live(); w == o.v().w {
			return false
		}
	case ctx.Err() == nil:
		return false
	}
	err = o.flushAnyway(ctx, w, r)
	if errors.Is(err, window.ErrRebuilt) && w == o.v().w {
		if lw := o.live(); lw != w {
			err = o.flushAnyway(ctx, lw, r)
		}
	}
	return err == nil
}

// flushAnyway flushes toward r through w whether or not ctx has ended,
// bounded by the verdict bound (see completed).
func (s *Store) flushAnyway(ctx context.Context, w *window.Window, r ftrma.Rank) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.verdict)
	defer cancel()
	return w.Flush(fctx, r)
}

// inView runs f as one operation, again in the next view each time f
// returns errNewView.
func (s *Store) inView(f func(o *op) error) error {
	o := s.begin()
	defer o.end()
	for {
		if err := f(o); !o.restart(err) {
			return err
		}
		o.renew()
	}
}

// live is the current view's window: release writes (of locks, claims and
// leases this process holds) go through it, so that an operation whose
// view's window was rebuilt still lets go of what it took. The window of an
// operation's view is either the current one, or rebuilt (every operation
// on it fails), so the releases stay ordered after the operation's writes.
// Between Rebuild replacing the current view's window and Grow installing
// the view with the new one (a moment: no communication in between) live
// waits, up to localBound.
func (s *Store) live() *window.Window {
	start := time.Now()
	for {
		w := s.current().w
		if !w.IsRebuilt() || time.Since(start) > localBound {
			return w
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// liveAt is live for a release toward rank r, or nil when r is another
// process there than in the operation's view (replaced since: what this
// rank held at the old process went with it, and an address of the old
// process's memory means nothing, or something else, at the new one).
func (o *op) liveAt(r ftrma.Rank) *window.Window {
	w := o.live()
	if w != o.v().w && !o.sameProcess(r) {
		return nil
	}
	return w
}

// errInterim: a deletion found its view interim (see view.interim); it
// gives back the key's process locks, waits (outsideInterim) and starts
// again. It never leaves the package.
var errInterim = errors.New("store: a deletion waits out Grow's interim view")

// interim returns errInterim for a deletion (del) when the operation's
// view is interim. A view found not interim stays so.
func (o *op) interim(del bool) error {
	if del && o.v().interim.Load() {
		return errInterim
	}
	return nil
}

// outsideInterim runs attempt, a write that takes and gives back the key's
// process locks; when it deletes (del), again each time it returns
// errInterim, after waiting without them until the current view is not
// interim: Grow installs its transition view, or stops before it and
// clears the mark. So the wait is Grow's exchange; a deletion waiting with
// the process locks held could stop an operation of the view before, which
// Grow's drain waits for.
func (s *Store) outsideInterim(ctx context.Context, del bool, attempt func() error) error {
	if !del {
		return attempt()
	}
	for {
		for i := 0; s.current().interim.Load(); i++ {
			if err := backoff(ctx, min(i, 5)); err != nil {
				return err
			}
		}
		if err := attempt(); !errors.Is(err, errInterim) {
			return err
		}
	}
}

// writeKey runs f as one operation on key id, under the key's process
// lock, again in each next view (inView); a deletion (del) first waits out
// Grow's interim view without the lock (outsideInterim).
func (s *Store) writeKey(ctx context.Context, id ident, del bool, f func(o *op) error) error {
	return s.outsideInterim(ctx, del, func() error {
		if err := s.keys.lock(ctx, id); err != nil {
			return err
		}
		defer s.keys.unlock(id)
		return s.inView(func(o *op) error {
			if err := o.interim(del); err != nil {
				return err
			}
			return f(o)
		})
	})
}

// drain waits until no operation works in v (v is no longer current).
func drain(ctx context.Context, v *view) error {
	for i := 0; v.ops.Load() > 0; i++ {
		if err := backoff(ctx, min(i, 5)); err != nil {
			return err
		}
	}
	return nil
}

// replicas returns the key's replicas in v, given the failed ranks: its
// placement, and in the transition view the union of its old and new
// placements (the old ones first).
func (v *view) replicas(h uint64, failed func(ftrma.Rank) bool) []ftrma.Rank {
	now := v.place.replicas(h, failed)
	if v.old == nil || v.dropping {
		return now
	}
	out := v.old.replicas(h, func(r ftrma.Rank) bool { return v.replaced[r] || failed(r) })
	for _, r := range now {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// leftovers returns, in the dropping view, the ranks of the key's old
// placement that its new placement leaves out: they may hold a copy not
// dropped yet. None in any other view.
func (v *view) leftovers(h uint64, failed func(ftrma.Rank) bool) []ftrma.Rank {
	if !v.dropping {
		return nil
	}
	now := v.place.replicas(h, failed)
	var out []ftrma.Rank
	for _, r := range v.old.replicas(h, func(r ftrma.Rank) bool { return v.replaced[r] || failed(r) }) {
		if !slices.Contains(now, r) {
			out = append(out, r)
		}
	}
	return out
}

// retryErr reports whether an operation that met err tries again: a
// replica failed, or Grow rebuilt the window under it (the next attempt
// takes the new one).
func retryErr(err error) bool {
	return errors.Is(err, ftrma.ErrProcFailed) || errors.Is(err, window.ErrRebuilt)
}

// mayHaveHeld is placement.mayHaveHeld in v (the old placement in
// transition: the new ranks held nothing before it).
func (v *view) mayHaveHeld(h uint64) int {
	if v.old != nil && !v.dropping {
		return v.old.mayHaveHeld(h, func(r ftrma.Rank) bool { return v.replaced[r] || v.c.ProcFailed(r) })
	}
	return v.place.mayHaveHeld(h, v.c.ProcFailed)
}

// errRetry: a replica failed during the step; start it again with the new
// placement.
var errRetry = errors.New("replica failed, retry")

// errAgain: an attempt met no failure but must look again at once (a slot
// this rank remembered holds another key now: errStale; a conditional
// write made the replicas agree before checking its condition). It is an
// errRetry, so every retry loop takes it, but the retrier does not wait
// for a failure that is not coming: up to quickTries times per operation
// it lets the next attempt start at once.
var errAgain = fmt.Errorf("%w: look again", errRetry)

// quickTries bounds the attempts a retrier lets start at once after
// errAgain; past it they are paced as after a failure (a key churned by
// other writers could otherwise keep one spinning).
const quickTries = 3

// retry runs attempt until it returns anything but errRetry, paced by a
// retrier: the one loop of every retry after a replica's failure. Restarts
// in the next view (errNewView) go out to inView.
func (o *op) retry(ctx context.Context, attempt func() error) error {
	rt := o.retrier()
	for {
		err := attempt()
		if !errors.Is(err, errRetry) {
			return err
		}
		traceOf(ctx).phase("retry")
		if err := rt.again(ctx, err); err != nil {
			return err
		}
	}
}

// retrier paces an operation that starts again because a replica failed.
// Progress needs this rank to learn of the failure, which can come a little
// after the transport reported the broken connection, or, for a replica cut
// off but not yet judged, only once the runtime's verdict comes: each retry
// waits until the known failures change, or a pause growing from 1 to 64 ms
// has passed. The operation gives up only when no verdict came for the
// store's verdict bound since its first failed attempt or the last verdict
// it saw: once the verdict comes, it completes on the new replica set.
type retrier struct {
	o     *op
	since time.Time // the first failed attempt, or the last change of the known failures
	i     int
	known int
	quick int // attempts let start at once after errAgain
}

func (o *op) retrier() *retrier {
	return &retrier{o: o, known: o.knownFailed()}
}

// knownFailed counts the ranks failed in the operation's view.
func (o *op) knownFailed() int {
	n := 0
	for r := range o.n {
		if o.failed(ftrma.Rank(r)) {
			n++
		}
	}
	return n
}

// again waits before the next attempt after err (an errRetry; not after an
// errAgain, the first quickTries times); it returns an
// error wrapping ftrma.ErrProcFailed when replicas kept failing for the
// verdict bound with no new verdict, ctx's error, or errNewView when the
// operation's view is no longer current (the next attempt is to be made in
// the new one).
func (r *retrier) again(ctx context.Context, err error) error {
	r.o.st.retries.Add(1)
	if r.o.stale() {
		return errNewView
	}
	if errors.Is(err, errAgain) && r.quick < quickTries {
		r.quick++
		return nil
	}
	if k := r.o.knownFailed(); r.since.IsZero() || k != r.known {
		r.since, r.known = time.Now(), k
	} else if bound := r.o.verdict; time.Since(r.since) > bound {
		return fmt.Errorf("%w: replicas kept failing for %v, the runtime's verdict bound, with no verdict (%v)", ftrma.ErrProcFailed, bound, err)
	}
	deadline := time.Now().Add(time.Millisecond << min(r.i, 6))
	r.i++
	for r.o.knownFailed() == r.known && time.Now().Before(deadline) {
		t := time.NewTimer(200 * time.Microsecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	r.known = r.o.knownFailed()
	return ctx.Err()
}

// jitterSeq numbers the backoffs of this process; each one's jitter is a
// hash of its number (splitmix64), so that contenders that back off at the
// same moment wake apart, and a test that sets the number replays them.
var jitterSeq atomic.Uint64

func init() { jitterSeq.Store(rand.Uint64()) }

// jitter returns a duration in [0, d), d > 0.
func jitter(d time.Duration) time.Duration {
	z := jitterSeq.Add(0x9e3779b97f4a7c15)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return time.Duration(z % uint64(d))
}

// backoff sleeps before attempt i of a contended operation.
func backoff(ctx context.Context, i int) error {
	d := 20 * time.Microsecond << min(i, 7)
	d += jitter(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
