package arbiter

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/ftrma/ftrma"
)

// Node is one host's member of the job's replicated authority: a raft
// RawNode, the replicated State it applies, the host lease it holds and,
// while it leads, the leases it grants and the verdicts it proposes. It is a
// pure state machine driven by Tick, Step and the Report calls, whose output
// the caller collects with Ready and acknowledges with Advance. It starts no
// goroutine, reads no clock and does no I/O: every input carries now, the
// caller's clock, which must never run backwards. A Node is not safe for
// concurrent use.
type Node struct {
	cfg    Config // validated, defaults applied
	id     uint64
	self   int           // this node's host: id-1
	epoch  time.Time     // now at New; local times are durations since
	et     time.Duration // ET: ElectionTicks·Tick
	voters []uint64
	quorum int

	storage *raft.MemoryStorage
	rn      *raft.RawNode
	state   *State
	applied uint64 // index of the last entry applied
	// appliedTerm is the raft term of the last entry applied. Every
	// committed entry is applied before an input returns, so the leader has
	// committed an entry of its own term exactly when appliedTerm == term.
	appliedTerm uint64

	// The raft view after the last input.
	lead   uint64
	term   uint64
	leader bool
	// lastNow is the local time of the last input (and started whether
	// there was one): a gap longer than stallGap between two inputs means
	// this process did not run (see observe).
	lastNow time.Duration
	started bool

	holder holder
	ld     *leading // non-nil while this node leads

	// Reports to the leader that are proposed again until the log shows
	// them (a forwarded proposal can be lost on the way).
	exits     []Command
	spares    []Command
	kept      []Command // claims, joins and addresses proposed until the log settles them
	nextRetry time.Duration

	// hurry is set by LeaderGone: from hurryFrom until hurryUntil, while it
	// knows no leader, this node campaigns at every tick.
	hurryFrom, hurryUntil time.Duration
	// heardLead is when this node last heard from the leader it knows
	// (or learned of it): a leader silent for an election timeout is
	// taken for gone (Tick).
	heardLead time.Duration

	// echo attribution: while Step handles a stamped raft message, the
	// responses to its sender carry its stamp back.
	echoTo    uint64
	echoStamp time.Duration
	echoing   bool

	// Output not yet acknowledged by Advance.
	out    []Message
	events []Event
	probes []Probe
	// dropped counts entries of the log that did not parse as a Command
	// (none ever should: only Nodes propose).
	dropped int

	// broken is set when raft panicked on an input (a peer's message that
	// breaks raft's invariants: corrupt, or from a node with another log).
	// The node fails stop: it never acts again and ignores every input.
	broken error

	dev deviations
}

// deviations break the protocol on purpose, for the simulator's tests that
// show it catches each break (sim_test.go). The zero value is the protocol.
type deviations struct {
	leaseFromReceipt bool // a holder's lease runs from the grant's arrival, not from its ask
	probeFailsRank   bool // an unanswered probe fails the rank at once, not its host after its lease
	noTakeoverWait   bool // a new leader counts no predecessor's grants (lastGrant = tookOffice)
	noCheckQuorum    bool // raft without CheckQuorum (voters vote while they hear a leader)
	noSilenceHint    bool // a leader silent for ET is left to raft's randomized election timeout
	noQuorumCheck    bool // the leader grants without a quorum heard from within ET
	ignoreHeard      bool // ProbeHeard does nothing: a slow answer condemns the host
}

// holder is the host lease this node holds (every node, the leader too).
type holder struct {
	seq     uint64
	asks    []ask // asks sent and not yet outdated, oldest first
	nextAsk time.Duration
	askedTo uint64        // the leader the last ask went to
	expiry  time.Duration // the lease is valid while local now < expiry
	held    bool          // a lease was ever granted (expiry is meaningful)
}

type ask struct {
	seq  uint64
	sent time.Duration
}

