package agree

import (
	"fmt"
	"github.com/ftrma/ftrma/internal/check/scaletest"
	"math/bits"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// This file measures how the agreement's cost grows with the job size, from
// 4 to 4,096 ranks, and fails if it grows faster than the package comment
// says (O(log n) messages per rank and causal depth). It drives n machines
// with its own small seeded discrete-event network, lighter than sim_test.go's
// (which keeps n² per-pair arrays: 268 MB at 4,096 ranks) and counting what
// that one does not: messages sent by each rank, and bytes on the wire.
//
// The network delivers each message after a random delay of 1..scaleDelay
// ticks, FIFO per pair. Ranks call Start at random times. Failure notices come
// from the environment (the failure detector), not from messages.
//
// Causal depth is measured by stamping: every rank holds the largest depth
// of the messages it has received (0 before any); every message it sends is
// stamped with 1 + that. The largest stamp of the run is the longest causal
// chain of messages, the "rounds" of a synchronous model, whatever the
// delays: a REPORT that waited for three children carries 1 + the deepest of
// them. (Notices of failures carry no depth: they come from outside.)
//
// Runs at 1,000 ranks and up take two seeds by default, smaller ones eight;
// FTRMA_SCALE_SEEDS=k runs k seeds at every size, FTRMA_SCALE_MAX=n caps (or,
// under -race, raises) the largest size. Under -race the sizes stop at 1,024
// (race_test.go's raceEnabled): the machines share no memory, so the race
// detector only makes the largest runs slower.

const (
	scaleDelay  = 20  // a message takes 1..scaleDelay ticks
	scaleStart  = 100 // ranks call Start at 1..scaleStart
	scaleNotify = 200 // a rank told of a crash late hears of it within this many ticks of the crash
)

// scaleOpts is one scale run.
type scaleOpts struct {
	n    int
	seed int64

	// dead ranks crash at time 0, before anyone calls Start. A share
	// deadKnown of the other ranks is told at time 0, the rest within
	// scaleNotify ticks.
	dead      int
	deadKnown float64
	// interior: rank n/2, an interior node of round zero's tree with
	// log2(n)-1 children, crashes as it sends its REPORT (the REPORT is
	// lost): it contributed, but its subtree is cut off.
	interior bool
	// coord: rank 0, the coordinator, crashes while sending its DECIDEs
	// (a random prefix of them goes out).
	coord bool
}

// scaleResult is what one run measured.
type scaleResult struct {
	n         int
	maxSent   int                // messages sent by the busiest rank
	meanSent  float64            // messages sent per rank, over all n ranks
	maxRecv   int                // messages received by the busiest rank
	total     int                // messages sent in all
	depth     int                // longest causal chain of messages
	decDepth  int                // longest causal chain ending in a survivor's decision
	rounds    int                // agreement rounds: round zero and those whose START went out
	bytes     int                // bytes on the wire in all (AppendBinary)
	maxBytes  int                // the largest message
	kinds     [KindNudge + 1]int // messages sent of each kind
	busiest   int                // the rank that sent maxSent ...
	busyKinds [KindNudge + 1]int // ... and of which kinds
	errs      []string
	survivors int
}

const (
	scaleMsg     = iota // a message arrives
	scaleStartE         // the rank calls Start
	scaleNotifyE        // the rank is told that arg crashed
)

type scaleItem struct {
	at       int
	what     int
	from, to int
	arg      int
	depth    int
	msg      Message
}

type scaleNet struct {
	o   scaleOpts
	rng *rand.Rand
	ag  []*Agreement
	q   scaletest.Queue[scaleItem]
	now int

	dead     []bool // stopped: takes no step, receives nothing
	started  []bool
	contrib  []uint64
	decided  []*Decision
	rankDep  []int // the largest depth received so far
	decDep   []int
	sent     []int
	sentKind [][KindNudge + 1]int
	recv     []int
	lastDue  map[[2]int]int // per (from, to): due time of the last message, for FIFO
	rounds   map[Round]bool
	buf      []byte
	res      scaleResult
	crashing bool // the interior victim already crashed (the trigger fires once)
}

func runScale(o scaleOpts) scaleResult {
	n := o.n
	s := &scaleNet{o: o, rng: rand.New(rand.NewSource(o.seed)), lastDue: map[[2]int]int{}, rounds: map[Round]bool{{}: true}}
	s.ag = make([]*Agreement, n)
	s.dead, s.started = make([]bool, n), make([]bool, n)
	s.contrib, s.decided = make([]uint64, n), make([]*Decision, n)
	s.rankDep, s.decDep, s.sent, s.recv = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	s.sentKind = make([][KindNudge + 1]int, n)
	for r := range n {
		s.ag[r] = New(r, n)
		s.contrib[r] = ^uint64(0)
		if s.rng.Intn(4) == 0 {
			s.contrib[r] &^= 1 << uint(s.rng.Intn(64))
		}
	}
	// Crashes before Start: at time 0, every victim is stopped; a share of
	// the others knows at once, the rest later.
	for _, v := range s.rng.Perm(n)[:min(o.dead, n-1)] {
		s.dead[v] = true
	}
	for r := range n {
		if !s.dead[r] {
			continue
		}
		for q := range n {
			if s.dead[q] {
				continue
			}
			if s.rng.Float64() < o.deadKnown {
				s.ag[q].Failed(r)
			} else {
				s.push(scaleItem{at: 1 + s.rng.Intn(scaleNotify), what: scaleNotifyE, to: q, arg: r})
			}
		}
	}
	for r := range n {
		if !s.dead[r] {
			s.push(scaleItem{at: 1 + s.rng.Intn(scaleStart), what: scaleStartE, to: r})
		}
	}
	// Generous (the runs deliver at most 5n), but it stops a protocol that
	// has gone quadratic within seconds.
	budget := 16 * n * (log2ceil(n) + 1) * (o.dead + 2)
	delivered := 0
	for s.q.Len() > 0 {
		it := s.q.Pop()
		s.now = it.at
		r := it.to
		if s.dead[r] {
			continue
		}
		switch it.what {
		case scaleStartE:
			s.started[r] = true
			s.ag[r].Start(0, s.contrib[r])
		case scaleNotifyE:
			s.ag[r].Failed(it.arg)
		case scaleMsg:
			delivered++
			s.recv[r]++
			s.rankDep[r] = max(s.rankDep[r], it.depth)
			s.ag[r].Step(it.from, it.msg)
		}
		s.drain(r)
		if delivered > budget {
			s.errorf("termination: not quiescent after %d messages", delivered)
			break
		}
	}
	s.check()
	s.res.n = n
	s.res.rounds = len(s.rounds)
	for r := range n {
		if s.sent[r] > s.res.maxSent {
			s.res.maxSent, s.res.busiest, s.res.busyKinds = s.sent[r], r, s.sentKind[r]
		}
		s.res.maxRecv = max(s.res.maxRecv, s.recv[r])
		s.res.total += s.sent[r]
		if !s.dead[r] {
			s.res.survivors++
			s.res.decDepth = max(s.res.decDepth, s.decDep[r])
		}
	}
	s.res.meanSent = float64(s.res.total) / float64(n)
	return s.res
}

func (s *scaleNet) push(it scaleItem) { s.q.Push(it.at, it) }

func (s *scaleNet) errorf(format string, args ...any) {
	if len(s.res.errs) < 10 {
		s.res.errs = append(s.res.errs, fmt.Sprintf(format, args...))
	}
}

// crash stops rank r now and tells every other live rank within
// scaleNotify ticks. What r already sent stays in flight (a crash after the
// send completed); a crash during a send burst is modelled by the caller
// sending only a prefix.
func (s *scaleNet) crash(r int) {
	s.dead[r] = true
	for q := range s.o.n {
		if !s.dead[q] {
			s.push(scaleItem{at: s.now + 1 + s.rng.Intn(scaleNotify), what: scaleNotifyE, to: q, arg: r})
		}
	}
}

// drain acts on rank r's Ready: sends, decisions, and the planned crashes.
func (s *scaleNet) drain(r int) {
	a := s.ag[r]
	if !a.HasReady() {
		return
	}
	rd := a.Ready()
	a.Advance()
	sends := rd.Send
	die := false
	switch {
	case s.o.interior && r == s.o.n/2 && !s.crashing:
		if i := slices.IndexFunc(sends, func(o Outgoing) bool { return o.Msg.Kind == KindReport }); i >= 0 {
			sends, die, s.crashing = sends[:i], true, true
		}
	case s.o.coord && r == 0 && len(rd.Decided) > 0:
		// At least one child misses the decision.
		sends, die = sends[:s.rng.Intn(max(1, len(sends)))], true
	}
	for _, o := range sends {
		m := o.Msg
		if o.To < 0 || o.To >= s.o.n || o.To == r {
			s.errorf("rank %d sends to rank %d: %v", r, o.To, m)
			continue
		}
		s.buf = m.AppendBinary(s.buf[:0])
		s.res.bytes += len(s.buf)
		s.res.maxBytes = max(s.res.maxBytes, len(s.buf))
		s.res.kinds[m.Kind]++
		if m.Kind == KindStart {
			s.rounds[m.Round] = true
		}
		d := s.rankDep[r] + 1
		s.res.depth = max(s.res.depth, d)
		s.sent[r]++
		s.sentKind[r][m.Kind]++
		p := [2]int{r, o.To}
		due := max(s.now+1+s.rng.Intn(scaleDelay), s.lastDue[p])
		s.lastDue[p] = due
		s.push(scaleItem{at: due, what: scaleMsg, from: r, to: o.To, depth: d, msg: m})
	}
	if die {
		s.crash(r)
		return
	}
	for _, d := range rd.Decided {
		if s.decided[r] != nil {
			s.errorf("rank %d decided twice", r)
			continue
		}
		dd := d
		s.decided[r] = &dd
		s.decDep[r] = s.rankDep[r]
	}
}

// check verifies what the simulator in sim_test.go verifies on thousands of
// schedules, so that a cheap wrong answer cannot pass for a cheap run:
// termination, agreement among survivors, and validity.
func (s *scaleNet) check() {
	var ref *Decision
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
	inF := make([]bool, s.o.n)
	for _, r := range ref.Failed {
		inF[r] = true
		if !s.dead[r] {
			s.errorf("validity: survivor %d in the failed set", r)
		}
	}
	// The value is the AND of a set of contributors holding every rank
	// outside Failed: at most the AND over those, at least the AND over
	// every rank that started.
	outside, all := ^uint64(0), ^uint64(0)
	for r := range s.o.n {
		if !inF[r] {
			if !s.started[r] {
				s.errorf("validity: rank %d never started but is not in the failed set", r)
			}
			outside &= s.contrib[r]
		}
		if s.started[r] {
			all &= s.contrib[r]
		}
	}
	if ref.Value&^outside != 0 || all&^ref.Value != 0 {
		s.errorf("validity: value %#x not between %#x and %#x", ref.Value, all, outside)
	}
}

// --- the curve and its bounds ---------------------------------------------------

// logBound is a bound a*ceil(log2 n)+b on one metric of a curve.
type logBound struct {
	metric string
	a, b   int
	get    func(scaleResult) int
}

// checkCurve returns an error naming every point of the curve above its bound.
func checkCurve(curve []scaleResult, bounds []logBound) error {
	bs := make([]scaletest.Bound[scaleResult], len(bounds))
	for i, b := range bounds {
		bs[i] = scaletest.Bound[scaleResult]{Metric: b.metric, A: b.a, B: b.b, Get: b.get}
	}
	return scaletest.Check(curve, func(r scaleResult) int { return r.n }, bs)
}

var (
	maxSentOf = func(r scaleResult) int { return r.maxSent }
	depthOf   = func(r scaleResult) int { return r.depth }
	roundsOf  = func(r scaleResult) int { return r.rounds }
)

// scaleSizes are scaletest.Sizes: 4 to 4,096 ranks (1,024 under -race).
func scaleSizes() []int { return scaletest.Sizes(raceEnabled) }

// scaleSeeds is how many seeds to run at size n.
func scaleSeeds(n int) int { return scaletest.Seeds(n, 8, 2) }

// worst merges the runs of one size: the largest of each metric (the
// mean's mean).
func worst(runs []scaleResult) scaleResult {
	w := runs[0]
	mean := 0.0
	for _, r := range runs {
		if r.maxSent > w.maxSent {
			w.maxSent, w.busiest, w.busyKinds = r.maxSent, r.busiest, r.busyKinds
		}
		w.maxRecv = max(w.maxRecv, r.maxRecv)
		w.total, w.depth, w.decDepth = max(w.total, r.total), max(w.depth, r.depth), max(w.decDepth, r.decDepth)
		w.rounds, w.maxBytes = max(w.rounds, r.rounds), max(w.maxBytes, r.maxBytes)
		w.bytes = max(w.bytes, r.bytes)
		mean += r.meanSent
	}
	w.meanSent = mean / float64(len(runs))
	return w
}

func logCurve(t *testing.T, name string, curve []scaleResult) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s (worst over seeds)\n", name)
	fmt.Fprintf(&b, "%6s %3s %9s %6s %8s %8s %5s %5s %6s %9s %9s  %s\n", "n", "lg", "sent max", "mean", "total", "recv max",
		"depth", "dec", "rounds", "bytes/msg", "max bytes", "busiest rank: START REPORT DECIDE NUDGE")
	for _, r := range curve {
		k := r.busyKinds
		fmt.Fprintf(&b, "%6d %3d %9d %6.2f %8d %8d %5d %5d %6d %9.1f %9d  %d: %d %d %d %d\n", r.n, log2ceil(r.n), r.maxSent, r.meanSent, r.total,
			r.maxRecv, r.depth, r.decDepth, r.rounds, float64(r.bytes)/float64(max(1, r.total)), r.maxBytes,
			r.busiest, k[KindStart], k[KindReport], k[KindDecide], k[KindNudge])
	}
	t.Log(b.String())
}

