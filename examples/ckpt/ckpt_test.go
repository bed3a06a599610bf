package main

import (
	"math/rand/v2"
	"testing"
	"testing/quick"
	"time"

	"github.com/ftrma/ftrma"
)

// The trees are a pure function of the flags: the first 64 tasks of the
// default shape always have the same nodes, so the README's result stays
// what it says.
func TestTreeDeterministic(t *testing.T) {
	tr, err := newTree(300, 4, 0.2495, 1)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	var stk []uint64
	for i := range 64 {
		var n uint64
		n, stk = tr.count(i, stk)
		sum += n
	}
	if sum != 5544694 {
		t.Fatalf("64 tasks have %d nodes, want 5544694", sum)
	}
}

func TestTreeRejectsInfiniteShapes(t *testing.T) {
	for _, c := range []struct {
		b0, m int
		q     float64
	}{{300, 4, 0.25}, {300, 4, -0.1}, {0, 4, 0.2}, {300, 0, 0.2}} {
		if _, err := newTree(c.b0, c.m, c.q, 1); err == nil {
			t.Errorf("b0 %d m %d q %v accepted", c.b0, c.m, c.q)
		}
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	ck := checkpoint{next: 377, sum: 1 << 40, done: true, by: 6}
	got, err := decodeCheckpoint(ck.encode())
	if err != nil || got != ck {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, ck)
	}
	if _, err := decodeCheckpoint(ck.encode()[1:]); err == nil {
		t.Fatal("a short checkpoint decoded")
	}
}

func TestAdopter(t *testing.T) {
	for _, c := range []struct {
		f      ftrma.Rank
		failed []ftrma.Rank
		want   ftrma.Rank
	}{
		{2, []ftrma.Rank{2}, 3},
		{2, []ftrma.Rank{2, 3}, 4}, // the adopter died too: the next adopts both
		{3, []ftrma.Rank{2, 3}, 4},
		{7, []ftrma.Rank{7}, 0}, // cyclically
		{6, []ftrma.Rank{0, 6, 7}, 1},
		{1, []ftrma.Rank{0, 1, 2, 3, 4, 5, 6, 7}, -1},
	} {
		if got := adopter(c.f, 8, c.failed); got != c.want {
			t.Errorf("adopter of %d with %v failed: %d, want %d", c.f, c.failed, got, c.want)
		}
	}
}

// However much of the failures each live rank knows, at most one live rank
// names itself the adopter of a failed rank, and when they all know every
// failure exactly one does.
func TestAdopterUnique(t *testing.T) {
	check := func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, 0))
		n := 2 + rng.IntN(10)
		var dead []ftrma.Rank
		for r := range ftrma.Rank(n) {
			if rng.IntN(3) == 0 {
				dead = append(dead, r)
			}
		}
		if len(dead) == n {
			dead = dead[1:]
		}
		isDead := func(r ftrma.Rank) bool {
			for _, d := range dead {
				if d == r {
					return true
				}
			}
			return false
		}
		for _, f := range dead {
			partial, full := 0, 0
			for r := range ftrma.Rank(n) {
				if isDead(r) {
					continue
				}
				var known []ftrma.Rank // what r knows: f and some others
				for _, d := range dead {
					if d == f || rng.IntN(2) == 0 {
						known = append(known, d)
					}
				}
				if adopter(f, n, known) == r {
					partial++
				}
				if adopter(f, n, dead) == r {
					full++
				}
			}
			if partial > 1 || full != 1 {
				t.Logf("n %d, dead %v, f %d: %d self-named adopters with partial knowledge, %d with full", n, dead, f, partial, full)
				return false
			}
		}
		return true
	}
	if err := quick.Check(check, nil); err != nil {
		t.Fatal(err)
	}
}

func TestFlags(t *testing.T) {
	f := crashFlag{}
	for _, s := range []string{"2@0.25", "5@0", "0@0.999"} {
		if err := f.Set(s); err != nil {
			t.Errorf("-crash %s: %v", s, err)
		}
	}
	if want := (crashFlag{2: 0.25, 5: 0, 0: 0.999}); len(f) != 3 || f[2] != want[2] || f[0] != want[0] {
		t.Errorf("-crash set %v, want %v", f, want)
	}
	for _, s := range []string{"2", "2@", "@0.5", "x@0.5", "-1@0.5", "2@1", "2@-0.1", "2@NaN", "2@0.5@1"} {
		if err := (crashFlag{}).Set(s); err == nil {
			t.Errorf("-crash %s accepted", s)
		}
	}
	ok := config{tasks: 1, copies: 1, poll: time.Millisecond}
	if err := ok.validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	for _, bad := range []func(*config){
		func(c *config) { c.tasks = 0 },
		func(c *config) { c.copies = 0 },
		func(c *config) { c.copies = -3 },
		func(c *config) { c.every = -time.Second },
		func(c *config) { c.poll = 0 },
		func(c *config) { c.lostGrace = -time.Second },
	} {
		c := ok
		bad(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// The crash position is the fraction of the rank's own list, and only that
// rank crashes.
func TestCrashAt(t *testing.T) {
	cfg := testConfig(t, 4096)
	cfg.crash = map[ftrma.Rank]float64{2: 0.25, 5: 0.5}
	for r, want := range map[ftrma.Rank]int{2: 128, 5: 256, 3: -1} {
		if w := newWorker(fakeRank{newFakeStore(8, nil), r}, nil, cfg, nil, nil); w.crashAt != want {
			t.Errorf("rank %d crashes at %d, want %d", r, w.crashAt, want)
		}
	}
}
