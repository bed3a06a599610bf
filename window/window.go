package window

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Comm is what a window needs from its communicator; *comm.Comm satisfies it.
type Comm interface {
	Rank() ftrma.Rank
	Size() int
	Transport() transport.Transport
	// TransportRank maps a communicator rank to the transport's.
	TransportRank(r ftrma.Rank) ftrma.Rank
	Allgather(ctx context.Context, mine []byte) ([][]byte, error)
	Barrier(ctx context.Context) error
	// Agree is the fault-tolerant agreement (AND of flags), used by Shrink
	// and by Free after a Shrink.
	Agree(ctx context.Context, flag uint64) (uint64, error)
	Failures
}

// Failures is how a window learns of failures and revocations, and spreads a
// revocation: the runtime's local knowledge, no communication at call time.
type Failures interface {
	// ProcFailed reports whether communicator rank r is known failed.
	ProcFailed(r ftrma.Rank) bool
	// ContextID identifies the communicator among the process's.
	ContextID() uint32
	// Notify reliably broadcasts notice id to every rank; Noticed reports
	// whether notice id has arrived here.
	Notify(id string)
	Noticed(id string) bool
	// WindowRevokeNotice names the notice that revokes window id (the id
	// the ranks agreed on at creation), or the window shrinks Shrinks made
	// from it.
	WindowRevokeNotice(id uint64, shrinks int) string
	// FailuresChanged returns a channel closed when this process next
	// learns of a failure or a departure (ProcFailed may have changed), so
	// that a waiter reacts at once instead of polling; ask again after it
	// closes.
	FailuresChanged() <-chan struct{}
}

// LockType selects a shared or an exclusive lock.
type LockType int

const (
	// Shared locks may be held by many ranks at once.
	Shared LockType = iota + 1
	// Exclusive locks exclude every other lock on the target.
	Exclusive
)

// ErrFreed reports use of a freed window. It wraps ftrma.ErrClosed.
var ErrFreed = fmt.Errorf("window freed: %w", ftrma.ErrClosed)

// A dynamic window's displacement is an address: the region key in the top
// 24 bits and a byte offset in the low 40.
const (
	addrShift = 40
	offMask   = 1<<addrShift - 1
)

type kind int

const (
	allocated kind = iota
	created
	dynamic
	sharedAlloc // AllocateShared's: allocated, and mapped by every rank
)

// peerInfo is what every rank learns of every other at creation.
type peerInfo struct {
	tr   ftrma.Rank    // the rank's transport rank
	cr   ftrma.Rank    // the rank's communicator rank (lock words hold it)
	key  transport.Key // the window memory's region (0 for dynamic windows)
	size uint64        // the window memory's length in bytes
	ctl  transport.Key // the control block's region (lock word)
}

// Window is one rank's handle on an RMA window. Its methods may be called from
// several goroutines at once.
type Window struct {
	c     Comm
	t     transport.Transport
	rank  ftrma.Rank
	kind  kind
	mem   []byte   // local window memory (nil for dynamic windows)
	ctl   []uint64 // local control block, registered as ctlKey
	owned [][]byte // memory this window allocated, released by Free; owned[0] is ctl's
	user  []byte   // Create's buffer when mem is a copy of it (see Create), written back by Free
	peers []peerInfo
	freed atomic.Bool

	rebuilt     atomic.Bool // Rebuild replaced the window: ops return ErrRebuilt
	ctlReleased atomic.Bool // Free of a rebuilt window released its control words
	shared      bool        // made by Shrink: shares its memory and control words

	revokeID string      // the notice that revokes this window: WindowRevokeNotice(windowID, shrinks)
	windowID uint64      // the window's id, agreed at creation
	shrinks  int         // the Shrinks that made this window from the one created
	revoked  atomic.Bool // a revocation was seen
	// notices is the Comm's NoticeCounter, or unwatched; noticesSeen its value
	// when Noticed(revokeID) last said false (direct and IsRevoked skip
	// Noticed while they are equal).
	notices     *atomic.Uint64
	noticesSeen atomic.Uint64

	ordered bool // the transport completes operations in order (transport.CapOrdered)

	// locks holds, per window rank, the state of this rank's explicit lock
	// on it: 0 (none), Shared or Exclusive while held, unlocking while
	// Unlock releases it. lockScratch holds, per target, the words the lock
	// atomics of the goroutine that owns that state compare with and return
	// into: kept from one Lock to the next, so that Lock does not allocate.
	locks       []atomic.Int32
	lockScratch [][]uint64

	// sharedMem holds, per window rank, its memory mapped into this process
	// (AllocateShared), and sharedErr why a rank could not be mapped;
	// unmaps undoes the mappings at Free (shared with a window Shrink made).
	sharedMem [][]byte
	sharedErr []error
	unmaps    *[]func()

	mu       sync.Mutex                 // guards attached
	attached map[transport.Key]struct{} // dynamic: regions attached here
}

