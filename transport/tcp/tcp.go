package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/transport"
)

// Config configures a TCP transport. The zero value of each field means its
// default.
type Config struct {
	// Rank is this process's rank and Size the number of ranks.
	Rank ftrma.Rank
	Size int
	// Secret is the job secret every connection must prove. Required
	// unless HostKey is given.
	Secret []byte
	// HostKey is the secret of this rank's host, when the launcher gives
	// each host's ranks their own (hostkey.go): connections then prove the
	// key of the two ranks' hosts instead of Secret, Addr carries the
	// host's public key, and every peer's address must carry its own.
	HostKey []byte
	// ListenAddr is the address to listen on; default "127.0.0.1:0".
	ListenAddr string
	// Spin is how long a waiter busy-polls its connection before parking, and
	// how long a target keeps polling after serving a request. Default 50µs;
	// negative disables busy-polling.
	Spin time.Duration
	// Logger logs refused connections and broken peers (warnings), with
	// the field rank; nil means ftrma.Logger().
	Logger *slog.Logger
	// Absent lists the ranks that have not started (the spares of a job
	// started with spares, not yet admitted): they are not peers until
	// Admit (transport.Admitter), operations toward them fail with
	// transport.ErrAbsent, and their connections are refused, as "not yet",
	// until then. Connect neither dials nor waits for them, whatever their
	// address.
	Absent []ftrma.Rank
	// Late is set for a rank that starts after the job did (a spare being
	// admitted): its Connect dials every rank it is given an address for,
	// lower ranks included, and retries while they have not admitted it
	// yet or hang up during the handshake (a rank ending), until PeerDown
	// or the end of its context. The ranks it does not dial are failed (PeerDown before Connect),
	// absent, or not served.
	Late bool
	// Seal says which connections carry their frames sealed (seal.go):
	// by default (SealRemote) every one but those between two loopback
	// addresses.
	Seal SealMode
}

// SealMode says which of a transport's connections are sealed: their
// frames encrypted and authenticated, record by record.
type SealMode int

const (
	// SealRemote seals every connection but those between two loopback
	// addresses (the kernel keeps those to the host).
	SealRemote SealMode = iota
	// SealAll seals every connection.
	SealAll
	// SealNone seals none: frames cross the network in clear, with only
	// the handshake's proof of the job secret (ftrun --data-plain).
	SealNone
)

// sealFor reports whether this transport seals a connection whose other
// end is remote. A dialer seals as it decides; an acceptor refuses a
// plain connection it would have sealed.
func (t *Transport) sealFor(remote net.Addr) bool {
	switch t.cfg.Seal {
	case SealAll:
		return true
	case SealNone:
		return false
	}
	a, ok := remote.(*net.TCPAddr)
	return !ok || !a.IP.IsLoopback()
}

const defaultSpin = 50 * time.Microsecond

// Transport is a TCP transport.Transport.
type Transport struct {
	cfg      Config
	id       *hostIdentity // with Config.HostKey, else nil
	log      *slog.Logger  // cfg.Logger with this rank
	spin     time.Duration
	spinning atomic.Bool // a waiter is busy-polling
	mem      transport.Memory
	ln       net.Listener

	// Keys named by the caller (RegisterKey): keyed is set by the first
	// RegisterKey, after which Register is refused (and RegisterKey is
	// refused once Register was used: owned). keys maps a caller's key to
	// the key of t.mem, whose keys are never reused, so a translation
	// loaded just before Deregister deleted it names no region.
	kmu       sync.Mutex // serializes RegisterKey, Register and Deregister in keyed mode; guards owned
	keyed     atomic.Bool
	owned     bool
	keys      sync.Map    // transport.Key -> transport.Key
	connected atomic.Bool // Connect was called

	peers []*peer // indexed by rank; peers[cfg.Rank] is the loopback peer

	// Connections not authenticated yet: at most Size+64 handshakes at
	// once, the oldest cut off by a new one (a rank's own handshake takes
	// a round trip), and one log line per source a second.
	gate     *seclink.Gate
	refusals *seclink.Refusals

	recv    atomic.Pointer[receiverBox]
	closed  atomic.Bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
	closeMu sync.Mutex // serializes Close
}