// leading is the leader's state: local to this node and this term, never
// replicated, thrown away when it steps down.
type leading struct {
	term       uint64
	tookOffice time.Duration
	// acks[i] is the latest stamp of this leader's that voter voters[i]
	// echoed in this term (noAck if none).
	acks  []time.Duration
	hosts []leaseRec
	// probing lists the ranks probed and not answered, with their deadlines.
	probing []probeRec
	// rankProposed holds the ranks whose RankFailed this leader proposed.
	rankProposed map[ftrma.Rank]bool
}

const noAck = time.Duration(-1 << 63)

// leaseRec is the leader's record of one host's lease.
type leaseRec struct {
	// lastGrant bounds every lease the host may hold from this leader or a
	// predecessor: its latest grant, and at least tookOffice + ET.
	lastGrant time.Duration
	// lastAsk is when its latest ask arrived (or when this leader resumed
	// from a stall): a host that asks is not silent even when the leader
	// cannot grant.
	lastAsk    time.Duration
	asked      bool
	pending    bool // an ask waits for the leader to be able to grant
	pendingSeq uint64
	// condemned: the leader grants this host nothing more (a probe went
	// unanswered, or a HostFailed is in the log) and declares it failed once
	// lastGrant + T + M has passed, whatever it asks.
	condemned bool
	reason    Reason
	proposed  bool // a HostFailed for it is in the log
}

type probeRec struct {
	rank     ftrma.Rank
	host     int
	deadline time.Duration
	again    time.Duration // when to ask again (probes may be lost)
	heard    bool          // the host said it has the probe (ProbeHeard)
}

// Probe asks the caller to find out whether Rank, on Host, still answers:
// the leader suspects it. The caller asks the rank's host (its agent) and
// answers with Node.ProbeAnswer on this node. The leader repeats a Probe
// every two heartbeat intervals until it is answered or half a term has
// passed, so a lost probe or answer costs nothing; duplicate answers are
// harmless.
type Probe struct {
	Rank ftrma.Rank
	Host int
}

// Ready is the output of a Node that the caller must act on, then
// acknowledge with Advance: send each Message to its To node, act on each
// Event (in order; they are the same at every node), and carry out each
// Probe.
type Ready struct {
	Messages []Message
	Events   []Event
	Probes   []Probe
}

// New returns the node cfg.ID of a job, started at now. All nodes of a job
// start from the same state (Config.RankHost, every host live) and nobody
// holds a lease until the first leader grants one; node 1 campaigns at once
// so that ftrun's node is the first leader whenever it can be. The error
// wraps ftrma.ErrInvalid on a bad Config.
func New(cfg Config, now time.Time) (*Node, error) { return newNode(cfg, now, deviations{}) }

func newNode(cfg Config, now time.Time, dev deviations) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	n := &Node{
		cfg:    c,
		id:     c.ID,
		self:   int(c.ID - 1),
		epoch:  now,
		et:     time.Duration(c.ElectionTicks) * c.Tick,
		voters: slices.Clone(c.Voters),
		state:  newState(c.Hosts, c.RankHost),
		dev:    dev,
	}
	slices.Sort(n.voters)
	n.quorum = len(n.voters)/2 + 1
	var learners []uint64
	for id := uint64(1); id <= uint64(c.Hosts); id++ {
		if !slices.Contains(n.voters, id) {
			learners = append(learners, id)
		}
	}
	// The job's raft group is bootstrapped by a snapshot that every node
	// holds alike (raft's recommended way), at index 2 of term 1.
	n.storage = raft.NewMemoryStorage()
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index:     new(uint64(2)),
		Term:      new(uint64(1)),
		ConfState: &raftpb.ConfState{Voters: n.voters, Learners: learners},
	}}
	if err := n.storage.ApplySnapshot(snap); err != nil {
		return nil, fmt.Errorf("arbiter: bootstrap: %w", err)
	}
	n.applied, n.appliedTerm = 2, 1
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              c.ID,
		ElectionTick:    c.ElectionTicks,
		HeartbeatTick:   c.HeartbeatTicks,
		Storage:         n.storage,
		Applied:         2,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 64,
		CheckQuorum:     !dev.noCheckQuorum,
		PreVote:         true,
		Logger:          quietLogger{},
	})
	if err != nil {
		return nil, fmt.Errorf("arbiter: %w", err)
	}
	n.rn = rn
	if c.ID == 1 {
		_ = n.rn.Campaign()
	}
	t := n.local(now)
	n.observe(t)
	n.process(t)
	n.afterInput(t, false)
	return n, nil
}

