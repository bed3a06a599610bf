//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Target-executed regions: memory this rank registers that it did not take
// from Alloc (the caller's own, such as window.Create's buffer). Its peers
// cannot map it, so the rank executes their operations on it itself, as the
// tcp transport does, and the memory stays the caller's: what the owner
// stores into it, peers read, and what they write, the owner sees in place.
//
// Who writes what:
//   - The owner's key table entry for such a region holds key<<8|2 (a
//     mapped region's holds key<<8|1), no segment. The fast path wants |1
//     and takes the slow path; resolve reports errForeign.
//   - The origin then sends a request in its ring to the owner, tagged
//     internal in the frame header (pieceInternal), and waits for the answer
//     (the operation is complete when posted, as every shm operation is:
//     Completion stays immediate, and operations toward the peer stay in
//     order). A write or read larger than foreignPiece (32 KiB, less with
//     small rings: an answer must fit in one piece of the ring) goes in
//     several requests, one after another.
//   - The owner's progress goroutine executes a request through
//     transport.Memory (bounds, alignment, whole words, sync/atomic), unless
//     it fenced the origin: Fence raises its flag and then waits for a
//     request under way (p.serveMu), so nothing of the origin lands after
//     Fence returns. It answers in the origin's ring without ever waiting
//     for room: an answer that does not fit waits in p.outq for the next
//     poll (two progress goroutines answering into each other's full rings
//     would otherwise wait for each other).
//   - The origin's progress goroutine hands an answer to the waiting
//     operation. When the owner goes down (or this rank closes), every
//     operation waiting for it fails with the peer-down error.

// testHookServe runs in the owner's progress goroutine between the fence
// check and the execution of a request (tests).
var testHookServe atomic.Pointer[func()]

// RegistersForeign reports that Register takes memory not from Alloc, as a
// target-executed region (transport.ForeignRegistrar).
func (t *Transport) RegistersForeign() bool { return true }

// errForeign is resolve's verdict on a target-executed region.
var errForeign = errors.New("shm transport: a target-executed region")

// foreignChunk is the most data one request or answer carries; less where
// the rings are small (foreignPiece).
const foreignChunk = 32 << 10

// foreignPiece is the most data a request or answer of this job carries:
// an answer goes into the origin's ring in one piece, and every rank of a
// host has rings of one size (Config.RingBytes).
func (t *Transport) foreignPiece() int {
	return min(foreignChunk, (t.cfg.RingBytes/2-msgHeader-ansHeader)&^7)
}

// Request and answer kinds (the first byte of an internal message).
const (
	reqWrite = 1 + iota
	reqRead
	reqCAS
	reqFAdd
	reqAnswer
)

// reqHeader is a request's size before its data: kind, id, key, off, a, b,
// length (of a read).
const reqHeader = 1 + 8 + 4 + 8 + 8 + 8 + 4

// ansHeader is an answer's size before its data: kind, id, status, result.
const ansHeader = 1 + 8 + 1 + 8

// Answer statuses.
const (
	ansOK = iota
	ansUnknownRegion
	ansOutOfBounds
	ansMisaligned
	ansInvalid
)

// foreignTable is this rank's target-executed regions: transport.Memory
// holds them (and waits for the operations executing on one when it is
// deregistered), under keys of its own that keys translates to.
type foreignTable struct {
	mem  transport.Memory
	mu   sync.RWMutex
	keys map[transport.Key]transport.Key
}

func (f *foreignTable) register(key transport.Key, mem []byte) error {
	k, err := f.mem.Register(mem)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if f.keys == nil {
		f.keys = make(map[transport.Key]transport.Key)
	}
	f.keys[key] = k
	f.mu.Unlock()
	return nil
}

func (f *foreignTable) deregister(key transport.Key) {
	f.mu.Lock()
	k, ok := f.keys[key]
	delete(f.keys, key)
	f.mu.Unlock()
	if ok {
		f.mem.Deregister(k) // waits for the operations executing on it
	}
}

func (f *foreignTable) memKey(key transport.Key) transport.Key {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.keys[key] // 0: no region
}

// execute runs request q on the region it names and returns the answer's
// status, the result word, and data (a read's).
func (f *foreignTable) execute(q request) (status byte, result uint64, data []byte) {
	k := f.memKey(q.key)
	var err error
	switch q.kind {
	case reqWrite:
		err = f.mem.Write(k, q.off, q.data)
	case reqRead:
		data = make([]byte, q.n)
		err = f.mem.Read(k, q.off, data)
	case reqCAS:
		result, err = f.mem.CompareAndSwap64(k, q.off, q.a, q.b)
	case reqFAdd:
		result, err = f.mem.FetchAndAdd64(k, q.off, q.a)
	default:
		err = ftrma.ErrInvalid
	}
	switch {
	case err == nil:
		return ansOK, result, data
	case k == 0 || errors.Is(err, ftrma.ErrUnknownRegion):
		return ansUnknownRegion, 0, nil
	case errors.Is(err, ftrma.ErrOutOfBounds):
		return ansOutOfBounds, 0, nil
	case errors.Is(err, ftrma.ErrMisaligned):
		return ansMisaligned, 0, nil
	}
	return ansInvalid, 0, nil
}

