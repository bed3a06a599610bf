// Package window implements MPI-3 passive-target RMA windows over an ftrma
// transport: Put, Get, Accumulate, GetAccumulate, FetchAndOp, CompareAndSwap,
// their request-based forms, Flush, and shared and exclusive locks.
//
// The operations mirror MPI's one for one. A window is created collectively
// over a communicator (Allocate, Create, CreateDynamic, AllocateShared) and
// is at once in a shared lock-all epoch: every rank may access every other
// rank's memory without calling Lock first. Operations are posted
// asynchronously and complete at Flush (or Wait on a Request); PutSync is a
// blocking Put that returns once the data is visible at the target.
//
// Accumulate, GetAccumulate and FetchAndOp take MPI's predefined
// operations: Sum, Prod, Min, Max, BAnd, BOr, BXor, LAnd, LOr, LXor, Replace
// and NoOp, on int64 (Window's methods), uint64 and float64 elements
// (As[uint64](w), As[float64](w)); the bitwise and logical ones are for
// integers only, and AccumulateBytes and GetAccumulateBytes take Replace and
// NoOp. Every element is updated atomically, also against other ranks'
// accumulates on it. On float64, Min and Max follow Go's min and max: a NaN
// on either side gives NaN, and -0 counts as less than +0. Completion: Sum on
// integers (a fetch-and-add per element), Replace without a result and NoOp
// are posted and complete at Flush (or at Wait or Test of their request);
// the other operations are compare-and-swap loops (read, compute, swap,
// retry on a changed value) and are complete when the call returns, so a
// Raccumulate of them returns a request that is already complete. Requests
// (Rput, Rget, Raccumulate, RgetAccumulate) complete with Wait, Test (never
// blocks) or WaitAll.
//
// Create exposes the caller's buffer itself on every transport: over shared
// memory, whose peers cannot map it, the owner executes their operations on
// it (a message round trip each; Allocate's memory they reach directly).
//
// AllocateShared makes a window whose ranks, all on one host, also load and
// store each other's memory directly: SharedQuery maps a rank's memory into
// this process (MPI_Win_allocate_shared, MPI_Win_shared_query;
// comm.SplitShared gives the communicator of a host's ranks). A failed
// rank's memory stays mapped, holding what it held, until Free.
//
// Locks are lock words at the target changed by remote compare-and-swap, so
// they need no action from the target (more below). Displacements are in
// bytes. In a dynamic window they are addresses returned by Attach, plus a byte
// offset.
//
// The lock words at each rank are a gate naming the exclusive holder and a
// slot per rank of the communicator marking that rank's shared lock. A Lock
// costs one atomic and one read, whatever the number of ranks: a shared
// locker sets its slot and reads the gate, an exclusive locker takes the
// gate and reads every slot in one Read. Where the target runs operations in
// posting order (tcp) the two go out together, one round trip; on RDMA the
// read waits for the atomic, two round trips. An Unlock costs one atomic.
// LockAll takes a shared lock on every rank, or none. Sync is MPI_Win_sync
// (a memory barrier on this rank's window memory). FlushLocal is Flush: no
// transport completes gets and atomics locally before remotely, and puts
// copy their data when posted.
//
// Errors (test with errors.Is): ftrma.ErrRankOutOfRange for a target outside
// the communicator, ftrma.ErrOutOfBounds for an access beyond the target's
// window, ftrma.ErrMisaligned for an atomic at a displacement that is not a
// multiple of 8 (and for Create of a buffer not on an 8-byte boundary),
// ErrFreed (which is also ftrma.ErrClosed) for any use of a freed window
// (ErrRebuilt, which is also ErrFreed, for a window Rebuild replaced),
// ftrma.ErrLockHeld for Free (unless the window is revoked), or a second
// Lock, while this rank holds a lock, ftrma.ErrNotLocked for Unlock without
// Lock, ftrma.ErrInvalid for an unsupported operation (an Op on a type it
// does not take), and
// ftrma.ErrProcFailed when the target's process is gone.
//
// Under failure (the ULFM RMA chapter made real): every operation and Flush
// toward a failed target returns an error wrapping ftrma.ErrProcFailed, within
// the failure detector's timeout, while operations toward live targets keep
// working; Lock honours its context; a lock held by a failed rank, shared or
// exclusive, is taken over (its word cleared, CAS dead → 0) by the next
// locker that it keeps out, so a death during a LockAll epoch blocks nobody;
// LockAll with a failed rank returns ftrma.ErrProcFailed holding no lock;
// Revoke makes every rank's later operations return ftrma.ErrRevoked, except
// that Unlock still drops the lock (releasing it at the target within a
// bound, and returning ErrRevoked), Free drops locks still held, and Free
// and Shrink work; Failed lists the failed ranks; Shrink gives a window over
// the survivors, keeping their memory and sharing their locks, without
// shrinking the communicator. Rebuild gives a window of the full size again
// over the communicator comm.Replace returns: survivors keep their memory
// (and attached regions) in place, the replacements get fresh memory,
// zeroed or set by a callback, locks start free, and the old window then
// returns ErrRebuilt (which is also ErrFreed).
// Only ranks the runtime counts failed are taken over: they are fenced first,
// and every lock word is changed only by compare-and-swap from a value seen,
// so a late atomic of a dead holder cannot corrupt it.
//
// A rank's duties:
//
//  1. w, err := window.Allocate(ctx, c, size) on every rank of c.
//  2. Post operations toward any rank; call Flush (or FlushAll) before relying
//     on their effect or reading their results.
//  3. Take Lock/Unlock where ranks must exclude each other.
//  4. w.Free(ctx) on every rank, holding no lock (on a revoked window
//     Free drops the locks itself).
//
// Example (a counter at rank 0, incremented by every rank):
//
//	w, _ := window.Allocate(ctx, c, 8)
//	var old int64
//	w.FetchAndOp(0, 0, 1, &old, window.Sum)
//	w.Flush(ctx, 0) // old holds the value before this rank's increment
package window
