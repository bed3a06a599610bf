package arbiter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMeasureMessages counts the messages of a quiet job (no fault) per
// lease renewal period (RenewTicks, an eighth of a term by default) and per
// term: raft's (heartbeats and their answers, appends) and the leases'
// (asks and grants). Ranks renew their own leases with their host's node,
// so the rank count changes nothing here; the host count does, linearly.
func TestMeasureMessages(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "%6s %6s %7s | %10s %10s %10s | %10s\n", "ranks", "hosts", "voters", "raft/renew", "lease/renew", "all/renew", "all/term")
	for _, ranks := range []int{64, 256} {
		for _, hosts := range []int{4, 16, 64} {
			o := scenarioOpts(hosts, len(DefaultVoters(hosts)))
			o.perHost = ranks / hosts
			cfg := o.jobConfig().WithDefaults()
			from, to := 3*time.Second, 13*time.Second
			var raftN, leaseN int
			runScenario(t, o, from, to, func(s *sim) {
				s.onSend = func(_ int, m Message) {
					if s.now < from {
						return
					}
					if m.Kind == KindRaft {
						raftN++
					} else {
						leaseN++
					}
				}
			})
			renew := time.Duration(cfg.RenewTicks) * cfg.Tick
			periods := float64(to-from) / float64(renew)
			terms := float64(to-from) / float64(cfg.LeaseTerm)
			fmt.Fprintf(&b, "%6d %6d %7d | %10.1f %10.1f %10.1f | %10.1f\n", ranks, hosts, len(DefaultVoters(hosts)),
				float64(raftN)/periods, float64(leaseN)/periods, float64(raftN+leaseN)/periods, float64(raftN+leaseN)/terms)
			if leaseN == 0 || raftN == 0 {
				t.Errorf("%d hosts: %d raft and %d lease messages: nothing measured", hosts, raftN, leaseN)
			}
			// Each non-leader host asks once a renewal period and is granted.
			if want := 2 * float64(hosts-1); float64(leaseN)/periods > 1.2*want || float64(leaseN)/periods < 0.8*want {
				t.Errorf("%d hosts: %.1f lease messages per renewal period, want about %.0f", hosts, float64(leaseN)/periods, want)
			}
		}
	}
	t.Logf("messages per renewal period (%v) and per term, quiet job, default timing:\n%s",
		time.Duration(Config{Tick: DefaultTick}.WithDefaults().RenewTicks)*DefaultTick, b.String())
}

// TestMeasureElection measures the take-over when the leader (node 1)
// dies, in ticks, over seeds, for 3 and 5 voters: from the crash until a
// new leader takes office. raft draws each follower's timeout in [ET, 2·ET)
// ticks; TakeoverBound allows one failed attempt.
func TestMeasureElection(t *testing.T) {
	seeds := 300
	if raceEnabled || testing.Short() {
		seeds = 60
	}
	for _, voters := range []int{3, 5} {
		var ticks []float64
		retried := 0
		cfg := scenarioOpts(voters+2, voters).jobConfig().WithDefaults()
		for seed := int64(1); seed <= int64(seeds); seed++ {
			o := scenarioOpts(voters+2, voters)
			o.seed = seed
			sc := runScenario(t, o, faultAt, faultAt+2*VerdictBound(cfg), func(s *sim) {
				s.later(faultAt, "", func() { s.crash(0) })
			})
			took := sc.takeover(faultAt)
			if took < 0 || took > TakeoverBound(cfg) {
				t.Errorf("seed %d: take-over %v, bound %v", seed, took, TakeoverBound(cfg))
			}
			if took > cfg.MaxDelay+electionRound(cfg) {
				retried++
			}
			ticks = append(ticks, float64(took)/float64(cfg.Tick))
		}
		slices.Sort(ticks)
		t.Logf("%d voters: take-over after the leader's crash in ticks of %v over %d seeds: min %.1f median %.1f max %.1f (ElectionTicks %d); %d needed a second attempt (bound %.1f ticks)",
			voters, cfg.Tick, len(ticks), ticks[0], ticks[len(ticks)/2], ticks[len(ticks)-1], cfg.ElectionTicks, retried, float64(TakeoverBound(cfg))/float64(cfg.Tick))
	}
}
