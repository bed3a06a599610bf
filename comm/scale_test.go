package comm

import (
	"fmt"
	"github.com/ftrma/ftrma/internal/check/scaletest"
	"math/rand"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/agree"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/overlay"
	"github.com/ftrma/ftrma/transport"
)

// This file measures how Shrink's cost grows with the job size, from 4 to
// 4,096 ranks, and fails if it grows faster than agree/ and revoke/ document.
//
// Shrink's only messages are one agreement on the world communicator (flag
// ^0: the decision's failed set is the new group's complement), and, around
// it, the reliable broadcast of each failure ("fail/r") that the runtime
// starts when it learns one; the new group and its context id are then
// worked out locally (Comm.Shrink). So the shrink is driven here at the level
// of the runtime's pure machine (machine.go): n machines, each given the
// world communicator (addComm) and a startAgree, exactly as Comm.Shrink does
// through the runtime, over a seeded event-driven network (random delays of
// 1..shrinkDelay µs, FIFO per pair, as the agreement requires of the
// transport). sim_test.go's whole-job simulator adds ftrun, leases and the
// detector's heartbeats, whose cost is per unit of time, not per shrink;
// here no machine is ticked, so the detector sends nothing but the
// heartbeat a rank owes its new observer when the old one fails.
//
// A crashed rank's failure reaches the machines as the runtime learns it:
// in the "known to all" scenario every rank is told at once (ftrun's exit
// notice to every rank), otherwise its observer in the detector's ring (the
// next live rank) finds out after a detection delay, and the others from
// the notice it broadcasts. A rank that learns a failure fences the failed
// rank: nothing from it is delivered there afterwards.
//
// Causal depth is measured by stamping: every message carries 1 + the
// largest depth its sender had received when it sent it; the largest stamp
// is the longest causal chain of messages, agreement and notices together
// (a notice can be what lets a REPORT go up).
//
// Runs at 1,000 ranks and up take one seed by default, smaller ones four;
// FTRMA_SCALE_SEEDS=k runs k seeds at every size, FTRMA_SCALE_MAX=n caps (or,
// under -race, raises) the largest size. Under -race the sizes stop at 1,024
// (race_test.go's raceEnabled): the machines share no memory, so the race
// detector only makes the largest runs slower. The 4,096-rank runs hold
// about 600 MB, mostly each machine's per-rank tables (lostAt, 24 bytes a
// rank; the world communicator's index, 8).

const (
	shrinkDelay  = 20  // a message takes 1..shrinkDelay µs
	shrinkDetect = 100 // an observer detects a crash within this many µs
	shrinkFailed = 3   // ranks that crash before the shrink
)

type shrinkOpts struct {
	n    int
	seed int64
	// dead ranks crash before the shrink starts; every rank is told at
	// once by ftrun's exit notice when knownToAll (the ranks run under
	// ftrun: a confirmer), otherwise only each one's observer, within
	// shrinkDetect.
	dead       int
	knownToAll bool
	interior   bool // rank n/2 crashes as it sends its agreement REPORT
	coord      bool // rank 0 crashes while sending its DECIDEs
}

type shrinkResult struct {
	n                int
	maxSent          int // all messages, by the busiest rank
	maxAgree         int // agreement messages, by the busiest rank
	maxBcast         int // failure notices, by the busiest rank
	meanSent         float64
	total            int
	agreeMsgs        int
	bcastMsgs        int
	otherMsgs        int // heartbeats to new observers
	depth            int
	bytes, agreeByte int // bytes on the wire: all, agreement only
	failed           int // the size of the agreed failed set
	errs             []string
}

type shrinkItem struct {
	at       int
	from, to int
	learn    int // >= 0: not a message: rank to learns that rank learn failed
	depth    int
	msg      []byte
}

type shrinkNet struct {
	o       shrinkOpts
	rng     *rand.Rand
	t0      time.Time
	ms      []*machine
	dead    []bool
	q       scaletest.Queue[shrinkItem]
	now     int
	dep     []int
	sent    []int
	agreeBy []int
	bcastBy []int
	lastDue map[[2]int]int
	decided []*agree.Decision
	res     shrinkResult
	victim  bool // the interior rank crashed already
}

