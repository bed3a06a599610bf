package agree

import (
	"fmt"
	"math"
	"slices"
)

// instWindow bounds how far beyond the instances this rank has started (or
// its Forget floor) a message may name an instance and still create state
// for it. Under sequential use the ranks of a communicator are at most a
// couple of instances apart; the window stops garbage from growing memory.
const instWindow = 64

// Outgoing is a message to send to rank To.
type Outgoing struct {
	To  int
	Msg Message
}

// Decision is the outcome of one agreement instance: the bitwise AND of the
// contributions of the ranks that took part, and the failed ranks. Every rank
// not in Failed contributed to Value; Failed is sorted and never holds a rank
// that survives (it may hold ranks that contributed and failed afterwards).
type Decision struct {
	Inst   uint64
	Value  uint64
	Failed []int
}

// Ready is what the machine asks the caller to do: send the messages, in
// order per destination, and hand the decisions to the local agreement
// callers. See Agreement.Ready.
type Ready struct {
	Send    []Outgoing
	Decided []Decision
}

// Agreement is one rank's side of fault-tolerant agreement over a group of n
// ranks, for a sequence of instances. It is a pure state machine: it never
// blocks, starts no goroutine, reads no clock and does no I/O. It is not safe
// for concurrent use; one goroutine drives it (see the package comment).
type Agreement struct {
	self, n int
	failed  bitset // ranks reported by Failed: grow-only, never holds self
	leader  int    // the lowest rank not in failed; <= self
	floor   uint64 // instances below floor were forgotten
	hi      uint64 // the highest instance started so far (0 if none)

	insts map[uint64]*instance
	order []uint64 // the keys of insts in increasing order, for deterministic iteration

	rd Ready // output not yet taken by Advance
}

// instance is the state of one agreement instance at this rank.
//
// Invariants: cur only grows (joined rounds are never left for lower ones);
// promised <= cur; once reported, no REPORT for cur is sent again; dec, once
// set, keeps its value and failed set (it may be replaced only by a decision
// of a higher round with the same outcome).
type instance struct {
	id        uint64
	started   bool   // Start was called
	value     uint64 // this rank's contribution, once started
	delivered bool   // the Decision went out in Ready

	// The round this rank last joined, its tree and the aggregation for it.
	joined   bool
	cur      Round
	fr       bitset // the failed set of cur; members are the other ranks
	place    place
	got      []bool // got[i]: a REPORT for cur came from place.children[i]
	reported bool   // our REPORT for cur went out (or, at cur's coordinator, cur completed)
	curDone  bool   // a decision of cur or later went to our children in cur
	agg      aggregate

	// promised is the highest round for which this rank sent a REPORT while
	// undecided: it never accepts a decision of a lower round afterwards.
	promised Round
	maxSeen  Round     // the highest round named in any message for this instance
	dec      *decision // the decision with the highest round known here, or nil

	waiters []waiter // NUDGEs not yet answered
	stuck   Round    // the highest round named by a NUDGE (including our own)

	nudged     bool // a NUDGE for (nudgeRound, nudgeTo) was sent
	nudgeRound Round
	nudgeTo    int
}

// aggregate accumulates the children's REPORTs for the current round.
type aggregate struct {
	and     uint64
	covered bitset
	failed  bitset
	dec     *decision
}

type waiter struct {
	rank  int
	round Round
}

// New returns the agreement machine of rank self in a group of n ranks. It
// panics unless 0 <= self < n <= MaxRanks.
func New(self, n int) *Agreement {
	if n < 1 || n > MaxRanks || self < 0 || self >= n {
		panic(fmt.Sprintf("agree: New(%d, %d): need 0 <= self < n <= %d", self, n, MaxRanks))
	}
	return &Agreement{self: self, n: n, failed: newBitset(n), insts: make(map[uint64]*instance)}
}

