package tcp

import (
	"encoding/binary"
	"syscall"
	"unsafe"

	"github.com/ftrma/ftrma/transport"
)

// Large read answers go from the target's registered memory straight to the
// socket. serve notes where in reply such an answer goes (a seg); answer
// then writes the queued frames, reply, and each answer's header and
// payload with writev, holding the payload's region (Memory.Pin) only for
// the non-blocking system call that copies it into the socket. What the
// socket does not take at once is copied into a buffer and left to the
// writer goroutine, as any answer, so that no region stays pinned while the
// peer is slow to read (a pinned region holds up Deregister, and behind it
// every operation on the transport's memory).
//
// A seg is sent before the connection's next frame other than a read is
// executed or delivered (serve, maybeDirect): the answer holds the memory as
// it was when the read was served, in connection order. When another
// goroutine is writing the socket, the payloads are copied at once instead
// (materialize), as smaller answers always are.
//
// Alignment: the kernel copies a payload from memory into the socket's
// pages with a string move, which some processors (AMD Zen here) run
// several times slower when the destination lies less than 64 bytes after
// the source modulo 4096: a page-aligned window read behind a 14-byte
// header took 300 µs of system time per MiB instead of 120. The socket's
// page starts afresh at each write once the peer has consumed what came
// before, as between the answers of a request and its reply, so an answer
// sent from memory is a frameReadReplyPad whose padding puts the payload at
// the same offset modulo 64 from the start of the write as in memory; a
// large write goes as a frameWritePad for the same reason (postDirect). When
// the page does not start afresh (what the peer has not consumed still
// holds it), the padding does no harm. The receiving side's copy, into a
// destination usually aligned as the source, is then aligned too.

// seg is a read answer whose payload is still in memory: it goes at
// reply[at], and its payload is the n bytes at off of t.mem's region key.
type seg struct {
	at  int
	seq uint64
	key transport.Key
	off uint64
	n   int
}

// answerReads sends the answers gathered so far when some payload is still
// in memory. The caller holds rmu and no pin.
func (p *peer) answerReads() error {
	if len(p.segs) == 0 {
		return nil
	}
	return p.answer()
}

// appendAnswers appends to b the bytes reply[from:] with each of segs (all
// at or after from) inserted as a frameReadReply, its payload copied from
// memory now; an answer whose region is gone or too small reports it.
func (p *peer) appendAnswers(b, reply []byte, from int, segs []seg) []byte {
	for _, s := range segs {
		b = transport.Append(b, reply[from:s.at])
		from = s.at
		b = room(b, fixedLen[frameReadReply]+s.n)
		at := len(b)
		b = appendHeader(b, frameReadReply, fixedLen[frameReadReply]+s.n)
		b = append(binary.BigEndian.AppendUint64(b, s.seq), transport.StatusOK)
		n := len(b)
		b = b[:n+s.n]
		if err := p.t.mem.Read(s.key, s.off, b[n:]); err != nil {
			b = appendReply(b[:at], frameReadReply, s.seq, transport.StatusOf(err), 0, nil)
		}
	}
	return transport.Append(b, reply[from:])
}

// materialize copies the payloads of segs into reply. The caller holds rmu
// and no pin.
func (p *peer) materialize() {
	b := p.appendAnswers(p.spareRep[:0], p.reply, 0, p.segs)
	p.spareRep = p.reply[:0]
	p.reply = b
	p.segs = p.segs[:0]
}

// sendGather writes the queued frames and the gathered answers, payloads
// straight from memory, without blocking; what the socket does not take is
// copied and handed to the writer goroutine. Called with smu held, the
// socket free and the peer up; returns with smu released. The caller holds
// rmu and no pin.
func (p *peer) sendGather() error {
	p.writing, p.held = true, false
	pre := p.sbuf
	p.sbuf, p.spare = p.spare[:0], nil
	p.smu.Unlock()
	rest, err := p.gather(pre, p.reply, p.segs)
	p.reply, p.segs = p.reply[:0], p.segs[:0]
	p.smu.Lock()
	if err != nil {
		p.writing = false
		p.wdone.Broadcast()
		p.smu.Unlock()
		return err
	}
	p.spare = pre[:0]
	if len(rest) > 0 {
		p.handoff, p.handbuf = rest, nil // rest is p.rest: kept for the next gather
		p.smu.Unlock()
		select {
		case p.wakeWrit <- struct{}{}:
		default:
		}
		return nil
	}
	p.writing = false
	p.wdone.Broadcast()
	// Frames posted meanwhile.
	return p.kickLocked(false)
}

