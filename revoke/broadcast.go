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
	// settled is false from an Admit until the next Settle: the ranks may
	// count different ranks present, so their trees may differ, and this
	// rank floods.
	settled bool
	// seen holds every ID seen here: nil once it is a flood here, or, while
	// it has travelled only as a tree, what a flood of it would need.
	seen map[string]*treeState

	// The output not yet acknowledged by Advance. send never names a rank
	// in dead; deliver holds each ID at most once over the Broadcast's life.
	send    []Outgoing
	deliver []Message
}

// treeState is an ID that has come here only down one tree: the message,
// the tree's root, and the ranks that hold it from or through this rank
// (the one it came from and those it was sent to), which a flood skips.
type treeState struct {
	msg  Message
	root int
	has  overlay.Set
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
		seen:    map[string]*treeState{},
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
	b.settled = false
	b.regraph()
	return true
}

// Settle tells the Broadcast that every live rank counts present at least
// the ranks this one does (every admission made here has been made at every
// live rank): it forwards on the graph over its present ranks alone from
// now on, and forgets the graphs of its earlier present sets.
func (b *Broadcast) Settle() {
	b.neighbors = b.graphNeighbors()
	b.settled = true
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
	ranks, self := b.presentRanks(b.self)
	var out []int
	for _, i := range overlay.Neighbors(self, len(ranks)) {
		out = append(out, ranks[i])
	}
	return out
}

// presentRanks returns the present ranks in rank order and the index of
// rank r among them (-1 if r is absent).
func (b *Broadcast) presentRanks(r int) (ranks []int, at int) {
	at = -1
	for q, p := range b.present {
		if p {
			if q == r {
				at = len(ranks)
			}
			ranks = append(ranks, q)
		}
	}
	return ranks, at
}

// treeChildren returns self's children in the binomial tree over the
// present ranks rooted at root, and false when root is not present here.
func (b *Broadcast) treeChildren(root int) ([]int, bool) {
	ranks, at := b.presentRanks(root)
	if at < 0 {
		return nil, false
	}
	m := len(ranks)
	_, self := b.presentRanks(b.self)
	var out []int
	for _, c := range overlay.TreeChildren((self-at+m)%m, m) {
		out = append(out, ranks[(at+c)%m])
	}
	return out, true
}

// treeOK reports whether this rank may send a tree copy: it is settled and
// knows of no failure.
func (b *Broadcast) treeOK() bool { return b.settled && b.dead.Len() == 0 }

// Originate starts the broadcast of m from this rank: the next Ready sends it
// down this rank's tree, or floods it to every live neighbour when this
// rank knows of a failure or is not settled, and delivers it here. If m.ID
// was already seen (originated here, or received), Originate does nothing:
// the broadcast is under way. The Broadcast keeps m.Payload without
// copying it, and every Outgoing and delivered copy shares it: the caller
// must not modify it.
func (b *Broadcast) Originate(m Message) {
	if _, ok := b.seen[m.ID]; ok {
		return
	}
	m.tree = 0
	if b.treeOK() {
		m.tree = b.self + 1
	}
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
// Every ID that has come here only as a tree turns into a flood: r may have
// died before passing it on.
func (b *Broadcast) Failed(r int) {
	if r < 0 || r >= b.n || r == b.self || !b.dead.Add(r) {
		return
	}
	if !b.present[r] {
		b.present[r] = true
		b.regraph()
	}
	b.send = slices.DeleteFunc(b.send, func(o Outgoing) bool { return o.To == r })
	var trees []string
	for id, ts := range b.seen {
		if ts != nil {
			trees = append(trees, id)
		}
	}
	slices.Sort(trees) // the same sends in the same order every run (the simulators replay)
	for _, id := range trees {
		b.flood(id, b.seen[id])
	}
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
// longer needs and drops their late copies itself. An ID that has come
// here only as a tree is flooded first (the next Ready sends it), since
// this rank could not turn it later: so forgetting costs no other rank its
// copy.
func (b *Broadcast) Forget(id string) {
	if ts := b.seen[id]; ts != nil {
		b.flood(id, ts)
	}
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

// maybeForward is the whole protocol. On the first sight of an ID: as a
// tree copy that this rank may pass on as one, send it to this rank's
// children in its tree; otherwise flood it to every live neighbour but the
// sender; then deliver. A later copy turns an ID that has come only down a
// tree into a flood: a flood copy, or one from another root (a copy from
// the same root again would need a second parent, which a tree does not
// have, and is only noted as held by its sender).
func (b *Broadcast) maybeForward(from int, m Message) {
	ts, ok := b.seen[m.ID]
	switch {
	case ok && ts == nil:
		return // a flood here already
	case ok:
		if from >= 0 && from < b.n {
			ts.has.Add(from)
		}
		if m.tree != ts.root+1 {
			b.flood(m.ID, ts)
		}
		return
	}
	root := m.tree - 1
	var children []int
	tree := root >= 0 && root < b.n && b.treeOK()
	if tree {
		children, tree = b.treeChildren(root)
	}
	if !tree {
		m.tree = 0
		b.seen[m.ID] = nil
		for _, nb := range b.neighbors {
			if nb != from && !b.dead.Has(nb) {
				b.send = append(b.send, Outgoing{To: nb, Msg: m})
			}
		}
		b.deliver = append(b.deliver, m)
		return
	}
	ts = &treeState{msg: m, root: root, has: overlay.NewSet(b.n)}
	if from >= 0 && from < b.n {
		ts.has.Add(from)
	}
	b.seen[m.ID] = ts
	for _, c := range children {
		if !b.dead.Has(c) {
			ts.has.Add(c)
			b.send = append(b.send, Outgoing{To: c, Msg: m})
		}
	}
	b.deliver = append(b.deliver, m)
}

// flood turns id, which has come here only down a tree, into a flood: a
// flood copy to every live neighbour that does not hold it from or through
// this rank. id is a flood here from then on.
func (b *Broadcast) flood(id string, ts *treeState) {
	m := ts.msg
	m.tree = 0
	for _, nb := range b.neighbors {
		if !ts.has.Has(nb) && !b.dead.Has(nb) {
			b.send = append(b.send, Outgoing{To: nb, Msg: m})
		}
	}
	b.seen[id] = nil
}