// statusErr is the operation error of an answer's status.
func statusErr(s byte) error {
	switch s {
	case ansOK:
		return nil
	case ansUnknownRegion:
		return ftrma.ErrUnknownRegion
	case ansOutOfBounds:
		return ftrma.ErrOutOfBounds
	case ansMisaligned:
		return ftrma.ErrMisaligned
	}
	return fmt.Errorf("%w: shm transport: the target refused the request", ftrma.ErrInvalid)
}

// request is a decoded request.
type request struct {
	kind byte
	id   uint64
	key  transport.Key
	off  uint64
	a, b uint64
	n    uint32 // a read's length
	data []byte // a write's bytes
}

func (q request) append(b []byte) []byte {
	b = append(b, q.kind)
	b = binary.LittleEndian.AppendUint64(b, q.id)
	b = binary.LittleEndian.AppendUint32(b, uint32(q.key))
	b = binary.LittleEndian.AppendUint64(b, q.off)
	b = binary.LittleEndian.AppendUint64(b, q.a)
	b = binary.LittleEndian.AppendUint64(b, q.b)
	b = binary.LittleEndian.AppendUint32(b, q.n)
	return append(b, q.data...)
}

func parseRequest(m []byte) (request, bool) {
	if len(m) < reqHeader || m[0] < reqWrite || m[0] > reqFAdd {
		return request{}, false
	}
	q := request{kind: m[0], id: binary.LittleEndian.Uint64(m[1:]), key: transport.Key(binary.LittleEndian.Uint32(m[9:])),
		off: binary.LittleEndian.Uint64(m[13:]), a: binary.LittleEndian.Uint64(m[21:]), b: binary.LittleEndian.Uint64(m[29:]),
		n: binary.LittleEndian.Uint32(m[37:]), data: m[reqHeader:]}
	if q.kind == reqRead && q.n > foreignChunk || q.kind == reqWrite && len(q.data) > foreignChunk {
		return request{}, false
	}
	return q, true
}

// answer is a decoded answer, handed to the waiting operation.
type answer struct {
	status byte
	result uint64
	data   []byte
	err    error // the peer went down, or this rank closed: no answer
}

func appendAnswer(b []byte, id uint64, status byte, result uint64, data []byte) []byte {
	b = append(b, reqAnswer)
	b = binary.LittleEndian.AppendUint64(b, id)
	b = append(b, status)
	b = binary.LittleEndian.AppendUint64(b, result)
	return append(b, data...)
}

// foreignState is a peer's share of the machinery: the origin's waiting
// operations and the owner's answers not yet sent.
type foreignState struct {
	mu      sync.Mutex
	waiting map[uint64]chan answer // by request id; emptied for good once the peer is down (failed)
	failed  error                  // why waiting operations fail, once set
	nextID  atomic.Uint64
	// serveMu is held while the progress goroutine executes a request of
	// the peer: Fence takes it after raising its flag.
	serveMu sync.Mutex
	outq    [][]byte // answers that did not fit in the peer's ring yet (progress goroutine only)
}

// failWaiting fails every operation waiting for an answer of the peer, and
// every later one, with err.
func (p *peer) failWaiting(err error) {
	f := &p.foreign
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed != nil {
		return
	}
	f.failed = err
	for id, ch := range f.waiting {
		ch <- answer{err: err}
		delete(f.waiting, id)
	}
}

// remote runs o toward p's target-executed region key at off, in requests
// of at most foreignPiece bytes, each waited for. Its results are those of
// execute: opErr the operation's failure, status the peer's loss.
func (p *peer) remote(key transport.Key, off uint64, o *rma) (opErr, status error) {
	if o.kind != rmaWrite && o.kind != rmaRead {
		q := request{kind: reqCAS, key: key, off: off, a: o.a, b: o.b}
		if o.kind == rmaFAdd {
			q.kind = reqFAdd
		}
		a, err := p.ask(q)
		if err != nil {
			return nil, err
		}
		if a.status == ansOK && o.result != nil {
			*o.result = a.result
		}
		return statusErr(a.status), nil
	}
	buf := o.src
	kind := byte(reqWrite)
	if o.kind == rmaRead {
		buf, kind = o.dst, reqRead
	}
	piece := p.t.foreignPiece()
	for done := 0; done < len(buf) || done == 0; {
		n := min(len(buf)-done, piece)
		q := request{kind: kind, key: key, off: off + uint64(done)}
		if kind == reqWrite {
			q.data = buf[done : done+n]
		} else {
			q.n = uint32(n)
		}
		a, err := p.ask(q)
		if err != nil {
			return nil, err
		}
		if a.status != ansOK {
			return statusErr(a.status), nil
		}
		if kind == reqRead {
			if len(a.data) != n {
				return fmt.Errorf("%w: shm transport: rank %d answered a read of %d bytes with %d", ftrma.ErrInvalid, p.rank, n, len(a.data)), nil
			}
			copy(buf[done:done+n], a.data)
		}
		done += n
		if n == 0 {
			break
		}
	}
	return nil, nil
}

