//go:build linux

package shm

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"golang.org/x/sys/unix"
)

// peer is this rank's view of one rank (itself included): the mappings of
// its segments, the completion of the operations posted toward it, the ring
// this rank sends into, and the ring it receives from.
type peer struct {
	t    *Transport
	rank ftrma.Rank
	slot int // its position in the sorted Config.Ranks: its line and ring in control segments
	self bool

	// mu guards the mappings of the peer's memory: ctl, gone, and unmapping
	// the segments in segs. Operations on the slow path and Send hold it for
	// reading while they touch the peer's memory; mapping the control
	// segment, sweeping released segments and unmapping everything take it
	// for writing, so nothing is unmapped under such an access (those on
	// the fast path hold no lock: the unmappers wait a grace period for
	// them, see fast.go).
	mu  sync.RWMutex
	ctl *ctl // the peer's control segment; nil until mapped and once gone
	// fast is ctl while operations toward the peer may take the fast path
	// (fast.go): both ranks registered for the barrier. Set under mu with
	// ctl; cleared before a grace period that precedes unmapping.
	fast atomic.Pointer[fastView]
	gone bool // the mappings were dropped for good (the peer is down, or Close)
	pid  int  // the peer's process id, from its header; 0 when unknown
	bell int  // the peer's bell, open for ringing; -1 when not open
	// segs maps segment ids to the mappings of the peer's data segments (for
	// self, of this rank's own). Readers load it under mu (read); additions
	// copy it under segMu; removals also hold mu for writing.
	segs   atomic.Pointer[map[uint64][]byte]
	segMu  sync.Mutex
	relGen atomic.Uint64 // the peer's release generation segs was swept at
	// hot caches resolved regions by key (the key's low bits pick the
	// entry), sparing the segment lookup: a key's entry never changes while
	// it is registered, and keys are not reused, so a key found registered
	// in the table resolves as cached. Cleared wherever segs loses a
	// mapping, under mu held for writing.
	hot [hotKeys]atomic.Pointer[hotKey]

	comp transport.Completion // immediate: operations are numbered once done

	smu       sync.Mutex // serializes this rank's producers into the peer's ring
	ringReady bool       // this rank's ring in the peer's segment is reserved; guarded by smu

	// Receive side, used by the progress goroutine only (in is fixed).
	in    ring   // the ring from the peer in this rank's control segment
	rhead uint64 // consumer position in in
	// pieces gathers a message that comes in pieces while piecing; its
	// capacity is transport.MaxControlMessage.
	pieces  []byte
	piecing bool

	// Down state. err is set once, to the first cause: operations fail with
	// it. rstop stops delivery of the peer's messages. downed is set once the
	// peer-down event has been decided (queued in notify, or suppressed by
	// Close), so that HandlePeerDown is called at most once.
	err    atomic.Pointer[error]
	rstop  atomic.Bool
	downed atomic.Bool
	notify atomic.Bool // HandlePeerDown is due, delivered by the progress goroutine
	// absent is set while the peer has not started (Config.Absent) and
	// not been admitted: it is not mapped and its ring is not read. Cleared
	// by Admit or when the peer goes down.
	absent atomic.Bool

	foreign foreignState // operations on target-executed regions (foreign.go)
}

var (
	errFenced       = errors.New("fenced")
	errFencedByPeer = errors.New("the peer fenced this rank")
	errGone         = errors.New("shm transport: peer mappings dropped")
	errNotOpened    = errors.New("shm transport: peer has not opened its transport")
	errCorrupt      = errors.New("shm transport: corrupt shared state")
)

func newPeer(t *Transport, r ftrma.Rank, slot int) *peer {
	p := &peer{t: t, rank: r, slot: slot, self: r == t.cfg.Rank, bell: -1}
	p.comp.SetImmediate()
	m := map[uint64][]byte{}
	p.segs.Store(&m)
	return p
}

// downErr returns the error operations toward the peer fail with, or nil
// while it is up.
func (p *peer) downErr() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// fail records err as the reason operations toward the peer fail (only the
// first reason counts) and fails its pending waits.
func (p *peer) fail(err error) {
	if p.err.CompareAndSwap(nil, &err) {
		p.comp.Fail(err)
	}
}

// lock returns the peer's control segment with p.mu held for reading, having
// mapped the segment (without waiting for it to appear) and swept released
// segments first if needed. On error p.mu is not held; errGone means the
// peer is down or the transport closed.
func (p *peer) lock() (*ctl, error) {
	for {
		p.mu.RLock()
		c := p.ctl
		if c != nil && (p.self || atomic.LoadUint64(c.word(offReleaseGen)) == p.relGen.Load()) {
			return c, nil
		}
		p.mu.RUnlock()
		if err := p.prepare(); err != nil {
			return nil, err
		}
	}
}

// lockCtl is lock for users of the control segment alone (Send): it maps
// the control segment if needed but leaves released data segments to the
// next operation's lock, so that a Send never waits for their unmapping.
func (p *peer) lockCtl() (*ctl, error) {
	for {
		p.mu.RLock()
		if c := p.ctl; c != nil {
			return c, nil
		}
		p.mu.RUnlock()
		if err := p.prepare(); err != nil {
			return nil, err
		}
	}
}

