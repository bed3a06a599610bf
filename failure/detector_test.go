package failure

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestConfigValidate(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{DefaultConfig(), true},
		{Config{Period: 100 * ms, Timeout: 300 * ms}, true}, // ULFM's defaults
		{Config{Period: 1 * ms, Timeout: 2 * ms}, true},
		{Config{Timeout: 21 * ms}, true},  // default Period 20ms
		{Config{Period: 59 * ms}, true},   // default Timeout 60ms
		{Config{Period: 60 * ms}, true},   // Timeout three periods, 180ms
		{Config{Timeout: 20 * ms}, false}, // equal to the default Period
		{Config{Period: 10 * ms, Timeout: 5 * ms}, false},
		{Config{Period: -ms}, false},
		{Config{Timeout: -ms}, false},
		{Config{Period: -ms, Timeout: -2 * ms}, false},
	} {
		err := c.cfg.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", c.cfg, err, c.ok)
		}
		if err != nil && !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("%+v.Validate() = %v, not ErrInvalid", c.cfg, err)
		}
		if _, nerr := New(c.cfg, 0, 3, epoch); (nerr == nil) != c.ok {
			t.Errorf("New(%+v) = %v, want ok=%v", c.cfg, nerr, c.ok)
		}
	}
	if got := (Config{}).WithDefaults(); got != DefaultConfig() {
		t.Errorf("zero Config means %+v, want %+v", got, DefaultConfig())
	}
}

func TestNewRejectsBadRanks(t *testing.T) {
	for _, c := range []struct {
		self, n int
		want    error
	}{
		{0, 0, ftrma.ErrInvalid},
		{0, -3, ftrma.ErrInvalid},
		{-1, 4, ftrma.ErrRankOutOfRange},
		{4, 4, ftrma.ErrRankOutOfRange},
	} {
		if _, err := New(Config{}, c.self, c.n, epoch); !errors.Is(err, c.want) {
			t.Errorf("New(self=%d, n=%d) = %v, want %v", c.self, c.n, err, c.want)
		}
	}
}

// timings are the configurations and tick intervals the timing tests try.
var timings = []struct {
	cfg  Config
	tick time.Duration // at most Period/2
}{
	{DefaultConfig(), 10 * time.Millisecond},
	{DefaultConfig(), time.Millisecond},
	{DefaultConfig(), 7 * time.Millisecond},
	{Config{Period: 100 * time.Millisecond, Timeout: 300 * time.Millisecond}, 50 * time.Millisecond},
	{Config{Period: 10 * time.Millisecond, Timeout: 25 * time.Millisecond}, 3 * time.Millisecond},
	{Config{Period: 2 * time.Millisecond, Timeout: 3 * time.Millisecond}, time.Millisecond},
}

// TestCompleteness: a rank that falls silent is suspected by its observer at
// the first tick at or after Timeout of silence, so within Timeout plus one
// tick (at most Timeout + Period/2) of the last heartbeat heard, and never
// earlier. Heartbeats arrive at random gaps below Timeout before the
// silence, with ticks at random spacing up to the tick interval.
func TestCompleteness(t *testing.T) {
	for i, tm := range timings {
		for seed := range uint64(50) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			n := 2 + rng.IntN(20)
			self := rng.IntN(n)
			pred := (self + n - 1) % n
			d, err := New(tm.cfg, self, n, epoch)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("timing %d, seed %d", i, seed)
			now, last := epoch, epoch
			nextBeat := epoch.Add(randDur(rng, tm.cfg.Timeout))
			silentFrom := epoch.Add(time.Duration(rng.IntN(20)) * tm.cfg.Timeout)
			var found time.Time
			for found.IsZero() {
				now = now.Add(1 + randDur(rng, tm.tick))
				for !nextBeat.After(now) && nextBeat.Before(silentFrom) {
					d.Heartbeat(pred, nextBeat)
					last = nextBeat
					nextBeat = nextBeat.Add(1 + randDur(rng, tm.cfg.Timeout-1))
				}
				d.Tick(now)
				if s := d.Ready().Suspected; len(s) > 0 {
					if !slices.Equal(s, []int{pred}) {
						t.Fatalf("%s: suspected %v, want [%d]", name, s, pred)
					}
					found = now
				}
				d.Advance()
				if now.Sub(last) > 2*tm.cfg.Timeout {
					t.Fatalf("%s: rank %d silent since %v, not suspected at %v", name, pred, last.Sub(epoch), now.Sub(epoch))
				}
			}
			if silence := found.Sub(last); silence < tm.cfg.Timeout || silence > tm.cfg.Timeout+tm.tick {
				t.Fatalf("%s: suspected after %v of silence, want [%v, %v]", name, silence, tm.cfg.Timeout, tm.cfg.Timeout+tm.tick)
			}
			if !d.IsFailed(pred) || d.IsFailed(self) {
				t.Fatalf("%s: failed set %v", name, d.FailedRanks())
			}
		}
	}
}

