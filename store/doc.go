// Package store is ftrma's resilient key-value store for checkpoints: every
// key has Copies replicas in the memory of distinct ranks, written and read
// with one-sided operations only, so that data survives the loss of up to
// Copies−1 ranks and no rank ever serves another's requests.
//
// It is built for the checkpoints of a task-parallel runtime: frequent
// writes, few reads, each writer owning a roughly fixed set of keys, values
// of any size, concurrent writes to a key only after failures (when a
// survivor takes over a dead writer's keys), and any rank reading any key.
//
// # Semantics
//
// Put is synchronous: when it returns nil every live replica holds the value.
// Get returns the newest complete copy, never a torn or mixed value. Put, Get
// and Delete of one key are linearizable, also across failures: a Put that
// returned an error may or may not have taken effect, and when it has, every
// later Get sees it. A transaction (Begin, Tx.Put/Delete, Commit) is all or
// nothing, also when its writer dies in the middle of Commit.
//
// After comm.Replace the store grows back (Grow, Join; see grow.go): the
// replaced rank numbers join placement again, the keys placed on them get
// copies there, and with that every key has Copies copies again. All of the
// above holds during the move too: reads and writes go on, linearizably.
// Each operation works wholly in the view of the store (window, placement,
// failed ranks) it started in; one that meets Grow's switch to the next
// view gives up its attempt and starts again in that one.
//
// What users of Hazelcast's IMap or etcd look for:
//
//   - Conditional writes (cond.go): CompareAndSwap (replace(k, old, new);
//     with a nil old, put if absent; with a nil new, delete if equal),
//     PutIfAbsent, and GetVersion with PutIfVersion and DeleteIfVersion
//     (etcd's compare on a key's version). Linearizable like Put: the
//     condition is checked and the write made under the key's locks. A
//     version names one value of a key, also across deletions. A call that
//     returns (false, nil) changed nothing; one that returns an error may or
//     may not have taken effect.
//   - Reads in a transaction (Tx.Get): the transaction's own writes, else the
//     store's values; Commit validates under the locks that every key read
//     still has the version read, else fails with ErrConflict and writes
//     nothing. Committed transactions are serializable.
//   - Listing (scan.go): Scan (keys by prefix, in byte order, with a limit
//     and a continuation) and Len. They read every live rank's slot table, so
//     they cost in proportion to Slots × ranks; not a snapshot: a key with a
//     value for the whole scan is listed, one without for the whole scan is
//     not.
//   - Watches (notification of changes to a key or prefix) are not built: a
//     watch needs somebody to notice a write and tell the watcher, and no
//     rank serves another here — the writer would have to find and signal
//     every watcher on every put, a cost paid by the checkpoint writes this
//     store is for. Poll with GetVersion (one key) or Scan (a prefix).
//
// # Design (the "localized recovery variant" of Fohry and Fink)
//
// DESIGN.md in this directory is the protocol word by word: who writes
// each shared word, with which operation, and what a reader concludes;
// every operation's steps and round trips; the invariants and what keeps
// each; and what is known to be wrong. The interleaving explorer
// (explore_test.go, TestExplore) checks them under seeded crashes, context
// ends and respawns.
//
// One dynamic window, one lock-all epoch, no collective after Open but Grow. Each rank
// exposes a table — a header, Slots key slots and a chunk table — and a heap
// of chunks it attaches as they are needed.
//
//   - Keys: a key is its full bytes. Its hash is SipHash-2-4 under a
//     128-bit key the ranks draw together at Open (each contributes random
//     bits), so nobody can choose keys that collide; keys that do collide
//     anyway keep their own slots and values.
//   - Placement: rendezvous hashing of the key's hash over the ranks
//     of the communicator given to Open (see placement.go): the first Copies
//     live ranks in the key's preference order, one per host first. Failed
//     ranks drop out; nothing is renumbered, so the rule needs no agreement
//     and a failure moves only the keys the failed rank held.
//   - Key slots: found by linear probing from hash mod Slots (see
//     slots.go). A slot is claimed, under the rank's claim lock, by writing
//     the key into a key block at the slot's rank and compare-and-swapping
//     the block's address into a free slot; a prober that meets a slot with
//     its hash compares the block's key with its own and passes over a
//     colliding key's slot. Records carry the key too, and every read and
//     repair checks it. A deletion turns the key's slots into tombstones at
//     every replica at once (with a new generation, so that ranks that
//     remembered them look again), which later claims reuse. A slot holds a
//     lock word (the version of its last write and the rank holding the
//     lock), the current descriptor (address, version, length of the value's
//     record) and a pending descriptor for transactions.
//   - Localized CAS locking: a writer takes the key's lock at every replica
//     with CAS(free → me), or CAS(dead → me) once the holder's failure is
//     known, reading the slot in the same round trip; a lock held by a live
//     rank makes it give back what it took and retry after a backoff.
//   - Versions: the new version is one more than any version a replica
//     shows. A record (key, value, version, transaction tag) is checksummed
//     (CRC-32C) and written to a fresh heap block, then the descriptor, then
//     the lock word with the version, unlocked: a Put is two round trips, to
//     all replicas at once.
//   - Reads: Get reads every live replica's slot and record at once. When
//     they agree it is done; when they differ and a live rank holds a lock,
//     it waits; when they differ and nobody live does (a writer died in the
//     middle), it takes the locks and makes the replicas agree on the newest
//     complete copy first.
//   - Heap: a writer claims a chunk at a rank with one compare-and-swap and
//     allocates in it alone; each chunk counts its live bytes, decremented by
//     whoever replaces a value; empty sealed chunks return to the table, and
//     the owner moves the records still live in sparse ones (compact.go).
//     Every Put returns: with ErrFull when a replica has no room.
//   - Transactions: pending records at every replica of every key under all
//     the keys' locks, then the commit point — a Put of the transaction's
//     number under the writer's decision key — then pending becomes current.
//     A dead writer's pending records are rolled forward or back by whoever
//     meets them, according to the decision key.
//   - Localized recovery: each rank's housekeeping goroutine scans its own
//     slots (local memory) when ranks fail, and for the keys whose placement
//     changed or whose lock a failed rank held, it makes the replicas whole
//     again (a new replica gets the newest copy). Ranks that shared no key
//     with the failed rank do nothing.
//   - Growing back (grow.go): after comm.Replace, whose new communicator
//     gives each failed rank's number to a new, empty process, Grow at the
//     survivors and Join at the new ranks rebuild the window over it and
//     count the replaced numbers live again. Only keys whose first Copies
//     live ranks now include a new rank move. While they move, every
//     operation uses the union of a key's old and new replicas (an empty
//     new replica reads as a replica that differs, and is repaired); each
//     survivor checks the keys it holds whose placement changed (local
//     scan, as recovery does); then, after two agreements, the new
//     placement alone, and each survivor deletes its copies of keys it no
//     longer places. Stats.GrowKeys and GrowBytes count the moves.
//
// # A rank's duties
//
//  1. s, err := store.Open(ctx, c, store.Config{Copies: 3}) on every rank.
//  2. Put, Get, Delete, the conditional writes, Scan, Begin/Commit from any
//     goroutine, any rank.
//  3. After nc, err := c.Replace(ctx) on the store's communicator c: the
//     survivors call s.Grow(ctx, nc), the new ranks (whose startup.Init
//     returned nc, c.Replaces() true) s, err := store.Join(ctx, nc, opt).
//     Both return once the store is grown; the other calls may go on
//     meanwhile. When a rank of nc fails during them, both fail at every
//     rank with ftrma.ErrProcFailed and the store stays as it was: every
//     member of nc, the new ranks included, then calls nc.Replace, and
//     the survivors Grow, the new ranks (old and new) Join, on the result.
//     Respawn (survivors) and JoinRespawned (new ranks) do all of step 3,
//     retries included, in one call each (respawn.go).
//  4. s.Close(ctx) on every live rank.
//
// # Snapshots
//
// Copies in memory survive the loss of up to Copies−1 ranks; a snapshot
// survives the loss of the whole job. s.Snapshot(ctx, dir), collective,
// writes a consistent cut of the store under dir: every key with the value
// it had at one moment of the whole job — each write acknowledged before
// Snapshot began is in it, none that began after it returned, a write under
// way whole or not at all, and two writes of one client in their order (a
// later one in it means the earlier one is too). Writers are held back only
// while the cut is taken (each rank's operations under way finish, two
// agreements, and each rank scans its slot table and pins its heap: the
// longest put 130–180 ms for 100,000 keys of 1 KiB over 8 ranks sharing 2
// cores, milliseconds for small stores); the records are read from the
// pinned heap and the files written while writers go on. A snapshot is one
// directory: a file per rank and a manifest written last, each checksummed
// (DESIGN.md §8 has the format); until the manifest is there the snapshot
// does not exist. store.Restore(ctx, c, dir, cfg), collective, opens a store over c — any number of ranks — from the
// newest complete snapshot under dir, skipping newer ones that are torn or
// damaged and saying why, and fails with ErrNoSnapshot when none is
// complete. Restored keys carry new versions. Ranks that failed before a
// snapshot are left out of it, their keys read from live replicas; a rank
// that fails during one makes the survivors take the cut again without it,
// so the snapshot completes with every key that has a live copy, and every
// live rank returns the same result. A key whose every copy is lost fails
// Get and GetVersion with a *DataLostError (wrapping ErrDataLost) naming the
// last snapshot this rank took or restored and whether it holds the key.
// PruneSnapshots keeps the newest complete snapshots of a directory.
//
// Errors: ErrNotFound, ErrDataLost (every copy may be gone), ErrClosed,
// ErrConflict (a transaction's read changed before it committed),
// ErrFull (a replica's slots or chunks are used up, or it cannot attach
// memory: every Put returns, never waits for room; or, for a Commit, 500
// transactions of its rank are decided and not yet published everywhere:
// Commits under way, and those a failure cut short while they published),
// ftrma.ErrInvalid for bad
// input (empty, oversized or reserved key, oversized value), and the
// runtime's errors (ftrma.ErrProcFailed when no live replica is left,
// ftrma.ErrRevoked, context errors).
package store