// prepare maps the peer's control segment, or drops the mappings of its
// released segments. These are unmapped after p.mu is let go: no access
// can reach them any more (accesses find segments under p.mu, and the sweep
// took them out), and unmapping a segment of hundreds of megabytes takes
// tens of milliseconds that the lock's other users need not wait.
func (p *peer) prepare() error {
	p.mu.Lock()
	var err error
	var released [][]byte
	switch {
	case p.gone:
		err = errGone
	case p.ctl == nil:
		err = p.mapCtlLocked()
	case !p.self:
		released = p.sweepLocked()
	}
	p.mu.Unlock()
	if len(released) > 0 && p.t.fast {
		grace() // fast operations that found them in the hot cache are done
	}
	for _, mem := range released {
		unmap(mem)
	}
	return err
}

// mapCtlLocked maps the peer's control segment. The caller holds p.mu.
func (p *peer) mapCtlLocked() error {
	t := p.t
	path := filepath.Join(t.cfg.Dir, ctlName(t.cfg.Job, p.rank))
	mem, err := mapFile(path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errNotOpened
		}
		if errors.Is(err, errNotOurs) {
			return fmt.Errorf("%w: shm transport: control segment of rank %d refused: %w", ftrma.ErrInvalid, p.rank, err)
		}
		return fmt.Errorf("shm transport: map control segment of rank %d: %w", p.rank, err)
	}
	lay, err := parseCtl(mem, t.cfg.Size, p.rank, len(t.local), t.ranksSum)
	if err != nil {
		unmap(mem)
		return fmt.Errorf("shm transport: %s: %w: %w", path, ftrma.ErrInvalid, err)
	}
	c := &ctl{mem: mem, lay: lay}
	// The peer made its bell before its control segment; it is missing or
	// unopenable (ENXIO) only if the peer has gone since, and then nobody
	// needs waking.
	if fd, err := openRinger(filepath.Join(t.cfg.Dir, bellName(t.cfg.Job, p.rank))); err == nil {
		p.bell = fd
	}
	p.pid = int(*c.word(offPID))
	p.relGen.Store(atomic.LoadUint64(c.word(offReleaseGen)))
	p.ctl = c
	if t.fast && atomic.LoadUint64(c.word(offBarrier)) == 1 {
		p.fast.Store(newFastView(c, t.selfSlot))
	}
	return nil
}

// sweepLocked forgets the peer's segments whose files are gone (the peer
// released them; it removes a file before it counts the release) and
// returns their mappings, for the caller to unmap. The caller holds p.mu
// for writing.
func (p *peer) sweepLocked() (released [][]byte) {
	gen := atomic.LoadUint64(p.ctl.word(offReleaseGen))
	old := *p.segs.Load()
	keep := make(map[uint64][]byte, len(old))
	for id, mem := range old {
		if exists(p.segPath(id)) {
			keep[id] = mem
		} else {
			released = append(released, mem)
		}
	}
	p.segMu.Lock()
	p.segs.Store(&keep)
	p.segMu.Unlock()
	p.forgetHot()
	p.relGen.Store(gen)
	return released
}

// hotKeys is the number of entries of peer.hot, a power of two.
const hotKeys = 8

// hotKey is a resolved region: the memory key names.
type hotKey struct {
	key transport.Key
	reg []byte
}

// forgetHot empties p.hot. The caller holds p.mu for writing.
func (p *peer) forgetHot() {
	for i := range p.hot {
		p.hot[i].Store(nil)
	}
}

func (p *peer) segPath(id uint64) string {
	return filepath.Join(p.t.cfg.Dir, segName(p.t.cfg.Job, p.rank, id))
}

