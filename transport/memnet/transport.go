package memnet

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
)

// Transport is one rank's endpoint of a Network. It implements
// transport.Transport with emulated one-sided operations: an operation travels
// as a message to the target, whose goroutine executes it against the target's
// registered memory, and a reply travels back. Get one with
// Network.Endpoint; its methods may be called from any goroutine.
type Transport struct {
	net   *Network
	rank  ftrma.Rank
	mem   transport.Memory
	in    inbox
	links []atomic.Pointer[link] // links[p]: toward p, made on first use, then fixed
	rcv   atomic.Pointer[receiverBox]
	quit  chan struct{} // closed (under mu) when the endpoint dies: Close or Crash
	done  chan struct{} // closed when run has returned

	// mu guards down and the writing of dead. It is held while an operation
	// from a peer executes and while a reply is applied, so that Fence, Crash
	// and Close, which take it, wait for the one under way and stop the rest.
	mu sync.Mutex
	// dead is non-nil once the endpoint is closed or crashed; it holds the
	// cause (wrapping ftrma.ErrClosed). Read without mu.
	dead atomic.Pointer[errBox]
	// down[p] is non-nil once p is down for this rank (fenced here, crashed,
	// or it fenced us or closed): nothing from p is handled and operations
	// toward p fail with it. Set once, never cleared.
	down []error

	// held are the control messages and peer-down events that arrived before
	// any receiver was set, in order; heldN counts the messages per peer. Only
	// the endpoint's goroutine touches them.
	held  []msg
	heldN []int

	// absent[p] is set while p has not started (a spare, NewSpares) and has
	// not been admitted here; operations toward it fail with
	// transport.ErrAbsent. Cleared by Admit, or when p goes down. Written
	// under mu.
	absent []atomic.Bool
	// unadmitted[p] is the goroutine's view of absent[p], changed in
	// inbox order (kindAdmit, kindDown), and early[p] what p sent while it
	// was set. Only the endpoint's goroutine touches them; nil in a network
	// without spares.
	unadmitted []bool
	early      [][]msg
}

type errBox struct{ err error }

// receiverBox holds the receiver; a nil *receiverBox means none was ever set,
// a box holding nil means it was set to nil.
type receiverBox struct{ r transport.Receiver }

// Rank returns this endpoint's rank.
func (t *Transport) Rank() ftrma.Rank { return t.rank }

// Size returns the number of ranks in the network.
func (t *Transport) Size() int { return len(t.net.ends) }

// Caps reports CapOrdered|CapRemoteCompletion|CapLocalAtomics|CapWholeWords: operations
// are emulated by the target's goroutine (not one-sided, no native atomics;
// its atomics are sync/atomic, atomic with the owner's), take effect in
// posting order per peer, and a completed Write is visible at the target.
// Network.DropCaps takes some away.
func (t *Transport) Caps() transport.Caps {
	all := transport.CapOrdered | transport.CapRemoteCompletion | transport.CapLocalAtomics | transport.CapWholeWords
	return all &^ transport.Caps(t.net.drop.Load())
}

// Register exposes mem to every peer and returns its key. The caller keeps
// mem alive and unmoved until Deregister returns; peers' operations touch it
// from this rank's goroutine, with word-wise atomic accesses where aligned.
// After Close it fails with ftrma.ErrClosed.
func (t *Transport) Register(mem []byte) (transport.Key, error) {
	if b := t.dead.Load(); b != nil {
		return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: b.err}
	}
	return t.mem.Register(mem)
}

// Deregister withdraws region key, waiting for an operation executing on it.
// Operations arriving later fail with ftrma.ErrUnknownRegion; an unknown key
// is reported with ftrma.ErrUnknownRegion. After Close it fails with
// ftrma.ErrClosed.
func (t *Transport) Deregister(key transport.Key) error {
	if b := t.dead.Load(); b != nil {
		return &ftrma.OpError{Op: "deregister", Rank: -1, Err: b.err}
	}
	return t.mem.Deregister(key)
}

