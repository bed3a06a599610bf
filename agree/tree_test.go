package agree

import (
	"math/bits"
	"slices"
	"testing"
	"testing/quick"
)

// naiveTree builds the binomial tree of m indices the slow way: index i's
// parent clears i's lowest set bit.
func naiveTree(m int) (parent []int, children [][]int) {
	parent = make([]int, m)
	children = make([][]int, m)
	parent[0] = -1
	for i := 1; i < m; i++ {
		p := i - (i & -i)
		parent[i] = p
		children[p] = append(children[p], i)
	}
	for _, c := range children {
		// largest subtree first: the child with the largest offset
		slices.Reverse(c)
	}
	return parent, children
}

func TestTreeMatchesReference(t *testing.T) {
	check := func(m16 uint16) bool {
		m := int(m16%2000) + 1
		parent, children := naiveTree(m)
		maxDepth := 0
		for i := range m {
			if i > 0 && treeParent(i) != parent[i] {
				t.Logf("m=%d: treeParent(%d) = %d, want %d", m, i, treeParent(i), parent[i])
				return false
			}
			if got := treeChildren(nil, i, m); !slices.Equal(got, children[i]) && !(len(got) == 0 && len(children[i]) == 0) {
				t.Logf("m=%d: treeChildren(%d) = %v, want %v", m, i, got, children[i])
				return false
			}
			maxDepth = max(maxDepth, bits.OnesCount(uint(i)))
		}
		if want := log2ceil(m); maxDepth > want {
			t.Logf("m=%d: depth %d > ceil(log2 m) = %d", m, maxDepth, want)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
	for m := 1; m <= 70; m++ { // and every small size
		if !check(uint16(m - 1)) {
			t.Fatalf("m=%d", m)
		}
	}
}

// TestPlaceMatchesReference checks placeOf against the sorted member list
// for random failed sets.
func TestPlaceMatchesReference(t *testing.T) {
	check := func(n16 uint16, fail []uint16, self16 uint16) bool {
		n := int(n16%300) + 1
		f := newBitset(n)
		for _, x := range fail {
			f.set(int(x) % n)
		}
		self := int(self16) % n
		var members []int
		for r := range n {
			if !f.has(r) {
				members = append(members, r)
			}
		}
		p, ok := placeOf(self, f, n)
		i := slices.Index(members, self)
		if ok != (i >= 0) {
			t.Logf("n=%d F=%v self=%d: ok=%v", n, f.list(), self, ok)
			return false
		}
		if !ok {
			return true
		}
		parent, children := naiveTree(len(members))
		wantParent := -1
		if parent[i] >= 0 {
			wantParent = members[parent[i]]
		}
		var wantChildren []int
		for _, c := range children[i] {
			wantChildren = append(wantChildren, members[c])
		}
		if p.parent != wantParent || !slices.Equal(p.children, wantChildren) {
			t.Logf("n=%d F=%v self=%d: place %+v, want parent %d children %v", n, f.list(), self, p, wantParent, wantChildren)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

func TestBitsetMatchesReference(t *testing.T) {
	check := func(n16 uint16, members []uint16, i16 uint16) bool {
		n := int(n16%500) + 1
		b := newBitset(n)
		in := make([]bool, n)
		for _, x := range members {
			b.set(int(x) % n)
			in[int(x)%n] = true
		}
		var absent, present []int
		for r := range n {
			if in[r] {
				present = append(present, r)
			} else {
				absent = append(absent, r)
			}
		}
		i := int(i16) % (n + 1)
		want := -1
		if i < len(absent) {
			want = absent[i]
		}
		below := 0
		for r := range i {
			if r < n && in[r] {
				below++
			}
		}
		return b.nthAbsent(i, n) == want && b.count() == len(present) && slices.Equal(b.list(), present) &&
			b.countBelow(i) == below && coversAll(b, nil, n) == (len(absent) == 0)
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
	// fit drops ranks beyond n, even inside the last word.
	b := setOf(1, 9, 70)
	if got := b.fit(9).list(); !slices.Equal(got, []int{1}) {
		t.Errorf("fit(9) = %v, want [1]", got)
	}
}