// local converts the caller's now to this node's local time.
func (n *Node) local(now time.Time) time.Duration { return now.Sub(n.epoch) }

// Tick advances the node by one tick of Config.Tick at now: raft's election
// and heartbeat clocks, the renewal of this node's host lease, and, at the
// leader, the deadlines of probes and of silent hosts. The caller must call
// it every Config.Tick by its clock; a call that comes much later than that
// (a stall) is noticed and handled safely (see observe).
func (n *Node) Tick(now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		n.rn.Tick()
		n.process(t)
		if n.lead != 0 && !n.leader && t-n.heardLead >= n.et && !n.dev.noSilenceHint {
			n.leaderGone(n.lead, t)
		}
		if t >= n.hurryFrom && t < n.hurryUntil && n.lead == 0 && !n.leader {
			_ = n.rn.Campaign()
			n.process(t)
		}
		n.afterInput(t, true)
		return nil
	})
}

// A leader silent for an election timeout is taken for gone as LeaderGone
// says (Tick), instead of waiting out raft's randomized election timeout
// (ET to 2·ET from its last message): the voters that no longer hear it
// campaign in the order of their ids, so a take-over after the leader's
// host was cut off comes about ET after its last message, while the host
// leases it granted last (renewed every eighth of a term) have 7/8 of a
// term left; with raft's timeout alone an e2e run's take-over came 1.3 s
// after the cut of ftrun's host and every compute host's lease lapsed
// (TestRuleFtrunCutOffAloneNoLapse). A voter that still hears the leader
// refuses the pre-vote, so a voter cut off alone changes nothing.

// LeaderGone tells the node that node id's process has ended: its link
// closed (an end of stream or a reset), as the kernel closes a dead
// process's sockets, rather than went silent. If id is the leader this
// node knows, it forgets it (raft's ForgetLeader: a node that knows no
// leader grants a pre-vote at once, where CheckQuorum would have it refuse
// for an election timeout after the leader's last message), and the voters
// other than id campaign at their ticks, in the order of their ids, two
// ticks apart, for an election timeout or until a leader is known: the
// lowest live one takes office a round trip or two after the hint instead
// of after raft's randomized timeout. The hint only speeds a take-over; it
// is not needed for safety (see the package doc). A wrong hint, about a
// leader that lives, costs a pre-vote round, which changes no term: the
// voters that still hear the leader refuse it.
func (n *Node) LeaderGone(id uint64, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		n.leaderGone(id, t)
		n.afterInput(t, false)
		return nil
	})
}

// leaderGone forgets leader id, if it is the leader this node knows, and
// has the voters other than id campaign in the order of their ids (see
// LeaderGone).
func (n *Node) leaderGone(id uint64, t time.Duration) {
	if id == 0 || id != n.lead || n.leader {
		return
	}
	_ = n.rn.ForgetLeader()
	n.process(t)
	n.lead = n.rn.BasicStatus().Lead
	if pos := slices.Index(slices.DeleteFunc(slices.Clone(n.voters), func(v uint64) bool { return v == id }), n.id); pos >= 0 {
		tick := n.cfg.Tick
		n.hurryFrom = t + time.Duration(2*pos)*tick
		n.hurryUntil = n.hurryFrom + n.et
	}
}

