package tcp

import "testing"

// A spin gauge lets spins start while they pay, stops them after a run of
// spins that did not (two points lost each, one won), lets every
// probeEvery-th through meanwhile, and lets them start again after one
// that paid.
func TestSpinGauge(t *testing.T) {
	g := newGauge()
	if !g.allow() {
		t.Fatal("a new gauge does not allow a spin")
	}
	for range gaugeMax / 2 {
		g.paid(false)
	}
	allowed := 0
	for range 4 * probeEvery {
		if g.allow() {
			allowed++
		}
	}
	if allowed != 4 {
		t.Fatalf("after %d unpaid spins, %d of %d spins allowed, want 4 (one probe in %d)", gaugeMax/2, allowed, 4*probeEvery, probeEvery)
	}
	g.paid(false)
	if s := g.score.Load(); s != 0 {
		t.Fatalf("score %d below zero's floor", s)
	}
	g.paid(true)
	if !g.allow() {
		t.Fatal("a spin that paid does not allow the next")
	}
	for range 3 * gaugeMax {
		g.paid(true)
	}
	if s := g.score.Load(); s != gaugeMax {
		t.Fatalf("score %d, want the cap %d", s, gaugeMax)
	}
}
