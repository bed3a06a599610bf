package failure

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

// This file holds a deterministic simulation of a whole job: n detectors on
// a virtual clock counted in milliseconds, a network that delays each
// heartbeat and probe at random, a reliable broadcast of failure notices
// (abstracted: every notice reaches every rank within noticeDelay), with
// AwaitConfirmation a confirmer that confirms each report of a dead rank
// within noticeDelay (as ftrun does), and crashes. The simulation checks the
// detector's properties as it goes.

const (
	evTick   = iota // Tick rank to
	evBeat          // a heartbeat from rank from reaches rank to
	evNotice        // a failure notice for rank from reaches rank to
	evCrash         // rank to crashes
	evProbe         // a probe from rank from reaches rank to
)

type event struct {
	kind     uint8
	to, from int32
}

type cluster struct {
	t     testing.TB
	name  string // seed and mode, printed on failure
	rng   *rand.Rand
	cfg   Config
	epoch time.Time
	ds    []*Detector

	tickEvery   int // ms between ticks of a rank; 0: tick exactly at Deadline
	maxDelay    int // heartbeat delays are uniform in [0, maxDelay) ms
	probeDelay  int // delays of probes and their answers are uniform in [0, probeDelay) ms
	noticeDelay int // notice (and confirmation) delays are uniform in [0, noticeDelay) ms

	now      int       // ms since epoch
	buckets  [][]event // buckets[t]: events due at t
	nextTick []int     // tickEvery == 0: the time of rank r's pending tick, or -1
	lastTick []int     // tickEvery == 0: when rank r last ticked, to catch a Deadline that does not move

	alive     []bool
	crashedAt []int // -1 while alive
	reported  []bool
	confirmed []bool  // AwaitConfirmation: the confirmer has sent the notice
	owes      [][]int // owes[r]: ranks whose probes r received since its last drain

	// For checking suspicions: whom each rank observed at its last drain,
	// and per pair (r, x): when r last heard from x (heartbeat or probe),
	// last sent x a probe, and began observing x.
	watching   []int
	heard      map[[2]int]int
	probeSent  map[[2]int]int
	watchStart map[[2]int]int
	reports    map[[2]int]int // how often r reported x

	suspicions []suspicion
	messages   int // heartbeats sent
	probes     int // probes sent
}

type suspicion struct{ by, r, at int }

// firstSuspicion returns when rank x was first suspected by anyone, or -1.
func (c *cluster) firstSuspicion(x int) int {
	at := -1
	for _, s := range c.suspicions {
		if s.r == x && (at < 0 || s.at < at) {
			at = s.at
		}
	}
	return at
}

func newCluster(t testing.TB, name string, n int, cfg Config, seed uint64) *cluster {
	c := &cluster{
		t:          t,
		name:       name,
		rng:        rand.New(rand.NewPCG(seed, 0x5eed)),
		cfg:        cfg.WithDefaults(),
		epoch:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		ds:         make([]*Detector, n),
		nextTick:   make([]int, n),
		lastTick:   make([]int, n),
		alive:      make([]bool, n),
		crashedAt:  make([]int, n),
		reported:   make([]bool, n),
		confirmed:  make([]bool, n),
		owes:       make([][]int, n),
		watching:   make([]int, n),
		heard:      map[[2]int]int{},
		probeSent:  map[[2]int]int{},
		watchStart: map[[2]int]int{},
		reports:    map[[2]int]int{},
	}
	return c
}

func (c *cluster) fatalf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%s, t=%dms: %s", c.name, c.now, fmt.Sprintf(format, args...))
}

// ms converts a duration to whole milliseconds of the virtual clock.
func ms(d time.Duration) int { return int(d / time.Millisecond) }

// start creates every detector at t=0 and schedules the first ticks.
func (c *cluster) start() {
	for r := range c.ds {
		d, err := New(c.cfg, r, len(c.ds), c.epoch)
		if err != nil {
			c.fatalf("New: %v", err)
		}
		c.ds[r] = d
		c.alive[r] = true
		c.crashedAt[r] = -1
		c.nextTick[r], c.lastTick[r] = -1, -1
		c.watching[r] = -2 // forces drain to record the first observed rank
		if c.tickEvery > 0 {
			c.at(c.rng.IntN(c.tickEvery), event{kind: evTick, to: int32(r)})
		}
		c.drain(r)
	}
}

