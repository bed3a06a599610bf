package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// Leases. A writer that has just put a key keeps the key's lock at every
// replica (the lock words go on naming it) for as long as it keeps writing
// the key, so that its next put of the key needs no compare-and-swap: one
// round trip — record, descriptor, lock word with the new version, release
// of the old block — to all replicas at once. This is the common case of the
// workload, where each writer owns its keys. Nobody else can change the key
// while the lease lasts, so the writer's version and descriptors are the
// replicas'. A lease ends, writing the lock words back free, when the key has
// not been written for leaseIdle (by this rank's housekeeping), at the first
// put after leaseMax, as soon as another rank asks for the key, when one of
// its replicas fails or Grow installs another view (the key's placement may
// change: see leased), or when a transaction or repair of the key
// releases its locks, or any operation gives them back (unlockAll). A writer that finds the lock held by a live rank
// writes its rank into the slot's want word, which the lease holder reads
// with each put, and counts up the ask word in the holder's own header: the
// holder's housekeeping sees it at its next tick (local memory, no message),
// reads the want words of its leases and ends the wanted ones, so an idle
// lease holds a waiting writer up for a tick, not for leaseIdle. Readers are not held up: a lock held by a live rank only makes them
// wait when the replicas disagree, that is while a put is under way. A lease
// of a failed rank is taken over like any lock of a failed holder.
var (
	leaseIdle = 100 * time.Millisecond // a variable for tests
	leaseMax  = time.Second
)

type lease struct {
	reps        []leased // every replica of the key in view, in placement order
	version     uint64
	since, used time.Time
	view        *view // the view it was taken in
}

type leased struct {
	r          ftrma.Rank
	slot       int
	addr       uint64 // the slot's address
	block, len uint64 // the current record
	key, gen   uint64 // the slot's key word and generation
}

// leased returns the key's replicas as held under this rank's lease, when it
// has one and the key's placement has not changed since: the operation
// works in the view the lease was taken in, and none of the lease's
// replicas has failed. That is the placement check without computing the
// placement again on every put: in one view failures only accumulate, and a
// failed rank that is not among a key's replicas changes nothing of them
// (placement.replicas takes the first Copies live ranks of the key's order,
// one per host first, and passed that rank over already), so the replicas
// are the lease's until one of them fails or Grow installs another view.
func (o *op) leased(h ident) ([]*replica, bool) {
	o.leases.Lock()
	l := o.leases.m[h]
	o.leases.Unlock()
	if l == nil {
		return nil, false
	}
	same := l.view == o.v()
	for i := 0; same && i < len(l.reps); i++ {
		same = !o.failed(l.reps[i].r)
	}
	if !same {
		o.endLease(h)
		return nil, false
	}
	reps := make([]*replica, len(l.reps))
	held := make([]replica, len(l.reps)) // one allocation for all
	for i, lr := range l.reps {
		p := &held[i]
		*p = replica{r: lr.r, id: h, slot: lr.slot, ref: slotRef{o.v().epoch, lr.r, lr.slot}, addr: lr.addr, held: true,
			lock: lockWord(l.version, int(o.me)), keyAddr: lr.key, gen: lr.gen}
		putWords(p.buf[:], h.h, p.lock, lr.block, l.version, lr.len, 0, 0, 0, 0, lr.key, lr.gen)
		reps[i] = p
	}
	return reps, true
}

// keepLease reports whether a put of key h may keep (or take) a lease: not
// after leaseMax, and not for leaseIdle after the key was contended (this
// rank met another's lock on it, or was asked to end its lease).
func (s *Store) keepLease(h ident) bool {
	s.leases.Lock()
	defer s.leases.Unlock()
	if t, ok := s.leases.contended[h]; ok && time.Since(t) < leaseIdle {
		return false
	}
	l := s.leases.m[h]
	return l == nil || time.Since(l.since) < leaseMax
}