// Write posts a copy of src into peer's region key at off and returns its
// sequence number. src is copied before Write returns. It does not block on
// the network. It fails at once with ftrma.ErrRankOutOfRange, ftrma.ErrClosed,
// or the peer-down error (wrapping ftrma.ErrProcFailed); bounds and region
// errors come from Wait or Flush.
func (t *Transport) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	data := make([]byte, len(src))
	transport.Copy(data, src) // in pieces: src may be large
	return t.post(peer, &op{kind: opWrite, key: key, off: off, data: data})
}

// Read posts a read of len(dst) bytes at off of peer's region key into dst.
// dst belongs to the transport until the operation completes (Wait or Flush
// returned nil or an error other than the context's): this rank's goroutine
// copies into it just before completion. Errors are those of Write.
func (t *Transport) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	return t.post(peer, &op{kind: opRead, key: key, off: off, n: len(dst), dst: dst})
}

// CompareAndSwap64 posts an atomic compare-and-swap of the 8-byte word at off
// of peer's region key: if it equals old it becomes new. The prior value is
// stored in *result (which may be nil) before completion; result belongs to
// the transport until then. A word that is not 8-byte aligned in the target's
// memory fails with ftrma.ErrMisaligned. Other errors are those of Write.
func (t *Transport) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	return t.post(peer, &op{kind: opCAS, key: key, off: off, cmp: old, swap: new, result: result})
}

// FetchAndAdd64 posts an atomic add of delta to the 8-byte word at off of
// peer's region key and stores the prior value in *result (which may be nil),
// as CompareAndSwap64 does.
func (t *Transport) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	return t.post(peer, &op{kind: opFADD, key: key, off: off, delta: delta, result: result})
}

// post queues o toward peer.
func (t *Transport) post(peer ftrma.Rank, o *op) (transport.Seq, error) {
	if err := t.check(o.kind.String(), peer); err != nil {
		return 0, err
	}
	l := t.link(peer)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.comp.Down(); err != nil {
		return 0, err
	}
	o.seq = l.comp.Next()
	l.sendLocked(msg{kind: kindOp, op: o})
	return o.seq, nil
}

// Wait blocks until operation seq toward peer, and every one before it, is
// complete, or ctx ends. It returns the first errors (joined) of operations up
// to seq not yet reported by Wait or Flush, each an *ftrma.OpError; the
// peer-down error (wrapping ftrma.ErrProcFailed) if peer went down first; an
// error wrapping ftrma.ErrClosed if this endpoint was closed or crashed;
// ctx.Err(); or ftrma.ErrInvalid if seq was never posted. Across a cut link
// only the context ends it. It must not be called from a Receiver method.
func (t *Transport) Wait(ctx context.Context, peer ftrma.Rank, seq transport.Seq) error {
	if err := t.check("wait", peer); err != nil {
		return err
	}
	l := t.link(peer)
	if seq > l.comp.Posted() {
		return &ftrma.OpError{Op: "wait", Rank: peer, Err: fmt.Errorf("memnet: sequence %d not posted: %w", seq, ftrma.ErrInvalid)}
	}
	return l.comp.Wait(ctx, seq, 0)
}

// Test reports, without blocking, whether operation seq toward peer is
// complete, and then the error Wait would return (transport.Tester).
func (t *Transport) Test(peer ftrma.Rank, seq transport.Seq) (bool, error) {
	if err := t.check("test", peer); err != nil {
		return true, err
	}
	return t.link(peer).comp.Test(seq)
}

// Flush waits until every operation posted toward peer so far is complete,
// with the blocking and errors of Wait. Toward a peer that is down it fails
// Push does nothing: memnet delivers operations as they are posted.
func (t *Transport) Push(peer ftrma.Rank) {}

// with ftrma.ErrProcFailed even when nothing is pending.
func (t *Transport) Flush(ctx context.Context, peer ftrma.Rank) error {
	if err := t.check("flush", peer); err != nil {
		return err
	}
	return t.link(peer).comp.Flush(ctx, 0)
}

