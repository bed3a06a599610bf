package window

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Comm is what a window needs from its communicator; *comm.Comm satisfies it.
type Comm interface {
	Rank() ftrma.Rank
	Size() int
	Transport() transport.Transport
	Allgather(ctx context.Context, mine []byte) ([][]byte, error)
	Barrier(ctx context.Context) error
}

// Op is a reduction for Accumulate, GetAccumulate and FetchAndOp.
type Op int

const (
	// Sum adds the origin value to the target (int64 only).
	Sum Op = iota + 1
	// Replace stores the origin value at the target.
	Replace
	// NoOp leaves the target unchanged (GetAccumulate and FetchAndOp then
	// read it atomically).
	NoOp
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "SUM"
	case Replace:
		return "REPLACE"
	case NoOp:
		return "NO_OP"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// LockType selects a shared or an exclusive lock.
type LockType int

const (
	// Shared locks may be held by many ranks at once.
	Shared LockType = iota + 1
	// Exclusive locks exclude every other lock on the target.
	Exclusive
)

// ErrFreed reports use of a freed window. It wraps ftrma.ErrClosed.
var ErrFreed = fmt.Errorf("window freed: %w", ftrma.ErrClosed)

// A dynamic window's displacement is an address: the region key in the top
// 24 bits and a byte offset in the low 40.
const (
	addrShift = 40
	offMask   = 1<<addrShift - 1
)

// The lock word at each rank: the exclusive holder's rank+1 in the high 32
// bits, the number of shared holders in the low 32.
const (
	lockWordOff = 0
	ctlWords    = 8 // control block size in words; the rest is reserved
	sharedOne   = 1
)

func exclusiveWord(r ftrma.Rank) uint64 { return uint64(r+1) << 32 }

type kind int

const (
	allocated kind = iota
	created
	dynamic
)

// peerInfo is what every rank learns of every other at creation.
type peerInfo struct {
	key  transport.Key // the window memory's region (0 for dynamic windows)
	size uint64        // the window memory's length in bytes
	ctl  transport.Key // the control block's region (lock word)
}

// Window is one rank's handle on an RMA window. Its methods may be called from
// several goroutines at once.
type Window struct {
	c     Comm
	t     transport.Transport
	rank  ftrma.Rank
	kind  kind
	mem   []byte   // local window memory (nil for dynamic windows)
	ctl   []uint64 // local control block, registered as ctlKey
	peers []peerInfo
	freed atomic.Bool

	mu       sync.Mutex                 // guards locks and attached
	locks    map[ftrma.Rank]LockType    // explicit locks this rank holds
	attached map[transport.Key]struct{} // dynamic: regions attached here
}

// Allocate creates a window of size bytes of fresh zeroed, 8-byte aligned
// memory at every rank (sizes may differ between ranks). Collective.
func Allocate(ctx context.Context, c Comm, size int) (*Window, error) {
	if size < 0 {
		return nil, &ftrma.OpError{Op: "allocate", Rank: -1, Err: fmt.Errorf("%w: negative size %d", ftrma.ErrInvalid, size)}
	}
	return create(ctx, c, allocated, alignedBytes(size))
}

// Create creates a window exposing buf at this rank. Collective. For atomic
// operations buf should start on an 8-byte boundary; atomics at an unaligned
// address fail with ftrma.ErrMisaligned.
func Create(ctx context.Context, c Comm, buf []byte) (*Window, error) {
	return create(ctx, c, created, buf)
}

// CreateDynamic creates a window without memory; each rank then attaches
// buffers with Attach and publishes the addresses. Collective.
func CreateDynamic(ctx context.Context, c Comm) (*Window, error) {
	return create(ctx, c, dynamic, nil)
}

func create(ctx context.Context, c Comm, k kind, mem []byte) (*Window, error) {
	t := c.Transport()
	w := &Window{c: c, t: t, rank: c.Rank(), kind: k, mem: mem, ctl: make([]uint64, ctlWords),
		locks: make(map[ftrma.Rank]LockType), attached: make(map[transport.Key]struct{})}
	var info peerInfo
	var err error
	if k != dynamic {
		if info.key, err = t.Register(mem); err != nil {
			return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
		}
		info.size = uint64(len(mem))
	}
	if info.ctl, err = t.Register(wordBytes(w.ctl)); err != nil {
		w.deregister(info.key)
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
	}
	var mine [16]byte
	binary.BigEndian.PutUint32(mine[0:], uint32(info.key))
	binary.BigEndian.PutUint64(mine[4:], info.size)
	binary.BigEndian.PutUint32(mine[12:], uint32(info.ctl))
	all, err := c.Allgather(ctx, mine[:])
	if err != nil {
		w.deregister(info.key)
		w.deregister(info.ctl)
		return nil, &ftrma.OpError{Op: "create window", Rank: -1, Err: err}
	}
	w.peers = make([]peerInfo, len(all))
	for r, b := range all {
		if len(b) != len(mine) {
			return nil, &ftrma.OpError{Op: "create window", Rank: ftrma.Rank(r), Err: fmt.Errorf("%w: bad window description", ftrma.ErrInvalid)}
		}
		w.peers[r] = peerInfo{
			key:  transport.Key(binary.BigEndian.Uint32(b[0:])),
			size: binary.BigEndian.Uint64(b[4:]),
			ctl:  transport.Key(binary.BigEndian.Uint32(b[12:])),
		}
	}
	return w, nil
}

func (w *Window) deregister(k transport.Key) {
	if k != 0 {
		w.t.Deregister(k)
	}
}

// Bytes returns this rank's window memory (nil for a dynamic window). Local
// loads and stores may race with remote operations unless the ranks
// synchronize (Flush, locks, barriers), as in MPI.
func (w *Window) Bytes() []byte { return w.mem }

// Attach exposes buf in a dynamic window and returns its address; other ranks
// access buf at displacements address+offset. buf must stay alive and
// unmoved until Detach. For atomic operations buf should be 8-byte aligned.
func (w *Window) Attach(buf []byte) (uint64, error) {
	if err := w.check("attach"); err != nil {
		return 0, err
	}
	if w.kind != dynamic {
		return 0, &ftrma.OpError{Op: "attach", Rank: -1, Err: fmt.Errorf("%w: attach needs a dynamic window", ftrma.ErrInvalid)}
	}
	if uint64(len(buf)) > offMask {
		return 0, &ftrma.OpError{Op: "attach", Rank: -1, Err: fmt.Errorf("%w: buffer of %d bytes too large", ftrma.ErrInvalid, len(buf))}
	}
	key, err := w.t.Register(buf)
	if err != nil {
		return 0, &ftrma.OpError{Op: "attach", Rank: -1, Err: err}
	}
	w.mu.Lock()
	w.attached[key] = struct{}{}
	w.mu.Unlock()
	return uint64(key) << addrShift, nil
}

// Detach withdraws a buffer attached at addr. Later accesses to it fail at the
// origin's Flush with ftrma.ErrUnknownRegion.
func (w *Window) Detach(addr uint64) error {
	if err := w.check("detach"); err != nil {
		return err
	}
	key := transport.Key(addr >> addrShift)
	w.mu.Lock()
	_, ok := w.attached[key]
	delete(w.attached, key)
	w.mu.Unlock()
	if !ok || addr&offMask != 0 {
		return &ftrma.OpError{Op: "detach", Rank: -1, Err: fmt.Errorf("%w: address %#x was not returned by Attach", ftrma.ErrInvalid, addr)}
	}
	return w.t.Deregister(key)
}

// check fails when the window was freed.
func (w *Window) check(op string) error {
	if w.freed.Load() {
		return &ftrma.OpError{Op: op, Rank: -1, Err: ErrFreed}
	}
	return nil
}

// target validates an access of n bytes at disp of rank r and returns the
// region and offset to name to the transport.
func (w *Window) target(op string, r ftrma.Rank, disp uint64, n int, atomic bool) (transport.Key, uint64, error) {
	if w.freed.Load() {
		return 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: ErrFreed}
	}
	if r < 0 || int(r) >= len(w.peers) {
		return 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrRankOutOfRange}
	}
	if atomic && disp%8 != 0 {
		return 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: displacement %d", ftrma.ErrMisaligned, disp)}
	}
	if w.kind == dynamic {
		key, off := transport.Key(disp>>addrShift), disp&offMask
		if key == 0 {
			return 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: %#x is not an attached address", ftrma.ErrUnknownRegion, disp)}
		}
		if uint64(n) > offMask-off {
			return 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrOutOfBounds}
		}
		return key, off, nil
	}
	p := w.peers[r]
	if disp > p.size || uint64(n) > p.size-disp {
		return 0, 0, &ftrma.OpError{Op: op, Rank: r, Err: fmt.Errorf("%w: %d bytes at %d, window of rank %d has %d", ftrma.ErrOutOfBounds, n, disp, r, p.size)}
	}
	return p.key, disp, nil
}

