package launcher

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// The arbiter's mesh: the links among the nodes of a job's arbiter (ftrun
// --arbiter), one node per host, node id = host index + 1 (ftrun's host is
// node 1). Every node listens on its host's address, the one the job
// already uses for that host (ftrun's toward its agents, an agent's on its
// link to ftrun), port 0, and ftrun hands each node the others' addresses
// (msgArbiterConfig). Of every pair the lower id dials the higher, and the
// pair keeps that one connection, used both ways:
//
//   - the dialler sends its node id in a frame of its own (msgArbiterLabel),
//     then both run mutual TLS 1.3 keyed by the pair's key
//     (arbiterPairKey, internal/seclink). The key is derived by ftrun from
//     the job's root secret, which never leaves ftrun, and each agent gets
//     the keys of its own pairs only: so a peer that authenticates on the
//     link holds the key of this very pair, and is the node it claims to be
//     (or ftrun). A node that claims another id holds another pair's key and
//     fails the handshake; the dialler knows whom it dialled, and the
//     listener proves it holds the same pair key.
//   - then frames (jobwire's: length, type, payload) go both ways: one
//     arbiter.Message each (msgArbiterMsg), and pings (msgPing) every
//     meshTiming.ping. A message whose From is not the link's peer, or whose
//     To is not this node, is dropped: a node speaks for itself only.
//   - a connection silent for meshTiming.idle, or that breaks, or fails to
//     authenticate, is closed; the dialler dials again with a backoff from
//     a tick up to an election timeout. A newer connection of a pair
//     replaces the older.
//
// Messages to a peer without a connection are dropped, as are messages
// beyond a connection's queue (meshQueue) and received messages the driver
// has not taken (meshRecvQueue): raft and the arbiter tolerate loss (the
// leader retransmits, leases are asked again). Every connection has
// deadlines; Close ends every goroutine and waits for them.

// Queue bounds of the mesh.
const (
	meshQueue     = 256  // frames waiting for one peer's connection
	meshRecvQueue = 1024 // messages received and not yet taken by the driver
)

// maxArbiterFrame is the largest frame on the mesh: raft's largest append
// (arbiter: MaxSizePerMsg 1 MiB) and its envelope.
const maxArbiterFrame = 2 << 20

// meshTiming is the mesh's timing, from the arbiter's.
type meshTiming struct {
	handshake  time.Duration // bounds a dial, the label and TLS
	ping       time.Duration // every connection's ping interval
	idle       time.Duration // a connection silent this long is dropped
	backoffMin time.Duration // first wait before dialling again
	backoffMax time.Duration
}

func meshTimingFor(cfg arbiter.Config) meshTiming {
	c := cfg.WithDefaults()
	et := c.ElectionTimeout()
	return meshTiming{handshake: max(2*et, time.Second), ping: et / 2, idle: 2 * et, backoffMin: c.Tick, backoffMax: et}
}

// arbMesh is one node's side of the mesh.
type arbMesh struct {
	self  uint64
	tm    meshTiming
	ln    net.Listener
	log   *slog.Logger
	peers map[uint64]*meshPeer
	recv  chan arbiter.Message // messages for this node, for the driver
	// gone carries the id of a peer whose current connection ended with an
	// end of stream or a reset: the kernel closes a dead process's sockets
	// so (peerEnded). A hint for the driver (arbiter.Node.LeaderGone).
	gone chan uint64
	// probes carries the probe frames received (msgArbiterProbe and
	// msgArbiterProbeAnswer), for the driver; dropped when it is full.
	probes chan meshProbe
	gate   *seclink.Gate
	// refusals rate-limits the log lines of refused connections.
	refusals *seclink.Refusals
	quit     chan struct{}   // closed by Close
	ctx      context.Context // cancelled by Close: ends dials under way
	stop     context.CancelFunc
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // every raw connection open: Close closes them
	closed bool
	cut    bool // isolate: no link at all (tests)

	dropped atomic.Int64 // messages dropped: no connection, or a full queue
	refused atomic.Int64 // connections refused: a bad label or key
}

// meshPeer is another node, as this one links to it.
type meshPeer struct {
	arbiterPeer
	heard atomic.Int64 // when a frame from it last arrived (UnixNano); 0: never

	mu  sync.Mutex
	cur *meshConn // the pair's connection, or nil
}

// meshConn is one authenticated connection of a pair.
type meshConn struct {
	c    net.Conn
	out  chan []byte   // frames to write
	done chan struct{} // closed when the reader ended
}

// listenArbiter listens for the mesh on ip, port 0.
func listenArbiter(ip string) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("arbiter: listen: %w", err)
	}
	return ln, nil
}

