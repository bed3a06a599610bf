package revoke

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/ftrma/ftrma/internal/overlay"
)

// This file holds a deterministic simulation of a job's broadcast layer: n
// Broadcasts, a network that delivers messages in a random order (never
// losing one between live ranks), failure notices that arrive at random
// moments, ranks that crash before or during a broadcast, possibly halfway
// through sending their Ready, and callers that act on Ready at once or only
// after a few more inputs. It checks the broadcast's properties
// as it goes and at the end.

type packet struct {
	from, to int
	notice   int // >= 0: not a message but a failure notice for this rank
	msg      Message
}

type job struct {
	t     testing.TB
	name  string // seed and scenario, printed on failure
	rng   *rand.Rand
	n     int
	bs    []*Broadcast
	adj   [][]int
	alive []bool
	told  []overlay.Set // told[r]: ranks r was told had failed

	inflight []packet
	lazy     []int    // ranks whose Ready the caller has not acted on yet
	late     []packet // failure notices held until the network is quiet

	// crashInSend is the probability that a rank that has something to send
	// crashes after sending only part of it; crashBudget bounds how many
	// ranks may crash that way.
	crashInSend float64
	crashBudget int
	never       bool // some crashes are never learned (a flood's test)

	delivered []map[string][]byte        // per rank: ID -> payload delivered
	sent      map[string]map[[2]int]bool // per ID: (from, to) pairs sent
	sentBy    map[string][]int           // per ID: messages sent by each rank
	total     map[string]int             // per ID: messages sent
}

func newJob(t testing.TB, name string, n int, seed uint64) *job {
	j := &job{
		t:         t,
		name:      name,
		rng:       rand.New(rand.NewPCG(seed, 0xb0ad)),
		n:         n,
		bs:        make([]*Broadcast, n),
		adj:       make([][]int, n),
		alive:     make([]bool, n),
		told:      make([]overlay.Set, n),
		delivered: make([]map[string][]byte, n),
		sent:      map[string]map[[2]int]bool{},
		sentBy:    map[string][]int{},
		total:     map[string]int{},
	}
	for r := range n {
		j.bs[r] = New(r, n)
		j.adj[r] = overlay.Neighbors(r, n)
		j.alive[r] = true
		j.told[r] = overlay.NewSet(n)
		j.delivered[r] = map[string][]byte{}
	}
	return j
}

func (j *job) fatalf(format string, args ...any) {
	j.t.Helper()
	j.t.Fatalf("%s: %s", j.name, fmt.Sprintf(format, args...))
}

// kill crashes rank r before or between steps. Every live rank is told
// now (known), at a random later moment (notice), once nothing else is
// left to do (late: the detector's bound passed), or never — which only a
// flood survives (see TestFloodSurvivesUnknownFailures): comm's detector
// and launcher tell every survivor of every failure, which the tree needs.
func (j *job) kill(r int, how string) {
	j.alive[r] = false
	for q := range j.n {
		if !j.alive[q] {
			continue
		}
		switch how {
		case "known":
			j.fail(q, r)
		case "notice":
			j.inflight = append(j.inflight, packet{to: q, notice: r})
		case "late":
			j.late = append(j.late, packet{to: q, notice: r})
		}
	}
}

func (j *job) fail(q, r int) {
	j.told[q].Add(r)
	j.bs[q].Failed(r)
	j.maybeDrain(q)
}

// maybeDrain acts on rank r's Ready now, or, half the time, leaves it for
// later, as a caller that batches inputs would.
func (j *job) maybeDrain(r int) {
	if j.rng.IntN(2) == 0 {
		j.drain(r)
	} else if !slices.Contains(j.lazy, r) {
		j.lazy = append(j.lazy, r)
	}
}

func (j *job) originate(r int, m Message) {
	j.bs[r].Originate(m)
	j.drain(r)
}

