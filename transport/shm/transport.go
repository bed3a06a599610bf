//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"golang.org/x/sys/unix"
)

// Transport is the shared-memory transport of one rank. Its methods may be
// called from any goroutine.
type Transport struct {
	cfg      Config
	log      *slog.Logger // cfg.Logger with this rank
	own      *ctl         // this rank's control segment; unmapped by Close (see life)
	ctlPath  string       // its file
	bell     *bell        // this rank's bell: the progress goroutine parks on it
	bellPath string       // its file
	lockFD   int          // holds the shared lock on the control segment (holdShared) until Close
	ownDir   bool         // Dir is the default job directory: Close removes it if it is left empty
	// peers is indexed by rank: nil for ranks not in Config.Ranks. local
	// holds the served ones (self included) in rank order; selfSlot is this
	// rank's slot (its index in local), which names its active line and its
	// ring in every peer's control segment.
	peers    []*peer
	local    []*peer
	selfSlot int
	ranksSum uint64 // ranksSum(Config.Ranks)

	// life is held for reading by calls that touch own outside a peer's
	// mapping lock (key table, fence flags, doorbell); Close holds it for
	// writing to unmap own and remove the files.
	life     sync.RWMutex
	unmapped bool // own is unmapped and the files removed; guarded by life

	mu        sync.Mutex // guards the bookkeeping of own memory below
	segs      []*segment // data segments from Alloc, by base address
	nextSeg   uint64     // the last segment id handed out
	regions   map[transport.Key]region
	slotGen   []uint32 // per key-table slot: the generation of its next key
	freeSlots []int    // key-table slots without a key, oldest first

	recv   atomic.Pointer[receiverBox]
	selfMu sync.Mutex // guards selfQ
	selfQ  [][]byte   // messages to self, not yet delivered

	// fast says that this rank registered for membarrier's global expedited
	// barrier (offBarrier): its operations take the fast path toward peers
	// that did too (fast.go). Fixed by Open.
	fast bool
	// foreign is this rank's target-executed regions (foreign.go).
	foreign foreignTable
	// readers is reader line 0 of this rank's control segment (fast.go):
	// line i is readerStride bytes further.
	readers unsafe.Pointer

	closed  atomic.Bool    // set first thing by Close
	stop    atomic.Bool    // the progress goroutine must return
	closeMu sync.Mutex     // serializes Close
	wg      sync.WaitGroup // the progress goroutine
	room    spaceSignal    // wakes this rank's senders waiting for room in a ring
}

type receiverBox struct{ r transport.Receiver }

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Allocator = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
)

