// Package comm is ftrma's communicator and per-process runtime: a group of
// ranks over one transport, with the small collectives the runtime itself
// needs (Barrier, Bcast, Allgather).
//
// A program started by ftrun gets its world communicator from Init; tests build
// an in-process world of N ranks on memnet with comm/commtest. Window and store
// layers take a *Comm.
//
// A rank's duties:
//
//  1. c, err := comm.Init(ctx) — joins the job (rendezvous, authenticated
//     connections to every other rank).
//  2. Use c.Rank(), c.Size(), collectives, and build windows on c.
//  3. c.Finalize(ctx) — a barrier, then the transport is closed.
//
// Collectives are called by every rank of the communicator in the same order,
// one at a time. They are fault-aware: when a rank they wait for is lost they
// return an error wrapping ftrma.ErrProcFailed instead of hanging, and they
// honour their context.
//
// Example:
//
//	c, err := comm.Init(ctx)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Finalize(ctx)
//	all, err := c.Allgather(ctx, []byte(fmt.Sprint(c.Rank())))
package comm
