package store

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/ftrma/ftrma"
)

func noneFailed(ftrma.Rank) bool { return false }

func failedSet(rs ...ftrma.Rank) func(ftrma.Rank) bool {
	return func(r ftrma.Rank) bool { return slices.Contains(rs, r) }
}

func oneHost(n int) []string { return make([]string, n) }

// Copies distinct live ranks per key, spread evenly over the ranks.
func TestPlacementDistinctAndEven(t *testing.T) {
	for _, c := range []struct{ n, copies int }{{8, 3}, {8, 6}, {5, 1}, {16, 3}, {3, 3}} {
		p := newPlacement(c.copies, oneHost(c.n))
		count := make([]int, c.n)
		const keys = 20000
		for k := range keys {
			reps := p.replicas(testHash(fmt.Appendf(nil, "key/%d", k)), noneFailed)
			if len(reps) != c.copies {
				t.Fatalf("%+v: %d replicas", c, len(reps))
			}
			seen := map[ftrma.Rank]bool{}
			for _, r := range reps {
				if seen[r] {
					t.Fatalf("%+v: rank %d twice in %v", c, r, reps)
				}
				seen[r] = true
				count[r]++
			}
		}
		want := float64(keys*c.copies) / float64(c.n)
		for r, got := range count {
			if math.Abs(float64(got)-want) > 0.05*want {
				t.Errorf("%+v: rank %d holds %d copies, want %.0f ± 5%%", c, r, got, want)
			}
		}
	}
}

// A failure moves only the keys the failed ranks held: every other key
// keeps its replicas, and a moved key keeps its surviving ones.
func TestPlacementMovesOnlyTheFailedRanksKeys(t *testing.T) {
	p := newPlacement(3, oneHost(10))
	after := failedSet(4, 7)
	moved := 0
	for k := range 5000 {
		h := testHash(fmt.Appendf(nil, "k%d", k))
		before, now := p.replicas(h, noneFailed), p.replicas(h, after)
		if len(now) != 3 || slices.Contains(now, 4) || slices.Contains(now, 7) {
			t.Fatalf("key %d: %v with 4 and 7 failed", k, now)
		}
		if !slices.Contains(before, 4) && !slices.Contains(before, 7) {
			if !slices.Equal(before, now) {
				t.Fatalf("key %d moved from %v to %v though no replica failed", k, before, now)
			}
			continue
		}
		moved++
		for _, r := range before {
			if r != 4 && r != 7 && !slices.Contains(now, r) {
				t.Fatalf("key %d: surviving replica %d dropped (%v → %v)", k, r, before, now)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no key had a replica on the failed ranks")
	}
}

// Replicas go to distinct hosts while there are enough hosts, and to
// distinct ranks beyond that.
func TestPlacementDistinctHosts(t *testing.T) {
	hosts := []string{"a", "a", "a", "b", "b", "b", "c", "c"}
	p := newPlacement(3, hosts)
	for k := range 3000 {
		h := testHash(fmt.Appendf(nil, "k%d", k))
		reps := p.replicas(h, noneFailed)
		used := map[string]bool{}
		for _, r := range reps {
			used[hosts[r]] = true
		}
		if len(used) != 3 {
			t.Fatalf("key %d on %v: hosts %v", k, reps, used)
		}
		// Host c gone: two hosts left, three distinct ranks.
		reps = p.replicas(h, failedSet(6, 7))
		used = map[string]bool{}
		for _, r := range reps {
			used[hosts[r]] = true
		}
		if len(reps) != 3 || len(used) != 2 {
			t.Fatalf("key %d with host c down: %v", k, reps)
		}
	}
}

// testHash is the keyed hash under a fixed key, for tests of placement.
func testHash(key []byte) uint64 { return sipHash24(sipKey{1, 2}, key) }
