//go:build linux && cgo && verbs

package verbs

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ibv.h"
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Built reports whether this binary carries the verbs transport.
const Built = true

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
)

// Sizes of the per-peer resources.
const (
	sendDepth  = 128       // send work requests in flight toward one peer
	recvDepth  = 16        // receive buffers posted for one peer
	slotBytes  = 8 << 10   // one receive buffer: a message fragment and its header
	stageBytes = 256 << 10 // staging ring toward one peer
	maxPiece   = 64 << 10  // the largest piece of a Write or Read
	maxFrag    = slotBytes - fragHeader
	tableSlots = 1 << 14 // key table entries
	entryBytes = 32      // key table entry: key, address, length, rkey
	keySlotBit = 14      // a key of Register is generation<<14 | slot
	maxInline  = 128
)

// The access flags of access.go are libibverbs' own: each conversion below
// overflows, and the build fails, if they differ.
const (
	_ = uint8(accessLocalWrite-C.IBV_ACCESS_LOCAL_WRITE) + uint8(C.IBV_ACCESS_LOCAL_WRITE-accessLocalWrite)
	_ = uint8(accessRemoteWrite-C.IBV_ACCESS_REMOTE_WRITE) + uint8(C.IBV_ACCESS_REMOTE_WRITE-accessRemoteWrite)
	_ = uint8(accessRemoteRead-C.IBV_ACCESS_REMOTE_READ) + uint8(C.IBV_ACCESS_REMOTE_READ-accessRemoteRead)
	_ = uint8(accessRemoteAtomic-C.IBV_ACCESS_REMOTE_ATOMIC) + uint8(C.IBV_ACCESS_REMOTE_ATOMIC-accessRemoteAtomic)
)

// Kinds of send-side work request.
const (
	kWrite = iota + 1
	kRead
	kCAS
	kFAdd
	kSend
	kFetch // a key table entry read for the key cache
	kLocal // no work request: an operation that failed before posting, completing in order
)

var opNames = [...]string{kWrite: "write", kRead: "read", kCAS: "compare-and-swap", kFAdd: "fetch-and-add", kSend: "send", kFetch: "resolve key", kLocal: "op"}

// Control message types (the first byte of every fragment header).
const (
	mUser      = 1 // a transport.Receiver message
	mRevoke    = 2 // the sender deregisters a key: stop using it, then ack
	mRevokeAck = 3 // every operation on the key posted before this has executed
	mBye       = 4 // the sender closes its transport: nothing follows
	mFenced    = 5 // the sender fenced the receiver: nothing of either lands at the other any more
	mHello     = 6 // the sender admitted the receiver (a late rank): its queue pair is ready
)

var loadOnce struct {
	sync.Once
	err error
}

// Load loads libibverbs. It is called by Open and by Probe; a binary on a
// host without the library fails here, not at start-up.
func Load() error {
	loadOnce.Do(func() {
		var buf [256]C.char
		if C.ftv_load(&buf[0], C.int(len(buf))) != 0 {
			loadOnce.err = fmt.Errorf("verbs: cannot load libibverbs: %s", C.GoString(&buf[0]))
		}
	})
	return loadOnce.err
}

