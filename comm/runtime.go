package comm

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/agree"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/revoke"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/transport"
)

// Message kinds on the transport's control path. Append-only.
const (
	kindColl      byte = 1 // a collective's contribution: ctx u32, seq u64, payload
	kindHeartbeat byte = 2 // the failure detector's heartbeat
	kindBcast     byte = 3 // a reliable-broadcast message (failure and revoke notices)
	kindAgree     byte = 4 // an agreement message: ctx u32, agree.Message
	kindSignal    byte = 5 // Signal: ctx u32, payload
	kindNotice    byte = 6 // a notice for this rank only (RevokeGroup): the notice id
)

// Config configures the runtime of a process. The zero value means the
// defaults.
type Config struct {
	// Detector configures the heartbeat failure detector (period and timeout;
	// defaults 20 ms and 60 ms).
	Detector failure.Config
	// OnDeclaredFailed is called when this process learns that the job
	// declared it failed (it was suspected, perhaps falsely, and is fenced out
	// by everyone). The default prints a message and exits with status
	// ExitDeclaredFailed: a fenced process must not go on as if nothing
	// happened.
	OnDeclaredFailed func(by string)
	// OnLostPrimary is called when this process's lease from ftrun ran
	// out: it cannot reach ftrun and may be cut off from the job's primary
	// world, whose survivors will take over from it once the lease is
	// surely over. It must stop the process from acting at once. The
	// default prints a message and exits with status ExitLostPrimary.
	OnLostPrimary func()
}

// ExitLostPrimary is the exit status of a process that lost its lease from
// ftrun (see Config.OnLostPrimary).
const ExitLostPrimary = startup.ExitLostPrimary

// ExitDeclaredFailed is the exit status of a process that learned the job
// declared it failed.
const ExitDeclaredFailed = 75

// suspecter is the launcher's side of failure handling: told of a suspicion,
// it kills the suspect should it still run.
type suspecter interface {
	Suspect(r ftrma.Rank) error
}

// runtime is the per-process part shared by every communicator of the process:
// the transport, failure knowledge, the failure detector and the reliable
// broadcast. One goroutine (run) drives the protocol state machines; the
// transport's goroutines only queue what they receive.
type runtime struct {
	t       transport.Transport
	self    ftrma.Rank
	n       int
	cfg     Config
	suspect suspecter // may be nil

	// Owned by the run goroutine.
	det *failure.Detector
	bc  *revoke.Broadcast

	mu       sync.Mutex         // guards the fields below
	failed   []bool             // failed[r]: world rank r is known failed (grow-only)
	order    []ftrma.Rank       // failed ranks in the order learned
	notices  map[string]bool    // revocation notices delivered
	noticed  atomic.Int64       // len(notices), read without the lock
	comms    map[uint32]*Comm   // live communicators by context id
	early    map[uint32][]event // agreement messages for communicators not created yet
	inbox    map[collKey][]byte // collective contributions received, not yet consumed
	queue    []event            // received, for the run goroutine
	requests []func()           // work for the run goroutine
	changed  chan struct{}      // closed and replaced when failed, revoked or inbox change
	kick     chan struct{}      // wakes the run goroutine (buffer 1)
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup
	signals  func(from ftrma.Rank, payload []byte) // Signal handler; nil drops
}

type event struct {
	from ftrma.Rank
	msg  []byte // nil for a peer-down event
	err  error
}

type collKey struct {
	ctx  uint32
	seq  uint64
	from ftrma.Rank // world rank
}