// contended notes that key h is wanted by more than one rank.
func (s *Store) contended(h ident) {
	s.leases.Lock()
	s.leases.contended[h] = time.Now()
	s.leases.Unlock()
}

// dropLease forgets the key's lease; the caller releases the locks.
func (s *Store) dropLease(h ident) {
	s.leases.Lock()
	delete(s.leases.m, h)
	s.leases.Unlock()
}

// endLease releases the key's lease: free lock words, posted, at its live
// replicas (they complete with the next flush, or the transport's own
// sending, and precede any later operation of this rank there). The caller
// holds the key's process lock. A lease outlives views: it is released
// through the current one's window (see live), and not at a rank that
// failed since it was taken (in the current view the rank's number may name
// a new process, whose memory is not the lease's).
func (s *Store) endLease(h ident) {
	s.leases.Lock()
	l := s.leases.m[h]
	delete(s.leases.m, h)
	s.leases.Unlock()
	if l == nil {
		return
	}
	lw, c := s.live(), s.current().c
	var w, zero [8]byte
	putWords(w[:], lockWord(l.version, -1))
	for _, lr := range l.reps {
		if !l.view.c.ProcFailed(lr.r) && !c.ProcFailed(lr.r) {
			lw.Put(lr.r, lr.addr+slotWant*8, zero[:])
			lw.Put(lr.r, lr.addr+slotLock*8, w[:])
			lw.Push(lr.r)
		}
	}
}

// expireLeases ends the leases not used for leaseIdle whose keys no
// goroutine of this process is working on.
func (s *Store) expireLeases() {
	var idle []ident
	s.leases.Lock()
	for h, l := range s.leases.m {
		if time.Since(l.used) >= leaseIdle {
			idle = append(idle, h)
		}
	}
	for h, t := range s.leases.contended {
		if time.Since(t) >= leaseIdle {
			delete(s.leases.contended, h)
		}
	}
	s.leases.Unlock()
	for _, h := range idle {
		if s.keys.tryLock(h) {
			s.endLease(h)
			s.keys.unlock(h)
		}
	}
}

// askLeases asks rank r to look at the want words of the leases it holds.
func (o *op) askLeases(r ftrma.Rank) {
	o.v().w.Accumulate(r, o.v().tables[r]+hdrAsk*8, []int64{1}, window.Sum)
}

// answerAsks ends the leases of this rank that another rank asked for, once
// the ask word has moved since seen; it returns the ask word now.
func (o *op) answerAsks(ctx context.Context, seen uint64) uint64 {
	ask := atomic.LoadUint64(&o.table[hdrAsk])
	if ask == seen {
		return ask
	}
	type read struct {
		id    ident
		want  [][8]byte
		stale bool // the lease is of an epoch before: end it unread
	}
	var reads []*read
	o.leases.Lock()
	for id, l := range o.leases.m {
		rd := &read{id: id, want: make([][8]byte, len(l.reps))}
		reads = append(reads, rd)
		if l.view.epoch != o.v().epoch {
			// Its ranks may be other processes now, where its slot
			// addresses name other memory, or none: a read there fails,
			// and the failure would reach whatever else this process
			// flushes toward the rank (F29).
			rd.stale = true
			continue
		}
		for i, lr := range l.reps {
			if !o.failed(lr.r) {
				o.v().w.Get(lr.r, lr.addr+slotWant*8, rd.want[i][:])
			}
		}
	}
	o.leases.Unlock()
	o.v().w.FlushAll(ctx) // a failed replica's read fails; the others are done
	if ctx.Err() != nil {
		return seen // the store is closing: the reads may still land
	}
	for _, rd := range reads {
		wanted := rd.stale
		for _, w := range rd.want {
			wanted = wanted || word(w[:], 0) != 0
		}
		if wanted && o.keys.tryLock(rd.id) {
			if !rd.stale {
				o.contended(rd.id)
			}
			o.endLease(rd.id)
			o.keys.unlock(rd.id)
		}
	}
	return ask
}
