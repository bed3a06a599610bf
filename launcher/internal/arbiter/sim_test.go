package arbiter

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/check/simq"
)

// This file is a seeded discrete-event simulator of a job's authority: one
// Node per host, driven as the caller (ftrun, an agent) will drive it, over
// a simulated network, each node with its own clock. A seeded RNG decides
// everything: the job's shape (2..8 hosts, 1, 3 or 5 voters, the rest
// learners), every clock's offset and rate (within ±simOpts.drift of true
// time), message delays, and the faults — crashes (node 1, ftrun's, too),
// two-way partitions, one-way cuts, partial partitions (two nodes cut while
// both reach the rest), isolation of a node for good, stalls (a node takes
// no input for a while, then resumes with its backlog), and heals — plus
// the ranks' lives: exits, hangs found by a suspicion and a probe, false
// suspicions, suspicions of ranks behind a cut, spare admissions. raft's
// own randomness (its election timeouts) is seeded too
// (cryptotest.SetGlobalRandom), so a seed replays exactly.
//
// A message on a cut link is lost or, for cuts in "hold" mode (TCP
// retransmitting), delivered after the heal. Ranks renew their leases with
// their host's node, so a rank acts exactly while its host's node acts and
// the rank itself is alive.
//
// The properties checked at every step (time is the simulator's true time):
//
//  1. One primary world: no node acts (holds a valid host lease and is not
//     crashed) once its host's HostFailed has been applied at any node, and
//     no rank acts once its RankFailed has. Two sides acting at once would
//     mean one of them acts though the log (as the other side sees it)
//     declared it failed.
//  2. No late verdict: when any node applies HostFailed(h), h does not act
//     at that moment; when any node applies RankFailed(r), r does not act
//     (its host's lease has run out, or the rank hung and its host fenced
//     it). This is the "never a late write" guarantee, and 1 follows from
//     it because no leader grants a host declared failed.
//  3. No healthy host declared: a host never in trouble is never declared
//     failed. In trouble means: it crashed, stalled or was isolated; it was
//     on a side of a two-way partition that held no quorum of voters; it was
//     an end of a partial cut; or it was on either side of a one-way cut. A
//     rank that never hung (nor exited: a probe may find it gone before its
//     exit is in the log) is never declared unresponsive.
//  4. Convergence: some time after the last heal (simOpts.settle, well over
//     VerdictBound) the live nodes have one leader they all know, have
//     applied the same state, every crashed or isolated host is declared
//     failed in it, and every live node whose host is not declared acts.
//  5. raft's own: the entries applied at any two nodes agree index by index
//     (applied logs are prefixes of one another), and no term has two
//     leaders.
//
// A failing seed prints its options, the failures and the last events;
// FTRMA_SIM_SEED=n replays one seed, FTRMA_SIM_SEEDS=n runs n of them, and
// FTRMA_TRACE=1 keeps the whole trace.

type simOpts struct {
	seed          int64
	hosts, voters int
	perHost       int
	cfg           Config // timing (ID, Hosts, Voters and RankHost are filled in)

	drift              float64 // each clock runs at 1+d, d in [-drift, drift]
	delayMin, delayMax time.Duration

	faults          int           // random fault episodes
	warmup, horizon time.Duration // faults start in [warmup, warmup+horizon)
	longest         time.Duration // a stall or cut lasts up to this
	settle          time.Duration // the run goes on this long after the last heal
	rankEvents      int           // exits, hangs, suspicions, spares
	codec           bool          // every message goes through AppendBinary and ParseMessage

	dev deviations // broken rules, for TestSimCatchesBrokenRules
}

func defaultSimOpts(seed int64) simOpts {
	rng := rand.New(rand.NewSource(seed))
	hosts := 2 + rng.Intn(7)
	voters := []int{1, 3, 5}[rng.Intn(3)]
	for voters > hosts {
		voters -= 2
	}
	o := simOpts{
		seed: seed, hosts: hosts, voters: voters, perHost: 2,
		drift:    0.01,
		delayMin: 100 * time.Microsecond, delayMax: 10 * time.Millisecond,
		faults: 1 + rng.Intn(8), warmup: 2 * time.Second, horizon: 8 * time.Second,
		longest: 3 * time.Second, rankEvents: 4, codec: seed%2 == 0,
	}
	o.cfg = Config{MaxDelay: o.delayMax, MaxDrift: o.drift}
	o.settle = 2*VerdictBound(o.jobConfig()) + 2*time.Second
	return o
}

// jobConfig returns the Config every node shares (ID aside).
func (o simOpts) jobConfig() Config {
	c := o.cfg
	c.Hosts = o.hosts
	c.Voters = make([]uint64, o.voters)
	for i := range c.Voters {
		c.Voters[i] = uint64(i + 1)
	}
	c.RankHost = make([]int, o.hosts*o.perHost)
	for r := range c.RankHost {
		c.RankHost[r] = r / o.perHost
	}
	return c
}

