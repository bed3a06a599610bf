package multi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// A Sub is one of the transports a multi transport combines, and the name
// Route reports for the ranks it reaches ("shm", "tcp", "verbs").
type Sub struct {
	Name string
	T    transport.Transport
	// Reach says the transport reaches every rank of the job, not only
	// those routed to it (verbs: a queue pair per rank): Connect gives it
	// every address, and Fence and PeerDown cut it too. When its atomics
	// are not atomic with the CPU's (no transport.CapLocalAtomics: a
	// device with IBV_ATOMIC_HCA), it executes every atomic of this rank,
	// toward every rank, this one included (see the package doc, "Atomics
	// through one transport"). At most one sub has Reach.
	Reach bool
}

// KeyRegisterer is implemented by transports that can register memory under
// a key their caller chooses (transport/tcp does). A multi transport
// registers every region with each of its transports under the one key that
// every peer names it by: the one transport without RegisterKey (shared
// memory, whose key picks the slot of the key table peers read) chooses it,
// and the others take it. Callers must not reuse a key while the transport
// is open.
type KeyRegisterer interface {
	RegisterKey(key transport.Key, mem []byte) error
}

// peerDowner is the launcher's exit notice (shm and verbs have it).
type peerDowner interface {
	PeerDown(peer ftrma.Rank, err error)
}

// server is implemented by transports that know which ranks they connect
// (shm's Config.Ranks): New checks the route against it.
type server interface {
	Serves(r ftrma.Rank) bool
}

// Transport sends to every rank through the transport its route names. Its
// methods may be called from any goroutine.
type Transport struct {
	self ftrma.Rank
	size int
	subs []*sub
	// at[r] is the index in subs of the transport that reaches rank r
	// (self included), or Absent until Admit routes r. Set by New, and for
	// an absent rank once by Admit.
	at   []atomic.Int32
	caps transport.Caps
	adm  *Admission // how Admit routes; nil: it cannot
	amu  sync.Mutex // serializes Admit

	keyer *sub                // the transport that chooses keys; nil: this transport counts them
	alloc transport.Allocator // where registrable memory comes from; nil: the Go heap
	limit int                 // regions at once; 0 for no limit

	// reach is the sub with Sub.Reach, or nil; reachAt its index. When
	// split, every atomic goes through it, and atomPosted[r] is the last
	// of its sequences handed out for an atomic toward r while r is routed
	// to another sub.
	reach      *sub
	reachAt    int32
	split      bool
	atomPosted []atomic.Uint64
	kept       []atomic.Pointer[error] // failures Send took, for the next Wait (keepErr)

	recv  atomic.Pointer[receiverBox]
	peers []peerState // by rank

	mu      sync.Mutex // guards the fields below
	regs    map[transport.Key]struct{}
	lastKey transport.Key      // the last key counted, when keyer is nil
	heap    map[*byte]struct{} // memory Alloc took from the Go heap, by its first byte

	closed atomic.Bool
}

// sub is one combined transport.
type sub struct {
	name  string
	t     transport.Transport
	keyed KeyRegisterer // nil when it chooses its own keys
	ranks int           // ranks routed to it by New
	inUse bool          // ranks are routed to it, or may be by Admit; a sub not in use is idle
	recv  *subReceiver
}

// peerState is the per-rank state of peer-down reporting.
type peerState struct {
	reported atomic.Bool           // HandlePeerDown was passed on: never again
	cause    atomic.Pointer[error] // the launcher's exit notice, for a transport without PeerDown
	failed   atomic.Pointer[error] // an absent rank reported down (PeerDown, Fence): never admitted
}

type receiverBox struct{ r transport.Receiver }

var (
	_ transport.Admitter      = (*Transport)(nil)
	_ transport.Transport     = (*Transport)(nil)
	_ transport.Allocator     = (*Transport)(nil)
	_ transport.RegionLimiter = (*Transport)(nil)
)