// Transport is the verbs transport of one rank. See the package doc.
type Transport struct {
	cfg    Config
	log    *slog.Logger // cfg.Logger with this rank
	dev    Choice
	ctx    *C.struct_ibv_context
	pd     *C.struct_ibv_pd
	ch     *C.struct_ibv_comp_channel
	scq    *C.struct_ibv_cq // send completions: polled by waiters and the progress goroutine
	rcq    *C.struct_ibv_cq // receive completions: the progress goroutine only
	info   C.ftv_devinfo
	gid    [16]byte
	global bool // address peers by GID (RoCE), not LID
	inline int
	psn    uint32
	rdAtom int
	caps   transport.Caps

	mem      unsafe.Pointer // staging rings, then receive buffers, of every peer
	memLen   uintptr
	memMR    *C.struct_ibv_mr
	lkey     uint32
	table    unsafe.Pointer // the key table peers read
	tableMR  *C.struct_ibv_mr
	peers    []*peer
	tables   []remoteTable    // every rank's key table, from its address; tables[r] is guarded by peers[r].mu
	selfResp *C.struct_ibv_qp // the passive end of the loopback pair

	regMu   sync.Mutex
	regs    map[transport.Key]*localReg
	gens    []uint16        // per table slot: the generation of its last key (Register)
	slotKey []transport.Key // per table slot: the key registered in it, or 0
	nextTab int             // slots below it have been used (Register)
	keyMode uint8           // who chooses keys: 0 (nothing registered yet), keysOwn or keysCallers

	revMu   sync.Mutex
	revokes map[transport.Key]*revocation

	pollMu sync.Mutex // serializes polling the send CQ and the CQs' teardown
	swc    *C.ftv_wc  // 32 completions of the send CQ; guarded by pollMu
	rwc    *C.ftv_wc  // 32 completions of the receive CQ
	cqGone bool       // guarded by pollMu: the CQs are destroyed
	unack  [2]uint32  // CQ events not yet acknowledged (send, receive); progress goroutine

	// Completion events. A CQ is armed (ibv_req_notify_cq) only when someone
	// needs to hear of its next completion: the receive CQ whenever the
	// progress goroutine sleeps, the send CQ only while work requests are in
	// flight that no waiter is polling for (see armSend). A flag is set by
	// whoever arms and cleared by the progress goroutine when it takes the
	// event, so a CQ is armed once per event, not at every sleep.
	inflight atomic.Int64 // send-side work requests posted, not completed (every peer)
	scqArmed atomic.Bool
	rcqArmed atomic.Bool

	evf    *os.File // a duplicate of the channel's fd, in Go's poller
	evrc   syscall.RawConn
	wakeMu sync.Mutex

	recvMu sync.Mutex
	recv   transport.Receiver
	held   []event // messages and peer-down events before SetReceiver
	downs  []event // peer-down events for the progress goroutine to deliver

	stats stats // when statsOn

	connected atomic.Bool
	closed    atomic.Bool
	stop      atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// statsOn turns on the completion path's counters (FTV_STATS=1; not an
// FTRMA_ variable, which ftrun does not pass on to ranks): Close logs them,
// so that a benchmark can tell what an operation cost.
var statsOn = os.Getenv("FTV_STATS") == "1"

// stats counts, when statsOn, what the completion path did.
type stats struct {
	ops        atomic.Int64 // operations posted (Write, Read, atomics)
	opsAtPost  atomic.Int64 // ... complete when their post returned (polled in the same call)
	postNanos  atomic.Int64 // time in Write, Read and the atomics, in all
	spins      atomic.Int64 // C busy-poll calls of waiters
	spinsDone  atomic.Int64 // waits the spin completed
	parks      atomic.Int64 // waits that armed the send queue to park
	sendEvents atomic.Int64 // send queue events taken by the progress goroutine
	recvEvents atomic.Int64 // receive queue events taken
	sleeps     atomic.Int64 // times the progress goroutine went to sleep
}

func (s *stats) String() string {
	ops := max(s.ops.Load(), 1)
	return fmt.Sprintf("ops %d (complete at post %d, %.1f us per call of Write, Read or an atomic), waiter spins %d (completed %d), parks %d, events send %d recv %d, progress sleeps %d",
		s.ops.Load(), s.opsAtPost.Load(), float64(s.postNanos.Load())/float64(ops)/1e3, s.spins.Load(), s.spinsDone.Load(), s.parks.Load(), s.sendEvents.Load(), s.recvEvents.Load(), s.sleeps.Load())
}

// event is a message or a peer-down event on its way to the receiver.
type event struct {
	from ftrma.Rank
	msg  []byte
	err  error // a peer-down event when non-nil
}

// localReg is a registered region of this rank.
type localReg struct {
	key  transport.Key
	mem  []byte
	mr   *C.struct_ibv_mr
	slot int
}

// Who chooses a transport's keys (Transport.keyMode).
const (
	keysOwn     = 1 // Register
	keysCallers = 2 // RegisterKey
)

// revocation is a Deregister waiting for the live peers' acknowledgements.
type revocation struct {
	waiting map[ftrma.Rank]bool
	done    chan struct{}
}

// region is a peer's registered region as this rank's key cache knows it.
type region struct {
	addr, len uint64
	rkey      uint32
	gone      bool // deregistered (or never registered): keys are not reused
}

// remoteTable is where a rank's key table is.
type remoteTable struct {
	addr uint64
	rkey uint32
}

// keyFetch is a read of a peer's key table entry under way.
type keyFetch struct {
	key  transport.Key
	done chan struct{}
}

// peer is the state toward one rank: its queue pair, the work requests in
// flight in posting order, the staging ring their data lives in, the key
// cache and the reassembly of incoming messages.
type peer struct {
	t    *Transport
	rank ftrma.Rank
	self bool
	comp transport.Completion

	qpn      uint32     // the number of its queue pair (kept: Addr works after the pair is destroyed)
	mu       sync.Mutex // orders posting; guards the fields below
	qp       *C.struct_ibv_qp
	fifo     []entry // ring of sendDepth entries: posted, not completed
	head, n  int
	ring     stageRing
	keys     map[transport.Key]region
	fetching map[transport.Key]*keyFetch
	backlog  [][]byte // message fragments (header included) waiting for room, in order
	dead     bool     // fenced, failed or left: the queue pair is gone
	space    chan struct{}

	// Admission (transport.Admitter). absent: a rank not started
	// (Config.Absent), its queue pair in INIT; cleared by Admit or down.
	// admitted: Admit connected the queue pair. held: this is a late rank
	// and the peer has not said hello yet (it may not have admitted this
	// rank): nothing is posted toward it, operations wait, fragments stay
	// in the backlog. admitted and held are guarded by mu.
	absent   atomic.Bool
	admitted bool
	held     bool

	downOnce sync.Once
	left     atomic.Bool // said goodbye

	// receive side, used by the progress goroutine only
	rbase unsafe.Pointer // recvDepth buffers of slotBytes

	rxMu sync.Mutex // guards rx: the progress goroutine adds, down drops
	rx   reassembly // max transport.MaxControlMessage
}

// entry is one posted send-side work request (or a kLocal placeholder).
type entry struct {
	kind   uint8
	seq    transport.Seq  // the operation it completes, 0 for none
	end    uint64         // staging ring position released at completion
	stage  unsafe.Pointer // the read data or atomic result in staging
	dst    []byte
	result *uint64
	fetch  *keyFetch
	err    error // kLocal: the operation's error
}

// stageRing hands out staging memory in posting order and takes it back in
// completion order (which, on one queue pair, is the same order).
type stageRing struct {
	base       unsafe.Pointer
	head, tail uint64 // positions: allocated up to head, freed up to tail
}

// alloc returns the address of n bytes (8-aligned) and the position that
// frees them, or ok false when the ring is too full.
func (r *stageRing) alloc(n int) (addr unsafe.Pointer, end uint64, ok bool) {
	n = (n + 7) &^ 7
	pos := r.head
	if off := pos % stageBytes; off+uint64(n) > stageBytes {
		pos += stageBytes - off // skip the ring's tail end
	}
	if pos+uint64(n)-r.tail > stageBytes {
		return nil, 0, false
	}
	r.head = pos + uint64(n)
	return unsafe.Add(r.base, pos%stageBytes), r.head, true
}

// Open opens the device cfg names (or Select's choice), creates the
// completion queues and one queue pair per peer (a loopback pair for this
// rank itself), and posts the receive buffers. Publish Addr through the
// rendezvous, then call Connect with every rank's address.
func Open(cfg Config) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := Load(); err != nil {
		return nil, err
	}
	dev, err := Select(cfg.Device, cfg.Port, cfg.GIDIndex)
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, log: cfg.Logger.With(ftrma.LogRank, cfg.Rank), dev: dev, regs: map[transport.Key]*localReg{}, gens: make([]uint16, tableSlots), slotKey: make([]transport.Key, tableSlots),
		revokes: map[transport.Key]*revocation{}, done: make(chan struct{})}
	if err := t.open(); err != nil {
		t.release()
		return nil, fmt.Errorf("verbs: rank %d: %s port %d: %w", cfg.Rank, dev.Device, dev.Port, err)
	}
	return t, nil
}

