//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// ring is a single-producer single-consumer byte ring in a receiver's
// control segment, carrying the messages of one sender. Positions count
// bytes since the start and only grow; a position's place in data is the
// position modulo its length. A message is an 8-byte header holding its
// length, then its bytes, padded to a multiple of 8, possibly wrapping past
// the end of data.
type ring struct {
	head, tail *uint64
	closed     *uint32
	space      *uint32
	waiting    *uint32
	data       []byte
}

// room returns the free bytes, or false if the positions are impossible.
func (rg *ring) room(head, tail uint64) (uint64, bool) {
	used := tail - head
	if used > uint64(len(rg.data)) || used%8 != 0 {
		return 0, false
	}
	return uint64(len(rg.data)) - used, true
}

// pieceMore, in a message header, says that the message goes on in the
// next one: a message larger than maxPiece goes in pieces. pieceInternal
// says that the message is the transport's own (foreign.go), not the
// receiver's.
const (
	pieceMore     = 1 << 63
	pieceInternal = 1 << 62
)

// maxPiece is the largest piece of a message in the ring: half of it, so
// that the sender can write a piece while the receiver reads the last.
func (rg *ring) maxPiece() int { return (len(rg.data)/2 - msgHeader) &^ 7 }

// put writes msg, a piece of at most maxPiece bytes, at position tail and
// returns the position after it; more says that another piece of the same
// message follows, internal that the message is the transport's own. The
// caller has checked the room.
func (rg *ring) put(tail uint64, msg []byte, more, internal bool) uint64 {
	n := uint64(len(rg.data))
	at := tail % n
	h := uint64(len(msg))
	if more {
		h |= pieceMore
	}
	if internal {
		h |= pieceInternal
	}
	raceReleaseRing()
	binary.LittleEndian.PutUint64(rg.data[at:at+msgHeader], h)
	at = (at + msgHeader) % n
	k := copy(rg.data[at:], msg)
	copy(rg.data, msg[k:])
	return tail + msgHeader + uint64(len(msg)+7)&^7
}

// take copies the piece at position head into buf and returns its length,
// whether more pieces of its message follow, whether the message is the
// transport's own, and the position after it. tail is the published
// producer position.
func (rg *ring) take(head, tail uint64, buf []byte) (int, bool, bool, uint64, error) {
	size := uint64(len(rg.data))
	avail := tail - head
	if avail > size || avail%8 != 0 || avail < msgHeader {
		return 0, false, false, 0, fmt.Errorf("%w: ring positions %d and %d", errCorrupt, head, tail)
	}
	raceAcquireRing()
	at := head % size
	h := binary.LittleEndian.Uint64(rg.data[at : at+msgHeader])
	m, more, internal := h&^(pieceMore|pieceInternal), h&pieceMore != 0, h&pieceInternal != 0
	if m > uint64(len(buf)) || msgHeader+(m+7)&^7 > avail {
		return 0, false, false, 0, fmt.Errorf("%w: piece of %d bytes with %d published and room for %d", errCorrupt, m, avail, len(buf))
	}
	at = (at + msgHeader) % size
	k := copy(buf[:m], rg.data[at:])
	copy(buf[k:m], rg.data)
	return int(m), more, internal, head + msgHeader + (m+7)&^7, nil
}

// ringDoorbell wakes the rank whose control segment is c, and whose bell
// is open as fd, if it said it sleeps. Call it after publishing: the owner
// says so before it looks at its rings one last time, so either it sees
// what was published or the ringer sees it sleeping.
func ringDoorbell(c *ctl, fd int) {
	if atomic.LoadUint32(c.word32(offSleeping)) != 0 {
		ringFD(fd)
	}
}

// minRoomPause is the first pause of a sender waiting for room.
const minRoomPause = 50 * time.Microsecond

// maxHeldSelf bounds the messages to self held before a receiver is set.
const maxHeldSelf = 4096

// Send copies msg, at most transport.MaxControlMessage bytes, into peer's
// ring for this rank and rings peer's doorbell; peer's progress goroutine
// delivers it, after the messages this rank sent before (operations posted
// before it have taken effect already). If the ring is full, Send waits for
// room (spinning for Config.Spin, then parking) until the peer consumes,
// goes down or closes. A message to self is queued for this rank's progress
// goroutine and never waits.
//
// It fails with ftrma.ErrInvalid for a message too large or a peer that has
// not opened its transport yet, ftrma.ErrRankOutOfRange, ftrma.ErrClosed,
// or the peer-down error (wrapping ftrma.ErrProcFailed), also when the peer
// goes down while Send waits. A Receiver that sends must keep in mind that
// Send can wait for the peer: two ranks whose receivers send to each other
// through full rings would wait for each other.
func (t *Transport) Send(r ftrma.Rank, msg []byte) error {
	p, err := t.peer("send", r)
	if err != nil {
		return err
	}
	if len(msg) > transport.MaxControlMessage {
		return &ftrma.OpError{Op: "send", Rank: r, Err: fmt.Errorf("%w: shm transport: message of %d bytes exceeds %d", ftrma.ErrInvalid, len(msg), transport.MaxControlMessage)}
	}
	if p.self {
		t.selfMu.Lock()
		if t.receiver() != nil || len(t.selfQ) < maxHeldSelf {
			t.selfQ = append(t.selfQ, slices.Clone(msg))
		}
		t.selfMu.Unlock()
		t.wake()
		return nil
	}
	if err := p.downErr(); err != nil {
		return err
	}
	p.smu.Lock()
	status := t.sendLocked(p, msg, false)
	p.smu.Unlock()
	if status != nil {
		return t.lost("send", p, status)
	}
	return nil
}

