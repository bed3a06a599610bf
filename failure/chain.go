package failure

import "time"

// Chain is the chain of failure bounds of a job: how long each layer that
// decides a peer's fate may take, each derived from the layers below it. It
// is the one place these numbers are made. The launcher sets its host layer
// by it (its agent links' silence, the wait after revoking a lease), comm
// says by it how long a verdict can take (comm.Comm.VerdictBound), and the
// store keeps retrying toward an unreachable replica for that long before it
// gives up, so that no operation gives up on a peer before the runtime could
// have decided the peer's fate.
//
// The links of the chain under ftrun, from a peer falling silent (its host
// cut off, its process hung) to every survivor knowing it failed:
//
//	detector   a ring observer suspects the silent rank        Detector
//	probe      ftrun asks the suspect; no answer in time        Probe       (Lease/2)
//	host       a host whose agent link is silent is lost        HostSilent  (2·Lease; memberlist is sooner)
//	lease      ftrun stops renewing the lost rank's lease and   LeaseWait   (1.5·Lease)
//	           tells the others only once it has surely run out
//	persist    a rank that answers ftrun but stays suspected    Persist     (3·Lease)
//	           (a partial partition) is removed all the same,
//	           at the next report of the suspicion             Report      (4·Detector)
//	notice     the verdict reaches every survivor               Notice      (Lease/4)
//
// Under ftrun --arbiter over several hosts the host path is the replicated
// arbiter's (launcher/internal/arbiter): its leader declares a silent host once the
// host's lease from it has surely run out, within its VerdictBound (1.64 s
// at a 1 s term while the leader stays, 4.67 s when the leader's own host
// is the one cut off and the others elect another first). Arbiter carries
// that bound, and the lost path is the longer of the two.
//
// Verdict is the longest of the paths through them. Without a launcher
// (Lease 0: an in-process world, or a rank alone) the ranks' detectors
// decide by themselves and Verdict is a few detector timeouts.
type Chain struct {
	// Detector is the ranks' detector timeout as it runs on their host
	// (Config.Timeout after ForHost: stretched with the ranks per CPU).
	Detector time.Duration
	// Lease is the ranks' lease term from the launcher (jobwire.LeaseTerm
	// stretched like Detector; not stretched with the crowding under the
	// arbiter); 0 when there is no launcher.
	Lease time.Duration
	// Arbiter is the replicated arbiter's verdict bound on a silent host
	// (arbiter.VerdictBound, jobwire.EnvHostVerdict); 0 without it.
	Arbiter time.Duration
}

// Probe is how long the launcher waits for a suspect's answer before it
// counts the suspect as not answering: half a lease term.
func (c Chain) Probe() time.Duration { return c.Lease / 2 }

// HostSilent is how long an agent link may stay silent before its host
// counts as lost with all its ranks: two lease terms. The job's memberlist
// group, whose probes stretch the same way, normally decides sooner (about
// 1.5 s unstretched).
func (c Chain) HostSilent() time.Duration { return 2 * c.Lease }

// LeaseWait is how long after it stopped renewing a rank's lease the
// launcher waits before it tells the others that the rank failed: one and a
// half terms, by when the rank has stopped by its own clock (it stops at the
// end of its term, a quarter term later at most when it was stalled and
// asked once more).
func (c Chain) LeaseWait() time.Duration { return c.Lease * 3 / 2 }

// Persist is how long a rank may stay suspected while it answers the
// launcher before it is removed all the same: three lease terms (two ranks
// that cannot reach each other while both reach the launcher cannot both
// stay).
func (c Chain) Persist() time.Duration { return 3 * c.Lease }

// Report is how often a rank reports a suspicion again while its suspect
// stays silent and the launcher has not decided (four detector timeouts,
// well within a lease term), so that the launcher's episode of suspicion
// goes on; a suspect that answers is removed at the first report after
// Persist.
func (c Chain) Report() time.Duration { return 4 * c.Detector }

// Notice bounds the delivery of a verdict to every survivor and the reaping
// of a killed process: a quarter term (measured: about 55 ms on four
// namespace hosts at one rank per CPU).
func (c Chain) Notice() time.Duration { return c.Lease / 4 }

// Verdict is the longest the runtime may take from a peer falling silent to
// every survivor knowing its fate: declared failed, or heard from again.
// Under a launcher it is the longest of the paths of the chain: a lost host
// (HostSilent, then LeaseWait; or the arbiter's Arbiter, if longer), and a
// suspect that answers (Detector, then
// Persist, the next Report and its Probe); plus Notice. Without one (Lease 0) a block
// of silent ranks is found in about two detector timeouts and spread by the
// reliable broadcast: three timeouts.
func (c Chain) Verdict() time.Duration {
	if c.Lease <= 0 {
		return 3 * c.Detector
	}
	lost := max(c.HostSilent()+c.LeaseWait(), c.Arbiter)
	answers := c.Detector + c.Persist() + c.Report() + c.Probe()
	return max(lost, answers) + c.Notice()
}
