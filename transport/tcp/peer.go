package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// peer is this rank's side of the connection to one other rank (or, for
// self, the loopback path that executes operations inline).
type peer struct {
	t      *Transport
	rank   ftrma.Rank
	self   bool
	comp   transport.Completion
	ready  chan struct{} // closed once the connection is attached (or for self)
	downed atomic.Bool   // set once by down: the peer is cut off for good
	// unserved is set by Connect, before any dial, for a rank without an
	// address: another transport reaches it. It is never cleared.
	unserved atomic.Bool
	// absent is set by Listen for a rank that has not started
	// (Config.Absent) and cleared by Admit or down. admitted is set by
	// Admit, before absent is cleared: the rank dials this one, whatever
	// their numbers, and what is posted toward it before it connects waits
	// in sbuf.
	absent   atomic.Bool
	admitted atomic.Bool
	dead     chan struct{} // closed by down
	// With host keys: the public key of the rank's host, from its address
	// (learnAddr, once), and keyKnown, closed when it is set.
	key      atomic.Pointer[[]byte]
	keyKnown chan struct{}
	keyOnce  sync.Once
	// waitingForKey is set while an accepted handshake waits for keyKnown
	// (for tests).
	waitingForKey atomic.Bool

	conn *net.TCPConn    // set once by attach, before ready is closed
	rc   syscall.RawConn // conn's raw access
	fd   int             // conn's descriptor; read only under rmu while !rclosed
	// A sealed connection's record layers (seal.go), set by attach; nil
	// for a plain one. seal and sealBuf belong to the goroutine that owns
	// the write side, open to the holder of rmu.
	seal    *sealer
	sealBuf []byte
	open    *opener

	smu      sync.Mutex  // guards the send side: sbuf, spare, writing, handoff*, serr
	sbuf     []byte      // framed bytes waiting to be written, in posting order
	spare    []byte      // a drained buffer kept for reuse
	writing  bool        // a goroutine owns the socket's write side
	wdone    sync.Cond   // on smu: signalled when writing becomes false or the peer goes down
	handoff  []byte      // unwritten rest left to the writer goroutine (owns writing)
	handbuf  []byte      // the whole buffer handoff is a suffix of, for reuse
	serr     error       // non-nil once the peer is down: posts fail with it
	held     bool        // sbuf holds operation frames waiting for a batch
	nudge    *time.Timer // sends held frames nudgeAfter after the first was held
	wakeWrit chan struct{}

	// The socket write in progress, owned by the goroutine that set writing.
	wbuf    []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool     // p.writeSome, bound once
	rawFn   func([]byte) (int, error) // p.rawRead, bound once (the opener's)
	wv      net.Buffers               // postDirect's gather list, reused
	iov     []syscall.Iovec           // writev's vector, reused (see gather.go)
	iovN    int                       // bytes the vector holds
	iovFn   func(fd uintptr) bool     // p.writevSome, bound once
	rest    []byte                    // gather's copy of what the socket did not take, reused
	hdr     [padHdr + maxPad]byte     // gather's answer header

	pmu   sync.Mutex // guards pend
	pend  []pending  // outstanding reads and atomics, in sequence order
	phead int        // pend[phead:] are outstanding

	rmu      sync.Mutex // the read token: guards everything below
	rbuf     []byte     // received bytes; rbuf[:rlen] not yet parsed
	rlen     int
	rclosed  bool         // no more reads or processing: the peer is down
	reply    []byte       // answers gathered while processing one batch
	lastReq  uint64       // highest request sequence executed
	lastAns  uint64       // highest request sequence answered
	served   bool         // a request was served in the batch being parsed
	dir      direct       // a large payload being received in place
	segs     []seg        // large read answers in reply whose payload is still in memory
	spareRep []byte       // a reply buffer kept for reuse by materialize
	lastServ atomic.Int64 // unix nanoseconds of the last request served
	partial  atomic.Bool  // rbuf holds part of a frame
	early    [][]byte     // control messages that arrived before SetReceiver
	lateDown error        // a peer-down event that happened before SetReceiver
}

// maxEarly bounds the control messages held for a receiver not yet set.
const maxEarly = 4096

// pending is an outstanding read or atomic awaiting its answer.
type pending struct {
	seq    transport.Seq
	dst    []byte  // read destination
	res    *uint64 // atomic result, may be nil
	atomic bool
}