// Start contributes this rank's value to instance inst: the local call of
// MPI_Comm_agree. It is ignored for an instance already started or below the
// Forget floor.
func (a *Agreement) Start(inst uint64, value uint64) {
	s := a.get(inst, true)
	if s == nil || s.started {
		return
	}
	s.started, s.value = true, value
	a.hi = max(a.hi, inst)
	if s.dec != nil {
		a.deliver(s)
	}
	if !s.joined {
		a.join(s, Round{}, newBitset(a.n))
		if a.self == 0 && a.roundZeroDoomed() {
			// Rank 0 already knows that a failed rank cuts off part of round
			// zero's tree: start the next round at once rather than after a
			// sweep of reports.
			a.startRound(s, nil)
		}
	}
	a.settle(s)
}

// Failed tells the machine that rank r crashed. Knowledge only grows: the
// caller reports every failure it learns, once or more, and never takes one
// back. A rank reported failed must never act again as far as the surviving
// ranks are concerned (the runtime fences it). Out-of-range ranks and self are
// ignored.
func (a *Agreement) Failed(r int) {
	if r < 0 || r >= a.n || r == a.self || a.failed.has(r) {
		return
	}
	a.failed.set(r)
	for a.failed.has(a.leader) {
		a.leader++
	}
	for _, id := range a.order {
		s := a.insts[id]
		s.waiters = slices.DeleteFunc(s.waiters, func(w waiter) bool { return w.rank == r })
		a.settle(s)
	}
}

// Step hands the machine a message that arrived from rank from. Messages
// from ranks reported failed, from self or out of range, for forgotten or
// implausibly distant instances, and messages that make no sense in the
// current state are dropped. Step does not keep m's slices.
func (a *Agreement) Step(from int, m Message) {
	if from < 0 || from >= a.n || from == a.self || a.failed.has(from) {
		return
	}
	if m.Kind < KindStart || m.Kind > KindNudge {
		return
	}
	base := max(a.hi, a.floor)
	s := a.get(m.Inst, m.Inst <= base || m.Inst-base <= instWindow)
	if s == nil {
		return
	}
	switch m.Kind {
	case KindStart:
		a.onStart(s, from, m)
	case KindReport:
		a.onReport(s, from, m)
	case KindDecide:
		a.onDecide(s, from, m)
	case KindNudge:
		a.onNudge(s, from, m)
	}
	a.settle(s)
}

// Ready returns the messages to send and the decisions reached since the
// last Advance. The slices stay valid after Advance; the messages are
// read-only.
func (a *Agreement) Ready() Ready { return a.rd }

// HasReady reports whether Ready has anything.
func (a *Agreement) HasReady() bool { return len(a.rd.Send)+len(a.rd.Decided) > 0 }

// Advance acknowledges the last Ready: its messages were sent (or the caller
// gave up on them because this rank is going down) and its decisions handed
// over.
func (a *Agreement) Advance() { a.rd = Ready{} }

// Forget drops the state of every instance below before, and ignores them
// from then on. Under sequential use (each rank starts instance k+1 only after
// instance k decided there), once this rank has seen the decision of instance
// k every surviving rank has decided every instance below k, so Forget(k) is
// then safe.
func (a *Agreement) Forget(before uint64) {
	if before <= a.floor {
		return
	}
	a.floor = before
	i := 0
	for ; i < len(a.order) && a.order[i] < before; i++ {
		delete(a.insts, a.order[i])
	}
	a.order = a.order[i:]
}

// get returns the state of inst, creating it when create is set; nil for
// forgotten instances.
func (a *Agreement) get(inst uint64, create bool) *instance {
	if inst < a.floor {
		return nil
	}
	if s := a.insts[inst]; s != nil {
		return s
	}
	if !create {
		return nil
	}
	s := &instance{id: inst}
	a.insts[inst] = s
	i, _ := slices.BinarySearch(a.order, inst)
	a.order = slices.Insert(a.order, i, inst)
	return s
}

