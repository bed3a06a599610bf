package revoke

import (
	"fmt"
	"slices"

	"github.com/ftrma/ftrma/internal/overlay"
)

// Broadcast is one rank's end of the reliable broadcast: a pure state machine
// driven by Originate, Step and Failed, whose output the caller collects with
// Ready and acknowledges with Advance. See the package documentation for the
// caller's duties. A Broadcast is not safe for concurrent use.
type Broadcast struct {
	self, n int
	// present[r] is false for a rank that has not started (a spare held in
	// reserve): it is in no graph. A rank becomes present by Admit or
	// Failed, and never absent again. present[self] is always true.
	present []bool
	// neighbors is the ranks forwarded to, ascending: the union of self's
	// neighbours in the graphs over every present set this rank has had
	// since the last Settle (or New), the present set now included.
	neighbors []int
	dead      overlay.Set // ranks known to have failed; only grows; never sent to
	seen      map[string]struct{}

	// The output not yet acknowledged by Advance. send never names a rank
	// in dead; deliver holds each ID at most once over the Broadcast's life.
	send    []Outgoing
	deliver []Message
}

// Outgoing is a message to send to one neighbour.
type Outgoing struct {
	To  int
	Msg Message
}

// Ready is the output of a Broadcast that the caller must act on: first send
// every Outgoing, then hand every message of Deliver to the application.
// Sending first means a rank that dies while acting on a delivery has
// already passed the message on; delivering first is as reliable among the
// survivors (see the package documentation, the caller's duty 5).
type Ready struct {
	Send    []Outgoing
	Deliver []Message
}

// New returns the broadcast state of rank self in a job of n ranks, every
// other rank presumed alive, except the ranks listed in absent, which have
// not started (spares held in reserve: see Admit). It panics unless n >= 1,
// 0 <= self < n and every absent rank is in [0, n) and not self: the job's
// shape is fixed by the caller, not by the network.
func New(self, n int, absent ...int) *Broadcast {
	if n < 1 || self < 0 || self >= n {
		panic(fmt.Sprintf("revoke: rank %d in a job of %d", self, n))
	}
	b := &Broadcast{
		self:    self,
		n:       n,
		present: make([]bool, n),
		dead:    overlay.NewSet(n),
		seen:    map[string]struct{}{},
	}
	for r := range b.present {
		b.present[r] = true
	}
	for _, r := range absent {
		if r < 0 || r >= n || r == self {
			panic(fmt.Sprintf("revoke: rank %d cannot start absent in a job of %d (self %d)", r, n, self))
		}
		b.present[r] = false
	}
	b.Settle()
	return b
}

// Admit makes the absent rank r present: a spare that has started. The
// graph is then over the present ranks with r among them, and r is
// forwarded to when it is a neighbour in it. Until Settle, this rank also
// keeps forwarding to its neighbours in the graphs over its earlier present
// sets (see the package documentation: views that differ during an
// admission). Admit reports whether r was absent; it does nothing for a
// rank already present (live or failed), for self, or outside [0, n).
func (b *Broadcast) Admit(r int) bool {
	if r < 0 || r >= b.n || b.present[r] {
		return false
	}
	b.present[r] = true
	b.regraph()
	return true
}

// Settle tells the Broadcast that every live rank counts present at least
// the ranks this one does (every admission made here has been made at every
// live rank): it forwards on the graph over its present ranks alone from
// now on, and forgets the graphs of its earlier present sets.
func (b *Broadcast) Settle() {
	b.neighbors = b.graphNeighbors()
}

// Neighbors returns the ranks this Broadcast forwards to (dead ones
// included), ascending, in a new slice.
func (b *Broadcast) Neighbors() []int { return slices.Clone(b.neighbors) }

// regraph adds self's neighbours in the graph over the present set, which
// has just grown, to neighbors.
func (b *Broadcast) regraph() {
	nb := append(slices.Clone(b.neighbors), b.graphNeighbors()...)
	slices.Sort(nb)
	b.neighbors = slices.Compact(nb)
}

