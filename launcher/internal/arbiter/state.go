package arbiter

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ftrma/ftrma"
)

// RankStatus is the replicated fate of a rank.
type RankStatus uint8

const (
	RankAbsent   RankStatus = iota // no such rank in the job (yet): a spare not admitted
	RankRunning                    // the rank runs (as far as the log knows)
	RankExited                     // its process ended; RankInfo.Code holds the status
	RankFailed                     // declared failed; RankInfo.Reason says why
	RankStarting                   // a spare claimed (SpareClaimed), not joined yet
	RankLost                       // a spare that ended before it joined
)

func (s RankStatus) String() string {
	return [...]string{"absent", "running", "exited", "failed", "starting", "lost"}[min(int(s), 5)]
}

// runs reports whether a rank of status s has a process the log has not
// seen end: running, or a spare starting.
func (s RankStatus) runs() bool { return s == RankRunning || s == RankStarting }

// RankInfo is what the log says of one rank.
type RankInfo struct {
	Status RankStatus
	Host   int    // the rank's host (meaningless when Absent)
	Code   int    // the exit status, when Exited
	Reason Reason // when Failed
	// Claimed: a spare started by SpareClaimed, whose By is the host of
	// the node that claimed it (0: ftrun's).
	Claimed bool
	By      int
	Addr    string // its address, once the log has it (Addresses, SpareJoined)
	payload string // a starting spare's spawn payload, until it joins
}

// HostInfo is what the log says of one host.
type HostInfo struct {
	Failed bool
	Reason Reason // when Failed
}

// EventKind names an Event.
type EventKind uint8

const (
	EventRankExited    EventKind = iota + 1 // Rank exited with Code
	EventRankFailed                         // Rank failed for Reason
	EventHostFailed                         // Host failed for Reason (its ranks' events follow)
	EventSpareAdmitted                      // spare Rank runs on Host
	EventFinished                           // every rank of the job has exited or failed
	EventSpareClaimed                       // spare Rank starts on Host, claimed by By's node, with Payload
	EventSpareJoined                        // claimed spare Rank on Host runs at Addr (claimed by By, with Payload)
	EventSpareLost                          // claimed spare Rank on Host ended before it joined
)