// guard runs one input unless the node is broken, and breaks it if raft
// panics: raft panics on messages that break its invariants (a commit index
// past the log's end, say), which no node of the job sends, but a pure
// machine must not let bytes from the network crash its process. A broken
// node stops: it does not act, sends nothing more, and every input returns
// ErrBroken.
func (n *Node) guard(f func() error) (err error) {
	if n.broken != nil {
		return n.broken
	}
	defer func() {
		if p := recover(); p != nil {
			n.broken = fmt.Errorf("%w: node %d: %v", ErrBroken, n.id, p)
			n.out, n.probes = nil, nil
			err = n.broken
		}
	}()
	return f()
}

// ErrBroken is returned by every input of a node that raft gave up on (see
// Node.Broken).
var ErrBroken = errors.New("arbiter: node broken")

// Broken returns the error that stopped this node for good, or nil.
func (n *Node) Broken() error { return n.broken }

// Step hands the node a message received at now. It returns an error for a
// message not meant for this node or from outside the job, or one raft
// refuses; the message is dropped then and the node is unharmed. A raft
// message that breaks raft's invariants breaks the node (ErrBroken).
func (n *Node) Step(m Message, now time.Time) error {
	return n.guard(func() error { return n.step(m, now) })
}

func (n *Node) step(m Message, now time.Time) error {
	if m.To != n.id || m.From == 0 || m.From > uint64(n.cfg.Hosts) || m.From == n.id {
		return fmt.Errorf("arbiter: node %d got message %v: %w", n.id, m, ErrMalformed)
	}
	t := n.local(now)
	n.observe(t)
	if m.From == n.lead {
		n.heardLead = t
	}
	var err error
	switch m.Kind {
	case KindRaft:
		err = n.stepRaft(m, t)
	case KindLeaseAsk:
		n.onAsk(m, t)
	case KindLeaseGrant:
		n.onGrant(m, t)
	case KindSuspect:
		n.onSuspect(m.Rank, t)
	default:
		err = fmt.Errorf("arbiter: node %d got message of kind %d: %w", n.id, m.Kind, ErrMalformed)
	}
	n.afterInput(t, false)
	return err
}

func (n *Node) stepRaft(m Message, t time.Duration) error {
	rm := m.raft
	if rm == nil || !raftAddressed(rm, m.From, m.To) {
		return fmt.Errorf("arbiter: node %d got raft message %v: %w", n.id, m, ErrMalformed)
	}
	typ := rm.GetType()
	// A voter's answer in this leader's term to a stamped message proves
	// the voter was in this term after the stamp (see leading.quorumAt).
	if l := n.ld; l != nil && m.hasStamp && rm.GetTerm() == n.term &&
		(typ == raftpb.MsgAppResp || typ == raftpb.MsgHeartbeatResp) {
		if i, ok := slices.BinarySearch(n.voters, m.From); ok && m.stamp <= t {
			l.acks[i] = max(l.acks[i], m.stamp)
		}
	}
	if m.hasStamp && (typ == raftpb.MsgApp || typ == raftpb.MsgHeartbeat || typ == raftpb.MsgSnap) {
		n.echoTo, n.echoStamp, n.echoing = m.From, m.stamp, true
	}
	err := n.rn.Step(rm)
	n.process(t)
	n.echoing = false
	if err != nil {
		return fmt.Errorf("arbiter: node %d: raft refused %v: %w", n.id, m, err)
	}
	return nil
}

// process drains raft's Ready: entries to storage, messages to the outbox
// (stamped), committed entries applied. Storage is memory, so it is written
// before any message leaves, as raft requires.
func (n *Node) process(t time.Duration) {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			if err := n.storage.SetHardState(rd.HardState); err != nil {
				panic(fmt.Sprintf("arbiter: raft hard state: %v", err))
			}
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			// Nothing ever compacts the log, so no snapshot is ever sent;
			// a node that got one could not rebuild its State.
			panic("arbiter: raft sent a snapshot")
		}
		if len(rd.Entries) > 0 {
			if err := n.storage.Append(rd.Entries); err != nil {
				panic(fmt.Sprintf("arbiter: raft append: %v", err))
			}
		}
		for _, rm := range rd.Messages {
			m := Message{From: n.id, To: rm.GetTo(), Kind: KindRaft, raft: rm}
			switch rm.GetType() {
			case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap:
				m.stamp, m.hasStamp = t, true
			case raftpb.MsgAppResp, raftpb.MsgHeartbeatResp:
				if n.echoing && rm.GetTo() == n.echoTo {
					m.stamp, m.hasStamp = n.echoStamp, true
				}
			}
			n.out = append(n.out, m)
		}
		for _, e := range rd.CommittedEntries {
			n.apply(e)
		}
		n.rn.Advance(rd)
	}
}