// sendLocked does Send's work under p.smu and returns a status for t.lost;
// internal marks a message of the transport's own (foreign.go).
func (t *Transport) sendLocked(p *peer, msg []byte, internal bool) error {
	c, rg, err := t.ownRing(p)
	if err != nil {
		return err
	}
	defer p.mu.RUnlock()
	piece := rg.maxPiece()
	for {
		n := min(len(msg), piece)
		more := n < len(msg)
		if err := t.awaitRoom(p, c, &rg, msgHeader+uint64(n+7)&^7); err != nil {
			return err
		}
		atomic.StoreUint64(rg.tail, rg.put(atomic.LoadUint64(rg.tail), msg[:n], more, internal))
		ringDoorbell(c, p.bell)
		if !more {
			return nil
		}
		msg = msg[n:]
	}
}

// ownRing returns p's control segment and this rank's ring in it,
// reserved, with p.mu held for reading (the caller lets go), or a status
// for t.lost. The caller holds p.smu.
func (t *Transport) ownRing(p *peer) (*ctl, ring, error) {
	c, err := p.lockCtl()
	if err != nil {
		return nil, ring{}, err
	}
	if !p.ringReady {
		if err := t.reserveRing(p, c); err != nil {
			p.mu.RUnlock()
			return nil, ring{}, err
		}
		p.ringReady = true
	}
	return c, c.ring(t.selfSlot), nil
}

// awaitRoom waits until rg, this rank's ring in p's segment c, has need
// bytes free, and returns a status for t.lost if nothing more can be sent
// to p.
func (t *Transport) awaitRoom(p *peer, c *ctl, rg *ring, need uint64) error {
	tail := atomic.LoadUint64(rg.tail)
	var deadline time.Time
	pause := minRoomPause
	for i := 0; ; i++ {
		room, ok := rg.room(atomic.LoadUint64(rg.head), tail)
		if !ok {
			return errCorrupt
		}
		if room >= need {
			break
		}
		if status := t.sendable(p, c); status != nil {
			return status
		}
		if t.cfg.Spin > 0 {
			if i == 0 {
				deadline = time.Now().Add(t.cfg.Spin)
			}
			if i&15 != 15 || time.Now().Before(deadline) {
				continue
			}
		}
		// Park until the receiver frees room. It rings this rank's bell
		// after moving head if waiting is set, and the progress goroutine
		// wakes the waiters of t.room: taking the channel, then setting
		// waiting, then reading head means one of the two sides sees the
		// other. A ring the progress goroutine did not hear at once (it
		// was busy) costs at most the pause, which grows to parkTimeout.
		ch := t.room.channel()
		atomic.StoreUint32(rg.waiting, 1)
		if room, ok := rg.room(atomic.LoadUint64(rg.head), tail); !ok || room < need {
			timer := time.NewTimer(pause)
			select {
			case <-ch:
			case <-timer.C:
			}
			timer.Stop()
			pause = min(2*pause, parkTimeout)
		}
		atomic.StoreUint32(rg.waiting, 0)
	}
	return t.sendable(p, c)
}

// reserveRing reserves the data of this rank's ring in p's control segment
// before the first message goes into it (Open reserves only the rest of the
// segment, so that the rings of ranks that never talk take no memory). It
// returns a status for t.lost.
func (t *Transport) reserveRing(p *peer, c *ctl) error {
	path := filepath.Join(t.cfg.Dir, ctlName(t.cfg.Job, p.rank))
	off, n := c.lay.ringDataRange(t.selfSlot)
	err := reserveRange(path, off, n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return transport.ErrPeerLeft // its files are gone: it closed, or died and was cleaned up
	}
	return fmt.Errorf("shm transport: reserve the %d-byte ring to rank %d in %s: %w", n, p.rank, path, err)
}

// sendable reports why nothing more can be sent to p, or nil.
func (t *Transport) sendable(p *peer, c *ctl) error {
	switch {
	case t.closed.Load():
		return errGone
	case p.downErr() != nil:
		return errGone
	case atomic.LoadUint64(c.word(c.active(t.selfSlot)+actFenced)) != 0:
		return errFencedByPeer
	case atomic.LoadUint64(c.word(offState)) != stateOpen:
		return stateStatus(atomic.LoadUint64(c.word(offState)))
	}
	return nil
}
