package arbiter

import (
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/ftrma/ftrma"
)

// MessageKind names what a Message carries. The numbers are part of the
// wire format: append only.
type MessageKind uint8

const (
	// KindRaft carries one raft message, with the sender's stamp (below).
	KindRaft MessageKind = 1
	// KindLeaseAsk asks the leader for a host lease: Seq numbers the ask.
	KindLeaseAsk MessageKind = 2
	// KindLeaseGrant answers the ask Seq: the lease runs Term from the
	// moment the asker sent it, by the asker's clock. Epoch is the raft term
	// of the leader that granted it.
	KindLeaseGrant MessageKind = 3
	// KindSuspect tells the leader that rank By suspects rank Rank.
	KindSuspect MessageKind = 4
)

// Message is one message between two nodes of a job. The caller sends each
// Message of Ready.Messages to node To (AppendBinary gives its bytes, and
// the receiver's transport rebuilds it with ParseMessage) and hands every
// Message it receives to that node's Step. Messages may be lost, delayed,
// duplicated and reordered; nothing depends on their delay for safety.
type Message struct {
	From, To uint64
	Kind     MessageKind

	Seq   uint64        // KindLeaseAsk, KindLeaseGrant
	Term  time.Duration // KindLeaseGrant: the lease's term
	Epoch uint64        // KindLeaseGrant: the granting leader's raft term
	Rank  ftrma.Rank    // KindSuspect: the suspect
	By    ftrma.Rank    // KindSuspect: who suspects it

	raft *raftpb.Message // KindRaft
	// stamp, on a raft message (when hasStamp): on a leader's MsgApp,
	// MsgHeartbeat or MsgSnap, the leader's clock when it produced it; on a
	// follower's MsgAppResp or MsgHeartbeatResp, the stamp of the message
	// that it answers, echoed. The leader counts a voter's echo of stamp s
	// in its own term as proof that the voter was in that term after s.
	stamp    time.Duration
	hasStamp bool
}

func (m Message) String() string {
	switch m.Kind {
	case KindRaft:
		s := fmt.Sprintf("%d→%d %v", m.From, m.To, m.raft.GetType())
		if m.raft.GetTerm() != 0 {
			s += fmt.Sprintf(" t%d", m.raft.GetTerm())
		}
		if m.hasStamp {
			s += fmt.Sprintf(" @%v", m.stamp)
		}
		return s
	case KindLeaseAsk:
		return fmt.Sprintf("%d→%d LeaseAsk #%d", m.From, m.To, m.Seq)
	case KindLeaseGrant:
		return fmt.Sprintf("%d→%d LeaseGrant #%d %v t%d", m.From, m.To, m.Seq, m.Term, m.Epoch)
	case KindSuspect:
		return fmt.Sprintf("%d→%d Suspect rank %d by %d", m.From, m.To, m.Rank, m.By)
	}
	return fmt.Sprintf("%d→%d kind %d", m.From, m.To, m.Kind)
}

// AppendBinary appends the encoding of m to b: the kind byte, From and To
// as unsigned varints, then by kind: a raft message's flags byte (bit 0: a
// stamp follows, as an unsigned varint of nanoseconds) and its protobuf
// encoding; an ask's Seq; a grant's Seq, Term (nanoseconds) and Epoch; a
// suspicion's Rank and By. It fails only if protobuf cannot encode the raft
// message.
func (m Message) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, byte(m.Kind))
	b = binary.AppendUvarint(b, m.From)
	b = binary.AppendUvarint(b, m.To)
	switch m.Kind {
	case KindRaft:
		if m.hasStamp {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(m.stamp))
		} else {
			b = append(b, 0)
		}
		return proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m.raft)
	case KindLeaseAsk:
		b = binary.AppendUvarint(b, m.Seq)
	case KindLeaseGrant:
		b = binary.AppendUvarint(b, m.Seq)
		b = binary.AppendUvarint(b, uint64(m.Term))
		b = binary.AppendUvarint(b, m.Epoch)
	case KindSuspect:
		b = binary.AppendUvarint(b, uint64(m.Rank))
		b = binary.AppendUvarint(b, uint64(m.By))
	}
	return b, nil
}

