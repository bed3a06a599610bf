package launcher

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// The driver's part in spares (launcher/internal/arbiter/WIRING.md, spares while
// ftrun is gone): proposing claims, joins and the address book, and
// handing the spare events of the applied log to whoever waits for them.

// spareEvent reports whether e is one of the spares' events.
func spareEvent(e arbiter.Event) bool {
	switch e.Kind {
	case arbiter.EventSpareClaimed, arbiter.EventSpareJoined, arbiter.EventSpareLost:
		return true
	}
	return false
}

// onSpare has f called with every spare event the log applies from now
// on, on the driver's goroutine, which f must not block.
func (d *arbDriver) onSpare(f func(arbiter.Event)) {
	d.endMu.Lock()
	d.spareTo = append(d.spareTo, f)
	d.endMu.Unlock()
}

// spareWaiter gets the spare events of one rank from the moment it is
// made (watchSpare) until it is dropped.
type spareWaiter struct {
	d    *arbDriver
	rank ftrma.Rank
	ch   chan arbiter.Event
}

// watchSpare starts collecting the spare events of rank r: make it before
// proposing what they answer.
func (d *arbDriver) watchSpare(r ftrma.Rank) *spareWaiter {
	w := &spareWaiter{d: d, rank: r, ch: make(chan arbiter.Event, 4)}
	d.endMu.Lock()
	d.spareWait[r] = append(d.spareWait[r], w.ch)
	d.endMu.Unlock()
	return w
}

// drop stops w's collection.
func (w *spareWaiter) drop() {
	w.d.endMu.Lock()
	defer w.d.endMu.Unlock()
	ws := w.d.spareWait[w.rank]
	for i, ch := range ws {
		if ch == w.ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(w.d.spareWait, w.rank)
	} else {
		w.d.spareWait[w.rank] = ws
	}
}

// errSpareWait: no event of the kind waited for came in time.
var errSpareWait = errors.New("the job's arbiter did not apply it in time")

// next waits at most d for w's next event of one of kinds.
func (w *spareWaiter) next(d time.Duration, kinds ...arbiter.EventKind) (arbiter.Event, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case e := <-w.ch:
			for _, k := range kinds {
				if e.Kind == k {
					return e, nil
				}
			}
		case <-t.C:
			return arbiter.Event{}, errSpareWait
		case <-w.d.quit:
			return arbiter.Event{}, fmt.Errorf("the job's arbiter stopped: %w", errSpareWait)
		}
	}
}

// dispatchSpare hands spare event e to the waiters of its rank and the
// onSpare functions; on the run goroutine.
func (d *arbDriver) dispatchSpare(e arbiter.Event) {
	d.endMu.Lock()
	to := slices.Clone(d.spareTo)
	for _, ch := range d.spareWait[e.Rank] {
		select {
		case ch <- e:
		default: // a waiter takes at most a claim, a join and a loss
		}
	}
	d.endMu.Unlock()
	for _, f := range to {
		f(e)
	}
}

// claimSpare proposes the claim of spare r on host h with payload, by
// this node's host.
func (d *arbDriver) claimSpare(r ftrma.Rank, h int, payload []byte) {
	p := append([]byte(nil), payload...)
	d.input(func(now time.Time) { d.node.ClaimSpare(r, h, p, now) })
}

// joinSpare proposes that claimed spare r published addr.
func (d *arbDriver) joinSpare(r ftrma.Rank, addr string) {
	d.input(func(now time.Time) { d.node.JoinSpare(r, addr, now) })
}

// publishAddresses proposes the address book of ranks from on.
func (d *arbDriver) publishAddresses(from ftrma.Rank, addrs []string) {
	d.input(func(now time.Time) { d.node.PublishAddresses(from, addrs, now) })
}

// withState runs f on the driver's goroutine with the node's applied
// state (f must not keep it, nor block) and whether it acts, and waits
// for it; false if the driver stopped first. Every spare event applied
// before f runs has been dispatched, none after.
func (d *arbDriver) withState(f func(st *arbiter.State, acting bool)) bool {
	done := make(chan struct{})
	d.input(func(now time.Time) {
		f(d.node.State(), d.node.Acting(now))
		close(done)
	})
	select {
	case <-done:
		return true
	case <-d.quit:
		return false
	}
}

// spareClaimWait bounds how long a node waits for its claim or join to
// apply: a few election timeouts (a take-over may come between).
func (d *arbDriver) spareClaimWait() time.Duration {
	return 4*d.cfg.ElectionTimeout() + d.cfg.LeaseTerm
}