func wrap(op string, r ftrma.Rank, err error) error {
	if err == nil {
		return nil
	}
	var oe *ftrma.OpError
	if errors.As(err, &oe) && oe.Op == op {
		return err
	}
	return &ftrma.OpError{Op: op, Rank: r, Err: err}
}

// Put copies data to disp in rank target's window. data may be reused when Put
// returns; the write is complete at the next Flush of target.
func (w *Window) Put(target ftrma.Rank, disp uint64, data []byte) error {
	_, err := w.put("put", target, disp, data)
	return err
}

func (w *Window) put(op string, target ftrma.Rank, disp uint64, data []byte) (transport.Seq, error) {
	key, off, err := w.target(op, target, disp, len(data), false)
	if err != nil {
		return 0, err
	}
	seq, err := w.t.Write(target, key, off, data)
	return seq, wrap(op, target, err)
}

// PutSync is a blocking Put: it returns once data is visible in target's
// window, or with the error of the write.
func (w *Window) PutSync(ctx context.Context, target ftrma.Rank, disp uint64, data []byte) error {
	seq, err := w.put("put", target, disp, data)
	if err != nil {
		return err
	}
	return wrap("put", target, w.t.Wait(ctx, target, seq))
}

// Get reads len(buf) bytes at disp of target's window into buf, which holds
// the data after the next Flush of target and must not be touched before.
func (w *Window) Get(target ftrma.Rank, disp uint64, buf []byte) error {
	_, err := w.get("get", target, disp, buf)
	return err
}

