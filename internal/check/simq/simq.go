// Package simq is the event core of the protocols' seeded simulators
// (comm's, agree's, the arbiter's, revoke's detector test): a queue of
// pending events, each due at a simulated time, that gives back the
// earliest first and, among events due at once, the one pushed first. A
// run is then a function of its seed alone, and an explorer seed that
// found a defect finds it again.
package simq

import (
	"cmp"
	"container/heap"
)

// Queue holds the pending events of type E, due at times of type T. The
// zero Queue is empty and ready to use.
type Queue[T cmp.Ordered, E any] struct {
	items items[T, E]
	next  uint64 // the order of the next push, which breaks ties
}

type item[T cmp.Ordered, E any] struct {
	at  T
	seq uint64
	e   E
}

type items[T cmp.Ordered, E any] []item[T, E]

func (h items[T, E]) Len() int { return len(h) }
func (h items[T, E]) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h items[T, E]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *items[T, E]) Push(x any)   { *h = append(*h, x.(item[T, E])) }
func (h *items[T, E]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Push schedules e at time at.
func (q *Queue[T, E]) Push(at T, e E) {
	heap.Push(&q.items, item[T, E]{at: at, seq: q.next, e: e})
	q.next++
}

// Pop removes and returns the earliest event and its time; among events
// due at once, the one pushed first. The queue must not be empty.
func (q *Queue[T, E]) Pop() (T, E) {
	it := heap.Pop(&q.items).(item[T, E])
	return it.at, it.e
}

// Next reports when the earliest event is due, and false for an empty
// queue.
func (q *Queue[T, E]) Next() (T, bool) {
	if len(q.items) == 0 {
		var zero T
		return zero, false
	}
	return q.items[0].at, true
}

// Len is the number of pending events.
func (q *Queue[T, E]) Len() int { return len(q.items) }
