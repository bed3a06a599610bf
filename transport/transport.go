// Package transport defines the one interface every ftrma transport implements:
// registered memory, one-sided operations posted asynchronously toward a peer,
// per-peer completion, small control messages, and fencing.
//
// The concrete transports live in sub-packages: shm (shared memory between the
// ranks of a host), tcp, verbs (RDMA) and memnet (in-process, for tests);
// multi combines them, one per peer. Only a rank's start-up (package startup),
// the launcher, commands and tests name one; comm/ and window/ see this
// interface alone.
//
// Beyond the interface, a transport says what else it can do by the optional
// interfaces it implements: Allocator (peers reach only memory it
// allocated: shared memory), ForeignRegistrar (it also registers the
// caller's own memory, executing peers' operations on it), Sharer (it maps
// a peer's memory into this process), Reacher (it reaches only some ranks),
// Tester, RegionLimiter and Admitter (it takes in spares while it runs).
//
// A caller's duties, in order:
//
//  1. Set the receiver with SetReceiver before peers may send to this rank.
//  2. Register the memory peers may touch; publish the returned Key.
//  3. Post operations with Write, Read, CompareAndSwap64 and FetchAndAdd64. Each
//     returns a per-peer sequence number; the operation is complete when
//     Wait(ctx, peer, seq) or Flush(ctx, peer) returns nil.
//  4. Fence a peer that has been declared failed: nothing it sends lands after
//     Fence returns.
//  5. Close the transport.
//
// Example:
//
//	var old uint64
//	seq, err := t.CompareAndSwap64(peer, key, 0, 0, 1, &old)
//	if err == nil {
//		err = t.Wait(ctx, peer, seq) // old now holds the value before the swap
//	}
package transport

import (
	"context"
	"fmt"

	"github.com/ftrma/ftrma"
)

// Key names a registered region to peers, like an RDMA rkey. Keys are small,
// never zero, and not reused while the transport is open.
type Key uint32

// MaxKey is the largest key a transport hands out; window/ packs a key into the
// top bits of a dynamic-window address.
const MaxKey Key = 1<<24 - 1

// Seq numbers the operations posted toward one peer, starting at 1. Operations
// toward one peer complete in order: when sequence s is complete, so is every
// sequence before it.
type Seq uint64

// Caps describes what a transport does natively.
type Caps uint32

const (
	// CapOneSided: Write and Read execute without the target's CPU (RDMA,
	// shared memory). Without it the target's progress goroutine executes them.
	CapOneSided Caps = 1 << iota
	// CapNativeAtomics: CompareAndSwap64 and FetchAndAdd64 are executed by
	// hardware and are atomic with respect to the owner's own CPU atomics.
	CapNativeAtomics
	// CapOrdered: operations posted toward one peer take effect at the target in
	// posting order.
	CapOrdered
	// CapRemoteCompletion: a completed Write is visible in the target's memory,
	// not merely handed to the network.
	CapRemoteCompletion
	// CapLocalAtomics: the owner's own CPU atomics (sync/atomic) on its
	// registered memory are atomic with the CompareAndSwap64 and
	// FetchAndAdd64 peers apply to it. Without it (an RDMA device whose
	// atomics are atomic only among themselves) the owner reaches such words
	// through the transport, toward itself.
	CapLocalAtomics
	// CapWholeWords: Write and Read of at most WordAtomicWrite bytes store and
	// load every aligned 8-byte word whole, so a concurrent reader never sees
	// a torn word. Without it (an RDMA device copies bytes as it likes; Soft-
	// RoCE's copy does tear words) only the atomics touch a word whole.
	CapWholeWords
)

// Has reports whether every capability in x is present.
func (c Caps) Has(x Caps) bool { return c&x == x }

// WordAtomicWrite is the largest Write whose aligned 8-byte words a
// transport with CapWholeWords stores whole: a concurrent reader sees each
// such word either before or after the write, never torn. Larger writes may be
// landed by a bulk copy. window/ splits element-atomic accumulates into writes
// of this size (and into atomics on transports without CapWholeWords).
const WordAtomicWrite = 32 << 10

// MaxControlMessage is the largest control message every transport carries.
const MaxControlMessage = 64 << 10

// Receiver takes what a transport delivers. Its methods are called from the
// transport's progress goroutines, possibly concurrently for different peers but
// in order for one peer; they must not block and must not call Wait or Flush.
type Receiver interface {
	// HandleMessage delivers a control message from peer. msg is valid only for
	// the duration of the call.
	HandleMessage(from ftrma.Rank, msg []byte)
	// HandlePeerDown reports that the connection to peer is gone (the peer
	// exited or was fenced); every operation toward it fails with
	// ftrma.ErrProcFailed. It is called at most once per peer.
	HandlePeerDown(peer ftrma.Rank, err error)
}

