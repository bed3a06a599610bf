package memnet

import (
	"container/heap"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// kind says what a message on a link carries.
type kind uint8

const (
	kindOp       kind = iota + 1 // a one-sided operation to execute at the receiver
	kindReply                    // the receiver's answer to an operation it posted
	kindMessage                  // a control message for the Receiver
	kindBye                      // the sender fenced the receiver or closed: the link is gone (a TCP FIN or RST); val byeLeft when it closed
	kindDown                     // local event, never on a link: call Receiver.HandlePeerDown
	kindReceiver                 // local event, never on a link: a receiver was set, deliver what is held
	kindAdmit                    // local event, never on a link: from was admitted, handle what it sent before
)

// maxHeld bounds the control messages held per peer while no receiver has
// been set; later ones are dropped.
const maxHeld = 4096

// opKind names a one-sided operation.
type opKind uint8

const (
	opWrite opKind = iota + 1
	opRead
	opCAS
	opFADD
)

func (k opKind) String() string {
	switch k {
	case opWrite:
		return "write"
	case opRead:
		return "read"
	case opCAS:
		return "cas"
	case opFADD:
		return "fadd"
	}
	return "op"
}

// op is one posted operation. The request fields are set before the operation
// is queued and never changed, so the target reads them without locking; the
// origin fields are touched only by the origin's goroutine.
type op struct {
	kind  opKind
	seq   transport.Seq
	key   transport.Key
	off   uint64
	data  []byte // opWrite: a private copy of the caller's src
	n     int    // opRead: bytes to read
	cmp   uint64 // opCAS: the expected value
	swap  uint64 // opCAS: the new value
	delta uint64 // opFADD: the addend

	// Origin side.
	dst    []byte  // opRead: the caller's buffer
	result *uint64 // opCAS, opFADD: where the prior value goes; may be nil
}

// msg is one message in an inbox.
// byeLeft marks a kindBye sent by Close: the peer left on purpose.
const byeLeft = 1

type msg struct {
	at   time.Time  // earliest delivery time; zero means at once
	id   uint64     // arrival order among delayed messages, breaks ties in at
	from ftrma.Rank // the sending rank (kindDown: the rank that is down)
	gen  uint64     // the link's cut generation when sent
	kind kind
	op   *op    // kindOp, kindReply
	body []byte // kindMessage: the message; kindReply to opRead: the bytes read
	val  uint64 // kindReply to opCAS, opFADD: the prior value
	err  error  // kindReply: the target's verdict (a Memory error); kindDown: the peer-down error
}

// inbox queues the messages toward one endpoint until its goroutine takes
// them.
//
// Per-link FIFO order holds because a link stamps its messages with
// nondecreasing delivery times: a link that has never been delayed sends with
// a zero time (into ready), and one that has been delayed uses real times for
// ever after (into timed), never earlier than its previous message. Ready
// messages are handled before the timed ones taken in the same round, and
// timed ones in (at, id) order.
type inbox struct {
	notify chan struct{} // capacity 1: a token means something was pushed

	mu     sync.Mutex // guards the fields below
	ready  []msg      // undelayed messages in arrival order
	timed  msgHeap    // delayed messages, earliest first
	nextID uint64     // last id given to a delayed message
	closed bool       // the goroutine has exited: pushes are dropped
}

func (in *inbox) init() { in.notify = make(chan struct{}, 1) }

// push queues m and wakes the goroutine. It never blocks for long.
func (in *inbox) push(m msg) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	if m.at.IsZero() {
		in.ready = append(in.ready, m)
	} else {
		in.nextID++
		m.id = in.nextID
		heap.Push(&in.timed, m)
	}
	in.mu.Unlock()
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// take returns the messages due now, in handling order, reusing buf (which the
// caller must not use afterwards), and the delivery time of the earliest
// message not yet due (zero if none).
func (in *inbox) take(buf []msg) (batch []msg, next time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	batch, in.ready = in.ready, buf[:0]
	if len(in.timed) > 0 {
		now := time.Now()
		for len(in.timed) > 0 && !in.timed[0].at.After(now) {
			batch = append(batch, heap.Pop(&in.timed).(msg))
		}
		if len(in.timed) > 0 {
			next = in.timed[0].at
		}
	}
	return batch, next
}

// close drops everything queued and refuses later pushes.
func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.ready = nil
	in.timed = nil
	in.mu.Unlock()
}