// graphNeighbors returns self's neighbours in the binomial graph over the
// present ranks, numbered 0..m-1 in rank order.
func (b *Broadcast) graphNeighbors() []int {
	var ranks []int
	self := -1
	for r, p := range b.present {
		if p {
			if r == b.self {
				self = len(ranks)
			}
			ranks = append(ranks, r)
		}
	}
	var out []int
	for _, i := range overlay.Neighbors(self, len(ranks)) {
		out = append(out, ranks[i])
	}
	return out
}

// Originate starts the broadcast of m from this rank: the next Ready sends it
// to every live neighbour and delivers it here. If m.ID was already seen
// (originated here, or received), Originate does nothing: the broadcast is
// under way. The Broadcast keeps m.Payload without copying it, and every
// Outgoing and delivered copy shares it: the caller must not modify it.
func (b *Broadcast) Originate(m Message) {
	b.maybeForward(-1, m)
}

// Step handles message m received from rank from. The first time an ID
// arrives, the next Ready forwards m to every live neighbour except from and
// delivers it here; later copies are dropped. from need not be a neighbour
// (nor even a rank: pass -1 when unknown), and a message from a rank since
// declared dead is still accepted, since it may be the only copy around.
// Payload ownership is as for Originate.
func (b *Broadcast) Step(from int, m Message) {
	b.maybeForward(from, m)
}

// Failed records that rank r has failed: no message will be sent to it from
// now on, including those of the current Ready not yet acknowledged. Ranks
// outside the job, and self, are ignored. An absent rank that fails (it
// started, and failed before this rank admitted it) is admitted, failed:
// it counts in the graph, as at the ranks that admitted it before it
// failed, and is never sent to.
func (b *Broadcast) Failed(r int) {
	if r < 0 || r >= b.n || r == b.self || !b.dead.Add(r) {
		return
	}
	if !b.present[r] {
		b.present[r] = true
		b.regraph()
	}
	b.send = slices.DeleteFunc(b.send, func(o Outgoing) bool { return o.To == r })
}

// Seen reports whether a message with this ID was originated here or
// received (and therefore delivered, or about to be in the current Ready).
func (b *Broadcast) Seen(id string) bool {
	_, ok := b.seen[id]
	return ok
}

// Forget drops the memory of id, so that the Broadcast's memory does not
// grow with every ID ever seen: a later copy of id is taken as new
// (forwarded and delivered again). The caller forgets only IDs it no
// longer needs and drops their late copies itself. This rank forwarded id
// when it first saw it, so forgetting costs no other rank its copy.
func (b *Broadcast) Forget(id string) {
	delete(b.seen, id)
}

// HasReady reports whether Ready has anything to act on.
func (b *Broadcast) HasReady() bool {
	return len(b.send) > 0 || len(b.deliver) > 0
}

// Ready returns the output accumulated since the last Advance. The caller
// owns the slices; calling Ready again before Advance returns the same
// output, possibly grown.
func (b *Broadcast) Ready() Ready {
	return Ready{Send: b.send, Deliver: b.deliver}
}

// Advance acknowledges the output of the last Ready: the Broadcast forgets
// it.
func (b *Broadcast) Advance() {
	b.send, b.deliver = nil, nil
}

// maybeForward is the whole protocol: on the first sight of an ID, forward
// once to every live neighbour but the sender, then deliver.
func (b *Broadcast) maybeForward(from int, m Message) {
	if _, ok := b.seen[m.ID]; ok {
		return
	}
	b.seen[m.ID] = struct{}{}
	for _, nb := range b.neighbors {
		if nb != from && !b.dead.Has(nb) {
			b.send = append(b.send, Outgoing{To: nb, Msg: m})
		}
	}
	b.deliver = append(b.deliver, m)
}