func (o simOpts) String() string {
	return fmt.Sprintf("seed=%d hosts=%d voters=%d perHost=%d faults=%d drift=%v delay=[%v,%v] codec=%v dev=%+v",
		o.seed, o.hosts, o.voters, o.perHost, o.faults, o.drift, o.delayMin, o.delayMax, o.codec, o.dev)
}

const (
	evTick = iota
	evDeliver
	evDo
)

// envelope kinds: arbiter messages, and the caller's own probe traffic.
const (
	envArb = iota
	envProbe
	envProbeAns
	envProbeHeard
)

type envelope struct {
	kind     int
	from, to int // node indexes (host numbers)
	m        Message
	rank     ftrma.Rank
	alive    bool
}

type event struct {
	at   time.Duration
	kind int
	node int
	env  envelope
	do   func()
	what string
}

type rankLife uint8

const (
	rankAlive rankLife = iota
	rankHung           // hung; its host fences it when probed
	rankGone           // exited
)

type entryID struct {
	term uint64
	data string
}

var simEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type sim struct {
	o     simOpts
	rng   *rand.Rand
	cfg   Config
	nodes []*Node

	rate, off []float64 // clock i reads simEpoch + off[i] + rate[i]·true time
	crashed   []bool
	stalled   []bool
	backlog   [][]envelope
	forever   []bool // isolated for good
	cut       [][]int
	holdCut   [][]int
	held      []envelope
	events    simq.Queue[time.Duration, event]
	now       time.Duration
	lastHeal  time.Duration

	rankHost []int
	life     []rankLife

	declHost  []bool
	out0      []bool // out0[i]: node i has applied HostFailed(0) (in its events' order)
	claims    [2]int // spare claims node 1 applied: by ftrun's host, by another
	declRank  map[ftrma.Rank]bool
	troubled  []bool
	hung      map[ftrma.Rank]bool // ever hung
	applied   map[uint64]entryID
	seenIdx   []uint64
	leaderOf  map[uint64]uint64        // term → leader id
	leaderAt  map[uint64]time.Duration // term → when its leader took office
	declAt    map[int]time.Duration    // host → when its HostFailed was first applied
	messages  int                      // arbiter messages delivered
	sentKinds map[string]int
	errs      []string
	trace     []string
	traceAll  bool
	onSend    func(from int, m Message) // a test's hook on every message sent
	// hints draws whether a crash is hinted to the others (Node.LeaderGone,
	// as a closed link tells a real node), and a stall wrongly so; apart
	// from rng, so that the faults of a seed stay what they were.
	hints *rand.Rand
}

func newSim(o simOpts) *sim {
	s := &sim{o: o, rng: rand.New(rand.NewSource(o.seed ^ 0x5eed)), hints: rand.New(rand.NewSource(o.seed ^ 0x41e7)), traceAll: os.Getenv("FTRMA_TRACE") != ""}
	s.cfg = o.jobConfig()
	n := o.hosts
	s.rate, s.off = make([]float64, n), make([]float64, n)
	s.crashed, s.stalled, s.forever, s.troubled, s.declHost = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
	s.out0 = make([]bool, n)
	s.backlog = make([][]envelope, n)
	s.cut, s.holdCut = make([][]int, n), make([][]int, n)
	for i := range n {
		s.cut[i], s.holdCut[i] = make([]int, n), make([]int, n)
	}
	s.seenIdx = make([]uint64, n)
	for i := range s.seenIdx {
		s.seenIdx[i] = 2 // the bootstrap snapshot
	}
	s.declRank, s.hung, s.applied, s.leaderOf, s.sentKinds = map[ftrma.Rank]bool{}, map[ftrma.Rank]bool{}, map[uint64]entryID{}, map[uint64]uint64{}, map[string]int{}
	s.leaderAt, s.declAt = map[uint64]time.Duration{}, map[int]time.Duration{}
	s.rankHost = slices.Clone(s.cfg.RankHost)
	s.life = make([]rankLife, len(s.rankHost))
	for i := range n {
		s.rate[i] = 1 + (2*s.rng.Float64()-1)*o.drift
		s.off[i] = float64(s.rng.Int63n(int64(time.Hour)))
		c := s.cfg
		c.ID = uint64(i + 1)
		nd, err := newNode(c, s.clock(i), o.dev)
		if err != nil {
			panic(err)
		}
		s.nodes = append(s.nodes, nd)
		s.at(time.Duration(s.rng.Int63n(int64(c.WithDefaults().Tick))), event{kind: evTick, node: i})
	}
	for i := range n {
		s.drain(i)
	}
	return s
}

// clock returns node i's reading of the current true time.
func (s *sim) clock(i int) time.Time {
	return simEpoch.Add(time.Duration(s.off[i] + s.rate[i]*float64(s.now)))
}

func (s *sim) at(t time.Duration, e event) {
	e.at = t
	s.events.Push(t, e)
}