func runShrink(o shrinkOpts) shrinkResult {
	n := o.n
	s := &shrinkNet{o: o, rng: rand.New(rand.NewSource(o.seed)), t0: time.Unix(1000, 0), lastDue: map[[2]int]int{}}
	s.ms, s.dead, s.decided = make([]*machine, n), make([]bool, n), make([]*agree.Decision, n)
	s.dep, s.sent, s.agreeBy, s.bcastBy = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	cfg := failure.Config{Period: 20 * time.Millisecond, Timeout: 60 * time.Millisecond}
	members := make([]ftrma.Rank, n)
	for r := range n {
		members[r] = ftrma.Rank(r)
	}
	for r := range n {
		m, err := newMachine(cfg, r, n, o.knownToAll, s.t0)
		if err != nil {
			s.errorf("newMachine(%d, %d): %v", r, n, err)
			return s.res
		}
		m.addComm(s.t0, worldContext, members)
		m.advance() // the detector's first heartbeat: start-up, not shrink
		s.ms[r] = m
	}
	for _, v := range s.rng.Perm(n)[:min(o.dead, n-1)] {
		s.dead[v] = true
	}
	for r := range n {
		if s.dead[r] {
			s.tell(r, o.knownToAll)
		}
	}
	for r := range n {
		if !s.dead[r] {
			// Every rank calls Shrink (agreement instance 1) at once:
			// the messages the notices caused so far are in flight.
			s.ms[r].startAgree(s.clock(), worldContext, 1, ^uint64(0))
			s.drain(r)
		}
	}
	// n times about shrinkBounds' bound per rank, far above the runs (298K
	// messages at 4,096 ranks with 3 failures, against 1.3M): it stops a
	// protocol that has gone quadratic within seconds.
	budget := 2 * n * (2*scaleLog2(n) + 2) * (o.dead + 3)
	steps := 0
	for s.q.Len() > 0 {
		it := s.q.Pop()
		s.now = it.at
		r := it.to
		if s.dead[r] {
			continue
		}
		if it.learn >= 0 {
			s.ms[r].fail(s.clock(), ftrma.Rank(it.learn), "detected")
		} else {
			if s.ms[r].isFailed(ftrma.Rank(it.from)) {
				continue // fenced
			}
			s.dep[r] = max(s.dep[r], it.depth)
			s.ms[r].step(s.clock(), ftrma.Rank(it.from), it.msg)
		}
		s.drain(r)
		if steps++; s.q.Pushed() > budget {
			s.errorf("more than %d messages after %d steps: stopped", budget, steps)
			break
		}
	}
	s.check()
	s.res.n = n
	for r := range n {
		s.res.maxSent = max(s.res.maxSent, s.sent[r])
		s.res.maxAgree = max(s.res.maxAgree, s.agreeBy[r])
		s.res.maxBcast = max(s.res.maxBcast, s.bcastBy[r])
		s.res.total += s.sent[r]
	}
	s.res.meanSent = float64(s.res.total) / float64(n)
	return s.res
}

func (s *shrinkNet) clock() time.Time { return s.t0.Add(time.Duration(s.now) * time.Microsecond) }

func (s *shrinkNet) errorf(format string, args ...any) {
	if len(s.res.errs) < 10 {
		s.res.errs = append(s.res.errs, fmt.Sprintf(format, args...))
	}
}

// tell has the runtime learn of dead rank r's crash: every live rank now
// (ftrun's exit notices), or its observer, the next live rank of the ring,
// within shrinkDetect.
func (s *shrinkNet) tell(r int, all bool) {
	if all {
		exit := fmt.Errorf("launcher: the process of rank %d exited (%w): %w", r, transport.ErrExitReported, ftrma.ErrProcFailed)
		for q := range s.o.n {
			if !s.dead[q] {
				s.ms[q].peerDown(s.clock(), ftrma.Rank(r), exit)
				s.drain(q)
			}
		}
		return
	}
	obs := (r + 1) % s.o.n
	for s.dead[obs] && obs != r {
		obs = (obs + 1) % s.o.n
	}
	if obs != r {
		s.push(shrinkItem{at: s.now + 1 + s.rng.Intn(shrinkDetect), to: obs, learn: r})
	}
}

func (s *shrinkNet) push(it shrinkItem) { s.q.Push(it.at, it) }

// agreeKind is the agreement message type of msg, 0 for other messages.
func agreeKind(msg []byte) agree.Kind {
	if len(msg) < 6 || msg[0] != kindAgree {
		return 0
	}
	return agree.Kind(msg[5])
}