// setPeers gives w its ranks, and a lock slot for each.
func (w *Window) setPeers(peers []peerInfo) {
	w.peers = peers
	w.locks = make([]atomic.Int32, len(peers))
	w.lockScratch = make([][]uint64, len(peers))
}

// Allocate creates a window of size bytes of fresh zeroed, 8-byte aligned
// memory at every rank (sizes may differ between ranks). Collective.
func Allocate(ctx context.Context, c Comm, size int) (*Window, error) {
	return allocate(ctx, "allocate", c, allocated, size)
}

// allocate creates a window of kind k over fresh memory of size bytes at
// every rank (Allocate, AllocateShared).
func allocate(ctx context.Context, op string, c Comm, k kind, size int) (*Window, error) {
	if size < 0 {
		return nil, &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: negative size %d", ftrma.ErrInvalid, size)}
	}
	mem, err := allocMem(c.Transport(), size)
	if err != nil {
		return nil, &ftrma.OpError{Op: op, Rank: -1, Err: err}
	}
	w, err := create(ctx, c, k, mem)
	if err != nil {
		releaseMem(c.Transport(), mem)
		return nil, err
	}
	w.owned = append(w.owned, mem)
	return w, nil
}

// allocMem returns size bytes of zeroed, 8-byte aligned memory that peers
// can reach once registered: from the transport when it is a
// transport.Allocator (shared memory), else from the Go heap.
func allocMem(t transport.Transport, size int) ([]byte, error) {
	if a, ok := t.(transport.Allocator); ok {
		b, err := a.Alloc(max(size, 8))
		if err != nil {
			return nil, err
		}
		return b[:size:size], nil
	}
	return alignedBytes(size), nil
}

func releaseMem(t transport.Transport, b []byte) error {
	if a, ok := t.(transport.Allocator); ok {
		return a.Release(b[:cap(b)])
	}
	return nil
}

// Alloc returns zeroed, 8-byte aligned memory of size bytes to Attach to a
// dynamic window: from the transport when its peers can reach only memory it
// allocated (shared memory), else from the Go heap. Release it after Detach.
func (w *Window) Alloc(size int) ([]byte, error) {
	if size < 0 {
		return nil, &ftrma.OpError{Op: "alloc", Rank: -1, Err: fmt.Errorf("%w: negative size %d", ftrma.ErrInvalid, size)}
	}
	b, err := allocMem(w.t, size)
	if err != nil {
		return nil, &ftrma.OpError{Op: "alloc", Rank: -1, Err: err}
	}
	return b, nil
}

// Release gives back memory from Alloc that is no longer attached.
func (w *Window) Release(buf []byte) error {
	if err := releaseMem(w.t, buf); err != nil {
		return &ftrma.OpError{Op: "release", Rank: -1, Err: err}
	}
	return nil
}

