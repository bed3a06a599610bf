package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
)

// Fast reads. A Get reads the key's primary replica alone — the first live
// replica in placement order — in one round trip (its slot, and the record
// the slot pointed to when this rank last looked), and answers from it when
// the slot shows that its current version is done: every live replica held
// it when it was written. Otherwise (a write under way, a transaction
// pending, the key absent there, the primary failing) it reads every live
// replica as before.
//
// Done versions. After a write's flush has returned from every replica (so
// the version is at all of them and no repair can go back behind it), the
// writer posts the version into the primary's done word, and does not wait
// for it (markDone); with one replica, it posts it right after the record,
// in the same batch, and it lands after it (doneInBatch). A primary whose
// current version equals its done word therefore holds a version that no
// later read can miss, and any write that completed before the Get began
// has reached the primary, since every write writes every live replica. A
// done word left behind by an earlier write, or by a slot's earlier key, or
// one that landed late, after a later write's, is older than the slot's
// current version (versions only grow in a slot), so it sends readers the
// long way, never to a wrong value.
//
// Failure views. Ranks learn of a failure at slightly different times. A
// writer that knows rank f failed writes the keys f held elsewhere; a
// reader that does not know yet would still read f (on shared memory a dead
// rank's memory stays readable) and miss the write. So no write goes ahead
// while a failure it knows of is unsettled: until every live rank has marked
// the failure seen in its failures-seen bitmap (its housekeeping does, a
// tick after its runtime learns of it), writes wait (in replicas, with
// claim). A Get that starts after a write returned thus knows every failure
// that write knew, and picks the same primary or a later one. (A rank that
// is itself declared failed while still running is not waited for; until it
// learns of that and stops, its fast reads may be stale — the partition
// problem the runtime's primary-world rules address.)
//
// Transports whose reads may tear aligned words (CapWholeWords unset) get
// no fast reads: a torn version word could pass the checks.

// seenWords is the size of the failures-seen bitmap of a job of n ranks.
func seenWords(n int) int { return (n + 63) / 64 }

// markSeen sets this rank's bits for the failures its runtime knows of.
func (o *op) markSeen() {
	base := int(o.seen0 / 8)
	for w := range seenWords(o.n) {
		var bits uint64
		for b := range 64 {
			if r := w*64 + b; r < o.n && o.failed(ftrma.Rank(r)) {
				bits |= 1 << b
			}
		}
		if atomic.LoadUint64(&o.table[base+w]) != bits {
			atomic.StoreUint64(&o.table[base+w], bits)
		}
	}
}

// settleBound bounds how long a write waits for the live ranks to learn of
// a failure (their housekeeping marks it within milliseconds; a rank that
// does not is hung and will itself be declared failed).
const settleBound = 10 * time.Second

// awaitSettled returns once every failure this rank knows of is known to
// every rank it thinks live, or fails after settleBound.
func (o *op) awaitSettled(ctx context.Context) error {
	start := time.Now()
	for i := 0; ; i++ {
		var todo []ftrma.Rank
		o.settled.Lock()
		for r := range ftrma.Rank(o.n) {
			if o.failed(r) && !o.settled.ranks[r] {
				todo = append(todo, r)
			}
		}
		o.settled.Unlock()
		if len(todo) == 0 {
			return nil
		}
		seen, err := o.readSeen(ctx)
		if err != nil {
			return err
		}
		o.settled.Lock()
		left := 0
		for _, f := range todo {
			all := true
			for _, bits := range seen {
				all = all && bits[f/64]&(1<<(f%64)) != 0
			}
			if all {
				o.settled.ranks[f] = true
			} else {
				left++
			}
		}
		o.settled.Unlock()
		if left == 0 {
			return nil
		}
		if o.stale() {
			// The next view may count a rank live again that this one
			// counts failed: the others stop marking it.
			return errNewView
		}
		if time.Since(start) > settleBound {
			return fmt.Errorf("%w: live ranks did not learn of %d failures in %v", ftrma.ErrProcFailed, left, settleBound)
		}
		if err := backoff(ctx, min(i, 5)); err != nil {
			return err
		}
	}
}