func (c *cluster) at(t int, e event) {
	for len(c.buckets) <= t {
		c.buckets = append(c.buckets, nil)
	}
	c.buckets[t] = append(c.buckets[t], e)
}

func (c *cluster) delay(max int) int {
	if max <= 0 {
		return 0
	}
	return c.rng.IntN(max)
}

func (c *cluster) crash(r, t int, reported bool) {
	c.reported[r] = c.reported[r] || reported
	c.at(t, event{kind: evCrash, to: int32(r)})
}

// runUntil processes every event due up to and including time end.
func (c *cluster) runUntil(end int) {
	for ; c.now <= end; c.now++ {
		if c.now >= len(c.buckets) {
			continue
		}
		// Events may be added to the current bucket while it is processed
		// (zero delays).
		for i := 0; i < len(c.buckets[c.now]); i++ {
			c.handle(c.buckets[c.now][i])
		}
		c.buckets[c.now] = nil
	}
	c.now = end
}

func (c *cluster) handle(e event) {
	r := int(e.to)
	if !c.alive[r] {
		return
	}
	d := c.ds[r]
	now := c.epoch.Add(time.Duration(c.now) * time.Millisecond)
	switch e.kind {
	case evCrash:
		c.alive[r] = false
		c.crashedAt[r] = c.now
		if c.reported[r] { // the launcher saw the process exit
			for q := range c.ds {
				if q != r {
					c.at(c.now+c.delay(c.noticeDelay), event{kind: evNotice, to: int32(q), from: int32(r)})
				}
			}
		}
		return
	case evTick:
		if c.tickEvery > 0 {
			c.at(c.now+c.tickEvery, e)
		} else if c.nextTick[r] != c.now {
			return // superseded by an earlier tick
		} else {
			if c.lastTick[r] == c.now {
				c.fatalf("rank %d: Tick at its Deadline left the Deadline at %dms", r, c.now)
			}
			c.nextTick[r], c.lastTick[r] = -1, c.now
		}
		d.Tick(now)
	case evBeat:
		c.heard[[2]int{r, int(e.from)}] = c.now
		d.Heartbeat(int(e.from), now)
	case evProbe:
		c.heard[[2]int{r, int(e.from)}] = c.now
		c.owes[r] = append(c.owes[r], int(e.from))
		d.Probe(int(e.from), now)
	case evNotice:
		d.Failed(int(e.from), now)
	}
	c.drain(r)
}

