package comm

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/agree"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/revoke"
	"github.com/ftrma/ftrma/transport"
)

// machine is the protocol logic of one process's runtime as a pure state
// machine, in the manner of raft's RawNode: it combines the failure detector,
// the reliable broadcast of failure and revocation notices, the job's failure
// knowledge and the agreement of every communicator. It starts no goroutine,
// reads no clock (the caller passes now), does no I/O and takes no lock.
//
// Inputs are received control messages (step), peer-down events (peerDown),
// the passing of time (tick, stalled) and local requests (originate,
// markFailed, addComm, dropComm, startAgree). Everything they cause is
// worked out at once, cascades included (a delivered failure notice that
// closes the ring and completes an agreement), and collected in a
// machineReady that the caller takes with ready and acknowledges with
// advance. The runtime drives one machine on its goroutine; the simulator in
// sim_test.go drives hundreds under a virtual clock.
//
// A machine is not safe for concurrent use.
type machine struct {
	self, n int
	// confirm says a confirmer (ftrun) judges suspicions: the detector's
	// suspicions are reported (machineReady.Suspected) and this rank learns
	// of a failure only from ftrun, a notice or an agreement. Without one,
	// a suspicion is a verdict.
	confirm bool

	det *failure.Detector
	bc  *revoke.Broadcast

	// absent[r]: world rank r has not started (a spare held in reserve). It
	// is in no ring, no broadcast graph and no communicator; nothing is
	// sent to it. Only shrinks: admit makes a rank present, and so does a
	// failure learned of it.
	absent []bool

	// failed[r]: world rank r is known gone: failed, or departed (it left
	// cleanly, and departed[r] is set too). Only grows; order holds the
	// same ranks in the order learned. Whatever this rank learns first
	// sticks: a departed rank is not made failed by a later notice.
	failed   []bool
	departed []bool
	order    []ftrma.Rank
	notices  map[string]bool // revocation notices delivered

	// lost lists the ranks whose connection the transport lost, under a
	// confirmer, not yet known failed (see classifyDown): each is
	// reported as a suspect, again every reportAgain (lostAt[r] is when r
	// was last), until the confirmer's verdict comes. A lost connection
	// does not come back, so the confirmer must end it one way or the
	// other: it kills a suspect that does not answer, and one that stays
	// suspected for three lease terms though it answers.
	lost        []ftrma.Rank
	lostAt      []time.Time
	reportAgain time.Duration

	// comms holds the agreement of every live communicator, and of the last
	// keepLingering closed here (lingering, oldest first), by context id;
	// ctxs lists their ids ascending, so that output comes in the same order
	// on every run. early keeps agreement messages for communicators not
	// created yet (a faster rank already uses a communicator this rank is
	// still making in its Shrink), at most maxEarlyAgree per communicator.
	comms     map[uint32]*commAgree
	ctxs      []uint32
	lingering []uint32
	early     map[uint32][]earlyAgree
	// closed remembers the communicators closed here (prune.go), flagged
	// when this rank has forwarded their revocation.
	closed closedRing

	rd machineReady // output not yet acknowledged by advance
}

// commAgree is one communicator's agreement as the machine sees it.
type commAgree struct {
	members []ftrma.Rank // world rank of each communicator rank
	index   []ftrma.Rank // communicator rank of each world rank, -1 if not a member
	ag      *agree.Agreement
	closed  bool // closed here: it lingers (see dropComm)
}

// keepLingering is how many closed communicators' agreements a machine
// keeps answering (dropComm).
const keepLingering = 16

type earlyAgree struct {
	from ftrma.Rank
	msg  []byte // the whole message, kind byte included
}

// outgoing is a control message to send: the exact bytes the transport
// carries.
type outgoing struct {
	to  ftrma.Rank
	msg []byte
	bid string // the ID of a reliable-broadcast flood copy; "" for other kinds and tree copies
}

// learned is a failure or a departure this rank has just learned of.
type learned struct {
	rank ftrma.Rank
	why  string
	left bool // a departure (the rank left cleanly), not a failure
}

// ctxDecision is an agreement decision of the communicator ctx.
type ctxDecision struct {
	ctx uint32
	d   agree.Decision
}