func (t *Transport) open() error {
	var n C.int
	list := C.ftv_get_device_list(&n)
	if list == nil || n == 0 {
		return errors.New("libibverbs lists no device")
	}
	defer C.ftv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.ftv_device_name(d)) == t.dev.Device {
			t.ctx = C.ftv_open_device(d)
			break
		}
	}
	if t.ctx == nil {
		return errors.New("cannot open the device")
	}
	if rc := C.ftv_query(t.ctx, C.int(t.dev.Port), &t.info); rc != 0 {
		return fmt.Errorf("query device: %w", syscall.Errno(-rc))
	}
	if t.info.port_state != C.IBV_PORT_ACTIVE {
		return fmt.Errorf("port is not active (state %d)", int(t.info.port_state))
	}
	if C.ftv_query_gid(t.ctx, C.int(t.dev.Port), C.int(t.dev.GIDIndex), (*C.uint8_t)(unsafe.Pointer(&t.gid[0]))) != 0 {
		return fmt.Errorf("query GID index %d failed", t.dev.GIDIndex)
	}
	t.global = t.info.link_layer == C.IBV_LINK_LAYER_ETHERNET || t.info.lid == 0
	t.caps = transport.CapOneSided | transport.CapOrdered | transport.CapRemoteCompletion
	if t.info.atomic_cap == C.IBV_ATOMIC_GLOB {
		t.caps |= transport.CapNativeAtomics | transport.CapLocalAtomics
	}
	if t.info.atomic_cap == C.IBV_ATOMIC_NONE {
		return errors.New("the device has no atomic operations")
	}
	t.rdAtom = min(int(t.info.max_qp_rd_atom), int(t.info.max_qp_init_rd_atom), 16)
	if t.rdAtom < 1 {
		t.rdAtom = 1
	}
	var b [4]byte
	rand.Read(b[:])
	t.psn = binary.LittleEndian.Uint32(b[:]) & 0xffffff

	if t.pd = C.ftv_alloc_pd(t.ctx); t.pd == nil {
		return errors.New("cannot allocate a protection domain")
	}
	if t.ch = C.ftv_create_channel(t.ctx); t.ch == nil {
		return errors.New("cannot create a completion channel")
	}
	size := t.cfg.Size
	scqe := min((size+1)*sendDepth, int(t.info.max_cqe))
	rcqe := min((size+1)*recvDepth, int(t.info.max_cqe))
	if scqe < (size+1)*sendDepth || rcqe < (size+1)*recvDepth {
		return fmt.Errorf("the device's completion queues hold %d entries, %d ranks need %d", int(t.info.max_cqe), size, (size+1)*sendDepth)
	}
	if t.scq = C.ftv_create_cq(t.ctx, C.int(scqe), t.ch); t.scq == nil {
		return errors.New("cannot create the send completion queue")
	}
	if t.rcq = C.ftv_create_cq(t.ctx, C.int(rcqe), t.ch); t.rcq == nil {
		return errors.New("cannot create the receive completion queue")
	}
	t.swc = (*C.ftv_wc)(C.malloc(C.size_t(32 * unsafe.Sizeof(C.ftv_wc{}))))
	t.rwc = (*C.ftv_wc)(C.malloc(C.size_t(32 * unsafe.Sizeof(C.ftv_wc{}))))

	// One mapping for every peer's staging ring and receive buffers, and one
	// for the key table. Each is registered with only the access it needs
	// (accessFlags): staging for local use, the key table for remote reads.
	per := uintptr(stageBytes + recvDepth*slotBytes)
	t.memLen = per * uintptr(size)
	if t.mem = C.ftv_alloc(C.size_t(t.memLen)); t.mem == nil {
		return errors.New("cannot map staging memory")
	}
	if t.memMR = C.ftv_reg_mr(t.pd, t.mem, C.size_t(t.memLen), C.int(accessFlags(regionStaging))); t.memMR == nil {
		return errors.New("cannot register staging memory")
	}
	t.lkey = uint32(C.ftv_mr_lkey(t.memMR))
	if t.table = C.ftv_alloc(tableSlots * entryBytes); t.table == nil {
		return errors.New("cannot map the key table")
	}
	if t.tableMR = C.ftv_reg_mr(t.pd, t.table, tableSlots*entryBytes, C.int(accessFlags(regionKeyTable))); t.tableMR == nil {
		return errors.New("cannot register the key table")
	}

	t.peers = make([]*peer, size)
	t.tables = make([]remoteTable, size)
	for r := range size {
		p := &peer{t: t, rank: ftrma.Rank(r), self: r == int(t.cfg.Rank), fifo: make([]entry, sendDepth),
			keys: map[transport.Key]region{}, fetching: map[transport.Key]*keyFetch{}, space: make(chan struct{}, 1),
			rx: reassembly{max: transport.MaxControlMessage}}
		base := unsafe.Add(t.mem, per*uintptr(r))
		p.ring.base = base
		p.rbase = unsafe.Add(base, stageBytes)
		t.peers[r] = p
		var got C.int
		for _, a := range t.cfg.Absent {
			p.absent.Store(p.absent.Load() || a == p.rank)
		}
		p.qp = C.ftv_create_qp(t.pd, t.scq, t.rcq, sendDepth, recvDepth, maxInline, &got)
		if p.qp == nil {
			return fmt.Errorf("cannot create a queue pair for rank %d", r)
		}
		p.qpn = uint32(C.ftv_qp_num(p.qp))
		t.inline = int(got)
		if rc := C.ftv_qp_init(p.qp, C.int(t.dev.Port)); rc != 0 {
			return fmt.Errorf("queue pair for rank %d to INIT: %w", r, syscall.Errno(rc))
		}
		recvQP := p.qp
		if p.self {
			// The loopback pair: this rank's operations on its own memory go
			// through the device too, so they are atomic with the peers'.
			if t.selfResp = C.ftv_create_qp(t.pd, t.scq, t.rcq, 1, recvDepth, 0, &got); t.selfResp == nil {
				return errors.New("cannot create the loopback queue pair")
			}
			if rc := C.ftv_qp_init(t.selfResp, C.int(t.dev.Port)); rc != 0 {
				return fmt.Errorf("loopback queue pair to INIT: %w", syscall.Errno(rc))
			}
			recvQP = t.selfResp
		}
		for s := range recvDepth {
			if rc := C.ftv_post_recv(recvQP, recvID(r, s), C.uint64_t(uintptr(unsafe.Add(p.rbase, s*slotBytes))), slotBytes, C.uint32_t(t.lkey)); rc != 0 {
				return fmt.Errorf("post receive buffers: %w", syscall.Errno(rc))
			}
		}
	}
	return nil
}

