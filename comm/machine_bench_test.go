package comm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/overlay"
	"github.com/ftrma/ftrma/revoke"
)

// The machine's part of the broadcast's cost: a rank forwards a broadcast
// to none of the ranks whose copies it stepped before its output was taken
// (machine.holds), and the runtime steps what arrived together before it
// sends (runtime.run).

func bcastMsg(id string) []byte {
	return revoke.Message{ID: id}.AppendBinary([]byte{kindBcast})
}

func bcastTargets(rd machineReady, id string) []ftrma.Rank {
	var to []ftrma.Rank
	for _, o := range rd.Send {
		if m, err := revoke.ParseMessage(o.msg[1:]); o.msg[0] == kindBcast && err == nil && m.ID == id {
			to = append(to, o.to)
		}
	}
	slices.Sort(to)
	return to
}

func testMachine(t testing.TB, self, n int) *machine {
	t.Helper()
	m, err := newMachine(failure.Config{Period: time.Second, Timeout: 10 * time.Second}, self, n, false, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	m.advance()
	return m
}

// A rank that steps copies of a broadcast from several neighbours before
// its output is taken forwards it to every other neighbour, and to none of
// them; a copy stepped after the output was taken changes nothing.
func TestMachineForwardsToNoneItHeardFrom(t *testing.T) {
	const n, self = 16, 0
	now := time.Unix(1000, 0)
	m := testMachine(t, self, n)
	m.step(now, 1, bcastMsg("revoke/7"))
	m.step(now, 2, bcastMsg("revoke/7"))
	m.step(now, 8, bcastMsg("revoke/7"))
	rd := m.ready()
	m.advance()
	var want []ftrma.Rank
	for _, r := range overlay.Neighbors(self, n) {
		if r != 1 && r != 2 && r != 8 {
			want = append(want, ftrma.Rank(r))
		}
	}
	if got := bcastTargets(rd, "revoke/7"); !slices.Equal(got, want) {
		t.Errorf("forwarded to %v, want %v (every neighbour but 1, 2 and 8)", got, want)
	}
	if !slices.Equal(rd.Notices, []string{"revoke/7"}) {
		t.Errorf("notices %q, want [revoke/7]", rd.Notices)
	}
	m.step(now, 4, bcastMsg("revoke/7"))
	if m.hasReady() {
		t.Errorf("a late copy produced output: %+v", m.ready())
	}
	// Another broadcast's copy from rank 4 does not cancel this one's.
	m.step(now, 4, bcastMsg("revoke/8"))
	m.step(now, 1, bcastMsg("revoke/9"))
	m.step(now, 4, bcastMsg("revoke/8"))
	rd = m.ready()
	if got := bcastTargets(rd, "revoke/9"); !slices.Contains(got, 4) || slices.Contains(got, 1) {
		t.Errorf("revoke/9 forwarded to %v: want rank 4 among them, rank 1 not", got)
	}
}

// The broadcast stays reliable with copies handled in batches: n machines
// exchange a broadcast (and a failure notice) in random batches while
// ranks crash, fewer than the overlay's degree in all, some halfway through
// sending a batch's output; every survivor must deliver every message a
// survivor delivered.
func TestMachineBatchedBroadcastReliable(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 4 + rng.IntN(9)
		if !batchedRun(t, rng, n, seed) {
			return
		}
	}
}

type packet struct {
	from, to int
	msg      []byte
}

func batchedRun(t *testing.T, rng *rand.Rand, n int, seed uint64) bool {
	now := time.Unix(1000, 0)
	ms := make([]*machine, n)
	for r := range ms {
		ms[r] = testMachine(t, r, n)
	}
	dead := make([]bool, n)
	crashes := rng.IntN(overlay.Degree(n))
	var inflight []packet
	delivered := make([]map[string]bool, n)
	for r := range delivered {
		delivered[r] = map[string]bool{}
	}
	flush := func(r int) {
		if !ms[r].hasReady() {
			return
		}
		rd := ms[r].ready()
		ms[r].advance()
		sends := rd.Send
		if crashes > 0 && rng.IntN(3) == 0 {
			// Crash halfway through sending this output.
			sends = sends[:rng.IntN(len(sends)+1)]
			crashes--
			dead[r] = true
		}
		for _, o := range sends {
			inflight = append(inflight, packet{r, int(o.to), o.msg})
		}
		for _, id := range rd.Notices {
			delivered[r][id] = true
		}
		if dead[r] {
			// Every survivor learns of the crash, at some later point.
			for q := range ms {
				if q != r {
					inflight = append(inflight, packet{-1, q, []byte(fmt.Sprint(r))})
				}
			}
		}
	}
	origin := rng.IntN(n)
	ms[origin].originate(now, "revoke/1", nil)
	flush(origin)
	for len(inflight) > 0 {
		// A batch: the packets for one random rank, taken from a random
		// place in the flight, stepped together before its output is
		// taken (per-sender order is kept: packets are taken in order).
		to := inflight[rng.IntN(len(inflight))].to
		k := 1 + rng.IntN(8)
		var rest []packet
		stepped := false
		for _, p := range inflight {
			if p.to != to || k == 0 {
				rest = append(rest, p)
				continue
			}
			k--
			if dead[to] {
				continue
			}
			if p.from >= 0 && ms[to].isFailed(ftrma.Rank(p.from)) {
				continue // fenced
			}
			stepped = true
			if p.from < 0 {
				var f int
				fmt.Sscan(string(p.msg), &f)
				ms[to].fail(now, ftrma.Rank(f), "crashed")
				continue
			}
			ms[to].step(now, ftrma.Rank(p.from), p.msg)
		}
		inflight = rest
		if stepped {
			flush(to)
		}
	}
	any := false
	for r := range n {
		any = any || !dead[r] && delivered[r]["revoke/1"]
	}
	for r := range n {
		if !dead[r] && any && !delivered[r]["revoke/1"] {
			t.Errorf("seed %d, n=%d, origin %d, %v dead: survivor %d never delivered revoke/1, which a survivor delivered", seed, n, origin, deadList(dead), r)
			return false
		}
	}
	return true
}

func deadList(dead []bool) []int {
	var out []int
	for r, d := range dead {
		if d {
			out = append(out, r)
		}
	}
	return out
}

// BenchmarkMachineBroadcastBatch measures the machine's work for one rank
// that gets a broadcast from four neighbours at once and forwards it.
func BenchmarkMachineBroadcastBatch(b *testing.B) {
	const n = 32
	now := time.Unix(1000, 0)
	m := testMachine(b, 0, n)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("revoke/%d", i)
		msg := bcastMsg(id)
		for _, from := range []ftrma.Rank{1, 2, 4, 8} {
			m.step(now, from, msg)
		}
		m.ready()
		m.advance()
	}
}
