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
// Each rank watches one other, so the detector costs one heartbeat per
// Period per rank however large the job, and finds a silent rank within
// Timeout plus one tick interval of the last heartbeat heard. Consecutive
// failed ranks r, r-1, ... are found one after another, one Timeout each.
//
// # Caller's duties
//
//  1. Create the detector with New when the job starts, with the same Config
//     on every rank.
//  2. Call Tick(now) at least every Period/2, or exactly at Deadline (asking
//     again after every call).
//  3. Pass every heartbeat received to Heartbeat(from, now).
//  4. Pass every failure learned elsewhere (a failure notice broadcast by
//     another rank, the launcher's report of a dead process) to
//     Failed(r, now).
//  5. After each of these calls, if HasReady: send a heartbeat to each rank
//     of Ready().Heartbeats, broadcast a failure notice for each rank of
//     Ready().Suspected (revoke/'s reliable broadcast; the notices reach the
//     other detectors through step 4), then call Advance.
//  6. Treat IsFailed and FailedRanks as the job's failure knowledge: fence the
//     failed ranks and fail operations toward them.
//
// For the detector to be accurate, heartbeats must arrive with a delay
// jitter J such that Period + (tick interval) + J < Timeout, and failure
// notices must reach the failed rank's predecessor quickly enough that its
// first heartbeat to its new observer lands within Timeout of the
// suspicion; see Config.
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
//		case r := <-failureNotices:
//			d.Failed(r, time.Now())
//		}
//		if d.HasReady() {
//			rd := d.Ready()
//			for _, r := range rd.Heartbeats {
//				sendHeartbeat(r)
//			}
//			for _, r := range rd.Suspected {
//				broadcastFailure(r)
//			}
//			d.Advance()
//		}
//	}
package failure
