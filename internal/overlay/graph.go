package overlay

import (
	"fmt"
	"math/bits"
	"slices"
)

// Neighbors returns v's neighbours in the binomial graph on a ring of n
// ranks: v+2^k and v-2^k (mod n) for every k with 2^k < n, without
// duplicates, sorted ascending, never v itself. It returns nil when n < 2.
// The graph is symmetric: w is a neighbour of v exactly when v is one of w;
// every rank is within ⌈log2(n)/2⌉ hops of every other (4 for 256 ranks).
//
// Neighbors panics unless 0 <= v < n (for n >= 1): a rank outside the job is
// a bug in the caller, not a runtime condition.
func Neighbors(v, n int) []int {
	if v < 0 || n > 0 && v >= n {
		panic(fmt.Sprintf("overlay: rank %d outside a ring of %d", v, n))
	}
	if n < 2 {
		return nil
	}
	out := make([]int, 0, 2*bits.Len(uint(n-1)))
	for d := 1; d < n; d <<= 1 {
		out = append(out, (v+d)%n, ((v-d)%n+n)%n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Degree returns the number of neighbours of every rank in the binomial graph
// on n ranks (the graph is vertex-transitive, so all ranks have the same
// degree): len(Neighbors(0, n)). It is 0 for n < 2. The graph stays connected
// after the removal of any Degree(n)-1 ranks.
func Degree(n int) int {
	if n < 2 {
		return 0
	}
	// The values ±2^k mod n coincide in ways that depend on n (for n = 6,
	// -2 = 4 = 2^2; for n = 2^j, 2^(j-1) is its own negative), so count
	// rather than use a closed formula.
	return len(Neighbors(0, n))
}

// TreeParent returns the parent of node i in the binomial tree rooted at 0:
// i with its highest set bit cleared, or -1 for the root. It panics if i < 0.
//
// The tree is the one of the classic binomial broadcast: in round j (j = 1,
// 2, ...) every node i < 2^(j-1) that already holds the data sends it to
// i+2^(j-1), so m nodes are reached in ⌈log2 m⌉ rounds and no node is more
// than ⌈log2 m⌉ hops from the root.
func TreeParent(i int) int {
	if i < 0 {
		panic(fmt.Sprintf("overlay: tree node %d is negative", i))
	}
	if i == 0 {
		return -1
	}
	return i &^ (1 << (bits.Len(uint(i)) - 1))
}

// TreeChildren returns the children of node i in the binomial tree over m
// nodes rooted at 0 (see TreeParent): i+2^k for every 2^k > i with
// i+2^k < m, in ascending order, which is also the order of the rounds in
// which a binomial broadcast reaches them. It returns nil when i >= m and
// panics if i < 0.
func TreeChildren(i, m int) []int {
	if i < 0 {
		panic(fmt.Sprintf("overlay: tree node %d is negative", i))
	}
	var out []int
	for d := 1 << bits.Len(uint(i)); i+d < m; d <<= 1 {
		out = append(out, i+d)
	}
	return out
}

// TreeDepth returns the depth of the binomial tree over m nodes, which is
// also the number of rounds a binomial broadcast over m nodes takes:
// ⌈log2 m⌉, and 0 for m <= 1.
func TreeDepth(m int) int {
	if m <= 1 {
		return 0
	}
	return bits.Len(uint(m - 1))
}
