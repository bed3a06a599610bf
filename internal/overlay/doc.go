// Package overlay holds the pure arithmetic of ftrma's logical topologies and
// a compact rank set. It has no state, no goroutines and no I/O: every
// function answers from its arguments alone, so the protocol packages
// (failure/, revoke/, agree/) and comm/ can share one definition of who talks
// to whom.
//
// Three things live here:
//
//   - The binomial graph on a ring of n ranks (Neighbors, Degree): rank v links
//     to v+2^k and v-2^k (mod n) for every 2^k < n. Its degree D grows as
//     about 2·log2(n), its diameter is at most ⌈log2(n)/2⌉, and removing any
//     D-1 ranks leaves it connected (checked exhaustively up to 16 ranks and
//     by sampling beyond), which is what lets revoke/'s reliable broadcast
//     survive D-1 failures.
//   - The binomial tree over m nodes rooted at 0 (TreeParent, TreeChildren),
//     for collectives that fan out and back in ⌈log2 m⌉ rounds.
//   - Set, a bitset of ranks with a compact wire encoding, used for failure
//     knowledge and agreement.
//
// A caller uses the package like this:
//
//  1. Fix the job size n once; all ranks must use the same n, or their graphs
//     differ.
//  2. Ask Neighbors(self, n) for the links to forward on, skipping those
//     known to be dead.
//  3. For a tree collective over a group, map the group's members to indices
//     0..m-1 with the root at 0, and use TreeParent and TreeChildren on the
//     indices.
//  4. Encode rank sets with Set.AppendBinary and decode them with ParseSet,
//     passing the n both sides agree on; ParseSet rejects anything else.
//
// The canonical use, forwarding on the binomial graph:
//
//	for _, nb := range overlay.Neighbors(self, n) {
//		if !dead.Has(nb) && nb != from {
//			send(nb, msg)
//		}
//	}
package overlay
