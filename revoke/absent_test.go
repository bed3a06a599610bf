package revoke

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ftrma/ftrma/internal/overlay"
)

// spareJob is a job of capacity n whose ranks start absent until started:
// each started rank has a Broadcast, and the network delivers a message
// from x to y in a random order, never to a dead rank, and only when y
// counts x present (a transport refuses a rank not admitted). It checks
// that no Broadcast ever sends to a rank it counts absent.
type spareJob struct {
	t        *testing.T
	name     string
	rng      *rand.Rand
	n        int
	bs       []*Broadcast // nil: not started
	dead     []bool
	inflight []Outgoing
	from     []int // sender of each inflight message
	got      []map[string]bool
}

func newSpareJob(t *testing.T, name string, n, present int, seed uint64) *spareJob {
	j := &spareJob{t: t, name: name, rng: rand.New(rand.NewPCG(seed, 7)), n: n,
		bs: make([]*Broadcast, n), dead: make([]bool, n), got: make([]map[string]bool, n)}
	var absent []int
	for r := present; r < n; r++ {
		absent = append(absent, r)
	}
	for r := range present {
		j.bs[r] = New(r, n, absent...)
		j.got[r] = map[string]bool{}
	}
	return j
}

// start starts spare s with the present set given (every rank not listed,
// other than s, stays absent), the failed ones among them told.
func (j *spareJob) start(s int, present []int) {
	var absent []int
	for r := range j.n {
		if r != s && !slices.Contains(present, r) {
			absent = append(absent, r)
		}
	}
	j.bs[s] = New(s, j.n, absent...)
	j.got[s] = map[string]bool{}
	for _, r := range present {
		if j.dead[r] {
			j.bs[s].Failed(r)
		}
	}
}

func (j *spareJob) kill(r int) { j.dead[r] = true }

func (j *spareJob) drain(r int) {
	b := j.bs[r]
	rd := b.Ready()
	b.Advance()
	for _, o := range rd.Send {
		if !b.present[o.To] {
			j.t.Fatalf("%s: rank %d sent to rank %d, absent here", j.name, r, o.To)
		}
		j.inflight = append(j.inflight, o)
		j.from = append(j.from, r)
	}
	for _, m := range rd.Deliver {
		j.got[r][m.ID] = true
	}
}

func (j *spareJob) originate(r int, id string) {
	j.bs[r].Originate(Message{ID: id})
	j.drain(r)
}

// run delivers everything in flight, in a random order; then every live
// rank learns of every failure (as comm's detector and launcher see to,
// which a tree relies on: see the package documentation) and what that
// sends is delivered too.
func (j *spareJob) run() {
	j.deliverAll()
	for r, b := range j.bs {
		if b == nil || j.dead[r] {
			continue
		}
		for d, dead := range j.dead {
			if dead {
				b.Failed(d)
			}
		}
		j.drain(r)
	}
	j.deliverAll()
}

// deliverAll delivers everything in flight, in a random order.
func (j *spareJob) deliverAll() {
	for len(j.inflight) > 0 {
		i := j.rng.IntN(len(j.inflight))
		o, from := j.inflight[i], j.from[i]
		last := len(j.inflight) - 1
		j.inflight[i], j.from[i] = j.inflight[last], j.from[last]
		j.inflight, j.from = j.inflight[:last], j.from[:last]
		if j.dead[o.To] || j.bs[o.To] == nil || !j.bs[o.To].present[from] {
			continue
		}
		j.bs[o.To].Step(from, o.Msg)
		j.drain(o.To)
	}
}

// missing returns the live ranks of want that did not deliver id.
func (j *spareJob) missing(id string, want []int) []int {
	var out []int
	for _, r := range want {
		if !j.dead[r] && !j.got[r][id] {
			out = append(out, r)
		}
	}
	return out
}

// combinations calls f with every k-subset of [0, n).
func combinations(n, k int, f func([]int)) {
	c := make([]int, k)
	var rec func(i, from int)
	rec = func(i, from int) {
		if i == k {
			f(c)
			return
		}
		for v := from; v < n; v++ {
			c[i] = v
			rec(i+1, v+1)
		}
	}
	rec(0, 0)
}

