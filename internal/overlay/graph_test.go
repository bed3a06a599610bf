package overlay

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
)

// naiveNeighbors is the reference for Neighbors: test every other rank w for
// a ring distance, in either direction, that is a power of two below n.
func naiveNeighbors(v, n int) []int {
	var out []int
	for w := range n {
		if w == v {
			continue
		}
		for p := 1; p < n; p *= 2 {
			if (w-v+n)%n == p || (v-w+n)%n == p {
				out = append(out, w)
				break
			}
		}
	}
	return out
}

// smallRing turns two arbitrary numbers into a rank and a ring size of at
// most 2100 ranks.
func smallRing(a, b uint16) (v, n int) {
	n = int(b)%2100 + 1
	return int(a) % n, n
}

func TestNeighborsMatchReference(t *testing.T) {
	prop := func(a, b uint16) bool {
		v, n := smallRing(a, b)
		return slices.Equal(Neighbors(v, n), naiveNeighbors(v, n))
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
	// And every ring up to 70 ranks exhaustively, where the coincidences of
	// ±2^k live.
	for n := 1; n <= 70; n++ {
		for v := range n {
			if got, want := Neighbors(v, n), naiveNeighbors(v, n); !slices.Equal(got, want) {
				t.Fatalf("Neighbors(%d, %d) = %v, want %v", v, n, got, want)
			}
		}
	}
}

func TestNeighborsSymmetricAndUniform(t *testing.T) {
	prop := func(a, b uint16) bool {
		v, n := smallRing(a, b)
		nb := Neighbors(v, n)
		if len(nb) != Degree(n) {
			return false
		}
		for _, w := range nb {
			if w == v || w < 0 || w >= n || !slices.Contains(Neighbors(w, n), v) {
				return false
			}
		}
		return slices.IsSorted(nb) && len(slices.Compact(slices.Clone(nb))) == len(nb)
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

func TestDegree(t *testing.T) {
	for _, c := range []struct{ n, d int }{
		{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 3}, {5, 4}, {6, 4}, {7, 6}, {8, 5},
		{16, 7}, {17, 8}, {64, 11}, {256, 15}, {1000, 20}, {1024, 19},
	} {
		if got := Degree(c.n); got != c.d {
			t.Errorf("Degree(%d) = %d, want %d", c.n, got, c.d)
		}
	}
}

func TestNeighborsPanicsOutsideRing(t *testing.T) {
	for _, c := range []struct{ v, n int }{{-1, 4}, {4, 4}, {1, 1}, {-1, 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Neighbors(%d, %d) did not panic", c.v, c.n)
				}
			}()
			Neighbors(c.v, c.n)
		}()
	}
	if Neighbors(0, 1) != nil || Neighbors(0, 0) != nil {
		t.Error("a ring of fewer than two ranks has neighbours")
	}
}

// adjacency returns Neighbors(v, n) for every v.
func adjacency(n int) [][]int {
	adj := make([][]int, n)
	for v := range n {
		adj[v] = Neighbors(v, n)
	}
	return adj
}

// connectedWithout reports whether the graph adj, minus the ranks in dead,
// is connected.
func connectedWithout(adj [][]int, dead Set) bool {
	n := len(adj)
	start := -1
	for r := range n {
		if !dead.Has(r) {
			start = r
			break
		}
	}
	if start < 0 {
		return true
	}
	seen := NewSet(n)
	seen.Add(start)
	queue := []int{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range adj[v] {
			if !dead.Has(w) && seen.Add(w) {
				queue = append(queue, w)
			}
		}
	}
	return seen.Len()+dead.Len() == n
}

// TestFaultTolerance checks the property revoke/ relies on: removing any
// Degree(n)-1 ranks leaves the binomial graph connected. Exhaustive over all
// removal sets for small rings, sampled (at random, and by removing all but
// one neighbour of a rank) for larger ones.
func TestFaultTolerance(t *testing.T) {
	maxExhaustive := 16
	if testing.Short() {
		maxExhaustive = 12
	}
	for n := 2; n <= maxExhaustive; n++ {
		d, adj := Degree(n), adjacency(n)
		// Enumerate every subset of size d-1 by its bitmask.
		for mask := uint32(0); mask < 1<<n; mask++ {
			if popcount(mask) != d-1 {
				continue
			}
			dead := NewSet(n)
			for r := range n {
				if mask&(1<<r) != 0 {
					dead.Add(r)
				}
			}
			if !connectedWithout(adj, dead) {
				t.Fatalf("n=%d: removing %v disconnects the graph", n, dead)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{17, 31, 33, 64, 100, 255, 256, 257, 1000} {
		d, adj := Degree(n), adjacency(n)
		for range 200 {
			dead := NewSet(n)
			for dead.Len() < d-1 {
				dead.Add(rng.IntN(n))
			}
			if !connectedWithout(adj, dead) {
				t.Fatalf("n=%d: removing %v disconnects the graph", n, dead)
			}
		}
		for range 100 {
			v := rng.IntN(n)
			nb := adj[v]
			keep := nb[rng.IntN(len(nb))]
			dead := NewSet(n)
			for _, w := range nb {
				if w != keep {
					dead.Add(w)
				}
			}
			if !connectedWithout(adj, dead) {
				t.Fatalf("n=%d: removing all neighbours of %d but %d disconnects the graph", n, v, keep)
			}
		}
	}
}

// TestDiameter: every rank is within ⌈log2(n)/2⌉ hops of every other (the
// graph is vertex-transitive, so distances from rank 0 suffice), which bounds
// the latency of a broadcast without failures.
func TestDiameter(t *testing.T) {
	for n := 2; n <= 1100; n++ {
		adj := adjacency(n)
		dist := make([]int, n)
		for i := range dist {
			dist[i] = -1
		}
		dist[0] = 0
		queue, diameter := []int{0}, 0
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			for _, w := range adj[v] {
				if dist[w] < 0 {
					dist[w] = dist[v] + 1
					diameter = max(diameter, dist[w])
					queue = append(queue, w)
				}
			}
		}
		if bound := (TreeDepth(n) + 1) / 2; diameter > bound || slices.Contains(dist, -1) {
			t.Fatalf("n=%d: diameter %d, want at most %d", n, diameter, bound)
		}
	}
}

func popcount(x uint32) int {
	c := 0
	for ; x != 0; x &= x - 1 {
		c++
	}
	return c
}

// TestTreeConsistent checks, for every m up to 1000, that TreeParent and
// TreeChildren describe one spanning tree rooted at 0 whose depth is at most
// TreeDepth(m) = ⌈log2 m⌉.
func TestTreeConsistent(t *testing.T) {
	for m := 1; m <= 1000; m++ {
		children := 0
		maxDepth := 0
		for i := range m {
			for _, c := range TreeChildren(i, m) {
				children++
				if c <= i || c >= m || TreeParent(c) != i {
					t.Fatalf("m=%d: child %d of %d has parent %d", m, c, i, TreeParent(c))
				}
			}
			if i == 0 {
				if TreeParent(0) != -1 {
					t.Fatalf("root has parent %d", TreeParent(0))
				}
				continue
			}
			p := TreeParent(i)
			if p < 0 || p >= i || !slices.Contains(TreeChildren(p, m), i) {
				t.Fatalf("m=%d: parent %d of %d does not list it as a child", m, p, i)
			}
			depth := 0
			for j := i; j != 0; j = TreeParent(j) {
				depth++
			}
			maxDepth = max(maxDepth, depth)
		}
		if children != m-1 {
			t.Fatalf("m=%d: %d parent-child edges, want %d", m, children, m-1)
		}
		if maxDepth > TreeDepth(m) || (m&(m-1) == 0 && maxDepth != TreeDepth(m)) {
			t.Fatalf("m=%d: depth %d, TreeDepth %d", m, maxDepth, TreeDepth(m))
		}
		if TreeChildren(m, m) != nil {
			t.Fatalf("m=%d: node m has children", m)
		}
	}
}

// TestTreeRounds checks that a binomial broadcast in which every node sends
// to its children in the order TreeChildren returns them, one per round,
// starting the round after it received, reaches all m nodes in exactly
// TreeDepth(m) = ⌈log2 m⌉ rounds.
func TestTreeRounds(t *testing.T) {
	for m := 1; m <= 1000; m++ {
		got := make([]int, m) // round in which node i received; root: 0
		last := 0
		for i := range m { // parents precede children
			for k, c := range TreeChildren(i, m) {
				got[c] = got[i] + k + 1
				last = max(last, got[c])
			}
		}
		want := 0
		for 1<<want < m {
			want++
		}
		if last != want || TreeDepth(m) != want {
			t.Fatalf("m=%d: broadcast takes %d rounds, TreeDepth %d, want %d", m, last, TreeDepth(m), want)
		}
	}
}