func (s *sim) later(d time.Duration, what string, f func()) {
	s.at(s.now+d, event{kind: evDo, do: f, what: what})
}

func (s *sim) errorf(format string, args ...any) {
	if len(s.errs) < 20 {
		s.errs = append(s.errs, fmt.Sprintf("%v: ", s.now)+fmt.Sprintf(format, args...))
	}
}

func (s *sim) tracef(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%12v ", s.now)+fmt.Sprintf(format, args...))
	if !s.traceAll && len(s.trace) > 400 {
		s.trace = slices.Delete(s.trace, 0, 200)
	}
}

// acting reports whether node i acts now.
func (s *sim) acting(i int) bool { return !s.crashed[i] && s.nodes[i].Acting(s.clock(i)) }

// rankActs reports whether rank r acts now.
func (s *sim) rankActs(r ftrma.Rank) bool {
	return int(r) < len(s.life) && s.life[r] == rankAlive && s.acting(s.rankHost[r])
}

// run simulates until end (true time) and checks the properties.
func (s *sim) run(end time.Duration) {
	for len(s.errs) == 0 {
		if at, ok := s.events.Next(); !ok || at > end {
			break
		}
		_, e := s.events.Pop()
		s.now = max(s.now, e.at)
		s.fire(e)
		s.checkStep()
	}
	s.now = max(s.now, end)
}

func (s *sim) fire(e event) {
	switch e.kind {
	case evTick:
		i := e.node
		if s.crashed[i] {
			return
		}
		tick := time.Duration(float64(s.cfg.WithDefaults().Tick) / s.rate[i])
		s.at(s.now+tick, event{kind: evTick, node: i})
		if s.stalled[i] {
			return
		}
		s.nodes[i].Tick(s.clock(i))
		s.drain(i)
	case evDeliver:
		s.deliver(e.env)
	case evDo:
		if e.what != "" {
			s.tracef("%s", e.what)
		}
		e.do()
	}
}

// send puts env on the network.
func (s *sim) send(env envelope) {
	d := s.o.delayMin + time.Duration(s.rng.Int63n(int64(s.o.delayMax-s.o.delayMin)+1))
	if env.from == env.to {
		d = s.o.delayMin
	}
	s.at(s.now+d, event{kind: evDeliver, env: env})
}

func (s *sim) deliver(env envelope) {
	from, to := env.from, env.to
	if s.crashed[to] {
		return
	}
	if from != to && s.cut[from][to] > 0 {
		if s.holdCut[from][to] > 0 {
			s.held = append(s.held, env)
		}
		return
	}
	if s.stalled[to] {
		s.backlog[to] = append(s.backlog[to], env)
		return
	}
	nd := s.nodes[to]
	switch env.kind {
	case envArb:
		s.messages++
		if s.traceAll || env.m.Kind != KindRaft {
			s.tracef("recv %v", env.m)
		}
		_ = nd.Step(env.m, s.clock(to))
	case envProbe:
		// The host's agent asks the rank: a hung rank does not answer, and
		// the agent fences it before it says so.
		// It says at once that it has the probe (ProbeHeard); a third of
		// its answers then take up to three quarters of a term (its own
		// wait, a kill, a reap), past the leader's first half term.
		alive := int(env.rank) < len(s.life) && s.life[env.rank] == rankAlive
		s.tracef("probe of rank %d at host %d: alive=%v", env.rank, to, alive)
		heard := envelope{kind: envProbeHeard, from: to, to: from, rank: env.rank}
		s.at(s.now+s.o.delayMin+time.Duration(s.hints.Int63n(int64(s.o.delayMax-s.o.delayMin)+1)), event{kind: evDeliver, env: heard})
		ans := envelope{kind: envProbeAns, from: to, to: from, rank: env.rank, alive: alive}
		if s.hints.Intn(3) == 0 {
			slow := time.Duration(s.hints.Int63n(int64(s.cfg.WithDefaults().LeaseTerm) * 3 / 4))
			s.later(slow, "", func() {
				if !s.crashed[to] && s.cut[to][from] == 0 {
					s.send(ans)
				}
			})
			return
		}
		s.send(ans)
		return
	case envProbeHeard:
		nd.ProbeHeard(env.rank, s.clock(to))
	case envProbeAns:
		s.tracef("probe answer rank %d alive=%v at node %d", env.rank, env.alive, to+1)
		nd.ProbeAnswer(env.rank, env.alive, s.clock(to))
	}
	s.drain(to)
}