func (k EventKind) String() string {
	switch k {
	case EventRankExited:
		return "RankExited"
	case EventRankFailed:
		return "RankFailed"
	case EventHostFailed:
		return "HostFailed"
	case EventSpareAdmitted:
		return "SpareAdmitted"
	case EventFinished:
		return "Finished"
	case EventSpareClaimed:
		return "SpareClaimed"
	case EventSpareJoined:
		return "SpareJoined"
	case EventSpareLost:
		return "SpareLost"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change of the replicated state, in log order: every node
// reports the same events in the same order. Index is the log index of the
// command that caused it.
type Event struct {
	Kind   EventKind
	Rank   ftrma.Rank
	Host   int
	Code   int
	Reason Reason
	Index  uint64
	// The spare events': the claimer's host, the address, the payload.
	By      int
	Addr    string
	Payload string
}

func (e Event) String() string {
	switch e.Kind {
	case EventRankExited:
		return fmt.Sprintf("@%d rank %d exited %d", e.Index, e.Rank, e.Code)
	case EventRankFailed:
		return fmt.Sprintf("@%d rank %d failed (%v)", e.Index, e.Rank, e.Reason)
	case EventHostFailed:
		return fmt.Sprintf("@%d host %d failed (%v)", e.Index, e.Host, e.Reason)
	case EventSpareAdmitted:
		return fmt.Sprintf("@%d spare %d on host %d", e.Index, e.Rank, e.Host)
	case EventFinished:
		return fmt.Sprintf("@%d finished", e.Index)
	case EventSpareClaimed:
		return fmt.Sprintf("@%d spare %d claimed on host %d by host %d", e.Index, e.Rank, e.Host, e.By)
	case EventSpareJoined:
		return fmt.Sprintf("@%d spare %d joined on host %d at %q", e.Index, e.Rank, e.Host, e.Addr)
	case EventSpareLost:
		return fmt.Sprintf("@%d spare %d lost on host %d", e.Index, e.Rank, e.Host)
	}
	return e.Kind.String()
}

// State is the job's replicated state: every node that has applied the same
// prefix of the log holds an equal State. It changes only by apply, which
// is deterministic and idempotent: a verdict on a rank that has already
// exited or failed, on a host already failed, or an admission of a rank
// already known, changes nothing.
type State struct {
	hosts    []HostInfo
	ranks    []RankInfo // indexed by rank; RankAbsent beyond the job's ranks
	finished bool
}

// newState returns the state at bootstrap: every host live, rank r running
// on host rankHost[r].
func newState(hosts int, rankHost []int) *State {
	s := &State{hosts: make([]HostInfo, hosts), ranks: make([]RankInfo, len(rankHost))}
	for r, h := range rankHost {
		s.ranks[r] = RankInfo{Status: RankRunning, Host: h}
	}
	return s
}

// NumHosts returns the number of hosts.
func (s *State) NumHosts() int { return len(s.hosts) }

// NumRanks returns one more than the highest rank known (bootstrap ranks and
// admitted spares); ranks below it may be Absent.
func (s *State) NumRanks() int { return len(s.ranks) }

// Rank returns what the log says of rank r (Absent outside the job).
func (s *State) Rank(r ftrma.Rank) RankInfo {
	if r < 0 || int(r) >= len(s.ranks) {
		return RankInfo{}
	}
	return s.ranks[r]
}

// Host returns what the log says of host h (a host outside the job is
// reported failed, with no reason).
func (s *State) Host(h int) HostInfo {
	if h < 0 || h >= len(s.hosts) {
		return HostInfo{Failed: true}
	}
	return s.hosts[h]
}

// Finished reports whether every rank of the job has exited or failed.
func (s *State) Finished() bool { return s.finished }

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	return &State{hosts: slices.Clone(s.hosts), ranks: slices.Clone(s.ranks), finished: s.finished}
}

// Equal reports whether s and o hold the same state.
func (s *State) Equal(o *State) bool {
	return s.finished == o.finished && slices.Equal(s.hosts, o.hosts) && slices.Equal(s.ranks, o.ranks)
}

func (s *State) String() string {
	var b strings.Builder
	for h, hi := range s.hosts {
		if hi.Failed {
			fmt.Fprintf(&b, "h%d:failed(%v) ", h, hi.Reason)
		}
	}
	for r, ri := range s.ranks {
		switch ri.Status {
		case RankExited:
			fmt.Fprintf(&b, "r%d:exit%d ", r, ri.Code)
		case RankFailed:
			fmt.Fprintf(&b, "r%d:failed(%v) ", r, ri.Reason)
		case RankAbsent:
			fmt.Fprintf(&b, "r%d:absent ", r)
		case RankStarting:
			fmt.Fprintf(&b, "r%d:starting@h%d ", r, ri.Host)
		case RankLost:
			fmt.Fprintf(&b, "r%d:lost ", r)
		}
	}
	if s.finished {
		b.WriteString("finished")
	}
	return strings.TrimSpace(b.String())
}

// apply applies command c, the entry at log index idx, and appends the
// events it causes to ev. A command that changes nothing causes none.
func (s *State) apply(c Command, idx uint64, ev []Event) []Event {
	n := len(ev)
	running := func(r ftrma.Rank) bool { return r >= 0 && int(r) < len(s.ranks) && s.ranks[r].Status == RankRunning }
	switch c.Kind {
	case CmdRankExited:
		if running(c.Rank) {
			s.ranks[c.Rank].Status, s.ranks[c.Rank].Code = RankExited, c.Code
			ev = append(ev, Event{Kind: EventRankExited, Rank: c.Rank, Host: s.ranks[c.Rank].Host, Code: c.Code, Index: idx})
		} else if s.starting(c.Rank) {
			ev = s.lose(c.Rank, c.Code, ReasonNone, idx, ev)
		}
	case CmdRankFailed:
		if running(c.Rank) {
			s.ranks[c.Rank].Status, s.ranks[c.Rank].Reason = RankFailed, c.Reason
			ev = append(ev, Event{Kind: EventRankFailed, Rank: c.Rank, Host: s.ranks[c.Rank].Host, Reason: c.Reason, Index: idx})
		} else if s.starting(c.Rank) {
			ev = s.lose(c.Rank, 0, c.Reason, idx, ev)
		}
	case CmdHostFailed:
		if c.Host < 0 || c.Host >= len(s.hosts) || s.hosts[c.Host].Failed {
			break
		}
		s.hosts[c.Host] = HostInfo{Failed: true, Reason: c.Reason}
		ev = append(ev, Event{Kind: EventHostFailed, Host: c.Host, Reason: c.Reason, Index: idx})
		for r := range s.ranks {
			if ri := &s.ranks[r]; ri.Status == RankRunning && ri.Host == c.Host {
				ri.Status, ri.Reason = RankFailed, ReasonHostFailed
				ev = append(ev, Event{Kind: EventRankFailed, Rank: ftrma.Rank(r), Host: c.Host, Reason: ReasonHostFailed, Index: idx})
			} else if ri.Status == RankStarting && (ri.Host == c.Host || c.Host == 0 && ri.By == 0) {
				// Lost with its host, or with ftrun's when ftrun claimed
				// it: its rendezvous was ftrun's (the agents kill it).
				ev = s.lose(ftrma.Rank(r), 0, ReasonHostFailed, idx, ev)
			}
		}
	case CmdSpareAdmitted:
		// A spare joins an unfinished job on a live host, under a rank
		// number not yet used and at most maxSpareGap past the highest.
		if s.finished || c.Rank < 0 || int(c.Rank) >= len(s.ranks)+maxSpareGap || c.Host < 0 || c.Host >= len(s.hosts) || s.hosts[c.Host].Failed {
			break
		}
		if int(c.Rank) < len(s.ranks) && s.ranks[c.Rank].Status != RankAbsent {
			break
		}
		for int(c.Rank) >= len(s.ranks) {
			s.ranks = append(s.ranks, RankInfo{})
		}
		s.ranks[c.Rank] = RankInfo{Status: RankRunning, Host: c.Host}
		ev = append(ev, Event{Kind: EventSpareAdmitted, Rank: c.Rank, Host: c.Host, Index: idx})
	case CmdSpareClaimed:
		// ftrun (host 0) claims while its host is in the job, the agents
		// only once it is not (WIRING.md).
		if s.finished || c.Rank < 0 || int(c.Rank) >= len(s.ranks)+maxSpareGap || c.Host < 0 || c.Host >= len(s.hosts) || s.hosts[c.Host].Failed ||
			c.By < 0 || c.By >= len(s.hosts) || (c.By == 0) == s.Host(0).Failed {
			break
		}
		if int(c.Rank) < len(s.ranks) && s.ranks[c.Rank].Status != RankAbsent {
			break
		}
		for int(c.Rank) >= len(s.ranks) {
			s.ranks = append(s.ranks, RankInfo{})
		}
		s.ranks[c.Rank] = RankInfo{Status: RankStarting, Host: c.Host, Claimed: true, By: c.By, payload: c.Payload}
		ev = append(ev, Event{Kind: EventSpareClaimed, Rank: c.Rank, Host: c.Host, By: c.By, Payload: c.Payload, Index: idx})
	case CmdSpareJoined:
		if !s.starting(c.Rank) {
			break
		}
		ri := &s.ranks[c.Rank]
		ri.Status, ri.Addr = RankRunning, c.Addr
		ev = append(ev, Event{Kind: EventSpareJoined, Rank: c.Rank, Host: ri.Host, By: ri.By, Addr: c.Addr, Payload: ri.payload, Index: idx})
		ri.payload = ""
	case CmdAddresses:
		for i, a := range c.Addrs {
			if r := int(c.Rank) + i; r < len(s.ranks) && s.ranks[r].Addr == "" && !s.ranks[r].Claimed && s.ranks[r].Status != RankAbsent {
				s.ranks[r].Addr = a
			}
		}
	}
	if len(ev) > n && !s.finished && s.allEnded() {
		s.finished = true
		ev = append(ev, Event{Kind: EventFinished, Index: idx})
	}
	return ev
}

// starting reports whether rank r is a claimed spare not joined yet.
func (s *State) starting(r ftrma.Rank) bool {
	return r >= 0 && int(r) < len(s.ranks) && s.ranks[r].Status == RankStarting
}

// lose makes starting spare r lost (it ended with code, or for reason)
// and appends the event.
func (s *State) lose(r ftrma.Rank, code int, reason Reason, idx uint64, ev []Event) []Event {
	ri := &s.ranks[r]
	ri.Status, ri.Code, ri.Reason, ri.payload = RankLost, code, reason, ""
	return append(ev, Event{Kind: EventSpareLost, Rank: r, Host: ri.Host, By: ri.By, Code: code, Reason: reason, Index: idx})
}

// maxSpareGap bounds how far past the highest known rank a spare's rank may
// be, so that an admission allocates a bounded amount.
const maxSpareGap = 1 << 16

// allEnded reports whether no rank runs (and the job has any).
func (s *State) allEnded() bool {
	any := false
	for _, ri := range s.ranks {
		switch ri.Status {
		case RankRunning, RankStarting:
			return false
		case RankExited, RankFailed:
			any = true
		}
	}
	return any
}
