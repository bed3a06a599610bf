package arbiter

import (
	"math"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
)

// maxAsks bounds the asks a holder remembers.
const maxAsks = 64

// The holder's side: every node but the leader asks the leader it knows for
// its host lease every RenewTicks, and at once when it learns of a new
// leader. The leader grants its own host's lease to itself (leadStep).

// maybeAsk sends this node's ask when one is due.
func (n *Node) maybeAsk(t time.Duration, tick bool) {
	h := &n.holder
	if n.leader || n.lead == 0 || n.state.Host(n.self).Failed {
		return
	}
	if n.lead == h.askedTo && !(tick && t >= h.nextAsk) {
		return
	}
	// An ask sent T ago or more can no longer give a lease.
	h.asks = slices.DeleteFunc(h.asks, func(a ask) bool { return a.sent+n.cfg.LeaseTerm <= t && !n.dev.leaseFromReceipt })
	if len(h.asks) >= maxAsks {
		h.asks = slices.Delete(h.asks, 0, len(h.asks)-maxAsks+1)
	}
	h.seq++
	h.asks = append(h.asks, ask{seq: h.seq, sent: t})
	h.askedTo = n.lead
	// Due at the tick RenewTicks from now, whatever the jitter of ticks.
	h.nextAsk = t + time.Duration(n.cfg.RenewTicks)*n.cfg.Tick - n.cfg.Tick/2
	n.out = append(n.out, Message{From: n.id, To: n.lead, Kind: KindLeaseAsk, Seq: h.seq})
}

// onGrant takes a grant: the lease of the ask it answers runs Term from the
// moment this node sent that ask, by this node's clock (never longer than
// this node's own LeaseTerm). Grants for asks this node does not remember
// give nothing.
func (n *Node) onGrant(m Message, t time.Duration) {
	h := &n.holder
	i := slices.IndexFunc(h.asks, func(a ask) bool { return a.seq == m.Seq })
	if i < 0 {
		return
	}
	from := h.asks[i].sent
	if n.dev.leaseFromReceipt {
		from = t
	}
	if end := from + min(m.Term, n.cfg.LeaseTerm); !h.held || end > h.expiry {
		h.expiry, h.held = end, true
	}
}

// The leader's side.

// takeOffice starts this node's term as leader at t. It honours every lease
// its predecessors may have granted: none of them grants after ET past its
// successor's election (see the package documentation), so every host's
// lastGrant starts at t + ET. Verdicts already in its log but not yet
// applied condemn their hosts: they will commit with this leader's first
// entry, so it must not grant those hosts a lease meanwhile.
func (n *Node) takeOffice(t time.Duration) {
	l := &leading{
		term:         n.term,
		tookOffice:   t,
		acks:         make([]time.Duration, len(n.voters)),
		hosts:        make([]leaseRec, n.cfg.Hosts),
		rankProposed: make(map[ftrma.Rank]bool),
	}
	for i := range l.acks {
		l.acks[i] = noAck
	}
	for h := range l.hosts {
		l.hosts[h].lastGrant = t + n.et
		if n.dev.noTakeoverWait {
			l.hosts[h].lastGrant = t
		}
	}
	if last, err := n.storage.LastIndex(); err == nil && last > n.applied {
		ents, err := n.storage.Entries(n.applied+1, last+1, math.MaxUint64)
		if err == nil {
			for _, e := range ents {
				c, err := ParseCommand(e.GetData())
				switch {
				case err != nil:
				case c.Kind == CmdHostFailed && c.Host >= 0 && c.Host < len(l.hosts):
					r := &l.hosts[c.Host]
					r.condemned, r.proposed, r.reason = true, true, c.Reason
				case c.Kind == CmdRankFailed:
					l.rankProposed[c.Rank] = true
				}
			}
		}
	}
	n.ld = l
}

// quorumAt returns the latest time q (leader's clock) such that a quorum of
// voters, this leader among them, was in this leader's term at some moment
// after q: each of them echoed a stamp of q or later in this term. ok is
// false while no quorum has echoed anything.
func (n *Node) quorumAt(t time.Duration) (q time.Duration, ok bool) {
	var vals [MaxVoters]time.Duration
	v := vals[:len(n.voters)]
	for i, id := range n.voters {
		if id == n.id {
			v[i] = t
		} else {
			v[i] = n.ld.acks[i]
		}
	}
	slices.Sort(v)
	q = v[len(v)-n.quorum]
	return q, q != noAck
}

// canGrant reports whether this node may grant leases at t: it leads, has
// committed an entry of its own term (so no verdict of an older term that
// is not in its log can ever commit), and heard from a quorum within ET:
// quorumAt(t) > t - ET.
func (n *Node) canGrant(t time.Duration) bool {
	if n.ld == nil || n.appliedTerm != n.term {
		return false
	}
	q, ok := n.quorumAt(t)
	return n.dev.noQuorumCheck || ok && t-q < n.et
}

// grantable reports whether host h may get a lease at t.
func (n *Node) grantable(h int, t time.Duration) bool {
	return n.canGrant(t) && !n.state.Host(h).Failed && !n.ld.hosts[h].condemned
}