// Send posts a copy of m, at most transport.MaxControlMessage bytes
// (larger fails with ftrma.ErrInvalid), to peer's Receiver. It does not block
// on the network. Messages to one peer are delivered in order, after the
// operations posted before them have executed. A message may be dropped
// silently by Drop or Cut, or at a peer without a receiver. Other errors are
// those of Write.
func (t *Transport) Send(peer ftrma.Rank, m []byte) error {
	if err := t.check("send", peer); err != nil {
		return err
	}
	if len(m) > transport.MaxControlMessage {
		return &ftrma.OpError{Op: "send", Rank: peer, Err: fmt.Errorf("memnet: message of %d bytes exceeds %d: %w",
			len(m), transport.MaxControlMessage, ftrma.ErrInvalid)}
	}
	body := bytes.Clone(m)
	l := t.link(peer)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.comp.Down(); err != nil {
		return err
	}
	if l.dropLocked() {
		return nil
	}
	l.sendLocked(msg{kind: kindMessage, body: body})
	return nil
}

// SetReceiver installs r, which this rank's goroutine calls for control
// messages and peer-down events, one call at a time. Messages and events that
// arrived before the first SetReceiver are held (up to 4096 messages per peer,
// later ones are dropped) and delivered to r first, in order, from the
// goroutine; held messages from a peer that went down meanwhile are dropped.
// A nil r drops messages and events from then on (held ones included). It
// may be called again to replace the receiver; it does nothing after Close.
func (t *Transport) SetReceiver(r transport.Receiver) {
	t.rcv.Store(&receiverBox{r})
	t.in.push(msg{kind: kindReceiver})
}

// Fence cuts peer off for good. When Fence returns, nothing peer sent is
// executed or delivered here any more (an operation executing is waited for;
// a Receiver call already begun may still be running), and every pending and
// later operation toward peer fails with an error from transport.ErrPeerDown
// (wrapping ftrma.ErrProcFailed). This rank's HandlePeerDown(peer) is queued
// (once per peer), and peer is told as by a reset connection: it gets
// HandlePeerDown and its operations toward this rank fail (unless the link
// is cut, in which case it has to find out otherwise). Fencing one's own rank
// fails with ftrma.ErrInvalid. Fence does not block on the network.
func (t *Transport) Fence(peer ftrma.Rank) error {
	// An absent peer may be fenced: it then failed, and is never admitted.
	if err := t.checkRank("fence", peer); err != nil {
		return err
	}
	if peer == t.rank {
		return &ftrma.OpError{Op: "fence", Rank: peer, Err: fmt.Errorf("memnet: cannot fence own rank: %w", ftrma.ErrInvalid)}
	}
	err := transport.ErrPeerDown(peer, errFenced)
	t.mu.Lock()
	if b := t.dead.Load(); b != nil {
		t.mu.Unlock()
		return &ftrma.OpError{Op: "fence", Rank: peer, Err: b.err}
	}
	lost := t.peerLostLocked(peer, err)
	t.mu.Unlock()
	if lost {
		t.in.push(msg{kind: kindDown, from: peer, err: err})
		t.link(peer).send(msg{kind: kindBye})
	}
	return nil
}

// Close fences every peer, tells the live ones as a closing connection does
// (they get HandlePeerDown and their operations toward this rank fail), fails
// this rank's pending operations with ftrma.ErrClosed, and waits for the
// endpoint's goroutine. Later calls fail with ftrma.ErrClosed; Close itself is
// idempotent and returns nil. It must not be called from a Receiver method.
func (t *Transport) Close() error {
	t.shutdown(ftrma.ErrClosed, true)
	<-t.done
	return nil
}

// check returns the error for an operation op toward peer that cannot be
// posted: this endpoint is closed or peer is out of range.
func (t *Transport) check(op string, peer ftrma.Rank) error {
	if err := t.checkRank(op, peer); err != nil {
		return err
	}
	if t.absent != nil && t.absent[peer].Load() {
		return transport.ErrAbsent(op, peer)
	}
	return nil
}

// Admit makes the spare p, absent until now, a peer of this endpoint
// (transport.Admitter); addr is ignored. Messages and operations p posted
// toward this endpoint before are held and handled, in order, right after
// Admit, before anything p posts later. It fails for self, a rank that is
// a peer already or failed, or after Close.
func (t *Transport) Admit(p ftrma.Rank, addr string) error {
	if b := t.dead.Load(); b != nil {
		return &ftrma.OpError{Op: "admit", Rank: p, Err: b.err}
	}
	if p < 0 || int(p) >= len(t.net.ends) {
		return &ftrma.OpError{Op: "admit", Rank: p, Err: ftrma.ErrRankOutOfRange}
	}
	if p == t.rank {
		return transport.ErrNotAdmittable(p, "it is this rank")
	}
	t.mu.Lock()
	var why string
	switch {
	case t.down[p] != nil:
		why = "it failed"
	case t.absent == nil || !t.absent[p].Load():
		why = "it is a peer already"
	default:
		t.absent[p].Store(false)
	}
	t.mu.Unlock()
	if why != "" {
		return transport.ErrNotAdmittable(p, why)
	}
	t.in.push(msg{kind: kindAdmit, from: p})
	return nil
}