// msgHeap orders delayed messages by (at, id); it implements heap.Interface.
type msgHeap []msg

func (h msgHeap) Len() int { return len(h) }
func (h msgHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].id < h[j].id
	}
	return h[i].at.Before(h[j].at)
}
func (h msgHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *msgHeap) Push(x any)   { *h = append(*h, x.(msg)) }
func (h *msgHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = msg{}
	*h = old[:len(old)-1]
	return m
}

// run is the endpoint's one goroutine: it takes due messages from the inbox
// and handles them one at a time, parking on a channel (and a timer when
// delayed messages wait) in between. It returns when quit is closed.
func (t *Transport) run() {
	defer close(t.done)
	defer t.in.close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []msg
	for {
		var next time.Time
		batch, next = t.in.take(batch)
		if len(batch) == 0 {
			var tick <-chan time.Time
			if !next.IsZero() {
				timer.Reset(time.Until(next))
				tick = timer.C
			}
			select {
			case <-t.quit:
				timer.Stop()
				return
			case <-t.in.notify:
			case <-tick:
			}
			timer.Stop()
			continue
		}
		for i := range batch {
			t.handle(&batch[i])
		}
		clear(batch)
		select {
		case <-t.quit:
			timer.Stop()
			return
		default:
		}
	}
}

// handle executes or delivers one message. The acceptance check and any touch
// of memory happen under t.mu, so Fence, Crash and Close, which take t.mu,
// wait for an operation under way and stop every later one. Receiver methods
// are called without locks held.
func (t *Transport) handle(m *msg) {
	switch m.kind {
	case kindDown:
		if t.unadmitted != nil && t.unadmitted[m.from] {
			t.unadmitted[m.from], t.early[m.from] = false, nil // failed before it was admitted
		}
		if t.dead.Load() == nil {
			t.deliver(m)
		}
		return
	case kindReceiver:
		if b := t.rcv.Load(); b != nil && len(t.held) > 0 {
			t.flushHeld(b.r)
		}
		return
	case kindAdmit:
		t.replayAdmitted(m.from)
		return
	}
	if t.unadmitted != nil && t.unadmitted[m.from] {
		// Sent by a rank this endpoint has not admitted yet (it admitted
		// this one first): kept, in order, until Admit or its loss.
		t.early[m.from] = append(t.early[m.from], *m)
		return
	}
	t.mu.Lock()
	if !t.acceptLocked(m) {
		t.mu.Unlock()
		return
	}
	switch m.kind {
	case kindOp:
		reply := t.executeLocked(m.op)
		t.mu.Unlock()
		t.link(m.from).send(reply)
	case kindReply:
		t.completeLocked(m)
		t.mu.Unlock()
	case kindMessage:
		t.mu.Unlock()
		t.deliver(m)
	case kindBye:
		cause := errReset
		if m.val == byeLeft {
			cause = transport.ErrPeerLeft
		}
		err := transport.ErrPeerDown(m.from, cause)
		lost := t.peerLostLocked(m.from, err)
		t.mu.Unlock()
		if lost {
			t.deliver(&msg{kind: kindDown, from: m.from, err: err})
		}
	default:
		t.mu.Unlock()
		panic("memnet: message of unknown kind")
	}
}

// deliver hands a control message or peer-down event to the receiver. While
// no receiver has ever been set it is held instead (messages up to maxHeld
// per peer); held ones go first, in order, once one is. A receiver set to nil
// drops them.
func (t *Transport) deliver(m *msg) {
	b := t.rcv.Load()
	if b == nil {
		t.hold(m)
		return
	}
	if len(t.held) > 0 {
		t.flushHeld(b.r)
	}
	if b.r == nil {
		return
	}
	switch m.kind {
	case kindMessage:
		b.r.HandleMessage(m.from, m.body)
	case kindDown:
		b.r.HandlePeerDown(m.from, m.err)
	}
}

