package result

import (
	"slices"
	"testing"
	"time"
)

// SplitAround puts a call that returned before the interval in before, one
// under way at any point of it in during (begun before it, or inside it),
// and one begun after it in neither; PauseResults gives p99 and max of
// during, and leaves them out when nothing was under way.
func TestSplitAround(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	spans := []Span{
		{at(0), at(1)},   // before: 1 ms
		{at(2), at(4)},   // before: 2 ms
		{at(9), at(15)},  // under way when it began: 6 ms
		{at(12), at(13)}, // inside: 1 ms
		{at(19), at(40)}, // under way when it ended: 21 ms
		{at(20), at(21)}, // after: neither
		{at(30), at(31)}, // after
	}
	before, during := SplitAround(spans, at(10), at(20))
	if !slices.Equal(before, []float64{1000, 2000}) || !slices.Equal(during, []float64{6000, 1000, 21000}) {
		t.Fatalf("before %v, during %v", before, during)
	}
	rs := PauseResults("x", before, during)
	if len(rs) != 3 || rs[0].Bench != "x_p99_base" || rs[2].Bench != "x_max" || rs[2].Value != 21000 {
		t.Errorf("results %+v", rs)
	}
	if rs := PauseResults("x", before, nil); len(rs) != 1 {
		t.Errorf("nothing under way: %+v, want the base alone", rs)
	}
}