func recvID(r, slot int) C.uint64_t { return C.uint64_t(r)<<16 | C.uint64_t(slot) }

// Addr is this rank's connection information for the rendezvous: the
// address of its port and the number of its queue pair for each peer.
func (t *Transport) Addr() string {
	a := Address{GID: t.gid, LID: uint16(t.info.lid), PSN: t.psn, MTU: int(t.info.active_mtu),
		Table: uint64(uintptr(t.table)), TableKey: uint32(C.ftv_mr_rkey(t.tableMR)), QPN: make([]uint32, t.cfg.Size)}
	for r, p := range t.peers {
		a.QPN[r] = p.qpn
	}
	return a.String()
}

// Device is the device, port and GID this transport uses.
func (t *Transport) Device() Choice { return t.dev }

// Connect brings every queue pair to ready-to-send toward the peer whose
// address is addrs[r] (as its Addr returned, or only what this rank needs of
// it: see SplitAddress) and starts the progress goroutine. A peer whose
// queue pair is not ready yet when this rank first sends to it is retried by
// the device within the retry budget; the launcher's rendezvous ends only
// when every rank connected.
//
// addrs[Rank] may be empty: the loopback pair needs only this rank's own
// address. Ranks of Config.Absent, ranks already admitted, and ranks
// already down (PeerDown before Connect: a late rank's view of the ranks
// that failed before it started) are skipped, whatever their address. A
// late rank (Config.Late) posts nothing toward a peer until the peer's
// hello (see Admit), so Connect does not wait for the peers: operations
// toward one that has not said hello yet wait for it, messages are queued.
func (t *Transport) Connect(ctx context.Context, addrs []string) error {
	if len(addrs) != t.cfg.Size {
		return fmt.Errorf("verbs: connect: %d addresses for %d ranks: %w", len(addrs), t.cfg.Size, ftrma.ErrInvalid)
	}
	if t.closed.Load() {
		return &ftrma.OpError{Op: "connect", Rank: t.cfg.Rank, Err: ftrma.ErrClosed}
	}
	timeout, retry := ackTimeout(t.cfg.Bound)
	for r, s := range addrs {
		p := t.peers[r]
		p.mu.Lock()
		skip := !p.self && (p.dead || p.absent.Load() || p.admitted)
		p.mu.Unlock()
		if skip {
			continue
		}
		if p.self && s == "" {
			s = t.Addr() // the loopback pair needs only this rank's own
		}
		a, err := ParseAddress(s)
		if err != nil {
			return fmt.Errorf("verbs: rank %d's address: %w", r, err)
		}
		rqpn, err := a.qpnFor(t.cfg.Rank, t.cfg.Size)
		if err != nil {
			return fmt.Errorf("verbs: rank %d's address: %w", r, err)
		}
		mtu := min(int(t.info.active_mtu), a.MTU)
		if p.self {
			rqpn = uint32(C.ftv_qp_num(t.selfResp))
			if err := t.connectQP(t.selfResp, mtu, p.qpn, t.psn, a, timeout, retry); err != nil {
				return fmt.Errorf("verbs: loopback: %w", err)
			}
		}
		p.mu.Lock()
		if p.dead { // reported down meanwhile
			p.mu.Unlock()
			continue
		}
		t.tables[r] = remoteTable{a.Table, a.TableKey}
		err = t.connectQP(p.qp, mtu, rqpn, a.PSN, a, timeout, retry)
		p.held = t.cfg.Late && !p.self
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("verbs: queue pair to rank %d: %w", r, err)
		}
	}
	if err := t.startProgress(); err != nil {
		return err
	}
	t.connected.Store(true)
	return nil
}

