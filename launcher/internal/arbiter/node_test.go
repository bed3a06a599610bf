package arbiter

import (
	"testing"
	"time"
)

// TestConfigValidate: the defaults are valid, and the margin's safety
// condition is enforced.
func TestConfigValidate(t *testing.T) {
	ok := Config{ID: 1, Hosts: 3}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"id 0":               {ID: 0, Hosts: 3},
		"id past hosts":      {ID: 4, Hosts: 3},
		"no node 1":          {ID: 1, Hosts: 3, Voters: []uint64{2, 3}},
		"six voters":         {ID: 1, Hosts: 6, Voters: []uint64{1, 2, 3, 4, 5, 6}},
		"duplicate voter":    {ID: 1, Hosts: 3, Voters: []uint64{1, 2, 2}},
		"rank on no host":    {ID: 1, Hosts: 3, RankHost: []int{0, 3}},
		"heartbeat too slow": {ID: 1, Hosts: 3, ElectionTicks: 4, HeartbeatTicks: 4},
		"renewal too rare":   {ID: 1, Hosts: 3, RenewTicks: 11},
		"margin too small":   {ID: 1, Hosts: 3, Margin: time.Millisecond, MaxDrift: 0.1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, c)
		}
	}
	for hosts, want := range map[int]int{1: 1, 2: 1, 3: 3, 4: 3, 5: 5, 64: 5} {
		if got := len(DefaultVoters(hosts)); got != want {
			t.Errorf("DefaultVoters(%d) has %d voters, want %d", hosts, got, want)
		}
	}
}

// TestFollowerDoesNotGrant: an ask that reaches a node that does not lead
// gets no grant.
func TestFollowerDoesNotGrant(t *testing.T) {
	now := time.Unix(1000, 0)
	n, err := New(Config{ID: 2, Hosts: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	n.Advance()
	if err := n.Step(Message{From: 3, To: 2, Kind: KindLeaseAsk, Seq: 1}, now.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for _, m := range n.Ready().Messages {
		if m.Kind == KindLeaseGrant {
			t.Errorf("a follower granted: %v", m)
		}
	}
	if n.Acting(now) {
		t.Errorf("a node acts before any grant")
	}
}

// TestLeaseNeedsQuorumContact: a leader cut off from the other voters (but
// still reached by a learner's asks) grants only until ET after the last
// stamp a quorum echoed, which is before the cut; the learner stops acting
// a term after. raft's CheckQuorum is off here (it would make the leader
// step down within 2·ET and hide the rule): with the node's check removed
// as well (deviations.noQuorumCheck) the leader grants on for good.
func TestLeaseNeedsQuorumContact(t *testing.T) {
	for _, broken := range []bool{false, true} {
		o := scenarioOpts(4, 3) // voters 1, 2, 3; node 4 a learner
		o.dev.noQuorumCheck, o.dev.noCheckQuorum = broken, true
		cfg := o.jobConfig().WithDefaults()
		et := cfg.ElectionTimeout()
		var lastGrant time.Duration
		var sc *scenario
		sc = runScenario(t, o, faultAt, faultAt+2*time.Second, func(s *sim) {
			s.onSend = func(from int, m Message) {
				if from == 0 && m.Kind == KindLeaseGrant && m.To == 4 {
					lastGrant = s.now
				}
			}
			split(s, faultAt, []int{0, 3}, []int{1, 2})
		})
		late := lastGrant - faultAt
		limit := time.Duration(float64(et) * 1.02)
		switch {
		case !broken && late >= limit:
			t.Errorf("the cut-off leader granted %v after the cut, ET is %v", late, et)
		case !broken:
			t.Logf("the cut-off leader's last grant came %v after the cut (ET %v)", late.Round(time.Millisecond), et)
		case late < limit:
			t.Errorf("without the quorum check the cut-off leader's last grant came %v after the cut: the test cannot tell", late)
		}
		if !broken && sc.acting(3) {
			t.Errorf("the learner with the cut-off leader still acts")
		}
	}
}

// TestNewLeaderWaits: the leader (node 1) dies, and at the same moment a
// learner is cut off from everyone. The new leader declares the learner no
// sooner than ET + T + M after it took office, by its clock: grants of its
// predecessor may run that long. Without the wait (deviations.
// noTakeoverWait) it declares it ET sooner.
func TestNewLeaderWaits(t *testing.T) {
	for _, broken := range []bool{false, true} {
		o := scenarioOpts(5, 3)
		o.dev.noTakeoverWait = broken
		cfg := o.jobConfig().WithDefaults()
		wait := cfg.ElectionTimeout() + cfg.LeaseTerm + cfg.Margin
		sc := runScenario(t, o, faultAt, faultAt+2*VerdictBound(cfg), func(s *sim) {
			s.later(faultAt, "", func() {
				s.crash(0)
				s.forever[4], s.troubled[4] = true, true
				s.cutLinks([]int{4}, []int{0, 1, 2, 3}, 1, false)
				s.cutLinks([]int{0, 1, 2, 3}, []int{4}, 1, false)
			})
		})
		took := sc.takeover(faultAt) + faultAt
		decl, ok := sc.declAt[4]
		if !ok {
			t.Fatalf("broken=%v: the cut-off learner was never declared", broken)
		}
		after := decl - took
		// Clocks run within 1% of true time.
		switch min := time.Duration(float64(wait) / 1.01); {
		case !broken && after < min:
			t.Errorf("the new leader declared the learner %v after taking office, before ET+T+M = %v", after, wait)
		case !broken:
			t.Logf("the new leader took office %v after the crash and declared the learner %v later (ET+T+M = %v)",
				(took - faultAt).Round(time.Millisecond), after.Round(time.Millisecond), wait)
		case after >= min:
			t.Errorf("without the wait the learner was declared %v after the take-over: the test cannot tell", after)
		}
	}
}
