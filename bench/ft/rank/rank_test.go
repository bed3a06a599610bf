package main

import (
	"math/bits"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// TestAgreeFlags checks that the expected decision is the AND of the flags
// the ranks contribute, and that it differs from call to call.
func TestAgreeFlags(t *testing.T) {
	for _, n := range []int{1, 4, 32, 64, 70} {
		for i := range 130 {
			and := ^uint64(0)
			for r := range n {
				f := agreeFlag(ftrma.Rank(r), i)
				if bits.OnesCount64(f) != 63 {
					t.Fatalf("agreeFlag(%d, %d) = %#x clears more than one bit", r, i, f)
				}
				and &= f
			}
			if want := agreeWant(n, i); and != want {
				t.Fatalf("n=%d i=%d: AND of flags %#x, agreeWant %#x", n, i, and, want)
			}
			if n < 64 && agreeWant(n, i) == agreeWant(n, i+1) {
				t.Fatalf("n=%d: calls %d and %d expect the same value", n, i, i+1)
			}
		}
	}
}

func TestMedianMillis(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		in   []time.Duration
		want float64
	}{
		{[]time.Duration{3 * ms, 1 * ms, 2 * ms}, 2},
		{[]time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}, 2.5},
		{[]time.Duration{250 * time.Microsecond}, 0.25},
	}
	for _, tt := range tests {
		if got := medianMillis(tt.in); got != tt.want {
			t.Errorf("medianMillis(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"-mode", "coll", "-iters", "7", "-rounds", "0"})
	if err != nil || o.iters != 7 || o.rounds != 0 || o.victim != -1 || o.poll != 50*time.Microsecond {
		t.Errorf("parseOptions = %+v, %v", o, err)
	}
	o, err = parseOptions([]string{"-mode", "replace", "-first", "shrink"})
	if err != nil || o.first != "shrink" {
		t.Errorf("parseOptions replace = %+v, %v", o, err)
	}
	for _, bad := range [][]string{{}, {"-mode", "x"}, {"-mode", "coll", "-iters", "0"}, {"-mode", "detect", "-wait", "0s"}, {"-mode", "detect", "x"}, {"-mode", "replace", "-first", "both"}} {
		if _, err := parseOptions(bad); err == nil {
			t.Errorf("parseOptions(%q) accepted", bad)
		}
	}
}
