// Package failure is ftrma's heartbeat failure detector, after Bosilca et
// al., "Failure detection and propagation in HPC systems" (SC16). It decides
// which ranks of a job have failed, and is a pure state machine: no
// goroutines, no clock reads, no I/O. Time enters only as the now argument
// of its methods, so tests drive it by hand.
//
// # Algorithm
//
// The ranks form a ring. Each live rank sends a heartbeat every Period to
// its observer, its nearest successor not known to have failed (self+1,
// self+2, ... mod n), and watches its nearest such predecessor. An observer
// that hears nothing from the rank it watches for Timeout declares it failed
// (the rank is "suspected"; the decision is final) and starts watching the
// next live predecessor, granting it a fresh Timeout since that rank may not
// have been sending to us yet. Knowledge of failures is a grow-only set fed
// by the detector's own suspicions and by Failed, which carries notices
// from other ranks and the launcher. When the observer fails, the next live
// successor becomes the observer and gets a heartbeat at once, so the ring
// heals as soon as the failure notice arrives. A rank never suspects itself;
// a job of one rank does nothing.
//
// A job may hold ranks in reserve that have not started (spares, given to
// New as absent). The ring skips an absent rank as it skips a failed one,
// but an absent rank is not failed: it is never watched, probed, sent to or
// suspected, and probes from it are ignored. Admit makes it present when it
// starts, and the ring re-forms around it: its successor observes it with a
// full Timeout, and its predecessor sends to it at once. A failure learned
// of an absent rank makes it failed for good; a failed rank is never
// admitted.
//
// Ranks often fail together: all the ranks of a host, or the far side of a
// cut link, which are neighbours in the ring. So a detector that suspects
// the rank r it watches also looks past it at once: it probes the next
// predecessors r-1, r-2, ... not known to have failed, up to
// Config.ProbeWindow of them and never itself, all in the same Ready. A live
// rank answers a probe with a heartbeat (a one-shot one: the prober does not
// become its observer). A probed rank that answers is alive and never
// suspected, and the ranks beyond it are its own to watch, so they are no
// longer probed; each probed rank nearer than that which has not answered
// Timeout after its probe is suspected, all in one Ready. When every probed
// rank stays silent, the farthest one's suspicion probes the next window. A
// heartbeat from a probed rank counts as its answer whatever prompted it.
//
// With Config.AwaitConfirmation a suspicion is a report, not a verdict: the
// suspect and the probed ranks beyond it stay watched, without closing the
// ring, until Failed confirms them (the ring then closes over them; a
// probed rank that has not answered keeps its probe's deadline, one that
// answered gets a fresh Timeout) or a heartbeat refutes them (the ranks
// beyond a refuted one are no longer watched); those that stay silent are
// reported again every 4 Timeouts.
//
// In steady state each rank watches one other, so the detector costs one
// heartbeat per Period per rank however large the job; probes cost at most
// ProbeWindow probes and as many answers per suspicion. It finds a silent
// rank within Timeout plus one tick interval of the last heartbeat heard,
// and a block of k consecutive failed ranks r, r-1, ..., r-k+1 within two
// such intervals (one for r, one for the probes beyond it) as long as
// k <= ProbeWindow+1; each further ProbeWindow ranks add one Timeout. With
// probing turned off they are found one after another, one Timeout each.
//
// # Settings
//
// This package is the one home of the detector's settings. The presets are
// DefaultLANConfig (20 ms heartbeats, 60 ms timeout, for ranks with a CPU
// each) and DefaultLocalConfig (the same, with the timeout stretched by the
// ranks per CPU of a full host). RanksPerCPU is the one rule for that
// stretch: ftrun's host layer (its leases) and a rank's start-up use it too.
// Config.WithDefaults fills a Config and Config.Validate checks it; New does
// both.
//
// # Caller's duties
//
//  1. Create the detector with New when the job starts, with the same Config
//     on every rank, and the ranks not started yet (spares) as absent.
//  2. Call Tick(now) at least every Period/2, or exactly at Deadline (asking
//     again after every call).
//  3. Pass every heartbeat received to Heartbeat(from, now).
//  4. Pass every probe received to Probe(from, now). A probe is a small
//     message of its own kind (not a heartbeat): it asks the receiver to
//     answer with a heartbeat, which the next Ready holds.
//  5. Pass every failure learned elsewhere (a failure notice broadcast by
//     another rank, the launcher's report of a dead process, with
//     AwaitConfirmation the confirmation of a report) to Failed(r, now).
//  6. After each of these calls, if HasReady: send a heartbeat to each rank
//     of Ready().Heartbeats, a probe to each rank of Ready().Probes, and
//     broadcast a failure notice for each rank of Ready().Suspected
//     (revoke/'s reliable broadcast; the notices reach the other detectors
//     through step 5; with AwaitConfirmation, report them to the confirmer
//     instead), then call Advance. Send probes and heartbeats at once: a
//     probe's answer must be back within Timeout.
//  7. Treat IsFailed and FailedRanks as the job's failure knowledge: fence the
//     failed ranks and fail operations toward them.
//  8. When a spare starts, call Admit(r, now) on every live rank, and give
//     the spare's own detector the ranks still absent and the failed ones
//     (New, then Failed for each).
//
// For the detector to be accurate, heartbeats must arrive with a delay
// jitter J such that Period + (tick interval) + J < Timeout, failure
// notices must reach the failed rank's predecessor quickly enough that its
// first heartbeat to its new observer lands within Timeout of the
// suspicion, and a probe and its answer must together take less than
// Timeout; see Config. A caller that does not deliver probes (or answers)
// makes every live rank probed after a suspicion look dead: it must set
// Config.ProbeWindow negative.
//
// # Example
//
// The canonical loop, in comm/'s owner goroutine:
//
//	cfg := failure.DefaultConfig()
//	d, err := failure.New(cfg, self, n, time.Now())
//	if err != nil {
//		return err
//	}
//	ticker := time.NewTicker(cfg.Period / 2)
//	for {
//		select {
//		case now := <-ticker.C:
//			d.Tick(now)
//		case from := <-heartbeats:
//			d.Heartbeat(from, time.Now())
//		case from := <-probes:
//			d.Probe(from, time.Now())
//		case r := <-failureNotices:
//			d.Failed(r, time.Now())
//		}
//		if d.HasReady() {
//			rd := d.Ready()
//			for _, r := range rd.Heartbeats {
//				sendHeartbeat(r)
//			}
//			for _, r := range rd.Probes {
//				sendProbe(r)
//			}
//			for _, r := range rd.Suspected {
//				broadcastFailure(r)
//			}
//			d.Advance()
//		}
//	}
package failure
