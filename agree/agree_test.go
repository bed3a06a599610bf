package agree

import (
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scenario derives a run's options from its seed, so that the seeds of one
// test cover a mix: no crash, a few, many, the successive coordinators, crashes
// in the middle of send bursts, false suspicions, slow links.
func scenario(n int, seed int64) simOpts {
	rng := rand.New(rand.NewSource(seed*7919 + int64(n)))
	o := simOpts{n: n, insts: 3, seed: seed, codec: true, delayMax: 20}
	inst := (2*log2ceil(n) + 2) * 10 // ticks a failure-free instance takes, about
	o.horizon = 2 * o.insts * inst
	o.notifyMax = 1 + rng.Intn(3*inst)
	o.startMax = rng.Intn(inst)
	o.gapMax = rng.Intn(inst/2 + 1)
	o.atZero = 0.2
	o.burst = 0.3
	o.tail = []float64{0, 0.01, 0.05, 0.2}[rng.Intn(4)]
	o.tailMul = []int{30, 100, 1000}[rng.Intn(3)]
	o.slow = rng.Intn(3)
	switch rng.Intn(7) {
	case 0: // failure-free
	case 1: // a few crashes anywhere
		o.crashes = 1 + rng.Intn(3)
	case 2: // many crashes
		o.crashes = 1 + rng.Intn(max(1, n/4))
	case 3: // the coordinator, then its successors
		o.leaders = 1 + rng.Intn(max(1, min(5, n-1)))
		o.crashes = o.leaders + rng.Intn(3)
	case 4: // crashes during send bursts
		o.crashes = 1 + rng.Intn(max(1, n/8))
		o.burst = 0.9
		o.atZero = 0
	case 5: // false suspicions: fenced a while after everyone was told
		o.crashes = 1 + rng.Intn(4)
		o.suspects = o.crashes
		if rng.Intn(2) == 0 {
			o.leaders = 1
		}
	case 6: // suspected coordinators that keep running for a long while
		o.leaders = 1 + rng.Intn(max(1, min(4, n-1)))
		o.crashes = o.leaders + rng.Intn(2)
		o.suspects = o.crashes
		o.notifyMax = 1 + rng.Intn(10*inst)
	}
	o.crashes = min(o.crashes, n-1)
	o.budget = 100 * n * o.insts * (2 + o.crashes)
	return o
}

// seedRange returns the seeds to run: 0..count-1, or 0..FTRMA_SEEDS-1, or
// just FTRMA_SEED (to replay one).
func seedRange(t *testing.T, count int) []int64 {
	if v := os.Getenv("FTRMA_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("FTRMA_SEED=%q: %v", v, err)
		}
		return []int64{s}
	}
	if v := os.Getenv("FTRMA_SEEDS"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("FTRMA_SEEDS=%q: %v", v, err)
		}
		count = c
	}
	seeds := make([]int64, count)
	for i := range seeds {
		seeds[i] = int64(i)
	}
	return seeds
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func long() bool { return os.Getenv("FTRMA_LONG") != "" }

