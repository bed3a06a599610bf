package revoke

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ftrma/ftrma/internal/overlay"
)

// TestTreeInteriorDeathTurnsToFlood: rank 1, a child of the root with the
// largest subtree, is dead and nobody knows. Rank 0's tree copy to it is
// lost, so its subtree ({3, 5, 7, 9, 11, 13, 15}) has nothing once the
// network is quiet, while every other live rank delivered; once the live
// ranks learn of the failure, each turns the ID into a flood and every
// live rank delivers. Without the turn on Failed the subtree stays without.
func TestTreeInteriorDeathTurnsToFlood(t *testing.T) {
	const n = 16
	j := newJob(t, "interior death", n, 1)
	j.kill(1, "late")
	j.originate(0, Message{ID: "revoke/ctx9"})
	for j.step() {
	}
	var missing []int
	for r := range n {
		if _, ok := j.delivered[r]["revoke/ctx9"]; !ok && j.alive[r] {
			missing = append(missing, r)
		}
	}
	if want := []int{3, 5, 7, 9, 11, 13, 15}; !slices.Equal(missing, want) {
		t.Fatalf("before the failure is known, live ranks %v lack the message; want rank 1's subtree %v", missing, want)
	}
	if j.total["revoke/ctx9"] != 8 {
		t.Errorf("%d tree messages before the failure is known, want 8 (to 1, 2, 4, 8 and within their subtrees but 1's)", j.total["revoke/ctx9"])
	}
	j.run()
	j.checkAgreement("revoke/ctx9", nil)
	for r := range n {
		if _, ok := j.delivered[r]["revoke/ctx9"]; !ok && j.alive[r] {
			t.Errorf("live rank %d never delivered, though every live rank learned of the failure", r)
		}
	}
}

// TestSecondRootTurnsToFlood: a rank that has forwarded an ID down one
// root's tree and then gets a copy from another root sends a flood copy to
// every neighbour that does not hold it from or through it; a third copy
// changes nothing.
func TestSecondRootTurnsToFlood(t *testing.T) {
	const self, n = 5, 16
	b := New(self, n)
	// Rank 4's tree: 5 is relative 1, whose children are 1+2, 1+4, 1+8:
	// ranks 7, 9 and 13.
	b.Step(4, Message{ID: "x", tree: 4 + 1})
	if got := targets(b.Ready()); !slices.Equal(got, []int{7, 9, 13}) {
		t.Fatalf("forwarded down rank 4's tree to %v, want [7 9 13]", got)
	}
	b.Advance()
	// Rank 6's tree sends 5 a copy too (5 is relative 15 there: a leaf).
	b.Step(6, Message{ID: "x", tree: 6 + 1})
	rd := b.Ready()
	nb := overlay.Neighbors(self, n) // [1 3 4 6 7 9 13]
	if got, want := targets(rd), without(nb, 4, 6, 7, 9, 13); !slices.Equal(got, want) {
		t.Fatalf("turned to a flood towards %v, want %v (all but those that hold it)", got, want)
	}
	for _, o := range rd.Send {
		if !o.Msg.Flood() {
			t.Fatalf("a turned ID went out as a tree copy to %d", o.To)
		}
	}
	if len(rd.Deliver) != 0 {
		t.Fatalf("delivered again: %v", rd.Deliver)
	}
	b.Advance()
	b.Step(3, Message{ID: "x"})
	b.Failed(1)
	if b.HasReady() {
		t.Fatalf("an ID flooded already produced %+v", b.Ready())
	}
}

// TestForgetFloodsATreeID: an ID forgotten while it has come only down a
// tree is flooded first (this rank could not turn it on a later failure);
// a flooded one is just forgotten.
func TestForgetFloodsATreeID(t *testing.T) {
	const self, n = 5, 16
	b := New(self, n)
	b.Step(4, Message{ID: "x", tree: 4 + 1}) // sends to 7, 9, 13
	b.Advance()
	b.Forget("x")
	if got, want := targets(b.Ready()), []int{1, 3, 6}; !slices.Equal(got, want) {
		t.Fatalf("forgetting a tree ID sent flood copies to %v, want %v", got, want)
	}
	b.Advance()
	if b.Seen("x") {
		t.Fatal("a forgotten ID is still seen")
	}
	b.Step(3, Message{ID: "y"}) // a flood
	b.Advance()
	b.Forget("y")
	if b.HasReady() {
		t.Fatalf("forgetting a flooded ID produced %+v", b.Ready())
	}
}

// TestUnsettledFloods: between an Admit and the next Settle, and once a
// failure is known, a rank's own broadcasts and the tree copies it gets go
// out as floods.
func TestUnsettledFloods(t *testing.T) {
	const self, n = 0, 8
	b := New(self, n, 7) // rank 7 a spare not started
	b.Originate(Message{ID: "settled"})
	if got := targets(b.Ready()); !slices.Equal(got, []int{1, 2, 4}) {
		t.Fatalf("settled: originated to %v, want its tree [1 2 4]", got)
	}
	b.Advance()
	b.Admit(7)
	b.Originate(Message{ID: "admitting"})
	rd := b.Ready()
	if got := targets(rd); !slices.Equal(got, b.Neighbors()) || !rd.Send[0].Msg.Flood() {
		t.Fatalf("unsettled: originated to %v, want a flood to %v", got, b.Neighbors())
	}
	b.Advance()
	b.Settle()
	b.Failed(3)
	// "settled" came only down the tree: it turns, towards the live
	// neighbours its tree left out.
	if got, want := targets(b.Ready()), without(b.Neighbors(), 1, 2, 3, 4); !slices.Equal(got, want) {
		t.Fatalf("on the failure, the tree ID went to %v, want %v", got, want)
	}
	b.Advance()
	b.Step(1, Message{ID: "after a failure", tree: 1 + 1})
	if got, want := targets(b.Ready()), without(b.Neighbors(), 1, 3); !slices.Equal(got, want) {
		t.Fatalf("knowing of a failure: forwarded a tree copy to %v, want a flood to %v", got, want)
	}
}

// TestFloodSurvivesUnknownFailures: once a failure is known everywhere,
// broadcasts flood, and a flood needs no failure to be learned: ranks
// crash while forwarding and the others may never hear of it, yet whenever
// the live ranks stay connected, every live rank delivers or none does.
func TestFloodSurvivesUnknownFailures(t *testing.T) {
	for _, n := range sizes {
		if n < 4 {
			continue
		}
		for seed := range uint64(seedCount(60)) {
			rng := rand.New(rand.NewPCG(seed, uint64(n)+200))
			origin := rng.IntN(n - 1)
			j := newJob(t, fmt.Sprintf("n=%d, seed %d, origin %d", n, seed, origin), n, seed)
			j.kill(n-1, "known") // every rank floods from here on
			j.never = true
			j.crashInSend = []float64{0.05, 0.3}[rng.IntN(2)]
			j.crashBudget = overlay.Degree(n) - 2
			j.originate(origin, Message{ID: "revoke/ctx3"})
			j.run()
			if !j.checkAgreement("revoke/ctx3", nil) && j.alive[origin] {
				j.fatalf("the originator is alive and did not deliver (validity)")
			}
		}
	}
}