func (a *Agreement) send(to int, m Message) {
	if to == a.self || a.failed.has(to) {
		return
	}
	a.rd.Send = append(a.rd.Send, Outgoing{To: to, Msg: m})
}

func (a *Agreement) deliver(s *instance) {
	if s.delivered || !s.started || s.dec == nil {
		return
	}
	s.delivered = true
	a.rd.Decided = append(a.rd.Decided, Decision{Inst: s.id, Value: s.dec.value, Failed: s.dec.failed.list()})
}

func (s *instance) see(r Round) {
	if s.maxSeen.Less(r) {
		s.maxSeen = r
	}
}

// settle runs the rules that fire on state rather than on a message, until
// none fires: nudging, the leader's duty to run a round, and reporting (at a
// coordinator: completing the round, which may start the next one).
func (a *Agreement) settle(s *instance) {
	for range 8 {
		a.maybeNudge(s)
		a.maybeLead(s)
		if !a.maybeReport(s) {
			break
		}
	}
}

// --- rounds ---------------------------------------------------------------

// join makes this rank a member of round r, whose failed set is f (fitted to
// n, never modified afterwards). Joining sends START down the tree (except
// in round zero, which everyone joins on its own) and, if this rank already
// holds a decision of r or later, that decision too.
func (a *Agreement) join(s *instance, r Round, f bitset) bool {
	p, ok := placeOf(a.self, f, a.n)
	if !ok {
		return false
	}
	s.joined, s.cur, s.fr, s.place = true, r, f, p
	s.got = make([]bool, len(p.children))
	s.reported, s.curDone = false, false
	s.agg = aggregate{and: math.MaxUint64}
	s.see(r)
	if r.Counter > 0 {
		for _, c := range p.children {
			a.send(c, Message{Kind: KindStart, Inst: s.id, Round: r, failed: f})
		}
	}
	if s.dec != nil && !s.dec.tag.Less(r) {
		a.sendDown(s, s.dec, -1)
		s.curDone = true
	}
	return true
}

// startRound makes this rank coordinator of a new round above every round it
// has seen, over the ranks not in f or known failed.
func (a *Agreement) startRound(s *instance, f bitset) {
	if s.maxSeen.Counter == math.MaxUint64 {
		return // only garbage gets here; there is no higher round to start
	}
	g := union(f, a.failed, a.n)
	g[a.self>>6] &^= 1 << (uint(a.self) & 63)
	if g.firstAbsent(a.n) != a.self {
		return // a lower rank is a member: not ours to coordinate
	}
	a.join(s, Round{Counter: s.maxSeen.Counter + 1, Coord: a.self}, g)
}

// roundZeroDoomed reports whether some rank known failed has, in round
// zero's tree (where index = rank), a descendant not known failed.
func (a *Agreement) roundZeroDoomed() bool {
	for _, r := range a.failed.list() {
		for d := r + 1; d < r+(r&-r) && d < a.n; d++ {
			if !a.failed.has(d) {
				return true
			}
		}
	}
	return false
}

// maybeLead is the leader's duty. The leader (the lowest rank not known
// failed) must run a round above every round it has seen while it is
// undecided, or while a NUDGE named a round above its decision.
func (a *Agreement) maybeLead(s *instance) {
	if a.leader != a.self || !s.started {
		return
	}
	if s.dec != nil && !s.dec.tag.Less(s.stuck) {
		return
	}
	if s.joined && s.cur.Coord == a.self && !s.cur.Less(s.maxSeen) {
		return // already running the highest round
	}
	a.startRound(s, nil)
}