// drain takes node i's Ready and acts on it.
func (s *sim) drain(i int) {
	nd := s.nodes[i]
	if st, term := nd.IsLeader(), nd.term; st {
		if l, ok := s.leaderOf[term]; ok && l != nd.id {
			s.errorf("raft: term %d has two leaders, %d and %d", term, l, nd.id)
		}
		if _, ok := s.leaderOf[term]; !ok {
			s.leaderAt[term] = s.now
			s.tracef("node %d leads term %d", nd.id, term)
		}
		s.leaderOf[term] = nd.id
	}
	if !nd.HasReady() {
		s.checkLog(i)
		return
	}
	rd := nd.Ready()
	nd.Advance()
	for _, m := range rd.Messages {
		if int(m.To) < 1 || int(m.To) > s.o.hosts || m.To == nd.id {
			s.errorf("node %d sends to %d: %v", nd.id, m.To, m)
			continue
		}
		s.sentKinds[kindName(m)]++
		if s.onSend != nil {
			s.onSend(i, m)
		}
		if s.o.codec {
			b, err := m.AppendBinary(nil)
			if err == nil {
				m, err = ParseMessage(b)
			}
			if err != nil {
				s.errorf("codec: %v", err)
				continue
			}
		}
		s.send(envelope{kind: envArb, from: i, to: int(m.To - 1), m: m})
	}
	for _, p := range rd.Probes {
		s.tracef("node %d probes rank %d on host %d", nd.id, p.Rank, p.Host)
		s.send(envelope{kind: envProbe, from: i, to: p.Host, rank: p.Rank})
	}
	for _, e := range rd.Events {
		s.onEvent(i, e)
	}
	s.checkLog(i)
}

func kindName(m Message) string {
	if m.Kind == KindRaft {
		return m.raft.GetType().String()
	}
	return [...]string{"", "raft", "LeaseAsk", "LeaseGrant", "Suspect"}[m.Kind]
}

// onEvent checks an event applied at node i now (properties 2 and 3).
func (s *sim) onEvent(i int, e Event) {
	s.tracef("node %d applies %v", i+1, e)
	switch e.Kind {
	case EventHostFailed:
		if e.Host == 0 {
			s.out0[i] = true
		}
		if s.acting(e.Host) {
			s.errorf("late verdict: node %d applies HostFailed(%d) while host %d acts (lease to %v, its clock %v)",
				i+1, e.Host, e.Host, s.nodes[e.Host].LeaseExpiry().Sub(simEpoch), s.clock(e.Host).Sub(simEpoch))
		}
		if !s.troubled[e.Host] {
			s.errorf("healthy host declared: node %d applies HostFailed(%d) (%v), a host never in trouble", i+1, e.Host, e.Reason)
		}
		if !s.declHost[e.Host] {
			s.declAt[e.Host] = s.now
		}
		s.declHost[e.Host] = true
	case EventRankFailed:
		if s.rankActs(e.Rank) {
			s.errorf("late verdict: node %d applies RankFailed(%d, %v) while rank %d acts", i+1, e.Rank, e.Reason, e.Rank)
		}
		if e.Reason == ReasonUnresponsive && !s.hung[e.Rank] && s.life[e.Rank] != rankGone {
			s.errorf("healthy rank declared: rank %d found unresponsive, never hung", e.Rank)
		}
		s.declRank[e.Rank] = true
	case EventRankExited:
		if int(e.Rank) >= len(s.life) || s.life[e.Rank] != rankGone {
			s.errorf("node %d applies RankExited(%d), a rank that did not exit", i+1, e.Rank)
		}
	case EventSpareClaimed:
		if i == 0 {
			s.claims[min(e.By, 1)]++
		}
		if (e.By == 0) == s.out0[i] {
			s.errorf("node %d applies a claim of spare %d by host %d against the host-0 rule", i+1, e.Rank, e.By)
		}
	case EventSpareAdmitted, EventSpareJoined:
		for int(e.Rank) >= len(s.rankHost) {
			s.rankHost = append(s.rankHost, -1)
			s.life = append(s.life, rankAlive)
		}
		if s.rankHost[e.Rank] >= 0 && s.rankHost[e.Rank] != e.Host {
			s.errorf("spare %d admitted on host %d and on host %d", e.Rank, s.rankHost[e.Rank], e.Host)
		}
		s.rankHost[e.Rank] = e.Host
	}
}

// checkLog compares the entries node i applied since the last check with
// those any node applied at the same indexes (property 5).
func (s *sim) checkLog(i int) {
	nd := s.nodes[i]
	if nd.applied <= s.seenIdx[i] {
		return
	}
	ents, err := nd.storage.Entries(s.seenIdx[i]+1, nd.applied+1, math.MaxUint64)
	if err != nil {
		s.errorf("node %d: entries %d..%d: %v", i+1, s.seenIdx[i]+1, nd.applied, err)
		return
	}
	for _, e := range ents {
		id := entryID{e.GetTerm(), string(e.GetData())}
		if prev, ok := s.applied[e.GetIndex()]; ok && prev != id {
			s.errorf("raft: node %d applied %v at index %d, another node %v", i+1, id, e.GetIndex(), prev)
		}
		s.applied[e.GetIndex()] = id
	}
	s.seenIdx[i] = nd.applied
}

