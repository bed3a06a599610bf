package agree

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand"
	"os"
	"slices"
	"strings"

	"github.com/ftrma/ftrma/internal/check/simq"
)

// This file is a deterministic discrete-event simulator of n ranks running
// the agreement. A seeded RNG decides everything: each message's delay
// (heavy-tailed, FIFO per pair, so any order across pairs), when ranks call
// Start, which ranks crash, when and how (before Start, in the middle of a
// send burst, as a false suspicion fenced later), and when each rank learns of
// each crash. Time is simulated ticks; there is no wall clock.

// simOpts describes one simulated run.
type simOpts struct {
	n     int
	insts int   // consecutive instances; rank r starts instance k+1 after deciding k
	seed  int64 // seeds everything below that is random

	crashes   int     // ranks that crash (at most n-1)
	leaders   int     // of the crashes, how many hit ranks 0, 1, 2, ... (the successive coordinators) in order
	suspects  int     // of the crashes, how many are false suspicions: notified first, stopped later
	atZero    float64 // share of crashes at time 0, before anyone calls Start
	burst     float64 // share of crashes that happen in the middle of a send burst
	horizon   int     // other crashes happen at a time drawn from [0, horizon)
	notifyMax int     // each rank learns of a crash 0..notifyMax ticks after it
	startMax  int     // a rank's first Start is at 1..startMax+1
	gapMax    int     // a rank starts the next instance 0..gapMax ticks after deciding
	delayMax  int     // a message takes 1..delayMax ticks ...
	tail      float64 // ... except this share, which takes 10..tailMul times longer
	tailMul   int
	slow      int  // ranks whose messages all take ten times longer
	codec     bool // every message goes through AppendBinary and ParseMessage
	budget    int  // delivered messages before the run counts as not terminating
}

type envelope struct {
	due      int
	from, to int
	msg      Message
	depth    int // causal depth: the longest chain of messages ending with this one
}

const (
	evStart  = iota // rank calls Start(arg)
	evCrash         // rank stops (or, if burst, stops during its next send burst)
	evNotify        // rank learns that arg failed
	evKill          // a falsely suspected or bursting rank is stopped
)

type event struct {
	at         int
	kind       int
	rank, arg  int
	burst      bool
	suspicious bool
}

type sim struct {
	o   simOpts
	rng *rand.Rand
	ag  []*Agreement

	dead     []bool // stopped
	doomed   []bool // crashed or suspected: not a survivor
	burstDie []bool // dies during its next send burst
	slowRank []bool
	lastDue  []int // per (from, to) pair, from*n+to: due time of the last message sent
	cut      []int // per pair: messages due after this were lost in the sender's crash
	net      simq.Queue[int, envelope]
	events   simq.Queue[int, event]
	now      int
	messages int // delivered

	started [][]bool   // [inst][rank]: Start was called
	contrib [][]uint64 // [inst][rank]
	decided [][]*Decision
	depth   [][]int // [inst][rank]: causal depth
	decDep  [][]int // [inst][rank]: causal depth at the decision
	kinds   [KindNudge + 1]int
	coords  map[int]bool // coordinators of the rounds whose START was delivered
	late    int          // decisions of doomed ranks that differ from the survivors'

	errs  []string
	trace []string // with FTRMA_TRACE set: every event, for replaying a seed
}

func newSim(o simOpts) *sim {
	n := o.n
	s := &sim{o: o, rng: rand.New(rand.NewSource(o.seed))}
	s.ag = make([]*Agreement, n)
	for r := range n {
		s.ag[r] = New(r, n)
	}
	s.dead, s.doomed, s.burstDie, s.slowRank = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
	s.lastDue, s.cut = make([]int, n*n), make([]int, n*n)
	for i := range s.cut {
		s.cut[i] = math.MaxInt
	}
	for range o.insts {
		s.started = append(s.started, make([]bool, n))
		s.decided = append(s.decided, make([]*Decision, n))
		s.depth = append(s.depth, make([]int, n))
		s.decDep = append(s.decDep, make([]int, n))
		c := make([]uint64, n)
		for r := range c {
			c[r] = ^uint64(0)
			if s.rng.Intn(10) < 3 {
				c[r] &^= 1 << uint(s.rng.Intn(64))
			}
		}
		s.contrib = append(s.contrib, c)
	}
	for r := range n {
		s.at(1+s.rng.Intn(o.startMax+1), event{kind: evStart, rank: r, arg: 0})
	}
	for range min(o.slow, n) {
		s.slowRank[s.rng.Intn(n)] = true
	}
	s.planCrashes()
	return s
}

