package tcp

import (
	"runtime"
	"sync/atomic"
	"syscall"
)

// Polite busy-polling (Config.Polite), for ranks that share CPUs.
//
// A waiter that parks costs two wake-ups per round trip (its own and the
// target's), and a wake-up of a process whose CPU went idle is slow: on a
// virtual machine it is an exit and a re-entry, 20-30 µs measured here,
// against a few µs for a poll that finds the answer. Busy-polling avoids
// them, but a rank that spins on a CPU it shares takes that CPU from the
// ranks it is waiting for. Polite polling keeps the first and not the
// second, as Open MPI does when oversubscribed (mpi_yield_when_idle):
//
//   - between two empty polls the goroutine lets the process's other
//     goroutines run (runtime.Gosched: with GOMAXPROCS=1 a spinning
//     goroutine would hold them off) and gives up the CPU to any other
//     runnable thread (sched_yield), so spinning only fills time that would
//     otherwise be idle;
//   - a spinGauge stops the spinning when it does not pay: on a host whose
//     CPUs are all busy the answer comes after the spin has ended, and each
//     empty poll then only adds context switches. Each spin that ends
//     without its answer lowers the gauge by two, each that gets it raises
//     it by one; at zero the goroutine parks at once, and every
//     probeEvery-th time spins anyway, to notice when spinning pays again.
//
//   - one goroutine of the process spins at a time (Transport.spinning), and
//     it serves every connection, not only its own: with GOMAXPROCS=1 the
//     Go scheduler does not consult the netpoller while a goroutine that
//     yields with Gosched is runnable (it finds that goroutine on its
//     global queue first), so a request on another connection would wait
//     for the spin's end, or for the scheduler's 10 ms poll, before its
//     progress goroutine woke. The spinner asks the transport's own epoll
//     set (level-triggered, beside the netpoller's) which sockets hold
//     bytes, and polls those whose read token is free (serveReady).
//
// Waiters (Wait, Flush) and progress goroutines (the poll after serving a
// request) keep a gauge each per transport: their answers come on
// different clocks (a round trip, and the next request).

// spinGauge counts whether recent spins paid (see above).
type spinGauge struct {
	score atomic.Int32
	calls atomic.Uint32
}

const (
	gaugeMax   = 8
	probeEvery = 16
)

// allow reports whether the next spin may start.
func (g *spinGauge) allow() bool {
	return g.score.Load() > 0 || g.calls.Add(1)%probeEvery == 0
}

// paid records whether a spin got what it waited for.
func (g *spinGauge) paid(ok bool) {
	d := int32(-2)
	if ok {
		d = 1
	}
	for {
		s := g.score.Load()
		n := min(max(s+d, 0), gaugeMax)
		if n == s || g.score.CompareAndSwap(s, n) {
			return
		}
	}
}

// newGauge returns a gauge that lets spins start.
func newGauge() *spinGauge {
	g := new(spinGauge)
	g.score.Store(gaugeMax)
	return g
}

// yieldCPU lets the process's other goroutines and the host's other
// runnable threads run before the next poll.
func yieldCPU() {
	runtime.Gosched()
	syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}

// pollSet is the transport's own epoll set over its peers' sockets, for
// polite spinners (serveReady); -1 when there is none.
type pollSet struct {
	fd atomic.Int64
}

// open creates the set; without one, spinners poll their own socket only.
func (ps *pollSet) open() {
	ps.fd.Store(-1)
	if fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err == nil {
		ps.fd.Store(int64(fd))
	}
}

// add watches fd, the socket of rank r's connection.
func (ps *pollSet) add(fd int, r int32) {
	if e := ps.fd.Load(); e >= 0 {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: r}
		syscall.EpollCtl(int(e), syscall.EPOLL_CTL_ADD, fd, &ev)
	}
}

// close releases the set; spinners that still ask get nothing.
func (ps *pollSet) close() {
	if e := ps.fd.Swap(-1); e >= 0 {
		syscall.Close(int(e))
	}
}

// serveReady polls every peer but skip whose socket holds bytes and whose
// read token is free, and returns the bytes it read. A closed socket leaves
// the set by itself; an event for a rank that went down finds its peer
// closed for reading.
func (t *Transport) serveReady(skip *peer) int {
	e := t.pollSet.fd.Load()
	if e < 0 {
		return 0
	}
	var evs [16]syscall.EpollEvent
	n, err := syscall.EpollWait(int(e), evs[:], 0)
	if err != nil {
		return 0
	}
	total := 0
	for _, ev := range evs[:n] {
		if ev.Fd < 0 || int(ev.Fd) >= len(t.peers) {
			continue
		}
		q := t.peers[ev.Fd]
		if q == skip || q.self || !q.rmu.TryLock() {
			continue
		}
		m, err := q.pollLocked()
		q.rmu.Unlock()
		if err != nil {
			q.down(err, false)
			continue
		}
		total += m
	}
	return total
}