// Admit makes the absent rank r (Config.Absent) a peer
// (transport.Admitter): it brings the queue pair for r to ready-to-send
// toward r's queue pair for this rank, keeps where r's key table is, and
// sends r a hello. addr is r's address as Addr returned it, or its common
// part and the part for this rank (SplitAddress). r is a late rank
// (Config.Late): it posts nothing toward this rank before the hello, so
// nothing it sends is dropped by a queue pair not ready yet. What this rank
// posts toward r before r's queue pair is ready is retried by the device
// within the retry budget (Config.Bound): r's Connect follows its address
// list at once, well within it.
//
// Admit fails with ftrma.ErrInvalid for self, a rank that is not absent (a
// peer already, or failed: a rank reported down or fenced while absent is
// never admitted), and an address that does not parse (r stays absent);
// with ftrma.ErrRankOutOfRange for a rank outside the job and with
// ftrma.ErrClosed after Close. A queue pair the device refuses to connect
// makes r failed. Admit does not block on the network.
func (t *Transport) Admit(r ftrma.Rank, addr string) error {
	if t.closed.Load() {
		return &ftrma.OpError{Op: "admit", Rank: r, Err: ftrma.ErrClosed}
	}
	if r < 0 || int(r) >= len(t.peers) {
		return &ftrma.OpError{Op: "admit", Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	p := t.peers[r]
	p.mu.Lock()
	switch {
	case p.self:
		p.mu.Unlock()
		return transport.ErrNotAdmittable(r, "it is this rank")
	case p.dead:
		p.mu.Unlock()
		return transport.ErrNotAdmittable(r, "it failed")
	case !p.absent.Load():
		p.mu.Unlock()
		return transport.ErrNotAdmittable(r, "it is a peer already")
	}
	a, err := ParseAddress(addr)
	var rqpn uint32
	if err == nil {
		rqpn, err = a.qpnFor(t.cfg.Rank, t.cfg.Size)
	}
	if err != nil {
		p.mu.Unlock()
		return &ftrma.OpError{Op: "admit", Rank: r, Err: err}
	}
	timeout, retry := ackTimeout(t.cfg.Bound)
	if err := t.connectQP(p.qp, min(int(t.info.active_mtu), a.MTU), rqpn, a.PSN, a, timeout, retry); err != nil {
		p.mu.Unlock()
		err = fmt.Errorf("verbs: queue pair to admitted rank %d: %w", r, err)
		t.down(p, err)
		return &ftrma.OpError{Op: "admit", Rank: r, Err: err}
	}
	t.tables[r] = remoteTable{a.Table, a.TableKey}
	p.admitted = true
	p.absent.Store(false)
	err = p.sendLocked(mHello, nil)
	p.mu.Unlock()
	if err == nil && t.connected.Load() && !t.closed.Load() {
		t.armSend()
	}
	return nil
}

func (t *Transport) connectQP(qp *C.struct_ibv_qp, mtu int, rqpn, rpsn uint32, a Address, timeout, retry int) error {
	global := C.int(0)
	if t.global {
		global = 1
	}
	if rc := C.ftv_qp_rtr(qp, C.int(t.dev.Port), C.int(mtu), C.uint32_t(rqpn), C.uint32_t(rpsn), global,
		(*C.uint8_t)(unsafe.Pointer(&a.GID[0])), C.int(t.dev.GIDIndex), C.int(a.LID), C.int(t.rdAtom)); rc != 0 {
		return fmt.Errorf("to RTR: %w", syscall.Errno(rc))
	}
	if rc := C.ftv_qp_rts(qp, C.uint32_t(t.psn), C.int(timeout), C.int(retry), 7, C.int(t.rdAtom)); rc != 0 {
		return fmt.Errorf("to RTS: %w", syscall.Errno(rc))
	}
	return nil
}

// Rank is this rank.
func (t *Transport) Rank() ftrma.Rank { return t.cfg.Rank }

// Size is the number of ranks.
func (t *Transport) Size() int { return t.cfg.Size }

// Caps reports one-sided, ordered operations with remote completion, and
// native and local atomics only when the device's atomics are atomic with the
// CPU's (IBV_ATOMIC_GLOB); otherwise the owner reaches its own words through
// the loopback queue pair like everyone else.
func (t *Transport) Caps() transport.Caps { return t.caps }

// Register registers mem with the device for local write and remote read,
// write and atomic access (accessFlags(regionUser)) and enters it in the
// key table peers read. mem must stay alive and unmoved until Deregister
// returns (the Go heap does not move objects).
func (t *Transport) Register(mem []byte) (transport.Key, error) {
	if t.closed.Load() {
		return 0, &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: ftrma.ErrClosed}
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if t.keyMode == keysCallers {
		return 0, &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: verbs: the caller chooses this transport's keys (RegisterKey was used)", ftrma.ErrInvalid)}
	}
	slot := -1
	for s := range t.nextTab {
		if t.gens[s] != 0 && t.gens[s] < 1<<(24-keySlotBit)-1 && t.slotKey[s] == 0 {
			slot = s
			break
		}
	}
	if slot < 0 {
		if t.nextTab == tableSlots {
			return 0, &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: verbs: all %d key table entries are in use", ftrma.ErrInvalid, tableSlots)}
		}
		slot = t.nextTab
		t.nextTab++
	}
	key := transport.Key(uint32(t.gens[slot]+1)<<keySlotBit | uint32(slot))
	if err := t.publish(key, slot, mem); err != nil {
		return 0, err
	}
	t.gens[slot]++
	t.keyMode = keysOwn
	return key, nil
}

// RegisterKey registers mem as Register does, under key, chosen by the
// caller: a transport that combines this one with others (transport/multi,
// with shared memory choosing the keys) registers a region with each under
// the one key its peers name it by. The key table entry is slot key mod
// 2^14, so the keys registered at once must differ in their low 14 bits,
// as keys that select a slot of a table of at most 2^14 entries with their
// low bits do (shared memory's, Config.Regions <= 16384); key must not be
// 0 or above transport.MaxKey, and the caller must not reuse a key while the
// transport is open. A transport uses either RegisterKey or Register: the
// first registration decides, and the other then fails with
// ftrma.ErrInvalid. After Close it fails with ftrma.ErrClosed.
func (t *Transport) RegisterKey(key transport.Key, mem []byte) error {
	if t.closed.Load() {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: ftrma.ErrClosed}
	}
	if key == 0 || key > transport.MaxKey {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: verbs: key %d out of range", ftrma.ErrInvalid, key)}
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if t.keyMode == keysOwn {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: verbs: this transport chooses its own keys (Register was used)", ftrma.ErrInvalid)}
	}
	slot := int(key) & (tableSlots - 1)
	if k := t.slotKey[slot]; k != 0 {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: verbs: key %d takes the key table entry of key %d, registered still", ftrma.ErrInvalid, key, k)}
	}
	if err := t.publish(key, slot, mem); err != nil {
		return err
	}
	t.keyMode = keysCallers
	return nil
}

// publish registers mem with the device and enters it in the key table at
// slot under key. The caller holds regMu.
func (t *Transport) publish(key transport.Key, slot int, mem []byte) error {
	reg := &localReg{key: key, mem: mem, slot: slot}
	var addr uint64
	var rkey uint32
	if len(mem) > 0 {
		p := unsafe.Pointer(unsafe.SliceData(mem))
		reg.mr = C.ftv_reg_mr(t.pd, p, C.size_t(len(mem)), C.int(accessFlags(regionUser)))
		if reg.mr == nil {
			return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: verbs: ibv_reg_mr of %d bytes failed", ftrma.ErrInvalid, len(mem))}
		}
		addr, rkey = uint64(uintptr(p)), uint32(C.ftv_mr_rkey(reg.mr))
	}
	e := (*[4]uint64)(unsafe.Add(t.table, slot*entryBytes))
	atomic.StoreUint64(&e[1], addr)
	atomic.StoreUint64(&e[2], uint64(len(mem)))
	atomic.StoreUint64(&e[3], uint64(rkey))
	atomic.StoreUint64(&e[0], uint64(key)) // last: the entry is valid
	t.regs[key] = reg
	t.slotKey[slot] = key
	return nil
}

// Deregister withdraws a region: it clears the key table entry, tells every
// live peer to stop using the key, waits until each acknowledged (its
// acknowledgement travels behind every operation it posted on the key, so
// they have all executed) or is down, and then deregisters the memory.
func (t *Transport) Deregister(key transport.Key) error {
	if t.closed.Load() {
		return &ftrma.OpError{Op: "deregister", Rank: t.cfg.Rank, Err: ftrma.ErrClosed}
	}
	t.regMu.Lock()
	reg, ok := t.regs[key]
	if ok {
		atomic.StoreUint64((*uint64)(unsafe.Add(t.table, reg.slot*entryBytes)), 0)
	}
	t.regMu.Unlock()
	if !ok {
		return &ftrma.OpError{Op: "deregister", Rank: t.cfg.Rank, Err: ftrma.ErrUnknownRegion}
	}
	rv := &revocation{waiting: map[ftrma.Rank]bool{}, done: make(chan struct{})}
	t.revMu.Lock()
	t.revokes[key] = rv
	var msg [4]byte
	binary.LittleEndian.PutUint32(msg[:], uint32(key))
	for _, p := range t.peers {
		// An absent rank never read the entry: it is cleared before it
		// can be admitted and read it.
		if p.self || !t.connected.Load() || p.absent.Load() {
			continue
		}
		if err := t.sendCtl(p, mRevoke, msg[:]); err == nil {
			rv.waiting[p.rank] = true
		}
	}
	if len(rv.waiting) == 0 {
		close(rv.done)
	}
	t.revMu.Unlock()
	// This rank's own cache: under the self peer's lock, so no operation of
	// this rank posts on the key after it.
	self := t.peers[t.cfg.Rank]
	self.mu.Lock()
	self.keys[key] = region{gone: true}
	self.mu.Unlock()
	if err := t.Flush(context.Background(), t.cfg.Rank); err != nil && !t.closed.Load() {
		_ = err // the loopback pair does not fail while the transport is open
	}
	<-rv.done
	t.revMu.Lock()
	delete(t.revokes, key)
	t.revMu.Unlock()

	t.regMu.Lock()
	delete(t.regs, key)
	t.slotKey[reg.slot] = 0
	t.regMu.Unlock()
	if reg.mr != nil {
		C.ftv_dereg_mr(reg.mr)
	}
	return nil
}

// revoked records peer's acknowledgement of key (or its loss).
func (t *Transport) revoked(r ftrma.Rank, key transport.Key, all bool) {
	t.revMu.Lock()
	defer t.revMu.Unlock()
	for k, rv := range t.revokes {
		if (all || k == key) && rv.waiting[r] {
			delete(rv.waiting, r)
			if len(rv.waiting) == 0 {
				close(rv.done)
			}
		}
	}
}

// peerOf checks r and returns its peer.
func (t *Transport) peerOf(op string, r ftrma.Rank) (*peer, error) {
	if t.closed.Load() {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrClosed}
	}
	if r < 0 || int(r) >= t.cfg.Size {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	if !t.connected.Load() {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: verbs: not connected yet", ftrma.ErrInvalid)}
	}
	if t.peers[r].absent.Load() {
		return nil, transport.ErrAbsent(op, r)
	}
	return t.peers[r], nil
}

// peerOrAbsent is peerOf, which also returns a rank that has not started:
// Fence makes it failed.
func (t *Transport) peerOrAbsent(op string, r ftrma.Rank) (*peer, error) {
	p, err := t.peerOf(op, r)
	if err != nil && errors.Is(err, ftrma.ErrRankOutOfRange) && r >= 0 && int(r) < len(t.peers) && t.connected.Load() && !t.closed.Load() {
		return t.peers[r], nil
	}
	return p, err
}

// Write copies src into staging memory and posts an RDMA WRITE of it
// (inline when small; pieces of 64 KiB when large). Region, bounds and
// alignment errors are reported by the next Wait or Flush.
func (t *Transport) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	return t.post(kWrite, peer, key, off, src, 0, 0, nil)
}

// Read posts an RDMA READ into staging memory; the data is copied into dst
// when it completes.
func (t *Transport) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	return t.post(kRead, peer, key, off, dst, 0, 0, nil)
}

