package main

import (
	"errors"
	"fmt"
	"math"
)

// tree is the shape of the task trees, after the Unbalanced Tree Search
// benchmark's binomial trees (T3): the root of task i has 1 to 2*b0 children,
// and every other node has m children with probability q, else none. With
// q*m just below 1 the trees are near-critical: most subtrees are tiny, a few
// are huge, and no one can tell which without exploring them.
//
// A node is a 64-bit hash; its children are hashes of it and their index, so
// every tree is deterministic and needs no memory beyond the search stack.
type tree struct {
	b0, m int
	q     float64
	seed  uint64
	inner uint64 // a node below the root is inner when its hash is below this: q scaled to 2^64
}

func newTree(b0, m int, q float64, seed uint64) (tree, error) {
	if b0 < 1 || m < 1 {
		return tree{}, fmt.Errorf("tree: b0 %d and m %d must be at least 1", b0, m)
	}
	if !(q >= 0 && q*float64(m) < 1) {
		return tree{}, errors.New("tree: need 0 <= q and q*m < 1, or the trees may be infinite")
	}
	return tree{b0: b0, m: m, q: q, seed: seed, inner: uint64(math.Ldexp(q, 64))}, nil
}

// count returns the number of nodes of task i's tree, found by depth-first
// search. stack is scratch space, returned for reuse.
func (t tree) count(i int, stack []uint64) (uint64, []uint64) {
	root := mix(t.seed ^ mix(uint64(i)))
	stack = children(stack[:0], root, 1+int(root%uint64(2*t.b0)))
	nodes := uint64(1)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		nodes++
		if h < t.inner {
			stack = children(stack, h, t.m)
		}
	}
	return nodes, stack
}

// children appends the k children of node h to stack.
func children(stack []uint64, h uint64, k int) []uint64 {
	for j := range k {
		stack = append(stack, mix(h+uint64(j+1)*golden))
	}
	return stack
}

const golden = 0x9e3779b97f4a7c15

// mix is splitmix64's output function: a bijection of uint64 that scatters
// nearby inputs.
func mix(x uint64) uint64 {
	x += golden
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
