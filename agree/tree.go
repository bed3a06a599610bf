package agree

import "math/bits"

// A round's tree is the binomial tree over its members: the ranks not in the
// round's failed set, in increasing order, so that the coordinator (the lowest
// member) sits at index 0. Index i > 0 has parent i with its lowest set bit
// cleared, and children i+2^k for every 2^k below i's lowest set bit (every
// 2^k < m for the root) that is still an index. Depth is ceil(log2 m).

// treeParent returns the parent index of index i > 0.
func treeParent(i int) int { return i & (i - 1) }

// treeChildren appends the child indices of index i in a tree of m indices,
// largest subtree first.
func treeChildren(dst []int, i, m int) []int {
	var k int
	if i == 0 {
		if m < 2 {
			return dst
		}
		k = 1 << (bits.Len(uint(m-1)) - 1)
	} else {
		k = (i & -i) >> 1
	}
	for ; k > 0; k >>= 1 {
		if i+k < m {
			dst = append(dst, i+k)
		}
	}
	return dst
}

// place is one rank's position in a round's tree, in ranks.
type place struct {
	parent   int   // -1 at the coordinator
	children []int // largest subtree first
}

// placeOf computes self's place in the tree of the n-rank round whose failed
// set is f (fitted to n). ok is false when self is not a member.
func placeOf(self int, f bitset, n int) (p place, ok bool) {
	if f.has(self) {
		return place{}, false
	}
	m := n - f.count()
	i := self - f.countBelow(self)
	p.parent = -1
	if i > 0 {
		p.parent = f.nthAbsent(treeParent(i), n)
	}
	var idx [64]int
	for _, c := range treeChildren(idx[:0], i, m) {
		p.children = append(p.children, f.nthAbsent(c, n))
	}
	return p, true
}