func randDur(rng *rand.Rand, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(max)))
}

// TestAccuracy: a rank whose heartbeats reach its observer less than Timeout
// apart is never suspected, however the ticks fall.
func TestAccuracy(t *testing.T) {
	for i, tm := range timings {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			d, err := New(tm.cfg, 3, 7, epoch)
			if err != nil {
				t.Fatal(err)
			}
			now := epoch
			nextBeat := epoch.Add(1 + randDur(rng, tm.cfg.Timeout-1))
			for range 5000 {
				now = now.Add(1 + randDur(rng, tm.tick))
				for !nextBeat.After(now) {
					d.Heartbeat(2, nextBeat)
					nextBeat = nextBeat.Add(1 + randDur(rng, tm.cfg.Timeout-1))
				}
				d.Tick(now)
				if s := d.Ready().Suspected; len(s) > 0 {
					t.Fatalf("timing %d, seed %d: suspected %v at %v", i, seed, s, now.Sub(epoch))
				}
				d.Advance()
			}
		}
	}
}

// TestHeartbeatCadence: ticked every tick interval or more often, a detector
// sends its observer one heartbeat per Period on average, never two closer
// than Period - tick, never more than Period + tick apart.
func TestHeartbeatCadence(t *testing.T) {
	for i, tm := range timings {
		rng := rand.New(rand.NewPCG(uint64(i), 0))
		d, err := New(tm.cfg, 0, 2, epoch)
		if err != nil {
			t.Fatal(err)
		}
		var sent []time.Time
		now := epoch
		for now.Sub(epoch) < 1000*tm.cfg.Period {
			d.Heartbeat(1, now) // keep rank 1 alive
			if p := d.Ready().Probes; len(p) > 0 {
				t.Fatalf("timing %d: probes %v without a suspicion", i, p)
			}
			if hb := d.Ready().Heartbeats; len(hb) > 0 {
				if !slices.Equal(hb, []int{1}) {
					t.Fatalf("timing %d: heartbeats %v, want [1]", i, hb)
				}
				sent = append(sent, now)
			}
			d.Advance()
			now = now.Add(1 + randDur(rng, tm.tick))
			d.Tick(now)
		}
		if len(sent) < 999 || len(sent) > 1001 {
			t.Errorf("timing %d: %d heartbeats in 1000 periods", i, len(sent))
		}
		for k := 1; k < len(sent); k++ {
			if gap := sent[k].Sub(sent[k-1]); gap < tm.cfg.Period-tm.tick || gap > tm.cfg.Period+tm.tick {
				t.Fatalf("timing %d: heartbeats %v apart at %v", i, gap, sent[k].Sub(epoch))
			}
		}
	}
}

// TestDeadlineSuffices: a detector ticked only at its Deadline behaves
// exactly like one ticked every millisecond, given the same inputs.
func TestDeadlineSuffices(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 2 + rng.IntN(10)
		self := rng.IntN(n)
		cfg := Config{AwaitConfirmation: seed%2 == 1, ProbeWindow: rng.IntN(4)}
		every, err := New(cfg, self, n, epoch)
		if err != nil {
			t.Fatal(err)
		}
		lazy, _ := New(cfg, self, n, epoch)
		var logEvery, logLazy []string
		record := func(log *[]string, d *Detector, at int) {
			if d.HasReady() {
				*log = append(*log, fmt.Sprintf("%dms %+v", at, d.Ready()))
				d.Advance()
			}
		}
		lazyNext := func() int {
			dl, ok := lazy.Deadline()
			if !ok {
				return -1
			}
			return ms(dl.Sub(epoch))
		}
		for at := 0; at < 3000; at++ {
			now := epoch.Add(time.Duration(at) * time.Millisecond)
			// Inputs: heartbeats from a random rank near self (the
			// observed rank, or one probed beyond it), probes, now and
			// then a failure notice.
			if rng.IntN(15) == 0 {
				from := (self + n - 1 - rng.IntN(3)) % n
				every.Heartbeat(from, now)
				lazy.Heartbeat(from, now)
			}
			if rng.IntN(100) == 0 {
				from := rng.IntN(n)
				every.Probe(from, now)
				lazy.Probe(from, now)
			}
			if rng.IntN(400) == 0 {
				r := rng.IntN(n)
				every.Failed(r, now)
				lazy.Failed(r, now)
			}
			every.Tick(now)
			if lazyNext() == at {
				lazy.Tick(now)
				if lazyNext() == at {
					t.Fatalf("seed %d: Tick at the Deadline did not move it", seed)
				}
			}
			record(&logEvery, every, at)
			record(&logLazy, lazy, at)
		}
		if !slices.Equal(logEvery, logLazy) {
			t.Fatalf("seed %d: ticked every ms:\n%v\nticked at Deadline:\n%v", seed, logEvery, logLazy)
		}
	}
}