func newRuntime(t transport.Transport, cfg Config) (*runtime, error) {
	if cfg.OnDeclaredFailed == nil {
		cfg.OnDeclaredFailed = func(by string) {
			fmt.Fprintf(os.Stderr, "ftrma: rank %d was declared failed by the job (%s): it is fenced out and exits\n", t.Rank(), by)
			os.Exit(ExitDeclaredFailed)
		}
	}
	if cfg.OnLostPrimary == nil {
		cfg.OnLostPrimary = func() {
			fmt.Fprintf(os.Stderr, "ftrma: rank %d cannot reach ftrun: it may be cut off from the job's primary world, and exits\n", t.Rank())
			os.Exit(ExitLostPrimary)
		}
	}
	rt := &runtime{
		t:       t,
		self:    t.Rank(),
		n:       t.Size(),
		cfg:     cfg,
		failed:  make([]bool, t.Size()),
		notices: make(map[string]bool),
		comms:   make(map[uint32]*Comm),
		early:   make(map[uint32][]event),
		inbox:   make(map[collKey][]byte),
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	var err error
	if rt.det, err = failure.New(cfg.Detector, int(rt.self), rt.n, time.Now()); err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	// Start-up grace: every process of the job is busy starting (runtime
	// start, connecting to every peer), so first heartbeats may come late.
	rt.det.Stalled(startGrace)
	rt.bc = revoke.New(int(rt.self), rt.n)
	return rt, nil
}

// maxEarlyAgree bounds the agreement messages kept for one communicator not
// created yet.
const maxEarlyAgree = 1 << 14

// startGrace is how much longer than its timeout the detector waits for a
// rank's first heartbeats.
const startGrace = time.Second

// start launches the run goroutine.
func (rt *runtime) start() {
	rt.wg.Add(1)
	go rt.run()
}

// HandleMessage implements transport.Receiver: collective contributions are
// filed at once; everything else is queued for the run goroutine.
func (rt *runtime) HandleMessage(from ftrma.Rank, msg []byte) {
	if len(msg) == 0 {
		return
	}
	if msg[0] == kindColl {
		rt.fileContribution(from, msg)
		return
	}
	rt.enqueue(event{from: from, msg: append([]byte(nil), msg...)})
}

// HandlePeerDown implements transport.Receiver: the connection to peer is gone
// or the launcher saw its process exit.
func (rt *runtime) HandlePeerDown(peer ftrma.Rank, err error) {
	rt.enqueue(event{from: peer, err: err})
}

func (rt *runtime) enqueue(e event) {
	rt.mu.Lock()
	rt.queue = append(rt.queue, e)
	rt.mu.Unlock()
	rt.wakeRun()
}

func (rt *runtime) wakeRun() {
	select {
	case rt.kick <- struct{}{}:
	default:
	}
}

// do runs f on the run goroutine.
func (rt *runtime) do(f func()) {
	rt.mu.Lock()
	rt.requests = append(rt.requests, f)
	rt.mu.Unlock()
	rt.wakeRun()
}

// lost records a peer-down error met by a caller's own operation and waits
// until the run goroutine has applied it, so that failure knowledge (Failed,
// ProcFailed) covers a failure by the time an error reports it.
func (rt *runtime) lost(r ftrma.Rank, err error) {
	rt.enqueue(event{from: r, err: err})
	done := make(chan struct{})
	rt.do(func() { close(done) })
	select {
	case <-done:
	case <-rt.done:
	}
}

func (rt *runtime) fileContribution(from ftrma.Rank, msg []byte) {
	if len(msg) < collHeader {
		return
	}
	k := collKey{ctx: be.Uint32(msg[1:]), seq: be.Uint64(msg[5:]), from: from}
	payload := append([]byte{}, msg[collHeader:]...)
	rt.mu.Lock()
	rt.inbox[k] = payload
	rt.signalLocked()
	rt.mu.Unlock()
}

// signalLocked wakes every goroutine waiting for a change. rt.mu is held.
func (rt *runtime) signalLocked() {
	close(rt.changed)
	rt.changed = make(chan struct{})
}

// run is the runtime's goroutine: it ticks the failure detector, feeds it and
// the other state machines what arrived, and sends what they produce.
func (rt *runtime) run() {
	defer rt.wg.Done()
	period := rt.cfg.Detector.Period
	if period <= 0 {
		period = 20 * time.Millisecond
	}
	// The loop sleeps until the detector's next deadline (a heartbeat due,
	// or a timeout), so an idle rank wakes about once per period.
	timer := time.NewTimer(period)
	defer timer.Stop()
	due := time.Now().Add(period)
	for {
		ticked := false
		select {
		case <-rt.done:
			return
		case <-timer.C:
			ticked = true
		case <-rt.kick:
		}
		// What arrived is handled before the detector looks at the clock: a
		// heartbeat waiting in the queue is not silence.
		rt.mu.Lock()
		queue, reqs := rt.queue, rt.requests
		rt.queue, rt.requests = nil, nil
		rt.mu.Unlock()
		for _, e := range queue {
			rt.step(e)
		}
		for _, f := range reqs {
			f()
		}
		now := time.Now()
		if ticked {
			// Self-awareness (Lifeguard): time this process was kept from
			// running — its timer fired late — does not count as a peer's
			// silence. On a host short of CPU every rank is late alike, so
			// an observer's deadline stretches as its peers' heartbeats do.
			if late := now.Sub(due); late > period/16 {
				rt.det.Stalled(late)
			}
		}
		rt.det.Tick(now)
		rt.flushReady()
		next, ok := rt.det.Deadline()
		if !ok || next.Sub(now) > period {
			next = now.Add(period)
		}
		due = next
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(time.Until(next), 0))
	}
}