// Create creates a window exposing buf at this rank. Collective. buf must
// start on an 8-byte boundary (else ftrma.ErrMisaligned), so that atomics
// work at every displacement that is a multiple of 8; it may be empty or
// nil, and this rank then exposes no memory (as MPI allows).
//
// The window memory is buf itself, as MPI_Win_create's: what this rank
// stores into buf its peers read, and what they put lands in buf. tcp,
// verbs and memnet register buf as it is; shared memory, whose peers can
// map only memory it allocated, executes their operations on buf at this
// rank (transport/shm's target-executed regions: a message round trip per
// operation, where Allocate's memory takes a few nanoseconds). Only a
// transport that allocates and cannot do that (a transport.Allocator that is
// no transport.ForeignRegistrar) gets a copy of buf, copied back at Free;
// Bytes is the window memory in every case.
func Create(ctx context.Context, c Comm, buf []byte) (*Window, error) {
	if len(buf) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%8 != 0 {
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: fmt.Errorf("%w: buffer at %p is not 8-byte aligned", ftrma.ErrMisaligned, unsafe.SliceData(buf))}
	}
	t := c.Transport()
	_, copied := t.(transport.Allocator)
	if f, ok := t.(transport.ForeignRegistrar); ok && f.RegistersForeign() {
		copied = false // shm executes its peers' operations on buf itself
	}
	if !copied && len(buf) > 0 {
		return create(ctx, c, created, buf)
	}
	// A copy in transport memory; an empty buffer gets empty memory that
	// the transport accepts, as Allocate(0).
	mem, err := allocMem(t, len(buf))
	if err != nil {
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
	}
	copy(mem, buf)
	w, err := create(ctx, c, created, mem)
	if err != nil {
		releaseMem(t, mem)
		return nil, err
	}
	w.owned = append(w.owned, mem)
	if len(buf) > 0 {
		w.user = buf
	}
	return w, nil
}

// copyOut copies the window memory back into Create's buffer where the
// window memory is a copy of it. Free calls it once no operation can reach
// the memory any more, before releasing it.
func (w *Window) copyOut() {
	if w.user != nil {
		copy(w.user, w.mem)
		w.user = nil
	}
}

// CreateDynamic creates a window without memory; each rank then attaches
// buffers with Attach and publishes the addresses. Collective.
func CreateDynamic(ctx context.Context, c Comm) (*Window, error) {
	return create(ctx, c, dynamic, nil)
}

func create(ctx context.Context, c Comm, k kind, mem []byte) (_ *Window, err error) {
	t := c.Transport()
	ctlMem, err := allocMem(t, ctlWords(c.Size())*8)
	if err != nil {
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
	}
	defer func() {
		if err != nil {
			releaseMem(t, ctlMem)
		}
	}()
	w := &Window{c: c, t: t, rank: c.Rank(), kind: k, mem: mem,
		ctl:   wordSlice(ctlMem, ctlWords(c.Size())),
		owned: [][]byte{ctlMem}, ordered: t.Caps().Has(transport.CapOrdered),
		attached: make(map[transport.Key]struct{})}
	w.notices = noticeCounter(c)
	var info peerInfo
	if k != dynamic {
		if info.key, err = t.Register(mem); err != nil {
			return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
		}
		info.size = uint64(len(mem))
	}
	if info.ctl, err = t.Register(wordBytes(w.ctl)); err != nil {
		w.deregister(info.key)
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
	}
	var mine [25]byte
	binary.BigEndian.PutUint32(mine[0:], uint32(info.key))
	binary.BigEndian.PutUint64(mine[4:], info.size)
	binary.BigEndian.PutUint32(mine[12:], uint32(info.ctl))
	binary.BigEndian.PutUint64(mine[16:], windowIDs.Load())
	if k == sharedAlloc && sharesAll(c) {
		mine[24] = 1
	}
	all, err := c.Allgather(ctx, mine[:])
	if err == nil {
		err = checkDescriptions(k, all, len(mine))
	}
	if err != nil {
		w.deregister(info.key)
		w.deregister(info.ctl)
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
	}
	w.setPeers(make([]peerInfo, len(all)))
	var id uint64
	for r, b := range all {
		id = max(id, binary.BigEndian.Uint64(b[16:]))
		w.peers[r] = peerInfo{
			tr:   c.TransportRank(ftrma.Rank(r)),
			cr:   ftrma.Rank(r),
			key:  transport.Key(binary.BigEndian.Uint32(b[0:])),
			size: binary.BigEndian.Uint64(b[4:]),
			ctl:  transport.Key(binary.BigEndian.Uint32(b[12:])),
		}
	}
	adoptWindowID(id)
	w.windowID = id
	w.revokeID = c.WindowRevokeNotice(id, 0)
	if k == sharedAlloc {
		w.mapShared()
	}
	return w, nil
}