// Allocator is implemented by transports whose peers can reach directly
// only memory the transport allocated itself, such as shared memory: their
// Register accepts buffers returned by Alloc (or sub-slices of them), and
// other memory only if they are ForeignRegistrars. Layers above allocate
// what they register through it when the transport has it (window.Alloc
// does).
type Allocator interface {
	// Alloc returns size bytes of zeroed, 8-byte aligned memory that peers
	// can reach once it is registered. It stays valid until Release.
	Alloc(size int) ([]byte, error)
	// Release frees memory returned by Alloc; no part of it may still be
	// registered. Releasing other memory fails with ftrma.ErrInvalid.
	Release(buf []byte) error
}

// ForeignRegistrar is implemented by an Allocator whose Register also takes
// memory it did not allocate (the caller's own): its peers cannot reach
// that memory themselves, so the rank executes their operations on it
// (transport/shm's target-executed regions, slower than its own memory).
// window.Create then registers the caller's buffer itself, not a copy.
type ForeignRegistrar interface {
	RegistersForeign() bool
}

// Sharer is implemented by transports that can map a peer's memory into
// this process, for the rank to load and store it directly
// (window.AllocateShared): shared memory, toward the ranks of its host.
type Sharer interface {
	// Shares reports whether MapShared can map memory of peer at all (peer
	// runs on this host and this transport reaches it).
	Shares(peer ftrma.Rank) bool
	// MapShared maps region key of peer, registered from memory of the
	// peer's Alloc, into this process and returns it, with the function
	// that unmaps it (call it once, after the last access). The mapping is
	// the caller's: whatever becomes of the peer (it fails, exits or
	// releases the memory) or of this transport, it stays valid and keeps
	// the peer's memory until unmap. For this rank it is the registered
	// memory itself, valid until Release, and unmap does nothing. A peer
	// Shares refuses, or a region not in memory from the peer's Alloc, fails
	// with an error wrapping ErrNotShared; an unknown key with
	// ftrma.ErrUnknownRegion; a peer down with ftrma.ErrProcFailed.
	MapShared(peer ftrma.Rank, key Key) (mem []byte, unmap func(), err error)
}

// Reacher is implemented by transports that reach only some ranks of the
// job (shm: the ranks of its host). A rank's start-up asks its transports,
// in priority order, which reaches each peer (multi.AskRoute). A transport
// that is no Reacher reaches every rank.
type Reacher interface {
	// Reaches reports whether this transport reaches rank r: it serves r
	// and r is not absent from it (a spare that started on another host).
	Reaches(r ftrma.Rank) bool
}

// ErrNotShared is why memory cannot be mapped for direct access (Sharer):
// it lies on another host, or in memory its owner's transport did not
// allocate. It wraps ftrma.ErrInvalid.
var ErrNotShared = fmt.Errorf("%w: not memory this process can map", ftrma.ErrInvalid)

// Tester is implemented by transports that can tell, without blocking,
// whether an operation is complete (window.Request.Test uses it; without it,
// it calls Wait with a context that has ended).
type Tester interface {
	// Test reports whether operation seq toward peer, and every one before
	// it, is complete, and if so the error Wait would return: the first
	// unreported failure up to seq (which Test then reports, as Wait does).
	// Toward a peer that is down an incomplete seq is done with the
	// peer-down error. It never blocks and may be called from any goroutine.
	Test(peer ftrma.Rank, seq Seq) (done bool, err error)
}

// RegionLimiter is implemented by transports that can register only so many
// regions at once (shared memory: the size of its key table). Layers that
// register many regions (the store's heap chunks) size themselves by it.
type RegionLimiter interface {
	// RegionLimit is how many regions one rank may have registered at once.
	RegionLimit() int
}

// Admitter is implemented by transports that can take in, while they run,
// a rank that had not started when they connected: a spare rank of a job
// started with spares (ftrun --respawn), which replaces a failed rank.
//
// Such a rank is absent until Admit: it is neither up nor failed.
// Operations, Wait, Flush and Send toward it fail at once with ErrAbsent
// (wrapping ftrma.ErrRankOutOfRange, saying the rank has not started), not
// with ftrma.ErrProcFailed, and no peer-down event is reported for it.
// PeerDown or Fence toward an absent rank makes it failed for good (a spare
// that died before this rank admitted it): operations toward it then fail
// with ftrma.ErrProcFailed, HandlePeerDown runs once, and it can never be
// admitted. Each transport's doc says how its caller names the absent ranks
// when it starts (a Config field, or the Network for memnet).
type Admitter interface {
	// Admit makes the absent rank peer a peer like any other: from its
	// return on, operations and messages toward peer are accepted (a
	// transport that still has to connect holds them until the connection
	// is up), and a failure of peer is reported as for any peer, with
	// HandlePeerDown and fencing. addr is what peer published for this
	// transport at the rendezvous (its entry in the address column).
	//
	// Admit fails with an error wrapping ftrma.ErrInvalid for self or a
	// rank that is already a peer or failed (a failed rank is never
	// admitted again), ftrma.ErrRankOutOfRange for a rank outside the job,
	// and ftrma.ErrClosed after Close. It does not block on the network and
	// may be called from any goroutine, a Receiver's included.
	Admit(peer ftrma.Rank, addr string) error
}