// roundBounds are the bounds of a run that takes at most R rounds, from the
// package comment's cost section. In one round a rank sends at most one START
// and one DECIDE per child (ceil(log2 n) children at most), one REPORT and one
// NUDGE: 2·ceil(log2 n)+2; a leader also answers the NUDGEs it got, one per
// topmost live rank of a dead round, ceil(log2 n) at most. Round zero is
// 2·ceil(log2 n) deep (REPORTs up, DECIDEs down); each failure that cuts a
// round off costs one round more, a START, REPORT and DECIDE sweep of
// 3·ceil(log2 n), and a NUDGE and its answer (2) when the round died with
// its coordinator.
func roundBounds(rounds int) []logBound {
	return []logBound{
		{"sent max", 2*rounds + 1, 2 * rounds, maxSentOf},
		{"depth", 2 + 3*(rounds-1), 2 * (rounds - 1), depthOf},
		{"rounds", 0, rounds, roundsOf},
	}
}

// treeDepth is the depth of the binomial tree over n nodes: the most bits
// set in an index below n (ceil(log2 n) when n is a power of two).
func treeDepth(n int) int {
	d := 0
	for i := range n {
		d = max(d, bits.OnesCount(uint(i)))
	}
	return d
}

// TestScale runs every scenario at every size, checks each run's outcome
// (termination, agreement, validity) and each curve against the bounds of
// the package comment (roundBounds, with the rounds each scenario may take);
// the failure-free runs must match the package comment exactly: 2(n-1)
// messages, the busiest rank (rank 0: one DECIDE per child) sends
// ceil(log2 n), causal depth twice the tree's. It fails if a scenario needs
// more rounds, or more messages per round, at any size.
func TestScale(t *testing.T) {
	type scenario struct {
		name   string
		opts   scaleOpts
		rounds int // the rounds it may take
	}
	scenarios := []scenario{
		{name: "failure-free", rounds: 1},
		{
			// Rank 0 knows of the crashes at Start: it opens round 1
			// over the survivors at once (roundZeroDoomed), while the
			// others' round-zero REPORTs are wasted.
			name: "3 crashed before Start, known to all", rounds: 2,
			opts: scaleOpts{dead: 3, deadKnown: 1},
		},
		{
			// Half the ranks hear late: round zero runs until the parent
			// of each dead rank hears of it, then a round more per crash
			// discovered late (3), and one for a leader change (when
			// rank 0 is among the dead).
			name: "3 crashed before Start, known to half", rounds: 5,
			opts: scaleOpts{dead: 3, deadKnown: 0.5},
		},
		{
			// Rank n/2's subtree is cut off in round zero: round zero
			// completes without it, and round 1 sweeps once more.
			name: "interior node crashes while reporting", rounds: 2,
			opts: scaleOpts{interior: true},
		},
		{
			// Rank 0 dies while sending its DECIDEs: the ranks whose
			// parent it was and that missed the decision nudge rank 1,
			// which runs round (1,1) and answers them.
			name: "coordinator crashes while deciding", rounds: 2,
			opts: scaleOpts{coord: true},
		},
	}
	sizes := scaleSizes()
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			var curve []scaleResult
			for _, n := range sizes {
				var runs []scaleResult
				for seed := range int64(scaleSeeds(n)) {
					o := sc.opts
					o.n, o.seed = n, seed
					r := runScale(o)
					if r.errs != nil {
						t.Errorf("n=%d seed=%d: %s", n, seed, strings.Join(r.errs, "\n\t"))
					}
					if l, d := log2ceil(n), treeDepth(n); sc.rounds == 1 &&
						(r.total != 2*(n-1) || r.maxSent != l || r.depth != 2*d || r.decDepth != 2*d) {
						t.Errorf("n=%d seed=%d failure-free: %d messages, busiest rank %d, depth %d (decision %d); want 2(n-1) = %d, %d, 2·%d",
							n, seed, r.total, r.maxSent, r.depth, r.decDepth, 2*(n-1), l, d)
					}
					runs = append(runs, r)
				}
				curve = append(curve, worst(runs))
				if t.Failed() {
					break // a broken run at n: larger sizes would only take longer to say so
				}
			}
			logCurve(t, sc.name, curve)
			if err := checkCurve(curve, roundBounds(sc.rounds)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestScaleBoundCatchesLinearGrowth shows that checkCurve fails a protocol
// whose cost per rank grows linearly (a coordinator that sends its DECIDE to
// every rank, say), while a logarithmic curve passes.
func TestScaleBoundCatchesLinearGrowth(t *testing.T) {
	var linear, logarithmic []scaleResult
	for n := 4; n <= 4096; n *= 2 {
		linear = append(linear, scaleResult{n: n, maxSent: n - 1, depth: 2 * log2ceil(n)})
		logarithmic = append(logarithmic, scaleResult{n: n, maxSent: log2ceil(n), depth: 2 * log2ceil(n)})
	}
	bounds := []logBound{{"sent max", 1, 0, maxSentOf}, {"depth", 2, 0, depthOf}}
	if err := checkCurve(linear, bounds); err == nil {
		t.Error("checkCurve accepted n-1 messages per rank against the bound ceil(log2 n)")
	} else if !strings.Contains(err.Error(), "n=4096: sent max 4095") {
		t.Errorf("checkCurve's error does not name the worst point: %v", err)
	}
	if err := checkCurve(logarithmic, bounds); err != nil {
		t.Errorf("checkCurve rejected a logarithmic curve: %v", err)
	}
	// A broken agreement at scale fails the exact failure-free check too:
	// a protocol in which rank 0 waits for one more round of REPORTs
	// (depth 3·ceil(log2 n)) breaks the depth bound from n = 4.
	deep := []scaleResult{{n: 4, maxSent: 2, depth: 6}}
	if checkCurve(deep, bounds) == nil {
		t.Error("checkCurve accepted depth 6 at n=4 against 2·ceil(log2 n) = 4")
	}
}