// runSeeds runs scenario(n, seed) for every seed and reports each failing one
// with the command that replays it.
func runSeeds(t *testing.T, n, count int) {
	t.Helper()
	begin := time.Now()
	failed, msgs, crashes, leaders, late, moved, moved2 := 0, 0, 0, 0, 0, 0, 0
	var kinds [KindNudge + 1]int
	seeds := seedRange(t, count)
	for _, seed := range seeds {
		o := scenario(n, seed)
		s := newSim(o)
		errs := s.run()
		msgs += s.messages
		late += s.late
		if len(s.coords) > 0 && !(len(s.coords) == 1 && s.coords[0]) {
			moved++ // some round was run by a coordinator other than rank 0
		}
		if len(s.coords)-btoi(s.coords[0]) >= 2 {
			moved2++ // by two or more successive coordinators
		}
		for k, c := range s.kinds {
			kinds[k] += c
		}
		crashes += o.crashes
		if o.leaders > 0 {
			leaders++
		}
		if len(errs) > 0 {
			failed++
			if traceOn {
				t.Log("trace:\n" + strings.Join(s.trace, "\n"))
			}
			t.Errorf("%v:\n\t%s\nreplay: FTRMA_SEED=%d go test -run '%s' ./agree/", o, joinErrs(errs), seed, t.Name())
			if failed >= 5 {
				t.Fatal("giving up after 5 failing seeds")
			}
		}
	}
	t.Logf("n=%d: %d seeds (%d aimed at coordinators; in %d a new coordinator ran rounds, in %d two or more), %d crashes, %d messages (START %d, REPORT %d, DECIDE %d, NUDGE %d), %d decisions of failed ranks differ from the survivors', %v",
		n, len(seeds), leaders, moved, moved2, crashes, msgs, kinds[KindStart], kinds[KindReport], kinds[KindDecide], kinds[KindNudge], late, time.Since(begin).Round(time.Millisecond))
}

// TestAgreementUnderFailures is the headline run: termination, agreement
// among survivors and validity over 3 consecutive instances, with random
// crashes before, during and after the agreement, the coordinator and its
// successors included, crashes in the middle of send bursts, and false
// suspicions. It runs 256 ranks x 1000 seeds, 32 ranks x 1000 seeds and
// 300 seeds of each small size. Under the race detector (about 5 times
// slower) it runs only 100 of the 256-rank seeds unless FTRMA_LONG is set.
// A failing seed is printed with the command that replays it; FTRMA_TRACE=1
// adds the trace of every event.
func TestAgreementUnderFailures(t *testing.T) {
	t.Run("n=256", func(t *testing.T) {
		t.Parallel()
		count := 1000
		if raceEnabled && !long() {
			count = 100
		}
		runSeeds(t, 256, count)
	})
	t.Run("n=32", func(t *testing.T) {
		t.Parallel()
		runSeeds(t, 32, 1000)
	})
	t.Run("small", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{1, 2, 3, 4, 5, 7} {
			runSeeds(t, n, 300)
		}
	})
}

// TestFailureFree checks validity (the AND of every contribution, no failed
// rank) and the logarithmic depth of the failure-free case: the longest chain
// of messages before any decision is at most 2*ceil(log2 n), and n-1 REPORTs
// plus n-1 DECIDEs are all the messages.
func TestFailureFree(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 13, 64, 100, 256, 1000} {
		for seed := range int64(5) {
			o := simOpts{n: n, insts: 1, seed: seed, codec: true, startMax: 100, delayMax: 20, tail: 0.1, tailMul: 100, budget: 10 * n}
			s := newSim(o)
			if errs := s.run(); len(errs) > 0 {
				t.Fatalf("%v:\n\t%s", o, joinErrs(errs))
			}
			want := ^uint64(0)
			for r := range n {
				want &= s.contrib[0][r]
			}
			d := s.decided[0][0]
			if d.Value != want || len(d.Failed) != 0 {
				t.Fatalf("n=%d seed=%d: decided %#x %v, want %#x []", n, seed, d.Value, d.Failed, want)
			}
			if depth, bound := s.maxDecisionDepth(0), 2*log2ceil(n); depth > bound {
				t.Errorf("n=%d seed=%d: causal depth %d > 2*ceil(log2 n) = %d", n, seed, depth, bound)
			}
			if s.messages != 2*(n-1) {
				t.Errorf("n=%d seed=%d: %d messages, want %d", n, seed, s.messages, 2*(n-1))
			}
		}
	}
}