// machineReady is the output of a machine. The caller acts on it in this
// order: Declared (this rank was given up), Failed (fence each rank, then
// make it visible), Send, Suspected (tell the confirmer), then Notices and
// Decided. Fencing first means nobody, here or elsewhere, can learn of a
// failure from this rank before nothing of the failed rank lands here any
// more. Notices may be taken ahead of the rest (takeNotices): a rank that
// acts on a revocation before it forwarded it and dies is no survivor, and
// the rank it came from forwards it all the same.
type machineReady struct {
	Send      []outgoing
	Suspected []ftrma.Rank // ranks the detector suspects, for the confirmer
	Failed    []learned    // newly learned failures and departures, in the order learned
	Notices   []string     // revocation notices delivered for the first time
	Decided   []ctxDecision
	Declared  []string // why the job declared this rank failed, once per notice of it
	Pruned    []string // notices forgotten (of communicators closed here), after Notices
}

func (rd *machineReady) empty() bool {
	return len(rd.Send)+len(rd.Suspected)+len(rd.Failed)+len(rd.Notices)+len(rd.Decided)+len(rd.Declared)+len(rd.Pruned) == 0
}

// newMachine returns the machine of rank self in a job of n ranks, started
// at now, with the ranks listed in absent not started yet (spares). confirm
// is as the field.
func newMachine(cfg failure.Config, self, n int, confirm bool, now time.Time, absent ...int) (*machine, error) {
	det, err := failure.New(cfg, self, n, now, absent...)
	if err != nil {
		return nil, err
	}
	timeout := cfg.WithDefaults().Timeout
	m := &machine{
		self:     self,
		n:        n,
		confirm:  confirm,
		det:      det,
		bc:       revoke.New(self, n, absent...),
		absent:   make([]bool, n),
		failed:   make([]bool, n),
		departed: make([]bool, n),
		lostAt:   make([]time.Time, n),
		// As the detector reports a silent rank again (Config.AwaitConfirmation):
		// well within a lease term, so that the confirmer's episode of
		// suspicion goes on (failure.Chain.Report).
		reportAgain: failure.Chain{Detector: timeout}.Report(),
		notices:     make(map[string]bool),
		comms:       make(map[uint32]*commAgree),
		early:       make(map[uint32][]earlyAgree),
		closed:      newClosedRing(keepClosed),
	}
	for _, r := range absent {
		m.absent[r] = true
	}
	m.pump(now)
	return m, nil
}

// admit makes the absent world rank s present at now: a spare that has
// started. The detector's ring and the broadcast graph re-form to include
// it (failure.Detector.Admit, revoke.Broadcast.Admit); communicators are
// untouched. It reports whether s was absent: a rank present or failed is
// never admitted.
func (m *machine) admit(now time.Time, s ftrma.Rank) bool {
	if int(s) < 0 || int(s) >= m.n || !m.absent[s] {
		return false
	}
	m.absent[s] = false
	m.det.Admit(int(s), now)
	m.bc.Admit(int(s))
	m.pump(now)
	return true
}

// settle tells the broadcast that every live rank has admitted every rank
// admitted here (revoke.Broadcast.Settle).
func (m *machine) settle() { m.bc.Settle() }

// hasReady reports whether ready has anything to act on.
func (m *machine) hasReady() bool { return !m.rd.empty() }

// ready returns the output accumulated since the last advance. The caller
// owns the slices.
func (m *machine) ready() machineReady { return m.rd }

// advance acknowledges the output of the last ready.
func (m *machine) advance() { m.rd = machineReady{} }

// deadline is when tick next has something to do, and false when nothing
// is awaited (no other live rank).
func (m *machine) deadline() (time.Time, bool) {
	t, ok := m.det.Deadline()
	for _, r := range m.lost {
		if again := m.lostAt[r].Add(m.reportAgain); !ok || again.Before(t) {
			t, ok = again, true
		}
	}
	return t, ok
}

// isFailed reports the machine's knowledge of world rank r.
func (m *machine) isFailed(r ftrma.Rank) bool { return m.failed[r] }

// tick advances the machine's clock to now: heartbeats fall due, and a silent
// observed rank is suspected.
func (m *machine) tick(now time.Time) {
	m.det.Tick(now)
	for _, r := range m.lost {
		if !now.Before(m.lostAt[r].Add(m.reportAgain)) {
			m.lostAt[r] = now
			m.rd.Suspected = append(m.rd.Suspected, r)
		}
	}
	m.pump(now)
}