type receiverBox struct{ r transport.Receiver }

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
)

// Listen creates the transport and starts accepting authenticated connections.
func Listen(cfg Config) (*Transport, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || int(cfg.Rank) >= cfg.Size {
		return nil, fmt.Errorf("tcp: rank %d of size %d: %w", cfg.Rank, cfg.Size, ftrma.ErrRankOutOfRange)
	}
	if len(cfg.Secret) == 0 && len(cfg.HostKey) == 0 {
		return nil, fmt.Errorf("tcp: empty job secret: %w", ftrma.ErrInvalid)
	}
	var id *hostIdentity
	if len(cfg.HostKey) > 0 {
		var err error
		if id, err = newHostIdentity(cfg.HostKey); err != nil {
			return nil, fmt.Errorf("tcp: host key: %w", err)
		}
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = ftrma.Logger()
	}
	spin := cfg.Spin
	if spin == 0 {
		spin = defaultSpin
	} else if spin < 0 {
		spin = 0
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen: %w", err)
	}
	t := &Transport{cfg: cfg, id: id, spin: spin, ln: ln, done: make(chan struct{}), gate: seclink.NewGate(cfg.Size + 64), refusals: seclink.NewRefusals(time.Second), log: cfg.Logger.With(ftrma.LogRank, cfg.Rank)}
	t.peers = make([]*peer, cfg.Size)
	for r := range t.peers {
		t.peers[r] = newPeer(t, ftrma.Rank(r))
	}
	for _, r := range cfg.Absent {
		if r < 0 || int(r) >= cfg.Size || r == cfg.Rank {
			ln.Close()
			return nil, fmt.Errorf("tcp: absent rank %d (this is rank %d of %d): %w", r, cfg.Rank, cfg.Size, ftrma.ErrInvalid)
		}
		t.peers[r].absent.Store(true)
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Addr returns the address peers connect to; with Config.HostKey, the
// host's public key follows it ("IP:PORT#KEY", hostkey.go).
func (t *Transport) Addr() string {
	if t.id != nil {
		return withHostKey(t.ln.Addr().String(), t.id.pub)
	}
	return t.ln.Addr().String()
}

// Rank returns this process's rank.
func (t *Transport) Rank() ftrma.Rank { return t.cfg.Rank }

// Size returns the number of ranks.
func (t *Transport) Size() int { return t.cfg.Size }

// Caps reports an ordered, remotely complete, emulated transport.
func (t *Transport) Caps() transport.Caps {
	return transport.CapOrdered | transport.CapRemoteCompletion | transport.CapLocalAtomics | transport.CapWholeWords
}

// Connect dials every rank above this one and waits until every peer is
// connected (the ranks below dial this one). addrs[i] is rank i's Addr.
//
// An empty addrs[i] means rank i is not this transport's peer (another
// transport reaches it, as when shared memory serves the ranks of this
// host): it is not dialed, a connection from it is refused, and
// operations, Send, Fence and Flush toward it fail with ftrma.ErrInvalid;
// no peer-down event is ever reported for it. Every rank must leave out
// the same pairs (i leaves out j exactly when j leaves out i). This rank
// itself is always served, through the loopback path, whatever
// addrs[Rank] holds. Connect is called once.
//
// Ranks of Config.Absent, and ranks already down (PeerDown before
// Connect: a late rank's view of the ranks that failed before it
// started), are neither dialed nor waited for, whatever their address. A
// late rank (Config.Late) dials every other rank with an address, and
// retries one that refuses it as not admitted yet until ctx ends; a rank
// reported down meanwhile is given up without an error.
func (t *Transport) Connect(ctx context.Context, addrs []string) error {
	if len(addrs) != t.cfg.Size {
		return fmt.Errorf("tcp: connect: %d addresses for %d ranks: %w", len(addrs), t.cfg.Size, ftrma.ErrInvalid)
	}
	if t.connected.Swap(true) {
		return fmt.Errorf("tcp: connect called twice: %w", ftrma.ErrInvalid)
	}
	for r, a := range addrs {
		if a != "" && ftrma.Rank(r) != t.cfg.Rank {
			if err := t.peers[r].learnAddr(a); err != nil {
				return err
			}
		}
	}
	// skip: not a rank to connect now.
	skip := func(p *peer) bool { return p.self || p.absent.Load() || p.admitted.Load() || p.downed.Load() }
	for _, p := range t.peers {
		if skip(p) || addrs[p.rank] != "" {
			continue
		}
		p.unserved.Store(true)
		// A rank that dialed before this rank knew it was not a peer (the
		// ranks disagree on who serves whom) is cut off without an event.
		p.smu.Lock()
		early := p.conn != nil
		p.smu.Unlock()
		if early {
			t.log.Warn(fmt.Sprintf("tcp: rank %d connected, but it is not a peer of this transport (no address for it); cutting it off", p.rank), ftrma.LogPeer, p.rank)
			p.down(errNotServed, true)
		}
	}
	errc := make(chan error, t.cfg.Size)
	dials := 0
	for _, p := range t.peers {
		if skip(p) || p.unserved.Load() || (p.rank < t.cfg.Rank && !t.cfg.Late) {
			continue
		}
		dials++
		go func(r ftrma.Rank) { errc <- t.dial(ctx, r, addrs[r]) }(p.rank)
	}
	for range dials {
		if err := <-errc; err != nil {
			return err
		}
	}
	for _, p := range t.peers {
		if skip(p) || p.unserved.Load() {
			continue
		}
		select {
		case <-p.ready:
		case <-p.dead:
		case <-ctx.Done():
			return fmt.Errorf("tcp: waiting for rank %d to connect: %w", p.rank, ctx.Err())
		case <-t.done:
			return ftrma.ErrClosed
		}
	}
	return nil
}

func (t *Transport) dial(ctx context.Context, r ftrma.Rank, addr string) error {
	var d net.Dialer
	p := t.peers[r]
	pause := 10 * time.Millisecond
	for {
		if p.downed.Load() {
			return nil // reported down meanwhile: nothing to connect
		}
		conn, err := dialTCP(ctx, &d, p.netAddr(addr))
		if err == nil {
			var k keys
			secret, pub := t.cfg.Secret, []byte(nil)
			if t.id != nil {
				pub = t.id.pub
				secret, err = t.id.pairKey(p.hostKey())
			}
			if err == nil {
				k, err = dialHandshake(conn, secret, pub, uint32(t.cfg.Rank), uint32(r), t.sealFor(conn.RemoteAddr()))
			}
			if err == nil {
				return p.attach(conn.(*net.TCPConn), k)
			}
			conn.Close()
			if !errors.Is(err, errNotAdmitted) && !(t.cfg.Late && errors.Is(err, errHungUp)) {
				return fmt.Errorf("tcp: connect to rank %d at %s: %w", r, addr, err)
			}
			// The rank has not admitted this one yet, or (a late
			// rank) it hung up, perhaps ending: try again.
		} else if !(errors.Is(err, syscall.ECONNREFUSED) || t.cfg.Late && errors.Is(err, syscall.ECONNRESET)) || ctx.Err() != nil {
			// Tried again are only a refusal (not listening yet) and,
			// for a late rank, a reset (the rank it dials is ending: its
			// listening socket reset the connection under way), whose
			// attempts ftrun's exit notice (PeerDown) ends, as for a
			// hang-up during the handshake.
			return fmt.Errorf("tcp: connect to rank %d at %s: %w", r, addr, err)
		}
		select {
		case <-time.After(pause):
		case <-p.dead:
		case <-ctx.Done():
			return fmt.Errorf("tcp: connect to rank %d: %w", r, ctx.Err())
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// dialTCP dials addr with d; tests replace it to inject dial errors.
var dialTCP = func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	return d.DialContext(ctx, "tcp", addr)
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	backoff := time.Millisecond
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.closed.Load() {
				return
			}
			t.log.Warn(fmt.Sprintf("tcp: accept: %v", err))
			select {
			case <-time.After(backoff):
			case <-t.done:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = time.Millisecond
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			release := t.gate.Admit(conn)
			from, k, err := acceptHandshake(conn, uint32(t.cfg.Rank), t.cfg.Size, t.sealFor(conn.RemoteAddr()), t.secretFor, t.mayAccept)
			release()
			if err == nil {
				err = t.peers[from].attach(conn.(*net.TCPConn), k)
			}
			if err != nil {
				if errors.Is(err, errNotAdmitted) {
					t.log.Debug(fmt.Sprintf("tcp: refused connection from %s for now: %v", conn.RemoteAddr(), err))
				} else if ok, skipped := t.refusals.Note(conn.RemoteAddr(), time.Now()); ok {
					t.log.Warn(fmt.Sprintf("tcp: refused connection from %s: %v%s", conn.RemoteAddr(), err, seclink.Suffix(skipped)))
				}
				conn.Close()
			}
		}()
	}
}

// secretFor is the secret rank from must prove on a connection it dialed,
// whose hello carried the host public key pub (nil without host keys): the
// job secret, or the pair key with rank from's host, once its address
// (Connect, Admit) says pub is that host's key. It waits for that address
// until the handshake's deadline: a peer may dial before this rank has
// the launcher's list.
func (t *Transport) secretFor(from uint32, pub []byte) ([]byte, error) {
	switch {
	case t.id == nil && pub == nil:
		return t.cfg.Secret, nil
	case t.id == nil:
		return nil, fmt.Errorf("%w: a hello with a host key, but this rank proves the job secret", errAuth)
	case pub == nil:
		return nil, fmt.Errorf("%w: a hello without a host key, but this rank's hosts have keys", errAuth)
	}
	p := t.peers[from]
	timer := time.NewTimer(handshakeTimeout)
	defer timer.Stop()
	p.waitingForKey.Store(true)
	defer p.waitingForKey.Store(false)
	select {
	case <-p.keyKnown:
	case <-timer.C:
		return nil, fmt.Errorf("%w: no address known for rank %d, whose host key to check", errAuth, from)
	case <-t.done:
		return nil, ftrma.ErrClosed
	}
	if !bytes.Equal(p.hostKey(), pub) {
		return nil, fmt.Errorf("%w: a connection claiming rank %d with another host's key", errAuth, from)
	}
	return t.id.pairKey(pub)
}

// mayAccept refuses a second connection from a rank, or one from a rank
// that was fenced, that this rank dials itself, or that is not a peer; and
// one from a rank not admitted yet, for now (errNotAdmitted: it retries).
func (t *Transport) mayAccept(from uint32) error {
	p := t.peers[from]
	if p.downed.Load() {
		return fmt.Errorf("rank %d: %w", from, errRefusedFenced)
	}
	if p.absent.Load() {
		return fmt.Errorf("rank %d: %w", from, errNotAdmitted)
	}
	if !p.admitted.Load() && (ftrma.Rank(from) > t.cfg.Rank || t.cfg.Late) {
		return fmt.Errorf("rank %d must be dialed, not accepted", from)
	}
	if p.unserved.Load() {
		return fmt.Errorf("rank %d is not a peer of this transport (Connect got no address for it)", from)
	}
	select {
	case <-p.ready:
		return fmt.Errorf("rank %d is already connected", from)
	default:
	}
	return nil
}

// Admit makes the absent rank r (Config.Absent) a peer
// (transport.Admitter). r dials this rank (it starts with Config.Late):
// addr is used only for the host key it carries (Config.HostKey), which
// r's connection must prove. Until r's connection is up, operations and messages
// posted toward it wait in its send buffer (a Flush waits for the
// connection); if r dies first, PeerDown fails them. Admit fails with
// ftrma.ErrInvalid for self, a rank not absent (a peer already, failed,
// or not served by this transport), with ftrma.ErrRankOutOfRange for a
// rank outside the job and with ftrma.ErrClosed after Close.
func (t *Transport) Admit(r ftrma.Rank, addr string) error {
	if t.closed.Load() {
		return &ftrma.OpError{Op: "admit", Rank: r, Err: ftrma.ErrClosed}
	}
	if r < 0 || int(r) >= len(t.peers) {
		return &ftrma.OpError{Op: "admit", Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	p := t.peers[r]
	switch {
	case p.self:
		return transport.ErrNotAdmittable(r, "it is this rank")
	case p.downed.Load():
		return transport.ErrNotAdmittable(r, "it failed")
	case p.unserved.Load():
		return transport.ErrNotAdmittable(r, "another transport serves it")
	case !p.absent.Load(), p.admitted.Load():
		return transport.ErrNotAdmittable(r, "it is a peer already")
	}
	if t.id != nil {
		if err := p.learnAddr(addr); err != nil {
			return &ftrma.OpError{Op: "admit", Rank: r, Err: err}
		}
	}
	if p.admitted.Swap(true) {
		return transport.ErrNotAdmittable(r, "it is a peer already")
	}
	p.absent.Store(false)
	return nil
}

func (t *Transport) peer(op string, r ftrma.Rank) (*peer, error) {
	if t.closed.Load() {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrClosed}
	}
	if r < 0 || int(r) >= len(t.peers) {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	p := t.peers[r]
	if p.unserved.Load() {
		return nil, &ftrma.OpError{Op: op, Rank: r, Err: errNotServed}
	}
	if p.absent.Load() {
		return nil, transport.ErrAbsent(op, r)
	}
	return p, nil
}

// peerOrAbsent is peer, which also returns a rank that has not started:
// Fence and PeerDown make it failed.
func (t *Transport) peerOrAbsent(op string, r ftrma.Rank) (*peer, error) {
	p, err := t.peer(op, r)
	if err != nil && errors.Is(err, ftrma.ErrRankOutOfRange) && r >= 0 && int(r) < len(t.peers) {
		return t.peers[r], nil
	}
	return p, err
}

var errNotServed = fmt.Errorf("%w: tcp: rank is not a peer of this transport (Connect got no address for it: another transport reaches it)", ftrma.ErrInvalid)

// Register exposes mem to every peer. It fails with ftrma.ErrInvalid once
// RegisterKey has been used.
func (t *Transport) Register(mem []byte) (transport.Key, error) {
	if t.closed.Load() {
		return 0, ftrma.ErrClosed
	}
	t.kmu.Lock()
	defer t.kmu.Unlock()
	if t.keyed.Load() {
		return 0, &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: tcp: this transport registers under its caller's keys (RegisterKey)", ftrma.ErrInvalid)}
	}
	t.owned = true
	return t.mem.Register(mem)
}

// RegisterKey exposes mem to every peer under key, chosen by the caller: a
// transport that combines this one with others (transport/multi) registers
// a region with each under the one key its peers name it by. key must not
// be 0, above transport.MaxKey or registered already, and the caller must
// not reuse a key while the transport is open, as the transport.Key
// contract asks of keys. A transport uses either RegisterKey or Register:
// the first registration decides, and the other then fails with
// ftrma.ErrInvalid. After Close it fails with ftrma.ErrClosed.
func (t *Transport) RegisterKey(key transport.Key, mem []byte) error {
	if t.closed.Load() {
		return ftrma.ErrClosed
	}
	if key == 0 || key > transport.MaxKey {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: tcp: key %d out of range", ftrma.ErrInvalid, key)}
	}
	t.kmu.Lock()
	defer t.kmu.Unlock()
	if t.owned {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: tcp: this transport chooses its own keys (Register was used)", ftrma.ErrInvalid)}
	}
	if _, ok := t.keys.Load(key); ok {
		return &ftrma.OpError{Op: "register", Rank: t.cfg.Rank, Err: fmt.Errorf("%w: tcp: key %d is registered already", ftrma.ErrInvalid, key)}
	}
	k, err := t.mem.Register(mem)
	if err != nil {
		return err
	}
	t.keys.Store(key, k)
	t.keyed.Store(true)
	return nil
}

// memKey is the key of t.mem that key names: key itself unless the caller
// chooses the keys (RegisterKey), else its translation, or 0 (no region)
// when it is not registered.
func (t *Transport) memKey(key transport.Key) transport.Key {
	if !t.keyed.Load() {
		return key
	}
	if k, ok := t.keys.Load(key); ok {
		return k.(transport.Key)
	}
	return 0
}

// Deregister withdraws a region, waiting for the operations executing on
// it. After Close it fails with ftrma.ErrClosed.
func (t *Transport) Deregister(key transport.Key) error {
	if t.closed.Load() {
		return ftrma.ErrClosed
	}
	if !t.keyed.Load() {
		return t.mem.Deregister(key)
	}
	t.kmu.Lock()
	defer t.kmu.Unlock()
	k, ok := t.keys.LoadAndDelete(key)
	if !ok {
		return fmt.Errorf("tcp: deregister key %d: %w", key, ftrma.ErrUnknownRegion)
	}
	// An operation that translated key before the deletion either runs
	// under t.mem's region lock, which Deregister waits for, or finds the
	// region gone: t.mem never reuses k.
	return t.mem.Deregister(k.(transport.Key))
}

// Write posts a write; src is copied before Write returns. Writes larger than
// 1 MiB are split into several operations; the returned sequence is the last.
func (t *Transport) Write(r ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	p, err := t.peer("write", r)
	if err != nil {
		return 0, err
	}
	var seq transport.Seq
	for first := true; first || len(src) > 0; first = false {
		n := min(len(src), maxChunk)
		if seq, err = p.post(frameWrite, key, off, 0, 0, src[:n], pending{}); err != nil {
			return 0, err
		}
		src, off = src[n:], off+uint64(n)
	}
	return seq, nil
}

// Read posts a read into dst, which belongs to the transport until the
// operation completes. Reads larger than 1 MiB are split into several
// operations; the returned sequence is the last. A read larger than
// readAhead waits, before it posts each further piece, until the piece
// readAhead bytes before it is complete (or the peer is down, whose error it
// returns), so it must not be posted from a Receiver.
func (t *Transport) Read(r ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	p, err := t.peer("read", r)
	if err != nil {
		return 0, err
	}
	var seq transport.Seq
	var ahead [readAhead / maxChunk]transport.Seq // the pieces in flight, piece i at i%len
	for i := 0; i == 0 || len(dst) > 0; i++ {
		n := min(len(dst), maxChunk)
		if i >= len(ahead) {
			if err := p.await(ahead[i%len(ahead)]); err != nil {
				return 0, err
			}
		}
		if seq, err = p.post(frameRead, key, off, uint64(n), 0, nil, pending{dst: dst[:n]}); err != nil {
			return 0, err
		}
		ahead[i%len(ahead)] = seq
		dst, off = dst[n:], off+uint64(n)
	}
	return seq, nil
}

// readAhead bounds the bytes one Read keeps in flight toward a peer. The
// target executes a connection's frames in order and a control message
// posted after a read is delivered after it, so without a bound a heartbeat
// sent while a 100 MB read is under way would wait at the target until all
// 100 MB were copied into answers (longer than the failure detector's
// timeout on a busy host); with it, it waits for at most readAhead bytes.
const readAhead = 4 * maxChunk

// CompareAndSwap64 posts a compare-and-swap; *result receives the prior value.
func (t *Transport) CompareAndSwap64(r ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	p, err := t.peer("compare-and-swap", r)
	if err != nil {
		return 0, err
	}
	return p.post(frameCAS, key, off, old, new, nil, pending{res: result, atomic: true})
}

// FetchAndAdd64 posts a fetch-and-add; *result, if not nil, receives the prior value.
func (t *Transport) FetchAndAdd64(r ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	p, err := t.peer("fetch-and-add", r)
	if err != nil {
		return 0, err
	}
	return p.post(frameFAdd, key, off, delta, 0, nil, pending{res: result, atomic: true})
}

// Wait blocks until seq toward r is complete, polling the connection for up to
// Config.Spin before parking.
func (t *Transport) Wait(ctx context.Context, r ftrma.Rank, seq transport.Seq) error {
	p, err := t.peer("wait", r)
	if err != nil {
		return err
	}
	if p.comp.Completed() < seq && !p.self && p.connected() {
		p.kick()
		// One waiter of the process busy-polls at a time: more would only
		// take the CPU from the peers they wait for (and from each other).
		if t.spin > 0 && t.spinning.CompareAndSwap(false, true) {
			p.poll(seq, t.spin)
			t.spinning.Store(false)
		}
	}
	return p.comp.Wait(ctx, seq, 0)
}

// Test reports, without waiting, whether operation seq toward r is
// complete, and then the error Wait would return (transport.Tester). When it
// is not, the operations held for batching are sent, as by Push.
func (t *Transport) Test(r ftrma.Rank, seq transport.Seq) (bool, error) {
	p, err := t.peer("test", r)
	if err != nil {
		return true, err
	}
	if p.comp.Completed() < seq && !p.self {
		p.kick()
	}
	return p.comp.Test(seq)
}

// Push sends the operations held for batching toward r now.
func (t *Transport) Push(r ftrma.Rank) {
	if p, err := t.peer("push", r); err == nil && !p.self {
		p.kick()
	}
}

// Flush waits until every operation posted toward r is complete. Toward a
// peer that is down it fails even when nothing is pending.
func (t *Transport) Flush(ctx context.Context, r ftrma.Rank) error {
	p, err := t.peer("flush", r)
	if err != nil {
		return err
	}
	if err := p.comp.Down(); err != nil {
		return err
	}
	return t.Wait(ctx, r, p.comp.Posted())
}

// Send posts a control message; msg is copied.
func (t *Transport) Send(r ftrma.Rank, msg []byte) error {
	p, err := t.peer("send", r)
	if err != nil {
		return err
	}
	if len(msg) > transport.MaxControlMessage {
		return &ftrma.OpError{Op: "send", Rank: r, Err: fmt.Errorf("%w: message of %d bytes exceeds %d", ftrma.ErrInvalid, len(msg), transport.MaxControlMessage)}
	}
	return p.sendMsg(msg)
}

// SetReceiver installs the receiver of control messages and peer-down events.
// Messages and events that arrived before it are delivered to it first, in
// order.
func (t *Transport) SetReceiver(r transport.Receiver) {
	for _, p := range t.peers {
		p.rmu.Lock()
	}
	t.recv.Store(&receiverBox{r})
	var downs []*peer
	for _, p := range t.peers {
		if r != nil {
			for _, m := range p.early {
				r.HandleMessage(p.rank, m)
			}
			if p.lateDown != nil {
				downs = append(downs, p)
			}
		}
		p.early = nil
		p.rmu.Unlock()
	}
	for _, p := range downs {
		r.HandlePeerDown(p.rank, p.lateDown)
	}
}

func (t *Transport) receiver() transport.Receiver {
	if b := t.recv.Load(); b != nil {
		return b.r
	}
	return nil
}

// Fence cuts r off: its connection is closed, nothing it sent is executed or
// delivered after Fence returns, operations toward it fail, and it cannot
// connect again. Fencing a rank that is not a peer (see Connect) fails with
// ftrma.ErrInvalid; fencing an absent rank (Config.Absent) makes it failed,
// never to be admitted.
func (t *Transport) Fence(r ftrma.Rank) error {
	p, err := t.peerOrAbsent("fence", r)
	if err != nil {
		return err
	}
	if p.self {
		return &ftrma.OpError{Op: "fence", Rank: r, Err: fmt.Errorf("%w: cannot fence self", ftrma.ErrInvalid)}
	}
	p.down(errFenced, false)
	return nil
}

var errFenced = errors.New("fenced")

// PeerDown marks r down with cause (transport.Transport): its connection
// is closed and refused from now on, as by Fence. An absent rank becomes
// failed, never to be admitted.
func (t *Transport) PeerDown(r ftrma.Rank, cause error) {
	p, err := t.peerOrAbsent("peer down", r)
	if err != nil || p.self {
		return
	}
	if cause == nil {
		cause = ftrma.ErrProcFailed
	}
	p.down(cause, false)
}

// Close tells every peer it is leaving (a goodbye frame, then half-closing
// and waiting up to a second for the peer to close its side, so that nothing
// in flight is lost), cuts every peer off, stops accepting, and waits for the
// transport's goroutines.
func (t *Transport) Close() error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed.Swap(true) {
		return nil
	}
	t.ln.Close()
	var wg sync.WaitGroup
	for _, p := range t.peers {
		if !p.self {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.goodbye(time.Second)
				p.down(ftrma.ErrClosed, true)
			}()
		}
	}
	wg.Wait()
	close(t.done)
	t.wg.Wait()
	return nil
}

// What the tcp transport implements, checked when it is compiled.
var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Admitter  = (*Transport)(nil)
)