// TestAbsentRanksAreInNoGraph: with 24 of 32 ranks absent, a rank's
// neighbours are those of the binomial graph over the 8 present ranks.
func TestAbsentRanksAreInNoGraph(t *testing.T) {
	const n, present = 32, 8
	var absent []int
	for r := present; r < n; r++ {
		absent = append(absent, r)
	}
	for r := range present {
		if got, want := New(r, n, absent...).Neighbors(), overlay.Neighbors(r, present); !slices.Equal(got, want) {
			t.Errorf("rank %d forwards to %v, want %v", r, got, want)
		}
	}
	// A present set with holes is numbered in rank order: 0, 2, 5, 9.
	b := New(5, 10, 1, 3, 4, 6, 7, 8)
	if got := b.Neighbors(); !slices.Equal(got, []int{0, 2, 9}) {
		t.Errorf("rank 5 of {0 2 5 9} forwards to %v, want [0 2 9]", got)
	}
	if b.Admit(5) || b.Admit(0) || b.Admit(10) || b.Admit(-1) {
		t.Error("Admit of self, a present rank or a rank outside the job reported true")
	}
}

// TestReliableAmongPresentWithSpares: 8 ranks present and 24 spares absent;
// for every set of D(8)-1 = 4 failed present ranks and every live
// originator, every live present rank delivers. Over the graph on all 32
// ranks, with the absent spares skipped as dead, some of these cases cut a
// live rank off: the test checks that it does, so that it tests something.
func TestReliableAmongPresentWithSpares(t *testing.T) {
	const n, present = 32, 8
	k := overlay.Degree(present) - 1
	var everyone []int
	for r := range present {
		everyone = append(everyone, r)
	}
	cases, cutOld := 0, 0
	combinations(present, k, func(failed []int) {
		for origin := range present {
			if slices.Contains(failed, origin) {
				continue
			}
			cases++
			j := newSpareJob(t, fmt.Sprintf("failed %v origin %d", failed, origin), n, present, uint64(cases))
			for _, r := range failed {
				j.kill(r)
			}
			// Half the cases tell the live ranks of the failures first.
			if cases%2 == 0 {
				for r := range present {
					if !j.dead[r] {
						for _, f := range failed {
							j.bs[r].Failed(f)
						}
					}
				}
			}
			j.originate(origin, "revoke/1")
			j.run()
			if miss := j.missing("revoke/1", everyone); len(miss) > 0 {
				t.Fatalf("%s: live ranks %v did not deliver", j.name, miss)
			}
			if !connectedOld(n, present, failed, origin) {
				cutOld++
			}
		}
	})
	if cutOld == 0 {
		t.Fatalf("the graph over all %d ranks stays connected in all %d cases: the scenario tests nothing", n, cases)
	}
	t.Logf("%d cases; the graph over all %d ranks would have cut a live rank off in %d", cases, n, cutOld)
}

// connectedOld reports whether every live present rank is reached from
// origin in the binomial graph over all n ranks, absent ranks counted dead.
func connectedOld(n, present int, failed []int, origin int) bool {
	seen := map[int]bool{origin: true}
	queue := []int{origin}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range overlay.Neighbors(v, n) {
			if w < present && !slices.Contains(failed, w) && !seen[w] {
				seen[w] = true
				queue = append(queue, w)
			}
		}
	}
	return len(seen) == present-len(failed)
}

