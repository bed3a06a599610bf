// Package arbiter is a job's replicated authority: the leases that let a
// host act, the verdicts on ranks and hosts, the admission of spares and the
// job's membership, held by ftrun and its agents together so that no single
// host holds the job's life. It is a pure state machine (STYLE.md, protocol
// packages) around a go.etcd.io/raft/v3 RawNode: raft keeps the log, this
// package keeps what the log means, the host-lease rule, and the leader's
// verdicts. Nothing here starts a goroutine, reads a clock or does I/O:
// the caller calls Tick every Config.Tick, hands received messages to Step,
// and carries out Ready (messages, events, probes), then Advance; every
// input carries now, the caller's clock.
//
// # Nodes, voters, the log
//
// There is one Node per host: node id = host index + 1, ftrun's host is
// host 0, node 1. Up to five nodes on distinct hosts vote in raft
// (Config.Voters, node 1 always among them; by default DefaultVoters: 1, 3
// or 5 of the first nodes); the others are raft learners, which get the log
// but never vote or lead. raft runs with CheckQuorum and PreVote, in
// memory (a node that dies does not come back: its host is declared failed
// and a restarted agent would join as a new host). Node 1 campaigns at
// start, so ftrun's node leads while it can.
//
// The log holds seven commands (Command, encoded append-style with
// encoding/binary; ParseCommand accepts only canonical encodings): RankExited
// {rank, code}, RankFailed{rank, reason}, HostFailed{host, reason},
// SpareAdmitted{rank, host}, and the spares' (WIRING.md: spares while ftrun
// is gone) SpareClaimed{rank, host, by, payload}, SpareJoined{rank, addr} and
// Addresses{from, addrs}. Every node applies committed entries in order to
// its State: the job's hosts (live, or failed with a reason), its ranks
// (running on a host, exited with a code, failed with a reason, absent: a
// spare not yet claimed, starting: claimed and not joined, or lost: ended
// before it joined), each rank's address once the log has it, and whether
// the job finished (every rank ended). Apply is deterministic and
// idempotent: a verdict on a rank that has ended or a host already failed,
// or an admission or claim of a known rank or onto a failed host, changes
// nothing. A claim by ftrun's host (0) applies only while host 0 is live,
// one by another host only once it is failed. HostFailed(h) fails every
// running rank on h and loses every spare starting there (and, for h = 0,
// every spare ftrun claimed that has not joined). Every
// node reports the same Events in the same order.
//
// # The protocol: who proposes, who grants, what a holder concludes
//
// Host leases. Every node, voter or learner, holds a host lease from the
// leader. Every RenewTicks (an eighth of a term), and at once when it learns of a
// new leader, it sends LeaseAsk{seq} to the leader it knows, remembering the
// time s it sent it by its own clock. The leader answers LeaseGrant{seq,
// T, term} only while it may grant (below); the holder's lease then runs
// until s + T by its own clock: message delay only shortens it. The leader
// grants its own host's lease to itself. A node whose lease has run out, or
// whose host the log declares failed, does not act (Acting, LeaseExpiry):
// the caller must stop granting rank leases on that host, so every rank
// lease it granted ends within its own term.
//
// When the leader may grant. Every heartbeat or append the leader sends
// carries a stamp, its clock when it produced it; a follower's answer
// carries back the stamp of the message it answers. A voter's answer in the
// leader's own term to stamp q proves that voter was in that term at some
// moment after q (leader's clock). quorumAt is the latest q such that a
// quorum of voters (the leader counting for itself at now) has echoed q or
// later in this term. The leader grants at t only if
//
//   - raft says it leads,
//   - it has committed an entry of its own term (raft appends one on
//     taking office), and
//   - t - quorumAt < ET, ET = ElectionTicks·Tick.
//
// An ask that arrives while the leader cannot grant is held and granted when
// it can (a late grant only gives a shorter lease).
//
// Verdicts for silence. The leader keeps, per host, lastGrant (the time of
// its latest grant to the host) and lastAsk (when its latest ask arrived);
// these are the leader's, never replicated. On taking office at t0 it sets
// lastGrant(h) = t0 + ET for every host: it honours every lease its
// predecessors may have granted. A host silent past max(lastGrant, lastAsk)
// + T + M (M = Margin, half a term by default: today's 1.5 terms) gets
// HostFailed(h, host silent) proposed, by a leader that may grant at that
// moment (so a leader cut off from the others proposes nothing). A leader
// whose own inputs stop for more than two ticks (it was stopped, starved)
// restarts every host's silence when it runs again.
//
// Suspicions, probes and exits. ReportSuspect(rank, by) on any node goes to
// the leader (a Suspect message; dropped if no leader is known: the failure
// detector reports again). The leader emits a Probe{rank, host}, repeated
// every two heartbeats, and the caller asks the rank's host and answers with
// ProbeAnswer on the leader. alive drops the suspicion; not alive (the host
// found the rank silent and has killed or fenced it) makes the leader propose
// RankFailed(rank, unresponsive). A probe not answered within half a term
// means the host itself does not answer: the leader stops granting it
// (condemns it) and proposes HostFailed(h, probe unanswered) once
// lastGrant(h) + T + M has passed; declaring only the rank at once would
// fail a rank whose host may still hold a lease. A host that says it has
// the probe (ProbeHeard: its answer may take its own wait for the rank, a
// kill and a reap) gets a full term from then instead, once per probe. The
// half term counts only
// while the leader is in contact with a quorum (a quorum echoed a stamp of
// its last three heartbeat intervals): a leader cut off itself learns
// nothing from a silence, and restarts the half term.
//
// A hint that the leader's process ended. A node whose link to its leader
// closes (an end of stream or a reset: the kernel closes a dead process's
// sockets) calls LeaderGone: it forgets the leader (raft's ForgetLeader,
// so it grants a pre-vote at once instead of refusing for an election
// timeout under CheckQuorum), and the voters campaign in the order of
// their ids, two ticks apart, until a leader is known. A take-over after
// ftrun's process dies then takes a round trip or two instead of raft's
// randomized timeout (ET to 2·ET), well inside the 7/8 of a term the host
// leases have left. A leader silent for an election timeout (no message
// from it) is taken for gone the same way, without waiting out raft's
// randomized timeout: a take-over after the leader's host is cut off then
// comes about ET after its last message (0.42-0.56 s in the simulator with 3
// voters; raft's timeout alone took up to 1.25 s there, and hosts' leases
// lapsed). A wrong hint costs a refused pre-vote; nothing in the
// safety argument below depends on hints. ReportExit(rank, code) on
// any node proposes RankExited through raft (a follower's proposal is
// forwarded to the leader), AdmitSpare(rank, host) proposes SpareAdmitted,
// and ClaimSpare, JoinSpare and PublishAddresses the spares' commands; all
// are proposed again every ET until the log shows them (or they can no
// longer apply).
//
// # Why no host acts after its verdict (the safety argument)
//
// Clocks: every clock runs at a rate within [1-ρ, 1+ρ] of true time
// (MaxDrift ρ, 1% by default); nothing assumes clocks agree on the time, and
// nothing assumes a bound on message delay. Claim: when any node applies
// HostFailed(h) at true time v, every lease h ever got ended before v.
//
//  1. A grant by leader L at its time g covers an ask h sent before g; the
//     lease ends by h's clock T after the ask, so within T/(1-ρ) true time
//     of g.
//  2. L's own grants: L proposes HostFailed(h) at its time p ≥ lastGrant(h)
//     + T + M, and grants h nothing after proposing. In true time p comes at
//     least (T+M)/(1+ρ) after L's last grant, which is no sooner than
//     T/(1-ρ) when M ≥ 2ρT/(1-ρ). The verdict is applied after it is
//     proposed.
//  3. Grants of earlier leaders. Let L' lead term k' and L an earlier term
//     k < k', and let L' take office at true time E. A quorum Q' voted for
//     L' and was in a term ≥ k' before E. For L to grant at g, a quorum Q of
//     voters echoed in term k a stamp q ≥ g - ET (L's clock). Q and Q'
//     share a voter v: v answered L's stamp q in term k, so before it moved
//     to a higher term, so before E. Hence q < E, and L's last grant comes
//     before E + ET/(1-ρ), its lease ends before E + (ET+T)/(1-ρ). L'
//     declares h no sooner than its time E + ET + T + M, i.e. true time
//     E + (ET+T+M)/(1+ρ): late enough when M ≥ 2ρ(ET+T)/(1-ρ), which
//     Config.Validate checks (30 ms at the defaults; M is 500 ms). raft's
//     CheckQuorum gives much the same from raft's side (a voter that heard
//     the leader within ET ticks refuses to vote), and it also makes an old
//     leader step down within 2·ET; the argument above does not rely on
//     either, and the new leader's wait is what makes it hold by clocks.
//  4. Grants of later leaders. A later leader L2 (term > the verdict's)
//     grants h only after it committed an entry of its own term. If the
//     verdict entry is in L2's log it condemns h on taking office (it scans
//     its log past the applied index) and never grants it; if it is not,
//     it can never be committed once L2's entry is, since raft's log
//     matching puts L2's entry (of a higher term) at or before that index
//     in every later leader's log. A host declared failed in the applied
//     state is never granted either.
//
// So no HostFailed is ever applied while its host acts, and a host is never
// granted after its verdict: at most one world acts, the one whose leader
// holds a quorum. A RankFailed is proposed only on the host's own word that
// the rank no longer acts (ProbeAnswer), and a rank on a host that does not
// answer fails with its host, by the rule above.
//
// # The primary world, by the rule
//
// The side whose leader holds a quorum of voters goes on; every other node
// stops acting within a term of its last grant and is declared failed.
//
//   - ftrun's host lost, or cut off alone: the other voters elect a leader
//     among themselves (with 3 or 5 voters), keep acting, and declare host 0
//     within VerdictBound. Output then goes to files on the ranks' hosts.
//   - The 4 compute hosts of a job split 2+2, ftrun's host with one pair:
//     ftrun and its 2 hosts hold 3 of 5 voters and go on; the other pair
//     stops and is declared.
//   - A split 1+3 of the compute hosts: the side with 3 voters goes on,
//     ftrun's or not.
//   - Any split: at most one side acts (the one with a quorum of voters);
//     when no side has one, none does.
//   - A single host, or a single voter (1 or 2 hosts by default): exactly
//     today's behaviour, ftrun alone decides; its own loss stops the job.
//
// The limits: a host is served by the leader alone, so a host cut from the
// leader but not from the other voters is declared like any cut host; and a
// host declared failed stays failed (its node may come back into raft as a
// voter, but never acts again in this job).
//
// # Bounds
//
// With T the lease term, M the margin, ET the election timeout, h the tick,
// D the longest message delay between connected nodes (MaxDelay; only the
// bounds assume it) and ρ the clock drift, the longest true time from a
// host's cut (or its node's death) until every connected node applied its
// HostFailed is
//
//	(T + M + h)/(1-ρ) + 4·D                                   the leader stays
//	TakeoverBound + (ET + T + M + h)/(1-ρ) + 3·D              the leader was cut
//	TakeoverBound = D + 2·((2·ET + h)/(1-ρ) + 4·D)
//
// (the host's last ask arrives D after the cut, the leader sees the deadline
// at its next tick, the commit takes a round trip and one more message to
// the others; a take-over takes up to 2·ET plus a tick for a follower to
// time out and two round trips for the pre-vote and the vote, allowing one
// failed attempt). At the defaults (T 1 s, M 0.5 s, ET 0.5 s, h 50 ms, ρ 1%,
// D = h) these are 1.77 s, 4.79 s and 2.57 s; with D = 5 ms, 1.59 s, 4.25 s
// and 2.17 s. VerdictBound returns the larger (the first alone with a single
// voter), TakeoverBound the last. The runtime derives its give-up times from
// VerdictBound. In the simulator a take-over after the leader's crash took
// 8 to 26 ticks (median 11, ElectionTicks 10), 3 in 600 needing a second
// attempt; a cut non-leader host was declared 1.2 to 1.6 s after the
// cut, ftrun's host 2.6 to 2.8 s after (TestRule*, TestMeasureElection).
//
// Cost: per renewal period (an eighth of a term, RenewTicks = 2 ticks) the
// leader sends every other node one heartbeat (raft's, every
// HeartbeatTicks = 2 ticks) and gets its answer, and each other node asks
// once and is granted once: about 4·(hosts-1) messages per renewal,
// 40·(hosts-1) per term, whatever the number of ranks (ranks renew with
// their host's node). Measured (TestMeasureMessages): 12 per renewal at 4
// hosts, 60 at 16, 251 at 64 (119, 598 and 2,508 per term). Renewing every
// eighth rather than every quarter term (then 84, 416 and 1,756 per term)
// leaves a host 7/8 of a term of lease when its leader vanishes silently:
// in the simulator the longest lapse before a new leader's grant fell from
// 460 to 220 ms, which a rank's rescue (a quarter term) covers.
//
// # Tests
//
// sim_test.go is a seeded simulator of whole jobs (2..8 hosts, 1/3/5 voters,
// skewed clocks, crashes of any node, partitions of every kind, stalls,
// lost and late messages, rank exits, hangs and suspicions) that checks at
// every step that no node or rank acts once declared, that no verdict is
// applied while its host or rank acts, that no host outside trouble is
// declared, that raft's applied logs agree, and at the end that the live
// nodes converge; TestSimCatchesBrokenRules shows each check failing when a
// rule is broken on purpose. scenario_test.go plays the rule above, case by
// case.
//
// It runs for real, not yet as the job's authority, behind ftrun --arbiter
// (package launcher: arbiterjob.go), which logs its decisions beside
// ftrun's own.
package arbiter