func (w *Window) get(op string, target ftrma.Rank, disp uint64, buf []byte) (transport.Seq, error) {
	key, off, err := w.target(op, target, disp, len(buf), false)
	if err != nil {
		return 0, err
	}
	seq, err := w.t.Read(target, key, off, buf)
	return seq, wrap(op, target, err)
}

// Request is a posted request-based operation.
type Request struct {
	w      *Window
	op     string
	target ftrma.Rank
	seq    transport.Seq
}

// Wait blocks until the request is complete: for Rput the data is visible at
// the target, for Rget it is in the buffer.
func (r *Request) Wait(ctx context.Context) error {
	return wrap(r.op, r.target, r.w.t.Wait(ctx, r.target, r.seq))
}

// Rput is Put returning a request to wait for.
func (w *Window) Rput(target ftrma.Rank, disp uint64, data []byte) (*Request, error) {
	seq, err := w.put("rput", target, disp, data)
	if err != nil {
		return nil, err
	}
	return &Request{w, "rput", target, seq}, nil
}

// Rget is Get returning a request to wait for.
func (w *Window) Rget(target ftrma.Rank, disp uint64, buf []byte) (*Request, error) {
	seq, err := w.get("rget", target, disp, buf)
	if err != nil {
		return nil, err
	}
	return &Request{w, "rget", target, seq}, nil
}

// Accumulate combines origin into the int64 elements at disp of target's
// window with op (Sum, Replace or NoOp). Each element is updated atomically;
// disp must be a multiple of 8. Complete at the next Flush.
func (w *Window) Accumulate(target ftrma.Rank, disp uint64, origin []int64, op Op) error {
	return w.accumulate("accumulate", target, disp, origin, nil, op)
}

// GetAccumulate is Accumulate that also returns, in result (len(origin)
// elements), the values before the update. Result is valid after Flush, except
// that Replace, which is a swap built from compare-and-swap, completes before
// GetAccumulate returns.
func (w *Window) GetAccumulate(target ftrma.Rank, disp uint64, origin, result []int64, op Op) error {
	if len(result) != len(origin) {
		return &ftrma.OpError{Op: "get-accumulate", Rank: target, Err: fmt.Errorf("%w: result has %d elements for %d", ftrma.ErrInvalid, len(result), len(origin))}
	}
	return w.accumulate("get-accumulate", target, disp, origin, result, op)
}