// stalled tells the machine that this process did not run for gap: the
// silence of others over that time is no evidence (failure.Detector.Stalled).
func (m *machine) stalled(gap time.Duration) { m.det.Stalled(gap) }

// step handles control message msg (kind byte first) received from world
// rank from at now. Kinds the machine does not own (collectives, signals)
// and malformed messages are ignored: bytes from the network never panic.
func (m *machine) step(now time.Time, from ftrma.Rank, msg []byte) {
	if len(msg) == 0 || int(from) < 0 || int(from) >= m.n {
		return
	}
	body := msg[1:]
	switch msg[0] {
	case kindHeartbeat:
		m.det.Heartbeat(int(from), now)
	case kindProbe:
		m.det.Probe(int(from), now)
	case kindBcast:
		if bm, err := revoke.ParseMessage(body); err == nil {
			if forwarded, closed := m.closedRevocation(bm.ID); closed && forwarded {
				break // a late copy of a pruned revocation
			}
			if bm.Flood() && m.bc.Seen(bm.ID) {
				m.holds(from, bm.ID)
			}
			m.bc.Step(int(from), bm)
		}
	case kindAgree:
		m.stepAgree(from, msg)
	case kindNotice:
		if _, closed := m.closedRevocation(string(body)); !closed {
			m.notice(string(body))
		}
	}
	m.pump(now)
}

// stepAgree hands an agreement message to its communicator's agreement, or
// keeps it for a communicator not created yet.
func (m *machine) stepAgree(from ftrma.Rank, msg []byte) {
	body := msg[1:]
	if len(body) < 4 {
		return
	}
	ctx := be.Uint32(body)
	ca := m.comms[ctx]
	if ca == nil {
		if _, closed := m.closed.has(ctx); closed {
			return // a closed communicator's: nobody here waits for it
		}
		if len(m.early[ctx]) < maxEarlyAgree {
			m.early[ctx] = append(m.early[ctx], earlyAgree{from: from, msg: msg})
		}
		return
	}
	if ca.index[from] < 0 {
		return
	}
	if am, err := agree.ParseMessage(body[4:]); err == nil {
		ca.ag.Step(int(ca.index[from]), am)
	}
}

// peerDown handles the loss of world rank from, at now: the transport lost
// its connection, or ftrun saw its process go. What it does depends on what
// the loss proves (classifyDown): a peer that said goodbye is gone here, and
// nobody else needs telling; a peer that can no longer act has failed, which
// is announced to the job, unless the proof came from the confirmer, which
// tells every rank itself; a peer that may still act is a suspect, reported
// to the confirmer until its verdict comes.
func (m *machine) peerDown(now time.Time, from ftrma.Rank, err error) {
	if int(from) < 0 || int(from) >= m.n {
		return
	}
	switch classifyDown(err, m.confirm) {
	case downLeft:
		m.markGone(now, from, "left the job", true)
	case downFailed:
		why := fmt.Sprintf("connection lost: %v", err)
		if m.confirm {
			// Under a confirmer a failure is proven only by ftrun (its
			// exit notice, or its mark on a reaped rank's shared memory,
			// which its notice follows), and ftrun tells every rank:
			// announcing it again would cost n-1 notices per failure that
			// nobody needs (95% of a shrink's messages at 4,096 ranks).
			m.markGone(now, from, why, false)
		} else {
			m.markFailed(now, from, why)
		}
	case downSuspect:
		m.suspectLost(now, from)
	}
	m.pump(now)
}

// downKind is what a peer-down event proves about the peer.
type downKind int

const (
	// downFailed: the peer can no longer act. It has failed, and the job
	// is told.
	downFailed downKind = iota
	// downLeft: the peer said goodbye (it finalized): it is gone, and
	// nobody else needs telling.
	downLeft
	// downSuspect: the connection is gone, but the peer may still act. It
	// is a suspicion for the confirmer (ftrun) to judge.
	downSuspect
)