func (s *shrinkNet) drain(r int) {
	m := s.ms[r]
	if !m.hasReady() {
		return
	}
	rd := m.ready()
	m.advance()
	sends := rd.Send
	die := false
	switch {
	case s.o.interior && r == s.o.n/2 && !s.victim:
		if i := slices.IndexFunc(sends, func(o outgoing) bool { return agreeKind(o.msg) == agree.KindReport }); i >= 0 {
			sends, die, s.victim = sends[:i], true, true
		}
	case s.o.coord && r == 0 && len(rd.Decided) > 0:
		sends, die = sends[:s.rng.Intn(max(1, len(sends)))], true
	}
	for _, o := range sends {
		to := int(o.to)
		d := s.dep[r] + 1
		s.res.depth = max(s.res.depth, d)
		s.sent[r]++
		s.res.bytes += len(o.msg)
		switch o.msg[0] {
		case kindAgree:
			s.agreeBy[r]++
			s.res.agreeMsgs++
			s.res.agreeByte += len(o.msg)
		case kindBcast:
			s.bcastBy[r]++
			s.res.bcastMsgs++
		default:
			s.res.otherMsgs++
		}
		p := [2]int{r, to}
		due := max(s.now+1+s.rng.Intn(shrinkDelay), s.lastDue[p])
		s.lastDue[p] = due
		s.push(shrinkItem{at: due, from: r, to: to, learn: -1, depth: d, msg: o.msg})
	}
	if die {
		s.dead[r] = true
		s.tell(r, false)
		return
	}
	for _, d := range rd.Decided {
		if d.ctx != worldContext || d.d.Inst != 1 {
			s.errorf("rank %d decided %d/%d", r, d.ctx, d.d.Inst)
			continue
		}
		if s.decided[r] != nil {
			s.errorf("rank %d decided twice", r)
		}
		dd := d.d
		s.decided[r] = &dd
	}
	for _, l := range rd.Failed {
		if !s.dead[l.rank] {
			s.errorf("rank %d learned that live rank %d failed (%s)", r, l.rank, l.why)
		}
	}
}

// check verifies the shrink's outcome: every survivor decided, all the same
// failed set (so the same new group), holding every crashed rank that did
// not contribute and no survivor.
func (s *shrinkNet) check() {
	var ref *agree.Decision
	for r := range s.o.n {
		if s.dead[r] {
			continue
		}
		d := s.decided[r]
		switch {
		case d == nil:
			s.errorf("termination: survivor %d did not decide", r)
		case ref == nil:
			ref = d
		case d.Value != ref.Value || !slices.Equal(d.Failed, ref.Failed):
			s.errorf("agreement: rank %d decided %#x %v, another %#x %v", r, d.Value, d.Failed, ref.Value, ref.Failed)
		}
	}
	if ref == nil {
		return
	}
	s.res.failed = len(ref.Failed)
	if ref.Value != ^uint64(0) {
		s.errorf("validity: value %#x, want ^0", ref.Value)
	}
	for _, r := range ref.Failed {
		if !s.dead[r] {
			s.errorf("validity: survivor %d in the failed set %v", r, ref.Failed)
		}
	}
	want := 0
	for r := range s.o.n {
		if s.dead[r] {
			want++
		}
	}
	// Ranks that crashed before the shrink never contributed: all in it.
	// (A rank that crashed during it may be in it or not.)
	if len(ref.Failed) < min(s.o.dead, s.o.n-1) || len(ref.Failed) > want {
		s.errorf("validity: failed set %v with %d ranks crashed (%d before the shrink)", ref.Failed, want, s.o.dead)
	}
}

// --- the curve and its bounds ---------------------------------------------------

func scaleLog2(n int) int { return scaletest.Log2(n) }

// scaleBound bounds one metric by a·ceil(log2 n) + b.
type scaleBound struct {
	metric string
	a, b   int
	get    func(shrinkResult) int
}

func checkScaleCurve(curve []shrinkResult, bounds []scaleBound) error {
	bs := make([]scaletest.Bound[shrinkResult], len(bounds))
	for i, b := range bounds {
		bs[i] = scaletest.Bound[shrinkResult]{Metric: b.metric, A: b.a, B: b.b, Get: b.get}
	}
	return scaletest.Check(curve, func(r shrinkResult) int { return r.n }, bs)
}