// checkStep checks property 1.
func (s *sim) checkStep() {
	for h, d := range s.declHost {
		if d && s.acting(h) {
			s.errorf("two worlds: host %d acts though declared failed", h)
		}
	}
	for r := range s.declRank {
		if s.rankActs(r) {
			s.errorf("two worlds: rank %d acts though declared failed", r)
		}
	}
}

// Faults.

func (s *sim) setCut(from, to, d int, hold bool) {
	s.cut[from][to] += d
	if hold {
		s.holdCut[from][to] += d
	}
}

// cutLinks cuts (d=1) or heals (d=-1) every link from a node of a to a node
// of b.
func (s *sim) cutLinks(a, b []int, d int, hold bool) {
	for _, i := range a {
		for _, j := range b {
			if i != j {
				s.setCut(i, j, d, hold)
			}
		}
	}
	if d < 0 {
		s.release()
	}
}

// release sends again the held messages whose link is up.
func (s *sim) release() {
	keep := s.held[:0]
	for _, env := range s.held {
		if s.cut[env.from][env.to] > 0 {
			keep = append(keep, env)
			continue
		}
		s.send(env)
	}
	s.held = keep
}

func (s *sim) crash(i int) {
	s.crashed[i], s.troubled[i] = true, true
	s.tracef("crash node %d", i+1)
}

// hintGone tells every node that still reaches node i, after a message
// delay, that i's process ended (Node.LeaderGone), as its link's end of
// stream tells a real node.
func (s *sim) hintGone(i int) {
	for j := range s.nodes {
		if j == i || s.cut[i][j] > 0 {
			continue
		}
		d := s.o.delayMin + time.Duration(s.hints.Int63n(int64(s.o.delayMax-s.o.delayMin)+1))
		s.later(d, fmt.Sprintf("node %d hears node %d is gone", j+1, i+1), func() {
			if s.crashed[j] || s.stalled[j] {
				return
			}
			s.nodes[j].LeaderGone(uint64(i+1), s.clock(j))
			s.drain(j)
		})
	}
}

func (s *sim) stall(i int, d time.Duration) {
	if s.crashed[i] || s.stalled[i] {
		return
	}
	s.stalled[i], s.troubled[i] = true, true
	s.later(d, fmt.Sprintf("node %d resumes", i+1), func() {
		s.stalled[i] = false
		if s.crashed[i] {
			return
		}
		// The node resumes: a tick, then what arrived meanwhile.
		s.nodes[i].Tick(s.clock(i))
		s.drain(i)
		b := s.backlog[i]
		s.backlog[i] = nil
		for _, env := range b {
			s.deliver(env)
		}
	})
}

// majoritySide reports whether the nodes of side hold a quorum of voters.
func (s *sim) majoritySide(side []int) bool {
	v := 0
	for _, i := range side {
		if i < s.o.voters {
			v++
		}
	}
	return v > s.o.voters/2
}

// troubleSide marks the nodes of a partition's sides in trouble: a side
// without a quorum of voters (both, when neither has one).
func (s *sim) troubleSide(a, b []int) {
	for _, side := range [][]int{a, b} {
		if !s.majoritySide(side) {
			for _, i := range side {
				s.troubled[i] = true
			}
		}
	}
}