// ask sends request q to p and waits for its answer; the error is the
// peer's loss (a status for t.lost), or this rank's Close.
func (p *peer) ask(q request) (answer, error) {
	t := p.t
	if p.self { // this rank's own region: no message
		status, result, data := t.foreign.execute(q)
		return answer{status: status, result: result, data: data}, nil
	}
	f := &p.foreign
	ch := make(chan answer, 1)
	f.mu.Lock()
	if f.failed != nil {
		err := f.failed
		f.mu.Unlock()
		return answer{}, err
	}
	q.id = f.nextID.Add(1)
	if f.waiting == nil {
		f.waiting = make(map[uint64]chan answer)
	}
	f.waiting[q.id] = ch
	f.mu.Unlock()
	p.smu.Lock()
	status := t.sendLocked(p, q.append(make([]byte, 0, reqHeader+len(q.data))), true)
	p.smu.Unlock()
	if status != nil {
		f.mu.Lock()
		delete(f.waiting, q.id)
		f.mu.Unlock()
		return answer{}, status
	}
	a := <-ch
	return a, a.err
}

// serveInternal handles an internal message from p in the progress
// goroutine: a request to execute, or the answer to one of this rank's.
func (t *Transport) serveInternal(p *peer, m []byte) {
	if len(m) >= ansHeader && m[0] == reqAnswer {
		id := binary.LittleEndian.Uint64(m[1:])
		f := &p.foreign
		f.mu.Lock()
		ch := f.waiting[id]
		delete(f.waiting, id)
		f.mu.Unlock()
		if ch != nil {
			ch <- answer{status: m[9], result: binary.LittleEndian.Uint64(m[10:]), data: append([]byte(nil), m[ansHeader:]...)}
		}
		return
	}
	q, ok := parseRequest(m)
	if !ok {
		t.log.Warn(fmt.Sprintf("shm transport: a malformed request of %d bytes from rank %d, dropped", len(m), p.rank), ftrma.LogPeer, p.rank)
		return
	}
	f := &p.foreign
	f.serveMu.Lock()
	if atomic.LoadUint64(t.own.word(t.own.active(p.slot)+actFenced)) != 0 {
		f.serveMu.Unlock() // fenced: it lands nothing any more, and hears nothing
		return
	}
	if h := testHookServe.Load(); h != nil {
		(*h)()
	}
	status, result, data := t.foreign.execute(q)
	f.serveMu.Unlock()
	if len(data) > t.foreignPiece() { // a read larger than this job's origins ask for: refused, not left unanswered
		status, data = ansInvalid, nil
	}
	t.answer(p, appendAnswer(make([]byte, 0, ansHeader+len(data)), q.id, status, result, data))
}

// answer sends ans to p without waiting for room: what does not fit now
// waits in p's outq, sent in order by later polls.
func (t *Transport) answer(p *peer, ans []byte) {
	f := &p.foreign
	if len(f.outq) > 0 || !t.trySend(p, ans) {
		f.outq = append(f.outq, ans)
	}
}

// sendAnswers sends the answers waiting for room in p's ring, in order, as
// far as they fit, and reports whether it sent any.
func (t *Transport) sendAnswers(p *peer) bool {
	f := &p.foreign
	sent := 0
	for sent < len(f.outq) && t.trySend(p, f.outq[sent]) {
		sent++
	}
	f.outq = f.outq[sent:]
	if p.downErr() != nil {
		f.outq = nil // nobody waits for them any more
	}
	return sent > 0
}

// trySend puts msg, an internal message of one piece, into p's ring if it
// fits now, and reports whether it did (or p cannot be sent to any more,
// so that it need not be tried again).
func (t *Transport) trySend(p *peer, msg []byte) bool {
	if !p.smu.TryLock() {
		return false // an operation of this rank is sending: next poll
	}
	defer p.smu.Unlock()
	c, rg, err := t.ownRing(p)
	if err != nil {
		return true
	}
	defer p.mu.RUnlock()
	if t.sendable(p, c) != nil {
		return true
	}
	if len(msg) > rg.maxPiece() {
		return true // cannot be: answers are at most foreignChunk plus a header
	}
	tail := atomic.LoadUint64(rg.tail)
	room, ok := rg.room(atomic.LoadUint64(rg.head), tail)
	if !ok {
		return true
	}
	if room < msgHeader+uint64(len(msg)+7)&^7 {
		return false
	}
	atomic.StoreUint64(rg.tail, rg.put(tail, msg, false, true))
	ringDoorbell(c, p.bell)
	return true
}
