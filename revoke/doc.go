// Package revoke is ftrma's reliable broadcast, used for revoke notices
// (communicators and windows) and failure notices. It is a pure state
// machine: no goroutines, no clocks, no I/O.
//
// # Algorithm
//
// Ranks are linked by the binomial graph of internal/overlay: rank v links
// to v±2^k (mod n). A message travels in one of two ways.
//
// A flood: a rank that receives a message for the first time forwards it
// once to every neighbour not known to have failed, except the one it came
// from, and then delivers it; later copies of the same ID are dropped. The
// originator does the same with no sender to skip. As long as the ranks that
// have not failed stay connected in the graph, which is guaranteed while
// fewer than D = overlay.Degree(n) ranks have failed (D is about 2·log2 n), a
// message delivered by any surviving rank reaches every surviving rank, even
// if ranks die halfway through forwarding it and even if nobody learns of
// their failure. Each rank sends each message at most D times, so a flood
// costs at most n·D messages and about log2(n)/2 hops.
//
// A tree: when the originator knows of no failure and is settled (see Absent
// ranks), it sends the message down the binomial tree rooted at itself
// (overlay.TreeChildren, over the present ranks in rank order, relative to
// the originator's place): n-1 messages in all, ⌈log2 n⌉ hops. Each edge of
// the tree is an edge of the graph. A copy carries its tree's root. A rank
// that receives its first copy of an ID from root R, knows of no failure
// and is settled, delivers it and sends it to its children in R's tree.
// Anything else turns the ID into a flood at that rank: a flood copy, a
// second copy from another root (several originators), knowing of a
// failure or being unsettled when a copy comes, learning of a failure
// (Failed) while holding the ID, or being asked to Forget it. Turning means
// sending the message to every graph neighbour that has not had it from
// this rank and did not send it here (each rank sends each ID to each
// neighbour at most once, so the bound of n·D messages holds), after which
// the rank behaves as in a flood.
//
// Why the tree with this fallback is as reliable as the flood, given that
// every failure is eventually learned by every surviving rank (comm's
// detector and launcher see to it; the flood needs no such assumption):
// without a failure, take any rank y and the path of R's tree from R down
// to y. Each rank on it gets a copy from its parent: the parent either sent
// R's tree (its children included) or turned to a flood (its neighbours,
// the children included), and it holds the ID because its own parent sent
// it one. Several roots do not break this: a rank that saw another root's
// copy first turns when R's copy comes, and floods. Settled ranks count
// the same ranks present (below), so they compute the same trees; unsettled
// ones flood. With a failure, the rank that died may have swallowed copies
// bound for its subtree; but every survivor holding the ID turns once it
// learns of the failure, and from then on it is a flood among the
// survivors. Until then, a survivor cut off that way waits for the failure
// to be detected: a revocation or notice reaches it within the detection
// bound instead of a few hops.
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
// While an ID has travelled only as a tree here, it also keeps the message
// and which neighbours hold it, to flood it should it turn.
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
//     may leave out a flood copy (Message.Flood) to a rank it has since
//     received a flood copy of the same ID from: that rank floods the
//     message itself, so the broadcast stays as reliable, and it saves the
//     copies that would cross (comm does so). A tree copy must go out, and
//     so must a flood copy to a rank that sent only a tree copy: that rank
//     may hold the ID from another root and owe this copy's subtree
//     nothing until it gets it. Delivering before sending is
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