// maybeReport sends this rank's REPORT for the current round once it has
// contributed and every child has reported or is known failed. At the
// coordinator it completes the round instead. It reports whether it acted.
func (a *Agreement) maybeReport(s *instance) bool {
	if !s.started || !s.joined || s.reported {
		return false
	}
	for i, c := range s.place.children {
		if !s.got[i] && !a.failed.has(c) {
			return false
		}
	}
	and := s.agg.and & s.value
	covered := s.agg.covered.fit(a.n)
	covered.set(a.self)
	failed := union(s.agg.failed, a.failed, a.n)
	failed.or(s.fr)
	dec := later(s.agg.dec, s.dec)
	s.reported = true
	if s.place.parent < 0 {
		a.complete(s, and, covered, failed, dec)
		return true
	}
	a.send(s.place.parent, Message{Kind: KindReport, Inst: s.id, Round: s.cur,
		Value: and, covered: covered, failed: failed, dec: dec})
	if s.dec == nil && s.promised.Less(s.cur) {
		s.promised = s.cur
	}
	return true
}

// complete is the coordinator's end of a round: every member has reported or
// is known failed. If the reports cover every rank not known failed, the
// coordinator decides: the latest decision reported, if any, else the AND of
// the contributions with the failures known. Otherwise a failed member cut
// part of the tree off, and it starts the next round without it.
func (a *Agreement) complete(s *instance, and uint64, covered, failed bitset, dec *decision) {
	failed[a.self>>6] &^= 1 << (uint(a.self) & 63)
	if !coversAll(covered, failed, a.n) {
		a.startRound(s, failed)
		return
	}
	d := &decision{tag: s.cur, value: and, failed: failed}
	if dec != nil {
		d.value, d.failed = dec.value, dec.failed
	}
	a.setDecision(s, d)
	sent := a.sendDown(s, d, -1)
	s.curDone = true
	a.answerWaiters(s, sent)
}

// --- message handlers -----------------------------------------------------

func (a *Agreement) onStart(s *instance, from int, m Message) {
	r := m.Round
	if r.Counter == 0 || r.Coord < 0 || r.Coord >= a.n {
		return // round zero has no START
	}
	f := m.failed.fit(a.n)
	if f.firstAbsent(a.n) != r.Coord {
		return // the coordinator must be the lowest member
	}
	p, ok := placeOf(a.self, f, a.n)
	if !ok || p.parent != from {
		return
	}
	s.see(r)
	if a.failed.has(r.Coord) {
		return // a round of a dead coordinator never completes; the leader will run a higher one
	}
	if s.joined && !s.cur.Less(r) {
		if r.Less(s.cur) {
			// We are in a higher round and will not report in r: make
			// r's coordinator run a round above ours.
			a.send(r.Coord, Message{Kind: KindNudge, Inst: s.id, Round: s.cur})
		}
		return
	}
	a.join(s, r, f)
}

func (a *Agreement) onReport(s *instance, from int, m Message) {
	if !s.joined {
		if m.Round != (Round{}) {
			return
		}
		// A child's report for round zero before our own Start.
		a.join(s, Round{}, newBitset(a.n))
	}
	if m.Round != s.cur || s.reported {
		return
	}
	i := slices.Index(s.place.children, from)
	if i < 0 || s.got[i] {
		return
	}
	s.got[i] = true
	s.agg.and &= m.Value
	if s.agg.covered == nil {
		s.agg.covered, s.agg.failed = newBitset(a.n), newBitset(a.n)
	}
	s.agg.covered.or(m.covered.fit(a.n))
	s.agg.failed.or(m.failed.fit(a.n))
	if m.dec != nil {
		d := *m.dec
		d.failed = d.failed.fit(a.n)
		s.agg.dec = later(s.agg.dec, &d)
	}
}

func (a *Agreement) onDecide(s *instance, from int, m Message) {
	d := &decision{tag: m.Round, value: m.Value, failed: m.failed.fit(a.n)}
	s.see(d.tag)
	newly := s.dec == nil
	if newly && d.tag.Less(s.promised) {
		return // we reported undecided in a later round: its coordinator may decide otherwise
	}
	a.setDecision(s, d)
	var sent []int
	if s.joined && !s.curDone && (newly || !d.tag.Less(s.cur)) {
		sent = a.sendDown(s, d, from)
		s.curDone = !d.tag.Less(s.cur)
	}
	a.answerWaiters(s, sent)
}