// checkDescriptions checks the window descriptions create gathered: each of
// n bytes, and for AllocateShared every rank able to map every other's
// memory. Every rank sees the same descriptions and decides alike.
func checkDescriptions(k kind, all [][]byte, n int) error {
	for r, b := range all {
		if len(b) != n {
			return fmt.Errorf("%w: bad window description from rank %d", ftrma.ErrInvalid, r)
		}
	}
	if k != sharedAlloc {
		return nil
	}
	for r, b := range all {
		if b[24] == 0 {
			return fmt.Errorf("%w: rank %d cannot map the memory of every rank (AllocateShared needs every rank on one host, reached through shared memory)", transport.ErrNotShared, r)
		}
	}
	return nil
}

// windowIDs is this process's next window id (see create).
var windowIDs atomic.Uint64

// adoptWindowID makes this process's next window id larger than id. Every
// rank proposes its process's next id; all take the largest, so the id (and
// the revocation notice) is the same everywhere.
func adoptWindowID(id uint64) {
	for cur := windowIDs.Load(); cur <= id && !windowIDs.CompareAndSwap(cur, id+1); cur = windowIDs.Load() {
	}
}

func (w *Window) deregister(k transport.Key) {
	if k != 0 {
		w.t.Deregister(k)
	}
}

// Bytes returns this rank's window memory (nil for a dynamic window). Local
// loads and stores may race with remote operations unless the ranks
// synchronize (Flush, locks, barriers), as in MPI.
func (w *Window) Bytes() []byte { return w.mem }

// Attach exposes buf in a dynamic window and returns its address; other ranks
// access buf at displacements address+offset. buf must stay alive and
// unmoved until Detach. For atomic operations buf should be 8-byte aligned.
func (w *Window) Attach(buf []byte) (uint64, error) {
	if err := w.check("attach"); err != nil {
		return 0, err
	}
	if w.kind != dynamic {
		return 0, &ftrma.OpError{Op: "attach", Rank: -1, Err: fmt.Errorf("%w: attach needs a dynamic window", ftrma.ErrInvalid)}
	}
	if uint64(len(buf)) > offMask {
		return 0, &ftrma.OpError{Op: "attach", Rank: -1, Err: fmt.Errorf("%w: buffer of %d bytes too large", ftrma.ErrInvalid, len(buf))}
	}
	key, err := w.t.Register(buf)
	if err != nil {
		return 0, &ftrma.OpError{Op: "attach", Rank: -1, Err: err}
	}
	w.mu.Lock()
	w.attached[key] = struct{}{}
	w.mu.Unlock()
	return uint64(key) << addrShift, nil
}

// Detach withdraws a buffer attached at addr. Later accesses to it fail at the
// origin's Flush with ftrma.ErrUnknownRegion.
func (w *Window) Detach(addr uint64) error {
	if err := w.check("detach"); err != nil {
		return err
	}
	key := transport.Key(addr >> addrShift)
	w.mu.Lock()
	_, ok := w.attached[key]
	delete(w.attached, key)
	w.mu.Unlock()
	if !ok || addr&offMask != 0 {
		return &ftrma.OpError{Op: "detach", Rank: -1, Err: fmt.Errorf("%w: address %#x was not returned by Attach", ftrma.ErrInvalid, addr)}
	}
	return w.t.Deregister(key)
}