// checkRank is check without the absent ranks' error.
func (t *Transport) checkRank(op string, peer ftrma.Rank) error {
	if b := t.dead.Load(); b != nil {
		return &ftrma.OpError{Op: op, Rank: peer, Err: b.err}
	}
	if peer < 0 || int(peer) >= len(t.net.ends) {
		return &ftrma.OpError{Op: op, Rank: peer, Err: ftrma.ErrRankOutOfRange}
	}
	return nil
}

// link returns the link toward p, making it on first use. The caller must not
// hold t.mu.
func (t *Transport) link(p ftrma.Rank) *link {
	if l := t.links[p].Load(); l != nil {
		return l
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.links[p].Load(); l != nil {
		return l
	}
	l := &link{net: t.net, from: t.rank, to: p, dst: &t.net.ends[p].in}
	if b := t.dead.Load(); b != nil {
		l.comp.Fail(&ftrma.OpError{Op: "transport", Rank: p, Err: b.err})
	} else if t.down[p] != nil {
		l.comp.Fail(t.down[p])
	}
	t.links[p].Store(l)
	return l
}

// PeerDown marks p down with cause (transport.Transport).
func (t *Transport) PeerDown(p ftrma.Rank, cause error) {
	if p < 0 || int(p) >= len(t.net.ends) || p == t.rank {
		return
	}
	if cause == nil {
		cause = ftrma.ErrProcFailed
	}
	t.peerLost(p, transport.ErrPeerDown(p, cause))
}

// peerLost marks p down with err, failing operations toward it, and queues
// the HandlePeerDown call if p was not down already.
func (t *Transport) peerLost(p ftrma.Rank, err error) {
	t.mu.Lock()
	lost := t.peerLostLocked(p, err)
	t.mu.Unlock()
	if lost {
		t.in.push(msg{kind: kindDown, from: p, err: err})
	}
}

// peerLostLocked marks p down with err and fails operations toward it. It
// reports whether p was up (and this endpoint alive), in which case the caller
// must see that HandlePeerDown is called. The caller holds t.mu.
func (t *Transport) peerLostLocked(p ftrma.Rank, err error) bool {
	if t.dead.Load() != nil || t.down[p] != nil {
		return false
	}
	t.down[p] = err
	if t.absent != nil {
		t.absent[p].Store(false) // failed before it was admitted: never admitted now
	}
	if l := t.links[p].Load(); l != nil {
		l.comp.Fail(err)
	}
	return true
}

// shutdown kills the endpoint with cause (wrapping ftrma.ErrClosed): its
// pending operations fail, nothing more is handled, and its goroutine is told
// to stop. With bye, the peers still up here are told the connection closed.
// It reports whether the endpoint was alive.
func (t *Transport) shutdown(cause error, bye bool) bool {
	t.mu.Lock()
	if t.dead.Load() != nil {
		t.mu.Unlock()
		return false
	}
	t.dead.Store(&errBox{cause})
	var tell []ftrma.Rank
	for p := range t.links {
		if l := t.links[p].Load(); l != nil {
			l.comp.Fail(&ftrma.OpError{Op: "transport", Rank: ftrma.Rank(p), Err: cause})
		}
		if bye && ftrma.Rank(p) != t.rank && t.down[p] == nil {
			tell = append(tell, ftrma.Rank(p))
		}
	}
	close(t.quit)
	t.mu.Unlock()
	for _, p := range tell {
		t.link(p).send(msg{kind: kindBye, val: byeLeft})
	}
	return true
}

// What a memnet endpoint implements, checked when it is compiled.
var _ transport.Transport = (*Transport)(nil)