func (a *Agreement) onNudge(s *instance, from int, m Message) {
	r := m.Round
	s.see(r)
	if s.dec != nil && !s.dec.tag.Less(r) {
		a.send(from, decideMsg(s.id, s.dec))
		return
	}
	i := slices.IndexFunc(s.waiters, func(w waiter) bool { return w.rank == from })
	if i < 0 {
		s.waiters = append(s.waiters, waiter{from, r})
	} else if s.waiters[i].round.Less(r) {
		s.waiters[i].round = r
	}
	if s.stuck.Less(r) {
		s.stuck = r
	}
}

// --- decisions --------------------------------------------------------------

func decideMsg(inst uint64, d *decision) Message {
	return Message{Kind: KindDecide, Inst: inst, Round: d.tag, Value: d.value, failed: d.failed}
}

// sendDown passes decision d to our children in the current round, except
// rank skip, and returns the children it went to.
func (a *Agreement) sendDown(s *instance, d *decision, skip int) []int {
	if !s.joined {
		return nil
	}
	for _, c := range s.place.children {
		if c != skip {
			a.send(c, decideMsg(s.id, d))
		}
	}
	return s.place.children
}

// setDecision records decision d: the first one is delivered; a later one of
// a higher round with the same outcome replaces it (so that NUDGEs naming
// higher rounds can be answered).
func (a *Agreement) setDecision(s *instance, d *decision) {
	switch {
	case s.dec == nil:
		s.dec = d
		a.deliver(s)
	case s.dec.tag.Less(d.tag) && s.dec.value == d.value && s.dec.failed.equal(d.failed):
		s.dec = d
	}
}

// answerWaiters sends our decision to every nudger whose round it covers,
// except those in sent, which were just sent that decision (or a later one)
// down the tree.
func (a *Agreement) answerWaiters(s *instance, sent []int) {
	if s.dec == nil {
		return
	}
	s.waiters = slices.DeleteFunc(s.waiters, func(w waiter) bool {
		if s.dec.tag.Less(w.round) {
			return false
		}
		if !slices.Contains(sent, w.rank) {
			a.send(w.rank, decideMsg(s.id, s.dec))
		}
		return true
	})
}

// maybeNudge asks the leader for help when this rank's parent in the current
// round is known failed, and either this rank has reported (the decision was
// to come down through that parent) or the round's coordinator is known
// failed too (the round is dead). Each (round, leader) pair is asked once;
// the leader answers with a decision of that round or later, or runs a round
// above it. Decided ranks nudge too: their children in the round may be
// waiting on them. Ranks whose parent is alive need not nudge: when a round
// dies, its topmost live ranks (whose parent is dead: the coordinator's
// children, or below a dead rank) speak for it, and the decision then flows
// down the tree again. That keeps a coordinator's death to a few NUDGEs.
func (a *Agreement) maybeNudge(s *instance) {
	if !s.started || !s.joined || s.curDone || s.cur.Coord == a.self {
		return
	}
	if s.place.parent < 0 || !a.failed.has(s.place.parent) || !s.reported && !a.failed.has(s.cur.Coord) {
		return
	}
	t := a.leader
	if s.nudged && s.nudgeRound == s.cur && s.nudgeTo == t {
		return
	}
	s.nudged, s.nudgeRound, s.nudgeTo = true, s.cur, t
	if t == a.self {
		// We lead: our own rule (maybeLead) takes it from here.
		if s.stuck.Less(s.cur) {
			s.stuck = s.cur
		}
		return
	}
	a.send(t, Message{Kind: KindNudge, Inst: s.id, Round: s.cur})
}
