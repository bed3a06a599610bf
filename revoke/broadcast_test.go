package revoke

import (
	"slices"
	"testing"

	"github.com/ftrma/ftrma/internal/overlay"
)

func targets(rd Ready) []int {
	var out []int
	for _, o := range rd.Send {
		out = append(out, o.To)
	}
	slices.Sort(out)
	return out
}

func without(list []int, drop ...int) []int {
	return slices.DeleteFunc(slices.Clone(list), func(r int) bool { return slices.Contains(drop, r) })
}

// TestForwardOnce walks rank 5 of 16 through the rules of a flood: the
// first flood copy of an ID is forwarded to every live neighbour but its
// sender and delivered; later copies, from anyone, and re-originations are
// dropped. An ID it originates goes down its tree (TestTree has the rest).
func TestForwardOnce(t *testing.T) {
	const self, n = 5, 16
	nb := overlay.Neighbors(self, n) // [1 3 4 6 7 9 13]
	b := New(self, n)
	m := Message{ID: "revoke/ctx1", Payload: []byte("p")}

	b.Step(4, m)
	rd := b.Ready()
	if got, want := targets(rd), without(nb, 4); !slices.Equal(got, want) {
		t.Fatalf("forwarded to %v, want %v", got, want)
	}
	if len(rd.Deliver) != 1 || rd.Deliver[0].ID != m.ID || string(rd.Deliver[0].Payload) != "p" {
		t.Fatalf("delivered %v", rd.Deliver)
	}
	for _, o := range rd.Send {
		if o.Msg.ID != m.ID || string(o.Msg.Payload) != "p" {
			t.Fatalf("sent %v", o.Msg)
		}
	}
	b.Advance()
	if b.HasReady() || !b.Seen(m.ID) || b.Seen("revoke/ctx2") {
		t.Fatal("state after Advance")
	}

	b.Step(6, m)
	b.Step(-1, m)
	b.Originate(m)
	if b.HasReady() {
		t.Fatalf("duplicate produced %+v", b.Ready())
	}

	// The originator, knowing of no failure, sends down its tree: to
	// 5+1, 5+2, 5+4, 5+8.
	b.Originate(Message{ID: "fail/2"})
	if got := targets(b.Ready()); !slices.Equal(got, []int{6, 7, 9, 13}) {
		t.Fatalf("originated to %v, want [6 7 9 13]", got)
	}
	b.Advance()

	// A message from a non-neighbour (or an unknown sender) goes to every
	// neighbour too.
	b.Step(11, Message{ID: "fail/3"})
	if got := targets(b.Ready()); !slices.Equal(got, nb) {
		t.Fatalf("forwarded to %v, want %v", got, nb)
	}
}

// TestSkipsDeadNeighbours: a rank known to have failed gets nothing, not
// even the sends still waiting in an unacknowledged Ready; messages from it
// are still accepted.
func TestSkipsDeadNeighbours(t *testing.T) {
	const self, n = 0, 64
	nb := overlay.Neighbors(self, n)
	b := New(self, n)
	b.Failed(1)
	b.Failed(63)
	b.Failed(1)    // again: no-op
	b.Failed(-1)   // outside the job: ignored
	b.Failed(64)   // idem
	b.Failed(self) // self: ignored
	if b.HasReady() {
		t.Fatal("Failed produced output")
	}
	b.Step(1, Message{ID: "a"}) // from a dead rank: still a valid copy
	rd := b.Ready()
	if got, want := targets(rd), without(nb, 1, 63); !slices.Equal(got, want) || len(rd.Deliver) != 1 {
		t.Fatalf("forwarded to %v, delivered %d; want %v, 1", got, len(rd.Deliver), want)
	}
	b.Failed(2)
	b.Failed(4)
	if got, want := targets(b.Ready()), without(nb, 1, 63, 2, 4); !slices.Equal(got, want) {
		t.Fatalf("after Failed, pending sends go to %v, want %v", got, want)
	}
	b.Advance()
	b.Originate(Message{ID: "b"})
	if got, want := targets(b.Ready()), without(nb, 1, 63, 2, 4); !slices.Equal(got, want) {
		t.Fatalf("originated to %v, want %v", got, want)
	}
}

// TestReadyAccumulates: output not yet acknowledged grows in order.
func TestReadyAccumulates(t *testing.T) {
	b := New(0, 4)
	b.Originate(Message{ID: "a"}) // down the tree: 1, 2
	b.Step(1, Message{ID: "b"})   // a flood copy: 2, 3
	rd := b.Ready()
	if len(rd.Deliver) != 2 || rd.Deliver[0].ID != "a" || rd.Deliver[1].ID != "b" {
		t.Fatalf("delivered %v", rd.Deliver)
	}
	if len(rd.Send) != 2+2 {
		t.Fatalf("%d sends, want 4", len(rd.Send))
	}
	b.Advance()
	if b.HasReady() || len(b.Ready().Send) != 0 || len(b.Ready().Deliver) != 0 {
		t.Fatal("Advance left output")
	}
}

func TestSingleRankJob(t *testing.T) {
	b := New(0, 1)
	b.Originate(Message{ID: "alone"})
	rd := b.Ready()
	if len(rd.Send) != 0 || len(rd.Deliver) != 1 {
		t.Fatalf("Ready %+v, want one delivery and no sends", rd)
	}
}

func TestNewPanicsOnBadShape(t *testing.T) {
	for _, c := range [][2]int{{0, 0}, {-1, 3}, {3, 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d, %d) did not panic", c[0], c[1])
				}
			}()
			New(c[0], c[1])
		}()
	}
}

// Forget drops an ID: Seen turns false and a later copy is forwarded and
// delivered again, while other IDs stay remembered.
func TestForget(t *testing.T) {
	b := New(0, 8)
	m := Message{ID: "revoke/7"}
	b.Step(1, m)
	b.Originate(Message{ID: "revoke/8"})
	b.Advance()
	b.Forget(m.ID)
	if b.Seen(m.ID) || !b.Seen("revoke/8") {
		t.Fatalf("after Forget: Seen(%q) = %v, Seen(revoke/8) = %v", m.ID, b.Seen(m.ID), b.Seen("revoke/8"))
	}
	b.Step(1, m)
	if rd := b.Ready(); len(rd.Deliver) != 1 || len(rd.Send) == 0 {
		t.Fatalf("a copy after Forget: delivered %v, sent %d", rd.Deliver, len(rd.Send))
	}
}
