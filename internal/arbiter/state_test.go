package arbiter

import (
	"testing"

	"github.com/ftrma/ftrma"
)

// TestApplyIdempotent: applying any command a second time, or any verdict
// on a rank or host that already ended, changes nothing and reports
// nothing; a rank whose host failed is failed.
func TestApplyIdempotent(t *testing.T) {
	cmds := []Command{
		{Kind: CmdRankExited, Rank: 0, Code: 2},
		{Kind: CmdRankFailed, Rank: 1, Reason: ReasonUnresponsive},
		{Kind: CmdHostFailed, Host: 1, Reason: ReasonHostSilent},
		{Kind: CmdSpareAdmitted, Rank: 6, Host: 0},
		{Kind: CmdSpareAdmitted, Rank: 7, Host: 1},                 // on a failed host: refused
		{Kind: CmdRankFailed, Rank: 0, Reason: ReasonUnresponsive}, // exited already
		{Kind: CmdRankExited, Rank: 2, Code: 0},                    // failed with its host already
		{Kind: CmdHostFailed, Host: 9, Reason: ReasonHostSilent},   // no such host
		{Kind: CmdRankExited, Rank: 99, Code: 0},                   // no such rank
	}
	s := newState(3, []int{0, 0, 1, 1, 2, 2})
	var ev []Event
	for i, c := range cmds {
		ev = s.apply(c, uint64(10+i), ev)
	}
	want := []string{
		"@10 rank 0 exited 2",
		"@11 rank 1 failed (unresponsive)",
		"@12 host 1 failed (host silent)",
		"@12 rank 2 failed (host failed)",
		"@12 rank 3 failed (host failed)",
		"@13 spare 6 on host 0",
	}
	if len(ev) != len(want) {
		t.Fatalf("events %v, want %v", ev, want)
	}
	for i := range want {
		if ev[i].String() != want[i] {
			t.Errorf("event %d: %v, want %s", i, ev[i], want[i])
		}
	}
	snap := s.Clone()
	for i, c := range cmds {
		if again := s.apply(c, uint64(20+i), nil); len(again) != 0 || !s.Equal(snap) {
			t.Errorf("%v applied again: events %v, state %v (was %v)", c, again, s, snap)
		}
	}
	if got := s.Rank(2); got.Status != RankFailed || got.Reason != ReasonHostFailed {
		t.Errorf("rank 2 on failed host 1: %+v", got)
	}
	if s.Rank(7).Status != RankAbsent {
		t.Errorf("spare 7 admitted on a failed host")
	}
	// The rest end: the job finishes, once.
	var fin []Event
	for _, r := range []ftrma.Rank{4, 5, 6} {
		fin = s.apply(Command{Kind: CmdRankExited, Rank: r}, 40, fin)
	}
	if !s.Finished() || fin[len(fin)-1].Kind != EventFinished {
		t.Errorf("all ranks ended, events %v, finished %v", fin, s.Finished())
	}
	if ev := s.apply(Command{Kind: CmdSpareAdmitted, Rank: 8, Host: 0}, 41, nil); len(ev) != 0 {
		t.Errorf("a spare admitted into a finished job: %v", ev)
	}
}