// CompareAndSwap64 posts an ATOMIC_CMP_AND_SWP; the prior value is stored
// in *result when it completes.
func (t *Transport) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	if result == nil {
		return 0, &ftrma.OpError{Op: opNames[kCAS], Rank: peer, Err: fmt.Errorf("%w: nil result", ftrma.ErrInvalid)}
	}
	return t.post(kCAS, peer, key, off, nil, old, new, result)
}

// FetchAndAdd64 posts an ATOMIC_FETCH_AND_ADD; the prior value is stored in
// *result (if not nil) when it completes.
func (t *Transport) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	return t.post(kFAdd, peer, key, off, nil, delta, 0, result)
}

// post posts one operation toward r, in pieces if it is large.
func (t *Transport) post(kind uint8, r ftrma.Rank, key transport.Key, off uint64, buf []byte, a, b uint64, result *uint64) (transport.Seq, error) {
	if statsOn {
		t0 := time.Now()
		defer func() { t.stats.postNanos.Add(int64(time.Since(t0))) }()
	}
	p, err := t.peerOf(opNames[kind], r)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return 0, p.downErr()
	}
	reg, err := p.region(key)
	if err != nil {
		p.mu.Unlock()
		return 0, err
	}
	n := uint64(len(buf))
	if kind == kCAS || kind == kFAdd {
		n = 8
	}
	var opErr error
	switch {
	case reg.gone:
		opErr = ftrma.ErrUnknownRegion
	case off > reg.len || n > reg.len-off:
		opErr = ftrma.ErrOutOfBounds
	case n == 8 && (kind == kCAS || kind == kFAdd) && (reg.addr+off)%8 != 0:
		opErr = ftrma.ErrMisaligned
	}
	if opErr != nil || n == 0 {
		if opErr != nil {
			opErr = &ftrma.OpError{Op: opNames[kind], Rank: r, Err: opErr}
		}
		seq, err := p.local(opErr)
		p.mu.Unlock()
		return seq, err
	}
	seq, polled, err := p.postOp(kind, reg, off, buf, a, b, result)
	p.mu.Unlock()
	if polled >= 0 {
		// The completions the post call found (its own, on Soft-RoCE often)
		// are handled now that p.mu is free: completing takes it.
		t.takeSend(polled)
		t.pollMu.Unlock()
	}
	if statsOn {
		t.stats.ops.Add(1)
		if err == nil && p.comp.Completed() >= seq {
			t.stats.opsAtPost.Add(1)
		}
	}
	return seq, err
}