func (s *sim) at(t int, e event) {
	e.at = t
	s.events.Push(t, e)
}

// planCrashes picks the victims and their times: first the successive
// coordinators 0, 1, ... at increasing times, then random ranks.
func (s *sim) planCrashes() {
	o := s.o
	k := min(o.crashes, o.n-1)
	victims := make([]int, 0, k)
	for r := 0; r < min(o.leaders, k); r++ {
		victims = append(victims, r)
	}
	for _, r := range s.rng.Perm(o.n) {
		if len(victims) == k {
			break
		}
		if !slices.Contains(victims, r) {
			victims = append(victims, r)
		}
	}
	t := 0
	for i, r := range victims {
		var when int
		switch {
		case i < min(o.leaders, k):
			// Successive coordinators die one after another while the
			// agreement runs.
			t += 1 + s.rng.Intn(max(1, o.horizon/max(1, 2*o.leaders)))
			when = t
		case s.rng.Float64() < o.atZero:
			when = 0
		default:
			when = s.rng.Intn(max(1, o.horizon))
		}
		e := event{kind: evCrash, rank: r, burst: s.rng.Float64() < o.burst, suspicious: i >= k-min(o.suspects, k)}
		s.at(when, e)
	}
}

// run simulates until nothing is pending or the budget is spent, then checks
// the properties. It returns the failures found.
func (s *sim) run() []string {
	for s.net.Len()+s.events.Len() > 0 {
		eat, ev := s.events.Next()
		due, msg := s.net.Next()
		if ev && (!msg || eat <= due) {
			_, e := s.events.Pop()
			s.now = max(s.now, e.at)
			s.fire(e)
			continue
		}
		_, env := s.net.Pop()
		s.now = max(s.now, env.due)
		s.deliver(env)
		if s.messages > s.o.budget {
			s.errorf("termination: not quiescent after %d messages (%d in flight)", s.messages, s.net.Len())
			break
		}
	}
	s.check()
	return s.errs
}

func (s *sim) errorf(format string, args ...any) {
	if len(s.errs) < 20 {
		s.errs = append(s.errs, fmt.Sprintf(format, args...))
	}
}

func (s *sim) tracef(format string, args ...any) {
	if traceOn {
		s.trace = append(s.trace, fmt.Sprintf("%6d ", s.now)+fmt.Sprintf(format, args...))
	}
}

func (s *sim) fire(e event) {
	r := e.rank
	s.tracef("event %+v", e)
	switch e.kind {
	case evStart:
		if s.dead[r] {
			return
		}
		s.started[e.arg][r] = true
		s.ag[r].Start(uint64(e.arg), s.contrib[e.arg][r])
		s.drain(r)
	case evCrash:
		if s.dead[r] || s.doomed[r] {
			return
		}
		s.doomed[r] = true
		if e.suspicious {
			// A false suspicion: everyone is told now, the rank keeps
			// running until the runtime's fence stops it a little later.
			s.notifyAll(r)
			s.at(s.now+s.rng.Intn(s.o.notifyMax+1), event{kind: evKill, rank: r})
			return
		}
		if e.burst {
			s.burstDie[r] = true
			// If it sends nothing for a while, it just stops.
			s.at(s.now+1+s.rng.Intn(s.o.notifyMax+s.o.delayMax), event{kind: evKill, rank: r})
			return
		}
		s.stop(r)
		s.notifyAll(r)
	case evKill:
		if s.dead[r] {
			return
		}
		wasBurst := s.burstDie[r]
		s.stop(r)
		if wasBurst {
			s.notifyAll(r)
		}
	case evNotify:
		if s.dead[r] {
			return
		}
		s.ag[r].Failed(e.arg)
		s.drain(r)
	}
}