// New combines subs into one transport: route[r] is the index in subs of
// the transport that reaches rank r, for every rank of the job, this rank
// included (route it through shared memory when there is one, else through
// any). Every sub must report the same Rank and Size, len(route) must be
// that Size, and a sub that knows which ranks it connects (shm's Serves)
// must connect every rank routed to it.
//
// It fails with ftrma.ErrInvalid when the subs cannot be combined:
//   - two of them in use (with a rank routed to them) choose their own keys
//     (neither has KeyRegisterer): a region could not have one key;
//   - two of them in use are transport.Allocators: memory cannot come from
//     both;
//   - two or more are in use and one lacks transport.CapLocalAtomics: the
//     atomics it executes on this rank's memory (an RDMA device's
//     IBV_ATOMIC_HCA) are not atomic with the CPU atomics the others execute
//     on the same words (shm peers' CPUs, tcp's target).
//
// New installs nothing and starts nothing: call SetReceiver, then Connect.
// The multi transport owns the subs from then on: Close closes them.
func New(subs []Sub, route []int) (*Transport, error) {
	return newTransport(subs, route, nil)
}

// Absent in a route marks a rank that has not started (a spare of a job
// started with spares): it is routed by Admit, by the host it starts on.
const Absent = -1

// Admission says how Admit routes a rank that starts later: to subs[Local]
// (shared memory) when it is on this rank's host, named Host, and to
// subs[Remote] (tcp) otherwise. The address Admit gets names the host (see
// AdmitAddr).
type Admission struct {
	Host          string
	Local, Remote int
}

// AdmitAddr is the address a rank on host publishes for admission by multi
// transports: the host's name and addr, its network transport's address
// (tcp's Addr), as "host/addr". A host name holds no "/".
func AdmitAddr(host, addr string) string { return host + "/" + addr }

// NewAdmitting is New for a job with spares: route may mark ranks Absent,
// and Admit routes them as adm says. Both adm.Local and adm.Remote count as
// in use from the start (memory is registered with them, Caps is their
// intersection), since an admitted rank may be routed to either; both must
// be transport.Admitters.
func NewAdmitting(subs []Sub, route []int, adm Admission) (*Transport, error) {
	if strings.Contains(adm.Host, "/") || adm.Host == "" {
		return nil, fmt.Errorf("multi transport: admission host %q is empty or holds a \"/\": %w", adm.Host, ftrma.ErrInvalid)
	}
	for _, i := range []int{adm.Local, adm.Remote} {
		if i < 0 || i >= len(subs) {
			return nil, fmt.Errorf("multi transport: admission routes to transport %d of %d: %w", i, len(subs), ftrma.ErrInvalid)
		}
		if _, ok := subs[i].T.(transport.Admitter); !ok {
			return nil, fmt.Errorf("multi transport: %s cannot admit ranks (no Admit): %w", subs[i].Name, ftrma.ErrInvalid)
		}
	}
	return newTransport(subs, route, &adm)
}