// ParseMessage decodes a message encoded by AppendBinary. It checks the
// format and ranges only (a raft message's sender and addressee must match
// From and To (a forwarded proposal keeps its proposer), and it must be a message meant for the network, not one of
// raft's local ones); Node.Step checks the rest. Errors wrap ErrMalformed;
// it never panics.
func ParseMessage(b []byte) (Message, error) {
	bad := func(what string) (Message, error) {
		return Message{}, fmt.Errorf("%w message (% x): %s", ErrMalformed, truncate(b), what)
	}
	if len(b) == 0 {
		return bad("empty")
	}
	m := Message{Kind: MessageKind(b[0])}
	p := b[1:]
	ok := true
	uv := func() uint64 {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			ok = false
			return 0
		}
		p = p[n:]
		return v
	}
	m.From, m.To = uv(), uv()
	if !ok || m.From == 0 || m.To == 0 || m.From > maxRank || m.To > maxRank {
		return bad("bad addresses")
	}
	switch m.Kind {
	case KindRaft:
		if len(p) == 0 || p[0] > 1 {
			return bad("bad flags")
		}
		flags := p[0]
		p = p[1:]
		if flags == 1 {
			s := uv()
			if !ok || s > 1<<62 {
				return bad("bad stamp")
			}
			m.stamp, m.hasStamp = time.Duration(s), true
		}
		rm := &raftpb.Message{}
		if err := proto.Unmarshal(p, rm); err != nil {
			return bad("raft message: " + err.Error())
		}
		if !raftAddressed(rm, m.From, m.To) {
			return bad("raft message addressed otherwise")
		}
		if !knownRaftType(rm.GetType()) || raft.IsLocalMsg(rm.GetType()) { // IsLocalMsg indexes a table by the type: known types only
			return bad("raft message of a local or unknown type")
		}
		m.raft = rm
		return m, nil
	case KindLeaseAsk:
		m.Seq = uv()
	case KindLeaseGrant:
		m.Seq = uv()
		t := uv()
		m.Epoch = uv()
		if t > 1<<62 {
			ok = false
		}
		m.Term = time.Duration(t)
	case KindSuspect:
		r, by := uv(), uv()
		if r >= maxRank || by >= maxRank {
			ok = false
		}
		m.Rank, m.By = ftrma.Rank(r), ftrma.Rank(by)
	default:
		return bad("unknown kind")
	}
	if !ok {
		return bad("short or out of range")
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return m, nil
}

// raftAddressed reports whether raft message rm may travel from from to to:
// it is addressed to to, and comes from from, except a proposal, which a
// follower passes on to its leader as it got it (from the node that
// proposed it).
func raftAddressed(rm *raftpb.Message, from, to uint64) bool {
	return rm.GetTo() == to && (rm.GetFrom() == from || rm.GetType() == raftpb.MsgProp)
}

// knownRaftType reports whether t is a raft message type that travels
// between nodes.
func knownRaftType(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MessageType_MsgProp, raftpb.MessageType_MsgApp, raftpb.MessageType_MsgAppResp,
		raftpb.MessageType_MsgVote, raftpb.MessageType_MsgVoteResp, raftpb.MessageType_MsgSnap,
		raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgHeartbeatResp,
		raftpb.MessageType_MsgTransferLeader, raftpb.MessageType_MsgTimeoutNow,
		raftpb.MessageType_MsgReadIndex, raftpb.MessageType_MsgReadIndexResp,
		raftpb.MessageType_MsgPreVote, raftpb.MessageType_MsgPreVoteResp:
		return true
	}
	return false
}