// shrinkBounds are the bounds of a shrink whose agreement takes at most R
// rounds after f failures (agree/doc.go's cost; revoke/doc.go's), as in
// agree/scale_test.go:
//
//   - agreement messages per rank: R·(2·ceil(log2 n)+2) + ceil(log2 n)
//     (per round one START and one DECIDE per child, one REPORT, one NUDGE;
//     a leader's answers to nudgers);
//   - notices per rank: f·Degree(n) <= f·2·ceil(log2 n) (each notice is
//     forwarded once to each neighbour);
//   - all messages per rank: both, plus one heartbeat per failure (to a
//     new observer);
//   - causal depth: the agreement's (2 + 3(R-1))·ceil(log2 n) + 2(R-1),
//     plus the hops of the notice that lets it go on, 2·ceil(log2 n) (the
//     random-delay bound revoke/scale_test.go holds the broadcast to), once
//     per failure learned through a notice.
func shrinkBounds(rounds, f int, viaNotice bool) []scaleBound {
	hops := 0
	if viaNotice {
		hops = 2 * f
	}
	return []scaleBound{
		{"agree sent max", 2*rounds + 1, 2 * rounds, func(r shrinkResult) int { return r.maxAgree }},
		{"notices sent max", 2 * f, 0, func(r shrinkResult) int { return r.maxBcast }},
		{"sent max", 2*rounds + 1 + 2*f, 2*rounds + f, func(r shrinkResult) int { return r.maxSent }},
		{"depth", 2 + 3*(rounds-1) + hops, 2 * (rounds - 1), func(r shrinkResult) int { return r.depth }},
	}
}

func shrinkSizes() []int { return scaletest.Sizes(raceEnabled) }

func shrinkSeeds(n int) int { return scaletest.Seeds(n, 4, 1) }