// readSeen reads the failures-seen bitmaps of the ranks this rank thinks
// live (a rank failing or closing meanwhile is left out).
func (o *op) readSeen(ctx context.Context) (map[ftrma.Rank][]uint64, error) {
	bufs := map[ftrma.Rank][]byte{}
	for r := range ftrma.Rank(o.n) {
		if o.failed(r) {
			continue
		}
		b := make([]byte, seenWords(o.n)*8)
		if o.v().w.Get(r, o.v().tables[r]+o.seen0, b) == nil {
			bufs[r] = b
		}
	}
	out := map[ftrma.Rank][]uint64{}
	for r, b := range bufs {
		if err := o.flush(ctx, r); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue // failed or closed: not a reader to wait for
		}
		ws := make([]uint64, seenWords(o.n))
		for i := range ws {
			ws[i] = word(b, i)
		}
		out[r] = ws
	}
	return out, nil
}

// markDone posts version v into the done word of the key's primary replica
// (reps[0], reps in placement order), once the write of v is complete at
// every live replica. It is posted, not pushed: a send of its own (on tcp a
// system call) on every write, before the write returns, for a word no
// reader needs at once. It leaves with this rank's next operation toward
// the primary (a flush there completes it first: this rank's own fast reads
// find it), or when the transport sends what it holds: tcp within its
// nudge (1 ms after the first frame it held), shm and verbs when posted
// (a posted operation takes effect, or goes to the device, at once). A fast
// read that comes before it goes the long way, as for a write under way;
// one that lands late, after a later write of another rank marked its own
// version, leaves the done word behind the current version until the
// key's next write: the long way again, never a wrong value (see above).
// A write with one replica marks it in its batch instead (doneInBatch).
func (o *op) markDone(reps []*replica, v uint64) {
	if len(reps) == 0 || reps[0].failed || reps[0].slot < 0 {
		return
	}
	o.postDone(reps[0], v)
}

// postDone posts version v into p's done word.
func (o *op) postDone(p *replica, v uint64) {
	var w [8]byte
	putWords(w[:], v)
	o.v().w.Put(p.r, p.addr+slotDone*8, w[:])
}

// doneInBatch reports whether a write of reps marks its version done in
// its batch, after the record, the descriptor and the lock word: when the
// primary is its only replica. Operations toward a rank take effect in
// posting order, so the done word lands after the record there, which is
// then at every live replica whenever a reader sees the version done
// (markDone's wait for the flush is for the other replicas), and it costs
// no operation of its own.
func doneInBatch(reps []*replica) bool { return len(reps) == 1 }

// fastGet reads the key's primary alone; ok is false when the answer must
// come from every replica (see above).
func (o *op) fastGet(ctx context.Context, id ident) (val []byte, ver uint64, ok bool) {
	if v := o.v(); !v.fast || v.old != nil && !v.dropping {
		return nil, 0, false // no fast reads in the transition view (grow.go)
	}
	ranks := o.v().replicas(id.h, o.failed)
	if len(ranks) == 0 {
		return nil, 0, false
	}
	r := ranks[0]
	t := traceOf(ctx)
	t.phase("fast.find")
	sl, err := o.findSlot(ctx, r, id, false)
	if err != nil || sl.idx < 0 {
		return nil, 0, false
	}
	p := &replica{r: r, id: id, slot: sl.idx, ref: slotRef{o.v().epoch, r, sl.idx}, addr: o.slotAddr(r, sl.idx), keyAddr: sl.key, gen: sl.gen}
	o.cache.Lock()
	guess := o.cache.desc[p.ref]
	o.cache.Unlock()
	limit := o.recordLimit()
	t.phase("fast.read")
	if o.v().w.Get(r, p.addr, p.buf[:]) != nil {
		return nil, 0, false
	}
	if guess.addr != 0 && guess.len <= limit {
		p.rec = make([]byte, guess.len)
		if o.v().w.Get(r, guess.addr, p.rec) != nil {
			p.rec = nil
		}
	}
	if o.flush(ctx, r) != nil {
		return nil, 0, false
	}
	if o.checkSlots([]*replica{p}) != nil {
		return nil, 0, false
	}
	a, n, v := p.word(slotCurAddr), p.word(slotCurLen), p.word(slotCurVer)
	if a == 0 || n > limit || p.word(slotPAddr) != 0 || v != p.word(slotDone) {
		return nil, 0, false
	}
	if a != guess.addr || n != guess.len || p.rec == nil {
		t.phase("fast.record") // the guess was wrong
		p.rec = make([]byte, n)
		if o.v().w.Get(r, a, p.rec) != nil || o.flush(ctx, r) != nil {
			return nil, 0, false
		}
		o.cache.Lock()
		o.cache.desc[p.ref] = desc{a, n}
		o.cache.Unlock()
	}
	rec, good := decodeRecord(p.rec)
	if !good || !rec.is(id) || rec.version != v {
		return nil, 0, false
	}
	return rec.value, v, true
}