func (w *Window) accumulate(name string, target ftrma.Rank, disp uint64, origin, result []int64, op Op) error {
	key, off, err := w.target(name, target, disp, 8*len(origin), true)
	if err != nil {
		return err
	}
	switch op {
	case Sum:
		for i, v := range origin {
			var res *uint64
			if result != nil {
				res = (*uint64)(unsafe.Pointer(&result[i]))
			}
			if _, err := w.t.FetchAndAdd64(target, key, off+8*uint64(i), uint64(v), res); err != nil {
				return wrap(name, target, err)
			}
		}
	case Replace:
		if result == nil {
			_, err := w.writeWords(target, key, off, int64Bytes(origin))
			return wrap(name, target, err)
		}
		for i, v := range origin {
			old, err := w.swap(target, key, off+8*uint64(i), uint64(v))
			if err != nil {
				return wrap(name, target, err)
			}
			result[i] = int64(old)
		}
	case NoOp:
		if result != nil {
			_, err := w.t.Read(target, key, off, int64Bytes(result))
			return wrap(name, target, err)
		}
	default:
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: operation %v", ftrma.ErrInvalid, op)}
	}
	return nil
}

// writeWords writes b in pieces the transport stores in whole aligned words,
// so that every element is replaced atomically.
func (w *Window) writeWords(target ftrma.Rank, key transport.Key, off uint64, b []byte) (transport.Seq, error) {
	var seq transport.Seq
	for first := true; first || len(b) > 0; first = false {
		n := min(len(b), transport.WordAtomicWrite)
		var err error
		if seq, err = w.t.Write(target, key, off, b[:n]); err != nil {
			return 0, err
		}
		b, off = b[n:], off+uint64(n)
	}
	return seq, nil
}

// swap atomically replaces the word at off with v and returns the old value,
// by compare-and-swap until one succeeds. It waits for each round trip.
func (w *Window) swap(target ftrma.Rank, key transport.Key, off uint64, v uint64) (uint64, error) {
	var guess uint64
	for {
		var old uint64
		seq, err := w.t.CompareAndSwap64(target, key, off, guess, v, &old)
		if err != nil {
			return 0, err
		}
		if err := w.t.Wait(context.Background(), target, seq); err != nil {
			return 0, err
		}
		if old == guess {
			return old, nil
		}
		guess = old
	}
}

// AccumulateBytes stores data at disp of target's window; op must be Replace.
// Aligned 8-byte words are stored atomically (never torn); the whole is not.
func (w *Window) AccumulateBytes(target ftrma.Rank, disp uint64, data []byte, op Op) error {
	const name = "accumulate"
	if op != Replace {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: %v on bytes (only REPLACE)", ftrma.ErrInvalid, op)}
	}
	key, off, err := w.target(name, target, disp, len(data), false)
	if err != nil {
		return err
	}
	_, err = w.writeWords(target, key, off, data)
	return wrap(name, target, err)
}

// GetAccumulateBytes reads len(data) bytes at disp into result, then, for
// Replace, stores data there; NoOp only reads. The read precedes the store at
// the target; aligned words are read and stored whole. Complete at Flush.
func (w *Window) GetAccumulateBytes(target ftrma.Rank, disp uint64, data, result []byte, op Op) error {
	const name = "get-accumulate"
	if len(result) != len(data) {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: result of %d bytes for %d", ftrma.ErrInvalid, len(result), len(data))}
	}
	if op != Replace && op != NoOp {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: %v on bytes (only REPLACE, NO_OP)", ftrma.ErrInvalid, op)}
	}
	if _, err := w.get(name, target, disp, result); err != nil {
		return err
	}
	if op == Replace {
		key, off, err := w.target(name, target, disp, len(data), false)
		if err == nil {
			_, err = w.writeWords(target, key, off, data)
		}
		return wrap(name, target, err)
	}
	return nil
}

