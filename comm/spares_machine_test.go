package comm

import (
	"slices"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
)

// The machine sends nothing to an absent rank, however long it runs and
// whatever it broadcasts, and suspects none; once admitted, the spare is
// sent to at once (rank 3's new observer).
func TestMachineAbsentRanks(t *testing.T) {
	t0 := time.Unix(0, 0)
	m, err := newMachine(failure.Config{}, 3, 8, false, t0, 4, 5, 6, 7)
	if err != nil {
		t.Fatal(err)
	}
	sentTo := func() []ftrma.Rank {
		var out []ftrma.Rank
		rd := m.ready()
		m.advance()
		if len(rd.Failed) > 0 || len(rd.Suspected) > 0 {
			t.Fatalf("failures %v, suspicions %v", rd.Failed, rd.Suspected)
		}
		for _, o := range rd.Send {
			out = append(out, o.to)
		}
		return out
	}
	sentTo()
	m.originate(t0, "revoke/9", nil)
	for now := t0; now.Before(t0.Add(time.Second)); now = now.Add(10 * time.Millisecond) {
		m.step(now, 2, []byte{kindHeartbeat}) // rank 2, which rank 3 watches, is alive
		m.tick(now)
		for _, r := range sentTo() {
			if r >= 4 {
				t.Fatalf("at %v: sent to absent rank %d", now.Sub(t0), r)
			}
		}
	}
	now := t0.Add(time.Second)
	if m.admit(now, 3) || m.admit(now, 0) || m.admit(now, 8) {
		t.Fatal("admitted self, a present rank or a rank outside the job")
	}
	if !m.admit(now, 4) || m.admit(now, 4) {
		t.Fatal("admit(4) twice: want true, then false")
	}
	if got := sentTo(); !slices.Contains(got, 4) {
		t.Fatalf("after admitting 4, rank 3 sent to %v: want a heartbeat to its new observer 4", got)
	}
	// A spare learned failed before it was admitted is never admitted.
	m.fail(now, 5, "test")
	if m.admit(now, 5) {
		t.Fatal("admitted a failed spare")
	}
}