func newTransport(subs []Sub, route []int, adm *Admission) (*Transport, error) {
	bad := func(format string, args ...any) (*Transport, error) {
		return nil, fmt.Errorf("multi transport: "+format+": %w", append(args, ftrma.ErrInvalid)...)
	}
	if len(subs) == 0 {
		return bad("no transports")
	}
	for i, s := range subs {
		if s.T == nil || s.Name == "" {
			return bad("transport %d has no name or is nil", i)
		}
	}
	self, size := subs[0].T.Rank(), subs[0].T.Size()
	for _, s := range subs[1:] {
		if s.T.Rank() != self || s.T.Size() != size {
			return bad("%s is rank %d of %d, %s rank %d of %d", subs[0].Name, self, size, s.Name, s.T.Rank(), s.T.Size())
		}
	}
	if len(route) != size {
		return bad("route of %d ranks for a job of %d", len(route), size)
	}
	m := &Transport{
		self:  self,
		size:  size,
		at:    make([]atomic.Int32, size),
		adm:   adm,
		peers: make([]peerState, size),
		regs:  make(map[transport.Key]struct{}),
		heap:  make(map[*byte]struct{}),
		caps:  ^transport.Caps(0),
	}
	for i, s := range subs {
		ss := &sub{name: s.Name, t: s.T}
		if s.Reach {
			if m.reach != nil {
				return bad("%s and %s both reach every rank (Sub.Reach)", m.reach.name, s.Name)
			}
			if adm != nil {
				return bad("%s reaches every rank (Sub.Reach), which a transport that admits ranks later does not support", s.Name)
			}
			m.reach, m.reachAt, ss.inUse = ss, int32(i), true
		}
		ss.keyed, _ = s.T.(KeyRegisterer)
		ss.recv = &subReceiver{m: m, at: i}
		m.subs = append(m.subs, ss)
	}
	for r, i := range route {
		if i == Absent && adm != nil && ftrma.Rank(r) != self {
			m.at[r].Store(Absent)
			continue
		}
		if i < 0 || i >= len(subs) {
			return bad("rank %d routed to transport %d of %d", r, i, len(subs))
		}
		s := m.subs[i]
		if sv, ok := s.t.(server); ok && !sv.Serves(ftrma.Rank(r)) {
			return bad("rank %d routed to %s, which does not connect it", r, s.name)
		}
		m.at[r].Store(int32(i))
		s.ranks++
		s.inUse = true
	}
	if adm != nil {
		m.subs[adm.Local].inUse = true
		m.subs[adm.Remote].inUse = true
	}
	var used []*sub
	for _, s := range m.subs {
		if s.inUse {
			used = append(used, s)
			m.caps &= s.t.Caps()
		}
	}
	for _, s := range used {
		if s.keyed == nil {
			if m.keyer != nil {
				return bad("%s and %s both choose their own region keys", m.keyer.name, s.name)
			}
			m.keyer = s
		}
		if a, ok := s.t.(transport.Allocator); ok {
			if m.alloc != nil {
				return bad("two transports allocate registrable memory (%s among them)", s.name)
			}
			m.alloc = a
		}
		if l, ok := s.t.(transport.RegionLimiter); ok && l.RegionLimit() > 0 && (m.limit == 0 || l.RegionLimit() < m.limit) {
			m.limit = l.RegionLimit()
		}
		if len(used) > 1 && !s.t.Caps().Has(transport.CapLocalAtomics) && s != m.reach {
			return bad("%s's atomics are not atomic with the CPU's (no CapLocalAtomics), so they cannot share words with the atomics of %d other transports", s.name, len(used)-1)
		}
	}
	if m.reach != nil && len(used) > 1 && !m.reach.t.Caps().Has(transport.CapLocalAtomics) {
		// Every atomic through one transport, data by the route: an
		// atomic and a write toward one peer take different paths.
		m.split = true
		m.caps &^= transport.CapOrdered
		m.atomPosted = make([]atomic.Uint64, size)
		m.kept = make([]atomic.Pointer[error], size)
	}
	return m, nil
}

// Rank is this process's rank.
func (m *Transport) Rank() ftrma.Rank { return m.self }

// Size is the number of ranks.
func (m *Transport) Size() int { return m.size }

// Caps is the intersection of the capabilities of the transports in use:
// every flag holds toward every peer. See the package doc for why the
// intersection is exact for the flags that concern more than one peer
// (CapLocalAtomics, CapWholeWords).
func (m *Transport) Caps() transport.Caps { return m.caps }

// Route names the transport that reaches rank r ("shm", "tcp"), or "" for a
// rank out of range or absent.
func (m *Transport) Route(r ftrma.Rank) string {
	if r < 0 || int(r) >= m.size {
		return ""
	}
	i := m.at[r].Load()
	if i < 0 {
		return ""
	}
	return m.subs[i].name
}

// Addr is the address of the first transport that has one (tcp's, which
// peers on other hosts dial), or "".
func (m *Transport) Addr() string {
	for _, s := range m.subs {
		if a, ok := s.t.(interface{ Addr() string }); ok {
			return a.Addr()
		}
	}
	return ""
}

