//go:build linux

package shm

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"golang.org/x/sys/unix"
)

// The fast path of a one-sided operation, and the handshake that lets it do
// without a read-modify-write. The protocol is argued in doc.go ("The fast
// path"); this is who writes which word with which operation:
//
//   - The origin, pinned to its Go processor i (procPin), stores (plain
//     stores, announce) seq+1 and then target+1 into its own reader line i,
//     reads the target's state, its fence flag for the origin and the key
//     table (loads), does the operation, and stores 0 into target. It never
//     waits and takes no lock.
//   - The target's Deregister and Fence store their change (the key entry
//     cleared, the fence flag raised), issue membarrier's global expedited
//     command (barrier), and then wait, for every reader line of every local
//     rank that names it, until the line's target or seq changes (drainFast).
//   - This rank's unmappers (drop, the sweep of released segments, Release,
//     Close) first make the memory unreachable (peer.fast nil, the hot
//     cache emptied, closed set), then wait a grace period (grace) in which
//     every goroutine pinned before has unpinned, and only then unmap.

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// The membarrier(2) commands used.
const (
	membarrierGlobal                  = 1 << 0
	membarrierGlobalExpedited         = 1 << 1
	membarrierRegisterGlobalExpedited = 1 << 2
)

// registerBarrier registers this process for membarrier's global expedited
// command, so that a barrier issued by any registered process on the host
// (a target's Deregister or Fence) runs a full memory barrier on every CPU
// running one of its threads. It reports whether the kernel accepted it.
// Registering again is harmless.
func registerBarrier() bool {
	_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0)
	return errno == 0
}

// barrier runs a full memory barrier on every CPU that runs a thread of a
// process registered with registerBarrier (this one included): a store such
// a thread made before it is visible once barrier returns, and a load it
// makes after sees what this thread stored before the call.
func (t *Transport) barrier() {
	for {
		_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0)
		switch errno {
		case 0:
			return
		case unix.EINTR:
			continue
		}
		// Registration succeeded, so the kernel has the command; only a
		// filter on system calls added since could refuse it. The
		// non-expedited barrier (a grace period of the kernel's scheduler)
		// gives the same guarantee, slowly. Should that be refused too, no
		// rank is killed for it: a store leaves a CPU's store buffer within
		// nanoseconds in practice, and 10 ms is a million times that.
		t.log.Warn(fmt.Sprintf("shm transport: membarrier global expedited: %v; using the slow global barrier", errno))
		if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobal, 0, 0); errno != 0 {
			t.log.Error(fmt.Sprintf("shm transport: membarrier refused (%v) after registration succeeded; waiting 10ms instead", errno))
			time.Sleep(10 * time.Millisecond)
		}
		return
	}
}