// drain acts on rank r's Ready and checks what it says.
func (c *cluster) drain(r int) {
	d := c.ds[r]
	rd := d.Ready()
	for _, x := range rd.Suspected {
		c.suspicions = append(c.suspicions, suspicion{by: r, r: x, at: c.now})
		if c.alive[x] {
			c.fatalf("rank %d suspected rank %d, which is alive (accuracy)", r, x)
		}
		rx := [2]int{r, x}
		probed, wasProbed := c.probeSent[rx]
		if x != c.watching[r] && !wasProbed {
			c.fatalf("rank %d suspected rank %d, but it was watching %d and never probed it", r, x, c.watching[r])
		}
		// Accuracy, in time: Timeout of silence since the last heartbeat
		// and the last probe. Completeness, in time: the first tick at or
		// after Timeout of silence suspects (a report awaiting confirmation
		// is repeated later).
		heard := c.heard[rx]
		if wasProbed {
			heard = max(heard, probed)
		}
		if silence := c.now - heard; silence < ms(c.cfg.Timeout) {
			c.fatalf("rank %d suspected rank %d after %dms of silence, want at least %v", r, x, silence, c.cfg.Timeout)
		}
		c.reports[rx]++
		if silence, slack := c.now-max(heard, c.watchStart[rx]), max(c.tickEvery, 1); c.reports[rx] == 1 && silence > ms(c.cfg.Timeout)+slack {
			c.fatalf("rank %d suspected rank %d after %dms of silence, want at most %v+%dms", r, x, silence, c.cfg.Timeout, slack)
		}
		if c.cfg.AwaitConfirmation {
			// The confirmer (ftrun) confirms the failure to every
			// rank, the reporter included.
			if !c.confirmed[x] {
				c.confirmed[x] = true
				for q := range c.ds {
					c.at(c.now+c.delay(c.noticeDelay), event{kind: evNotice, to: int32(q), from: int32(x)})
				}
			}
			continue
		}
		for q := range c.ds {
			if q != r {
				c.at(c.now+c.delay(c.noticeDelay), event{kind: evNotice, to: int32(q), from: int32(x)})
			}
		}
	}
	if o := d.Observed(); o != c.watching[r] {
		c.watching[r] = o
		c.watchStart[[2]int{r, o}] = c.now
	}
	for _, to := range rd.Heartbeats {
		c.messages++
		delay := c.delay(c.maxDelay)
		if slices.Contains(c.owes[r], to) { // an answer to a probe
			delay = c.delay(c.probeDelay)
		}
		c.at(c.now+delay, event{kind: evBeat, to: int32(to), from: int32(r)})
	}
	c.owes[r] = c.owes[r][:0]
	for _, to := range rd.Probes {
		c.probes++
		c.probeSent[[2]int{r, to}] = c.now
		c.at(c.now+c.delay(c.probeDelay), event{kind: evProbe, to: int32(to), from: int32(r)})
	}
	d.Advance()
	if c.tickEvery == 0 {
		if dl, ok := d.Deadline(); ok {
			t := max(c.now, int((dl.Sub(c.epoch)+time.Millisecond-1)/time.Millisecond))
			if c.nextTick[r] < c.now || t < c.nextTick[r] {
				c.nextTick[r] = t
				c.at(t, event{kind: evTick, to: int32(r)})
			}
		}
	}
}

// liveNeighbor returns the nearest live rank r+dir, r+2·dir, ... or -1.
func (c *cluster) liveNeighbor(r, dir int) int {
	n := len(c.ds)
	for k := 1; k < n; k++ {
		q := ((r+dir*k)%n + n) % n
		if c.alive[q] {
			return q
		}
	}
	return -1
}

// settled reports whether every live rank knows every crash.
func (c *cluster) settled() bool {
	for r, d := range c.ds {
		if !c.alive[r] {
			continue
		}
		for q := range c.ds {
			if !c.alive[q] && c.crashedAt[q] >= 0 && !d.IsFailed(q) {
				return false
			}
		}
	}
	return true
}

// checkHealed checks the end state: every live rank knows exactly the
// crashed ranks as failed, every crash that the launcher did not report was
// found by some detector, and the ring is closed over the dead: every live
// rank observes its nearest live predecessor and sends to its nearest live
// successor.
func (c *cluster) checkHealed() {
	c.t.Helper()
	found := make([]bool, len(c.ds))
	for _, s := range c.suspicions {
		found[s.r] = true
	}
	for r, d := range c.ds {
		if !c.alive[r] {
			if !c.reported[r] && !found[r] {
				c.fatalf("rank %d crashed at %dms and nobody suspected it (completeness)", r, c.crashedAt[r])
			}
			continue
		}
		for q := range c.ds {
			if d.IsFailed(q) == c.alive[q] {
				c.fatalf("rank %d: IsFailed(%d) = %v, but alive is %v", r, q, d.IsFailed(q), c.alive[q])
			}
		}
		if p, s := c.liveNeighbor(r, -1), c.liveNeighbor(r, +1); d.Observed() != p || d.Observer() != s {
			c.fatalf("rank %d observes %d and sends to %d, want %d and %d", r, d.Observed(), d.Observer(), p, s)
		}
	}
}

// simParams are the timing rules of one simulation mode. The delay bounds
// are the tightest the detector's accuracy condition allows (see Config).
type simParams struct {
	name        string
	tickEvery   int
	maxDelay    int
	probeDelay  int
	noticeDelay int
	await       bool // Config.AwaitConfirmation
}

// apply sets the mode's timing on c.
func (m simParams) apply(c *cluster) {
	c.tickEvery, c.maxDelay, c.probeDelay, c.noticeDelay = m.tickEvery, m.maxDelay, m.probeDelay, m.noticeDelay
}

