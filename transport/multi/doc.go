// Package multi combines transports into one, choosing a transport per peer
// as Open MPI chooses a BTL per peer: in a job over several hosts a rank
// reaches the ranks of its own host through shared memory (transport/shm)
// and the others through the network (transport/tcp), behind the one
// transport.Transport interface, so that window/, comm/ and store/ see no
// difference. Failure and fencing stay per peer: each peer is served by
// exactly one transport, which detects its loss and fences it.
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
//     transport with any other.
//   - Whole words. shm stores and loads aligned words whole, and so does
//     tcp's target, so a reader on either path never sees a torn word
//     written through the other.
//
// # Memory and keys
//
// Register registers a region with every transport in use under one key:
// the single transport that chooses its own keys (shm, whose key selects
// the slot of the key table its peers read without the owner's help)
// registers it, and the others take that key through KeyRegisterer (tcp's
// RegisterKey). Packing per-transport keys into one transport.Key would not
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
//  2. New([]Sub{{"shm", shmT}, {"tcp", tcpT}}, HostRoute(size, local)).
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
//	t, err := multi.New([]multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt}}, multi.HostRoute(n, local))
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
//   - verbs cannot be combined with shm yet: it chooses its own keys (it
//     lacks RegisterKey), its Connect needs every peer's address, and a
//     device without IBV_ATOMIC_GLOB (Soft-RoCE) could not share words
//     with CPU atomics at all. verbs alone, or tcp alone, need no multi
//     transport.
//   - The route is fixed by New, but for the absent ranks Admit routes
//     once; a rank cannot move to another transport.
package multi