// stop kills rank r: it takes no further step, and each of its links loses
// a random suffix of the messages still in flight (its send buffers).
func (s *sim) stop(r int) {
	s.dead[r] = true
	s.burstDie[r] = false
	for to := range s.o.n {
		p := r*s.o.n + to
		if last := s.lastDue[p]; last > s.now {
			s.cut[p] = s.now + s.rng.Intn(last-s.now+1)
		}
	}
}

func (s *sim) notifyAll(r int) {
	for q := range s.o.n {
		if q != r {
			s.at(s.now+s.rng.Intn(s.o.notifyMax+1), event{kind: evNotify, rank: q, arg: r})
		}
	}
}

func (s *sim) delay(from int) int {
	d := 1 + s.rng.Intn(s.o.delayMax)
	if s.o.tail > 0 && s.rng.Float64() < s.o.tail {
		d *= 10 + s.rng.Intn(max(1, s.o.tailMul-9))
	}
	if s.slowRank[from] {
		d *= 10
	}
	return d
}

func (s *sim) send(from, to int, m Message, depth int) {
	p := from*s.o.n + to
	due := max(s.now+s.delay(from), s.lastDue[p]) // FIFO per pair
	s.lastDue[p] = due
	s.net.Push(due, envelope{due: due, from: from, to: to, msg: m, depth: depth})
}

func (s *sim) deliver(env envelope) {
	if s.dead[env.to] || env.due > s.cut[env.from*s.o.n+env.to] {
		return
	}
	s.messages++
	if int(env.msg.Kind) < len(s.kinds) {
		s.kinds[env.msg.Kind]++
	}
	if env.msg.Kind == KindStart {
		if s.coords == nil {
			s.coords = make(map[int]bool)
		}
		s.coords[env.msg.Round.Coord] = true
	}
	if k := int(env.msg.Inst); k < s.o.insts {
		s.depth[k][env.to] = max(s.depth[k][env.to], env.depth)
	}
	s.tracef("recv %d->%d %v", env.from, env.to, env.msg)
	s.ag[env.to].Step(env.from, env.msg)
	s.drain(env.to)
}

// drain takes rank r's Ready: queues its messages (only a random prefix when
// r dies in this burst) and records its decisions.
func (s *sim) drain(r int) {
	a := s.ag[r]
	if !a.HasReady() {
		return
	}
	rd := a.Ready()
	a.Advance()
	sends := rd.Send
	dying := s.burstDie[r] && len(sends) > 0
	if dying {
		sends = sends[:s.rng.Intn(len(sends)+1)]
	}
	for _, o := range sends {
		if o.To < 0 || o.To >= s.o.n || o.To == r {
			s.errorf("rank %d sends to invalid rank %d: %v", r, o.To, o.Msg)
			continue
		}
		m := o.Msg
		if s.o.codec {
			b := m.AppendBinary(nil)
			var err error
			if m, err = ParseMessage(b); err != nil {
				s.errorf("codec: %v does not parse back: %v", o.Msg, err)
				continue
			}
		}
		d := 1
		if k := int(m.Inst); k < s.o.insts {
			d += s.depth[k][r]
		}
		s.tracef("send %d->%d %v", r, o.To, m)
		s.send(r, o.To, m, d)
	}
	for _, d := range rd.Decided {
		k := int(d.Inst)
		if k >= s.o.insts {
			s.errorf("rank %d decided unknown instance %d", r, d.Inst)
			continue
		}
		if s.decided[k][r] != nil {
			s.errorf("rank %d decided instance %d twice", r, k)
			continue
		}
		if !s.started[k][r] {
			s.errorf("rank %d decided instance %d before calling Start", r, k)
		}
		s.tracef("decide %d %+v", r, d)
		dd := d
		s.decided[k][r] = &dd
		s.decDep[k][r] = s.depth[k][r]
		a.Forget(d.Inst) // sequential use: every survivor has decided the instances below
		if k+1 < s.o.insts {
			s.at(s.now+s.rng.Intn(s.o.gapMax+1), event{kind: evStart, rank: r, arg: k + 1})
		}
	}
	if dying {
		s.stop(r)
		s.notifyAll(r)
	}
}