// planFaults schedules o.faults random fault episodes and the ranks' events.
func (s *sim) planFaults() {
	o := s.o
	n := o.hosts
	votersLost := 0
	maxLost := (o.voters - 1) / 2
	s.lastHeal = o.warmup
	for range o.faults {
		start := o.warmup + time.Duration(s.rng.Int63n(int64(o.horizon)))
		dur := time.Duration(s.rng.Int63n(int64(o.longest))) + o.cfg.WithDefaults().Tick
		hold := s.rng.Intn(2) == 0
		perm := s.rng.Perm(n)
		switch k := s.rng.Intn(8); {
		case k == 0 || k == 1: // crash (node 1 first, half the time)
			i := perm[0]
			if k == 0 {
				i = 0
			}
			if i < o.voters && (o.voters == 1 || votersLost >= maxLost) {
				continue
			}
			if i < o.voters {
				votersLost++
			}
			hint := s.hints.Intn(2) == 0 // the others hear of it half the time
			s.later(start-s.now, "", func() {
				s.crash(i)
				if hint {
					s.hintGone(i)
				}
			})
			s.lastHeal = max(s.lastHeal, start)
		case k == 2: // stall
			i := perm[0]
			hint := s.hints.Intn(4) == 0 // a wrong hint: the node lives
			s.later(start-s.now, fmt.Sprintf("stall node %d for %v", i+1, dur), func() {
				s.stall(i, dur)
				if hint {
					s.hintGone(i)
				}
			})
			s.lastHeal = max(s.lastHeal, start+dur)
		case k == 3 || k == 4: // two-way partition (k == 4: node 1 alone)
			cutAt := 1 + s.rng.Intn(n-1)
			a, b := perm[:cutAt], perm[cutAt:]
			if k == 4 {
				a, b = []int{0}, without(allNodes(n), 0)
			}
			s.episode(start, dur, fmt.Sprintf("partition %v | %v hold=%v", plus1(a), plus1(b), hold), func(d int) {
				s.cutLinks(a, b, d, hold)
				s.cutLinks(b, a, d, hold)
				if d > 0 {
					s.troubleSide(a, b)
					s.suspectAcross(a, b, start+dur)
				}
			})
		case k == 5: // one-way cut
			cutAt := 1 + s.rng.Intn(n-1)
			a, b := perm[:cutAt], perm[cutAt:]
			s.episode(start, dur, fmt.Sprintf("one-way cut %v → %v hold=%v", plus1(a), plus1(b), hold), func(d int) {
				s.cutLinks(a, b, d, hold)
				if d > 0 {
					for _, i := range allNodes(n) {
						s.troubled[i] = true
					}
				}
			})
		case k == 6: // partial: two nodes cut from each other only
			if n < 3 {
				continue
			}
			a, b := []int{perm[0]}, []int{perm[1]}
			s.episode(start, dur, fmt.Sprintf("partial cut %d ↮ %d hold=%v", perm[0]+1, perm[1]+1, hold), func(d int) {
				s.cutLinks(a, b, d, hold)
				s.cutLinks(b, a, d, hold)
				if d > 0 {
					s.troubled[perm[0]], s.troubled[perm[1]] = true, true
				}
			})
		case k == 7: // a node isolated for good
			i := perm[0]
			if i < o.voters && (o.voters == 1 || votersLost >= maxLost) {
				continue
			}
			if i < o.voters {
				votersLost++
			}
			s.lastHeal = max(s.lastHeal, start)
			s.later(start-s.now, fmt.Sprintf("isolate node %d for good", i+1), func() {
				s.forever[i], s.troubled[i] = true, true
				rest := without(allNodes(n), i)
				s.cutLinks([]int{i}, rest, 1, false)
				s.cutLinks(rest, []int{i}, 1, false)
				s.suspectAcross([]int{i}, rest, math.MaxInt64)
			})
		}
	}
	for range o.rankEvents {
		at := o.warmup/2 + time.Duration(s.rng.Int63n(int64(o.horizon)))
		r := ftrma.Rank(s.rng.Intn(len(s.rankHost)))
		s.lastHeal = max(s.lastHeal, at)
		switch s.rng.Intn(4) {
		case 0:
			s.later(at-s.now, "", func() { s.exitRank(r) })
		case 1:
			s.later(at-s.now, "", func() { s.hangRank(r) })
		case 2:
			s.later(at-s.now, fmt.Sprintf("false suspicion of rank %d", r), func() { s.suspect(r, at+time.Second) })
		case 3:
			h := s.rng.Intn(n)
			s.later(at-s.now, "", func() { s.admitSpare(h) })
		}
	}
}

// episode runs f(1) at start and f(-1) after dur.
func (s *sim) episode(start, dur time.Duration, what string, f func(d int)) {
	s.later(start-s.now, what, func() { f(1) })
	s.later(start+dur-s.now, "heal: "+what, func() { f(-1) })
	s.lastHeal = max(s.lastHeal, start+dur)
}

func (s *sim) exitRank(r ftrma.Rank) {
	if s.life[r] != rankAlive {
		return
	}
	s.life[r] = rankGone
	h := s.rankHost[r]
	s.tracef("rank %d exits (host %d)", r, h)
	// The host's agent reports it (once it runs again, if stalled), and
	// now and then another node too.
	var report func(i int)
	report = func(i int) {
		switch {
		case s.crashed[i]:
		case s.stalled[i]:
			s.later(100*time.Millisecond, "", func() { report(i) })
		default:
			s.nodes[i].ReportExit(r, 3, s.clock(i))
			s.drain(i)
		}
	}
	report(h)
	s.later(time.Duration(s.rng.Int63n(int64(time.Second))), "", func() { report(s.rng.Intn(s.o.hosts)) })
}

func (s *sim) hangRank(r ftrma.Rank) {
	if s.life[r] != rankAlive {
		return
	}
	s.life[r], s.hung[r] = rankHung, true
	s.tracef("rank %d hangs (host %d)", r, s.rankHost[r])
	s.suspect(r, math.MaxInt64)
}

// suspect makes a random live node report rank r suspected, again every
// term until until (the failure detector reports again while the rank stays
// silent) or the rank is declared.
func (s *sim) suspect(r ftrma.Rank, until time.Duration) {
	if s.declRank[r] || s.now > until {
		return
	}
	i := s.rng.Intn(s.o.hosts)
	if !s.crashed[i] && !s.stalled[i] {
		s.nodes[i].ReportSuspect(r, 0, s.clock(i))
		s.drain(i)
	}
	s.later(s.cfg.WithDefaults().LeaseTerm, "", func() { s.suspect(r, until) })
}