// local enters an operation that needs no work request (it failed before
// posting, or moves nothing), completing after those before it. The caller
// holds p.mu.
func (p *peer) local(err error) (transport.Seq, error) {
	for {
		switch {
		case p.dead:
			return 0, p.downErr()
		case p.n == 0:
			seq := p.comp.Next()
			p.comp.Complete(seq, err)
			return seq, nil
		case p.n < len(p.fifo) && len(p.backlog) == 0:
			// A placeholder takes a ring entry (not a device queue slot):
			// it completes right after the request before it.
			seq := p.comp.Next()
			p.push(entry{kind: kLocal, seq: seq, err: err})
			return seq, nil
		}
		// Numbered only once there is room: p.mu is released while waiting,
		// and the sequence must be the order in the ring.
		p.waitSpace()
	}
}

// postOp posts the work requests of one operation. The last post also polls
// the send CQ when pollMu is free (taken with TryLock: p.mu is held): polled
// is then the number of completions it left in t.swc, and the caller, which
// holds pollMu from then on, handles them after releasing p.mu; polled is -1
// when it did not poll. No request carries
// IBV_SEND_FENCE: a reliable-connected responder executes requests in the
// order they arrive, reads and atomics included, so operations take effect in
// posting order without it; and on Soft-RoCE (Linux 6.1) fenced requests
// mixed into heavy traffic stalled a queue pair's reads and atomics for good. The caller holds p.mu,
// which it may release while waiting for queue or staging space.
func (p *peer) postOp(kind uint8, reg region, off uint64, buf []byte, a, b uint64, result *uint64) (seq transport.Seq, polled int, err error) {
	t := p.t
	polled = -1
	// pollCQ is what the last post passes to poll the send CQ: nil, or the
	// CQ once pollMu is held. The completions are handled by the caller
	// after p.mu is released, when the entry is in the ring.
	var got C.int
	pollCQ := func() *C.struct_ibv_cq {
		if t.pollMu.TryLock() {
			if !t.cqGone {
				polled = 0
				return t.scq
			}
			t.pollMu.Unlock()
		}
		return nil
	}
	if kind == kCAS || kind == kFAdd {
		addr, end, err := p.reserve(8)
		if err != nil {
			return 0, -1, err
		}
		seq = p.comp.Next()
		op := C.int(C.IBV_WR_ATOMIC_CMP_AND_SWP)
		if kind == kFAdd {
			op = C.IBV_WR_ATOMIC_FETCH_AND_ADD
		}
		rc := C.ftv_post_atomic(p.qp, C.uint64_t(p.rank), op, C.uint64_t(uintptr(addr)), C.uint32_t(t.lkey),
			C.uint64_t(reg.addr+off), C.uint32_t(reg.rkey), C.uint64_t(a), C.uint64_t(b), 0, pollCQ(), t.swc, &got)
		if rc != 0 {
			return 0, polled, p.postFailed(rc)
		}
		p.push(entry{kind: kind, seq: seq, end: end, stage: addr, result: result})
		if polled >= 0 {
			polled = int(got)
		}
		return seq, polled, nil
	}
	for done := 0; done < len(buf); {
		piece := min(len(buf)-done, maxPiece)
		addr, end, err := p.reserve(piece)
		if err != nil {
			return 0, -1, err
		}
		last := done+piece == len(buf)
		if last {
			seq = p.comp.Next()
		}
		e := entry{kind: kind, end: end}
		if last {
			e.seq = seq
		}
		var cq *C.struct_ibv_cq
		if last {
			cq = pollCQ()
		}
		raddr := C.uint64_t(reg.addr + off + uint64(done))
		var rc C.int
		if kind == kWrite {
			copy(unsafe.Slice((*byte)(addr), piece), buf[done:done+piece])
			flags := C.int(0)
			if piece <= t.inline {
				flags |= C.IBV_SEND_INLINE
			}
			rc = C.ftv_post_rdma(p.qp, C.uint64_t(p.rank), C.IBV_WR_RDMA_WRITE, C.uint64_t(uintptr(addr)), C.uint32_t(piece),
				C.uint32_t(t.lkey), raddr, C.uint32_t(reg.rkey), flags, cq, t.swc, &got)
		} else {
			e.stage, e.dst = addr, buf[done:done+piece]
			rc = C.ftv_post_rdma(p.qp, C.uint64_t(p.rank), C.IBV_WR_RDMA_READ, C.uint64_t(uintptr(addr)), C.uint32_t(piece),
				C.uint32_t(t.lkey), raddr, C.uint32_t(reg.rkey), 0, cq, t.swc, &got)
		}
		if rc != 0 {
			return 0, polled, p.postFailed(rc)
		}
		p.push(e)
		done += piece
	}
	if polled >= 0 {
		polled = int(got)
	}
	return seq, polled, nil
}