func newPeer(t *Transport, r ftrma.Rank) *peer {
	p := &peer{t: t, rank: r, self: r == t.cfg.Rank, ready: make(chan struct{}), dead: make(chan struct{}), wakeWrit: make(chan struct{}, 1), keyKnown: make(chan struct{})}
	if p.self {
		close(p.ready)
	}
	p.writeFn = p.writeSome
	p.rawFn = p.rawRead
	p.iovFn = p.writevSome
	p.wdone.L = &p.smu
	p.nudge = time.AfterFunc(time.Hour, p.kick)
	p.nudge.Stop()
	return p
}

// learnAddr takes the host key from the rank's address, with host keys
// (Config.HostKey): an address without one is refused. The first address
// learned stands.
func (p *peer) learnAddr(addr string) error {
	if p.t.id == nil {
		return nil
	}
	_, key, err := splitHostKey(addr)
	if err == nil && key == nil {
		err = fmt.Errorf("tcp: rank %d's address %q carries no host key, but this job's hosts have keys: %w", p.rank, addr, ftrma.ErrInvalid)
	}
	if err != nil {
		return err
	}
	p.keyOnce.Do(func() {
		p.key.Store(&key)
		close(p.keyKnown)
	})
	return nil
}

// hostKey is the public key of the rank's host, or nil if not known.
func (p *peer) hostKey() []byte {
	if k := p.key.Load(); k != nil {
		return *k
	}
	return nil
}

// netAddr is addr without its host key.
func (p *peer) netAddr(addr string) string {
	a, _, err := splitHostKey(addr)
	if err != nil {
		return addr
	}
	return a
}