// TestManyInstances runs 20 consecutive instances (with Forget after each
// decision) under crashes, checking every instance.
func TestManyInstances(t *testing.T) {
	for _, seed := range seedRange(t, 50) {
		n := 24
		o := scenario(n, seed)
		o.insts = 20
		o.horizon = o.insts * (2*log2ceil(n) + 2) * 10
		o.budget = 100 * n * o.insts * (2 + o.crashes)
		s := newSim(o)
		if errs := s.run(); len(errs) > 0 {
			t.Fatalf("%v:\n\t%s\nreplay: FTRMA_SEED=%d go test -run '%s' ./agree/", o, joinErrs(errs), seed, t.Name())
		}
		for r := range n {
			if got := len(s.ag[r].insts); !s.doomed[r] && got != 1 {
				t.Errorf("seed %d: survivor %d keeps %d instances after Forget, want 1", seed, r, got)
			}
		}
	}
}

// TestCoordinatorChain kills ranks 0..k-1 one after another while the first
// instance runs, every time before the survivors have heard of the previous
// death, so that each new coordinator is killed while running its round.
func TestCoordinatorChain(t *testing.T) {
	for _, seed := range seedRange(t, 200) {
		n := 16 + int(seed%48)
		k := 1 + int(seed%(int64(n)/2))
		o := simOpts{n: n, insts: 2, seed: seed, codec: true, crashes: k, leaders: k,
			horizon: 40 * k, notifyMax: 100, startMax: 4, gapMax: 50, burst: 0.5,
			delayMax: 20, tail: 0.05, tailMul: 100}
		o.budget = 100 * n * o.insts * (2 + k)
		s := newSim(o)
		if errs := s.run(); len(errs) > 0 {
			t.Fatalf("%v:\n\t%s\nreplay: FTRMA_SEED=%d go test -run '%s' ./agree/", o, joinErrs(errs), seed, t.Name())
		}
	}
}

// TestAllButOne crashes every rank but one: the last survivor decides alone.
func TestAllButOne(t *testing.T) {
	for _, seed := range seedRange(t, 100) {
		n := 2 + int(seed%30)
		o := simOpts{n: n, insts: 2, seed: seed, codec: true, crashes: n - 1, leaders: int(seed % 3),
			atZero: 0.3, burst: 0.3, horizon: 200, notifyMax: 150, startMax: 50, gapMax: 50,
			delayMax: 20, tail: 0.05, tailMul: 100}
		o.budget = 100 * n * o.insts * (1 + n)
		s := newSim(o)
		if errs := s.run(); len(errs) > 0 {
			t.Fatalf("%v:\n\t%s\nreplay: FTRMA_SEED=%d go test -run '%s' ./agree/", o, joinErrs(errs), seed, t.Name())
		}
	}
}

// TestStartArrivesFirst: a rank that receives START before its own Start
// call waits for it and contributes.
func TestStartArrivesFirst(t *testing.T) {
	n := 8
	ags := make([]*Agreement, n)
	for r := range ags {
		ags[r] = New(r, n)
	}
	// Rank 4 is known failed at rank 0 before it starts: round zero is cut
	// (4 is the parent of 5 and 6), so rank 0 starts round (1,0) at once.
	ags[0].Failed(4)
	ags[0].Start(1, 0xff)
	rd := ags[0].Ready()
	ags[0].Advance()
	var toOne *Message
	for _, o := range rd.Send {
		if o.Msg.Kind != KindStart || o.Msg.Round != (Round{1, 0}) {
			t.Fatalf("rank 0 sent %v, want START of round (1,0)", o.Msg)
		}
		if o.To == 1 {
			m := o.Msg
			toOne = &m
		}
	}
	if toOne == nil {
		t.Fatalf("rank 0 sent no START to rank 1: %v", rd.Send)
	}
	ags[1].Step(0, *toOne)
	if ags[1].HasReady() {
		t.Fatalf("rank 1 acted before its Start: %+v", ags[1].Ready())
	}
	ags[1].Start(1, 0x0f)
	rd = ags[1].Ready()
	if len(rd.Send) != 1 || rd.Send[0].To != 0 || rd.Send[0].Msg.Kind != KindReport || rd.Send[0].Msg.Value != 0x0f {
		t.Fatalf("rank 1 after Start sent %v, want one REPORT of 0x0f to rank 0", rd.Send)
	}
}