// config returns cfg in the mode's confirmation mode.
func (m simParams) config(cfg Config) Config {
	cfg.AwaitConfirmation = m.await
	return cfg
}

// simModes returns the two tick modes, each with suspicions as verdicts and
// with AwaitConfirmation.
func simModes(cfg Config) []simParams {
	p, to := ms(cfg.Period), ms(cfg.Timeout)
	var modes []simParams
	for _, await := range []bool{false, true} {
		suffix := ""
		if await {
			suffix = "/await"
		}
		modes = append(modes,
			// Ticks exactly at Deadline: heartbeats leave exactly every
			// Period and may take up to Timeout-Period (exclusive). A
			// probe and its answer take less than Timeout together.
			simParams{name: "exact" + suffix, tickEvery: 0, maxDelay: to - p, probeDelay: to / 2, noticeDelay: p, await: await},
			// A ticker every Period/2 with a random phase per rank:
			// heartbeats leave up to one tick late, so the delay bound
			// shrinks by a tick. A late tick of the prober only gives a
			// probe more time.
			simParams{name: "ticker" + suffix, tickEvery: p / 2, maxDelay: to - p - p/2, probeDelay: to / 2, noticeDelay: p, await: await},
		)
	}
	return modes
}

// simulate runs one seeded job of n ranks with random crashes: single
// ranks, and runs of consecutive ranks that crash together; a quarter of
// them also reported by the launcher. It checks accuracy and timely
// suspicion throughout, and completeness and healing at the end.
func simulate(t testing.TB, n int, seed uint64, mode simParams) {
	cfg := mode.config(DefaultConfig())
	c := newCluster(t, fmt.Sprintf("seed %d, mode %s, n=%d", seed, mode.name, n), n, cfg, seed)
	mode.apply(c)
	c.start()

	rng := rand.New(rand.NewPCG(seed, 0xc0de))
	crashes := 1 + rng.IntN(min(12, n-1))
	doomed := map[int]bool{}
	last := 0
	for len(doomed) < crashes {
		first, length := rng.IntN(n), 1
		if rng.IntN(3) == 0 {
			length = 2 + rng.IntN(3)
		}
		base := 50 + rng.IntN(600)
		for k := range length {
			r := (first + k) % n
			if doomed[r] || len(doomed) == crashes {
				break
			}
			doomed[r] = true
			at := base + rng.IntN(30)
			last = max(last, at)
			c.crash(r, at, rng.IntN(4) == 0)
		}
	}
	c.runUntil(last)
	// Run until every live rank knows every crash, then three Timeouts
	// more to catch late false suspicions.
	limit := last + (crashes+2)*(ms(cfg.Timeout+cfg.Period)+c.maxDelay+c.noticeDelay)
	for !c.settled() {
		if c.now >= limit {
			c.fatalf("crashes not known everywhere after %dms (completeness)", c.now-last)
		}
		c.runUntil(c.now + 10)
	}
	c.runUntil(c.now + 3*ms(cfg.Timeout))
	c.checkHealed()

	// An isolated crash (both ring neighbours alive throughout, not
	// reported by the launcher) is found by its successor within
	// maxDelay + Timeout + one tick of the crash.
	for r := range n {
		prev, next := (r+n-1)%n, (r+1)%n
		if c.alive[r] || c.reported[r] || !c.alive[prev] || !c.alive[next] {
			continue
		}
		bound := c.crashedAt[r] + c.maxDelay + ms(cfg.Timeout) + max(c.tickEvery, 1)
		ok := false
		for _, s := range c.suspicions {
			ok = ok || s.r == r && s.by == next && s.at <= bound
		}
		if !ok {
			c.fatalf("isolated crash of rank %d at %dms not found by rank %d by %dms", r, c.crashedAt[r], next, bound)
		}
	}
}

// TestSimulation runs the simulation for many seeds in every mode: 200
// seeds each by default, 50 under the race detector, 20 with -short, and
// 2000 with FTRMA_LONG=1.
func TestSimulation(t *testing.T) {
	seeds := 200
	switch {
	case os.Getenv("FTRMA_LONG") != "":
		seeds = 2000
	case testing.Short():
		seeds = 20
	case raceEnabled:
		seeds = 50
	}
	for _, mode := range simModes(DefaultConfig()) {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds) {
				simulate(t, 256, seed, mode)
			}
		})
	}
}

