package comm

import (
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
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
	kindProbe     byte = 7 // the failure detector's probe: answer with a heartbeat
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
	// Spares is how many world ranks are held in reserve as spares: the
	// ranks t.Size()-Spares .. t.Size()-1 start absent (not started: in no
	// communicator, never watched by the failure detector nor suspected,
	// outside the broadcast graph), and the world communicator is the
	// ranks 0 .. t.Size()-Spares-1. A spare that starts later is admitted
	// at every live rank. Zero (the default) means none. It must be less
	// than t.Size(), and this rank must not be one of the spares.
	Spares int
	// OnLostPrimary is called when this process's lease from ftrun ran
	// out: it cannot reach ftrun and may be cut off from the job's primary
	// world, whose survivors will take over from it once the lease is
	// surely over. It must stop the process from acting at once. The
	// default prints a message and exits with status ExitLostPrimary.
	OnLostPrimary func()
}

// ExitLostPrimary is the exit status of a process that lost its lease from
// ftrun (see Config.OnLostPrimary): the status ftrun knows for it
// (startup.ExitLostPrimary, which a test of startup holds equal).
const ExitLostPrimary = 76

// ExitDeclaredFailed is the exit status of a process that learned the job
// declared it failed.
const ExitDeclaredFailed = 75

// suspecter is the launcher's side of failure handling: told of a suspicion,
// it kills the suspect should it still run.
type suspecter interface {
	Suspect(r ftrma.Rank) error
}

// leaseKeeper is the rank's lease from ftrun (the Launcher): while it is
// being rescued, Rescuing returns a channel closed when the rescue ends.
type leaseKeeper interface {
	Rescuing() <-chan struct{}
	LeaseTerm() time.Duration
}