// FetchAndOp applies op (Sum, Replace or NoOp) with operand to the int64 at
// disp of target's window and stores the prior value in *result. Sum and NoOp
// complete at Flush; Replace completes before FetchAndOp returns.
func (w *Window) FetchAndOp(target ftrma.Rank, disp uint64, operand int64, result *int64, op Op) error {
	const name = "fetch-and-op"
	key, off, err := w.target(name, target, disp, 8, true)
	if err != nil {
		return err
	}
	res := (*uint64)(unsafe.Pointer(result))
	switch op {
	case Sum:
		_, err = w.t.FetchAndAdd64(target, key, off, uint64(operand), res)
	case NoOp:
		_, err = w.t.FetchAndAdd64(target, key, off, 0, res)
	case Replace:
		var old uint64
		old, err = w.swap(target, key, off, uint64(operand))
		if err == nil && result != nil {
			*result = int64(old)
		}
	default:
		err = fmt.Errorf("%w: operation %v", ftrma.ErrInvalid, op)
	}
	return wrap(name, target, err)
}

// CompareAndSwap replaces the int64 at disp of target's window with swap if it
// equals compare, and stores the prior value in *result (valid after Flush).
func (w *Window) CompareAndSwap(target ftrma.Rank, disp uint64, compare, swap int64, result *int64) error {
	const name = "compare-and-swap"
	key, off, err := w.target(name, target, disp, 8, true)
	if err != nil {
		return err
	}
	_, err = w.t.CompareAndSwap64(target, key, off, uint64(compare), uint64(swap), (*uint64)(unsafe.Pointer(result)))
	return wrap(name, target, err)
}

// Flush returns when every operation this rank posted toward target is
// complete at the target, with the first error among them.
func (w *Window) Flush(ctx context.Context, target ftrma.Rank) error {
	if _, _, err := w.target("flush", target, 0, 0, false); err != nil && !errors.Is(err, ftrma.ErrUnknownRegion) {
		return err
	}
	return wrap("flush", target, w.t.Flush(ctx, target))
}

// FlushAll is Flush toward every rank; it returns the first error.
func (w *Window) FlushAll(ctx context.Context) error {
	if err := w.check("flush"); err != nil {
		return err
	}
	var first error
	for r := range w.peers {
		if err := w.t.Flush(ctx, ftrma.Rank(r)); err != nil && first == nil {
			first = wrap("flush", ftrma.Rank(r), err)
		}
	}
	return first
}

// FlushLocal returns when the origin buffers of operations toward target may
// be reused and their results read. Puts copy their data when posted, so this
// waits for gets and atomics, which complete locally only when their answer
// arrives; it is therefore as strong as Flush.
func (w *Window) FlushLocal(ctx context.Context, target ftrma.Rank) error {
	return w.Flush(ctx, target)
}

// FlushLocalAll is FlushLocal toward every rank.
func (w *Window) FlushLocalAll(ctx context.Context) error { return w.FlushAll(ctx) }

// Lock takes a shared or exclusive lock on target's window, waiting (with
// backoff) while a conflicting lock is held, until ctx ends. This rank may hold
// one lock per target.
func (w *Window) Lock(ctx context.Context, target ftrma.Rank, lt LockType) error {
	const name = "lock"
	if _, _, err := w.target(name, target, 0, 0, false); err != nil && !errors.Is(err, ftrma.ErrUnknownRegion) {
		return err
	}
	if lt != Shared && lt != Exclusive {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: lock type %d", ftrma.ErrInvalid, lt)}
	}
	w.mu.Lock()
	if _, held := w.locks[target]; held {
		w.mu.Unlock()
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: already locked by this rank", ftrma.ErrLockHeld)}
	}
	w.locks[target] = lt // reserved; removed again on failure
	w.mu.Unlock()
	err := w.acquire(ctx, target, lt)
	if err != nil {
		w.mu.Lock()
		delete(w.locks, target)
		w.mu.Unlock()
	}
	return wrap(name, target, err)
}

func (w *Window) acquire(ctx context.Context, target ftrma.Rank, lt LockType) error {
	ctl := w.peers[target].ctl
	var b backoff
	for {
		var old uint64
		var seq transport.Seq
		var err error
		if lt == Exclusive {
			seq, err = w.t.CompareAndSwap64(target, ctl, lockWordOff, 0, exclusiveWord(w.rank), &old)
		} else {
			seq, err = w.t.FetchAndAdd64(target, ctl, lockWordOff, sharedOne, &old)
		}
		if err == nil {
			err = w.t.Wait(ctx, target, seq)
		}
		if err != nil {
			return err
		}
		if lt == Exclusive && old == 0 || lt == Shared && old>>32 == 0 {
			return nil
		}
		if lt == Shared { // an exclusive holder: take the increment back
			seq, err = w.t.FetchAndAdd64(target, ctl, lockWordOff, ^uint64(sharedOne-1), nil)
			if err == nil {
				err = w.t.Wait(ctx, target, seq)
			}
			if err != nil {
				return err
			}
		}
		if err := b.wait(ctx); err != nil {
			return err
		}
	}
}