// classifyDown says what a peer-down event with error err proves, with or
// without a confirmer. The rule:
//
//  1. An orderly goodbye (the error wraps transport.ErrPeerLeft): downLeft,
//     as without a confirmer. The peer closed its transport on purpose,
//     after everything it sent was delivered, and acts on the job no more.
//  2. Without a confirmer (a job not run by ftrun: tests, commtest worlds)
//     every other loss is a failure: downFailed. There is nobody to ask.
//  3. Under a confirmer, ftrun's own exit notice (the error wraps
//     transport.ErrExitReported) is downFailed: ftrun reaped the process,
//     killed it, or counted it failed only once its lease had surely run
//     out. So is ftrun's mark on the shared memory of a rank it reaped
//     (transport.ErrPeerExited, shm.MarkExited), which a rank on the same
//     host sees before the notice.
//  4. Under a confirmer, every other loss is downSuspect: it proves the
//     connection gone, not the process. A timeout (TCP's retransmission or
//     keepalive timer, a write deadline, a verbs queue pair that ran out of
//     retries) comes from any cut that lasts long enough between two live
//     ranks that both still hold their leases; counting the peer failed
//     would make two worlds. EOF and ECONNRESET do not prove it either,
//     though a process that exits closes its sockets with just these: a
//     live peer's transport also closes the connection, when its own end
//     timed out during a cut (after the heal, its kernel answers with a
//     reset, since that socket no longer exists) and when it fences this
//     rank; a middlebox (a NAT or firewall whose state expired) resets a
//     connection between live processes too. Nothing on the wire tells
//     these apart from an exit, while ftrun's notice follows a real exit at
//     once (waitpid), so the safe choice costs a dead peer's failure only
//     the time ftrun takes to report it.
func classifyDown(err error, confirm bool) downKind {
	switch {
	case errors.Is(err, transport.ErrPeerLeft):
		return downLeft
	case !confirm, errors.Is(err, transport.ErrExitReported), errors.Is(err, transport.ErrPeerExited):
		return downFailed
	default:
		return downSuspect
	}
}

// suspectLost reports rank r, whose connection is lost, to the confirmer,
// and keeps reporting it (tick) until it is known failed.
func (m *machine) suspectLost(now time.Time, r ftrma.Rank) {
	if int(r) == m.self || m.failed[r] || slices.Contains(m.lost, r) {
		return
	}
	m.lost = append(m.lost, r)
	m.lostAt[r] = now
	m.rd.Suspected = append(m.rd.Suspected, r)
}

// originate starts the reliable broadcast of notice id with payload from
// this rank; it is delivered here too.
func (m *machine) originate(now time.Time, id string, payload []byte) {
	m.bc.Originate(revoke.Message{ID: id, Payload: payload})
	m.pump(now)
}

// fail records, as a local request, that world rank r failed (why says how
// this rank knows), and announces it.
func (m *machine) fail(now time.Time, r ftrma.Rank, why string) {
	if int(r) < 0 || int(r) >= m.n {
		return
	}
	m.markFailed(now, r, why)
	m.pump(now)
}

// addComm starts the agreement of communicator ctx over members (world
// ranks, in communicator rank order; self among them). Failures known now
// count for it, and messages kept for it are handed over.
func (m *machine) addComm(now time.Time, ctx uint32, members []ftrma.Rank) {
	ca := &commAgree{members: members, index: make([]ftrma.Rank, m.n)}
	for i := range ca.index {
		ca.index[i] = -1
	}
	self := -1
	for i, w := range members {
		ca.index[w] = ftrma.Rank(i)
		if int(w) == m.self {
			self = i
		}
	}
	ca.ag = agree.New(self, len(members))
	m.closed.remove(ctx) // live again: its revocations count
	if i := slices.Index(m.lingering, ctx); i >= 0 {
		m.lingering = slices.Delete(m.lingering, i, i+1)
	}
	if _, ok := m.comms[ctx]; !ok {
		i, _ := slices.BinarySearch(m.ctxs, ctx)
		m.ctxs = slices.Insert(m.ctxs, i, ctx)
	}
	m.comms[ctx] = ca
	for _, w := range m.order {
		if i := ca.index[w]; i >= 0 {
			ca.ag.Failed(int(i))
		}
	}
	early := m.early[ctx]
	delete(m.early, ctx)
	for _, e := range early {
		m.stepAgree(e.from, e.msg)
	}
	m.pump(now)
}