// runtime is the per-process part shared by every communicator of the process:
// the transport, failure knowledge, and the driver of the machine (machine.go)
// that holds the failure detector, the reliable broadcast and the
// agreements. One goroutine (run) drives the machine with the clock and what
// arrived, and carries out its output: sends, fences, suspicions, and the
// state callers read below; the transport's goroutines only queue what they
// receive.
type runtime struct {
	t       transport.Transport
	self    ftrma.Rank
	n       int
	cfg     Config
	suspect suspecter   // may be nil
	lease   leaseKeeper // may be nil

	m *machine // owned by the run goroutine

	mu        sync.Mutex               // guards the fields below
	gone      []bool                   // gone[r]: world rank r is known failed or departed (grow-only); set only after r is fenced
	failed    []bool                   // failed[r]: gone[r] and r failed (ULFM's failed group)
	departed  []bool                   // departed[r]: gone[r] and r left cleanly (Close, Finalize); never also failed[r]
	order     []ftrma.Rank             // failed ranks in the order learned (failures only)
	left      []ftrma.Rank             // departed ranks in the order learned
	notices   map[string]bool          // revocation notices delivered
	noticed   atomic.Int64             // len(notices), read without the lock
	noticeGen atomic.Uint64            // notices recorded so far, ever (NoticeGeneration)
	awaited   map[string]chan struct{} // closed when the notice arrives (noticeChan)
	comms     map[uint32]*Comm         // live communicators by context id
	closedC   closedRing               // communicators closed here (prune.go); their contributions are dropped
	ids       ctxIDs                   // context ids not to give a new communicator (split.go)
	inbox     map[collKey][]byte       // collective contributions received, not yet consumed
	queue     []event                  // received, for the run goroutine
	requests  []func()                 // work for the run goroutine
	changed   chan struct{}            // closed and replaced when failed, revoked or inbox change
	failedCh  chan struct{}            // closed and replaced when failed grows
	kick      chan struct{}            // wakes the run goroutine (buffer 1)
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup
	signals   func(from ftrma.Rank, payload []byte) // Signal handler; nil drops
	spawner   Spawner                               // starts spares for Replace; nil: none
	replacing map[uint32]map[int]ftrma.Rank         // spares admitted for a Replace, by new context id and slot
	replaced  []replaceSeen                         // the latest Replaces whose spares were admitted here (see superseded)
	spawned   bool                                  // this process is a spare started after the job began (set before start)
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

// newRuntime returns the runtime of a rank that starts with the job, with
// cfg.Spares ranks absent.
func newRuntime(t transport.Transport, cfg Config) (*runtime, error) {
	if cfg.Spares < 0 || cfg.Spares >= t.Size() || int(t.Rank()) >= t.Size()-cfg.Spares {
		return nil, fmt.Errorf("comm: %d spares in a job of %d ranks, this rank %d: %w", cfg.Spares, t.Size(), t.Rank(), ftrma.ErrInvalid)
	}
	var absent []int
	for r := t.Size() - cfg.Spares; r < t.Size(); r++ {
		absent = append(absent, r)
	}
	return newRuntimeAbsent(t, cfg, absent)
}

// newRuntimeAbsent is newRuntime with the absent ranks listed.
func newRuntimeAbsent(t transport.Transport, cfg Config, absent []int) (*runtime, error) {
	if cfg.OnDeclaredFailed == nil {
		cfg.OnDeclaredFailed = func(by string) {
			ftrma.Logger().Error(fmt.Sprintf("ftrma: rank %d was declared failed by the job (%s): it is fenced out and exits", t.Rank(), by), ftrma.LogRank, t.Rank())
			os.Exit(ExitDeclaredFailed)
		}
	}
	if cfg.OnLostPrimary == nil {
		cfg.OnLostPrimary = func() {
			ftrma.Logger().Error(fmt.Sprintf("ftrma: rank %d cannot reach ftrun: it may be cut off from the job's primary world, and exits", t.Rank()), ftrma.LogRank, t.Rank())
			os.Exit(ExitLostPrimary)
		}
	}
	rt := &runtime{
		t:        t,
		self:     t.Rank(),
		n:        t.Size(),
		cfg:      cfg,
		gone:     make([]bool, t.Size()),
		failed:   make([]bool, t.Size()),
		departed: make([]bool, t.Size()),
		notices:  make(map[string]bool),
		awaited:  make(map[string]chan struct{}),
		comms:    make(map[uint32]*Comm),
		closedC:  newClosedRing(keepClosed),
		inbox:    make(map[collKey][]byte),
		changed:  make(chan struct{}),
		failedCh: make(chan struct{}),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	var err error
	if rt.m, err = newMachine(cfg.Detector, int(rt.self), rt.n, false, time.Now(), absent...); err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	// Start-up grace: every process of the job is busy starting (runtime
	// start, connecting to every peer), so first heartbeats may come late.
	rt.m.stalled(startGrace)
	return rt, nil
}

// admit makes the absent world rank s present: a spare that has started
// (startup's admission notice, or commtest). The failure detector's ring
// and the broadcast graph re-form to include it; the communicators are
// untouched (s joins one only when one is made with it). It returns once
// the run goroutine has done it, with an error wrapping
// ftrma.ErrRankOutOfRange for a rank outside the job and ftrma.ErrInvalid
// for a rank that is not absent (self, present, failed: a failed rank is
// never admitted), or ftrma.ErrClosed once the runtime is closed. The
// transport must have admitted s first (transport.Admitter), so that what
// the machine sends to s goes through.
func (rt *runtime) admit(s ftrma.Rank) error { return rt.admitWith(s, nil, true) }

// settle tells the runtime that every live rank has admitted every spare
// admitted here, so that the broadcast forwards on the graph over the
// present ranks alone (revoke.Broadcast.Settle). It does not wait.
func (rt *runtime) settle() {
	rt.do(func() { rt.m.settle() })
}

// newSpareRuntime returns the runtime of a spare started after the job
// began: live lists the world ranks live at its admission, failed those
// that started and failed; every other rank but self is absent. The failed
// ranks are fenced and visible when it returns.
func newSpareRuntime(t transport.Transport, cfg Config, live, failed []ftrma.Rank) (*runtime, error) {
	present := make([]bool, t.Size())
	for _, list := range [][]ftrma.Rank{live, failed, {t.Rank()}} {
		for _, r := range list {
			if r < 0 || int(r) >= t.Size() {
				return nil, fmt.Errorf("comm: spare's start: rank %d in a job of %d: %w", r, t.Size(), ftrma.ErrRankOutOfRange)
			}
			present[r] = true
		}
	}
	var absent []int
	for r, p := range present {
		if !p {
			absent = append(absent, r)
		}
	}
	rt, err := newRuntimeAbsent(t, cfg, absent)
	if err != nil {
		return nil, err
	}
	rt.spawned = true
	now := time.Now()
	for _, r := range failed {
		rt.m.markGone(now, r, "failed before this rank started", false)
	}
	rt.m.pump(now)
	rt.apply() // the run goroutine has not started: this goroutine owns m
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
	// The suspecter is installed after newRuntime (InitConfig): from now on
	// the machine only reports suspicions to it.
	rt.m.confirm = rt.suspect != nil
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
// or the launcher saw its process exit (the machine tells them apart:
// classifyDown).
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
// ProcFailed) covers a failure by the time an error reports it. Under ftrun
// only ftrun's exit notice proves a failure (classifyDown): a connection the
// transport lost is reported to ftrun as a suspicion, and the rank counts
// as failed once ftrun's verdict comes.
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
	if rt.stale(k) {
		rt.mu.Unlock()
		return
	}
	rt.inbox[k] = payload
	rt.signalLocked()
	rt.mu.Unlock()
}

// stale reports whether contribution k is for a collective nobody here
// will run: of a communicator closed here, or of one this rank has already
// gone past (it started a later collective). rt.mu is held.
func (rt *runtime) stale(k collKey) bool {
	if c := rt.comms[k.ctx]; c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return k.seq < c.seq
	}
	_, closed := rt.closedC.has(k.ctx)
	return closed
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
		queue, reqs := rt.take()
		fresh := rt.newBroadcast(queue)
		for _, e := range queue {
			rt.step(e)
		}
		if fresh {
			// A broadcast this rank had not seen: its notice is made
			// visible here at once, and the goroutines that are ready run
			// before it is forwarded: those waiting for the notice, and
			// the transport's receivers, which queue the copies of it that
			// arrived meanwhile, so that this rank forwards it to none of
			// the ranks they came from (machine.holds). Under a flood
			// (revoke at 32 ranks) a rank gets several copies at once.
			rt.publish(rt.m.takeNotices())
			goruntime.Gosched()
			q, r := rt.take()
			for _, e := range q {
				rt.step(e)
			}
			reqs = append(reqs, r...)
		}
		// The machine's output is carried out after what arrived and after
		// every request, so that a request queued behind an event (lost)
		// finds its effects visible.
		rt.apply()
		for _, f := range reqs {
			f()
			rt.apply()
		}
		now := time.Now()
		if ticked {
			// Self-awareness (Lifeguard): time this process was kept from
			// running — its timer fired late — does not count as a peer's
			// silence. On a host short of CPU every rank is late alike, so
			// an observer's deadline stretches as its peers' heartbeats do.
			if late := now.Sub(due); late > period/16 {
				rt.m.stalled(late)
			}
		}
		rt.m.tick(now)
		rt.apply()
		next, ok := rt.m.deadline()
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

// take returns and clears what arrived and the requests queued.
func (rt *runtime) take() ([]event, []func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	queue, reqs := rt.queue, rt.requests
	rt.queue, rt.requests = nil, nil
	return queue, reqs
}

// newBroadcast reports whether queue holds a reliable-broadcast message
// whose ID the machine has not seen, other than a failure notice (run
// goroutine). A failure notice is forwarded at once: the yield can cost up
// to a scheduler time slice (10 ms) on a rank whose application keeps its
// only processor busy, and the failure's detection time at every rank
// downstream would pay it.
func (rt *runtime) newBroadcast(queue []event) bool {
	for _, e := range queue {
		if len(e.msg) > 0 && e.msg[0] == kindBcast && rt.m.unseen(e.msg) && !failureNotice(e.msg) {
			return true
		}
	}
	return false
}

// step hands one received event to the machine (run goroutine). Signals are
// the application's, not the machine's: they go to the handler here.
func (rt *runtime) step(e event) {
	now := time.Now()
	if e.msg == nil {
		rt.m.peerDown(now, e.from, e.err)
		return
	}
	if int(e.from) < 0 || int(e.from) >= rt.n {
		return
	}
	if e.msg[0] != kindSignal {
		rt.m.step(now, e.from, e.msg)
		return
	}
	body := e.msg[1:]
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

// apply carries out the machine's output (run goroutine), in the order
// machineReady prescribes.
func (rt *runtime) apply() {
	if !rt.m.hasReady() {
		return
	}
	rd := rt.m.ready()
	rt.m.advance()
	if len(rd.Declared) > 0 {
		rt.mu.Lock()
		closed := rt.closed
		rt.mu.Unlock()
		if !closed {
			for _, why := range rd.Declared {
				rt.cfg.OnDeclaredFailed(why)
			}
		}
	}
	if len(rd.Failed) > 0 {
		// Fence before anyone can see a rank as failed: whoever observes
		// the failure must also observe that nothing of it lands any
		// more.
		for _, f := range rd.Failed {
			rt.t.Fence(f.rank)
		}
		rt.mu.Lock()
		for _, f := range rd.Failed {
			rt.gone[f.rank] = true
			if f.left {
				rt.departed[f.rank] = true
				rt.left = append(rt.left, f.rank)
			} else {
				rt.failed[f.rank] = true
				rt.order = append(rt.order, f.rank)
			}
		}
		rt.signalLocked()
		close(rt.failedCh)
		rt.failedCh = make(chan struct{})
		rt.mu.Unlock()
	}
	for _, o := range rd.Send {
		rt.t.Send(o.to, o.msg)
	}
	if rt.suspect != nil {
		for _, r := range rd.Suspected {
			rt.suspect.Suspect(r)
		}
	}
	rt.publish(rd.Notices)
	if len(rd.Pruned) > 0 {
		rt.mu.Lock()
		rt.forgetNoticesLocked(rd.Pruned)
		rt.mu.Unlock()
	}
	if len(rd.Decided) > 0 {
		rt.mu.Lock()
		for _, d := range rd.Decided {
			if c := rt.comms[d.ctx]; c != nil {
				c.mu.Lock()
				c.decisions[d.d.Inst] = d.d
				c.mu.Unlock()
			}
		}
		rt.signalLocked()
		rt.mu.Unlock()
	}
}

// publish makes notices the machine delivered visible and wakes waiters.
func (rt *runtime) publish(ids []string) {
	if len(ids) == 0 {
		return
	}
	rt.mu.Lock()
	for _, id := range ids {
		rt.noticeLocked(id)
	}
	rt.signalLocked()
	rt.mu.Unlock()
}

// notice records that notice id arrived here (a local revocation) and wakes
// waiters.
func (rt *runtime) notice(id string) {
	rt.mu.Lock()
	rt.noticeLocked(id)
	rt.signalLocked()
	rt.mu.Unlock()
}

// noticeLocked records notice id and wakes its noticeChan waiters. rt.mu is
// held.
func (rt *runtime) noticeLocked(id string) {
	rt.notices[id] = true
	rt.noticed.Store(int64(len(rt.notices)))
	rt.noticeGen.Add(1)
	if ch := rt.awaited[id]; ch != nil {
		close(ch)
		delete(rt.awaited, id)
	}
}

// closedChan is a channel closed from the start.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// noticeChan returns a channel closed when notice id arrives here (at once
// if it has).
func (rt *runtime) noticeChan(id string) <-chan struct{} {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.notices[id] {
		return closedChan
	}
	ch := rt.awaited[id]
	if ch == nil {
		ch = make(chan struct{})
		rt.awaited[id] = ch
	}
	return ch
}

// originate starts a reliable broadcast from this rank (run goroutine).
func (rt *runtime) originate(id string, payload []byte) {
	rt.m.originate(time.Now(), id, payload)
}

// isGone reports whether world rank r is known failed or departed.
func (rt *runtime) isGone(r ftrma.Rank) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.gone[r]
}

// goneErrLocked is the error of an operation that needs world rank r, known gone:
// ftrma.ErrProcFailed, and transport.ErrPeerLeft too when r departed
// cleanly. rt.mu is held.
func (rt *runtime) goneErrLocked(r ftrma.Rank) error {
	if rt.departed[r] {
		return fmt.Errorf("%w: %w", ftrma.ErrProcFailed, transport.ErrPeerLeft)
	}
	return ftrma.ErrProcFailed
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