// TestInvariants drives detectors with random inputs, including nonsense
// (ranks outside the job, time going backwards), in both modes, and checks
// after every call: failure knowledge only grows; a rank is suspected never
// if it is self or known to have failed, and at most once unless reports
// await confirmation; the observed and observer ranks are the nearest
// predecessor and successor not known to have failed; heartbeats and probes
// go only to ranks of the job other than self, probes only to ranks not
// known to have failed; and the watched run is what Detector.watch says.
func TestInvariants(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 9))
		n := 1 + rng.IntN(9)
		self := rng.IntN(n)
		cfg := Config{Period: 10 * time.Millisecond, Timeout: 25 * time.Millisecond, AwaitConfirmation: seed%2 == 1, ProbeWindow: rng.IntN(4) - 1}
		d, err := New(cfg, self, n, epoch)
		if err != nil {
			t.Fatal(err)
		}
		known := []int{}
		suspected := map[int]bool{}
		now := epoch
		for step := range 300 {
			now = now.Add(time.Duration(rng.IntN(12)-1) * time.Millisecond)
			r := rng.IntN(n+2) - 1
			switch rng.IntN(5) {
			case 0, 1:
				d.Tick(now)
			case 2:
				d.Heartbeat(r, now)
			case 3:
				if rng.IntN(3) == 0 {
					d.Failed(r, now)
				}
			case 4:
				d.Probe(r, now)
			}
			where := fmt.Sprintf("seed %d, step %d", seed, step)
			rd := d.Ready()
			for _, s := range rd.Suspected {
				if s == self || suspected[s] && !cfg.AwaitConfirmation || slices.Contains(known, s) {
					t.Fatalf("%s: suspected %d (self %d, before %v, known %v)", where, s, self, suspected, known)
				}
				suspected[s] = true
			}
			for _, h := range rd.Heartbeats {
				if h == self || h < 0 || h >= n {
					t.Fatalf("%s: heartbeat to %d", where, h)
				}
			}
			for _, p := range rd.Probes {
				if p == self || p < 0 || p >= n || slices.Contains(known, p) {
					t.Fatalf("%s: probe to %d (known %v)", where, p, known)
				}
			}
			d.Advance()
			cur := d.FailedRanks()
			for _, k := range known {
				if !slices.Contains(cur, k) {
					t.Fatalf("%s: failed set shrank from %v to %v", where, known, cur)
				}
			}
			known = cur
			for _, k := range known {
				if !d.IsFailed(k) {
					t.Fatalf("%s: FailedRanks %v but not IsFailed(%d)", where, known, k)
				}
			}
			if p, s := nearest(d, -1), nearest(d, +1); d.Observed() != p || d.Observer() != s {
				t.Fatalf("%s: observed %d, observer %d, want %d, %d (failed %v)", where, d.Observed(), d.Observer(), p, s, known)
			}
			if _, ok := d.Deadline(); ok != (d.Observer() >= 0) {
				t.Fatalf("%s: Deadline ok=%v with observer %d", where, ok, d.Observer())
			}
			if err := checkWatch(d); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
	}
}

// checkWatch checks the invariant of Detector.watch.
func checkWatch(d *Detector) error {
	prev := d.self
	reportedPrefix := true
	for i, w := range d.watch {
		next := -1
		for k := 1; k < d.n; k++ {
			if r := ((prev-k)%d.n + d.n) % d.n; r == d.self || !d.IsFailed(r) {
				next = r
				break
			}
		}
		if w.rank != next || w.rank == d.self {
			return fmt.Errorf("watch %v: entry %d is rank %d, want %d", d.watch, i, w.rank, next)
		}
		if w.answered && (i == 0 || i != len(d.watch)-1) {
			return fmt.Errorf("watch %v: entry %d answered", d.watch, i)
		}
		if w.reported && (!d.cfg.AwaitConfirmation || !reportedPrefix) {
			return fmt.Errorf("watch %v: entry %d reported", d.watch, i)
		}
		reportedPrefix = reportedPrefix && w.reported
		prev = w.rank
	}
	return nil
}

// nearest is the reference for the ring neighbours: scan from self in
// direction dir for a rank not known to have failed.
func nearest(d *Detector, dir int) int {
	for k := 1; k < d.n; k++ {
		if r := ((d.self+dir*k)%d.n + d.n) % d.n; !d.IsFailed(r) {
			return r
		}
	}
	return -1
}