// Connect connects every transport to the ranks routed to it, all at once,
// and returns when every one is connected, or with the first error (the
// others are then cancelled). addrs holds every rank's address from the
// rendezvous (tcp's Addr). A transport with Connect(ctx, addrs) gets addrs
// with "" for every rank not routed to it (this rank's own entry kept): tcp
// then connects only its own peers and refuses the others. The sub that
// reaches every rank (Sub.Reach) gets them all. A transport
// with Connect(ctx) (shm) is connected to the ranks it was opened for, which
// New checked against the route. addrs may be nil when no transport needs
// addresses.
func (m *Transport) Connect(ctx context.Context, addrs []string) error {
	if addrs != nil && len(addrs) != m.size {
		return fmt.Errorf("multi transport: connect: %d addresses for %d ranks: %w", len(addrs), m.size, ftrma.ErrInvalid)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, len(m.subs))
	var wg sync.WaitGroup
	for i, s := range m.subs {
		var connect func() error
		switch c := s.t.(type) {
		case interface {
			Connect(context.Context, []string) error
		}:
			if addrs == nil {
				errs[i] = fmt.Errorf("multi transport: %s needs the peers' addresses: %w", s.name, ftrma.ErrInvalid)
				continue
			}
			mine := make([]string, m.size)
			for r := range mine {
				if int(m.at[r].Load()) == i || ftrma.Rank(r) == m.self || s == m.reach {
					mine[r] = addrs[r]
				}
			}
			connect = func() error { return c.Connect(ctx, mine) }
		case interface{ Connect(context.Context) error }:
			connect = func() error { return c.Connect(ctx) }
		default:
			continue // connected already (memnet)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := connect(); err != nil {
				errs[i] = fmt.Errorf("multi transport: %s: %w", s.name, err)
				cancel(errs[i])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// to returns the transport that reaches r.
func (m *Transport) to(op string, r ftrma.Rank) (transport.Transport, error) {
	i, err := m.route(op, r)
	if err != nil {
		return nil, err
	}
	return m.subs[i].t, nil
}

// route returns the index in subs of the transport that reaches r.
func (m *Transport) route(op string, r ftrma.Rank) (int32, error) {
	if uint(r) >= uint(m.size) {
		return 0, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	i := m.at[r].Load()
	if i < 0 {
		if e := m.peers[r].failed.Load(); e != nil {
			return 0, *e
		}
		return 0, transport.ErrAbsent(op, r)
	}
	return i, nil
}

// also is the sub that reaches every rank (Sub.Reach) when rank r, routed
// to subs[i], is reached by it too; else nil.
func (m *Transport) also(i int32) *sub {
	if m.reach == nil || i == m.reachAt {
		return nil
	}
	return m.reach
}

// Admit routes the absent rank peer (Absent in the route) by the host its
// address names, addr being AdmitAddr(host, network address): to the
// admission's Local transport when host is this rank's, else to its Remote
// one, and admits it there with the network address (or "" for a
// transport without an Addr, such as shm, which needs none). It fails with
// ftrma.ErrInvalid when the transport was not made by NewAdmitting, for
// self, a rank not absent (routed already, or failed), or an address
// without a host, or with the routed transport's error (the rank stays
// absent then); with ftrma.ErrRankOutOfRange for a rank outside the job and
// ftrma.ErrClosed after Close.
func (m *Transport) Admit(peer ftrma.Rank, addr string) error {
	if m.closed.Load() {
		return &ftrma.OpError{Op: "admit", Rank: peer, Err: ftrma.ErrClosed}
	}
	if peer < 0 || int(peer) >= m.size {
		return &ftrma.OpError{Op: "admit", Rank: peer, Err: ftrma.ErrRankOutOfRange}
	}
	if peer == m.self {
		return transport.ErrNotAdmittable(peer, "it is this rank")
	}
	if m.adm == nil {
		return transport.ErrNotAdmittable(peer, "this multi transport routes no ranks later (made by New, not NewAdmitting)")
	}
	host, netAddr, ok := strings.Cut(addr, "/")
	if !ok || host == "" {
		return &ftrma.OpError{Op: "admit", Rank: peer, Err: fmt.Errorf("%w: multi transport: address %q names no host (want AdmitAddr(host, addr))", ftrma.ErrInvalid, addr)}
	}
	i := m.adm.Remote
	if host == m.adm.Host {
		i = m.adm.Local
	}
	s := m.subs[i]
	if _, ok := s.t.(interface{ Addr() string }); !ok {
		netAddr = ""
	}
	m.amu.Lock()
	defer m.amu.Unlock()
	switch {
	case m.peers[peer].failed.Load() != nil:
		return transport.ErrNotAdmittable(peer, "it failed")
	case m.at[peer].Load() >= 0:
		return transport.ErrNotAdmittable(peer, "it is a peer already")
	}
	// Routed first: what the transport delivers from peer once it is
	// admitted there is passed on (subReceiver.mine).
	m.at[peer].Store(int32(i))
	if err := s.t.(transport.Admitter).Admit(peer, netAddr); err != nil {
		m.at[peer].Store(Absent)
		return fmt.Errorf("multi transport: %s: %w", s.name, err)
	}
	return nil
}

// failAbsent makes the absent rank peer failed for good, with the error
// of operations toward it, and reports it down to the receiver once. It
// reports whether peer was absent.
func (m *Transport) failAbsent(peer ftrma.Rank, cause error) bool {
	m.amu.Lock()
	if m.at[peer].Load() >= 0 {
		m.amu.Unlock()
		return false
	}
	err := transport.ErrPeerDown(peer, cause)
	first := m.peers[peer].failed.CompareAndSwap(nil, &err)
	m.amu.Unlock()
	if first {
		// Without a receiver yet, SetReceiver reports it.
		if r := m.receiver(); r != nil && !m.peers[peer].reported.Swap(true) {
			r.HandlePeerDown(peer, err)
		}
	}
	return true
}

// Write posts a write through the transport that reaches peer, with its
// contract (see transport.Transport); so do the other operations, Wait,
// Flush, Push and Send. A peer out of range fails with
// ftrma.ErrRankOutOfRange.
func (m *Transport) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	t, err := m.to("write", peer)
	if err != nil {
		return 0, err
	}
	return t.Write(peer, key, off, src)
}

// Read posts a read through the transport that reaches peer.
func (m *Transport) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	t, err := m.to("read", peer)
	if err != nil {
		return 0, err
	}
	return t.Read(peer, key, off, dst)
}

// CompareAndSwap64 posts a compare-and-swap through the transport that
// reaches peer, or when atomics are split, through the one that executes
// every atomic.
func (m *Transport) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	if m.split {
		return m.atomic("compare-and-swap", peer, func(t transport.Transport) (transport.Seq, error) {
			return t.CompareAndSwap64(peer, key, off, old, new, result)
		})
	}
	t, err := m.to("compare-and-swap", peer)
	if err != nil {
		return 0, err
	}
	return t.CompareAndSwap64(peer, key, off, old, new, result)
}

// FetchAndAdd64 posts a fetch-and-add as CompareAndSwap64 does.
func (m *Transport) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	if m.split {
		return m.atomic("fetch-and-add", peer, func(t transport.Transport) (transport.Seq, error) {
			return t.FetchAndAdd64(peer, key, off, delta, result)
		})
	}
	t, err := m.to("fetch-and-add", peer)
	if err != nil {
		return 0, err
	}
	return t.FetchAndAdd64(peer, key, off, delta, result)
}