// ErrAbsent returns the error of operation op toward rank peer, which has
// not started (see Admitter). It wraps ftrma.ErrRankOutOfRange.
func ErrAbsent(op string, peer ftrma.Rank) error {
	return &ftrma.OpError{Op: op, Rank: peer, Err: fmt.Errorf("%w: rank %d has not started (a spare not admitted yet)", ftrma.ErrRankOutOfRange, peer)}
}

// ErrNotAdmittable returns Admit's error for a rank that cannot be
// admitted, for the reason why ("already a peer", "failed"). It wraps
// ftrma.ErrInvalid.
func ErrNotAdmittable(peer ftrma.Rank, why string) error {
	return &ftrma.OpError{Op: "admit", Rank: peer, Err: fmt.Errorf("%w: rank %d cannot be admitted: %s", ftrma.ErrInvalid, peer, why)}
}

// Transport is the one-sided communication layer of one rank.
//
// All methods may be called from any goroutine. Posting methods never block on
// the network for longer than it takes to queue the operation (they may wait for
// in-flight space, which a failing peer releases).
type Transport interface {
	// Rank is this process's rank; Size the number of ranks in the job.
	Rank() ftrma.Rank
	Size() int
	// Caps reports the transport's native capabilities.
	Caps() Caps

	// Register exposes mem to every peer and returns the key they name it by.
	// The caller keeps mem alive and must not move it until Deregister returns.
	// For atomic operations mem must be 8-byte aligned (atomics at offsets that
	// are not are refused with ftrma.ErrMisaligned).
	Register(mem []byte) (Key, error)
	// Deregister withdraws a region. Operations arriving afterwards fail with
	// ftrma.ErrUnknownRegion; Deregister waits for operations executing on the
	// region to finish.
	Deregister(key Key) error

	// Write posts a copy of src into peer's region key at offset off. src is
	// copied or sent before Write returns; the caller may reuse it at once.
	// Aligned words are stored whole when len(src) <= WordAtomicWrite.
	Write(peer ftrma.Rank, key Key, off uint64, src []byte) (Seq, error)
	// Read posts a read of len(dst) bytes from peer's region into dst. dst
	// belongs to the transport until the operation completes.
	Read(peer ftrma.Rank, key Key, off uint64, dst []byte) (Seq, error)
	// CompareAndSwap64 posts an atomic compare-and-swap of the 8-byte word at
	// off: if it equals old it becomes new. The prior value is stored in
	// *result, which belongs to the transport until completion.
	CompareAndSwap64(peer ftrma.Rank, key Key, off uint64, old, new uint64, result *uint64) (Seq, error)
	// FetchAndAdd64 posts an atomic add of delta to the 8-byte word at off and
	// stores the prior value in *result (which may be nil).
	FetchAndAdd64(peer ftrma.Rank, key Key, off uint64, delta uint64, result *uint64) (Seq, error)

	// Wait blocks until operation seq toward peer, and every one before it, is
	// complete. It returns the first error of an operation up to seq not yet
	// reported by Wait or Flush, ftrma.ErrProcFailed if the peer is down, or
	// ctx's error.
	Wait(ctx context.Context, peer ftrma.Rank, seq Seq) error
	// Flush waits until every operation posted toward peer so far is complete,
	// with the errors of Wait. Toward a peer that is down it returns
	// ftrma.ErrProcFailed even when nothing is pending.
	Flush(ctx context.Context, peer ftrma.Rank) error

	// Push starts sending the operations posted toward peer without waiting
	// for them, so that a Flush of several peers in turn overlaps their round
	// trips. Transports that send at once do nothing.
	Push(peer ftrma.Rank)

	// Send posts a control message of at most MaxControlMessage bytes to peer.
	// msg is copied; messages to one peer arrive in order, after the operations
	// posted before them. It fails when the peer is already known down; a
	// peer lost while sending is reported by HandlePeerDown instead.
	Send(peer ftrma.Rank, msg []byte) error
	// SetReceiver installs the receiver of control messages and peer-down
	// events. Messages and events that arrived before it was set are held (a
	// bounded number) and delivered to it first, in order.
	SetReceiver(r Receiver)

	// PeerDown tells the transport that peer's process is gone (its launcher
	// saw it exit, or its host die): peer is marked down as if the transport
	// had found it so itself, operations toward it fail with an error
	// wrapping ftrma.ErrProcFailed and cause, and the receiver's
	// HandlePeerDown runs once (not again when the transport finds out too).
	// It does nothing toward self or a peer already down.
	PeerDown(peer ftrma.Rank, cause error)

	// Fence cuts peer off: when Fence returns, nothing peer sends can touch
	// local memory or be delivered, and every operation toward peer fails with
	// ftrma.ErrProcFailed. Fencing is permanent.
	Fence(peer ftrma.Rank) error
	// Close fences every peer, releases the transport's resources and waits for
	// its goroutines. Operations after Close fail with ftrma.ErrClosed.
	Close() error
}