// TestSimulationSmallJobs runs the simulation on small rings, where the
// crashes often leave only a few survivors.
func TestSimulationSmallJobs(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 8, 13} {
		for _, mode := range simModes(DefaultConfig()) {
			for seed := range uint64(30) {
				simulate(t, n, seed, mode)
			}
		}
	}
}

// blockDetection runs one seeded job of n ranks in which the k consecutive
// ranks first, first-1, ..., first-k+1 crash together at t=300ms+: all the
// ranks of one host, or the far side of a cut link. It checks accuracy and
// timely suspicion throughout (every suspicion), completeness and healing at
// the end, and returns for each crashed rank how long after the crash it was
// first suspected, in ms.
func blockDetection(t testing.TB, cfg Config, mode simParams, n, k int, seed uint64) []int {
	cfg = mode.config(cfg.WithDefaults())
	c := newCluster(t, fmt.Sprintf("block of %d, seed %d, mode %s, window %d", k, seed, mode.name, cfg.ProbeWindow), n, cfg, seed)
	mode.apply(c)
	c.start()
	rng := rand.New(rand.NewPCG(seed, 0xb10c))
	first, crashAt := rng.IntN(n), 300+rng.IntN(ms(cfg.Period))
	for j := range k {
		c.crash((first-j+n)%n, crashAt, false)
	}
	c.runUntil(crashAt)
	for !c.settled() {
		if c.now >= crashAt+(k+2)*(ms(cfg.Timeout)+c.maxDelay+c.noticeDelay) {
			c.fatalf("crashes not known everywhere after %dms (completeness)", c.now-crashAt)
		}
		c.runUntil(c.now + 10)
	}
	// Three Timeouts more to catch late false suspicions.
	c.runUntil(c.now + 3*ms(cfg.Timeout))
	c.checkHealed()
	found := make([]int, k)
	for j := range found {
		found[j] = c.firstSuspicion((first-j+n)%n) - crashAt
	}
	return found
}

// TestBlockDetection kills a block of k consecutive ranks at once in a job
// of 64, in every mode, with the longest delays the accuracy conditions
// allow, and checks that every one of them is suspected within
// maxDelay + 2·(Timeout + tick) of the crash when k <= ProbeWindow+1 (its
// last heartbeat may be maxDelay on the way; a Timeout and a tick to suspect
// the first; a Timeout and a tick for the probes beyond it), and within one
// more Timeout and tick per further window; that no live rank is suspected
// (checked on every suspicion); and that the ring heals. It logs the worst
// and mean detection times, and with -v the same seeds with probing off for
// comparison (one Timeout per rank, and with AwaitConfirmation a
// confirmation delay per rank too).
func TestBlockDetection(t *testing.T) {
	seeds := 30
	if testing.Short() || raceEnabled {
		seeds = 8
	}
	cfg := DefaultConfig()
	for _, k := range []int{4, 8, 9, 12} {
		for _, mode := range simModes(cfg) {
			t.Run(fmt.Sprintf("k=%d/%s", k, mode.name), func(t *testing.T) {
				rounds := 1 + (k-1+cfg.ProbeWindow-1)/cfg.ProbeWindow
				bound := mode.maxDelay + rounds*(ms(cfg.Timeout)+max(mode.tickEvery, 1))
				on, off := detectionStats{}, detectionStats{}
				for seed := range uint64(seeds) {
					for j, at := range blockDetection(t, cfg, mode, 64, k, seed) {
						if at < 0 || at > bound {
							t.Fatalf("seed %d: rank %d of the block found %dms after the crash, want at most %dms", seed, j, at, bound)
						}
						on.add(at)
					}
					if testing.Verbose() {
						off.addAll(blockDetection(t, Config{ProbeWindow: -1}, mode, 64, k, seed))
					}
				}
				t.Logf("block of %d, %s: probes: %v (bound %dms)", k, mode.name, on, bound)
				if testing.Verbose() {
					t.Logf("block of %d, %s: no probes: %v", k, mode.name, off)
				}
			})
		}
	}
}