// drain acts on rank r's Ready, checking it, and possibly crashes r halfway
// through.
func (j *job) drain(r int) {
	b := j.bs[r]
	rd := b.Ready()
	b.Advance()
	sends := rd.Send
	crash := len(sends) > 0 && j.crashBudget > 0 && j.rng.Float64() < j.crashInSend
	if crash {
		// Send to a random proper subset, then die before delivering.
		j.crashBudget--
		j.rng.Shuffle(len(sends), func(a, c int) { sends[a], sends[c] = sends[c], sends[a] })
		sends = sends[:j.rng.IntN(len(sends))]
	}
	for _, o := range sends {
		id := o.Msg.ID
		if !slices.Contains(j.adj[r], o.To) {
			j.fatalf("rank %d sent %q to %d, not a neighbour", r, id, o.To)
		}
		if j.told[r].Has(o.To) {
			j.fatalf("rank %d sent %q to %d, which it knows is dead", r, id, o.To)
		}
		if j.sent[id] == nil {
			j.sent[id] = map[[2]int]bool{}
			j.sentBy[id] = make([]int, j.n)
		}
		if j.sent[id][[2]int{r, o.To}] {
			j.fatalf("rank %d sent %q to %d twice (forward once)", r, id, o.To)
		}
		j.sent[id][[2]int{r, o.To}] = true
		j.sentBy[id][r]++
		j.total[id]++
		j.inflight = append(j.inflight, packet{from: r, to: o.To, notice: -1, msg: o.Msg})
	}
	if crash {
		j.kill(r, j.how())
		return
	}
	for _, m := range rd.Deliver {
		if _, dup := j.delivered[r][m.ID]; dup {
			j.fatalf("rank %d delivered %q twice (integrity)", r, m.ID)
		}
		j.delivered[r][m.ID] = m.Payload
	}
}

// step delivers one in-flight packet chosen at random, or acts on a Ready
// left for later; it reports false when there is nothing left to do.
func (j *job) step() bool {
	if len(j.lazy) > 0 && (len(j.inflight) == 0 || j.rng.IntN(4) == 0) {
		i := j.rng.IntN(len(j.lazy))
		r := j.lazy[i]
		j.lazy = slices.Delete(j.lazy, i, i+1)
		if j.alive[r] {
			j.drain(r)
		}
		return true
	}
	if len(j.inflight) == 0 {
		return false
	}
	i := j.rng.IntN(len(j.inflight))
	p := j.inflight[i]
	j.inflight[i] = j.inflight[len(j.inflight)-1]
	j.inflight = j.inflight[:len(j.inflight)-1]
	if !j.alive[p.to] {
		return true // lost with the dead rank
	}
	if p.notice >= 0 {
		j.fail(p.to, p.notice)
		return true
	}
	j.bs[p.to].Step(p.from, p.msg)
	j.maybeDrain(p.to)
	return true
}

// run steps until nothing is left to do, then hands out the late failure
// notices, and steps again, until none are left.
func (j *job) run() {
	for {
		for j.step() {
		}
		if len(j.late) == 0 {
			return
		}
		j.inflight, j.late = j.late, nil
	}
}

// how picks how the live ranks learn of a crash during a broadcast: now,
// at a random moment, or late; or never, when the job says so.
func (j *job) how() string {
	ways := []string{"known", "notice", "late"}
	if j.never {
		ways = append(ways, "never")
	}
	return ways[j.rng.IntN(len(ways))]
}

// liveConnected reports whether the live ranks are connected in the
// binomial graph.
func (j *job) liveConnected() bool {
	dead := overlay.NewSet(j.n)
	start := -1
	for r := range j.n {
		if !j.alive[r] {
			dead.Add(r)
		} else if start < 0 {
			start = r
		}
	}
	if start < 0 {
		return true
	}
	seen := overlay.NewSet(j.n)
	seen.Add(start)
	queue := []int{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range j.adj[v] {
			if !dead.Has(w) && seen.Add(w) {
				queue = append(queue, w)
			}
		}
	}
	return seen.Len()+dead.Len() == j.n
}

// checkAgreement checks, for broadcast id with the given possible payloads:
// if any live rank delivered it and the live ranks are connected, every
// live rank delivered it, with one of the payloads; and no rank sent it more
// than D times, n·D in all. It reports whether the live ranks delivered it.
func (j *job) checkAgreement(id string, payloads ...[]byte) bool {
	j.t.Helper()
	d := overlay.Degree(j.n)
	if j.total[id] > j.n*d {
		j.fatalf("%q: %d messages, more than n·D = %d", id, j.total[id], j.n*d)
	}
	for r, c := range j.sentBy[id] {
		if c > d {
			j.fatalf("%q: rank %d sent %d messages, more than D = %d", id, r, c, d)
		}
	}
	var got, missing []int
	for r := range j.n {
		if !j.alive[r] {
			continue
		}
		p, ok := j.delivered[r][id]
		if !ok {
			missing = append(missing, r)
			continue
		}
		got = append(got, r)
		if !slices.ContainsFunc(payloads, func(q []byte) bool { return bytes.Equal(p, q) }) {
			j.fatalf("%q: rank %d delivered payload %q, not one broadcast", id, r, p)
		}
	}
	if len(got) > 0 && len(missing) > 0 && j.liveConnected() {
		j.fatalf("%q: delivered by live ranks %v but not by live ranks %v, though they are connected (agreement)", id, got, missing)
	}
	return len(got) > 0
}

// sizes are the job sizes of the simulations.
var sizes = []int{2, 3, 7, 16, 64, 256}

