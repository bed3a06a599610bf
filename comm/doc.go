// Package comm is ftrma's communicator and per-process runtime: a group of
// ranks over one transport, the small collectives the runtime itself needs
// (Barrier, Bcast, Allgather), reductions (Allreduce and Reduce over
// int64, uint64 and float64 vectors; AllreduceBytes and ReduceBytes with
// the caller's fold), new communicators out of old ones (Dup, Split), and
// the ULFM failure API: Revoke, IsRevoked (and Revoked, to wait for it),
// RevokeGroup, Agree and Iagree, Shrink and Ishrink, Replace, GetFailed and
// AckFailed (MPI 5's names; FailureAck and FailureGetAcked remain,
// deprecated), Failed and ProcFailed, Departed, and Signal.
//
// Dup, Split and Shrink give each new communicator a context id the ranks
// agree on, free at every one of them. Dup and Split end with an
// agreement, so every surviving rank returns the same outcome: the new
// communicators, or an error wrapping ftrma.ErrProcFailed (a rank failed;
// Shrink first) or ftrma.ErrRevoked. Windows and stores work on any
// communicator, so a failure in one Split group leaves the others alone.
// Reductions fold in rank order, so float results are the same at every
// rank.
//
// comm is handed a ready world: NewWorld builds the world communicator on
// what a rank's start-up made (Start: a connected transport and the
// launcher). A program started by ftrun gets it from startup.Init, which
// joins the job and calls NewWorld; a program run without ftrun gets a
// singleton world of one rank from startup.Init, as MPI allows. comm
// itself links no concrete transport and no start-up. Tests build an
// in-process world of N ranks on memnet with comm/commtest (New). Window
// and store layers take a *Comm.
//
// Failures and departures are kept apart. A rank that closes its world
// communicator (Close, Finalize) has departed: it is listed by Departed, not
// by Failed or GetFailed (ULFM's failed group holds failures only), while
// ProcFailed, which asks whether a rank can still take part, is true for it
// as for a failure. Operations that need it fail with an error
// wrapping both ftrma.ErrProcFailed and transport.ErrPeerLeft; Agree and
// Shrink do not wait for it, and Shrink leaves it out.
//
// The runtime (one per process, shared by every communicator) runs one
// goroutine that drives the pure state machines: failure's heartbeat detector,
// revoke's reliable broadcast (failure and revocation notices) and agree's
// agreement. Late copies of the revocation of a communicator closed here
// are dropped, for the last 1024 communicators closed. It steps what arrived together before it sends, and forwards
// a broadcast to none of the ranks whose copies of it were among them.
// Failure knowledge comes from the detector, from broken
// connections, from the launcher's exit notices and from other ranks' notices;
// it only grows. A rank learned failed is fenced first (nothing it sends lands
// any more), then made visible (Failed, ProcFailed, errors), then announced
// (unless ftrun told it: below).
// Under ftrun (a Start with a Launcher) the detector's suspicions and broken connections are
// only reported to ftrun, which kills the suspect or waits out its lease: a
// rank counts another failed on ftrun's exit notice, a notice or an
// agreement, never on its own, so that the job never has two live worlds.
// ftrun sends its exit notice to every rank, so a rank does not announce
// what it learned from it: at 4,096 ranks with 3 failures that was 282,000
// of a shrink's 299,000 messages.
// Operations toward a rank whose connection broke still fail at once.
//
// A job may hold spares: world ranks that have not started
// (Config.Spares). They are absent: in no communicator (the world
// communicator is the ranks that started), neither live nor failed, never
// watched or suspected by the failure detector, outside the broadcast
// graph; nothing is sent to them. When one starts, every live rank admits
// it (ftrun's admission notice; comm/commtest's StartSpare in tests): the
// detector's ring and the broadcast graph re-form to include it, and
// existing communicators, their agreements and Shrink, are untouched. A
// failed rank is never admitted; a spare that fails is failed for good.
//
// Replace uses spares: it gives a communicator back its size after
// failures, each failed rank's number held by a spare the launcher starts
// for it (a Spawner: the Launcher of Start, ftrun --respawn). The
// survivors agree on the failed set, the lowest survivor asks for the
// spares, the survivors agree on how many started, and survivors and
// spares end with an agreement on the new communicator, so every member
// returns the same outcome; when spares run out every survivor gets an
// error wrapping ErrReplace. A spare's startup.Init returns the new
// communicator,
// and its Replaces names the failed rank it took over.
//
// A rank's duties:
//
//  1. c, err := startup.Init(ctx) — joins the job (rendezvous,
//     authenticated connections to every other rank) and starts the
//     runtime (NewWorld).
//  2. Use c.Rank(), c.Size(), collectives, and build windows on c.
//  3. On ErrProcFailed or ErrRevoked: Revoke (so that everyone stops),
//     AckFailed(c.Size()), Agree on how to go on, Shrink to the survivors,
//     and Close the old communicator: what the runtime keeps for a
//     communicator (its revocation, late contributions and agreement
//     messages) is pruned when it is closed, so that a job that recovers
//     again and again does not grow.
//  4. c.Finalize(ctx) — a barrier, then the runtime and transport are closed;
//     after failures, c.Close().
//
// Collectives are called by every rank of the communicator in the same order,
// one at a time. They are fault-aware: when a rank they wait for is lost they
// return an error wrapping ftrma.ErrProcFailed instead of hanging, after a
// revocation ftrma.ErrRevoked, and they honour their context. Agree and Shrink
// work across failures and revocation.
//
// Example:
//
//	c, err := startup.Init(ctx)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Finalize(ctx)
//	all, err := c.Allgather(ctx, []byte(fmt.Sprint(c.Rank())))
//	total, err := comm.Allreduce(ctx, c, []float64{partial}, comm.Sum)
//	half, err := c.Split(ctx, int(c.Rank())%2, 0) // even and odd ranks
package comm
