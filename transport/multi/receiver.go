package multi

import (
	"errors"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// SetReceiver installs r as the receiver of every transport's messages and
// peer-down events. Each transport holds what arrived before, as its
// contract says, and delivers it first. Messages and events from one peer
// come from the one transport that reaches it, so they keep its order.
func (m *Transport) SetReceiver(r transport.Receiver) {
	m.recv.Store(&receiverBox{r})
	for _, s := range m.subs {
		if r == nil {
			s.t.SetReceiver(nil)
		} else {
			s.t.SetReceiver(s.recv)
		}
	}
	if r == nil {
		return
	}
	// Absent ranks reported down before any receiver was set (Admit).
	for p := range m.peers {
		ps := &m.peers[p]
		if e := ps.failed.Load(); e != nil && !ps.reported.Swap(true) {
			r.HandlePeerDown(ftrma.Rank(p), *e)
		}
	}
}

func (m *Transport) receiver() transport.Receiver {
	if b := m.recv.Load(); b != nil {
		return b.r
	}
	return nil
}

// subReceiver is what the transport at index at of subs delivers to. It
// passes on what concerns the ranks routed to that transport and drops the
// rest, which a transport that serves only its own peers never delivers.
type subReceiver struct {
	m  *Transport
	at int
}

func (s *subReceiver) mine(r ftrma.Rank) bool {
	return r >= 0 && int(r) < s.m.size && int(s.m.at[r].Load()) == s.at
}

// HandleMessage implements transport.Receiver.
func (s *subReceiver) HandleMessage(from ftrma.Rank, msg []byte) {
	if !s.mine(from) {
		return
	}
	if r := s.m.receiver(); r != nil {
		r.HandleMessage(from, msg)
	}
}

// HandlePeerDown implements transport.Receiver: the first event for a peer
// is passed on, with the launcher's cause if PeerDown fenced the peer. The
// sub that reaches every rank (Sub.Reach) reports the loss of a rank routed
// to another too, but not its orderly departure (transport.ErrPeerLeft):
// the routed sub reports that after the last message the peer sent on it,
// and the receiver must hear of the departure only then (a barrier's last
// message from a rank that then closes would otherwise come too late).
func (s *subReceiver) HandlePeerDown(peer ftrma.Rank, err error) {
	if !s.mine(peer) {
		if s.m.reach == nil || int(s.m.reachAt) != s.at || peer < 0 || int(peer) >= s.m.size || errors.Is(err, transport.ErrPeerLeft) {
			return
		}
	}
	ps := &s.m.peers[peer]
	if ps.reported.Swap(true) {
		return
	}
	if c := ps.cause.Load(); c != nil {
		err = transport.ErrPeerDown(peer, *c)
	}
	if r := s.m.receiver(); r != nil {
		r.HandlePeerDown(peer, err)
	}
}