// check fails when the window was freed (revocation does not matter).
func (w *Window) check(op string) error {
	if w.freed.Load() {
		return &ftrma.OpError{Op: op, Rank: -1, Err: w.freedErr()}
	}
	return nil
}

// freedErr is the error of a freed window: ErrRebuilt when Rebuild replaced
// it, else ErrFreed.
func (w *Window) freedErr() error {
	if w.rebuilt.Load() {
		return ErrRebuilt
	}
	return ErrFreed
}

// Revoke revokes the window at every rank (the ULFM RMA chapter's
// MPI_Win_revoke): the notice is reliably broadcast, and once it arrives every
// rank's later operations on the window return ftrma.ErrRevoked. Free and
// Shrink still work.
func (w *Window) Revoke() error {
	if err := w.check("revoke"); err != nil {
		return err
	}
	w.revoked.Store(true)
	w.c.Notify(w.revokeID)
	return nil
}

// IsRebuilt reports whether Rebuild replaced the window (local): its
// operations return ErrRebuilt.
func (w *Window) IsRebuilt() bool { return w.rebuilt.Load() }

// IsRevoked reports whether a revocation of the window has arrived (local).
func (w *Window) IsRevoked() bool {
	if !w.revoked.Load() && w.notices.Load() != w.noticesSeen.Load() {
		w.lookForRevocation()
	}
	return w.revoked.Load()
}

// Failed returns the window ranks known to have failed, in rank order
// (local knowledge, no communication).
func (w *Window) Failed() []ftrma.Rank {
	var out []ftrma.Rank
	for r, p := range w.peers {
		if w.c.ProcFailed(p.cr) {
			out = append(out, ftrma.Rank(r))
		}
	}
	return out
}

// LocalAtomics reports whether this rank's own CPU atomics on its window
// memory are atomic with the remote atomic operations peers apply to it. When
// they are not (RDMA devices with IBV_ATOMIC_HCA), the owner must update
// words that peers update atomically with this window's atomic operations on
// itself, which go through the device like everyone else's.
func (w *Window) LocalAtomics() bool { return w.t.Caps().Has(transport.CapLocalAtomics) }

// RegionLimit is how many regions (attached buffers, plus the window's own
// control memory and that of other windows) this rank's transport can have
// registered at once; 0 when it sets no limit of its own.
func (w *Window) RegionLimit() int {
	if l, ok := w.t.(transport.RegionLimiter); ok {
		return l.RegionLimit()
	}
	return 0
}

// Rank is this rank's rank in the window; Size the window's number of ranks.
// They equal the communicator's, except in a window made by Shrink.
func (w *Window) Rank() ftrma.Rank { return w.rank }

// Size is the number of ranks of the window.
func (w *Window) Size() int { return len(w.peers) }

// Shrink returns a window over the surviving ranks of w, without shrinking the
// communicator (the paper's missing feature): the ranks agree on the failed
// set, and the survivors keep their exposed memory, now numbered in the old
// order without the failed ranks. Collective over the survivors; it works on
// a revoked window (the new window is not revoked). w stays usable toward
// live ranks; free only one of the two windows (they share memory). Rebuild
// takes w, not the window Shrink made.
func (w *Window) Shrink(ctx context.Context) (*Window, error) {
	if err := w.check("shrink"); err != nil {
		return nil, err
	}
	// The agreement fixes the failed set everywhere (Failed() is equal at
	// every survivor afterwards).
	if _, err := w.c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return nil, wrap("shrink", -1, err)
	}
	n := &Window{c: w.c, t: w.t, kind: w.kind, mem: w.mem, ctl: w.ctl, owned: w.owned, user: w.user, rank: -1,
		windowID: w.windowID, shrinks: w.shrinks + 1, revokeID: w.c.WindowRevokeNotice(w.windowID, w.shrinks+1), ordered: w.ordered, attached: w.attached, shared: true, notices: w.notices,
		unmaps: w.unmaps}
	var peers []peerInfo
	for r, p := range w.peers {
		if w.c.ProcFailed(p.cr) {
			continue
		}
		if p.cr == w.peers[w.rank].cr {
			n.rank = ftrma.Rank(len(peers))
		}
		peers = append(peers, p)
		if w.sharedMem != nil {
			n.sharedMem = append(n.sharedMem, w.sharedMem[r])
			n.sharedErr = append(n.sharedErr, w.sharedErr[r])
		}
	}
	n.setPeers(peers)
	return n, nil
}