// TestScaleShrink runs a shrink in each scenario at every size, checks its
// outcome (every survivor decides the same failed set, which holds every
// rank crashed before the shrink and no survivor) and each curve against
// shrinkBounds; without failures it must cost exactly one failure-free
// agreement, 2(n-1) messages with causal depth 2·ceil(log2 n) for n a power
// of two, and no notice.
func TestScaleShrink(t *testing.T) {
	type scenario struct {
		name      string
		opts      shrinkOpts
		rounds    int
		fails     int  // failures announced by notices
		viaNotice bool // the agreement may wait on a notice
		fromFtrun bool // ftrun tells every rank: no rank sends a notice
	}
	scenarios := []scenario{
		{name: "no failure", rounds: 1},
		{
			// Every rank knows before it calls Shrink, from ftrun: rank 0
			// opens round 1 over the survivors at once, and no rank
			// announces what ftrun told everyone (no notice at all).
			name: fmt.Sprintf("%d failed, known to all from ftrun", shrinkFailed), rounds: 2, fails: shrinkFailed, fromFtrun: true,
			opts: shrinkOpts{dead: shrinkFailed, knownToAll: true},
		},
		{
			// Each failure is detected by one rank, which broadcasts it
			// while the agreement runs: as agree/scale_test.go's "known
			// to half", up to a round per failure and a leader change.
			name: fmt.Sprintf("%d failed, detected by observers", shrinkFailed), rounds: shrinkFailed + 2, fails: shrinkFailed, viaNotice: true,
			opts: shrinkOpts{dead: shrinkFailed},
		},
		{
			name: "interior node crashes while reporting", rounds: 2, fails: 1, viaNotice: true,
			opts: shrinkOpts{interior: true},
		},
		{
			name: "coordinator crashes while deciding", rounds: 2, fails: 1, viaNotice: true,
			opts: shrinkOpts{coord: true},
		},
	}
	sizes := shrinkSizes()
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			var curve []shrinkResult
			for _, n := range sizes {
				var w shrinkResult
				w.n = n
				runs := shrinkSeeds(n)
				for seed := range int64(runs) {
					o := sc.opts
					o.n, o.seed = n, seed
					r := runShrink(o)
					if r.errs != nil {
						t.Errorf("n=%d seed=%d: %s", n, seed, strings.Join(r.errs, "\n\t"))
					}
					if l := scaleLog2(n); sc.rounds == 1 && (r.total != 2*(n-1) || r.agreeMsgs != r.total || r.maxSent != l ||
						n&(n-1) == 0 && r.depth != 2*l || r.depth > 2*l) {
						t.Errorf("n=%d seed=%d no failure: %d messages (%d agreement), busiest rank %d, depth %d; want 2(n-1) = %d, all agreement, %d, depth 2·%d",
							n, seed, r.total, r.agreeMsgs, r.maxSent, r.depth, 2*(n-1), l, l)
					}
					if sc.fromFtrun && r.bcastMsgs != 0 {
						t.Errorf("n=%d seed=%d: %d notices re-broadcast what ftrun told every rank", n, seed, r.bcastMsgs)
					}
					if d := overlay.Degree(n); r.maxBcast > sc.fails*d {
						t.Errorf("n=%d seed=%d: a rank sent %d notices for %d failures; want at most %d·Degree = %d",
							n, seed, r.maxBcast, sc.fails, sc.fails, sc.fails*d)
					}
					w.maxSent, w.maxAgree, w.maxBcast = max(w.maxSent, r.maxSent), max(w.maxAgree, r.maxAgree), max(w.maxBcast, r.maxBcast)
					w.total, w.agreeMsgs, w.bcastMsgs = max(w.total, r.total), max(w.agreeMsgs, r.agreeMsgs), max(w.bcastMsgs, r.bcastMsgs)
					w.otherMsgs, w.depth, w.failed = max(w.otherMsgs, r.otherMsgs), max(w.depth, r.depth), max(w.failed, r.failed)
					w.bytes, w.agreeByte = max(w.bytes, r.bytes), max(w.agreeByte, r.agreeByte)
					w.meanSent += r.meanSent / float64(runs)
				}
				curve = append(curve, w)
				if t.Failed() {
					break // a broken run at n: larger sizes would only take longer to say so
				}
				goruntime.GC() // the 4,096-rank machines are garbage now
			}
			var b strings.Builder
			fmt.Fprintf(&b, "shrink, %s (worst over seeds)\n", sc.name)
			fmt.Fprintf(&b, "%6s %3s %9s %6s %8s %10s %11s %8s %8s %8s %5s %6s %9s\n", "n", "lg", "sent max", "mean", "total", "agree max",
				"notices max", "agree", "notices", "hbeats", "depth", "failed", "bytes/msg")
			for _, r := range curve {
				fmt.Fprintf(&b, "%6d %3d %9d %6.2f %8d %10d %11d %8d %8d %8d %5d %6d %9.1f\n", r.n, scaleLog2(r.n), r.maxSent, r.meanSent, r.total,
					r.maxAgree, r.maxBcast, r.agreeMsgs, r.bcastMsgs, r.otherMsgs, r.depth, r.failed, float64(r.bytes)/float64(max(1, r.total)))
			}
			t.Log(b.String())
			if err := checkScaleCurve(curve, shrinkBounds(sc.rounds, sc.fails, sc.viaNotice)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestScaleShrinkBoundCatchesLinearGrowth shows that checkScaleCurve fails a
// shrink whose cost per rank grows linearly (a failure notice sent to every
// rank instead of along the overlay, say), while a logarithmic one passes.
func TestScaleShrinkBoundCatchesLinearGrowth(t *testing.T) {
	var linear, logarithmic []shrinkResult
	for n := 4; n <= 4096; n *= 2 {
		l := scaleLog2(n)
		linear = append(linear, shrinkResult{n: n, maxSent: 3 * (n - 1), maxBcast: 3 * (n - 1), maxAgree: l, depth: 2 * l})
		logarithmic = append(logarithmic, shrinkResult{n: n, maxSent: 3*2*l + 4*l, maxBcast: 3 * 2 * l, maxAgree: 4 * l, depth: 5 * l})
	}
	bounds := shrinkBounds(2, 3, false)
	if err := checkScaleCurve(linear, bounds); err == nil {
		t.Error("checkScaleCurve accepted 3(n-1) notices per rank")
	} else if !strings.Contains(err.Error(), "n=4096: notices sent max 12285") {
		t.Errorf("checkScaleCurve's error does not name the worst point: %v", err)
	}
	if err := checkScaleCurve(logarithmic, bounds); err != nil {
		t.Errorf("checkScaleCurve rejected a logarithmic curve: %v", err)
	}
}