type detectionStats struct{ n, sum, worst int }

func (s *detectionStats) add(at int) { s.n, s.sum, s.worst = s.n+1, s.sum+at, max(s.worst, at) }

func (s *detectionStats) addAll(ats []int) {
	for _, at := range ats {
		s.add(at)
	}
}

func (s detectionStats) String() string {
	if s.n == 0 {
		return "none"
	}
	return fmt.Sprintf("worst %dms, mean %.1fms", s.worst, float64(s.sum)/float64(s.n))
}

// TestRingHeals crashes ranks of an 8-rank ring one scenario at a time, with
// instant delivery, and checks that the failed rank's live successor finds
// it, that its predecessor then sends to that successor at once, and that
// the ring stays quiet afterwards.
func TestRingHeals(t *testing.T) {
	for _, await := range []bool{false, true} {
		t.Run(fmt.Sprintf("await=%v", await), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.AwaitConfirmation = await
			testRingHeals(t, cfg)
		})
	}
}

func testRingHeals(t *testing.T, cfg Config) {
	timeout := ms(cfg.Timeout)
	for _, sc := range []struct {
		name  string
		crash []int
	}{
		{"one", []int{3}},
		{"wrap", []int{0}},
		{"two consecutive", []int{3, 4}},
		{"three consecutive", []int{6, 7, 0}},
		{"alternate", []int{1, 3, 5}},
		{"all but one", []int{0, 1, 2, 3, 4, 5, 7}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			c := newCluster(t, sc.name, 8, cfg, 1)
			c.tickEvery = 10
			c.start()
			c.runUntil(100)
			for _, r := range sc.crash {
				c.crash(r, 101, false)
			}
			// A run of consecutive crashes takes two Timeouts (one to
			// suspect the first, one for the probes beyond it), plus a
			// tick each.
			c.runUntil(101 + 2*(timeout+10) + 5)
			c.checkHealed()
			for _, r := range sc.crash {
				next := c.liveNeighbor(r, +1)
				ok := false
				for _, s := range c.suspicions {
					ok = ok || s.r == r && s.by == next
				}
				if !ok {
					t.Errorf("rank %d not suspected by its live successor %d: %v", r, next, c.suspicions)
				}
			}
			if len(c.suspicions) != len(sc.crash) {
				t.Errorf("suspicions %v, want one per crash", c.suspicions)
			}
			// The healed ring carries heartbeats: no further suspicion.
			c.runUntil(c.now + 10*timeout)
			if len(c.suspicions) != len(sc.crash) {
				t.Errorf("suspicions after healing: %v", c.suspicions)
			}
		})
	}
}

// TestNewObserverHearsAtOnce checks the healing step on its own: when a
// rank learns that its observer died, the very next Ready holds a heartbeat
// for the new observer, which otherwise might time it out before the next
// period.
func TestNewObserverHearsAtOnce(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, err := New(Config{}, 4, 10, epoch)
	if err != nil {
		t.Fatal(err)
	}
	d.Advance()
	d.Tick(epoch.Add(DefaultPeriod)) // the periodic heartbeat to 5
	d.Advance()
	d.Failed(5, epoch.Add(DefaultPeriod+time.Millisecond))
	if got := d.Ready().Heartbeats; !slices.Equal(got, []int{6}) || d.Observer() != 6 {
		t.Fatalf("after rank 5 failed: heartbeats %v, observer %d; want [6], 6", got, d.Observer())
	}
	// Unacknowledged output accumulates, without duplicates.
	d.Failed(6, epoch.Add(DefaultPeriod+2*time.Millisecond))
	d.Tick(epoch.Add(DefaultPeriod + 3*time.Millisecond))
	if got := d.Ready().Heartbeats; !slices.Equal(got, []int{6, 7}) {
		t.Fatalf("heartbeats %v, want [6 7]", got)
	}
	d.Advance()
	if d.HasReady() || len(d.Ready().Heartbeats) != 0 {
		t.Fatal("Advance left output behind")
	}
}

func BenchmarkSimulation256(b *testing.B) {
	mode := simModes(DefaultConfig())[1]
	seed := uint64(0)
	for b.Loop() {
		simulate(b, 256, seed, mode)
		seed++
	}
}