// target validates an access of n bytes at disp of rank r and returns the
// region and offset to name to the transport. Its common case is direct;
// everything else is targetSlow.
func (w *Window) target(op string, r ftrma.Rank, disp uint64, n int, atomic bool) (ftrma.Rank, transport.Key, uint64, error) {
	if p := w.direct(r, disp, n); p != nil && (!atomic || disp%8 == 0) {
		return p.tr, p.key, disp, nil
	}
	return w.targetSlow(op, r, disp, n, atomic)
}

// direct is the common case of target, small enough to be inlined: a
// window made with memory, neither freed nor revoked, no notice arrived
// since open last looked, r a rank of it and n bytes at disp inside its
// window; nil otherwise (target then finds out why).
func (w *Window) direct(r ftrma.Rank, disp uint64, n int) *peerInfo {
	if uint(r) >= uint(len(w.peers)) || w.kind == dynamic || w.freed.Load() || w.revoked.Load() ||
		w.notices.Load() != w.noticesSeen.Load() {
		return nil
	}
	if p := &w.peers[r]; disp <= p.size && uint64(n) <= p.size-disp {
		return p
	}
	return nil
}

// lookForRevocation looks whether the window's revocation arrived, once
// notices may have (the generation moved since it last looked): it asks
// Noticed, sets revoked when the answer is yes, else records the generation
// it asked at, so that direct and IsRevoked ask nothing until it moves again.
func (w *Window) lookForRevocation() {
	g := w.notices.Load()
	if w.c.Noticed(w.revokeID) {
		w.revoked.Store(true)
	} else if w.notices != &unwatched {
		w.noticesSeen.Store(g)
	}
}

// NoticeCounter is implemented by a Comm (comm.Comm) whose notices can be
// watched cheaply: NoticeGeneration counts the notices recorded in the
// process, only growing, so that while it holds still Noticed's answers
// hold too. A window then asks Noticed only when it moved.
type NoticeCounter interface {
	NoticeGeneration() *atomic.Uint64
}

// noticeCounter is c's NoticeGeneration, or for a Comm without one
// unwatched, which never equals noticesSeen: direct then never takes its
// common case, and IsRevoked always asks.
func noticeCounter(c Comm) *atomic.Uint64 {
	if nc, ok := c.(NoticeCounter); ok {
		return nc.NoticeGeneration()
	}
	return &unwatched
}

var unwatched atomic.Uint64

func init() { unwatched.Store(1) }

// targetSlow is target past its common case.
func (w *Window) targetSlow(op string, r ftrma.Rank, disp uint64, n int, atomic bool) (ftrma.Rank, transport.Key, uint64, error) {
	if err := w.usable(op, r); err != nil {
		return 0, 0, 0, err
	}
	if r < 0 || int(r) >= len(w.peers) {
		return 0, 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	p := w.peers[r]
	if atomic && disp%8 != 0 {
		return 0, 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: displacement %d", ftrma.ErrMisaligned, disp)}
	}
	if w.kind == dynamic {
		key, off := transport.Key(disp>>addrShift), disp&offMask
		if key == 0 {
			return 0, 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: %#x is not an attached address", ftrma.ErrUnknownRegion, disp)}
		}
		if uint64(n) > offMask-off {
			return 0, 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrOutOfBounds}
		}
		return p.tr, key, off, nil
	}
	if disp > p.size || uint64(n) > p.size-disp {
		return 0, 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: %d bytes at %d, window of rank %d has %d", ftrma.ErrOutOfBounds, n, disp, r, p.size)}
	}
	return p.tr, p.key, disp, nil
}