// step handles one received event on the run goroutine.
func (rt *runtime) step(e event) {
	if e.msg == nil {
		if errors.Is(e.err, transport.ErrPeerLeft) {
			// A goodbye, after everything the peer sent: it finished. It is
			// gone for this rank, but nobody else needs telling.
			rt.markGone(e.from, "left the job")
			return
		}
		rt.markFailed(e.from, fmt.Sprintf("connection lost: %v", e.err))
		return
	}
	if int(e.from) < 0 || int(e.from) >= rt.n {
		return
	}
	body := e.msg[1:]
	switch e.msg[0] {
	case kindHeartbeat:
		rt.det.Heartbeat(int(e.from), time.Now())
	case kindBcast:
		m, err := revoke.ParseMessage(body)
		if err == nil {
			rt.bc.Step(int(e.from), m)
		}
	case kindAgree:
		if len(body) < 4 {
			return
		}
		ctx := be.Uint32(body)
		rt.mu.Lock()
		c := rt.comms[ctx]
		if c == nil && len(rt.early[ctx]) < maxEarlyAgree {
			// A faster rank already uses a communicator this rank has not
			// created yet (it is still in the Shrink that makes it): keep
			// the message for it.
			rt.early[ctx] = append(rt.early[ctx], e)
		}
		rt.mu.Unlock()
		if c == nil || c.index[e.from] < 0 {
			return
		}
		m, err := agree.ParseMessage(body[4:])
		if err == nil {
			c.ag.Step(int(c.index[e.from]), m)
		}
	case kindNotice:
		rt.notice(string(body))
	case kindSignal:
		if len(body) < 4 {
			return
		}
		rt.mu.Lock()
		h := rt.signals
		c := rt.comms[be.Uint32(body)]
		rt.mu.Unlock()
		if h != nil && c != nil && c.index[e.from] >= 0 {
			h(c.index[e.from], body[4:])
		}
	}
}

