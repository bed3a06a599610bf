//go:build linux && cgo && verbs

package verbs

/*
#include <stdlib.h>
#include "ibv.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// errFenced is the cause of a peer this rank fenced.
var errFenced = errors.New("fenced by this rank")

// pollSend takes the send CQ's completions and completes their entries. The
// caller holds t.pollMu. It reports whether it found any.
func (t *Transport) pollSend() bool {
	if t.cqGone {
		return false
	}
	return t.takeSend(int(C.ftv_poll(t.scq, 32, t.swc)))
}

// takeSend completes the entries of the first n completions in t.swc (n <= 0:
// none). The caller holds t.pollMu and no peer's lock. It reports whether
// there were any.
func (t *Transport) takeSend(n int) bool {
	if n <= 0 {
		return false
	}
	for _, wc := range unsafe.Slice(t.swc, n) {
		r := int(wc.wr_id)
		if r < 0 || r >= len(t.peers) {
			continue
		}
		t.peers[r].completed(wc.status, wc.vendor_err)
	}
	return true
}

// completed handles the completion of the oldest entry toward p (completions
// of one queue pair arrive in posting order).
func (p *peer) completed(status, vendor C.uint32_t) {
	p.mu.Lock()
	if p.dead || p.n == 0 {
		p.mu.Unlock() // a flushed request of a peer already down
		return
	}
	if status != C.IBV_WC_SUCCESS {
		p.mu.Unlock()
		err := fmt.Errorf("verbs: completion toward rank %d: %s (status %d, vendor error %#x)",
			p.rank, C.GoString(C.ftv_status_str(C.int(status))), int(status), uint32(vendor))
		if p.self {
			p.t.selfFailed(p, err)
			return
		}
		p.t.down(p, err)
		return
	}
	e := p.pop()
	switch e.kind {
	case kRead:
		copy(e.dst, unsafe.Slice((*byte)(e.stage), len(e.dst)))
	case kCAS, kFAdd:
		if e.result != nil {
			*e.result = *(*uint64)(e.stage)
		}
	case kFetch:
		w := (*[4]uint64)(e.stage)
		reg := region{addr: w[1], len: w[2], rkey: uint32(w[3])}
		if transport.Key(w[0]) != e.fetch.key {
			reg = region{gone: true}
		}
		p.keys[e.fetch.key] = reg
		delete(p.fetching, e.fetch.key)
		close(e.fetch.done)
	}
	p.ring.tail = e.end
	if e.seq != 0 {
		p.comp.Complete(e.seq, nil)
	}
	// Placeholders behind it complete now, in order.
	for p.n > 0 && p.fifo[p.head].kind == kLocal {
		l := p.pop()
		p.comp.Complete(l.seq, l.err)
	}
	if len(p.backlog) > 0 {
		p.drainLocked() // a failure marks the peer down by itself
	}
	p.mu.Unlock()
	select {
	case p.space <- struct{}{}:
	default:
	}
}

func (p *peer) pop() entry {
	e := p.fifo[p.head]
	p.fifo[p.head] = entry{}
	p.head = (p.head + 1) % len(p.fifo)
	p.n--
	if e.kind != kLocal {
		p.t.inflight.Add(-1)
	}
	return e
}

// await waits for ch, polling the send CQ itself while it spins (for up to
// the configured spin, or spin if larger), then parks: the progress
// goroutine completes what arrives after that.
func (t *Transport) await(ch <-chan struct{}, spin time.Duration) {
	spin = max(spin, t.cfg.Spin)
	if spin > 0 {
		deadline := time.Now().Add(spin)
		for i := 0; ; i++ {
			select {
			case <-ch:
				return
			default:
			}
			if t.pollMu.TryLock() {
				t.pollSend()
				t.pollMu.Unlock()
			}
			if i&15 == 15 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
	}
	// Then poll now and then: the progress goroutine may be busy (or not
	// started yet), and what is awaited needs someone to take completions.
	t.armSend()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ch:
			return
		case <-t.done:
			return
		case <-tick.C:
		}
		if t.pollMu.TryLock() {
			t.pollSend()
			t.pollMu.Unlock()
		}
	}
}

// Wait blocks until operation seq toward peer, and every one before it, is
// complete, polling the completion queue itself while it spins.
func (t *Transport) Wait(ctx context.Context, peer ftrma.Rank, seq transport.Seq) error {
	p, err := t.peerOf("wait", peer)
	if err != nil {
		return err
	}
	if p.comp.Completed() < seq {
		t.spinFor(ctx, p, seq)
	}
	err = p.comp.Wait(ctx, seq, 0)
	if err != nil && ctx.Err() != nil && p.comp.Down() == nil {
		t.log.Warn(fmt.Sprintf("verbs transport: gave up waiting for operation %d toward rank %d: %s", seq, peer, p.state()), ftrma.LogPeer, peer)
	}
	return err
}

// Test reports whether operation seq toward peer is complete, and then the
// error Wait would return (transport.Tester). When it is not, the send CQ
// is polled once and armed, so the progress goroutine completes it later.
func (t *Transport) Test(peer ftrma.Rank, seq transport.Seq) (bool, error) {
	p, err := t.peerOf("test", peer)
	if err != nil {
		return true, err
	}
	if p.comp.Completed() < seq && p.comp.Down() == nil {
		t.armSend()
	}
	return p.comp.Test(seq)
}

// spinFor busy-polls the send CQ for up to the configured spin while
// operation seq toward p is incomplete: in C, one call until completions
// come or the time is up (or spinSlice passed, to look at ctx), so a
// synchronous operation costs one cgo call here and no goroutine switch.
// When it is still incomplete after that, the send CQ is armed, so that the
// progress goroutine completes it and wakes the caller, who parks.
func (t *Transport) spinFor(ctx context.Context, p *peer, seq transport.Seq) {
	done := func() bool { return p.comp.Completed() >= seq || p.comp.Down() != nil }
	if t.cfg.Spin > 0 {
		deadline := time.Now().Add(t.cfg.Spin)
		for !done() && ctx.Err() == nil {
			left := min(time.Until(deadline), spinSlice)
			if left <= 0 {
				break
			}
			if !t.pollMu.TryLock() {
				runtime.Gosched() // another goroutine polls: it completes ours too
				continue
			}
			if !t.cqGone {
				t.takeSend(int(C.ftv_poll_spin(t.scq, 32, t.swc, C.int64_t(left))))
			}
			t.pollMu.Unlock()
			if statsOn {
				t.stats.spins.Add(1)
			}
		}
	}
	if !done() {
		if statsOn {
			t.stats.parks.Add(1)
		}
		t.armSend()
	} else if statsOn && t.cfg.Spin > 0 {
		t.stats.spinsDone.Add(1)
	}
}

// spinSlice is the longest a waiter polls in C without looking at its
// context.
const spinSlice = time.Millisecond

// armSend makes the send CQ raise an event at its next completion (unless
// it is armed already and the event not yet taken), then polls it once: a
// completion that came before the arming raises no event.
func (t *Transport) armSend() {
	t.pollMu.Lock()
	defer t.pollMu.Unlock()
	if t.cqGone {
		return
	}
	if t.scqArmed.CompareAndSwap(false, true) {
		C.ftv_req_notify(t.scq)
	}
	t.pollSend()
}

// state describes the requests toward p, for a wait that gave up.
func (p *peer) state() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	oldest, reads := "none", 0
	if p.n > 0 {
		oldest = opNames[p.fifo[p.head].kind]
	}
	for i := range p.n {
		switch p.fifo[(p.head+i)%len(p.fifo)].kind {
		case kRead, kCAS, kFAdd, kFetch:
			reads++
		}
	}
	return fmt.Sprintf("posted %d, completed %d, %d requests in flight (oldest: %s), %d reads or atomics, %d fragments backlogged, staging %d..%d",
		p.comp.Posted(), p.comp.Completed(), p.n, oldest, reads, len(p.backlog), p.ring.tail, p.ring.head)
}

// Flush waits until every operation posted toward peer is complete.
func (t *Transport) Flush(ctx context.Context, peer ftrma.Rank) error {
	if peer >= 0 && int(peer) < len(t.peers) {
		p := t.peers[peer]
		if err := t.Wait(ctx, peer, p.comp.Posted()); err != nil {
			return err
		}
		return p.comp.Down()
	}
	_, err := t.peerOf("flush", peer)
	return err
}

// Push does not send anything (work requests go to the device when they are
// posted), but it arms the send CQ when work requests are in flight, so
// that completions nobody waits for are taken by the progress goroutine
// soon rather than by the next operation, Wait or Flush.
func (t *Transport) Push(peer ftrma.Rank) {
	if t.inflight.Load() > 0 && t.connected.Load() && !t.closed.Load() {
		t.armSend()
	}
}

// Send posts a control message to peer as SENDs of at most one receive
// buffer each, reassembled in order by the receiver.
func (t *Transport) Send(peer ftrma.Rank, msg []byte) error {
	if len(msg) > transport.MaxControlMessage {
		return &ftrma.OpError{Op: "send", Rank: peer, Err: fmt.Errorf("%w: message of %d bytes, max %d", ftrma.ErrInvalid, len(msg), transport.MaxControlMessage)}
	}
	p, err := t.peerOf("send", peer)
	if err != nil {
		return err
	}
	return t.sendCtl(p, mUser, msg)
}

// sendCtl posts a message of type typ to p.
func (t *Transport) sendCtl(p *peer, typ byte, msg []byte) error {
	p.mu.Lock()
	err := p.sendLocked(typ, msg)
	p.mu.Unlock()
	// Nobody waits for a message's completion: the progress goroutine
	// takes it (and, toward a lost peer, its error).
	if err == nil && !t.closed.Load() {
		t.armSend()
	}
	return err
}

// sendLocked posts a message as fragments, or queues them in the backlog
// when the send queue or the staging ring is full (or the backlog is not
// empty): sending never blocks, because the receiver's handlers send from
// the progress goroutine, which must keep taking completions and reposting
// receive buffers. The caller holds p.mu.
func (p *peer) sendLocked(typ byte, msg []byte) error {
	if p.dead {
		return p.downErr()
	}
	for done := 0; ; {
		n := min(len(msg)-done, maxFrag)
		f := make([]byte, fragHeader+n)
		f[0] = typ
		if done+n == len(msg) {
			f[1] = 1 // last fragment
		}
		binary.LittleEndian.PutUint16(f[2:], uint16(n))
		copy(f[fragHeader:], msg[done:done+n])
		p.backlog = append(p.backlog, f)
		done += n
		if done == len(msg) {
			break
		}
	}
	return p.drainLocked()
}

// drainLocked posts backlogged fragments while there is room (and, for a
// late rank, once the peer said hello). The caller holds p.mu.
func (p *peer) drainLocked() error {
	for len(p.backlog) > 0 && !p.dead && !p.held && p.n < len(p.fifo) {
		f := p.backlog[0]
		addr, end, ok := p.ring.alloc(len(f))
		if !ok {
			return nil
		}
		copy(unsafe.Slice((*byte)(addr), len(f)), f)
		flags := C.int(0)
		if len(f) <= p.t.inline {
			flags |= C.IBV_SEND_INLINE
		}
		if rc := C.ftv_post_send(p.qp, C.uint64_t(p.rank), C.uint64_t(uintptr(addr)), C.uint32_t(len(f)), C.uint32_t(p.t.lkey), flags); rc != 0 {
			return p.postFailed(rc)
		}
		p.push(entry{kind: kSend, end: end})
		p.backlog[0] = nil
		p.backlog = p.backlog[1:]
	}
	return nil
}

// SetReceiver installs r; events held until now are delivered to it first,
// by the progress goroutine.
func (t *Transport) SetReceiver(r transport.Receiver) {
	t.recvMu.Lock()
	t.recv = r
	t.recvMu.Unlock()
	t.wake()
}

// startProgress starts the goroutine that polls both completion queues,
// spinning briefly and then sleeping on the completion channel through Go's
// poller.
func (t *Transport) startProgress() error {
	fd, err := syscall.Dup(int(C.ftv_channel_fd(t.ch)))
	if err != nil {
		return fmt.Errorf("verbs: dup the completion channel: %w", err)
	}
	syscall.SetNonblock(fd, true)
	t.evf = os.NewFile(uintptr(fd), "ibv-comp-channel")
	if t.evrc, err = t.evf.SyscallConn(); err != nil {
		t.evf.Close()
		return fmt.Errorf("verbs: completion channel: %w", err)
	}
	go t.progress()
	return nil
}

// wake makes the progress goroutine look at its queues now.
func (t *Transport) wake() {
	if t.evf == nil {
		return
	}
	t.wakeMu.Lock()
	t.evf.SetReadDeadline(time.Unix(1, 0))
	t.wakeMu.Unlock()
}

// progress is the progress goroutine. It does not spin: a waiter polls the
// send queue itself while it spins (Wait), so the progress goroutine only
// has to deliver messages and complete what nobody waits for, and a spinning
// progress goroutine would take the CPU from the waiter when ranks fill the
// CPUs.
func (t *Transport) progress() {
	defer close(t.done)
	for !t.stop.Load() {
		t.deliverHeld()
		got := t.pollRecv()
		// TryLock: a goroutine holding pollMu is polling the send queue
		// (a spinning waiter, or a post); it completes what is there.
		if t.pollMu.TryLock() {
			got = t.pollSend() || got
			t.pollMu.Unlock()
		}
		if got {
			continue
		}
		// Arm the receive queue, and the send queue when work requests are
		// in flight (a waiter spinning for them takes them; one that stops
		// spinning arms the queue itself), look once more (a completion may
		// have come between the last poll and the arming), then sleep.
		if t.rcqArmed.CompareAndSwap(false, true) {
			C.ftv_req_notify(t.rcq)
		}
		if t.inflight.Load() > 0 && t.scqArmed.CompareAndSwap(false, true) {
			C.ftv_req_notify(t.scq)
		}
		// Lock, not TryLock: whoever arms must look afterwards, and a
		// goroutine holding pollMu may have polled for the last time
		// before the completion came.
		got = t.pollRecv()
		t.pollMu.Lock()
		got = t.pollSend() || got
		t.pollMu.Unlock()
		if got || t.pendingEvents() {
			continue
		}
		t.sleep()
	}
}

// sleep waits for a completion event or a wake.
func (t *Transport) sleep() {
	t.wakeMu.Lock()
	t.evf.SetReadDeadline(time.Time{})
	t.wakeMu.Unlock()
	if t.stop.Load() || t.pendingEvents() {
		return
	}
	if statsOn {
		t.stats.sleeps.Add(1)
	}
	t.evrc.Read(func(uintptr) bool {
		return t.takeEvents() || t.stop.Load()
	})
	t.takeEvents()
}

// takeEvents takes the channel's events off it; whether there were any.
func (t *Transport) takeEvents() bool {
	any := false
	for {
		var cq *C.struct_ibv_cq
		if C.ftv_get_event(t.ch, &cq) != 1 {
			break
		}
		any = true
		i := 0
		if cq == t.rcq {
			i = 1
			t.rcqArmed.Store(false)
		} else {
			t.scqArmed.Store(false)
		}
		if statsOn {
			if i == 1 {
				t.stats.recvEvents.Add(1)
			} else {
				t.stats.sendEvents.Add(1)
			}
		}
		if t.unack[i]++; t.unack[i] >= 64 {
			C.ftv_ack_events(cq, C.uint(t.unack[i]))
			t.unack[i] = 0
		}
	}
	return any
}

// pendingEvents reports whether receivers or peer-down events wait.
func (t *Transport) pendingEvents() bool {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	return len(t.downs) > 0 || (t.recv != nil && len(t.held) > 0)
}

// deliverHeld hands held messages and queued peer-down events to the
// receiver, in order.
func (t *Transport) deliverHeld() {
	t.recvMu.Lock()
	if t.recv == nil && len(t.downs) > 0 {
		t.held = append(t.held, t.downs...)
		t.downs = nil
	}
	r := t.recv
	var evs []event
	if r != nil {
		evs = append(t.held, t.downs...)
		t.held, t.downs = nil, nil
	}
	t.recvMu.Unlock()
	for _, e := range evs {
		if e.err != nil {
			r.HandlePeerDown(e.from, e.err)
		} else {
			r.HandleMessage(e.from, e.msg)
		}
	}
}

// pollRecv takes the receive CQ's completions: fragments of messages.
func (t *Transport) pollRecv() bool {
	n := int(C.ftv_poll(t.rcq, 32, t.rwc))
	if n <= 0 {
		return false
	}
	for _, wc := range unsafe.Slice(t.rwc, n) {
		r, slot := int(wc.wr_id>>16), int(wc.wr_id&0xffff)
		if r < 0 || r >= len(t.peers) || slot >= recvDepth {
			continue
		}
		p := t.peers[r]
		if wc.status != C.IBV_WC_SUCCESS {
			// A flushed receive means the queue pair entered the error
			// state; a failed send toward the peer usually says why.
			t.pollMu.Lock()
			t.pollSend()
			t.pollMu.Unlock()
			if !p.isDead() {
				t.down(p, fmt.Errorf("verbs: receive from rank %d: %s (the queue pair is in the error state)", r, C.GoString(C.ftv_status_str(C.int(wc.status)))))
			}
			continue
		}
		p.fragment(unsafe.Slice((*byte)(unsafe.Add(p.rbase, slot*slotBytes)), int(wc.byte_len)))
		// Give the buffer back (a dead peer's queue pair is gone).
		p.mu.Lock()
		qp := p.qp
		if p.self {
			qp = t.selfResp
		}
		if !p.dead && !t.closed.Load() {
			C.ftv_post_recv(qp, recvID(r, slot), C.uint64_t(uintptr(unsafe.Add(p.rbase, slot*slotBytes))), slotBytes, C.uint32_t(t.lkey))
		}
		p.mu.Unlock()
	}
	return true
}

func (p *peer) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// fragment adds one received fragment; a whole message is dispatched. A
// broken stream (a fragment longer than its buffer, a message longer than
// transport.MaxControlMessage) takes the peer down.
func (p *peer) fragment(b []byte) {
	t := p.t
	p.rxMu.Lock()
	typ, b, ok, err := p.rx.add(b)
	p.rxMu.Unlock()
	if err != nil {
		if !p.self {
			t.down(p, fmt.Errorf("rank %d: %w", p.rank, err))
		}
		return
	}
	if !ok {
		return
	}
	switch typ {
	case mUser:
		if p.left.Load() {
			return
		}
		t.recvMu.Lock()
		r := t.recv
		if r == nil || len(t.held) > 0 {
			t.held = append(t.held, event{from: p.rank, msg: append([]byte(nil), b...)})
			t.recvMu.Unlock()
			return
		}
		t.recvMu.Unlock()
		r.HandleMessage(p.rank, b)
	case mRevoke:
		if len(b) == 4 {
			t.ackRevoke(p, transport.Key(binary.LittleEndian.Uint32(b)))
		}
	case mRevokeAck:
		if len(b) == 4 {
			t.revoked(p.rank, transport.Key(binary.LittleEndian.Uint32(b)), false)
		}
	case mBye:
		p.left.Store(true)
		t.down(p, transport.ErrPeerLeft)
	case mHello:
		// The peer admitted this late rank: its queue pair is ready, so
		// what waited for it goes out now.
		p.mu.Lock()
		if p.held {
			p.held = false
			p.drainLocked() // a failure marks the peer down by itself
		}
		p.mu.Unlock()
		select {
		case p.space <- struct{}{}:
		default:
		}
	case mFenced:
		if !p.self {
			t.down(p, fmt.Errorf("rank %d fenced this rank", p.rank))
		}
	}
}

// ackRevoke stops using key toward p and acknowledges behind every
// operation already posted on it.
func (t *Transport) ackRevoke(p *peer, key transport.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[key] = region{gone: true}
	var msg [4]byte
	binary.LittleEndian.PutUint32(msg[:], uint32(key))
	p.sendLocked(mRevokeAck, msg[:])
}

// down marks p lost with cause: its queue pair goes to the error state and
// is destroyed (the device then refuses whatever the peer still sends), its
// pending operations fail, and the receiver hears of it once.
func (t *Transport) down(p *peer, cause error) {
	if p.self {
		return
	}
	p.downOnce.Do(func() {
		err := transport.ErrPeerDown(p.rank, cause)
		p.mu.Lock()
		p.dead = true
		p.held = false
		p.absent.Store(false) // failed for good: never admitted
		if p.qp != nil {
			C.ftv_qp_error(p.qp)
			C.ftv_destroy_qp(p.qp)
			p.qp = nil
		}
		for p.n > 0 {
			if e := p.pop(); e.fetch != nil {
				delete(p.fetching, e.fetch.key)
				close(e.fetch.done)
			}
		}
		p.backlog = nil
		p.mu.Unlock()
		// A message it had sent in part will never be whole.
		p.rxMu.Lock()
		p.rx.drop()
		p.rxMu.Unlock()
		p.comp.Fail(err)
		select {
		case p.space <- struct{}{}:
		default:
		}
		t.revoked(p.rank, 0, true)
		if t.closed.Load() {
			return
		}
		if cause != errFenced && cause != transport.ErrPeerLeft {
			t.log.Warn(fmt.Sprintf("verbs transport: lost rank %d: %v", p.rank, cause), ftrma.LogPeer, p.rank)
		}
		t.recvMu.Lock()
		t.downs = append(t.downs, event{from: p.rank, err: err})
		t.recvMu.Unlock()
		t.wake()
	})
}

// selfFailed handles the failure of the loopback queue pair, which never
// happens while the device works: operations toward this rank itself fail
// from now on (with the device's error, not ErrProcFailed: this rank is
// alive) instead of waiting forever.
func (t *Transport) selfFailed(p *peer, cause error) {
	p.downOnce.Do(func() {
		t.log.Error(fmt.Sprintf("verbs transport: the loopback queue pair failed: %v", cause))
		p.mu.Lock()
		p.dead = true
		for p.n > 0 {
			if e := p.pop(); e.fetch != nil {
				delete(p.fetching, e.fetch.key)
				close(e.fetch.done)
			}
		}
		p.backlog = nil
		p.mu.Unlock()
		p.comp.Fail(&ftrma.OpError{Op: "transport", Rank: p.rank, Err: cause})
	})
}

// Fence cuts peer off: its queue pair goes to the error state and is
// destroyed, so the device refuses its late requests, and operations toward
// it fail with ftrma.ErrProcFailed. Before that, a peer whose queue pair
// still works is told (a fenced notice, after what was posted toward it):
// Fence waits up to fenceNotice for the device to deliver it, so that a
// fenced rank that still runs learns of it without sending anything (it
// then counts this rank down). Fencing an absent rank (Config.Absent)
// makes it failed, never to be admitted.
func (t *Transport) Fence(peer ftrma.Rank) error {
	p, err := t.peerOrAbsent("fence", peer)
	if err != nil {
		return err
	}
	if p.self {
		return &ftrma.OpError{Op: "fence", Rank: peer, Err: fmt.Errorf("%w: cannot fence self", ftrma.ErrInvalid)}
	}
	t.noticeFence(p)
	t.down(p, errFenced)
	return nil
}

// fenceNotice is the longest Fence waits for its notice to be delivered:
// a tenth of the failure detector's bound, at most 50 ms. A peer that does
// not take it by then (it is gone, or its queue is full) learns of the
// fence at its next operation toward this rank, which fails.
func (t *Transport) fenceNotice() time.Duration { return min(t.cfg.Bound/10, 50*time.Millisecond) }

// noticeFence sends p the fenced notice and waits, up to fenceNotice, until
// every work request toward p has completed (the notice is the last), or p
// is down. Nothing is sent toward a peer that is down, absent, or has not
// said hello to this late rank.
func (t *Transport) noticeFence(p *peer) {
	p.mu.Lock()
	if p.dead || p.absent.Load() || p.held || p.self || !t.connected.Load() || t.closed.Load() {
		p.mu.Unlock()
		return
	}
	err := p.sendLocked(mFenced, nil)
	p.mu.Unlock()
	if err != nil {
		return
	}
	deadline := time.Now().Add(t.fenceNotice())
	for {
		p.mu.Lock()
		done := p.dead || (p.n == 0 && len(p.backlog) == 0)
		p.mu.Unlock()
		if done || time.Now().After(deadline) {
			return
		}
		if t.pollMu.TryLock() {
			t.pollSend()
			t.pollMu.Unlock()
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// PeerDown tells the transport that peer's process is gone (the launcher saw
// it exit): it is handled like a failed completion toward it.
func (t *Transport) PeerDown(peer ftrma.Rank, cause error) {
	if peer < 0 || int(peer) >= len(t.peers) {
		return
	}
	t.down(t.peers[peer], cause)
}

// Close says goodbye to every live peer (they deliver what it sent first),
// waits briefly for that, fences everyone and releases the device.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		if t.connected.Load() {
			for _, p := range t.peers {
				if !p.self && !p.absent.Load() {
					// A late rank's messages to a peer that has not said
					// hello go now: if it has not admitted this rank, its
					// queue pair drops them, and nobody hears of it.
					p.mu.Lock()
					p.held = false
					p.mu.Unlock()
					t.sendCtl(p, mBye, nil)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			for _, p := range t.peers {
				if !p.self && !p.absent.Load() {
					t.Flush(ctx, p.rank)
				}
			}
			cancel()
		}
		t.closed.Store(true)
		if statsOn {
			t.log.Info(fmt.Sprintf("verbs stats: %v", &t.stats))
		}
		for _, p := range t.peers {
			if p != nil {
				t.down(p, transport.ErrPeerLeft)
			}
		}
		if t.evf != nil {
			t.stop.Store(true)
			t.wake()
			<-t.done
			t.evf.Close()
		}
		for _, p := range t.peers {
			if p != nil && p.self {
				p.comp.Fail(&ftrma.OpError{Op: "transport", Rank: p.rank, Err: ftrma.ErrClosed})
			}
		}
		t.release()
	})
	return t.closeErr
}

// release frees every device resource that exists.
func (t *Transport) release() {
	t.pollMu.Lock()
	defer t.pollMu.Unlock()
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		p.dead = true
		if p.qp != nil {
			C.ftv_destroy_qp(p.qp)
			p.qp = nil
		}
		p.mu.Unlock()
	}
	if t.selfResp != nil {
		C.ftv_destroy_qp(t.selfResp)
		t.selfResp = nil
	}
	t.regMu.Lock()
	for k, reg := range t.regs {
		if reg.mr != nil {
			C.ftv_dereg_mr(reg.mr)
		}
		delete(t.regs, k)
	}
	t.regMu.Unlock()
	if t.memMR != nil {
		C.ftv_dereg_mr(t.memMR)
	}
	if t.tableMR != nil {
		C.ftv_dereg_mr(t.tableMR)
	}
	if t.scq != nil {
		C.ftv_ack_events(t.scq, C.uint(t.unack[0]))
		C.ftv_destroy_cq(t.scq)
	}
	if t.rcq != nil {
		C.ftv_ack_events(t.rcq, C.uint(t.unack[1]))
		C.ftv_destroy_cq(t.rcq)
	}
	t.cqGone = true
	if t.ch != nil {
		C.ftv_destroy_channel(t.ch)
	}
	if t.pd != nil {
		C.ftv_dealloc_pd(t.pd)
	}
	if t.ctx != nil {
		C.ftv_close_device(t.ctx)
	}
	if t.mem != nil {
		C.ftv_free(t.mem, C.size_t(t.memLen))
	}
	if t.table != nil {
		C.ftv_free(t.table, tableSlots*entryBytes)
	}
	if t.swc != nil {
		C.free(unsafe.Pointer(t.swc))
		C.free(unsafe.Pointer(t.rwc))
	}
	t.scq, t.rcq, t.ch, t.pd, t.ctx, t.mem, t.table, t.memMR, t.tableMR, t.swc, t.rwc = nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil
}