// usable fails when the window was freed or revoked.
func (w *Window) usable(op string, r ftrma.Rank) error {
	if w.freed.Load() {
		return &ftrma.OpError{Op: op, Rank: r, Err: w.freedErr()}
	}
	if w.IsRevoked() {
		return &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRevoked}
	}
	return nil
}

func wrap(op string, r ftrma.Rank, err error) error {
	if err == nil {
		return nil
	}
	var oe *ftrma.OpError
	if errors.As(err, &oe) && oe.Op == op {
		return err
	}
	return &ftrma.OpError{Op: op, Rank: r, Err: err}
}

// Put copies data to disp in rank target's window. data may be reused when Put
// returns; the write is complete at the next Flush of target.
func (w *Window) Put(target ftrma.Rank, disp uint64, data []byte) error {
	_, _, err := w.put("put", target, disp, data)
	return err
}

func (w *Window) put(op string, target ftrma.Rank, disp uint64, data []byte) (ftrma.Rank, transport.Seq, error) {
	if p := w.direct(target, disp, len(data)); p != nil {
		seq, err := w.t.Write(p.tr, p.key, disp, data)
		if err != nil {
			err = wrap(op, target, err)
		}
		return p.tr, seq, err
	}
	tr, key, off, err := w.targetSlow(op, target, disp, len(data), false)
	if err != nil {
		return 0, 0, err
	}
	seq, err := w.t.Write(tr, key, off, data)
	return tr, seq, wrap(op, target, err)
}

// PutSync is a blocking Put: it returns once data is visible in target's
// window, or with the error of the write.
func (w *Window) PutSync(ctx context.Context, target ftrma.Rank, disp uint64, data []byte) error {
	tr, seq, err := w.put("put", target, disp, data)
	if err != nil {
		return err
	}
	return wrap("put", target, w.t.Wait(ctx, tr, seq))
}

// Get reads len(buf) bytes at disp of target's window into buf, which holds
// the data after the next Flush of target and must not be touched before.
func (w *Window) Get(target ftrma.Rank, disp uint64, buf []byte) error {
	_, _, err := w.get("get", target, disp, buf)
	return err
}

func (w *Window) get(op string, target ftrma.Rank, disp uint64, buf []byte) (ftrma.Rank, transport.Seq, error) {
	if p := w.direct(target, disp, len(buf)); p != nil {
		seq, err := w.t.Read(p.tr, p.key, disp, buf)
		if err != nil {
			err = wrap(op, target, err)
		}
		return p.tr, seq, err
	}
	tr, key, off, err := w.targetSlow(op, target, disp, len(buf), false)
	if err != nil {
		return 0, 0, err
	}
	seq, err := w.t.Read(tr, key, off, buf)
	return tr, seq, wrap(op, target, err)
}

// Request is a posted request-based operation (Rput, Rget, Raccumulate,
// RgetAccumulate). Complete it with Wait, Test or WaitAll; once complete it
// keeps its outcome, which later calls return again.
type Request struct {
	w      *Window
	op     string
	target ftrma.Rank // window rank
	tr     ftrma.Rank // its transport rank
	seq    transport.Seq

	mu   sync.Mutex // guards done and err
	done bool       // the outcome is known
	err  error      // the outcome, once done
}

func (w *Window) newRequest(op string, target, tr ftrma.Rank, seq transport.Seq) *Request {
	return &Request{w: w, op: op, target: target, tr: tr, seq: seq}
}

// Wait blocks until the request is complete: for Rput the data is visible at
// the target, for Rget it is in the buffer, for the accumulates the update is
// done at the target and the result is in place. It returns the operation's
// error, an error wrapping ftrma.ErrProcFailed when the target failed first,
// or ctx's error (the request then stays incomplete).
func (r *Request) Wait(ctx context.Context) error {
	if done, err := r.outcome(); done {
		return err
	}
	err := r.w.t.Wait(ctx, r.tr, r.seq)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return wrap(r.op, r.target, err)
	}
	return r.finish(wrap(r.op, r.target, err))
}