// apply applies one committed entry to the State.
func (n *Node) apply(e *raftpb.Entry) {
	n.applied, n.appliedTerm = e.GetIndex(), e.GetTerm()
	if e.GetType() != raftpb.EntryNormal || len(e.GetData()) == 0 {
		return // a new leader's empty entry (no configuration ever changes)
	}
	c, err := ParseCommand(e.GetData())
	if err != nil {
		n.dropped++
		return
	}
	n.events = n.state.apply(c, e.GetIndex(), n.events)
}

// observe notes the local time of an input. A gap of more than two ticks
// since the previous one means this process did not run meanwhile (it was
// stopped, swapped out, starved): asks may be waiting unread, so at the
// leader every host's silence starts afresh and probes get the gap back.
// Only verdicts come later for it; grants wait anyway until a quorum answers
// anew.
func (n *Node) observe(t time.Duration) {
	if n.started && t-n.lastNow > 2*n.cfg.Tick {
		if l := n.ld; l != nil {
			gap := t - n.lastNow
			for h := range l.hosts {
				if r := &l.hosts[h]; !r.condemned {
					r.lastAsk, r.asked = max(r.lastAsk, t), true
				}
			}
			for i := range l.probing {
				l.probing[i].deadline += gap
			}
		}
	}
	n.started = true
	n.lastNow = max(n.lastNow, t)
}

// afterInput brings the node's own state up to date after any input: the
// raft view (taking office or leaving it), grants that can go out, this
// node's own lease and ask, and on a tick the deadlines.
func (n *Node) afterInput(t time.Duration, tick bool) {
	st := n.rn.BasicStatus()
	if st.Lead != n.lead {
		n.heardLead = t
	}
	n.lead, n.term = st.Lead, st.HardState.GetTerm()
	isLeader := st.RaftState == raft.StateLeader
	switch {
	case isLeader && (n.ld == nil || n.ld.term != n.term):
		n.takeOffice(t)
	case !isLeader:
		n.ld = nil
	}
	n.leader = isLeader
	if n.leader {
		n.leadStep(t, tick)
	}
	n.maybeAsk(t, tick)
	if tick && t >= n.nextRetry {
		n.nextRetry = t + n.et
		n.retryReports()
	}
	n.process(t)
}

// Acting reports whether this node holds a valid host lease at now and its
// host is not failed in the log. A node that is not acting "does not act":
// the caller must not grant or renew rank leases on this host, and every
// rank lease it granted ends by LeaseExpiry.
func (n *Node) Acting(now time.Time) bool {
	return n.broken == nil && n.holder.held && n.local(now) < n.holder.expiry && !n.state.Host(n.self).Failed
}

// LeaseExpiry returns when this node's host lease ends by its clock (the
// zero Time if it never held one). It only moves forward.
func (n *Node) LeaseExpiry() time.Time {
	if !n.holder.held {
		return time.Time{}
	}
	return n.epoch.Add(n.holder.expiry)
}

// ReportExit tells the authority that rank's process ended with status code
// (the host's agent saw it exit). The node proposes RankExited, forwarded
// to the leader by raft, and proposes it again every election timeout until
// the log shows the rank ended.
func (n *Node) ReportExit(rank ftrma.Rank, code int, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		c := Command{Kind: CmdRankExited, Rank: rank, Code: code}
		if rank >= 0 && rank < maxRank && code >= -1<<31 && code < 1<<31 && n.state.Rank(rank).Status.runs() &&
			!slices.ContainsFunc(n.exits, func(e Command) bool { return e.Rank == rank }) {
			n.exits = append(n.exits, c)
			_ = n.rn.Propose(c.encode())
			n.process(t)
		}
		n.afterInput(t, false)
		return nil
	})
}