// reserve waits for a send queue slot and n bytes of staging, behind any
// backlogged message fragments (they were posted first), and for a late
// rank until the peer said hello. The caller holds p.mu; it fails when the
// peer goes down meanwhile.
func (p *peer) reserve(n int) (unsafe.Pointer, uint64, error) {
	for {
		if p.dead {
			return nil, 0, p.downErr()
		}
		if !p.held && p.n < len(p.fifo) && len(p.backlog) == 0 {
			if addr, end, ok := p.ring.alloc(n); ok {
				return addr, end, nil
			}
		}
		p.waitSpace()
	}
}

// waitSpace releases p.mu until an entry completes (or a moment passed).
func (p *peer) waitSpace() {
	p.mu.Unlock()
	p.t.await(p.space, time.Millisecond)
	p.mu.Lock()
}

// postFailed handles a refused post: the queue pair is broken, so the peer
// is treated as lost. The caller holds p.mu.
func (p *peer) postFailed(rc C.int) error {
	err := fmt.Errorf("verbs: post to rank %d: %w", p.rank, syscall.Errno(rc))
	p.mu.Unlock()
	p.t.down(p, err)
	p.mu.Lock()
	return p.downErr()
}

func (p *peer) push(e entry) {
	p.fifo[(p.head+p.n)%len(p.fifo)] = e
	p.n++
	if e.kind != kLocal { // a placeholder is no work request
		p.t.inflight.Add(1)
	}
}

// downErr is the error of operations toward a peer that is down.
func (p *peer) downErr() error {
	if err := p.comp.Down(); err != nil {
		return err
	}
	if p.t.closed.Load() {
		return &ftrma.OpError{Op: "transport", Rank: p.rank, Err: ftrma.ErrClosed}
	}
	return transport.ErrPeerDown(p.rank, nil)
}

// region resolves key at this peer from the cache, or reads the peer's key
// table entry. The caller holds p.mu, which is released while reading.
func (p *peer) region(key transport.Key) (region, error) {
	for {
		if reg, ok := p.keys[key]; ok {
			return reg, nil
		}
		if p.dead {
			return region{}, p.downErr()
		}
		slot := int(key) & (tableSlots - 1)
		if key == 0 {
			return region{gone: true}, nil
		}
		f := p.fetching[key]
		if f == nil {
			addr, end, err := p.reserve(entryBytes)
			if err != nil {
				return region{}, err
			}
			if reg, ok := p.keys[key]; ok { // filled while reserve waited
				p.ring.head = end - uint64((entryBytes+7)&^7) // give the space back
				return reg, nil
			}
			f = &keyFetch{key: key, done: make(chan struct{})}
			var got C.int
			rc := C.ftv_post_rdma(p.qp, C.uint64_t(p.rank), C.IBV_WR_RDMA_READ, C.uint64_t(uintptr(addr)), entryBytes,
				C.uint32_t(p.t.lkey), C.uint64_t(p.tableAddr()+uint64(slot*entryBytes)), C.uint32_t(p.tableKey()), 0, nil, nil, &got)
			if rc != 0 {
				return region{}, p.postFailed(rc)
			}
			p.fetching[key] = f
			p.push(entry{kind: kFetch, end: end, stage: addr, fetch: f})
		}
		p.mu.Unlock()
		p.t.await(f.done, 0)
		p.mu.Lock()
	}
}

// The peer's key table, from its address (set by Connect).
func (p *peer) tableAddr() uint64 { return p.t.tables[p.rank].addr }
func (p *peer) tableKey() uint32  { return p.t.tables[p.rank].rkey }

// What the verbs transport implements, checked when it is compiled.
var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
	_ transport.Tester    = (*Transport)(nil)
)