// gather writes pre, then reply with the answers of segs inserted, as far
// as the socket takes them without blocking, and returns the rest, copied
// into p.rest. Only the goroutine that owns writing calls it.
func (p *peer) gather(pre, reply []byte, segs []seg) ([]byte, error) {
	m := &p.t.mem
	from, sent := 0, 0 // sent: bytes of this gather's earlier writes
	for i, s := range segs {
		mem, err := m.Pin(s.key, s.off, s.n)
		var hdr []byte
		if err != nil {
			hdr = appendReply(p.hdr[:0], frameReadReply, s.seq, transport.StatusOf(err), 0, nil)
		} else {
			at := sent + len(pre) + s.at - from + padHdr // the payload's offset with no padding
			pad := int(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))-uintptr(at)) & maxPad
			hdr = appendPadHeader(p.hdr[:0], s.seq, pad, s.n)
		}
		parts := [4][]byte{pre, reply[from:s.at], hdr, mem}
		n, werr := p.writev(parts[:])
		if werr == nil && n < p.iovN {
			// The socket is full: copy what is left while the region is
			// still pinned.
			rest := appendUnwritten(p.rest[:0], parts[:], n)
			if mem != nil {
				m.Unpin()
			}
			p.rest = p.appendAnswers(rest, reply, s.at, segs[i+1:])
			return p.rest, nil
		}
		if mem != nil {
			m.Unpin()
		}
		if werr != nil {
			return nil, werr
		}
		sent += n
		pre, from = nil, s.at
	}
	parts := [2][]byte{pre, reply[from:]}
	n, err := p.writev(parts[:])
	if err != nil || n == p.iovN {
		return nil, err
	}
	p.rest = appendUnwritten(p.rest[:0], parts[:], n)
	return p.rest, nil
}

// appendUnwritten appends to b what follows the first n bytes of parts.
func appendUnwritten(b []byte, parts [][]byte, n int) []byte {
	for _, q := range parts {
		if n >= len(q) {
			n -= len(q)
			continue
		}
		b = transport.Append(b, q[n:])
		n = 0
	}
	return b
}

// writev writes parts as far as the socket takes them without blocking and
// returns the bytes written; p.iovN is their total. Only the goroutine that
// owns writing calls it.
func (p *peer) writev(parts [][]byte) (int, error) {
	p.iov, p.iovN = p.iov[:0], 0
	for _, q := range parts {
		if len(q) > 0 {
			v := syscall.Iovec{Base: unsafe.SliceData(q)}
			v.SetLen(len(q))
			p.iov = append(p.iov, v)
			p.iovN += len(q)
		}
	}
	p.wn, p.werr = 0, nil
	if p.iovN > 0 {
		if err := p.rc.Write(p.iovFn); err != nil && p.werr == nil {
			p.werr = err
		}
	}
	clear(p.iov) // hold no memory
	return p.wn, p.werr
}

// writevSome is writev's callback: it writes p.iov until done or EAGAIN.
func (p *peer) writevSome(fd uintptr) bool {
	iov := p.iov
	for len(iov) > 0 {
		m, e := rawWritev(int(fd), iov)
		if e == syscall.EAGAIN {
			return true
		}
		if e != 0 {
			p.werr = e
			return true
		}
		p.wn += m
		for len(iov) > 0 && m >= int(iov[0].Len) {
			m -= int(iov[0].Len)
			iov = iov[1:]
		}
		if m > 0 {
			iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), m))
			iov[0].SetLen(int(iov[0].Len) - m)
		}
	}
	return true
}