// segment returns the mapping of the peer's data segment id, mapping it on
// first use. The caller holds p.mu for reading.
func (p *peer) segment(id uint64) ([]byte, error) {
	if mem, ok := (*p.segs.Load())[id]; ok {
		return mem, nil
	}
	if p.self {
		return nil, ftrma.ErrUnknownRegion
	}
	p.segMu.Lock()
	defer p.segMu.Unlock()
	old := *p.segs.Load()
	if mem, ok := old[id]; ok {
		return mem, nil
	}
	path := p.segPath(id)
	mem, err := mapFile(path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Released under a stale key entry (Deregister gave up waiting
			// for this rank), or removed by another process while
			// registered: say which, as this error is all there is to see.
			return nil, fmt.Errorf("%w: shm transport: segment %d of rank %d is gone (no file %s: released, or removed by another process)", ftrma.ErrUnknownRegion, id, p.rank, path)
		}
		return nil, fmt.Errorf("%w: shm transport: map segment %d of rank %d: %w", ftrma.ErrInvalid, id, p.rank, err)
	}
	m := make(map[uint64][]byte, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[id] = mem
	p.segs.Store(&m)
	return mem, nil
}

// addSelfSegment and removeSelfSegment keep the self peer's segs in step with
// this rank's Alloc and Release.
func (p *peer) addSelfSegment(id uint64, mem []byte) {
	p.segMu.Lock()
	old := *p.segs.Load()
	m := make(map[uint64][]byte, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[id] = mem
	p.segs.Store(&m)
	p.segMu.Unlock()
}

func (p *peer) removeSelfSegment(id uint64) {
	p.mu.Lock()
	p.segMu.Lock()
	old := *p.segs.Load()
	m := make(map[uint64][]byte, len(old))
	for k, v := range old {
		if k != id {
			m[k] = v
		}
	}
	p.segs.Store(&m)
	p.segMu.Unlock()
	p.forgetHot()
	p.mu.Unlock()
}

// drop unmaps everything of the peer for good. For self only the references
// go: this rank's own memory is unmapped by Release and Close.
func (p *peer) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	p.gone = true
	if p.fast.Swap(nil) != nil {
		grace() // the fast operations under way are done
	}
	m := map[uint64][]byte{}
	p.segMu.Lock()
	old := p.segs.Swap(&m)
	p.segMu.Unlock()
	p.forgetHot()
	if p.self {
		p.ctl = nil
		return
	}
	for _, mem := range *old {
		unmap(mem)
	}
	if p.ctl != nil {
		unmap(p.ctl.mem)
		p.ctl = nil
	}
	if p.bell >= 0 {
		unix.Close(p.bell)
		p.bell = -1
	}
}

// wakeSender wakes the producers of this rank parked on a full ring, so
// that they notice the peer went down.
func (p *peer) wakeSender() { p.t.room.broadcast() }

// freedRoom tells the peer, a sender into this rank's ring p.in that said
// it waits, that there is room: its bell rings.
func (p *peer) freedRoom() {
	atomic.AddUint32(p.in.space, 1)
	p.mu.RLock()
	ringFD(p.bell)
	p.mu.RUnlock()
}

// down cuts the peer off for cause: operations toward it fail with an error
// wrapping ftrma.ErrProcFailed and cause, nothing more from it is delivered,
// and its mappings are dropped (after the accesses under way). Unless quiet,
// the receiver's HandlePeerDown is queued, once per peer. It must not be
// called with p.mu or p.smu held.
func (t *Transport) down(p *peer, cause error, quiet bool) {
	p.fail(transport.ErrPeerDown(p.rank, cause))
	p.failWaiting(errGone) // t.lost turns it into the peer-down error
	p.rstop.Store(true)
	p.absent.Store(false) // failed before it was admitted: never admitted now
	if !p.downed.Swap(true) && !quiet {
		// A rank that is closing sees its peers let go of it (they fence a
		// rank that said goodbye): nothing to report then.
		if cause != errFenced && cause != transport.ErrPeerLeft && !t.closed.Load() {
			t.log.Warn(fmt.Sprintf("shm transport: lost rank %d: %v", p.rank, cause), ftrma.LogPeer, p.rank)
		}
		p.notify.Store(true)
		t.wake()
	}
	p.wakeSender()
	p.drop()
}

// stateStatus is the status (for t.lost) of a peer whose control segment's
// state is st, not stateOpen.
func stateStatus(st uint64) error {
	if st == stateExited {
		return transport.ErrPeerExited
	}
	return transport.ErrPeerLeft
}

// exited cuts off a peer whose process the launcher reaped (MarkExited), as
// PeerDown does: nothing more it sent is delivered (it said no goodbye).
func (t *Transport) exited(p *peer) {
	t.life.RLock()
	if !t.unmapped {
		atomic.StoreUint64(t.own.word(t.own.active(p.slot)+actFenced), 1)
	}
	t.life.RUnlock()
	t.down(p, transport.ErrPeerExited, false)
}

// lost handles what an access found out about the peer (status from lock,
// or from the peer's shared state), after the peer's locks are released. It
// returns the error to give the caller.
func (t *Transport) lost(op string, p *peer, status error) error {
	switch status {
	case errFencedByPeer:
		t.down(p, errFencedByPeer, false)
	case transport.ErrPeerLeft:
		// Operations fail at once; the progress goroutine reports the peer
		// down once it has delivered everything the peer sent.
		p.fail(transport.ErrPeerDown(p.rank, transport.ErrPeerLeft))
		t.wake()
	case errCorrupt:
		t.down(p, errCorrupt, false)
	case transport.ErrPeerExited:
		t.exited(p)
	case errGone:
		if t.closed.Load() {
			return &ftrma.OpError{Op: op, Rank: p.rank, Err: ftrma.ErrClosed}
		}
	case errNotOpened:
		return &ftrma.OpError{Op: op, Rank: p.rank, Err: fmt.Errorf("%w: shm transport: rank %d has not opened its transport yet (Connect waits for it)", ftrma.ErrInvalid, p.rank)}
	default:
		return &ftrma.OpError{Op: op, Rank: p.rank, Err: status}
	}
	if err := p.downErr(); err != nil {
		return err
	}
	return &ftrma.OpError{Op: op, Rank: p.rank, Err: ftrma.ErrClosed}
}