// suspectAcross: half the time, a rank on side a is suspected (the ring's
// heartbeats across the cut stop) until the cut heals.
func (s *sim) suspectAcross(a, b []int, until time.Duration) {
	if s.rng.Intn(2) == 0 {
		return
	}
	h := a[s.rng.Intn(len(a))]
	if s.rng.Intn(2) == 0 {
		h = b[s.rng.Intn(len(b))]
	}
	r := ftrma.Rank(h * s.o.perHost)
	s.later(s.cfg.WithDefaults().Tick, fmt.Sprintf("rank %d suspected across a cut", r), func() { s.suspect(r, until) })
}

func (s *sim) admitSpare(h int) {
	r := ftrma.Rank(len(s.rankHost))
	i := s.rng.Intn(s.o.hosts)
	if s.crashed[i] || s.stalled[i] {
		return
	}
	if s.rng.Intn(2) == 0 {
		s.tracef("node %d admits spare %d on host %d", i+1, r, h)
		s.nodes[i].AdmitSpare(r, h, s.clock(i))
		s.drain(i)
		return
	}
	// A claim (which applies only if node i is ftrun's exactly while
	// host 0 is live), and its join a few ticks later, by the same node:
	// ftrun's node while it has its host live, else an agent's that has
	// it failed, as the launcher does.
	if i != 0 && !s.nodes[i].State().Host(0).Failed && !s.crashed[0] && !s.stalled[0] {
		i = 0
	}
	s.tracef("node %d claims spare %d on host %d", i+1, r, h)
	s.nodes[i].ClaimSpare(r, h, []byte("payload"), s.clock(i))
	s.drain(i)
	s.later(5*s.cfg.WithDefaults().Tick, "", func() {
		if !s.crashed[i] && !s.stalled[i] {
			s.nodes[i].JoinSpare(r, fmt.Sprintf("addr-%d", r), s.clock(i))
			s.drain(i)
		}
	})
}

// checkEnd checks property 4 once the run has settled.
func (s *sim) checkEnd() {
	var live []int
	for i := range s.nodes {
		if !s.crashed[i] && !s.forever[i] {
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		return
	}
	leaders := 0
	lead, term := s.nodes[live[0]].Leader()
	ref := s.nodes[live[0]]
	for _, i := range live {
		nd := s.nodes[i]
		if nd.IsLeader() {
			leaders++
		}
		if l, t := nd.Leader(); l != lead || t != term {
			s.errorf("convergence: node %d follows %d in term %d, node %d follows %d in term %d", ref.id, lead, term, nd.id, l, t)
		}
		if nd.Applied() != ref.Applied() || !nd.State().Equal(ref.State()) {
			s.errorf("convergence: node %d applied %d: %v; node %d applied %d: %v", ref.id, ref.Applied(), ref.State(), nd.id, nd.Applied(), nd.State())
		}
		if !s.acting(i) && !ref.State().Host(i).Failed {
			s.errorf("convergence: node %d does not act and is not declared failed", nd.id)
		}
	}
	if leaders != 1 {
		s.errorf("convergence: %d leaders among the live nodes", leaders)
	}
	for i := range s.nodes {
		if (s.crashed[i] || s.forever[i]) && !ref.State().Host(i).Failed {
			s.errorf("convergence: host %d crashed or isolated and not declared failed", i)
		}
	}
	for r, life := range s.life {
		if life == rankGone && ref.State().Rank(ftrma.Rank(r)).Status == RankRunning {
			s.errorf("convergence: rank %d exited, the log says running", r)
		}
	}
}

func (s *sim) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v\n  replay: FTRMA_SIM_SEED=%d go test -run 'TestSim$' ./internal/arbiter/\n", s.o, s.o.seed)
	for _, e := range s.errs {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	b.WriteString("  last events:\n")
	for _, l := range s.trace {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}

// simulate runs one seed to the end and returns its report, or "" when every
// property held.
func simulate(t *testing.T, o simOpts) (string, *sim) {
	cryptotest.SetGlobalRandom(t, uint64(o.seed))
	s := newSim(o)
	s.planFaults()
	s.run(s.lastHeal + o.settle)
	if len(s.errs) == 0 {
		s.checkEnd()
	}
	if len(s.errs) == 0 {
		return "", s
	}
	return s.report(), s
}

func allNodes(n int) []int {
	a := make([]int, n)
	for i := range a {
		a[i] = i
	}
	return a
}

func without(a []int, x int) []int {
	return slices.DeleteFunc(slices.Clone(a), func(y int) bool { return y == x })
}

func plus1(a []int) []int {
	b := make([]int, len(a))
	for i, x := range a {
		b[i] = x + 1
	}
	return b
}

// simSeeds returns the seeds to run: a bounded number by default, n with
// FTRMA_SIM_SEEDS=n, one with FTRMA_SIM_SEED.
func simSeeds(t *testing.T, def int) []int64 {
	if v := os.Getenv("FTRMA_SIM_SEED"); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("FTRMA_SIM_SEED=%q", v)
		}
		return []int64{seed}
	}
	n := def
	if v := os.Getenv("FTRMA_SIM_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("FTRMA_SIM_SEEDS=%q", v)
		}
	} else if testing.Short() {
		n = max(1, def/4)
	}
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(i + 1)
	}
	return seeds
}

