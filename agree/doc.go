// Package agree is fault-tolerant agreement, as ULFM's MPI_Comm_agree, as a
// pure state machine: it never blocks, starts no goroutine, reads no clock
// and does no I/O. comm/ drives one Agreement per communicator.
//
// # What it decides
//
// Every participant contributes a uint64 (Start). For each instance, every
// surviving participant decides, all survivors decide the same Decision, and
// the Decision is
//
//   - Value: the bitwise AND of the contributions of a set of ranks that
//     includes every rank not in Failed (so every survivor);
//   - Failed: ranks that crashed; it holds every rank that did not
//     contribute (in particular every rank that crashed before calling
//     Start), never a survivor, and possibly ranks that contributed and then
//     crashed.
//
// The agreement is among survivors (the ULFM contract: "all non-failed
// processes agree"). It is not uniform: a rank that decides and crashes at
// once, before anyone else heard of that decision, may have decided
// differently from the survivors.
//
// # Failure model
//
// A crashed rank sends nothing more. Every survivor eventually learns of every
// crash through Failed (the failure detector is eventually complete). A rank
// reported failed anywhere never acts again as far as survivors are
// concerned: the runtime fences and kills falsely suspected ranks, so a
// survivor is never reported failed. Knowledge differs between ranks for a
// while. Messages between live ranks are reliable and FIFO per pair but
// arbitrarily delayed; messages still in flight from a crashed rank may or
// may not arrive. A message from a rank this machine knows failed is dropped.
//
// # The algorithm
//
// Each instance runs in rounds. A round is named (counter, coordinator) and
// rounds are ordered lexicographically. A round's members are the ranks not
// in its failed set F_R, and its tree is the binomial tree over the members
// in rank order: the coordinator, the lowest member, at index 0; index i's
// parent is i with its lowest set bit cleared. Depth is ceil(log2 members).
//
// Round zero, (0, 0), is implicit: rank 0 coordinates it over all ranks, and
// every rank joins it when it calls Start, without any message. In the
// failure-free case this is the whole protocol: every rank, once it has
// contributed and heard from its children, sends REPORT(AND of the values,
// ranks covered, failures known) to its parent; rank 0 decides and DECIDE
// flows back down the tree. That is 2(n-1) messages and a causal depth of
// 2*ceil(log2 n).
//
// The rules, per instance, at each rank:
//
//  1. Join. A rank joins a round R when it gets START(R) from its parent in
//     R and has not joined a round >= R; joining sends START(R) to its
//     children (except in round zero). A rank that has joined a higher round
//     answers a lower START with NUDGE(its round) to that round's
//     coordinator, so that the coordinator moves above it (a shortcut: the
//     NUDGEs of rule 6 would get there too).
//  2. Report. Once it has called Start and each child in the current round
//     has reported or is known failed, a rank sends its REPORT to its parent:
//     the AND of its own and its children's values, the union of the ranks
//     covered, the union of failures known, and the decision with the highest
//     round held by it or reported from its subtree. If it is undecided when
//     it reports in round R, it has promised R: it will never accept a
//     decision of a round below R.
//  3. Complete. The coordinator, once its own children are accounted for,
//     checks whether the ranks covered and the failures known make up all n
//     ranks. If so it decides in its round R: it adopts the decision with the
//     highest round found in the reports, if any, or else decides (AND,
//     failures known). It sends DECIDE(R, value, F) down the tree. If not, a
//     failed member cut off part of the tree: it starts a new round above any
//     it has seen, without the failed ranks. Every new round removes at least
//     one more failed rank, so a coordinator starts at most n rounds this way.
//  4. Decide. A rank accepts DECIDE(R) if it is undecided and has not
//     promised a round above R; it delivers the decision and passes the
//     DECIDE to its children in its current round. A decided rank passes on
//     a DECIDE of its current round (or later) once.
//  5. Lead. The leader is the lowest rank not known failed. Once started, it
//     must run the highest round it knows of: while undecided (or while a
//     NUDGE named a round above its decision), if it is not coordinating a
//     round at least as high as every round it has seen, it starts round
//     (highest counter seen + 1, itself) with the failures it knows. This is
//     how the coordinator's death is survived: the next lowest rank learns of
//     it and takes over.
//  6. Nudge. A rank whose parent in its current round is known failed, and
//     which has reported (the decision was to come down through that parent)
//     or whose round's coordinator is known failed too (the round is dead),
//     sends NUDGE(round) to the leader in its view: once per round and
//     leader, again when the leader changes. The leader answers with a
//     decision of that round or later if it has one, and otherwise remembers
//     the nudger, runs a round above the nudged one (rule 5), and answers when
//     it decides. Only the topmost live ranks of a dead round (the dead
//     coordinator's children, or the children of dead ranks) nudge, so a
//     coordinator's death costs a few NUDGEs, not one per rank.
//
// A decided rank stays a full participant: it joins later rounds and reports
// its decision in them, answers NUDGEs, and passes decisions on. Forget drops
// instances that nobody can need any more.
//
// # Why it is correct
//
// A decision always comes from a coordinator deciding in its round R ("the
// decision of R"); messages only carry such decisions, and each round's
// coordinator decides at most once. A coordinator never decides in a round it
// has left for a higher one.
//
// Agreement. Let survivor T deliver the decision of round B, with value and
// failed set d. Claim: the decision of every round R > B is d. Take the
// decisions of rounds above B in the order they were made and suppose all
// earlier ones are d. The coordinator of R decided only when the reports
// covered every rank it did not know failed; T is a survivor, so it is never
// known failed, so T reported in R (or, being R's coordinator, counted its
// own state). T did not report in R while undecided: it would then have
// promised R and refused the decision of B < R. So T reported after
// delivering, and its report carried a decision of round >= B (a rank
// replaces its decision only by one of a higher round; reports pass on the
// highest they see). The coordinator adopted the decision with the highest round among
// the reports, of some round B' >= B; that decision was made before, so by
// induction (or because B' = B) it is d. Now take two survivors delivering
// the decisions of rounds B1 <= B2: by the claim for the first, both are the
// same. Nothing here depends on the failure detector beyond "a survivor is
// never reported failed": ranks wrongly suspected do not break agreement,
// they only stop counting as survivors.
//
// Validity. A coordinator decides fresh only when every rank is covered or
// known failed: the value is the AND over the covered ranks, every survivor
// among them, and every rank that did not contribute is in the failed set. A
// rank is reported failed only after it crashed, so no survivor is in it. An
// adopted decision is an earlier such decision.
//
// Termination (a sketch; the simulator in the tests checks it on thousands of
// schedules). Crashes are finite, so after some time T* every survivor knows
// every crash, messages from crashed ranks are dropped, and all survivors
// agree on the leader L, a survivor; from then on only L starts rounds
// (anyone else who coordinates believes L failed). L starts finitely many:
// each is above a round it had not seen (finitely many exist), or follows a
// round cut off by a failed member (its failed set grows), or answers a
// NUDGE above its decision (again naming an existing round).
//
//   - L's last round completes: its START reaches every survivor (a dead
//     rank on the way would leave the reports incomplete and make L start
//     another round); every survivor eventually calls Start (the caller's
//     duty) and joins (one in a higher round would have made L move above
//     it, rule 1); every member reports or is known failed; so L decides.
//   - Every survivor then gets the decision: it comes down the tree; a rank
//     whose parent died nudges L and gets it directly, then passes it down.
//   - A survivor stuck in a dead round: among the live ranks above it in that
//     round's tree, the topmost (whose parent is dead) nudges L (rule 6),
//     which answers or runs a round above the dead one, covering the stuck
//     rank (first point). If instead a live rank above it moved to a higher
//     round, that round is L's (covered by the first point) or a dead one
//     (apply this point to the highest dead round).
//
// # Cost
//
// Failure-free: 2(n-1) messages, causal depth 2*ceil(log2 n), one REPORT and
// one DECIDE per rank. A member that fails during a round costs one more
// round (START, REPORT and DECIDE sweeps: depth about 3*ceil(log2 n)); a
// coordinator's death costs that plus a few NUDGEs. A REPORT carries the
// covered set as a bitmap of up to n/8 bytes; other sets are usually short
// lists. Per rank and instance the machine does a few microseconds of work
// (see BenchmarkFailureFree).
//
// # The caller's duties
//
//  1. Create one Agreement per group: New(self, n), with ranks 0..n-1 of
//     the group (communicator ranks, not world ranks).
//  2. Call Start(inst, value) once per instance, when the local rank enters
//     the agreement: instances are numbered by the caller, the same on every
//     rank (the communicator's agreement counter). Every surviving rank must
//     eventually start every instance that others started: the agreement
//     waits for the contribution of every rank it does not know failed.
//  3. Call Step(from, m) for every agreement message that arrives, with
//     from the sender's rank in the group and m from ParseMessage. Drop
//     bytes that do not parse.
//  4. Call Failed(r) for every failure of a group member the runtime learns
//     of, as soon as it learns it, and fence r (no message from r may reach
//     Step after any survivor was told r failed).
//  5. After every call above, if HasReady: take Ready, send each Outgoing
//     (To, Msg.AppendBinary) in order, hand each Decision to the local
//     caller waiting for that instance, then call Advance. Sends must keep
//     their order per destination.
//  6. Call Forget(k) once instances below k are of no more use; under
//     sequential use (a rank starts instance k+1 only after instance k
//     decided there) that is as soon as instance k decided locally.
//
// The machine is not safe for concurrent use: one goroutine (comm's run
// loop) makes all these calls.
//
// # Example
//
// The canonical loop, with a transport that hands in (from, bytes) pairs,
// failure notices, and local agreement requests:
//
//	a := agree.New(rank, size)
//	for {
//		select {
//		case in := <-incoming:
//			if m, err := agree.ParseMessage(in.body); err == nil {
//				a.Step(in.from, m)
//			}
//		case r := <-failures:
//			a.Failed(r)
//		case req := <-requests:
//			waiting[req.inst] = req.reply
//			a.Start(req.inst, req.value)
//		}
//		if a.HasReady() {
//			rd := a.Ready()
//			for _, o := range rd.Send {
//				transport.Send(o.To, o.Msg.AppendBinary(nil))
//			}
//			for _, d := range rd.Decided {
//				waiting[d.Inst] <- d
//				delete(waiting, d.Inst)
//				a.Forget(d.Inst)
//			}
//			a.Advance()
//		}
//	}
package agree