// startMesh runs node self's side of the mesh on ln (which it then owns)
// toward peers: it accepts the lower nodes and dials the higher ones.
func startMesh(ln net.Listener, self uint64, peers []arbiterPeer, tm meshTiming, log *slog.Logger) *arbMesh {
	m := &arbMesh{
		self: self, tm: tm, ln: ln, log: log, peers: make(map[uint64]*meshPeer),
		recv: make(chan arbiter.Message, meshRecvQueue), gone: make(chan uint64, 16), probes: make(chan meshProbe, meshRecvQueue), gate: seclink.NewGate(maxHandshakes), refusals: seclink.NewRefusals(time.Second),
		quit: make(chan struct{}), conns: make(map[net.Conn]struct{}),
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	for _, p := range peers {
		m.peers[p.id] = &meshPeer{arbiterPeer: p}
	}
	m.wg.Add(1)
	go m.acceptLoop()
	for _, p := range m.peers {
		if p.id > self {
			m.wg.Add(1)
			go m.dialLoop(p)
		}
	}
	return m
}

// Close ends every link and goroutine of the mesh and waits for them.
func (m *arbMesh) Close() {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.quit)
		m.stop()
		m.ln.Close()
		for c := range m.conns {
			c.Close()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// isolate cuts this node off (on) or lets it link again: every connection
// is closed, and none is dialled or accepted while cut (tests).
func (m *arbMesh) isolate(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cut = on
	if on {
		for c := range m.conns {
			c.Close()
		}
	}
}

// register records a raw connection for Close; false if the mesh is
// closing or cut (the caller closes it).
func (m *arbMesh) register(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.cut {
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *arbMesh) unregister(c net.Conn) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
	c.Close()
}

func (m *arbMesh) isCut() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cut
}

// heard returns when a frame from node id last arrived (zero: never).
func (m *arbMesh) heard(id uint64) time.Time {
	if p := m.peers[id]; p != nil {
		if ns := p.heard.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

// linked reports whether the pair with node id is connected.
func (m *arbMesh) linked(id uint64) bool {
	p := m.peers[id]
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur != nil
}

// meshProbe is a probe frame from node from.
type meshProbe struct {
	from  uint64
	typ   byte // msgArbiterProbe or msgArbiterProbeAnswer
	rank  ftrma.Rank
	state byte // an answer's: probeAlive, probeNotAlive or probeHeard
}

// sendFrame sends a frame of type typ to node id if the pair is connected
// and the connection's queue has room; else it drops it.
func (m *arbMesh) sendFrame(id uint64, typ byte, payload []byte) {
	p := m.peers[id]
	if p == nil {
		m.dropped.Add(1)
		return
	}
	p.mu.Lock()
	mc := p.cur
	p.mu.Unlock()
	if mc == nil {
		m.dropped.Add(1)
		return
	}
	select {
	case mc.out <- jobwire.AppendFrame(nil, typ, payload):
	default:
		m.dropped.Add(1)
	}
}

// send sends msg to its node if the pair is connected and the
// connection's queue has room; else it drops it.
func (m *arbMesh) send(msg arbiter.Message) {
	payload, err := msg.AppendBinary(nil)
	if err != nil {
		m.log.Debug(fmt.Sprintf("arbiter: cannot encode %v: %v", msg, err))
		return
	}
	m.sendFrame(msg.To, msgArbiterMsg, payload)
}

func (m *arbMesh) acceptLoop() {
	defer m.wg.Done()
	warn := func(format string, args ...any) { m.log.Warn(fmt.Sprintf(format, args...)) }
	acceptEach(m.ln, m.quit, "arbiter mesh", warn, func(c net.Conn) bool {
		if !m.register(c) {
			c.Close()
			return true
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer m.unregister(c)
			m.accept(c)
		}()
		return true
	})
}

// accept authenticates a connection from a lower node and serves it.
func (m *arbMesh) accept(c net.Conn) {
	release := m.gate.Admit(c)
	deadline := time.Now().Add(m.tm.handshake)
	c.SetDeadline(deadline)
	p, err := m.readLabel(c)
	var tc net.Conn
	if err == nil {
		tc, err = seclink.Server(c, p.key, deadline)
		if err != nil {
			err = fmt.Errorf("claims node %d: %w", p.id, err)
		}
	}
	release()
	if err != nil {
		select {
		case <-m.quit:
		default:
			m.refused.Add(1)
			if ok, skipped := m.refusals.Note(c.RemoteAddr(), time.Now()); ok {
				m.log.Warn(fmt.Sprintf("arbiter: refused a connection from %s: %v%s", c.RemoteAddr(), err, seclink.Suffix(skipped)))
			}
		}
		return
	}
	tc.SetDeadline(time.Time{})
	m.serve(p, tc)
}

// readLabel reads the dialler's node id: a peer below this node.
func (m *arbMesh) readLabel(c net.Conn) (*meshPeer, error) {
	typ, b, err := jobwire.ReadFrame(c, 64)
	if err != nil {
		return nil, err
	}
	if typ != msgArbiterLabel || len(b) != 4 {
		return nil, errors.New("no arbiter label")
	}
	id := uint64(binary.BigEndian.Uint32(b))
	p := m.peers[id]
	if p == nil || id >= m.self {
		return nil, fmt.Errorf("node %d may not dial node %d", id, m.self)
	}
	return p, nil
}

// dialLoop keeps the link to p, a higher node, up until Close.
func (m *arbMesh) dialLoop(p *meshPeer) {
	defer m.wg.Done()
	backoff := m.tm.backoffMin
	for {
		select {
		case <-m.quit:
			return
		default:
		}
		if !m.isCut() {
			began := time.Now()
			if err := m.dial(p); err != nil {
				m.log.Debug(fmt.Sprintf("arbiter: link to node %d at %s: %v", p.id, p.addr, err))
			}
			if time.Since(began) > m.tm.idle {
				backoff = m.tm.backoffMin // it was up a while: a new failure
			}
		}
		select {
		case <-m.quit:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, m.tm.backoffMax)
	}
}

// dial connects to p, authenticates and serves the connection until it
// ends.
func (m *arbMesh) dial(p *meshPeer) error {
	ctx, cancel := context.WithTimeout(m.ctx, m.tm.handshake)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.addr)
	cancel()
	if err != nil {
		return err
	}
	if !m.register(c) {
		c.Close()
		return nil
	}
	defer m.unregister(c)
	deadline := time.Now().Add(m.tm.handshake)
	c.SetDeadline(deadline)
	if err := jobwire.WriteFrame(c, msgArbiterLabel, binary.BigEndian.AppendUint32(nil, uint32(m.self))); err != nil {
		return err
	}
	tc, err := seclink.Client(c, p.key, deadline)
	if err != nil {
		if errors.Is(err, seclink.ErrUnknownKey) {
			m.refused.Add(1)
			m.log.Warn(fmt.Sprintf("arbiter: node %d at %s does not hold our pair's key; dropped", p.id, p.addr))
		}
		return err
	}
	tc.SetDeadline(time.Time{})
	m.serve(p, tc)
	return nil
}

// serve makes c the pair's connection and carries its frames until it
// breaks or goes silent.
func (m *arbMesh) serve(p *meshPeer, c net.Conn) {
	mc := &meshConn{c: c, out: make(chan []byte, meshQueue), done: make(chan struct{})}
	p.mu.Lock()
	old := p.cur
	p.cur = mc
	p.mu.Unlock()
	if old != nil {
		old.c.Close()
	}
	m.log.Debug(fmt.Sprintf("arbiter: link to node %d up (%s)", p.id, c.RemoteAddr()))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.writeLoop(mc)
	}()
	err := m.readLoop(p, mc)
	c.Close()
	close(mc.done)
	wg.Wait()
	p.mu.Lock()
	current := p.cur == mc
	if current {
		p.cur = nil
	}
	p.mu.Unlock()
	m.log.Debug(fmt.Sprintf("arbiter: link to node %d down: %v", p.id, err))
	if current && peerEnded(err) {
		select {
		case m.gone <- p.id:
		default:
		}
	}
}

// peerEnded reports whether a connection's read ended because the peer's
// end closed or reset it, as when its process ends (the kernel closes its
// sockets), rather than by a silence, a deadline or this side's own close.
// A peer that closes its end for other reasons (its own idle timeout) gives
// a wrong hint, which the arbiter tolerates (arbiter.Node.LeaderGone).
func peerEnded(err error) bool { return jobwire.ClosedByPeer(err) }

func (m *arbMesh) writeLoop(mc *meshConn) {
	ping := jobwire.AppendFrame(nil, msgPing, nil)
	tick := time.NewTicker(m.tm.ping)
	defer tick.Stop()
	for {
		var f []byte
		select {
		case <-mc.done:
			return
		case f = <-mc.out:
		case <-tick.C:
			f = ping
		}
		mc.c.SetWriteDeadline(time.Now().Add(m.tm.idle))
		if _, err := mc.c.Write(f); err != nil {
			mc.c.Close() // the reader sees it too
			return
		}
	}
}

func (m *arbMesh) readLoop(p *meshPeer, mc *meshConn) error {
	for {
		mc.c.SetReadDeadline(time.Now().Add(m.tm.idle))
		typ, b, err := jobwire.ReadFrame(mc.c, maxArbiterFrame)
		if err != nil {
			return err
		}
		p.heard.Store(time.Now().UnixNano())
		switch typ {
		case msgArbiterMsg:
		case msgArbiterProbe, msgArbiterProbeAnswer:
			q := meshProbe{from: p.id, typ: typ}
			var err error
			if typ == msgArbiterProbe {
				q.rank, err = jobwire.ParseRank(b, supMaxRank)
			} else {
				q.rank, q.state, err = parseProbeAnswer(b)
			}
			if err != nil {
				m.log.Debug(fmt.Sprintf("arbiter: dropped a probe frame from node %d: %v", p.id, err))
				continue
			}
			select {
			case m.probes <- q:
			default:
				m.dropped.Add(1)
			}
			continue
		default:
			continue // pings, and what a later version may add
		}
		msg, err := arbiter.ParseMessage(b)
		if err != nil || msg.From != p.id || msg.To != m.self {
			m.log.Debug(fmt.Sprintf("arbiter: dropped a message from node %d: %v %v", p.id, msg, err))
			continue
		}
		select {
		case m.recv <- msg:
		default:
			m.dropped.Add(1)
		}
	}
}
