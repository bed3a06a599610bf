// Package scaletest is what the protocols' scale tests (agree, revoke and
// comm's shrink) share: the sizes and seeds they run, from 4 to 4,096
// ranks, their event queue, and the check of a measured curve against
// bounds of the form (a·ceil(log2 n) + b) / d. It is for tests only.
//
// FTRMA_SCALE_MAX=n caps the sizes (and lifts the cap of race builds);
// FTRMA_SCALE_SEEDS=k runs k seeds per size.
package scaletest

import (
	"container/heap"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
)

// Log2 is ceil(log2 n), for n >= 1.
func Log2(n int) int { return bits.Len(uint(n - 1)) }

// Sizes are 4, 8, ..., 4,096, with 1,000 and 3,000 among them (sizes that
// are no power of two), up to 1,024 in a race build (race), or up to
// FTRMA_SCALE_MAX.
func Sizes(race bool) []int {
	top := 4096
	if race {
		top = 1024
	}
	if v, err := strconv.Atoi(os.Getenv("FTRMA_SCALE_MAX")); err == nil && v >= 4 {
		top = v
	}
	var out []int
	for n := 4; n <= top; n *= 2 {
		out = append(out, n)
		if n == 512 && top >= 1000 {
			out = append(out, 1000)
		}
		if n == 2048 && top >= 3000 {
			out = append(out, 3000)
		}
	}
	return out
}

// Seeds is how many seeds to run at size n: small below 1,000 ranks, large
// from there on, or FTRMA_SCALE_SEEDS.
func Seeds(n, small, large int) int {
	if v, err := strconv.Atoi(os.Getenv("FTRMA_SCALE_SEEDS")); err == nil && v > 0 {
		return v
	}
	if n >= 1000 {
		return large
	}
	return small
}

// Bound bounds one metric of a curve of results R by (A·ceil(log2 n) + B) / D
// (D 0 counts as 1).
type Bound[R any] struct {
	Metric  string
	A, B, D int
	Get     func(R) int
}

// Limit is the bound at size n.
func (b Bound[R]) Limit(n int) int { return (b.A*Log2(n) + b.B) / max(1, b.D) }

// Check returns an error naming every point of curve above one of bounds;
// size gives a point's number of ranks.
func Check[R any](curve []R, size func(R) int, bounds []Bound[R]) error {
	var bad []string
	for _, r := range curve {
		n := size(r)
		for _, b := range bounds {
			if v, lim := b.Get(r), b.Limit(n); v > lim {
				bad = append(bad, fmt.Sprintf("n=%d: %s %d > (%d·%d+%d)/%d = %d", n, b.Metric, v, b.A, Log2(n), b.B, max(1, b.D), lim))
			}
		}
	}
	if bad != nil {
		return fmt.Errorf("grows faster than the bound: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Queue is a simulation's event queue: items come out in order of their
// time, and those of equal time in the order they were pushed, so a seeded
// run is repeatable.
type Queue[T any] struct {
	h   events[T]
	seq int
}

type event[T any] struct {
	at, seq int
	item    T
}

type events[T any] []event[T]

func (h events[T]) Len() int { return len(h) }
func (h events[T]) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h events[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events[T]) Push(x any)   { *h = append(*h, x.(event[T])) }
func (h *events[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Push queues item for time at.
func (q *Queue[T]) Push(at int, item T) {
	heap.Push(&q.h, event[T]{at: at, seq: q.seq, item: item})
	q.seq++
}

// Pop takes the earliest item out. The queue must not be empty.
func (q *Queue[T]) Pop() T { return heap.Pop(&q.h).(event[T]).item }

// Len is the number of items queued.
func (q *Queue[T]) Len() int { return len(q.h) }

// Pushed is the number of items pushed so far.
func (q *Queue[T]) Pushed() int { return q.seq }