// flushReady sends what the state machines produced and applies what they
// decided, until they are quiet.
func (rt *runtime) flushReady() {
	for range 64 {
		busy := false
		if rd := rt.det.Ready(); len(rd.Heartbeats) > 0 || len(rd.Suspected) > 0 {
			busy = true
			rt.det.Advance()
			for _, to := range rd.Heartbeats {
				rt.t.Send(ftrma.Rank(to), []byte{kindHeartbeat})
			}
			for _, r := range rd.Suspected {
				if rt.suspect != nil {
					// Under ftrun a suspicion is only that: ftrun
					// kills the suspect, or, when it cannot reach
					// it, waits until its lease has run out, and
					// then every rank hears of the failure from
					// it. Nobody takes over from a rank that may
					// still act (the primary world, DESIGN.md).
					rt.suspect.Suspect(ftrma.Rank(r))
					continue
				}
				rt.markFailed(ftrma.Rank(r), fmt.Sprintf("suspected by rank %d's failure detector", rt.self))
			}
		}
		if rd := rt.bc.Ready(); len(rd.Send) > 0 || len(rd.Deliver) > 0 {
			busy = true
			rt.bc.Advance()
			for _, o := range rd.Send {
				rt.t.Send(ftrma.Rank(o.To), o.Msg.AppendBinary([]byte{kindBcast}))
			}
			for _, m := range rd.Deliver {
				rt.deliver(m)
			}
		}
		rt.mu.Lock()
		comms := make([]*Comm, 0, len(rt.comms))
		for _, c := range rt.comms {
			comms = append(comms, c)
		}
		rt.mu.Unlock()
		for _, c := range comms {
			if c.flushAgree() {
				busy = true
			}
		}
		if !busy {
			return
		}
	}
	rt.wakeRun() // more to do: come back after other events
}

// deliver applies a reliable-broadcast notice.
func (rt *runtime) deliver(m revoke.Message) {
	var r int
	switch {
	case scan(m.ID, "fail/%d", &r):
		if r >= 0 && r < rt.n {
			rt.markFailed(ftrma.Rank(r), string(m.Payload))
		}
	default: // communicator and window revocations
		rt.notice(m.ID)
	}
}

// notice records that notice id arrived and wakes waiters.
func (rt *runtime) notice(id string) {
	rt.mu.Lock()
	rt.notices[id] = true
	rt.noticed.Store(int64(len(rt.notices)))
	rt.signalLocked()
	rt.mu.Unlock()
}

func scan(s, format string, v any) bool {
	_, err := fmt.Sscanf(s, format, v)
	return err == nil
}

// originate starts a reliable broadcast from this rank (run goroutine).
func (rt *runtime) originate(id string, payload []byte) {
	rt.bc.Originate(revoke.Message{ID: id, Payload: payload})
}

// markFailed records that world rank r failed (run goroutine): it is fenced,
// the state machines stop waiting for it, everyone is told, and waiters wake.
func (rt *runtime) markFailed(r ftrma.Rank, why string) {
	if rt.markGone(r, why) {
		rt.originate(fmt.Sprintf("fail/%d", r), []byte(why))
	}
}

// markGone records locally that world rank r is gone, as markFailed without
// telling anyone, and reports whether this was news.
func (rt *runtime) markGone(r ftrma.Rank, why string) bool {
	if r == rt.self {
		rt.mu.Lock()
		closed := rt.closed
		rt.mu.Unlock()
		if !closed {
			rt.cfg.OnDeclaredFailed(why)
		}
		return false
	}
	if rt.isFailed(r) {
		return false
	}
	// Fence before anyone can see r as failed: whoever observes the failure
	// must also observe that nothing of r's lands any more.
	rt.t.Fence(r)
	rt.mu.Lock()
	rt.failed[r] = true
	rt.order = append(rt.order, r)
	comms := make([]*Comm, 0, len(rt.comms))
	for _, c := range rt.comms {
		comms = append(comms, c)
	}
	rt.signalLocked()
	rt.mu.Unlock()
	now := time.Now()
	rt.det.Failed(int(r), now)
	rt.bc.Failed(int(r))
	for _, c := range comms {
		if i := c.index[r]; i >= 0 {
			c.ag.Failed(int(i))
		}
	}
	return true
}

// isFailed reports world rank r's failure knowledge.
func (rt *runtime) isFailed(r ftrma.Rank) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.failed[r]
}

// close stops the run goroutine.
func (rt *runtime) close() {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return
	}
	rt.closed = true
	rt.signalLocked() // waiters see closed
	rt.mu.Unlock()
	close(rt.done)
	rt.wg.Wait()
}