// dropComm forgets communicator ctx (it was closed): what the machine keeps
// for it is pruned (prune.go), but its agreement lingers, answering the
// others, until keepLingering communicators closed after it. A rank that
// decided an agreement and closed the communicator may still be needed by
// one that has not decided: a rank on the decision's way to it failed, and
// the new round needs every member's answer (DESIGN.md, agreement). Its
// decisions go to nobody here.
func (m *machine) dropComm(ctx uint32) {
	ca, ok := m.comms[ctx]
	if !ok || ca.closed {
		return
	}
	ca.closed = true
	m.lingering = append(m.lingering, ctx)
	m.pruneComm(ctx)
	for len(m.lingering) > keepLingering {
		old := m.lingering[0]
		m.lingering = m.lingering[1:]
		delete(m.comms, old)
		if i, ok := slices.BinarySearch(m.ctxs, old); ok {
			m.ctxs = slices.Delete(m.ctxs, i, i+1)
		}
	}
}

// startAgree contributes flag to agreement instance inst of communicator
// ctx.
func (m *machine) startAgree(now time.Time, ctx uint32, inst, flag uint64) {
	if ca := m.comms[ctx]; ca != nil && !ca.closed {
		ca.ag.Start(inst, flag)
		m.pump(now)
	}
}

// pump collects the output of the state machines into m.rd and applies what
// they decided, until they are quiet. Every turn either empties a machine's
// output or learns a failure or a notice for the first time, so it ends.
func (m *machine) pump(now time.Time) {
	for {
		busy := false
		if m.det.HasReady() {
			busy = true
			rd := m.det.Ready()
			m.det.Advance()
			for _, to := range rd.Heartbeats {
				m.send(ftrma.Rank(to), []byte{kindHeartbeat})
			}
			// Probes and their answers go at once: an answer must be
			// back within Timeout, or the live rank probed looks dead.
			for _, to := range rd.Probes {
				m.send(ftrma.Rank(to), []byte{kindProbe})
			}
			for _, r := range rd.Suspected {
				m.maybeSuspect(now, ftrma.Rank(r))
			}
		}
		if m.bc.HasReady() {
			busy = true
			rd := m.bc.Ready()
			m.bc.Advance()
			for _, o := range rd.Send {
				out := outgoing{to: ftrma.Rank(o.To), msg: o.Msg.AppendBinary([]byte{kindBcast})}
				if o.Msg.Flood() {
					out.bid = o.Msg.ID // holds may leave it out
				}
				m.rd.Send = append(m.rd.Send, out)
			}
			for _, bm := range rd.Deliver {
				m.deliver(now, bm)
			}
		}
		for _, ctx := range m.ctxs {
			if m.flushAgree(now, ctx) {
				busy = true
			}
		}
		if !busy {
			return
		}
	}
}

// maybeSuspect acts on the detector's suspicion of r: under a confirmer it
// is only reported (ftrun kills the suspect, or, when it cannot reach it,
// waits until its lease has run out, and then every rank hears of the
// failure from it: nobody takes over from a rank that may still act, the
// primary world of DESIGN.md); without one it is a verdict.
func (m *machine) maybeSuspect(now time.Time, r ftrma.Rank) {
	if m.confirm {
		m.rd.Suspected = append(m.rd.Suspected, r)
		return
	}
	m.markFailed(now, r, fmt.Sprintf("suspected by rank %d's failure detector", m.self))
}

// flushAgree collects what communicator ctx's agreement produced, and reports
// whether there was anything.
func (m *machine) flushAgree(now time.Time, ctx uint32) bool {
	ca := m.comms[ctx]
	if ca == nil || !ca.ag.HasReady() {
		return false
	}
	rd := ca.ag.Ready()
	ca.ag.Advance()
	for _, o := range rd.Send {
		msg := be.AppendUint32([]byte{kindAgree}, ctx)
		m.send(ca.members[o.To], o.Msg.AppendBinary(msg))
	}
	for _, d := range rd.Decided {
		// The failed ranks agreed on are failed everywhere: learn them
		// before the decision is handed out.
		for _, r := range d.Failed {
			m.markFailed(now, ca.members[r], "agreed failed")
		}
		if !ca.closed { // else nobody here waits for it
			m.rd.Decided = append(m.rd.Decided, ctxDecision{ctx: ctx, d: d})
		}
		if d.Inst > 2 {
			ca.ag.Forget(d.Inst - 2)
		}
	}
	return true
}

