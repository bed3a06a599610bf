package scaletest

import (
	"slices"
	"strings"
	"testing"
)

type point struct{ n, v int }

// A logarithmic curve passes its bound; a linear one fails at the first
// size where it outgrows it, and the error names that point.
func TestCheck(t *testing.T) {
	bounds := []Bound[point]{{Metric: "sent", A: 2, B: 1, Get: func(p point) int { return p.v }}}
	size := func(p point) int { return p.n }
	var logc, lin []point
	for _, n := range []int{4, 16, 64, 256, 4096} {
		logc = append(logc, point{n, 2*Log2(n) + 1})
		lin = append(lin, point{n, n})
	}
	if err := Check(logc, size, bounds); err != nil {
		t.Errorf("a curve at its bound failed: %v", err)
	}
	err := Check(lin, size, bounds)
	if err == nil {
		t.Fatal("a linear curve passed a logarithmic bound")
	}
	if want := "n=16: sent 16 > (2·4+1)/1 = 9"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
	if got := (Bound[point]{A: 1, D: 2}).Limit(4096); got != 6 {
		t.Errorf("ceil(log2 4096)/2 = %d, want 6", got)
	}
}

func TestSizes(t *testing.T) {
	t.Setenv("FTRMA_SCALE_MAX", "")
	if got, want := Sizes(false), []int{4, 8, 16, 32, 64, 128, 256, 512, 1000, 1024, 2048, 3000, 4096}; !slices.Equal(got, want) {
		t.Errorf("Sizes = %v, want %v", got, want)
	}
	if got := Sizes(true); got[len(got)-1] != 1024 {
		t.Errorf("race sizes end at %d, want 1024", got[len(got)-1])
	}
	t.Setenv("FTRMA_SCALE_MAX", "64")
	if got := Sizes(false); got[len(got)-1] != 64 {
		t.Errorf("FTRMA_SCALE_MAX=64: sizes end at %d", got[len(got)-1])
	}
}

// The queue yields items by time, and those of one time in push order.
func TestQueue(t *testing.T) {
	var q Queue[string]
	q.Push(5, "c")
	q.Push(1, "a")
	q.Push(5, "d")
	q.Push(3, "b")
	var got []string
	for q.Len() > 0 {
		got = append(got, q.Pop())
	}
	if !slices.Equal(got, []string{"a", "b", "c", "d"}) || q.Pushed() != 4 {
		t.Errorf("popped %v after %d pushes, want a b c d after 4", got, q.Pushed())
	}
}
