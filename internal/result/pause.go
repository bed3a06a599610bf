package result

import (
	"slices"
	"time"
)

// Span is one timed call: when it began and when it returned.
type Span struct{ Start, End time.Time }

// SplitAround sorts the durations of spans, in microseconds, by an
// interval [from, to) — a snapshot, say: before holds those of the calls
// that returned before it began, during those of the calls under way while
// it ran. Calls that began after it ended are in neither.
func SplitAround(spans []Span, from, to time.Time) (before, during []float64) {
	for _, s := range spans {
		d := float64(s.End.Sub(s.Start).Nanoseconds()) / 1e3
		switch {
		case s.End.Before(from):
			before = append(before, d)
		case s.Start.Before(to):
			during = append(during, d)
		}
	}
	return before, during
}

// PauseResults are the records of calls around an interval (SplitAround's
// lists): prefix+"_p99_base" of those before, prefix+"_p99" and
// prefix+"_max" of those during, in microseconds; the last two only when
// a call was under way.
func PauseResults(prefix string, before, during []float64) []Result {
	rs := []Result{{Bench: prefix + "_p99_base", Value: Percentile(before, 99), Unit: "us"}}
	if len(during) > 0 {
		rs = append(rs, Result{Bench: prefix + "_p99", Value: Percentile(during, 99), Unit: "us"},
			Result{Bench: prefix + "_max", Value: slices.Max(during), Unit: "us"})
	}
	return rs
}