// Unlock completes every operation toward target (as Flush) and releases this
// rank's lock on it.
func (w *Window) Unlock(ctx context.Context, target ftrma.Rank) error {
	const name = "unlock"
	if _, _, err := w.target(name, target, 0, 0, false); err != nil && !errors.Is(err, ftrma.ErrUnknownRegion) {
		return err
	}
	w.mu.Lock()
	lt, held := w.locks[target]
	w.mu.Unlock()
	if !held {
		return &ftrma.OpError{Op: name, Rank: target, Err: ftrma.ErrNotLocked}
	}
	// On an ordered transport the release is posted behind the epoch's
	// operations and one wait covers both; otherwise flush first.
	var flushErr error
	if !w.t.Caps().Has(transport.CapOrdered) {
		flushErr = w.t.Flush(ctx, target)
	}
	delta := ^uint64(sharedOne - 1)
	if lt == Exclusive {
		delta = -exclusiveWord(w.rank)
	}
	seq, err := w.t.FetchAndAdd64(target, w.peers[target].ctl, lockWordOff, delta, nil)
	if err == nil {
		err = w.t.Wait(ctx, target, seq)
	}
	w.mu.Lock()
	delete(w.locks, target)
	w.mu.Unlock()
	if flushErr != nil {
		return wrap(name, target, flushErr)
	}
	return wrap(name, target, err)
}

// LockAll takes a shared lock on every rank, in rank order.
func (w *Window) LockAll(ctx context.Context) error {
	for r := range w.peers {
		if err := w.Lock(ctx, ftrma.Rank(r), Shared); err != nil {
			for q := range r {
				w.Unlock(ctx, ftrma.Rank(q))
			}
			return err
		}
	}
	return nil
}

// UnlockAll releases the locks of LockAll; it returns the first error.
func (w *Window) UnlockAll(ctx context.Context) error {
	var first error
	for r := range w.peers {
		if err := w.Unlock(ctx, ftrma.Rank(r)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Free completes this rank's operations, waits for every rank to do the same
// (collective), and withdraws the window's memory. It fails with
// ftrma.ErrLockHeld, and frees nothing, while this rank holds a lock. After
// Free every method returns ErrFreed.
func (w *Window) Free(ctx context.Context) error {
	if err := w.check("free"); err != nil {
		return err
	}
	w.mu.Lock()
	if n := len(w.locks); n > 0 {
		w.mu.Unlock()
		return &ftrma.OpError{Op: "free", Rank: -1, Err: fmt.Errorf("%w: %d lock(s) still held", ftrma.ErrLockHeld, n)}
	}
	w.mu.Unlock()
	flushErr := w.FlushAll(ctx)
	barrierErr := w.c.Barrier(ctx)
	if w.freed.Swap(true) {
		return &ftrma.OpError{Op: "free", Rank: -1, Err: ErrFreed}
	}
	me := w.peers[w.rank]
	w.deregister(me.key)
	w.deregister(me.ctl)
	w.mu.Lock()
	for k := range w.attached {
		w.deregister(k)
	}
	w.attached = nil
	w.mu.Unlock()
	if flushErr != nil {
		return flushErr
	}
	return wrap("free", -1, barrierErr)
}

// backoff paces lock retries: a few yields, then sleeps doubling to 1 ms.
type backoff struct{ n int }

func (b *backoff) wait(ctx context.Context) error {
	b.n++
	d := time.Duration(1<<min(b.n, 10)) * time.Microsecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func alignedBytes(n int) []byte {
	return wordBytes(make([]uint64, (n+7)/8))[:n:n]
}

func wordBytes(w []uint64) []byte {
	if len(w) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 8*len(w))
}

func int64Bytes(v []int64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}