func BenchmarkTick(b *testing.B) {
	d, _ := New(Config{}, 5, 256, epoch)
	now := epoch
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		d.Heartbeat(4, now)
		d.Tick(now)
		d.Advance()
	}
}

// A stall of this process stretches the observed rank's deadline: silence
// that may be our own fault is no evidence.
func TestStalledStretchesDeadline(t *testing.T) {
	t0 := time.Unix(0, 0)
	d, err := New(Config{Period: 20 * time.Millisecond, Timeout: 60 * time.Millisecond}, 1, 3, t0)
	if err != nil {
		t.Fatal(err)
	}
	d.Heartbeat(0, t0.Add(10*time.Millisecond))
	d.Stalled(100 * time.Millisecond)
	d.Tick(t0.Add(150 * time.Millisecond)) // 140ms of silence, 100ms of it ours
	if len(d.Ready().Suspected) != 0 {
		t.Fatalf("suspected %v after a stall of our own", d.Ready().Suspected)
	}
	d.Tick(t0.Add(171 * time.Millisecond)) // now 61ms beyond the stretched deadline's start
	if got := d.Ready().Suspected; len(got) != 1 || got[0] != 0 {
		t.Fatalf("suspected %v, want [0] once the stretched timeout passed", got)
	}
}

// With AwaitConfirmation a silent observed rank is reported once and
// watched on; the ring closes over it only when Failed confirms it, and a
// heartbeat in between clears the report (the next silence is reported
// again). The detector never moves on alone to a predecessor that still
// sends its heartbeats to the unconfirmed suspect. (Rank 3, probed with each
// report, answers, so it is not suspected; see TestProbes for the rest.)
func TestAwaitConfirmation(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := Config{Period: 10 * time.Millisecond, Timeout: 30 * time.Millisecond, AwaitConfirmation: true}
	d, err := New(cfg, 5, 8, t0)
	if err != nil {
		t.Fatal(err)
	}
	d.Advance()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	d.Tick(at(31))
	if rd := d.Ready(); len(rd.Suspected) != 1 || rd.Suspected[0] != 4 || !slices.Equal(rd.Probes, []int{3, 2, 1, 0, 7, 6}) {
		t.Fatalf("silent rank 4: suspected %v, probes %v, want [4], [3 2 1 0 7 6]", rd.Suspected, rd.Probes)
	}
	d.Advance()
	d.Heartbeat(3, at(35)) // the answer
	for ms := 40; ms <= 150; ms += 5 {
		d.Tick(at(ms))
	}
	if rd := d.Ready(); len(rd.Suspected) != 0 {
		t.Errorf("reported again within 4 timeouts: %v", rd.Suspected)
	}
	d.Advance()
	d.Tick(at(151))
	if rd := d.Ready(); len(rd.Suspected) != 1 || rd.Suspected[0] != 4 {
		t.Errorf("still silent 4 timeouts after the report: suspected %v, want [4] again", rd.Suspected)
	}
	d.Advance()
	for ms := 155; ms <= 200; ms += 5 {
		d.Tick(at(ms))
	}
	d.Advance()
	if d.Observed() != 4 || d.IsFailed(4) {
		t.Errorf("moved on alone: observes %d, failed(4) %v", d.Observed(), d.IsFailed(4))
	}
	if dl, ok := d.Deadline(); !ok || !dl.After(at(200)) {
		t.Errorf("deadline %v while awaiting confirmation: in the past, the caller would spin", dl.Sub(t0))
	}
	d.Heartbeat(4, at(210)) // alive after all
	d.Tick(at(241))
	if rd := d.Ready(); len(rd.Suspected) != 1 || rd.Suspected[0] != 4 || len(rd.Probes) != 6 {
		t.Fatalf("silent again after a heartbeat: suspected %v, probes %v, want [4] and 6 probes", rd.Suspected, rd.Probes)
	}
	d.Advance()
	d.Heartbeat(3, at(245)) // the answer
	d.Failed(4, at(250))    // confirmed
	if d.Observed() != 3 {
		t.Errorf("after confirmation observes %d, want 3", d.Observed())
	}
	d.Tick(at(279))
	if rd := d.Ready(); len(rd.Suspected) != 0 {
		t.Errorf("rank 3 suspected before its own timeout: %v", rd.Suspected)
	}
	d.Tick(at(281))
	if rd := d.Ready(); len(rd.Suspected) != 1 || rd.Suspected[0] != 3 {
		t.Errorf("silent rank 3 after the confirmation: suspected %v, want [3]", rd.Suspected)
	}
}
