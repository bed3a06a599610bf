package failure

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// probeWorld drives the detector of rank 0 in a job of n ranks against
// scripted neighbours: the ranks in dead never send anything; every other
// rank answers a probe answerAfter after it was sent, and sends a heartbeat
// every Period while it is the observed rank (as it would once it learned of
// the failures between it and rank 0). With AwaitConfirmation the world
// confirms each report of a dead rank confirmAfter later, as ftrun does.
// The detector is ticked every tick from t=0.
type probeWorld struct {
	cfg          Config
	n            int
	dead         []int
	answerAfter  time.Duration
	confirmAfter time.Duration
	tick         time.Duration
}

// probeRun is what a probeWorld run saw: when each rank was first
// suspected (offset from t=0), how many Readys held first suspicions, and
// which ranks were probed.
type probeRun struct {
	suspectedAt map[int]time.Duration
	batches     int
	probed      []int
}

func (w probeWorld) run(t *testing.T, until time.Duration) probeRun {
	t.Helper()
	d, err := New(w.cfg, 0, w.n, epoch)
	if err != nil {
		t.Fatal(err)
	}
	res := probeRun{suspectedAt: map[int]time.Duration{}}
	answers := map[int]time.Duration{}  // rank -> when its answer arrives
	confirms := map[int]time.Duration{} // rank -> when its confirmation arrives
	lastBeat := map[int]time.Duration{}
	collect := func(at time.Duration) {
		rd := d.Ready()
		for _, r := range rd.Probes {
			if r == 0 {
				t.Fatalf("%v: probed self", at)
			}
			res.probed = append(res.probed, r)
			if !slices.Contains(w.dead, r) {
				answers[r] = at + w.answerAfter
			}
		}
		first := false
		for _, r := range rd.Suspected {
			if r == 0 {
				t.Fatalf("%v: suspected self", at)
			}
			if _, ok := res.suspectedAt[r]; !ok {
				res.suspectedAt[r] = at
				first = true
			}
			if w.cfg.AwaitConfirmation && slices.Contains(w.dead, r) {
				if _, ok := confirms[r]; !ok {
					confirms[r] = at + w.confirmAfter
				}
			}
		}
		if first {
			res.batches++
		}
		d.Advance()
	}
	collect(0)
	for at := time.Duration(0); at <= until; at += w.tick {
		now := epoch.Add(at)
		for r, ans := range answers {
			if ans <= at {
				d.Heartbeat(r, epoch.Add(ans))
				delete(answers, r)
			}
		}
		for r, c := range confirms {
			if c <= at {
				d.Failed(r, epoch.Add(c))
				confirms[r] = until + 1 // once
			}
		}
		if o := d.Observed(); o >= 0 && !slices.Contains(w.dead, o) && at-lastBeat[o] >= w.cfg.WithDefaults().Period {
			d.Heartbeat(o, now)
			lastBeat[o] = at
		}
		d.Tick(now)
		collect(at)
	}
	return res
}

// TestProbesFindBlock: a block of consecutive dead ranks behind the
// observed one is found in about two Timeouts (one to suspect the observed
// rank, one for the probes beyond it), in two Readys, as long as it fits in
// the probe window, in both modes; each further window adds a Timeout. A
// live rank that answers, even just in time, is never suspected, nor is
// anything beyond it.
func TestProbesFindBlock(t *testing.T) {
	const (
		to   = 30 * time.Millisecond
		tick = time.Millisecond
	)
	for _, c := range []struct {
		name        string
		n           int
		window      int
		dead        []int
		answerAfter time.Duration
		want        []int // suspected, in order
		rounds      int   // found within rounds·(Timeout+tick)
		batches     int
	}{
		{"block of 4", 16, 0, []int{15, 14, 13, 12}, 0, []int{15, 14, 13, 12}, 2, 2},
		{"block of 4, answer just in time", 16, 0, []int{15, 14, 13, 12}, to - 2*tick, []int{15, 14, 13, 12}, 2, 2},
		{"block of 4, window 3", 16, 3, []int{15, 14, 13, 12}, 0, []int{15, 14, 13, 12}, 2, 2},
		{"block of 9 fills the window", 16, 0, []int{15, 14, 13, 12, 11, 10, 9, 8, 7}, to / 2, []int{15, 14, 13, 12, 11, 10, 9, 8, 7}, 2, 2},
		{"block of 10 takes a second window", 16, 0, []int{15, 14, 13, 12, 11, 10, 9, 8, 7, 6}, to / 2, []int{15, 14, 13, 12, 11, 10, 9, 8, 7, 6}, 3, 3},
		{"live rank inside the block", 16, 0, []int{15, 14, 12, 11}, to / 2, []int{15, 14}, 2, 2},
		{"live rank right behind", 16, 0, []int{15}, to - 2*tick, []int{15}, 1, 1},
		{"all other ranks", 5, 0, []int{4, 3, 2, 1}, 0, []int{4, 3, 2, 1}, 2, 2},
		{"probing off: one Timeout each", 16, -1, []int{15, 14, 13, 12}, 0, []int{15, 14, 13, 12}, 4, 4},
	} {
		for _, await := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/await=%v", c.name, await), func(t *testing.T) {
				cfg := Config{Period: 10 * time.Millisecond, Timeout: to, ProbeWindow: c.window, AwaitConfirmation: await}
				w := probeWorld{cfg: cfg, n: c.n, dead: c.dead, answerAfter: c.answerAfter, confirmAfter: to / 3, tick: tick}
				res := w.run(t, 12*to)
				var got []int
				for r := range res.suspectedAt {
					got = append(got, r)
				}
				slices.SortFunc(got, func(a, b int) int {
					return int(res.suspectedAt[a]-res.suspectedAt[b])*c.n + (b - a)
				})
				if !slices.Equal(got, c.want) {
					t.Fatalf("suspected %v (at %v), want %v", got, res.suspectedAt, c.want)
				}
				bound := time.Duration(c.rounds) * (to + tick)
				if await && c.window < 0 {
					// Without probes each rank's Timeout starts only
					// when the one before it is confirmed.
					bound += time.Duration(c.rounds-1) * w.confirmAfter
				}
				for _, r := range got {
					if at := res.suspectedAt[r]; at > bound {
						t.Errorf("rank %d suspected at %v, want within %v", r, at, bound)
					}
				}
				if res.batches != c.batches {
					t.Errorf("suspicions came in %d Readys, want %d", res.batches, c.batches)
				}
			})
		}
	}
}