func seedCount(def int) int {
	switch {
	case os.Getenv("FTRMA_LONG") != "":
		return 10 * def
	case testing.Short():
		return max(def/10, 2)
	case raceEnabled:
		return max(def/4, 2)
	}
	return def
}

// deadSet picks up to Degree(n)-1 ranks to fail before the broadcast, other
// than keep, by one of several patterns.
func deadSet(rng *rand.Rand, n, keep int, pattern string) []int {
	d := overlay.Degree(n)
	set := map[int]bool{}
	add := func(r int) {
		if r != keep && len(set) < d-1 {
			set[r] = true
		}
	}
	switch pattern {
	case "random":
		f := rng.IntN(d)
		for len(set) < f {
			add(rng.IntN(n))
		}
	case "isolate originator":
		// All the originator's neighbours but one: its message has one
		// way out.
		nb := overlay.Neighbors(keep, n)
		spare := nb[rng.IntN(len(nb))]
		for _, r := range nb {
			if r != spare {
				add(r)
			}
		}
	case "isolate victim":
		// All of some other rank's neighbours but one (the originator may
		// be among them): the message has one way in.
		victim := rng.IntN(n)
		nb := overlay.Neighbors(victim, n)
		spare := nb[rng.IntN(len(nb))]
		for _, r := range nb {
			if r != spare && r != victim {
				add(r)
			}
		}
	case "block":
		// A run of consecutive ranks.
		start := rng.IntN(n)
		for k := range d - 1 {
			add((start + k) % n)
		}
	}
	out := make([]int, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// TestAgreementUnderFailures: with at most Degree(n)-1 ranks failed before
// the broadcast (at random, or chosen to cut the originator or another rank
// off as far as possible), known to the others, learned during the
// broadcast, or only once the network is quiet, a broadcast from a live rank reaches every
// live rank exactly once, whatever the delivery order.
func TestAgreementUnderFailures(t *testing.T) {
	patterns := []string{"random", "isolate originator", "isolate victim", "block"}
	for _, n := range sizes {
		for _, pattern := range patterns {
			for seed := range uint64(seedCount(40)) {
				rng := rand.New(rand.NewPCG(seed, uint64(n)))
				origin := rng.IntN(n)
				dead := deadSet(rng, n, origin, pattern)
				j := newJob(t, fmt.Sprintf("n=%d, %s, seed %d, dead %v, origin %d", n, pattern, seed, dead, origin), n, seed)
				for _, r := range dead {
					j.kill(r, []string{"known", "notice", "late"}[rng.IntN(3)])
				}
				// Some notices arrive before the broadcast starts.
				for range rng.IntN(len(j.inflight) + 1) {
					j.step()
				}
				payload := []byte(fmt.Sprint("payload ", seed))
				j.originate(origin, Message{ID: "revoke/ctx7", Payload: payload})
				j.run()
				if !j.checkAgreement("revoke/ctx7", payload) {
					j.fatalf("no live rank delivered, not even the originator (validity)")
				}
				if !j.liveConnected() {
					j.fatalf("%d failures disconnected the graph", len(dead))
				}
			}
		}
	}
}

// TestAgreementUnderCrashesDuringBroadcast: ranks, the originator included,
// crash while forwarding, after sending to only some of their neighbours,
// on top of ranks failed before. Whenever the live ranks stay connected,
// the broadcast reaches all of them or none (the latter only if every rank
// that had it crashed).
func TestAgreementUnderCrashesDuringBroadcast(t *testing.T) {
	for _, n := range sizes {
		var connected, disconnected, none int
		for seed := range uint64(seedCount(100)) {
			rng := rand.New(rand.NewPCG(seed, uint64(n)+100))
			d := overlay.Degree(n)
			origin := rng.IntN(n)
			dead := deadSet(rng, n, origin, "random")
			j := newJob(t, fmt.Sprintf("n=%d, seed %d, dead %v, origin %d", n, seed, dead, origin), n, seed)
			// Up to D-1 failures in all, or beyond, to see the property
			// hold as long as the graph does.
			j.crashInSend = []float64{0.01, 0.05, 0.3}[rng.IntN(3)]
			j.crashBudget = []int{d - 1 - len(dead), 2 * d, n / 2}[rng.IntN(3)]
			for _, r := range dead {
				j.kill(r, []string{"known", "notice", "late"}[rng.IntN(3)])
			}
			j.originate(origin, Message{ID: "fail/3"})
			j.run()
			delivered := j.checkAgreement("fail/3", nil)
			switch {
			case !j.liveConnected():
				disconnected++
			case !delivered:
				none++
				if j.alive[origin] {
					j.fatalf("the originator is alive and did not deliver (validity)")
				}
			default:
				connected++
			}
		}
		t.Logf("n=%d: %d runs reached every live rank, %d lost the message with its holders, %d disconnected the graph", n, connected, none, disconnected)
		if connected == 0 {
			t.Errorf("n=%d: no run completed a broadcast", n)
		}
	}
}

// TestConcurrentOriginators: several ranks originate the same ID (with
// different payloads, which a caller should not do, to see which wins) at
// random moments of the broadcast. Every rank delivers the ID exactly once;
// an originator that already had it does nothing.
func TestConcurrentOriginators(t *testing.T) {
	for _, n := range sizes {
		for seed := range uint64(seedCount(30)) {
			rng := rand.New(rand.NewPCG(seed, uint64(n)+200))
			j := newJob(t, fmt.Sprintf("n=%d, seed %d", n, seed), n, seed)
			var payloads [][]byte
			for k := range 1 + rng.IntN(4) {
				r := rng.IntN(n)
				p := []byte{byte(k)}
				payloads = append(payloads, p)
				m := Message{ID: "fail/9", Payload: p}
				if j.bs[r].Seen(m.ID) {
					before := j.bs[r].Ready()
					j.bs[r].Originate(m)
					after := j.bs[r].Ready()
					if len(after.Send) != len(before.Send) || len(after.Deliver) != len(before.Deliver) {
						j.fatalf("rank %d originated an ID it had seen and produced output", r)
					}
				} else {
					j.originate(r, m)
				}
				for range rng.IntN(3 * n) {
					j.step()
				}
			}
			j.run()
			if !j.checkAgreement("fail/9", payloads...) {
				j.fatalf("nobody delivered")
			}
			for r := range n {
				if _, ok := j.delivered[r]["fail/9"]; !ok {
					j.fatalf("rank %d did not deliver", r)
				}
			}
		}
	}
}

// TestInterleavedBroadcasts: several broadcasts with different IDs at once,
// with a few ranks failed: each reaches every live rank once, and none
// disturbs another.
func TestInterleavedBroadcasts(t *testing.T) {
	for _, n := range sizes {
		for seed := range uint64(seedCount(20)) {
			rng := rand.New(rand.NewPCG(seed, uint64(n)+300))
			j := newJob(t, fmt.Sprintf("n=%d, seed %d", n, seed), n, seed)
			for _, r := range deadSet(rng, n, -1, "random") {
				j.kill(r, "notice")
			}
			ids := map[string][]byte{}
			for k := range 5 {
				r := rng.IntN(n)
				if !j.alive[r] {
					continue
				}
				id := fmt.Sprintf("revoke/ctx%d", k)
				ids[id] = []byte(id)
				j.originate(r, Message{ID: id, Payload: ids[id]})
				for range rng.IntN(2 * n) {
					j.step()
				}
			}
			j.run()
			for id, p := range ids {
				j.checkAgreement(id, p)
				for r := range n {
					if _, ok := j.delivered[r][id]; j.alive[r] && !ok {
						j.fatalf("live rank %d did not deliver %q", r, id)
					}
				}
			}
		}
	}
}

// TestMessageCount: without failures the originator's tree carries the
// message, n-1 messages; once one failure is known to every rank, it is a
// flood: the originator sends to every live neighbour and every other live
// rank to all but the sender of its first copy, at most n·D.
func TestMessageCount(t *testing.T) {
	for _, n := range append(sizes, 1, 100, 1000) {
		j := newJob(t, fmt.Sprintf("n=%d", n), n, 1)
		j.originate(n/2, Message{ID: "x"})
		j.run()
		if want := max(0, n-1); j.total["x"] != want {
			t.Errorf("n=%d, tree: %d messages, want %d", n, j.total["x"], want)
		}
		j.checkAgreement("x", nil)
		if n < 3 {
			continue
		}
		j = newJob(t, fmt.Sprintf("n=%d, one failure known", n), n, 1)
		j.kill(n-1, "known")
		j.originate(n/2, Message{ID: "x"})
		j.run()
		// Every live rank sends to its live neighbours, but the one its
		// first copy came from (the originator to all of them).
		flood := 0
		for r := range n - 1 {
			nb := 0
			for _, q := range overlay.Neighbors(r, n) {
				if q != n-1 {
					nb++
				}
			}
			if r == n/2 {
				flood += nb
			} else {
				flood += nb - 1
			}
		}
		if j.total["x"] != flood {
			t.Errorf("n=%d, flood: %d messages, want %d", n, j.total["x"], flood)
		}
		j.checkAgreement("x", nil)
	}
}

func BenchmarkBroadcast256(b *testing.B) {
	seed := uint64(0)
	for b.Loop() {
		j := newJob(b, "bench", 256, seed)
		j.originate(int(seed%256), Message{ID: "x"})
		j.run()
		seed++
	}
}