// onAsk handles host h's ask at the leader: granted at once when it can be,
// otherwise held until the leader can grant (a late grant only gives a
// shorter lease, since the lease runs from the ask). Either way the host is
// not silent.
func (n *Node) onAsk(m Message, t time.Duration) {
	l := n.ld
	if l == nil {
		return
	}
	h := int(m.From - 1)
	r := &l.hosts[h]
	r.lastAsk, r.asked = max(r.lastAsk, t), true
	if n.grantable(h, t) {
		n.grant(h, m.Seq, t)
		return
	}
	if !r.condemned {
		r.pending, r.pendingSeq = true, max(r.pendingSeq, m.Seq)
	}
}

func (n *Node) grant(h int, seq uint64, t time.Duration) {
	r := &n.ld.hosts[h]
	r.lastGrant = max(r.lastGrant, t)
	n.out = append(n.out, Message{From: n.id, To: uint64(h + 1), Kind: KindLeaseGrant, Seq: seq, Term: n.cfg.LeaseTerm, Epoch: n.term})
}

// leadStep is the leader's work after every input: grant held asks and its
// own lease when it can, and on a tick expire probes and declare silent
// hosts. Verdicts are proposed only while the leader could grant (it has a
// fresh quorum), so a leader cut off from the others proposes nothing.
func (n *Node) leadStep(t time.Duration, tick bool) {
	l := n.ld
	if tick && !n.inContact(t) {
		// A probe unanswered while this leader hears from no quorum says
		// nothing of the probed host: this leader may be the one cut off.
		// Its half term starts again (seed 17609 of TestSim: a leader cut
		// off alone for half a second condemned a host on the majority
		// side; seed 17597: the answer came at the heal, after the
		// deadline).
		for i := range l.probing {
			l.probing[i].deadline = max(l.probing[i].deadline, t+n.cfg.LeaseTerm/2)
		}
	}
	if !n.canGrant(t) {
		return
	}
	for h := range l.hosts {
		if r := &l.hosts[h]; r.pending {
			r.pending = false
			if n.grantable(h, t) {
				n.grant(h, r.pendingSeq, t)
			}
		}
	}
	if me := &l.hosts[n.self]; !me.condemned && !n.state.Host(n.self).Failed {
		me.lastGrant = max(me.lastGrant, t)
		if end := t + n.cfg.LeaseTerm; !n.holder.held || end > n.holder.expiry {
			n.holder.expiry, n.holder.held = end, true
		}
	}
	if !tick {
		return
	}
	l.probing = slices.DeleteFunc(l.probing, func(p probeRec) bool {
		if t < p.deadline {
			return false
		}
		// The host did not answer within half a term: it gets no more
		// lease, and is declared once the last one has run out.
		if n.dev.probeFailsRank && n.state.Rank(p.rank).Status == RankRunning && !l.rankProposed[p.rank] {
			_ = n.rn.Propose(Command{Kind: CmdRankFailed, Rank: p.rank, Reason: ReasonProbeUnanswered}.encode())
			l.rankProposed[p.rank] = true
			return true
		}
		if r := &l.hosts[p.host]; !r.condemned && !n.state.Host(p.host).Failed && n.state.Rank(p.rank).Status == RankRunning {
			r.condemned, r.reason = true, ReasonProbeUnanswered
		}
		return true
	})
	for i := range l.probing {
		if p := &l.probing[i]; t >= p.again {
			p.again = t + n.probeAgain()
			n.probes = append(n.probes, Probe{Rank: p.rank, Host: p.host})
		}
	}
	wait := n.cfg.LeaseTerm + n.cfg.Margin
	for h := range l.hosts {
		r := &l.hosts[h]
		if r.proposed || n.state.Host(h).Failed {
			continue
		}
		last := r.lastGrant
		if !r.condemned && r.asked {
			last = max(last, r.lastAsk)
		}
		if t < last+wait {
			continue
		}
		reason := ReasonHostSilent
		if r.condemned {
			reason = r.reason
		}
		if n.rn.Propose(Command{Kind: CmdHostFailed, Host: h, Reason: reason}.encode()) == nil {
			r.proposed, r.condemned, r.reason = true, true, reason
		}
	}
}

// onSuspect handles a suspicion of rank at the leader: it probes the rank
// unless it is probing it already, the rank has ended, or its host is on
// its way out.
func (n *Node) onSuspect(rank ftrma.Rank, t time.Duration) {
	l := n.ld
	if l == nil {
		return
	}
	ri := n.state.Rank(rank)
	if ri.Status != RankRunning || n.state.Host(ri.Host).Failed || l.hosts[ri.Host].condemned || l.rankProposed[rank] {
		return
	}
	if slices.ContainsFunc(l.probing, func(p probeRec) bool { return p.rank == rank }) {
		return
	}
	l.probing = append(l.probing, probeRec{rank: rank, host: ri.Host, deadline: t + n.cfg.LeaseTerm/2, again: t + n.probeAgain()})
	n.probes = append(n.probes, Probe{Rank: rank, Host: ri.Host})
}

// inContact reports whether this leader heard from a quorum of voters
// lately: a quorum echoed a stamp of the last three heartbeat intervals
// (raft's heartbeats come every interval, their echoes a round trip later).
func (n *Node) inContact(t time.Duration) bool {
	q, ok := n.quorumAt(t)
	return ok && t-q < min(n.et, time.Duration(3*n.cfg.HeartbeatTicks)*n.cfg.Tick)
}

// probeAgain is the interval at which the leader repeats an unanswered
// probe: two heartbeat intervals.
func (n *Node) probeAgain() time.Duration {
	return time.Duration(2*n.cfg.HeartbeatTicks) * n.cfg.Tick
}