// grace returns once every goroutine of this process that was pinned
// (procPin) when grace was called has unpinned: stopping the world waits
// for every processor to reach a safe point, which a pinned goroutine is
// not, and is a full memory barrier on each. runtime.ReadMemStats stops the
// world; TestGraceWaitsForPinned checks that it waits.
func grace() {
	if testSkipGrace {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
}

// fullFence is a full memory barrier of this thread: its stores before it
// are visible before its loads after it. A locked read-modify-write of a
// word of its own stack (no other CPU holds the line) is one.
func fullFence() {
	var w uint32
	atomic.AddUint32(&w, 1)
}

// execute runs o on the peer's memory, on the fast path when it can. opErr
// is the operation's own failure (region, bounds, alignment); status is what
// the access found out about the peer, for t.lost.
func (p *peer) execute(key transport.Key, off uint64, o *rma) (opErr, status error) {
	if p.t.fast && p.fastOp(key, off, o) {
		return nil, nil
	}
	return p.executeSlow(key, off, o)
}

// fastOp runs o on the fast path, announced in this rank's reader line of
// the processor it is pinned to, and reports whether it did. It does all of
// o or nothing: whatever is not the common case (a processor beyond
// readerSlots, a peer not mapped or not taking the fast path, Close under
// way, released segments to sweep, a peer that left, exited or fenced this
// rank, a key not registered or not in the hot cache, bytes out of bounds,
// a misaligned atomic) it leaves to executeSlow, which finds the same and
// says so.
func (p *peer) fastOp(key transport.Key, off uint64, o *rma) bool {
	t := p.t
	i := procPin()
	v := p.fast.Load()
	if i >= readerSlots || v == nil || t.closed.Load() {
		procUnpin()
		return false
	}
	// t.own stays mapped while this goroutine is pinned: Close sets closed
	// and waits a grace period before it unmaps it.
	line := unsafe.Add(t.readers, i*readerStride)
	tw, sw := (*uint64)(unsafe.Add(line, readerTarget)), (*uint64)(unsafe.Add(line, readerSeq))
	announce(sw, *sw+1)
	announce(tw, uint64(p.slot)+1)
	done := false
	if (p.self || atomic.LoadUint64(v.state) == stateOpen && atomic.LoadUint64(v.relGen) == p.relGen.Load()) &&
		atomic.LoadUint64(v.fenced) == 0 && atomic.LoadUint64(v.keyState(key)) == uint64(key)<<8|1 {
		if h := p.hot[key&(hotKeys-1)].Load(); h != nil && h.key == key {
			if b, ok := span(h.reg, off, o); ok && (!o.atomic() || aligned(b)) {
				if testHookFast != nil {
					testHookFast()
				}
				apply(b, o)
				done = true
			}
		}
	}
	announce(tw, 0)
	procUnpin()
	return done
}

// fastView is what the fast path reads of a control segment c, its words
// found once when c is mapped: the state and release count, the fence
// flag for this rank (in its active line), and the key table, whose
// layout parseCtl checked (c.lay.regions entries, a power of two). It
// holds c, and so the mapping's slice.
type fastView struct {
	c             *ctl
	state, relGen *uint64
	fenced        *uint64
	keys          unsafe.Pointer // key table entry 0
	mask          int            // c.lay.regions - 1
}

// newFastView is the view of c for the rank in slot selfSlot.
func newFastView(c *ctl, selfSlot int) *fastView {
	return &fastView{c: c, state: c.word(offState), relGen: c.word(offReleaseGen),
		fenced: c.word(c.active(selfSlot) + actFenced), keys: unsafe.Pointer(&c.mem[c.entry(0)]), mask: c.lay.regions - 1}
}

// keyState is the state word of key's entry in the key table.
func (v *fastView) keyState(key transport.Key) *uint64 {
	return (*uint64)(unsafe.Add(v.keys, (int(key)&v.mask)*entryBytes+entryState))
}

// drainFast waits until no reader line of p (a local rank, or this rank)
// that named this rank when drainFast began still does: each such line's
// target or seq has changed. The caller published its change and issued
// barrier first. It gives up as drain does: p down or its process gone, or
// Config.DrainTimeout passed.
func (t *Transport) drainFast(p *peer, what string) {
	if testSkipDrainFast {
		return
	}
	c := t.readersOf(p)
	if c == nil {
		return
	}
	me := uint64(t.selfSlot) + 1
	pid := p.pid // p.mu is held for reading (or p is this rank)
	start := time.Now()
	for i := range readerSlots {
		line := c.reader(i)
		tw, sw := c.word(line+readerTarget), c.word(line+readerSeq)
		if atomic.LoadUint64(tw) != me {
			continue
		}
		seq := atomic.LoadUint64(sw)
		if !t.waitOut(p, pid, start, what, func() bool { return atomic.LoadUint64(tw) != me || atomic.LoadUint64(sw) != seq }) {
			break
		}
	}
	t.releaseReaders(p)
}

// readersOf returns the control segment holding p's reader lines, mapping
// it if needed, with p.mu held for reading when p is a peer (releaseReaders
// lets go); nil when p cannot have an operation under way here (it is down,
// has not opened, or takes no fast path).
func (t *Transport) readersOf(p *peer) *ctl {
	if p.self {
		return t.own
	}
	if p.absent.Load() {
		return nil
	}
	c, err := p.lockCtl()
	if err != nil {
		return nil
	}
	if atomic.LoadUint64(c.word(offBarrier)) == 0 {
		p.mu.RUnlock()
		return nil
	}
	return c
}

// releaseReaders lets go of what readersOf took.
func (t *Transport) releaseReaders(p *peer) {
	if !p.self {
		p.mu.RUnlock()
	}
}

// waitOut waits until done reports true, yielding and then sleeping, and
// reports whether it did; it gives up (false) once p is down or its process
// (pid) is gone, or after Config.DrainTimeout from start (then it logs).
func (t *Transport) waitOut(p *peer, pid int, start time.Time, what string, done func() bool) bool {
	pause := time.Microsecond
	for i := 0; !done(); i++ {
		if !p.self && p.downErr() != nil {
			return false
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
		if !p.self && processGone(pid) {
			return false
		}
		if time.Since(start) > t.cfg.DrainTimeout {
			t.log.Warn(fmt.Sprintf("shm transport: %s: rank %d still has an operation under way after %v; not waiting longer", what, p.rank, t.cfg.DrainTimeout), ftrma.LogPeer, p.rank)
			return false
		}
	}
	return true
}

// Test hooks: testHookFast runs on the fast path right before the access
// itself, checks done; testSkipDrainFast and testSkipGrace break the
// handshake on purpose (the stress tests show that they then see
// late or unmapped accesses).
var (
	testHookFast      func()
	testSkipDrainFast bool
	testSkipGrace     bool
)