// hold keeps m for a receiver not yet set.
func (t *Transport) hold(m *msg) {
	if m.kind == kindMessage {
		if t.heldN == nil {
			t.heldN = make([]int, len(t.net.ends))
		}
		if t.heldN[m.from] >= maxHeld {
			return
		}
		t.heldN[m.from]++
	}
	t.held = append(t.held, msg{kind: m.kind, from: m.from, body: m.body, err: m.err})
}

// flushHeld delivers the held messages and events to r (dropping them if r
// is nil), except messages from peers that went down, or everything if this
// endpoint died, since they were held.
func (t *Transport) flushHeld(r transport.Receiver) {
	held := t.held
	t.held, t.heldN = nil, nil
	for i := range held {
		m := &held[i]
		t.mu.Lock()
		ok := t.dead.Load() == nil && (m.kind == kindDown || t.down[m.from] == nil)
		t.mu.Unlock()
		if !ok || r == nil {
			continue
		}
		switch m.kind {
		case kindMessage:
			r.HandleMessage(m.from, m.body)
		case kindDown:
			r.HandlePeerDown(m.from, m.err)
		}
	}
}

// acceptLocked reports whether m may be handled: this endpoint is alive, its
// sender is not down here, and the link it came by is not cut and has not
// been cut since m was sent. The caller holds t.mu.
func (t *Transport) acceptLocked(m *msg) bool {
	if t.dead.Load() != nil || t.down[m.from] != nil {
		return false
	}
	l := t.net.ends[m.from].links[t.rank].Load() // exists: m came through it
	return l.cut.Load() == m.gen<<1
}

// executeLocked runs o against this rank's memory and returns the reply. The
// caller holds t.mu.
func (t *Transport) executeLocked(o *op) msg {
	r := msg{kind: kindReply, op: o}
	switch o.kind {
	case opWrite:
		r.err = t.mem.Write(o.key, o.off, o.data)
	case opRead:
		buf := make([]byte, o.n)
		if r.err = t.mem.Read(o.key, o.off, buf); r.err == nil {
			r.body = buf
		}
	case opCAS:
		r.val, r.err = t.mem.CompareAndSwap64(o.key, o.off, o.cmp, o.swap)
	case opFADD:
		r.val, r.err = t.mem.FetchAndAdd64(o.key, o.off, o.delta)
	default:
		panic("memnet: operation of unknown kind")
	}
	return r
}

// completeLocked applies a reply at the origin: operations before it that
// never got a reply (lost on a cut link) fail with ErrLost, the result is
// copied out, and the operation completes. The caller holds t.mu.
func (t *Transport) completeLocked(m *msg) {
	o := m.op
	c := &t.links[m.from].Load().comp // exists: o was posted on it
	if c.Down() != nil {
		return
	}
	for s := c.Completed() + 1; s < o.seq; s++ {
		c.Complete(s, lostError(m.from))
	}
	if o.seq <= c.Completed() {
		return // cannot happen: replies come in posting order
	}
	var err error
	if m.err != nil {
		err = &ftrma.OpError{Op: o.kind.String(), Rank: m.from, Err: m.err}
	} else {
		switch o.kind {
		case opRead:
			transport.Copy(o.dst, m.body) // in pieces: the read may be large
		case opCAS, opFADD:
			if o.result != nil {
				*o.result = m.val
			}
		}
	}
	c.Complete(o.seq, err)
}

// replayAdmitted handles what rank p sent before this endpoint admitted it,
// in order, and everything from p directly from now on. Called by the
// endpoint's goroutine, on the kindAdmit event Admit queued.
func (t *Transport) replayAdmitted(p ftrma.Rank) {
	if t.unadmitted == nil || !t.unadmitted[p] {
		return
	}
	t.unadmitted[p] = false
	early := t.early[p]
	t.early[p] = nil
	for i := range early {
		t.handle(&early[i])
	}
}
