// Package multi combines transports into one, choosing a transport per peer
// as Open MPI chooses a BTL per peer: in a job over several hosts a rank
// reaches the ranks of its own host through shared memory (transport/shm)
// and the others through the network (transport/tcp), behind the one
// transport.Transport interface, so that window/, comm/ and store/ see no
// difference; with an RDMA device, verbs takes tcp's place. Failure and
// fencing stay per peer: each peer is served by the one transport its
// route names (and by a transport that reaches every rank, when there is
// one: see "Atomics through one transport"), which detect its loss and
// fence it.
//
// # Routing
//
// A route names, for every rank of the job (this rank included), the index
// of the transport that reaches it. Operations, Wait, Flush, Push, Send,
// Fence and PeerDown toward a rank go to its transport unchanged: sequence
// numbers toward a peer are its transport's, and messages and completions
// keep that transport's order. Route(r) names the transport ("shm", "tcp")
// for logs. Each transport serves only the ranks routed to it: shm is opened
// with Config.Ranks (the ranks of its host), and Connect hands tcp the
// addresses of its own peers only, so that it dials no one else and refuses
// the others' connections. A peer therefore reaches this rank's memory by
// one path only, the one Fence cuts.
//
// # Capabilities
//
// Caps is the intersection of the capabilities of the transports in use
// (those with a rank routed to them): each flag must hold toward every
// peer. For shm and tcp that is CapOrdered, CapRemoteCompletion,
// CapLocalAtomics and CapWholeWords; CapOneSided and CapNativeAtomics go,
// since tcp's target executes the operations. The flags that concern several
// peers at once hold for the combination because of how each transport
// touches this rank's memory, which is shm memory (see Memory) mapped by
// every local rank:
//
//   - Atomics. An shm peer executes CompareAndSwap64 and FetchAndAdd64 with
//     its own CPU's atomic instructions on its mapping of the segment; tcp's
//     target executes a remote peer's atomics with sync/atomic on this
//     rank's mapping of the same segment (transport.Memory); the owner uses
//     sync/atomic on its mapping too. All are locked read-modify-writes on
//     the same physical word, which cache coherence makes atomic with each
//     other whatever the virtual address: N ranks' fetch-adds over both
//     paths sum exactly (the tests check it). An RDMA device whose atomics
//     are atomic only among themselves (IBV_ATOMIC_HCA: no CapLocalAtomics)
//     breaks this, and no capability flag could repair it, since the shm
//     peers would still use their CPUs: New refuses to combine such a
//     transport with any other, unless it executes every atomic (next
//     section).
//   - Whole words. shm stores and loads aligned words whole, and so does
//     tcp's target, so a reader on either path never sees a torn word
//     written through the other.
//
// # Atomics through one transport
//
// On a host with an RDMA device, ranks reach the ranks of their host
// through shm and the others through verbs. When the device's atomics are
// atomic only among themselves (IBV_ATOMIC_HCA, as Soft-RoCE's: verbs
// lacks CapLocalAtomics), no CPU may execute an atomic on words the device
// updates atomically, so every atomic goes through the device, as Open
// MPI's osc rdma does: the verbs Sub has Reach set (its Connect gets every
// rank's address, and it has a queue pair to every rank, this one's
// loopback pair included), and multi posts every CompareAndSwap64 and
// FetchAndAdd64 through it, toward every rank, this one too; writes,
// reads and messages keep the route. Caps then lacks CapLocalAtomics (the
// owner's own atomics go through the transport, toward itself, as over
// verbs alone) and CapOrdered: an atomic and a write toward one peer take
// different paths and may take effect in either order, so window/ flushes
// before it releases a lock.
//
// Sequences toward such a peer (routed to shm, reached by verbs too) stay
// in order across both paths: an atomic's sequence is verbs' with the top
// bit set (shm's never reach it), and multi keeps the last one posted
// toward the peer. Waiting for an atomic waits for it at verbs and
// flushes shm (whose operations are complete when posted, but may hold a
// failure to report); waiting for a write or read waits for the last
// atomic posted toward the peer at verbs, then for the write at shm. A
// message (Send, through shm) waits first for the last atomic posted toward
// the peer, so that it arrives after it as the transport contract says; a
// failure of that atomic is kept for the next Wait, Test or Flush. Flush
// and Push go to both, Fence and PeerDown too (the peer reaches this
// rank's memory by both paths), and either path's peer-down event is
// passed on, the first only, except verbs' report of the peer's orderly
// departure (its goodbye, transport.ErrPeerLeft): that may overtake the
// peer's last messages through shm, which reports the departure after them.
//
// Who writes a word, with what: an shm peer stores and loads with its CPU
// (its writes and reads), the device executes every atomic, and the owner
// reaches its words as its peers do. A CPU store that races with a device
// atomic on the same word may be lost; MPI leaves such a race undefined
// (a put and an accumulate on one location in one epoch), and window/'s
// own words (locks, counters) are touched by atomics only where
// CapLocalAtomics is missing. With a device whose atomics are the CPU's
// (IBV_ATOMIC_GLOB) nothing is split: every operation keeps the route, and
// Reach only makes Fence and PeerDown cut verbs too.
//
// # Memory and keys
//
// Register registers a region with every transport in use under one key:
// the single transport that chooses its own keys (shm, whose key selects
// the slot of the key table its peers read without the owner's help)
// registers it, and the others take that key through KeyRegisterer (tcp's
// and verbs' RegisterKey; verbs enters it in its key table at the slot
// key mod 2^14, which shm's keys, selecting one of at most 2^14 slots with
// their low bits, never share while registered). Packing per-transport keys into one transport.Key would not
// fit (shm's keys use all 24 bits), and a translation table would have to
// travel to every peer. New refuses two transports that both choose keys.
// Memory must be acceptable to every transport: Alloc and Release delegate
// to the transport.Allocator among them (shm), else use the Go heap, and
// RegionLimit is the smallest limit (shm's key table).
//
// # Peer-down events
//
// The receiver set with SetReceiver gets every transport's messages and
// peer-down events. Events for a rank a transport does not serve cannot
// happen (the transports never connect such ranks) and are dropped if they
// did; the first peer-down event for a rank is passed on and later ones are
// not. PeerDown, the launcher's exit notice, goes to the transport's own
// PeerDown (shm, verbs); a transport without one (tcp) fences the peer
// instead, and the event carries the launcher's cause.
//
// # Use
//
//  1. Open each transport for the ranks it serves: shm with Config.Ranks set
//     to the ranks of this host, tcp with Listen.
//  2. New([]Sub{{"shm", shmT}, {"tcp", tcpT}}, route), route from AskRoute
//     (shm first: it reaches the ranks of this host, tcp the others).
//  3. SetReceiver, before peers may send.
//  4. Publish tcp's address (Addr) through the rendezvous; Connect(ctx,
//     addrs) with every rank's address.
//  5. Use it as any transport.Transport: Alloc, Register, post operations,
//     Flush, Send; PeerDown on the launcher's exit notices; Fence.
//  6. Close closes every transport.
//
// Example (rank me of n; local lists the ranks on this host, me included):
//
//	st, err := shm.Open(shm.Config{Rank: me, Size: n, Job: job, Ranks: local})
//	if err != nil {
//		return err
//	}
//	tt, err := tcp.Listen(tcp.Config{Rank: me, Size: n, Secret: secret, ListenAddr: hostAddr})
//	if err != nil {
//		st.Close()
//		return err
//	}
//	route, err := multi.AskRoute(n, nil, st, tt) // shm where it reaches, else tcp
//	var t *multi.Transport
//	if err == nil {
//		t, err = multi.New([]multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt}}, route)
//	}
//	if err != nil {
//		st.Close()
//		tt.Close()
//		return err
//	}
//	t.SetReceiver(recv)
//	addrs := rendezvous(t.Addr()) // every rank's tcp address
//	if err := t.Connect(ctx, addrs); err != nil {
//		t.Close()
//		return err
//	}
//
// # Spares
//
// A job started with spares (transport.Admitter) builds its multi
// transport with NewAdmitting: the route marks the spares Absent, and an
// Admission names this rank's host and the transports for ranks on it
// (shm) and on other hosts (tcp). Both count as in use from the start.
// Admit(spare, AdmitAddr(host, tcpAddr)) routes the spare by the host it
// started on and admits it there. Until then operations toward it fail
// with transport.ErrAbsent; PeerDown or Fence toward it makes it failed
// for good (it is reported down once and never admitted).
//
// The transports below must agree: shm is opened with every spare in
// Config.Ranks (a spare may start on any host) and Config.Absent listing
// the served ranks not started on this host (spares not started, and those
// started elsewhere); tcp with the spares not started in Config.Absent. A
// spare itself builds its transports with the ranks live when it starts
// routed by their hosts, the rest absent, tcp with Config.Late, calls
// PeerDown for the ranks that failed before it, then Connect with the live
// ranks' addresses.
//
// # Limits
//
//   - A transport with Reach cannot be combined with admission of spares
//     (NewAdmitting refuses it): a job of verbs with spares runs verbs
//     alone, and its ranks on one host talk through the device.
//   - The route is fixed by New, but for the absent ranks Admit routes
//     once; a rank cannot move to another transport.
package multi