// check verifies termination, uniform agreement among survivors and
// validity for every instance.
func (s *sim) check() {
	n := s.o.n
	for k := range s.o.insts {
		var ref *Decision
		refRank := -1
		for r := range n {
			if s.doomed[r] {
				continue
			}
			d := s.decided[k][r]
			if d == nil {
				s.errorf("termination: survivor %d did not decide instance %d", r, k)
				continue
			}
			if ref == nil {
				ref, refRank = d, r
			} else if d.Value != ref.Value || !slices.Equal(d.Failed, ref.Failed) {
				s.errorf("agreement: instance %d: rank %d decided %#x %v, rank %d decided %#x %v",
					k, refRank, ref.Value, ref.Failed, r, d.Value, d.Failed)
			}
		}
		if ref == nil {
			continue
		}
		s.checkValidity(k, ref)
		for r := range n {
			if d := s.decided[k][r]; s.doomed[r] && d != nil && (d.Value != ref.Value || !slices.Equal(d.Failed, ref.Failed)) {
				s.late++ // allowed: agreement is among survivors only
			}
		}
	}
}

func (s *sim) checkValidity(k int, d *Decision) {
	n := s.o.n
	if !slices.IsSorted(d.Failed) {
		s.errorf("validity: instance %d: failed set %v not sorted", k, d.Failed)
	}
	inF := make([]bool, n)
	for _, r := range d.Failed {
		if r < 0 || r >= n {
			s.errorf("validity: instance %d: failed set %v names rank %d", k, d.Failed, r)
			return
		}
		inF[r] = true
		if !s.doomed[r] {
			s.errorf("validity: instance %d: survivor %d in the failed set", k, r)
		}
	}
	// The value is the AND over a set S of contributors that includes every
	// rank outside F. The largest candidate is T = {started r : contrib(r)
	// has every bit of the value}; the value is reachable iff AND(T) equals it.
	and := ^uint64(0)
	for r := range n {
		if !inF[r] && !s.started[k][r] {
			s.errorf("validity: instance %d: rank %d never called Start but is not in the failed set %v", k, r, d.Failed)
		}
		c := s.contrib[k][r]
		if !s.started[k][r] || c&d.Value != d.Value {
			if !inF[r] {
				s.errorf("validity: instance %d: value %#x leaves out rank %d (contribution %#x) that is not in the failed set", k, d.Value, r, c)
			}
			continue
		}
		and &= c
	}
	if and != d.Value {
		s.errorf("validity: instance %d: value %#x is no AND of contributions (closest %#x)", k, d.Value, and)
	}
}

// maxDecisionDepth is the longest causal chain ending in a decision of
// instance k at a survivor.
func (s *sim) maxDecisionDepth(k int) int {
	m := 0
	for r := range s.o.n {
		if !s.doomed[r] && s.decided[k][r] != nil {
			m = max(m, s.decDep[k][r])
		}
	}
	return m
}

var traceOn = os.Getenv("FTRMA_TRACE") != ""

func log2ceil(n int) int { return bits.Len(uint(n - 1)) }

func (o simOpts) String() string {
	return fmt.Sprintf("n=%d insts=%d seed=%d crashes=%d leaders=%d suspects=%d burst=%.2f atZero=%.2f horizon=%d notifyMax=%d delayMax=%d tail=%.2fx%d slow=%d",
		o.n, o.insts, o.seed, o.crashes, o.leaders, o.suspects, o.burst, o.atZero, o.horizon, o.notifyMax, o.delayMax, o.tail, o.tailMul, o.slow)
}

func joinErrs(errs []string) string { return strings.Join(errs, "\n\t") }