// attach installs an authenticated connection, sealed with k if it has
// keys, and starts its goroutines.
func (p *peer) attach(conn *net.TCPConn, k keys) error {
	conn.SetNoDelay(true)
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var seal *sealer
	var open *opener
	if k.send != nil {
		sk, err := newRecordKey(k.send)
		if err != nil {
			return err
		}
		rk, err := newRecordKey(k.recv)
		if err != nil {
			return err
		}
		seal, open = &sealer{k: sk}, newOpener(rk)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	p.smu.Lock()
	if p.downed.Load() || p.conn != nil || p.unserved.Load() {
		p.smu.Unlock()
		return fmt.Errorf("rank %d is fenced, already connected or not a peer", p.rank)
	}
	p.conn, p.rc, p.fd = conn, rc, fd
	p.seal, p.open = seal, open
	p.rbuf = make([]byte, 256<<10)
	p.smu.Unlock()
	p.t.wg.Add(2)
	go p.readLoop()
	go p.writeLoopGoroutine()
	close(p.ready)
	// What was posted toward an admitted rank before it connected.
	p.kick()
	return nil
}

// connected reports whether the connection is attached (always, for self).
func (p *peer) connected() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

// errNotConnected is the error of a post toward a peer whose connection is
// not attached and that was not admitted (Connect has not run or failed).
func (p *peer) errNotConnected(op string) error {
	return &ftrma.OpError{Op: op, Rank: p.rank, Err: fmt.Errorf("%w: not connected", ftrma.ErrInvalid)}
}

// post queues one operation frame; its sequence is handed out under smu, so
// sequence order is wire order.
func (p *peer) post(typ byte, key transport.Key, off uint64, a, b uint64, data []byte, pd pending) (transport.Seq, error) {
	if p.self {
		return p.postSelf(typ, key, off, a, b, data, pd)
	}
	p.smu.Lock()
	if p.serr != nil {
		err := p.serr
		p.smu.Unlock()
		return 0, err
	}
	if p.conn == nil && !p.admitted.Load() {
		p.smu.Unlock()
		return 0, p.errNotConnected("post")
	}
	if typ == frameWrite && len(data) >= directBytes && p.conn != nil && p.seal == nil {
		// A sealed connection's bytes go through the sealer: copied.
		return p.postDirect(key, off, data)
	}
	seq := p.comp.Next()
	if typ != frameWrite {
		pd.seq = seq
		p.pmu.Lock()
		p.pend = append(p.pend, pd)
		p.pmu.Unlock()
	}
	p.sbuf = appendOp(p.sbuf, typ, uint64(seq), uint32(key), off, a, b, data)
	if p.conn == nil {
		// Admitted, not connected yet: attach sends it.
		p.smu.Unlock()
		return seq, nil
	}
	if len(p.sbuf) < batchBytes {
		// Hold the frame for more: Wait, Flush, a control message, a full
		// batch or the nudge timer sends it.
		if !p.held {
			p.held = true
			p.nudge.Reset(nudgeAfter)
		}
		p.smu.Unlock()
		return seq, nil
	}
	if err := p.kickLocked(true); err != nil {
		p.down(err, false)
	}
	return seq, nil
}

// postDirect sends a large write from the caller's buffer (writev of the
// queued frames, the header, and data), blocking until the socket took all
// of it, so that data is not copied into the send buffer. Called with smu
// held; returns with it released.
func (p *peer) postDirect(key transport.Key, off uint64, data []byte) (transport.Seq, error) {
	for p.writing && p.serr == nil {
		p.wdone.Wait()
	}
	if p.serr != nil {
		err := p.serr
		p.smu.Unlock()
		return 0, err
	}
	seq := p.comp.Next()
	// The header only: data goes from the caller's buffer, at the same
	// offset modulo 64 in this write as in memory (see gather.go).
	fl := fixedLen[frameWritePad]
	pad := int(uintptr(unsafe.Pointer(unsafe.SliceData(data)))-uintptr(len(p.sbuf)+4+fl)) & maxPad
	p.sbuf = room(p.sbuf, fl+pad)
	p.sbuf = appendHeader(p.sbuf, frameWritePad, fl+pad+len(data))
	p.sbuf = binary.BigEndian.AppendUint64(p.sbuf, uint64(seq))
	p.sbuf = binary.BigEndian.AppendUint32(p.sbuf, uint32(key))
	p.sbuf = binary.BigEndian.AppendUint64(p.sbuf, off)
	p.sbuf = append(p.sbuf, byte(pad))
	p.sbuf = append(p.sbuf, zeros[:pad]...)
	p.writing, p.held = true, false
	buf := p.sbuf
	p.sbuf, p.spare = p.spare[:0], nil
	p.smu.Unlock()
	p.wv = append(p.wv[:0], buf, data)
	_, err := p.wv.WriteTo(p.conn)
	p.wv = p.wv[:0]
	p.smu.Lock()
	p.spare = buf[:0]
	p.writing = false
	p.wdone.Broadcast()
	if err == nil {
		err = p.kickLocked(true)
	} else {
		p.smu.Unlock()
	}
	if err != nil {
		p.down(err, false)
	}
	return seq, nil
}

// await waits until operation seq is complete, or the peer is down (then it
// returns the peer-down error), having sent the frames held for batching. It
// leaves the operations' failures to Wait and Flush.
func (p *peer) await(seq transport.Seq) error {
	if p.comp.Completed() >= seq {
		return nil
	}
	if !p.self {
		p.kick()
	}
	return p.comp.Await(context.Background(), seq)
}

// Batching: operation frames are held until this many bytes are queued, or
// until someone waits for them, or nudgeAfter has passed.
const (
	batchBytes = 64 << 10
	nudgeAfter = time.Millisecond
)

// kick writes out whatever is queued.
func (p *peer) kick() {
	p.smu.Lock()
	if err := p.kickLocked(true); err != nil {
		p.down(err, false)
	}
}

// postSelf executes an operation toward this rank inline.
func (p *peer) postSelf(typ byte, key transport.Key, off uint64, a, b uint64, data []byte, pd pending) (transport.Seq, error) {
	p.smu.Lock()
	defer p.smu.Unlock()
	m := &p.t.mem
	key = p.t.memKey(key)
	var v uint64
	var err error
	switch typ {
	case frameWrite:
		err = m.Write(key, off, data)
	case frameRead:
		err = m.Read(key, off, pd.dst)
	case frameCAS:
		v, err = m.CompareAndSwap64(key, off, a, b)
	case frameFAdd:
		v, err = m.FetchAndAdd64(key, off, a)
	}
	if err == nil && pd.res != nil {
		*pd.res = v
	}
	seq := p.comp.Next()
	p.comp.Complete(seq, p.opErr(err))
	return seq, nil
}

func (p *peer) opErr(err error) error {
	if err == nil {
		return nil
	}
	return &ftrma.OpError{Op: "rma", Rank: p.rank, Err: err}
}

// sendMsg queues a control message.
func (p *peer) sendMsg(msg []byte) error {
	if p.self {
		r := p.t.receiver()
		if r == nil {
			// Held for SetReceiver, which sets the receiver and delivers
			// what is held under p.rmu.
			p.rmu.Lock()
			if r = p.t.receiver(); r == nil {
				if len(p.early) < maxEarly {
					p.early = append(p.early, slices.Clone(msg))
				}
				p.rmu.Unlock()
				return nil
			}
			p.rmu.Unlock()
		}
		r.HandleMessage(p.rank, msg)
		return nil
	}
	p.smu.Lock()
	if p.serr != nil {
		err := p.serr
		p.smu.Unlock()
		return err
	}
	if p.conn == nil && !p.admitted.Load() {
		p.smu.Unlock()
		return p.errNotConnected("send")
	}
	p.sbuf = appendMsg(p.sbuf, msg)
	if err := p.kickLocked(true); err != nil {
		// The write that failed may have carried this message already, or
		// only frames queued after it: the loss of the peer is reported by
		// its peer-down event, not charged to this message.
		p.down(err, false)
	}
	return nil
}

// kickLocked starts writing sbuf unless another goroutine is writing. Called
// with smu held; returns with it released. A caller that must not block on
// the socket (the receive path) passes mayBlock false: what the socket does
// not take at once is left to the writer goroutine.
func (p *peer) kickLocked(mayBlock bool) error {
	if p.writing || len(p.sbuf) == 0 || p.serr != nil || p.conn == nil {
		p.smu.Unlock()
		return nil
	}
	p.writing = true
	p.held = false
	for {
		buf := p.sbuf
		p.sbuf, p.spare = p.spare[:0], nil
		p.smu.Unlock()
		handed, err := p.writeOut(buf, mayBlock)
		if handed {
			select {
			case p.wakeWrit <- struct{}{}:
			default:
			}
			return nil
		}
		p.smu.Lock()
		if err != nil {
			p.writing = false
			p.wdone.Broadcast()
			p.smu.Unlock()
			return err
		}
		p.spare = buf[:0]
		if len(p.sbuf) == 0 {
			p.writing = false
			p.wdone.Broadcast()
			p.smu.Unlock()
			return nil
		}
	}
}

// sealChunk is how much plaintext a sealed connection seals before it
// writes: the peer opens the first records while the rest are sealed.
const sealChunk = 64 << 10

// writeOut writes buf to the socket (its records, on a sealed connection)
// for the goroutine that owns the write side. Without mayBlock, what the
// socket does not take at once is handed to the writer goroutine (handed):
// the caller wakes it.
func (p *peer) writeOut(buf []byte, mayBlock bool) (handed bool, err error) {
	if p.seal == nil {
		n, err := p.tryWrite(buf)
		if err != nil || n == len(buf) {
			return false, err
		}
		if !mayBlock {
			p.smu.Lock()
			p.handoff, p.handbuf = buf[n:], buf
			p.smu.Unlock()
			return true, nil
		}
		_, err = p.conn.Write(buf[n:])
		return false, err
	}
	for off := 0; off < len(buf); {
		end := min(off+sealChunk, len(buf))
		ct := p.seal.seal(p.sealBuf[:0], buf[off:end])
		p.sealBuf, off = ct[:0], end
		n, err := p.tryWrite(ct)
		if err != nil || n == len(ct) {
			if err != nil {
				return false, err
			}
			continue
		}
		if !mayBlock {
			rest := append(make([]byte, 0, len(ct)-n+sealedLen(len(buf)-off)), ct[n:]...)
			rest = p.seal.seal(rest, buf[off:])
			p.smu.Lock()
			p.handoff, p.handbuf = rest, rest
			p.smu.Unlock()
			return true, nil
		}
		if _, err := p.conn.Write(ct[n:]); err != nil {
			return false, err
		}
	}
	return false, nil
}

// tryWrite writes as much of buf as the socket takes without blocking. Only
// the goroutine that owns writing calls it; the write state lives in the peer
// so that no closure is allocated per call.
func (p *peer) tryWrite(buf []byte) (int, error) {
	p.wbuf, p.wn, p.werr = buf, 0, nil
	if err := p.rc.Write(p.writeFn); err != nil && p.werr == nil {
		p.werr = err
	}
	n, err := p.wn, p.werr
	p.wbuf = nil
	return n, err
}

// writeSome is tryWrite's callback: it writes p.wbuf until done or EAGAIN.
func (p *peer) writeSome(fd uintptr) bool {
	for p.wn < len(p.wbuf) {
		m, e := rawWrite(int(fd), p.wbuf[p.wn:])
		if e == syscall.EAGAIN {
			return true
		}
		if e != 0 {
			p.werr = e
			return true
		}
		p.wn += m
	}
	return true
}

// writeLoopGoroutine finishes writes the receive path could not complete
// without blocking.
func (p *peer) writeLoopGoroutine() {
	defer p.t.wg.Done()
	for {
		select {
		case <-p.wakeWrit:
		case <-p.t.done:
			return
		}
		p.smu.Lock()
		h, hb := p.handoff, p.handbuf
		p.handoff, p.handbuf = nil, nil
		p.smu.Unlock()
		if h == nil {
			continue
		}
		_, err := p.conn.Write(h)
		p.smu.Lock()
		if err == nil {
			if hb != nil {
				p.spare = hb[:0]
			}
			p.writing = false
			p.wdone.Broadcast()
			err = p.kickLocked(true)
		} else {
			p.writing = false
			p.wdone.Broadcast()
			p.smu.Unlock()
		}
		if err != nil {
			p.down(err, false)
			return
		}
	}
}

// readLoop is the connection's progress goroutine: it reads and serves frames
// until the connection breaks, polling for Spin after each request served.
func (p *peer) readLoop() {
	defer p.t.wg.Done()
	var rerr error
	err := p.rc.Read(func(uintptr) bool {
		for i := 0; ; i++ {
			p.rmu.Lock()
			n, err := p.pollLocked()
			p.rmu.Unlock()
			if err != nil {
				rerr = err
				return true
			}
			if n > 0 {
				i = 0
				continue
			}
			// Consult the clock every few empty polls only.
			if p.t.spin == 0 || i&15 == 15 && !p.busy() {
				return false // park in the netpoller until readable
			}
		}
	})
	if rerr == nil {
		rerr = err
	}
	if rerr == nil {
		rerr = io.EOF
	}
	p.down(rerr, false)
}

// busy reports whether the progress goroutine should keep polling instead of
// parking: it served a request within the last Spin, or a frame is partly
// received (the rest follows within microseconds). Called under rmu or by the
// progress goroutine between polls.
func (p *peer) busy() bool {
	return p.partial.Load() || time.Duration(time.Now().UnixNano()-p.lastServ.Load()) <= p.t.spin
}

// poll reads the connection from the waiting goroutine itself until seq is
// complete or spin has passed: a waiter that reads its own answer saves the
// netpoller's wake-up.
func (p *peer) poll(seq transport.Seq, spin time.Duration) {
	deadline := time.Now().Add(spin)
	for i := 0; p.comp.Completed() < seq; i++ {
		if p.rmu.TryLock() {
			n, err := p.pollLocked()
			p.rmu.Unlock()
			if err != nil {
				p.down(err, false)
				return
			}
			if n > 0 {
				continue
			}
		}
		if i&7 == 7 && time.Now().After(deadline) {
			return
		}
	}
}

var (
	errClosedRead = errors.New("connection closed")
	errBye        = transport.ErrPeerLeft
)

// pollLocked reads what the socket holds without blocking and serves every
// complete frame. It returns the bytes read (0 when there were none). The
// caller holds rmu.
//
// On a sealed connection it goes on while the opener holds whole records
// it took from the socket: bytes taken from the socket raise no readiness
// event any more (epoll reports an edge only if the socket is still
// readable when it looks), so a poller that left them (a waiter that got
// its own answer and stopped) would strand them, and with them the peer's
// requests, until more bytes came. Only whole records: the rest of a
// partial one is still to come and raises its event, and a peer that
// streams keeps a partial record buffered for as long as it streams —
// looping on that held the read token, which down needs, for the whole
// stream. It stops too once the peer is down (down is waiting for the
// token).
func (p *peer) pollLocked() (int, error) {
	total := 0
	for {
		n, err := p.pollOnce()
		total += n
		if err != nil || n == 0 || p.open == nil || !p.open.whole() || p.downed.Load() {
			return total, err
		}
	}
}

// pollOnce is one read of pollLocked and the serving of what it brought.
func (p *peer) pollOnce() (int, error) {
	if p.rclosed {
		return 0, errClosedRead
	}
	if p.dir.active {
		return p.pollDirect()
	}
	if p.rlen == len(p.rbuf) {
		return 0, fmt.Errorf("%w: receive buffer full", errFrame)
	}
	n, err := p.read(p.rbuf[p.rlen:])
	if n <= 0 {
		return 0, err
	}
	p.rlen += n
	off := 0
	for {
		f, m, err := parseFrame(p.rbuf[off:p.rlen])
		if err != nil {
			return 0, err
		}
		if m == 0 {
			break
		}
		if err := p.serve(&f); err != nil {
			return 0, err
		}
		off += m
	}
	if off > 0 {
		p.rlen = copy(p.rbuf, p.rbuf[off:p.rlen])
	}
	if err := p.maybeDirect(); err != nil {
		return 0, err
	}
	p.partial.Store(p.rlen > 0 || p.dir.active || p.open != nil && p.open.buffered())
	// Make room for the next frame if it is larger than the buffer.
	if p.rlen >= 4 {
		need := 4 + int(uint32(p.rbuf[0])<<24|uint32(p.rbuf[1])<<16|uint32(p.rbuf[2])<<8|uint32(p.rbuf[3]))
		if need > len(p.rbuf) && need <= 4+maxFrame {
			nb := make([]byte, need)
			copy(nb, p.rbuf[:p.rlen])
			p.rbuf = nb
		}
	}
	return n, p.answer()
}

// read reads the peer's bytes without blocking: (0, nil) when there are
// none yet; through the opener on a sealed connection.
func (p *peer) read(b []byte) (int, error) {
	if p.open != nil {
		return p.open.read(b, p.rawFn)
	}
	return p.rawRead(b)
}

// rawRead reads from the socket without blocking: (0, nil) when it has
// nothing.
func (p *peer) rawRead(b []byte) (int, error) {
	n, e := rawRead(p.fd, b)
	switch {
	case e == syscall.EAGAIN:
		return 0, nil
	case e != 0:
		return 0, e
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// answer sends the answers gathered while serving a batch, with one
// completion frame covering the requests not answered individually.
func (p *peer) answer() error {
	if p.served {
		p.served = false
		p.lastServ.Store(time.Now().UnixNano())
	}
	if p.lastReq > p.lastAns {
		p.reply = appendDone(p.reply, p.lastReq)
		p.lastAns = p.lastReq
	}
	if len(p.reply) == 0 && len(p.segs) == 0 {
		return nil
	}
	p.smu.Lock()
	if len(p.segs) > 0 {
		if !p.writing && p.serr == nil && p.seal == nil {
			err := p.sendGather()
			// Keep polling for Spin from when the answers left, which
			// can be long after the requests came: the next request
			// follows their receipt.
			p.lastServ.Store(time.Now().UnixNano())
			return err
		}
		// Another goroutine owns the socket: the payloads are copied
		// now, as they were at the time of the request.
		p.smu.Unlock()
		p.materialize()
		p.smu.Lock()
	}
	if len(p.sbuf) == 0 && !p.writing {
		p.sbuf, p.reply = p.reply, p.sbuf[:0] // hand the answers over without copying
	} else {
		p.sbuf = transport.Append(p.sbuf, p.reply) // in pieces: a batch of read answers can be large
		p.reply = p.reply[:0]
	}
	return p.kickLocked(false)
}

// directBytes is the payload size from which a write's data, or a read's
// answer, goes straight between the socket and its destination memory
// instead of through the connection's buffers.
const directBytes = 64 << 10

// A direct write is not copied word by word, so it must be larger than what
// the transport promises to store in whole words.
var _ [directBytes - transport.WordAtomicWrite - 1]struct{}

// direct is a large payload being received straight into its destination.
type direct struct {
	active bool
	typ    byte   // frameWrite or frameReadReply
	seq    uint64 // the operation's sequence
	dst    []byte // where the payload goes; nil to discard it
	n, got int    // payload length and bytes received so far
	err    error  // a write's error, answered once the payload is consumed
	pinned bool   // dst is pinned in the transport's memory
}

// maybeDirect switches to direct receipt when rbuf starts with the complete
// header of a large write or read answer.
func (p *peer) maybeDirect() error {
	if p.rlen < hdr {
		return nil
	}
	t := p.rbuf[4]
	write := t == frameWrite || t == frameWritePad
	if t != frameReadReply && t != frameReadReplyPad && (!write || raceBuild) {
		return nil
	}
	fl := fixedLen[t]
	if t == frameReadReplyPad || t == frameWritePad {
		// The padding's length is the last byte of the fixed fields.
		if p.rlen < 4+fl {
			return nil
		}
		if pad := int(p.rbuf[4+fl-1]); pad <= maxPad {
			fl += pad
		} else {
			return fmt.Errorf("%w: frame type %d with %d bytes of padding", errFrame, t, pad)
		}
	}
	n := int(binary.BigEndian.Uint32(p.rbuf)) - fl
	if n < directBytes || p.rlen < 4+fl {
		return nil
	}
	h := p.rbuf[hdr : 4+fl]
	d := direct{active: true, typ: frameReadReply, seq: binary.BigEndian.Uint64(h), n: n}
	if write {
		d.typ = frameWrite
		// Read answers of this batch still in memory go before the write
		// lands (and before the pin below: one pin at a time).
		if err := p.answerReads(); err != nil {
			return err
		}
		if d.seq <= p.lastReq {
			return fmt.Errorf("%w: request sequence %d after %d", errFrame, d.seq, p.lastReq)
		}
		// lastReq advances only when the payload has landed: until then no
		// completion may cover this write.
		dst, err := p.t.mem.Pin(p.t.memKey(transport.Key(binary.BigEndian.Uint32(h[8:]))), binary.BigEndian.Uint64(h[12:]), n)
		d.dst, d.err, d.pinned = dst, err, err == nil
	} else {
		p.pmu.Lock()
		ok := p.phead < len(p.pend) && uint64(p.pend[p.phead].seq) == d.seq && !p.pend[p.phead].atomic && len(p.pend[p.phead].dst) == n
		if ok {
			d.dst = p.pend[p.phead].dst
		}
		p.pmu.Unlock()
		if !ok || h[8] != transport.StatusOK {
			return fmt.Errorf("%w: unexpected answer to sequence %d", errFrame, d.seq)
		}
	}
	d.got = p.rlen - (4 + fl)
	if d.dst != nil {
		copy(d.dst, p.rbuf[4+fl:p.rlen])
	}
	p.rlen = 0
	p.dir = d
	if d.got == d.n {
		p.finishDirect()
	}
	return nil
}

// pollDirect reads the rest of a direct payload.
func (p *peer) pollDirect() (int, error) {
	d := &p.dir
	b := p.rbuf[:min(len(p.rbuf), d.n-d.got)] // discarded payload
	if d.dst != nil {
		b = d.dst[d.got:]
	}
	n, err := p.read(b)
	if n <= 0 {
		return 0, err
	}
	d.got += n
	if d.got == d.n {
		p.finishDirect()
		p.partial.Store(false)
	}
	return n, p.answer()
}

// finishDirect completes a direct payload. The caller holds rmu.
func (p *peer) finishDirect() {
	d := &p.dir
	if d.typ == frameWrite {
		if d.pinned {
			p.t.mem.Unpin()
		}
		p.lastReq, p.served = d.seq, true
		if d.err != nil {
			p.reply = appendReply(p.reply, frameWriteErr, d.seq, transport.StatusOf(d.err), 0, nil)
			p.lastAns = d.seq
		}
	} else {
		p.pmu.Lock()
		p.pend[p.phead] = pending{}
		p.phead++
		if p.phead == len(p.pend) {
			p.pend, p.phead = p.pend[:0], 0
		}
		p.pmu.Unlock()
		p.comp.Complete(transport.Seq(d.seq), nil)
	}
	p.dir = direct{}
}

// serve executes or completes one frame. The caller holds rmu.
func (p *peer) serve(f *frame) error {
	m := &p.t.mem
	if f.typ != frameRead {
		// Answers whose payload is still in memory go out before anything
		// else is executed or delivered, so that they hold the memory as it
		// was when they were served, in connection order.
		if err := p.answerReads(); err != nil {
			return err
		}
	}
	switch f.typ {
	case frameWrite, frameRead, frameCAS, frameFAdd:
		if f.seq <= p.lastReq {
			return fmt.Errorf("%w: request sequence %d after %d", errFrame, f.seq, p.lastReq)
		}
		p.lastReq = f.seq
		p.served = true
		key := p.t.memKey(transport.Key(f.key))
		switch f.typ {
		case frameWrite:
			if err := m.Write(key, f.off, f.data); err != nil {
				p.reply = appendReply(p.reply, frameWriteErr, f.seq, transport.StatusOf(err), 0, nil)
				p.lastAns = f.seq
			}
		case frameRead:
			if !raceBuild && int(f.a) >= directBytes {
				// The payload goes from memory to the socket when the
				// batch is answered (gather.go).
				p.segs = append(p.segs, seg{at: len(p.reply), seq: f.seq, key: key, off: f.off, n: int(f.a)})
				p.lastAns = f.seq
				break
			}
			at := len(p.reply)
			// The answers of one batch can add up to far more than a
			// frame: room grows the buffer, and m.Read fills it, in
			// pieces that leave the processor to other goroutines.
			p.reply = room(p.reply, fixedLen[frameReadReply]+int(f.a))
			p.reply = appendHeader(p.reply, frameReadReply, fixedLen[frameReadReply]+int(f.a))
			p.reply = binary.BigEndian.AppendUint64(p.reply, f.seq)
			p.reply = append(p.reply, transport.StatusOK)
			p.reply = p.reply[:len(p.reply)+int(f.a)]
			if err := m.Read(key, f.off, p.reply[len(p.reply)-int(f.a):]); err != nil {
				p.reply = appendReply(p.reply[:at], frameReadReply, f.seq, transport.StatusOf(err), 0, nil)
			}
			p.lastAns = f.seq
		case frameCAS, frameFAdd:
			var v uint64
			var err error
			if f.typ == frameCAS {
				v, err = m.CompareAndSwap64(key, f.off, f.a, f.b)
			} else {
				v, err = m.FetchAndAdd64(key, f.off, f.a)
			}
			p.reply = appendReply(p.reply, frameAtomicReply, f.seq, transport.StatusOf(err), v, nil)
			p.lastAns = f.seq
		}
	case frameMsg:
		if r := p.t.receiver(); r != nil {
			r.HandleMessage(p.rank, f.data)
		} else if len(p.early) < maxEarly {
			p.early = append(p.early, slices.Clone(f.data))
		}
	case frameBye:
		return errBye
	case frameDone:
		if f.seq > uint64(p.comp.Posted()) {
			return fmt.Errorf("%w: completion of unposted sequence %d", errFrame, f.seq)
		}
		p.comp.Complete(transport.Seq(f.seq), nil)
	case frameWriteErr:
		if f.seq > uint64(p.comp.Posted()) {
			return fmt.Errorf("%w: completion of unposted sequence %d", errFrame, f.seq)
		}
		p.comp.Complete(transport.Seq(f.seq), p.opErr(transport.ErrOfStatus(f.status)))
	case frameReadReply, frameAtomicReply:
		p.pmu.Lock()
		if p.phead == len(p.pend) || uint64(p.pend[p.phead].seq) != f.seq || p.pend[p.phead].atomic != (f.typ == frameAtomicReply) {
			p.pmu.Unlock()
			return fmt.Errorf("%w: unexpected answer to sequence %d", errFrame, f.seq)
		}
		pd := p.pend[p.phead]
		p.pend[p.phead] = pending{}
		p.phead++
		if p.phead == len(p.pend) {
			p.pend, p.phead = p.pend[:0], 0
		}
		p.pmu.Unlock()
		err := transport.ErrOfStatus(f.status)
		if err == nil {
			if f.typ == frameReadReply {
				if len(f.data) != len(pd.dst) {
					return fmt.Errorf("%w: read answer of %d bytes for %d", errFrame, len(f.data), len(pd.dst))
				}
				copy(pd.dst, f.data)
			} else if pd.res != nil {
				*pd.res = f.a
			}
		}
		p.comp.Complete(pd.seq, p.opErr(err))
	}
	return nil
}

// goodbye tells the peer this side closes on purpose and stops writing, then
// waits up to linger for the peer to close its side, so that nothing either
// side sent before is lost to a reset.
func (p *peer) goodbye(linger time.Duration) {
	p.smu.Lock()
	if p.serr != nil || p.conn == nil {
		p.smu.Unlock()
		return
	}
	p.sbuf = appendHeader(p.sbuf, frameBye, fixedLen[frameBye])
	err := p.kickLocked(true)
	deadline := time.Now().Add(linger)
	// Another goroutine may still be writing what was queued before the
	// goodbye: half-close only once everything is out.
	for err == nil && time.Now().Before(deadline) {
		p.smu.Lock()
		drained := !p.writing && len(p.sbuf) == 0
		p.smu.Unlock()
		if drained {
			p.conn.CloseWrite()
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	for !p.downed.Load() && err == nil && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
}

// down cuts the peer off for good: no more reads or processing, posts fail,
// pending operations fail, the connection closes. quiet skips the receiver's
// HandlePeerDown (used by Close). It must not be called with rmu or smu held.
func (p *peer) down(cause error, quiet bool) {
	if p.downed.Swap(true) {
		return
	}
	p.absent.Store(false) // failed before it was admitted: never admitted now
	close(p.dead)
	err := transport.ErrPeerDown(p.rank, cause)
	p.nudge.Stop()
	p.rmu.Lock()
	p.rclosed = true
	if p.dir.active && p.dir.pinned {
		p.t.mem.Unpin()
	}
	p.dir = direct{}
	p.rmu.Unlock()
	p.smu.Lock()
	p.serr = err
	p.wdone.Broadcast()
	conn := p.conn
	p.smu.Unlock()
	p.comp.Fail(err)
	if conn != nil {
		conn.Close()
	}
	if !quiet && !p.t.closed.Load() {
		if cause != errFenced && cause != errBye {
			p.t.log.Warn(fmt.Sprintf("tcp: lost rank %d: %v", p.rank, cause), ftrma.LogPeer, p.rank)
		}
		p.rmu.Lock()
		r := p.t.receiver()
		if r == nil {
			p.lateDown = err
		}
		p.rmu.Unlock()
		if r != nil {
			r.HandlePeerDown(p.rank, err)
		}
	}
}