// Open creates this rank's control segment (its incoming rings, key table
// and doorbell) under its final name, ready for peers, and starts the
// progress goroutine. It does not wait for peers: they are mapped by Connect,
// or on first use. It fails with ftrma.ErrRankOutOfRange or ftrma.ErrInvalid
// for a bad Config, and with an error matching fs.ErrExist if the rank's
// control segment exists already (the rank is open elsewhere, or a killed
// run of the same job left it: RemoveJob removes it).
func Open(cfg Config) (*Transport, error) {
	ownDir := cfg.Dir == ""
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := PrepareDir(cfg.Dir); err != nil {
		return nil, err
	}
	lay := makeLayout(len(cfg.Ranks), cfg.RingBytes, cfg.Regions)
	sum := ranksSum(cfg.Ranks)
	path := filepath.Join(cfg.Dir, ctlName(cfg.Job, cfg.Rank))
	stale := func(err error) error {
		return fmt.Errorf("shm transport: %s exists: rank %d of job %s is open, an earlier run left it (RemoveJob removes a job's files), or another user made it: %w", path, cfg.Rank, cfg.Job, err)
	}
	// The bell comes first: a peer that maps the control segment opens it.
	bellPath := filepath.Join(cfg.Dir, bellName(cfg.Job, cfg.Rank))
	b, err := makeBell(bellPath)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("shm transport: %s exists: rank %d of job %s is open, an earlier run left it (RemoveJob removes a job's files), or another user made it: %w", bellPath, cfg.Rank, cfg.Job, err)
		}
		return nil, fmt.Errorf("shm transport: bell: %w", err)
	}
	dropBell := func() {
		b.close()
		unix.Unlink(bellPath)
	}
	// The segment is made under a temporary name and linked to its final
	// one when complete: a peer never maps a half-made segment.
	tmp := path + tmpSuffix
	mem, err := createFile(tmp, lay.total, lay.reserved)
	if err != nil {
		dropBell()
		if errors.Is(err, fs.ErrExist) {
			return nil, stale(err)
		}
		return nil, fmt.Errorf("shm transport: create control segment: %w", err)
	}
	// The lock is taken before the segment has its final name: no one
	// ever sees it published and not held (OpenRanks).
	lockFD, err := openOwned(tmp, unix.O_RDONLY, unix.S_IFREG)
	if err == nil {
		if err = holdShared(lockFD); err != nil {
			unix.Close(lockFD)
			err = fmt.Errorf("lock %s: %w", tmp, err)
		}
	}
	if err != nil {
		unmap(mem)
		unix.Unlink(tmp)
		dropBell()
		return nil, fmt.Errorf("shm transport: control segment: %w", err)
	}
	own := &ctl{mem: mem, lay: lay}
	own.initHeader(cfg.Rank, cfg.Size, sum, os.Getpid())
	fast := !cfg.SlowPath && registerBarrier()
	if fast {
		*own.word(offBarrier) = 1
	}
	atomic.StoreUint64(own.word(offState), stateOpen)
	err = unix.Link(tmp, path)
	unix.Unlink(tmp)
	if err != nil {
		unmap(mem)
		unix.Close(lockFD)
		dropBell()
		if errors.Is(err, fs.ErrExist) {
			return nil, stale(err)
		}
		return nil, fmt.Errorf("shm transport: publish %s: %w", path, err)
	}
	t := &Transport{
		cfg:      cfg,
		log:      cfg.Logger.With(ftrma.LogRank, cfg.Rank),
		own:      own,
		ctlPath:  path,
		bell:     b,
		bellPath: bellPath,
		lockFD:   lockFD,
		ownDir:   ownDir,
		ranksSum: sum,
		fast:     fast,
		regions:  make(map[transport.Key]region),
		slotGen:  make([]uint32, cfg.Regions),
	}
	t.freeSlots = make([]int, cfg.Regions)
	for i := range t.freeSlots {
		t.freeSlots[i] = i
		t.slotGen[i] = 1
	}
	t.peers = make([]*peer, cfg.Size)
	t.local = make([]*peer, len(cfg.Ranks))
	t.readers = unsafe.Pointer(&own.mem[own.reader(0)])
	for slot, r := range cfg.Ranks {
		p := newPeer(t, r, slot)
		if p.self {
			p.ctl = own
			t.selfSlot = slot
			if fast {
				p.fast.Store(newFastView(own, slot))
			}
		} else {
			p.in = own.ring(slot)
		}
		t.peers[r], t.local[slot] = p, p
	}
	for _, r := range cfg.Absent {
		t.peers[r].absent.Store(true) // checked by withDefaults: served, not self
	}
	t.wg.Add(1)
	go t.run()
	return t, nil
}