// TestProbeAnswer: a probe received is answered with a heartbeat in the
// next Ready, once: the prober does not become the observer, and gets no
// periodic heartbeats. Probes from self, from outside the job and from
// failed ranks are not answered.
func TestProbeAnswer(t *testing.T) {
	d, err := New(Config{Period: 10 * time.Millisecond, Timeout: 30 * time.Millisecond}, 3, 8, epoch)
	if err != nil {
		t.Fatal(err)
	}
	d.Advance()
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	d.Failed(6, at(1))
	for _, c := range []struct {
		from int
		want []int
	}{
		{6, nil},  // failed
		{3, nil},  // self
		{-1, nil}, // outside the job
		{8, nil},
		{5, []int{5}},
		{0, []int{0}},
	} {
		d.Probe(c.from, at(2))
		if got := d.Ready().Heartbeats; !slices.Equal(got, c.want) {
			t.Errorf("probe from %d: heartbeats %v, want %v", c.from, got, c.want)
		}
		d.Advance()
	}
	if d.Observer() != 4 {
		t.Errorf("observer %d after answering probes, want 4", d.Observer())
	}
	for ms := 3; ms <= 100; ms++ {
		d.Heartbeat(2, at(ms))
		d.Tick(at(ms))
		if rd := d.Ready(); slices.ContainsFunc(rd.Heartbeats, func(r int) bool { return r != 4 }) || len(rd.Probes) > 0 {
			t.Fatalf("%dms: heartbeats %v, probes %v, want only heartbeats to 4", ms, rd.Heartbeats, rd.Probes)
		}
		d.Advance()
	}
}

// TestProbedReportsAwaitConfirmation: with AwaitConfirmation the probed
// ranks that stay silent are reported, reported again every 4 Timeouts
// while unconfirmed, and keep their report when the ring closes over the
// rank before them; a confirmation of the whole block leaves the answering
// rank observed with a fresh Timeout.
func TestProbedReportsAwaitConfirmation(t *testing.T) {
	const to = 30 * time.Millisecond
	d, err := New(Config{Period: 10 * time.Millisecond, Timeout: to, AwaitConfirmation: true}, 0, 8, epoch)
	if err != nil {
		t.Fatal(err)
	}
	d.Advance()
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	reports := map[int][]int{} // rank -> times reported, in ms
	tickTo := func(from, to int) {
		for ms := from; ms <= to; ms++ {
			d.Tick(at(ms))
			for _, r := range d.Ready().Suspected {
				reports[r] = append(reports[r], ms)
			}
			d.Advance()
		}
	}
	tickTo(1, 30) // 7 reported, 6 5 4 3 2 1 probed
	d.Heartbeat(4, at(40))
	tickTo(31, 60) // 6 5 reported
	d.Failed(7, at(70))
	if d.Observed() != 6 || d.IsFailed(6) {
		t.Fatalf("after 7 confirmed: observes %d, want 6 (still unconfirmed)", d.Observed())
	}
	tickTo(61, 300)
	want := map[int][]int{7: {30}, 6: {60, 180, 300}, 5: {60, 180, 300}}
	for r, w := range want {
		if !slices.Equal(reports[r], w) {
			t.Errorf("rank %d reported at %v ms, want %v", r, reports[r], w)
		}
	}
	if len(reports) != len(want) {
		t.Errorf("reports %v, want only %v", reports, want)
	}
	d.Failed(6, at(301))
	d.Failed(5, at(302))
	if d.Observed() != 4 {
		t.Fatalf("after the block was confirmed: observes %d, want 4", d.Observed())
	}
	d.Tick(at(302 + 29))
	if s := d.Ready().Suspected; len(s) > 0 {
		t.Errorf("rank 4 suspected %v before its fresh Timeout", s)
	}
	d.Advance()
	d.Tick(at(302 + 30))
	if s := d.Ready().Suspected; !slices.Equal(s, []int{4}) {
		t.Errorf("silent rank 4 a fresh Timeout after the confirmation: suspected %v, want [4]", s)
	}
}