// AdmitSpare tells the authority that spare rank runs on host (0-based)
// from now on: it proposes SpareAdmitted, again every election timeout until
// the log shows the rank. The log admits a spare only on a live host under a
// new rank number.
func (n *Node) AdmitSpare(rank ftrma.Rank, host int, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		c := Command{Kind: CmdSpareAdmitted, Rank: rank, Host: host}
		if rank >= 0 && rank < maxRank && host >= 0 && host < n.cfg.Hosts && n.state.Rank(rank).Status == RankAbsent &&
			!slices.ContainsFunc(n.spares, func(e Command) bool { return e.Rank == rank }) {
			n.spares = append(n.spares, c)
			_ = n.rn.Propose(c.encode())
			n.process(t)
		}
		n.afterInput(t, false)
		return nil
	})
}

// ClaimSpare proposes SpareClaimed: spare rank starts on host, claimed by
// this node's host, with the spawn's payload (WIRING.md, spares without
// ftrun). It is proposed again every election timeout until the log shows
// the rank claimed (by this node or another) or the claim cannot apply:
// the caller learns which from EventSpareClaimed.
func (n *Node) ClaimSpare(rank ftrma.Rank, host int, payload []byte, now time.Time) {
	n.keep(Command{Kind: CmdSpareClaimed, Rank: rank, Host: host, By: n.self, Payload: string(payload)}, now)
}

// JoinSpare proposes SpareJoined: claimed spare rank published addr. It
// is proposed again until the log shows the rank joined or lost.
func (n *Node) JoinSpare(rank ftrma.Rank, addr string, now time.Time) {
	n.keep(Command{Kind: CmdSpareJoined, Rank: rank, Addr: addr}, now)
}

// PublishAddresses proposes Addresses: addrs[i] is rank from+i's
// address. It is proposed again until the log has them.
func (n *Node) PublishAddresses(from ftrma.Rank, addrs []string, now time.Time) {
	n.keep(Command{Kind: CmdAddresses, Rank: from, Addrs: slices.Clone(addrs)}, now)
}

// keep proposes c, a command ParseCommand accepts, and keeps it to
// propose again until settled.
func (n *Node) keep(c Command, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		if _, err := ParseCommand(c.encode()); err == nil && !n.settled(c) {
			n.kept = append(n.kept, c)
			_ = n.rn.Propose(c.encode())
			n.process(t)
		}
		n.afterInput(t, false)
		return nil
	})
}

// settled reports whether the log shows kept command c, or c can no
// longer apply.
func (n *Node) settled(c Command) bool {
	st := n.state
	if st.Finished() {
		return true
	}
	switch c.Kind {
	case CmdSpareClaimed:
		return st.Rank(c.Rank).Status != RankAbsent || st.Host(c.Host).Failed || (c.By == 0) == st.Host(0).Failed
	case CmdSpareJoined:
		return st.Rank(c.Rank).Status != RankStarting
	case CmdAddresses:
		for i := range c.Addrs {
			ri := st.Rank(c.Rank + ftrma.Rank(i))
			if ri.Addr == "" && !ri.Claimed && ri.Status != RankAbsent {
				return false
			}
		}
	}
	return true
}

// retryReports proposes again the exits and admissions the log does not
// show yet, and forgets those it shows.
func (n *Node) retryReports() {
	n.kept = slices.DeleteFunc(n.kept, n.settled)
	for _, c := range n.kept {
		_ = n.rn.Propose(c.encode())
	}
	n.exits = slices.DeleteFunc(n.exits, func(c Command) bool { return !n.state.Rank(c.Rank).Status.runs() })
	n.spares = slices.DeleteFunc(n.spares, func(c Command) bool {
		return n.state.Rank(c.Rank).Status != RankAbsent || n.state.Host(c.Host).Failed || n.state.Finished()
	})
	for _, c := range n.exits {
		_ = n.rn.Propose(c.encode())
	}
	for _, c := range n.spares {
		_ = n.rn.Propose(c.encode())
	}
}

