package failure

import (
	"testing"
	"time"
)

// The chain's numbers at one and at four ranks per CPU (the lease and the
// detector timeout stretch alike), as README's "Failure semantics" states
// them, and every path of the chain ends within Verdict.
func TestChainVerdict(t *testing.T) {
	for _, c := range []struct {
		name    string
		ch      Chain
		verdict time.Duration
	}{
		{"alone", Chain{Detector: 60 * time.Millisecond}, 180 * time.Millisecond},
		{"1 rank per CPU", Chain{Detector: 60 * time.Millisecond, Lease: time.Second}, 4050 * time.Millisecond},
		{"4 ranks per CPU", Chain{Detector: 240 * time.Millisecond, Lease: 4 * time.Second}, 16200 * time.Millisecond},
		// Under the arbiter (its verdict bound when the leader's host is
		// cut, at a 1 s term: arbiter.VerdictBound) the lease does not
		// stretch, and the arbiter's path is the longest at one rank per
		// CPU.
		{"arbiter, 1 rank per CPU", Chain{Detector: 60 * time.Millisecond, Lease: time.Second, Arbiter: 4666 * time.Millisecond}, 4916 * time.Millisecond},
		{"arbiter, 4 ranks per CPU", Chain{Detector: 240 * time.Millisecond, Lease: time.Second, Arbiter: 4666 * time.Millisecond}, 4950 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := c.ch.Verdict()
			if v != c.verdict {
				t.Errorf("Verdict = %v, want %v", v, c.verdict)
			}
			if c.ch.Lease == 0 {
				return
			}
			paths := map[string]time.Duration{
				"lost host":          c.ch.HostSilent() + c.ch.LeaseWait() + c.ch.Notice(),
				"suspect, no answer": max(c.ch.Detector+c.ch.Probe(), c.ch.HostSilent()) + c.ch.LeaseWait() + c.ch.Notice(),
				"suspect, answers":   c.ch.Detector + c.ch.Persist() + c.ch.Report() + c.ch.Probe() + c.ch.Notice(),
				"arbiter's verdict":  c.ch.Arbiter + c.ch.Notice(),
			}
			for name, d := range paths {
				if d > v {
					t.Errorf("path %q takes %v, beyond Verdict %v", name, d, v)
				}
			}
			// Each layer gives up after the one below it.
			if !(c.ch.Detector < c.ch.Probe() && c.ch.Probe() < c.ch.Lease && c.ch.Lease < c.ch.LeaseWait() && c.ch.LeaseWait() < c.ch.HostSilent()) {
				t.Errorf("layers out of order: detector %v, probe %v, lease %v, lease wait %v, host %v",
					c.ch.Detector, c.ch.Probe(), c.ch.Lease, c.ch.LeaseWait(), c.ch.HostSilent())
			}
		})
	}
}