// atomicSeq marks the sequences of atomics posted through the sub that
// reaches every rank toward a rank routed to another: the rest is that
// sub's sequence. The routed sub's sequences never reach it.
const atomicSeq transport.Seq = 1 << 63

// atomic posts an atomic toward peer through the sub that reaches every
// rank, when atomics are split. Toward a rank routed to another sub it
// records the sequence for Wait and marks it (atomicSeq).
func (m *Transport) atomic(op string, peer ftrma.Rank, post func(transport.Transport) (transport.Seq, error)) (transport.Seq, error) {
	i, err := m.route(op, peer)
	if err != nil {
		return 0, err
	}
	seq, err := post(m.reach.t)
	if err != nil || i == m.reachAt {
		return seq, err
	}
	p := &m.atomPosted[peer]
	for {
		a := p.Load()
		if a >= uint64(seq) || p.CompareAndSwap(a, uint64(seq)) {
			break
		}
	}
	return seq | atomicSeq, nil
}

// Wait waits for seq toward peer on the transport that reaches it: the
// sequence numbers toward a peer are that transport's. When atomics are
// split and peer is routed to another sub than the one executing them,
// the wait covers both paths: for an atomic, its own sequence there and a
// flush of the routed sub (whose operations, shared memory's, are
// complete when posted, but may hold failures to report); for any other
// operation, the last atomic posted toward peer and then seq.
func (m *Transport) Wait(ctx context.Context, peer ftrma.Rank, seq transport.Seq) error {
	i, err := m.route("wait", peer)
	if err != nil {
		return err
	}
	t := m.subs[i].t
	if !m.split || i == m.reachAt {
		return t.Wait(ctx, peer, seq)
	}
	kept := m.takeKept(peer)
	if seq&atomicSeq != 0 {
		return joinErrs(kept, joinErrs(m.reach.t.Wait(ctx, peer, seq&^atomicSeq), t.Flush(ctx, peer)))
	}
	var errA error
	if a := m.atomPosted[peer].Load(); a != 0 {
		errA = m.reach.t.Wait(ctx, peer, transport.Seq(a))
	}
	return joinErrs(kept, joinErrs(errA, t.Wait(ctx, peer, seq)))
}