// TestReliableDuringAdmission: spares 8, 9 and 10 start one after the other
// in a job of 8 present ranks (capacity 32), and each rank has admitted a
// random prefix of them (the views differ), while up to D(8)-1 ranks of
// the settled 8 have failed. Every broadcast by a live rank of the 8
// reaches every live rank of the 8; one by a spare reaches them once a
// live neighbour of the spare among the 8 has admitted it; and once every live rank
// has admitted every spare, every live rank delivers everything.
func TestReliableDuringAdmission(t *testing.T) {
	const n, present = 32, 8
	spares := []int{8, 9, 10}
	k := overlay.Degree(present) - 1
	seeds := 3000
	if testing.Short() {
		seeds = 50
	}
	var old []int
	for r := range present {
		old = append(old, r)
	}
	for seed := range uint64(seeds) {
		j := newSpareJob(t, fmt.Sprintf("seed %d", seed), n, present, seed)
		rng := j.rng
		failed := rng.Perm(present)[:k-rng.IntN(2)]
		for _, r := range failed {
			j.kill(r)
		}
		// Spare i started after the old ranks had admitted spares[:i]
		// (from ftrun's point of view); each old rank has admitted a
		// random prefix of them since, and so has each started spare.
		started := 1 + rng.IntN(len(spares))
		for i, s := range spares[:started] {
			j.start(s, append(slices.Clone(old), spares[:i]...))
		}
		all := false
		if seed%4 == 0 {
			all = true // everyone has admitted every started spare
		}
		for r := range n {
			if j.bs[r] == nil {
				continue
			}
			upto := started
			if !all {
				upto = rng.IntN(started + 1)
			}
			for _, s := range spares[:upto] {
				j.bs[r].Admit(s)
			}
		}
		// Failures are known to half the live ranks.
		for r := range n {
			if j.bs[r] != nil && !j.dead[r] && rng.IntN(2) == 0 {
				for _, f := range failed {
					j.bs[r].Failed(f)
				}
			}
		}
		for r := range n {
			if j.bs[r] != nil && !j.dead[r] {
				j.originate(r, fmt.Sprintf("from/%d", r))
			}
		}
		j.run()
		everyone := slices.Clone(old)
		everyone = append(everyone, spares[:started]...)
		for r := range n {
			if j.bs[r] == nil || j.dead[r] {
				continue
			}
			id := fmt.Sprintf("from/%d", r)
			want := old
			if all {
				want = everyone
			}
			if r >= present && !all && !admittedByLiveNeighbour(j, r, present) {
				continue
			}
			if miss := j.missing(id, want); len(miss) > 0 {
				t.Fatalf("%s (failed %v, spares started %v, all admitted %v): %s missed by %v", j.name, failed, spares[:started], all, id, miss)
			}
		}
	}
}

// admittedByLiveNeighbour reports whether a live rank below present (of
// the settled set) that spare s forwards to counts s present.
func admittedByLiveNeighbour(j *spareJob, s, present int) bool {
	for _, r := range j.bs[s].Neighbors() {
		if r < present && !j.dead[r] && j.bs[r].present[s] {
			return true
		}
	}
	return false
}

// TestSettleAndFailedAbsent: Settle drops the graphs of earlier present
// sets; a rank learned failed while absent becomes present (and dead).
func TestSettleAndFailedAbsent(t *testing.T) {
	const n = 16
	absent := []int{8, 9, 10, 11, 12, 13, 14, 15}
	b := New(7, n, absent...)
	before := b.Neighbors() // over 0..7: [3 5 6 0]
	if !b.Admit(8) || b.Admit(8) {
		t.Fatal("Admit(8) twice: want true, then false")
	}
	after := overlay.Neighbors(7, 9) // over 0..8
	for _, r := range append(slices.Clone(before), after...) {
		if !slices.Contains(b.Neighbors(), r) {
			t.Fatalf("after Admit(8): forwards to %v, missing %d (old graph %v, new %v)", b.Neighbors(), r, before, after)
		}
	}
	b.Settle()
	if got := b.Neighbors(); !slices.Equal(got, after) {
		t.Fatalf("after Settle: forwards to %v, want %v", got, after)
	}
	b.Failed(9) // started, and failed before this rank admitted it
	if b.Admit(9) {
		t.Fatal("a failed spare was admitted")
	}
	b.Settle()
	if got := b.Neighbors(); !slices.Equal(got, overlay.Neighbors(7, 10)) {
		t.Fatalf("after Failed(9) and Settle: forwards to %v, want the graph over 0..9 %v", got, overlay.Neighbors(7, 10))
	}
	b.Originate(Message{ID: "x"})
	if slices.Contains(targets(b.Ready()), 9) {
		t.Fatal("sent to the failed spare 9")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New with self absent did not panic")
		}
	}()
	New(3, 8, 3)
}
