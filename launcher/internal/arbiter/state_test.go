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

// TestApplySpareClaims: the spares' commands (WIRING.md, spares without
// ftrun). ftrun (host 0) claims only while its host is in the job and the
// agents only once it is not; a number is claimed once; a claimed spare
// joins with its address, or is lost if it ends first (its exit, a
// verdict, its host's); the book holds the first ranks' addresses and the
// joined spares'; a starting spare keeps the job from finishing.
func TestApplySpareClaims(t *testing.T) {
	s := newState(3, []int{0, 1, 2}) // ranks 0..2; spares from 3
	var ev []Event
	for i, c := range []Command{
		{Kind: CmdAddresses, Rank: 0, Addrs: []string{"a0", "a1", "a2"}},
		{Kind: CmdSpareClaimed, Rank: 3, Host: 1, By: 1, Payload: "p"},  // an agent while ftrun's host is live: refused
		{Kind: CmdSpareClaimed, Rank: 3, Host: 1, By: 0, Payload: "p3"}, // ftrun's
		{Kind: CmdSpareClaimed, Rank: 3, Host: 2, By: 0},                // taken
		{Kind: CmdSpareJoined, Rank: 3, Addr: "a3"},
		{Kind: CmdSpareJoined, Rank: 3, Addr: "again"}, // joined already
		{Kind: CmdSpareClaimed, Rank: 4, Host: 2, By: 0, Payload: "p4"},
		{Kind: CmdHostFailed, Host: 0, Reason: ReasonHostSilent},
		{Kind: CmdSpareClaimed, Rank: 5, Host: 1, By: 0},                // ftrun's host is out: refused
		{Kind: CmdSpareClaimed, Rank: 5, Host: 0, By: 1},                // onto a failed host: refused
		{Kind: CmdSpareClaimed, Rank: 5, Host: 1, By: 2, Payload: "p5"}, // an agent's
		{Kind: CmdSpareJoined, Rank: 4, Addr: "a4"},                     // ftrun's claim, lost with ftrun's host
		{Kind: CmdRankExited, Rank: 5, Code: -9},                        // before its join: lost
		{Kind: CmdSpareJoined, Rank: 5, Addr: "a5"},                     // lost already
		{Kind: CmdSpareClaimed, Rank: 6, Host: 2, By: 1},
		{Kind: CmdHostFailed, Host: 2, Reason: ReasonHostSilent}, // rank 2 and 4 fail, spare 6 is lost
	} {
		ev = s.apply(c, uint64(10+i), ev)
	}
	want := []string{
		`@12 spare 3 claimed on host 1 by host 0`,
		`@14 spare 3 joined on host 1 at "a3"`,
		`@16 spare 4 claimed on host 2 by host 0`,
		`@17 host 0 failed (host silent)`,
		`@17 rank 0 failed (host failed)`,
		`@17 spare 4 lost on host 2`,
		`@20 spare 5 claimed on host 1 by host 2`,
		`@22 spare 5 lost on host 1`,
		`@24 spare 6 claimed on host 2 by host 1`,
		`@25 host 2 failed (host silent)`,
		`@25 rank 2 failed (host failed)`,
		`@25 spare 6 lost on host 2`,
	}
	if len(ev) != len(want) {
		t.Fatalf("events:\n%v\nwant:\n%v", ev, want)
	}
	for i := range want {
		if ev[i].String() != want[i] {
			t.Errorf("event %d: %v, want %s", i, ev[i], want[i])
		}
	}
	if ev[0].Payload != "p3" || ev[1].Payload != "p3" || ev[6].Payload != "p5" || ev[6].By != 2 {
		t.Errorf("claim and join events lost the payload or claimer: %+v %+v %+v", ev[0], ev[1], ev[6])
	}
	for r, a := range []string{"a0", "a1", "a2", "a3", "", "", ""} {
		if got := s.Rank(ftrma.Rank(r)).Addr; got != a {
			t.Errorf("rank %d's address %q, want %q", r, got, a)
		}
	}
	if got := s.Rank(5); got.Status != RankLost || got.Code != -9 {
		t.Errorf("spare 5 ended before its join: %+v", got)
	}
	// Rank 1 and spare 3 run on host 1: a spare claimed there keeps the
	// job going after both end.
	ev = s.apply(Command{Kind: CmdSpareClaimed, Rank: 7, Host: 1, By: 1}, 30, nil)
	for _, r := range []ftrma.Rank{1, 3} {
		ev = s.apply(Command{Kind: CmdRankExited, Rank: r}, 31, ev)
	}
	if s.Finished() {
		t.Fatalf("finished with spare 7 starting: %v", ev)
	}
	if ev = s.apply(Command{Kind: CmdRankFailed, Rank: 7, Reason: ReasonUnresponsive}, 32, nil); !s.Finished() || len(ev) != 2 || ev[0].Kind != EventSpareLost {
		t.Errorf("the last spare lost: events %v, finished %v", ev, s.Finished())
	}
}