// joinErrs joins the errors of the two paths toward one peer; when both
// say the peer is down, the first says it.
func joinErrs(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil, errors.Is(a, ftrma.ErrProcFailed) && errors.Is(b, ftrma.ErrProcFailed):
		return a
	}
	return errors.Join(a, b)
}

// Test tests seq on the transport that reaches peer (transport.Tester);
// one without Test is asked by Wait with a context that has ended. With
// atomics split it covers both paths as Wait does, without blocking.
func (m *Transport) Test(peer ftrma.Rank, seq transport.Seq) (bool, error) {
	i, err := m.route("test", peer)
	if err != nil {
		return true, err
	}
	t := m.subs[i].t
	if !m.split || i == m.reachAt {
		return test(t, peer, seq)
	}
	if kept := m.takeKept(peer); kept != nil {
		return true, kept
	}
	if seq&atomicSeq != 0 {
		return test(m.reach.t, peer, seq&^atomicSeq)
	}
	if a := m.atomPosted[peer].Load(); a != 0 {
		if done, err := test(m.reach.t, peer, transport.Seq(a)); !done || err != nil {
			return done, err
		}
	}
	return test(t, peer, seq)
}

// test is Test on one transport.
func test(t transport.Transport, peer ftrma.Rank, seq transport.Seq) (bool, error) {
	if tt, ok := t.(transport.Tester); ok {
		return tt.Test(peer, seq)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := t.Wait(ctx, peer, seq)
	if errors.Is(err, context.Canceled) {
		return false, nil
	}
	return true, err
}

// Flush flushes peer on the transport that reaches it, and with atomics
// split on the one that executes them too.
func (m *Transport) Flush(ctx context.Context, peer ftrma.Rank) error {
	i, err := m.route("flush", peer)
	if err != nil {
		return err
	}
	if a := m.also(i); a != nil && m.split {
		return joinErrs(m.takeKept(peer), joinErrs(a.t.Flush(ctx, peer), m.subs[i].t.Flush(ctx, peer)))
	}
	return m.subs[i].t.Flush(ctx, peer)
}

// Push pushes peer's operations on the transport that reaches it, and
// with atomics split on the one that executes them too.
func (m *Transport) Push(peer ftrma.Rank) {
	i, err := m.route("push", peer)
	if err != nil {
		return
	}
	if a := m.also(i); a != nil && m.split {
		a.t.Push(peer)
	}
	m.subs[i].t.Push(peer)
}

// Send sends a control message through the transport that reaches peer.
//
// With atomics split, a message toward a peer routed to another sub than
// the one executing them waits first for the last atomic posted toward it:
// messages arrive after the operations posted before them, whichever path
// those took. A failure of that atomic is kept for the next Wait, Test or
// Flush toward the peer, which report it; the peer's loss fails Send.
func (m *Transport) Send(peer ftrma.Rank, msg []byte) error {
	i, err := m.route("send", peer)
	if err != nil {
		return err
	}
	if m.split && i != m.reachAt {
		if a := m.atomPosted[peer].Load(); a != 0 {
			if err := m.reach.t.Wait(context.Background(), peer, transport.Seq(a)); err != nil {
				if errors.Is(err, ftrma.ErrProcFailed) {
					return err
				}
				m.keepErr(peer, err)
			}
		}
	}
	return m.subs[i].t.Send(peer, msg)
}

// keepErr keeps err, an operation's failure that Send took while waiting,
// for the next Wait, Test or Flush toward peer.
func (m *Transport) keepErr(peer ftrma.Rank, err error) {
	p := &m.kept[peer]
	for {
		old := p.Load()
		e := err
		if old != nil {
			e = errors.Join(*old, err)
		}
		if p.CompareAndSwap(old, &e) {
			return
		}
	}
}

// takeKept returns and forgets the failures keepErr kept for peer.
func (m *Transport) takeKept(peer ftrma.Rank) error {
	if e := m.kept[peer].Swap(nil); e != nil {
		return *e
	}
	return nil
}

// Fence fences peer on the transport that reaches it, and on the one that
// reaches every rank (Sub.Reach) if there is one. Those are the only ways
// peer reaches this rank: the others refuse it (tcp refuses connections
// from ranks that are not its peers; shared memory does not span hosts).
func (m *Transport) Fence(peer ftrma.Rank) error {
	if peer >= 0 && int(peer) < m.size && !m.closed.Load() && m.failAbsent(peer, errFencedAbsent) {
		return nil
	}
	i, err := m.route("fence", peer)
	if err != nil {
		return err
	}
	if a := m.also(i); a != nil {
		return joinErrs(a.t.Fence(peer), m.subs[i].t.Fence(peer))
	}
	return m.subs[i].t.Fence(peer)
}

// PeerDown passes the launcher's notice that peer's process exited to the
// transport that reaches it. A transport without PeerDown of its own (tcp)
// fences the peer instead, and the peer-down event it reports carries err
// as its cause. The receiver hears of peer once, whichever of the notice
// and the transport's own discovery comes first. It does nothing toward
// self, after Close or for a rank out of range.
func (m *Transport) PeerDown(peer ftrma.Rank, err error) {
	if peer < 0 || int(peer) >= m.size || peer == m.self || m.closed.Load() {
		return
	}
	cause := err
	if cause == nil {
		cause = ftrma.ErrProcFailed
	}
	if m.failAbsent(peer, cause) {
		return
	}
	i := m.at[peer].Load()
	if a := m.also(i); a != nil {
		m.peerDown(a.t, peer, err, cause)
	}
	m.peerDown(m.subs[i].t, peer, err, cause)
}

// peerDown passes the launcher's notice about peer to t, or fences peer
// there when t has no PeerDown.
func (m *Transport) peerDown(t transport.Transport, peer ftrma.Rank, err, cause error) {
	if pd, ok := t.(peerDowner); ok {
		pd.PeerDown(peer, err)
		return
	}
	m.peers[peer].cause.CompareAndSwap(nil, &cause)
	t.Fence(peer)
}

// Close closes every transport, at once (tcp lingers up to a second for
// its peers' goodbyes), and returns their errors.
func (m *Transport) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	errs := make([]error, len(m.subs))
	var wg sync.WaitGroup
	for i, s := range m.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.t.Close(); err != nil {
				errs[i] = fmt.Errorf("multi transport: close %s: %w", s.name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

var errFencedAbsent = errors.New("fenced before it was admitted")

// AskRoute builds the route New takes by asking the transports, in
// priority order, which reaches each rank of a job of size ranks: a rank
// goes to the first that reaches it (a transport.Reacher that says so, or
// a transport that is no Reacher: it reaches every rank), a rank of absent
// (not started: a spare) is Absent. A rank that none reaches fails with
// ftrma.ErrInvalid.
func AskRoute(size int, absent []ftrma.Rank, subs ...transport.Transport) ([]int, error) {
	route := make([]int, size)
	for r := range route {
		route[r] = Absent
		if slices.Contains(absent, ftrma.Rank(r)) {
			continue
		}
		for i, t := range subs {
			if rt, ok := t.(transport.Reacher); !ok || rt.Reaches(ftrma.Rank(r)) {
				route[r] = i
				break
			}
		}
		if route[r] == Absent {
			return nil, fmt.Errorf("multi transport: none of the %d transports reaches rank %d: %w", len(subs), r, ftrma.ErrInvalid)
		}
	}
	return route, nil
}

// What the multi transport implements, checked when it is compiled.
var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Allocator = (*Transport)(nil)
	_ transport.Sharer    = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
)
