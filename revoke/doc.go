// Package revoke is ftrma's reliable broadcast, used for revoke notices
// (communicators and windows) and failure notices. It is a pure state
// machine: no goroutines, no clocks, no I/O.
//
// # Algorithm
//
// Ranks are linked by the binomial graph of internal/overlay: rank v links
// to v±2^k (mod n). A rank that receives a message for the first time
// forwards it once to every neighbour not known to have failed, except the
// one it came from, and then delivers it; later copies of the same ID are
// dropped. The originator does the same with no sender to skip. As long as
// the ranks that have not failed stay connected in the graph, which is
// guaranteed while fewer than D = overlay.Degree(n) ranks have failed (D is
// about 2·log2 n), a message delivered by any surviving rank reaches every
// surviving rank, even if ranks die halfway through forwarding it. Each rank
// sends each message at most D times, so a broadcast costs at most n·D
// messages and about log2 n hops.
//
// # Absent ranks
//
// A job may hold ranks in reserve that have not started (spares, given to
// New as absent). They are in no graph: the binomial graph is over the m
// present ranks (started, whether live or failed), numbered 0..m-1 in rank
// order, so it tolerates D(m)-1 failures among them however many spares
// wait (over all n ranks, with the spares counted dead, a handful of
// failures can cut a present rank off). A rank learned failed while absent
// is present (and failed) from then on.
//
// When a spare starts, every live rank admits it (Admit), each at its own
// moment: for a while some count it present and others not. Their graphs
// then differ, not only in the spare's links: renumbering moves the links
// that wrap around the ring. So Admit does not drop the old graph: a rank
// forwards on the union of its graphs over every present set it has had
// since the last Settle. Say Q is the present set every live rank had
// reached when one of them last called Settle, and the spares are admitted
// in the same order everywhere (ftrun's order). Every live rank's views
// since its own last Settle then pass through Q, so every live rank
// forwards on the graph over Q at least: a broadcast delivered by a live
// rank of Q reaches every live rank of Q while fewer than D(|Q|) of them
// have failed, whatever the views. A spare s admitted since gets a
// broadcast from any of its neighbours that admitted it before the
// broadcast reached them; a broadcast under way while s was being
// admitted may miss it (s learns the failures of the job from its
// admission and ftrun, and revocations of communicators it is not in do
// not concern it). A broadcast s originates reaches every live rank of Q
// once one live neighbour of s in Q has admitted it. Once every live rank has
// admitted every spare admitted here, the caller may call Settle, which
// brings the degree back to D(m).
//
// Messages are identified by an ID chosen by the originator. Several ranks
// may originate the same ID (all the observers that noticed one failure, say,
// "fail/3"): the broadcasts merge, and every rank delivers the ID once. There
// is no ordering between different IDs.
//
// The Broadcast remembers every ID it has seen, for its whole life; choose
// IDs from a bounded space (one per rank, per communicator, per window).
//
// # Caller's duties
//
//  1. Create one Broadcast per rank with New(self, n, absent...), with the
//     same n and the same absent ranks (spares not started) on every rank.
//  2. Call Originate to broadcast a message of your own.
//  3. Decode every broadcast message received (ParseMessage) and pass it to
//     Step with the sender's rank.
//  4. Pass every failure learned (from failure/, or the launcher) to Failed,
//     and every spare that starts to Admit, in the same order at every rank.
//     A spare's own Broadcast starts with the ranks still absent, and
//     learns the failed ones by Failed.
//  5. After each of these calls, if HasReady: send each Outgoing of
//     Ready().Send (encode with Message.AppendBinary), then act on each
//     message of Ready().Deliver, then call Advance. A send to a rank that
//     turns out to be dead may simply fail: the graph routes around it.
//     A caller that steps several received messages before it takes Ready
//     may leave out an Outgoing to a rank it has since received the same
//     ID from: that rank holds the message and forwards it itself, so
//     the broadcast stays as reliable, and under a flood it saves the
//     copies that would cross (comm does so). Delivering before sending is
//     as reliable too (comm does so for revocations, so that waiters see
//     them first): a rank that dies before it forwarded a message is no
//     survivor, and whoever sent it the message forwards it as well.
//
// # Example
//
// The canonical loop, in comm/'s owner goroutine:
//
//	b := revoke.New(self, n)
//	for {
//		select {
//		case in := <-broadcastFrames:
//			m, err := revoke.ParseMessage(in.Data)
//			if err != nil {
//				continue // a malformed frame: drop it
//			}
//			b.Step(in.From, m)
//		case r := <-failures:
//			b.Failed(r)
//		case id := <-revokeRequests:
//			b.Originate(revoke.Message{ID: id})
//		}
//		if b.HasReady() {
//			rd := b.Ready()
//			for _, o := range rd.Send {
//				send(o.To, o.Msg.AppendBinary(nil))
//			}
//			for _, m := range rd.Deliver {
//				apply(m) // mark the communicator revoked, record the failure, ...
//			}
//			b.Advance()
//		}
//	}
package revoke
