package simq

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// Events come out by time, and events due at once in the order they were
// pushed, whatever the order of the pushes.
func TestOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type ev struct{ at, n int }
	var q Queue[int, ev]
	var pushed []ev
	for n := range 500 {
		e := ev{rng.IntN(20), n}
		pushed = append(pushed, e)
		q.Push(e.at, e)
	}
	slices.SortStableFunc(pushed, func(a, b ev) int { return a.at - b.at })
	if at, ok := q.Next(); !ok || at != pushed[0].at {
		t.Fatalf("Next = %d, %v; want %d", at, ok, pushed[0].at)
	}
	for i, want := range pushed {
		at, got := q.Pop()
		if got != want || at != want.at {
			t.Fatalf("pop %d: %v at %d, want %v", i, got, at, want)
		}
	}
	if _, ok := q.Next(); ok || q.Len() != 0 {
		t.Fatalf("not empty after every pop: %d left", q.Len())
	}
}