// TestSim runs the simulator over many seeds and checks the properties
// listed at the top of this file. Seeds run one after another: raft's
// randomness is process-wide (cryptotest.SetGlobalRandom), so parallel runs
// would not replay.
func TestSim(t *testing.T) {
	def := 200
	if raceEnabled {
		def = 60
	}
	failed, hostsDeclared, ranksDeclared, terms := 0, 0, 0, 0
	var claims [2]int
	start := time.Now()
	shapes := map[string]int{}
	for _, seed := range simSeeds(t, def) {
		o := defaultSimOpts(seed)
		shapes[fmt.Sprintf("%dh/%dv", o.hosts, o.voters)]++
		rep, sm := simulate(t, o)
		if rep != "" {
			t.Error(rep)
			if failed++; failed >= 3 {
				break
			}
		}
		hostsDeclared += len(sm.declAt)
		ranksDeclared += len(sm.declRank)
		terms += len(sm.leaderOf)
		claims[0] += sm.claims[0]
		claims[1] += sm.claims[1]
	}
	t.Logf("%d seeds in %v; shapes (hosts/voters): %v; %d hosts and %d ranks declared failed, %d leader terms; spares claimed by ftrun's node %d, by others %d",
		len(simSeeds(t, def)), time.Since(start).Round(time.Millisecond), shapes, hostsDeclared, ranksDeclared, terms, claims[0], claims[1])
}

// TestSimFoundSeeds replays the seeds on which longer runs of TestSim
// (FTRMA_SIM_SEEDS=30000) once found a defect, whatever the default run
// covers: 17597 and 17609, a leader cut off for half a second condemned a
// healthy host whose probe it could not have had answered (the probe's
// half term now counts only while the leader hears from a quorum).
func TestSimFoundSeeds(t *testing.T) {
	for _, seed := range []int64{17597, 17609} {
		if rep, _ := simulate(t, defaultSimOpts(seed)); rep != "" {
			t.Error(rep)
		}
	}
}

// TestSimCatchesBrokenRules breaks a rule on purpose and checks that the
// simulator notices: a checker that cannot fail proves nothing.
func TestSimCatchesBrokenRules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dev   deviations
		tweak func(*simOpts)
		want  string
	}{
		// The holder counts its lease from the grant's arrival: a grant
		// held up by a cut (TCP delivers it after the heal) makes a lease
		// that outlives what the leader counted.
		{"lease from the grant's arrival", deviations{leaseFromReceipt: true}, nil, "late verdict"},
		// The leader fails a rank whose host did not answer a probe at once:
		// a rank behind a cut is declared while its host's lease runs.
		{"unanswered probe fails the rank", deviations{probeFailsRank: true}, nil, "late verdict"},
		// The leader ignores that a probed host has the probe: an answer
		// that takes longer than half a term (the host's wait, a kill and
		// a reap) condemns a healthy host.
		{"slow probe answer condemns the host", deviations{ignoreHeard: true}, nil, "healthy host declared"},
		// The leader grants whenever raft says it leads, without its own
		// check of a quorum heard from within ET: an old leader cut off
		// with some hosts keeps renewing them until CheckQuorum makes it
		// step down, after its successor's wait began.
		{"leader grants without a fresh quorum", deviations{noQuorumCheck: true}, nil, "late verdict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 400; seed++ {
				o := defaultSimOpts(seed)
				o.dev = tc.dev
				o.faults = 8 // dense faults find a break sooner
				if tc.tweak != nil {
					tc.tweak(&o)
				}
				if rep, _ := simulate(t, o); strings.Contains(rep, tc.want) || strings.Contains(rep, "two worlds") {
					t.Logf("caught with seed %d:\n%s", seed, firstLines(rep, 4))
					return
				}
			}
			t.Errorf("400 seeds with the rule broken, and the simulator saw no %q", tc.want)
		})
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

// TestSimReplays: a seed replays event for event (raft's randomness is
// seeded too), so a failing seed's trace can be had again.
func TestSimReplays(t *testing.T) {
	t.Setenv("FTRMA_TRACE", "1")
	for _, seed := range []int64{3, 7} {
		var traces [2][]string
		for i := range traces {
			_, s := simulate(t, defaultSimOpts(seed))
			traces[i] = s.trace
		}
		if !slices.Equal(traces[0], traces[1]) {
			t.Errorf("seed %d ran twice: %d and %d events, not the same", seed, len(traces[0]), len(traces[1]))
		}
	}
}