// Test reports, without blocking, whether the request is complete, and then
// its outcome as Wait would return it. A request toward a target known to
// have failed is complete with an error wrapping ftrma.ErrProcFailed.
func (r *Request) Test() (bool, error) {
	if done, err := r.outcome(); done {
		return true, err
	}
	var done bool
	var err error
	if t, ok := r.w.t.(transport.Tester); ok {
		done, err = t.Test(r.tr, r.seq)
	} else {
		// Wait with a context that has ended returns at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err = r.w.t.Wait(ctx, r.tr, r.seq)
		done = !errors.Is(err, context.Canceled)
	}
	if !done {
		return false, nil
	}
	return true, r.finish(wrap(r.op, r.target, err))
}

func (r *Request) outcome() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done, r.err
}

// finish records the outcome err; an error found by a concurrent Wait or
// Test wins over nil (the transport reports an error once).
func (r *Request) finish(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done || r.err == nil {
		r.done, r.err = true, err
	}
	return r.err
}

// WaitAll waits for every request (nil ones are skipped), also after some
// failed, and returns their errors joined (nil when all succeeded; test it
// with errors.Is). When ctx ends first it returns ctx's error with those
// found so far, and the requests not yet complete stay incomplete.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var errs []error
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(ctx); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Rput is Put returning a request to wait for.
func (w *Window) Rput(target ftrma.Rank, disp uint64, data []byte) (*Request, error) {
	tr, seq, err := w.put("rput", target, disp, data)
	if err != nil {
		return nil, err
	}
	return w.newRequest("rput", target, tr, seq), nil
}

// Rget is Get returning a request to wait for.
func (w *Window) Rget(target ftrma.Rank, disp uint64, buf []byte) (*Request, error) {
	tr, seq, err := w.get("rget", target, disp, buf)
	if err != nil {
		return nil, err
	}
	return w.newRequest("rget", target, tr, seq), nil
}

// Flush returns when every operation this rank posted toward target is
// complete at the target, with the first error among them.
func (w *Window) Flush(ctx context.Context, target ftrma.Rank) error {
	tr, err := w.rankOf("flush", target)
	if err != nil {
		return err
	}
	return wrap("flush", target, w.t.Flush(ctx, tr))
}

// rankOf validates a target rank for an operation that names no memory and
// returns its transport rank.
func (w *Window) rankOf(op string, r ftrma.Rank) (ftrma.Rank, error) {
	if err := w.usable(op, r); err != nil {
		return 0, err
	}
	if r < 0 || int(r) >= len(w.peers) {
		return 0, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	return w.peers[r].tr, nil
}

// Push starts sending the operations posted toward target without waiting
// for them: calling Push for several targets before flushing each overlaps
// their round trips. It has no effect on the operations' semantics.
func (w *Window) Push(target ftrma.Rank) {
	if tr, err := w.rankOf("push", target); err == nil {
		w.t.Push(tr)
	}
}

// FlushAll is Flush toward every rank; it returns the first error.
func (w *Window) FlushAll(ctx context.Context) error {
	if err := w.usable("flush", -1); err != nil {
		return err
	}
	for _, p := range w.peers {
		w.t.Push(p.tr)
	}
	var first error
	for r, p := range w.peers {
		if err := w.t.Flush(ctx, p.tr); err != nil && first == nil {
			first = wrap("flush", ftrma.Rank(r), err)
		}
	}
	return first
}

func alignedBytes(n int) []byte {
	return wordBytes(make([]uint64, (n+7)/8))[:n:n]
}

// wordSlice views the first n words of b, which is 8-byte aligned.
func wordSlice(b []byte, n int) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func wordBytes(w []uint64) []byte {
	if len(w) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 8*len(w))
}

func int64Bytes(v []int64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}
