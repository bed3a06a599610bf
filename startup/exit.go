package startup

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// ErrExitReported is transport.ErrExitReported, the cause Join's
// receiver gives a peer-down event that ftrun reported.
var ErrExitReported = transport.ErrExitReported

// exitError is the error of ftrun's exit notice of rank r.
func exitError(r ftrma.Rank) error {
	return fmt.Errorf("launcher: the process of rank %d exited (%w): %w", r, ErrExitReported, ftrma.ErrProcFailed)
}

// peerDowner is the part of transport.Transport that exited uses.
type peerDowner interface {
	PeerDown(peer ftrma.Rank, cause error)
}

// exitReceiver stands between the transport and the caller's receiver, so
// that ftrun's exit notice of a peer reaches the receiver even when the
// transport lost the peer before (a transport tells its receiver of a peer
// once, and ignores PeerDown for a peer already down). The receiver then
// hears of a peer at most twice: once when the transport loses it, once
// when ftrun reports its exit (the error wraps ErrExitReported), in either
// order; nothing after the exit notice.
//
// While the transport still has the peer up, the exit notice goes through
// the transport (PeerDown), which reports it only after delivering what the
// peer sent before it exited — a finished rank's last contributions to a
// collective, its goodbye. Passing the notice on at once would make the
// receiver fence the peer with those messages undelivered.
type exitReceiver struct {
	recv transport.Receiver

	mu      sync.Mutex // guards the fields below
	told    []bool     // told[r]: ftrun's exit notice of r was passed on
	noticed []bool     // noticed[r]: ftrun's exit notice of r arrived
	lost    []bool     // lost[r]: the transport reported r down on its own
}

func newExitReceiver(recv transport.Receiver, size int) *exitReceiver {
	return &exitReceiver{recv: recv, told: make([]bool, size), noticed: make([]bool, size), lost: make([]bool, size)}
}

// tell marks r's exit notice passed on and reports whether it was not yet.
func (x *exitReceiver) tell(r ftrma.Rank) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if r < 0 || int(r) >= len(x.told) || x.told[r] {
		return false
	}
	x.told[r] = true
	return true
}

// HandleMessage implements transport.Receiver.
func (x *exitReceiver) HandleMessage(from ftrma.Rank, msg []byte) { x.recv.HandleMessage(from, msg) }

// HandlePeerDown implements transport.Receiver.
func (x *exitReceiver) HandlePeerDown(peer ftrma.Rank, err error) {
	if peer < 0 || int(peer) >= len(x.told) {
		return
	}
	if errors.Is(err, ErrExitReported) {
		// The transport passing on the exit notice, after what the
		// peer sent.
		if x.tell(peer) {
			x.recv.HandlePeerDown(peer, err)
		}
		return
	}
	x.mu.Lock()
	if x.told[peer] {
		x.mu.Unlock()
		return
	}
	x.lost[peer] = true
	// An exit notice the transport ignored, having lost the peer on its
	// own just before: pass it on after this loss.
	pending := x.noticed[peer]
	x.mu.Unlock()
	x.recv.HandlePeerDown(peer, err)
	if pending && x.tell(peer) {
		x.recv.HandlePeerDown(peer, exitError(peer))
	}
}

// exited carries out ftrun's exit notice of rank r: t marks r down (its
// operations fail from now on) and reports it to the receiver once it has
// delivered what r sent; if t had lost r before, and so ignores PeerDown,
// the receiver hears of the exit from here.
func (x *exitReceiver) exited(t peerDowner, r ftrma.Rank) {
	if r < 0 || int(r) >= len(x.told) {
		return
	}
	x.mu.Lock()
	x.noticed[r] = true
	lost := x.lost[r]
	x.mu.Unlock()
	err := exitError(r)
	t.PeerDown(r, err)
	if lost && x.tell(r) {
		x.recv.HandlePeerDown(r, err)
	}
}