// ReportSuspect tells the authority that rank by suspects rank (its failure
// detector found it silent). A follower passes it on to the leader it knows
// (or drops it if it knows none: the detector reports again); the leader
// probes the rank (Ready.Probes).
func (n *Node) ReportSuspect(rank, by ftrma.Rank, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		switch {
		case n.leader:
			n.onSuspect(rank, t)
		case n.lead != 0 && rank >= 0 && rank < maxRank && by >= 0 && by < maxRank:
			n.out = append(n.out, Message{From: n.id, To: n.lead, Kind: KindSuspect, Rank: rank, By: by})
		}
		n.afterInput(t, false)
		return nil
	})
}

// ProbeHeard tells the leader that the host of a probed rank has the probe
// and is finding out: its answer may take the host's own wait for the rank
// and, for a rank that does not answer, a kill and a reap. The host
// answers, so it is not the one silent: the probe's deadline moves to a
// full term from now, once per probe. A host cut off after this is
// condemned at that later deadline.
func (n *Node) ProbeHeard(rank ftrma.Rank, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		if l := n.ld; l != nil && !n.dev.ignoreHeard {
			for i := range l.probing {
				if p := &l.probing[i]; p.rank == rank && !p.heard {
					p.heard = true
					p.deadline = max(p.deadline, t+n.cfg.LeaseTerm)
				}
			}
		}
		n.afterInput(t, false)
		return nil
	})
}

// ProbeAnswer gives the leader the answer to a Probe of rank. alive means
// the rank answered its host: the suspicion is dropped. !alive means the
// host found the rank does not answer and has made sure it no longer acts
// (killed it, or stopped renewing its rank lease and waited that out): the
// leader proposes RankFailed. An answer on a node that is no longer the
// leader, or for a rank not probed, is ignored.
func (n *Node) ProbeAnswer(rank ftrma.Rank, alive bool, now time.Time) {
	_ = n.guard(func() error {
		t := n.local(now)
		n.observe(t)
		if l := n.ld; l != nil {
			i := slices.IndexFunc(l.probing, func(p probeRec) bool { return p.rank == rank })
			if i >= 0 {
				l.probing = slices.Delete(l.probing, i, i+1)
				if !alive && n.state.Rank(rank).Status == RankRunning && !l.rankProposed[rank] {
					if n.rn.Propose(Command{Kind: CmdRankFailed, Rank: rank, Reason: ReasonUnresponsive}.encode()) == nil {
						l.rankProposed[rank] = true
					}
				}
			}
		}
		n.afterInput(t, false)
		return nil
	})
}

// HasReady reports whether Ready holds anything.
func (n *Node) HasReady() bool { return len(n.out)+len(n.events)+len(n.probes) > 0 }

// Ready returns the output gathered since the last Advance. The slices are
// the node's until Advance.
func (n *Node) Ready() Ready { return Ready{Messages: n.out, Events: n.events, Probes: n.probes} }

// Advance acknowledges the last Ready: the caller has acted on all of it.
func (n *Node) Advance() {
	n.out, n.events, n.probes = nil, nil, nil
}

// State returns the replicated state this node has applied. It is the
// node's: read it, do not keep it past the next input.
func (n *Node) State() *State { return n.state }

// Applied returns the log index of the last entry this node applied.
func (n *Node) Applied() uint64 { return n.applied }

// Leader returns the node this node believes leads (0 if none), and the raft
// term it knows.
func (n *Node) Leader() (id, term uint64) { return n.lead, n.term }

// IsLeader reports whether this node leads.
func (n *Node) IsLeader() bool { return n.leader }

// ID returns this node's id.
func (n *Node) ID() uint64 { return n.id }