// takeNotices returns the notices delivered since the last ready and
// removes them from its output: the caller makes them visible ahead of the
// rest (runtime.run). Notices concern nobody else, so they need not wait for
// the sends and fences before them.
func (m *machine) takeNotices() []string {
	ids := m.rd.Notices
	m.rd.Notices = nil
	return ids
}

// unseen reports whether msg (kind byte first) is a reliable-broadcast
// message whose ID this rank has not seen yet.
func (m *machine) unseen(msg []byte) bool {
	bm, err := revoke.ParseMessage(msg[1:])
	if err != nil || m.bc.Seen(bm.ID) {
		return false
	}
	forwarded, closed := m.closedRevocation(bm.ID)
	return !(closed && forwarded)
}

// failureNotice reports whether msg, a reliable-broadcast message, is the
// notice of a failure ("fail/r").
func failureNotice(msg []byte) bool {
	bm, err := revoke.ParseMessage(msg[1:])
	return err == nil && parseNotice(bm.ID).kind == failNotice
}

// holds records that rank from has sent this rank a flood copy of
// broadcast id, which this rank had already: from floods it, so the flood
// copy this rank is about to forward to it (output not yet taken by ready)
// is dropped. The broadcast stays reliable: a rank that floods a message
// forwards it to its own neighbours (a tree copy, or a flood copy to a rank
// that sent only a tree copy, must still go: revoke's caller's duty 5).
// Copies that arrive together (runtime.run steps what arrived before it
// sends) are so not sent back.
func (m *machine) holds(from ftrma.Rank, id string) {
	m.rd.Send = slices.DeleteFunc(m.rd.Send, func(o outgoing) bool { return o.to == from && o.bid == id })
}

func (m *machine) send(to ftrma.Rank, msg []byte) {
	m.rd.Send = append(m.rd.Send, outgoing{to: to, msg: msg})
}

// deliver applies a reliable-broadcast notice.
func (m *machine) deliver(now time.Time, bm revoke.Message) {
	if n := parseNotice(bm.ID); n.kind == failNotice {
		if int(n.rank) < m.n {
			m.markFailed(now, n.rank, string(bm.Payload))
		}
		return
	}
	if _, closed := m.closedRevocation(bm.ID); closed {
		// The revocation of a communicator closed here, first seen now:
		// forwarded (by the Ready this came from), not delivered, and
		// forgotten again; later copies are dropped.
		ctx, _ := revokedCtx(bm.ID)
		m.bc.Forget(bm.ID)
		m.closed.add(ctx, true)
		return
	}
	m.notice(bm.ID) // communicator and window revocations
}

// notice records that notice id arrived.
func (m *machine) notice(id string) {
	if m.notices[id] {
		return
	}
	m.notices[id] = true
	m.rd.Notices = append(m.rd.Notices, id)
}

// markFailed records that world rank r failed and announces it to the job.
func (m *machine) markFailed(now time.Time, r ftrma.Rank, why string) {
	if m.markGone(now, r, why, false) {
		m.bc.Originate(revoke.Message{ID: notice{kind: failNotice, rank: r}.id(), Payload: []byte(why)})
	}
}

// markGone records locally that world rank r is gone, as markFailed without
// telling anyone, and reports whether this was news: the state machines stop
// waiting for r. left says r departed cleanly rather than failed. Learning
// that this rank itself was given up is reported in Declared instead.
func (m *machine) markGone(now time.Time, r ftrma.Rank, why string, left bool) bool {
	if int(r) == m.self {
		m.rd.Declared = append(m.rd.Declared, why)
		return false
	}
	if m.failed[r] {
		return false
	}
	m.failed[r] = true
	m.absent[r] = false // a spare that failed before it was admitted here
	m.departed[r] = left
	m.order = append(m.order, r)
	if i := slices.Index(m.lost, r); i >= 0 {
		m.lost = slices.Delete(m.lost, i, i+1)
	}
	m.rd.Failed = append(m.rd.Failed, learned{rank: r, why: why, left: left})
	m.det.Failed(int(r), now)
	m.bc.Failed(int(r))
	for _, ctx := range m.ctxs {
		ca := m.comms[ctx]
		if i := ca.index[r]; i >= 0 {
			ca.ag.Failed(int(i))
		}
	}
	return true
}
