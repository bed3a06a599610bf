//go:build linux

package shm

import (
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma/transport"
)

// parkTimeout bounds a park on the bell, so that a wake-up lost to a process
// that died between publishing and ringing costs only this much.
const parkTimeout = 10 * time.Millisecond

// run is the progress goroutine: it delivers the messages of the incoming
// rings, messages to self and peer-down events to the receiver, busy-polls
// for Config.Spin after the last thing it did, then parks on the doorbell.
func (t *Transport) run() {
	defer t.wg.Done()
	buf := make([]byte, transport.MaxControlMessage)
	sleeping := t.own.word32(offSleeping)
	var spinUntil, watched time.Time
	for busy := 0; !t.stop.Load(); {
		if t.poll(buf) {
			busy++
			if t.cfg.Spin > 0 || busy%64 == 0 {
				now := time.Now()
				spinUntil = now.Add(t.cfg.Spin)
				if now.Sub(watched) >= parkTimeout { // busy for long: look anyway
					t.watchPeers()
					watched = now
				}
			}
			continue
		}
		busy = 0
		if t.cfg.Spin > 0 && time.Now().Before(spinUntil) {
			continue
		}
		t.watchPeers()
		watched = time.Now()
		// Senders ring the bell after publishing if sleeping is set:
		// sleeping is set before the rings are polled once more, so either
		// the poll sees the message or the sender sees sleeping (and the
		// ring waits in the bell).
		atomic.StoreUint32(sleeping, 1)
		if !t.stop.Load() && !t.poll(buf) {
			t.bell.wait(parkTimeout)
		}
		atomic.StoreUint32(sleeping, 0)
		t.room.broadcast() // the ring may have been for a sender of this rank
	}
}

// poll delivers what is ready and reports whether it did anything.
func (t *Transport) poll(buf []byte) bool {
	did := false
	r := t.receiver()
	if r != nil {
		for _, p := range t.local {
			if p.notify.Load() && p.notify.CompareAndSwap(true, false) {
				r.HandlePeerDown(p.rank, p.downErr())
				did = true
			}
		}
		t.selfMu.Lock()
		q := t.selfQ
		t.selfQ = nil
		t.selfMu.Unlock()
		for _, m := range q {
			r.HandleMessage(t.cfg.Rank, m)
		}
		did = did || len(q) > 0
	}
	for _, p := range t.local {
		if len(p.foreign.outq) > 0 && t.sendAnswers(p) {
			did = true
		}
		// An absent peer's messages wait in its ring until Admit.
		if !p.self && !p.rstop.Load() && !p.absent.Load() && t.pollRing(p, r, buf) {
			did = true
		}
	}
	return did
}

// maxBatch bounds the messages taken from one ring in a row, for fairness.
const maxBatch = 64

// pollRing delivers the messages waiting in p's ring (when there is a
// receiver), and reports p down once it closed and its ring is drained.
func (t *Transport) pollRing(p *peer, r transport.Receiver, buf []byte) bool {
	rg := &p.in
	tail := atomic.LoadUint64(rg.tail)
	if tail == p.rhead {
		// The sender flags its ring after publishing its last message.
		if atomic.LoadUint32(rg.closed) != 0 && atomic.LoadUint64(rg.tail) == p.rhead {
			t.down(p, transport.ErrPeerLeft, false)
			return true
		}
		return false
	}
	if r == nil {
		return false // held in the ring until a receiver is set
	}
	for k := 0; k < maxBatch && p.rhead != tail; k++ {
		// A piece goes into buf, or after the pieces before it of the same
		// message, gathered in p.pieces.
		dst := buf
		if p.piecing {
			dst = p.pieces[len(p.pieces):cap(p.pieces)]
		}
		n, more, internal, next, err := rg.take(p.rhead, tail, dst)
		if err != nil {
			t.down(p, err, false)
			return true
		}
		p.rhead = next
		atomic.StoreUint64(rg.head, next)
		if atomic.LoadUint32(rg.waiting) != 0 {
			p.freedRoom()
		}
		if p.rstop.Load() {
			return true
		}
		msg := dst[:n]
		switch {
		case more && !p.piecing:
			if p.pieces == nil {
				p.pieces = make([]byte, 0, transport.MaxControlMessage)
			}
			p.pieces = append(p.pieces[:0], msg...)
			p.piecing = true
			continue
		case more:
			p.pieces = p.pieces[:len(p.pieces)+n]
			continue
		case p.piecing:
			msg = p.pieces[:len(p.pieces)+n]
			p.piecing = false
		}
		if internal {
			t.serveInternal(p, msg)
			continue
		}
		r.HandleMessage(p.rank, msg)
	}
	return true
}

// watchPeers looks at the flags of the mapped peers: a peer that fenced
// this rank is down; a peer that closed is down once its ring is drained.
func (t *Transport) watchPeers() {
	for _, p := range t.local {
		if p.self || p.rstop.Load() || p.absent.Load() {
			continue
		}
		var fenced, closed, exited bool
		p.mu.RLock()
		if c := p.ctl; c != nil {
			fenced = atomic.LoadUint64(c.word(c.active(t.selfSlot)+actFenced)) != 0
			st := atomic.LoadUint64(c.word(offState))
			closed, exited = st != stateOpen, st == stateExited
		}
		p.mu.RUnlock()
		switch {
		case fenced:
			t.down(p, errFencedByPeer, false)
		case exited:
			t.exited(p)
		case closed:
			p.fail(transport.ErrPeerDown(p.rank, transport.ErrPeerLeft))
			// A peer that sent flagged its ring before closing: pollRing
			// reports it once drained. One that never mapped this rank left
			// its ring empty.
			if atomic.LoadUint64(p.in.tail) == p.rhead {
				t.down(p, transport.ErrPeerLeft, false)
			}
		}
	}
}
