package agree

import "math/bits"

// bitset is a set of ranks, bit r of word r/64 standing for rank r. A nil or
// short bitset reads as zeros beyond its length. The package keeps its own
// small bitset so that it imports nothing of the module.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) has(r int) bool {
	w := r >> 6
	return r >= 0 && w < len(b) && b[w]&(1<<(uint(r)&63)) != 0
}

// set adds r, which must lie inside b's length.
func (b bitset) set(r int) { b[r>>6] |= 1 << (uint(r) & 63) }

// or adds every member of c that fits inside b's length.
func (b bitset) or(c bitset) {
	for i := range min(len(b), len(c)) {
		b[i] |= c[i]
	}
}

func (b bitset) count() int {
	c := 0
	for _, w := range b {
		c += bits.OnesCount64(w)
	}
	return c
}

// fit returns a copy of b with exactly the words of an n-rank set and every
// rank >= n removed: what Step makes of a set that came off the wire.
func (b bitset) fit(n int) bitset {
	c := newBitset(n)
	copy(c, b)
	if r := uint(n) & 63; r != 0 {
		c[len(c)-1] &= 1<<r - 1
	}
	return c
}

// countBelow is the number of members smaller than r.
func (b bitset) countBelow(r int) int {
	c, w := 0, r>>6
	for i := 0; i < w && i < len(b); i++ {
		c += bits.OnesCount64(b[i])
	}
	if w < len(b) {
		c += bits.OnesCount64(b[w] & (1<<(uint(r)&63) - 1))
	}
	return c
}

// nthAbsent returns the i-th (from 0) rank in [0, n) that is NOT in b, or -1.
func (b bitset) nthAbsent(i, n int) int {
	for w := 0; w*64 < n; w++ {
		var x uint64
		if w < len(b) {
			x = b[w]
		}
		free := ^x
		if hi := n - w*64; hi < 64 {
			free &= 1<<uint(hi) - 1
		}
		c := bits.OnesCount64(free)
		if i < c {
			for ; i > 0; i-- {
				free &= free - 1
			}
			return w*64 + bits.TrailingZeros64(free)
		}
		i -= c
	}
	return -1
}

// firstAbsent returns the lowest rank in [0, n) not in b, or -1.
func (b bitset) firstAbsent(n int) int { return b.nthAbsent(0, n) }

// coversAll reports whether every rank in [0, n) is in b or in c.
func coversAll(b, c bitset, n int) bool { return union(b, c, n).firstAbsent(n) < 0 }

// union returns a new n-rank set holding the members of b and c below n.
func union(b, c bitset, n int) bitset {
	u := b.fit(n)
	u.or(c)
	return u.fit(n)
}

// list returns the members in increasing order.
func (b bitset) list() []int {
	out := make([]int, 0, b.count())
	for w, x := range b {
		for x != 0 {
			out = append(out, w*64+bits.TrailingZeros64(x))
			x &= x - 1
		}
	}
	return out
}

func (b bitset) equal(c bitset) bool {
	for i := range max(len(b), len(c)) {
		var x, y uint64
		if i < len(b) {
			x = b[i]
		}
		if i < len(c) {
			y = c[i]
		}
		if x != y {
			return false
		}
	}
	return true
}