// Connect maps the control segment of every peer (every rank of
// Config.Ranks), waiting for those not created yet (ranks start at different
// times) until ctx ends. Peers already down and absent peers
// (Config.Absent) are skipped. Operations and Send toward a peer not yet mapped try to
// map it once and fail if it does not exist yet, so call Connect before
// using peers that may still be starting.
func (t *Transport) Connect(ctx context.Context) error {
	for _, p := range t.local {
		if p.self || p.absent.Load() {
			continue
		}
		pause := 100 * time.Microsecond
		for {
			if t.closed.Load() {
				return &ftrma.OpError{Op: "connect", Rank: p.rank, Err: ftrma.ErrClosed}
			}
			err := p.prepare()
			if err == nil || err == errGone {
				break
			}
			if err != errNotOpened {
				return &ftrma.OpError{Op: "connect", Rank: p.rank, Err: err}
			}
			timer := time.NewTimer(pause)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return &ftrma.OpError{Op: "connect", Rank: p.rank, Err: fmt.Errorf("shm transport: waiting for rank %d to open its transport: %w", p.rank, ctx.Err())}
			}
			pause = min(2*pause, 20*time.Millisecond)
		}
	}
	return nil
}

// Rank returns this process's rank.
func (t *Transport) Rank() ftrma.Rank { return t.cfg.Rank }

// Size returns the number of ranks.
func (t *Transport) Size() int { return t.cfg.Size }

// Serves reports whether r is one of the ranks this transport connects
// (Config.Ranks).
func (t *Transport) Serves(r ftrma.Rank) bool {
	return r >= 0 && int(r) < len(t.peers) && t.peers[r] != nil
}

// Caps reports one-sided operations with native atomics, ordered and
// remotely complete: an operation has taken effect in the target's memory
// when its posting call returns.
func (t *Transport) Caps() transport.Caps {
	return transport.CapOneSided | transport.CapNativeAtomics | transport.CapOrdered | transport.CapRemoteCompletion | transport.CapLocalAtomics | transport.CapWholeWords
}

// peer returns the peer r for operation op, or the error of a closed
// transport, a rank out of range or a rank not served (not in
// Config.Ranks).
func (t *Transport) peer(op string, r ftrma.Rank) (*peer, error) {
	if uint(r) < uint(len(t.peers)) {
		if p := t.peers[r]; p != nil && !p.absent.Load() && !t.closed.Load() {
			return p, nil // inlined: the common case
		}
	}
	return t.peerSlow(op, r)
}

// peerSlow is peer past its common case: the errors.
func (t *Transport) peerSlow(op string, r ftrma.Rank) (*peer, error) {
	if t.closed.Load() {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrClosed}
	}
	if r < 0 || int(r) >= len(t.peers) {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	if p := t.peers[r]; p != nil {
		if p.absent.Load() {
			return nil, transport.ErrAbsent(op, r)
		}
		return p, nil
	}
	return nil, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: shm transport: rank %d is not served by this transport (not in Config.Ranks: not on this host)", ftrma.ErrInvalid, r)}
}

// peerOrAbsent is peer, which also returns a served rank that has not
// started: Fence and PeerDown make it failed.
func (t *Transport) peerOrAbsent(op string, r ftrma.Rank) (*peer, error) {
	p, err := t.peer(op, r)
	if err != nil && r >= 0 && int(r) < len(t.peers) && t.peers[r] != nil && t.peers[r].absent.Load() {
		return t.peers[r], nil
	}
	return p, err
}

// Admit makes the absent rank r (Config.Absent) a peer
// (transport.Admitter); addr is not used (a rank derives its peers' file
// names). r's control segment is mapped on first use, as any peer's; r
// made it before it published its address. What r sent before is
// delivered from its ring, in order, from now on. Admit fails with
// ftrma.ErrInvalid for self, a rank not served (not on this host) or not
// absent (a peer already, or failed), with ftrma.ErrRankOutOfRange for a
// rank outside the job and ftrma.ErrClosed after Close.
func (t *Transport) Admit(r ftrma.Rank, addr string) error {
	if t.closed.Load() {
		return &ftrma.OpError{Op: "admit", Rank: r, Err: ftrma.ErrClosed}
	}
	if r < 0 || int(r) >= len(t.peers) {
		return &ftrma.OpError{Op: "admit", Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	p := t.peers[r]
	switch {
	case p == nil:
		return transport.ErrNotAdmittable(r, "it is not served by this transport (not in Config.Ranks)")
	case p.self:
		return transport.ErrNotAdmittable(r, "it is this rank")
	case p.downed.Load() || p.downErr() != nil:
		return transport.ErrNotAdmittable(r, "it failed")
	case !p.absent.CompareAndSwap(true, false):
		return transport.ErrNotAdmittable(r, "it is a peer already")
	}
	t.wake() // its ring may hold messages already
	return nil
}

// SetReceiver installs the receiver of control messages and peer-down
// events; the progress goroutine calls it, one call at a time. Until a
// receiver is set (or while it is nil) messages stay in the incoming rings,
// where their senders' Send waits for room once a ring is full, and up to
// 4096 messages to self are held; peer-down events are held too. They are
// delivered to the receiver first, in order.
func (t *Transport) SetReceiver(r transport.Receiver) {
	t.recv.Store(&receiverBox{r})
	t.wake()
}

func (t *Transport) receiver() transport.Receiver {
	if b := t.recv.Load(); b != nil {
		return b.r
	}
	return nil
}

// wake rings this rank's own doorbell: the progress goroutine looks again.
func (t *Transport) wake() {
	t.life.RLock()
	if !t.unmapped {
		ringDoorbell(t.own, t.bell.self)
	}
	t.life.RUnlock()
}

// Fence cuts peer off for good. It raises this rank's fence flag for peer,
// which peer's operations check after entering, and waits until peer's
// operations under way in this rank's memory have finished (at most
// Config.DrainTimeout for a peer stopped in the middle of one). Then
// operations toward peer fail with an error wrapping ftrma.ErrProcFailed,
// peer's mappings are dropped, its messages are no longer delivered (a
// Receiver call the progress goroutine had already begun may still be
// running), and HandlePeerDown(peer) is queued, once per peer. peer learns
// of the fence from the flag: its operations and Send toward this rank fail
// and it gets HandlePeerDown, as for a closed connection.
//
// A peer that does not cooperate can still reach this rank's memory: its
// mappings cannot be revoked. A rank declared failed must be killed (the
// launcher does). Fencing one's own rank fails with ftrma.ErrInvalid. Fence
// may be called from a Receiver.
func (t *Transport) Fence(r ftrma.Rank) error {
	p, err := t.peerOrAbsent("fence", r)
	if err != nil {
		return err
	}
	if p.self {
		return &ftrma.OpError{Op: "fence", Rank: r, Err: fmt.Errorf("%w: shm transport: cannot fence own rank", ftrma.ErrInvalid)}
	}
	t.life.RLock()
	if t.closed.Load() {
		t.life.RUnlock()
		return &ftrma.OpError{Op: "fence", Rank: r, Err: ftrma.ErrClosed}
	}
	atomic.StoreUint64(t.own.word(t.own.active(p.slot)+actFenced), 1)
	// A request of p's that the progress goroutine executes now found the
	// flag down; the next ones find it up (foreign.go).
	p.foreign.serveMu.Lock()
	p.foreign.serveMu.Unlock()
	if t.fast {
		t.barrier()
	}
	t.drain(p, actCount0, "fence")
	t.drain(p, actCount1, "fence")
	if t.fast {
		t.drainFast(p, "fence")
	}
	t.life.RUnlock()
	p.mu.RLock()
	if c := p.ctl; c != nil {
		ringDoorbell(c, p.bell) // the peer's progress goroutine notices the flag
	}
	p.mu.RUnlock()
	t.down(p, errFenced, false)
	return nil
}

// PeerDown tells the transport that peer's process is gone (the launcher saw
// it exit): operations toward it fail with an error wrapping
// ftrma.ErrProcFailed and err, nothing more from it is delivered, its
// mappings are dropped, this rank's fence flag for it is raised, and the
// receiver's HandlePeerDown(peer) is called once per peer (not again if the
// peer was down already). It does not wait for the peer. It does nothing
// after Close, toward self, or for a rank out of range or not served. An
// absent rank (Config.Absent) becomes failed, never to be admitted; so it
// does after Fence.
func (t *Transport) PeerDown(peer ftrma.Rank, err error) {
	p, perr := t.peerOrAbsent("peer down", peer)
	if perr != nil || p.self {
		return
	}
	t.life.RLock()
	if !t.unmapped && !p.absent.Load() && atomic.LoadUint32(p.in.closed) != 0 {
		// It said goodbye before it exited: the progress goroutine delivers
		// what it sent, then reports it gone with transport.ErrPeerLeft.
		t.life.RUnlock()
		t.wake()
		return
	}
	if !t.unmapped {
		atomic.StoreUint64(t.own.word(t.own.active(p.slot)+actFenced), 1)
	}
	t.life.RUnlock()
	t.down(p, err, false)
}

// Close waits for this rank's operations under way, says goodbye to every
// peer (it flags its ring into each peer closed, after everything this rank
// sent, and rings the doorbell; peers deliver what it sent, then report it
// down with transport.ErrPeerLeft), marks its control segment closed (peers'
// operations toward it fail from then on), stops the
// progress goroutine, cuts every peer off without HandlePeerDown, unmaps the
// peers' segments and its own control segment, and removes this rank's
// files. Memory from Alloc that was not released stays mapped, unreachable
// by peers, until Release or the process exits. Later calls fail with
// ftrma.ErrClosed (Release excepted); Close itself returns nil again. It
// must not be called from a Receiver.
func (t *Transport) Close() error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed.Swap(true) {
		return nil
	}
	// Fast operations check closed once pinned: after a grace period none
	// is under way, and none starts.
	for _, p := range t.local {
		p.fast.Store(nil)
		p.failWaiting(errGone) // operations waiting for an answer: Close fails them
	}
	if t.fast {
		grace()
	}
	for _, p := range t.local {
		p.wakeSender() // a Send parked on a full ring returns
	}
	// Operations and Send check closed under the peer's lock: once it was
	// held for writing, none is under way, and the goodbye follows them.
	for _, p := range t.local {
		p.smu.Lock()
		p.mu.Lock()
		if c := p.ctl; c != nil && !p.self {
			atomic.StoreUint32(c.ring(t.selfSlot).closed, 1)
			ringDoorbell(c, p.bell)
		}
		p.mu.Unlock()
		p.smu.Unlock()
	}
	atomic.StoreUint64(t.own.word(offState), stateClosed)
	for _, p := range t.local {
		if !p.self { // peers parked on a full ring of ours notice
			p.freedRoom()
		}
	}
	t.stop.Store(true)
	t.wake()
	t.wg.Wait()
	for _, p := range t.local {
		p.fail(&ftrma.OpError{Op: "transport", Rank: p.rank, Err: ftrma.ErrClosed})
		p.rstop.Store(true)
		p.downed.Store(true)
		p.drop()
	}
	t.life.Lock()
	defer t.life.Unlock()
	t.unmapped = true
	t.mu.Lock()
	for _, s := range t.segs {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.log.Warn(fmt.Sprintf("shm transport: %v", err))
		}
	}
	t.mu.Unlock()
	unmap(t.own.mem)
	for _, path := range []string{t.ctlPath, t.bellPath} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.log.Warn(fmt.Sprintf("shm transport: %v", err))
		}
	}
	unix.Close(t.lockFD)
	t.bell.close()
	if t.ownDir {
		os.Remove(t.cfg.Dir) // only if empty: the job's other ranks and the launcher's files keep it
	}
	return nil
}

// What the shm transport implements, checked when it is compiled.
var (
	_ transport.Transport        = (*Transport)(nil)
	_ transport.Allocator        = (*Transport)(nil)
	_ transport.ForeignRegistrar = (*Transport)(nil)
	_ transport.Admitter         = (*Transport)(nil)
)
