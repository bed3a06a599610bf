package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
)

// replica is one copy of a key during an operation.
type replica struct {
	r       ftrma.Rank
	id      ident  // the key
	slot    int    // slot index at r; -1: r has no slot for the key
	keyAddr uint64 // the slot's key word and generation when this rank found
	gen     uint64 // it: the slot is the key's while they are unchanged
	addr    uint64 // the slot's address
	expect  uint64 // lock word a compare-and-swap expects
	res     int64  // its result
	held    bool
	took    bool   // the lock was taken from a failed holder
	lock    uint64 // the lock word found when acquired
	buf     [slotBytes]byte
	rec     []byte // the current record, when read
	prec    []byte // the pending record, when read
	failed  bool
	written bool
	block   uint64 // the block publish wrote
	wanted  bool   // a live rank holds the lock: ask it to end its lease
	holder  ftrma.Rank
	floor   [8]byte // the rank's version floor, read with the lock
	ref     slotRef
	guess   desc // where the record was when this rank last looked
	want    [8]byte
	same    bool   // already holds what publish would write: only unlock
	pending uint64 // block of a transaction's pending record
	done    bool   // the operations posted toward it are complete (flushed, or op.completed)
}

func (p *replica) word(i int) uint64 { return word(p.buf[:], i) }

func (o *op) slotAddr(r ftrma.Rank, i int) uint64 {
	return o.v().tables[r] + uint64(hdrWords+i*slotWords)*8
}

// replicas returns the key's live replicas with their slots found (claimed
// when claim is set).
func (o *op) replicas(ctx context.Context, id ident, claim bool) ([]*replica, error) {
	if claim {
		// A write: not before every live rank knows the failures this one
		// does (see fastread.go).
		if err := o.awaitSettled(ctx); err != nil {
			return nil, err
		}
	}
	ranks := o.v().replicas(id.h, o.failed)
	reps := make([]*replica, 0, len(ranks))
	for _, r := range ranks {
		traceOf(ctx).phase("find") // after a claim at the one before
		i, err := o.findSlot(ctx, r, id, claim)
		if retryErr(err) {
			return nil, fmt.Errorf("%w: %v", errRetry, err)
		}
		if err != nil {
			return nil, err
		}
		p := &replica{r: r, id: id, slot: i.idx, ref: slotRef{o.v().epoch, r, i.idx}, keyAddr: i.key, gen: i.gen}
		if i.idx >= 0 {
			p.addr = o.slotAddr(r, i.idx)
			o.cache.Lock()
			p.expect = o.cache.lock[p.ref]
			o.cache.Unlock()
		}
		reps = append(reps, p)
	}
	return reps, nil
}

// errLastVersion: the key's versions are used up (2^40 writes).
var errLastVersion = fmt.Errorf("%w: key reached its last version", ftrma.ErrInvalid)

// flushAll flushes toward every replica, marking the ones that failed; the
// first other error is returned.
func (o *op) flushAll(ctx context.Context, reps []*replica) (anyFailed bool, err error) {
	t := traceOf(ctx) // one round trip, however many replicas
	push := t.now()
	for _, p := range reps {
		if !p.failed {
			o.v().w.Push(p.r)
		}
	}
	t.sent(push)
	t.batch()
	for _, p := range reps {
		if p.failed {
			continue
		}
		start := t.now()
		e := o.v().w.Flush(ctx, p.r)
		t.flushed(start)
		p.done = e == nil
		if retryErr(e) {
			p.failed, anyFailed = true, true
			p.done = o.completed(ctx, p.r, e)
		} else if e != nil && err == nil {
			err = e
		}
	}
	return anyFailed, err
}

// lockAll takes the key's lock at every replica (which must all have slots):
// compare-and-swap free → this rank, or failed holder → this rank once the
// failure is known. Each compare-and-swap goes with a read of the whole slot,
// executed after it at the target, so the slot is read under the lock. When
// a live rank holds one of the locks, the ones taken are given back and the
// attempt starts again after a backoff. A replica failing returns errRetry.
func (o *op) lockAll(ctx context.Context, id ident, reps []*replica) error {
	var hw *holdWatch
	for attempt := 0; ; attempt++ {
		traceOf(ctx).phase("lock")
		var perr error // posting failed: the replicas from there on are not tried
		for _, p := range reps {
			if p.held {
				continue
			}
			// A replica not tried in this attempt has no result: what
			// p.res holds is the last attempt's, whose lock was given
			// back since (F30).
			p.done = false
			if perr != nil {
				p.failed = true
				continue
			}
			if perr = o.v().w.CompareAndSwap(p.r, p.addr+slotLock*8, int64(p.expect), int64(lockWord(lockVersion(p.expect), int(o.me))), &p.res); perr != nil {
				p.failed = true
				continue
			}
			if perr = o.v().w.Get(p.r, p.addr, p.buf[:]); perr == nil {
				perr = o.v().w.Get(p.r, o.v().tables[p.r]+hdrFloor*8, p.floor[:])
			}
		}
		if hook := testHookPosted.get(); hook != nil && len(reps) > 0 {
			hook(ctx, o.Store, "lock", reps[0].id.key)
		}
		// The compare-and-swaps posted are flushed and looked at even when
		// the attempt fails, so that the locks they took are given back.
		if failed, err := o.flushAll(ctx, reps); perr != nil || failed || err != nil {
			for _, p := range reps {
				if !p.done && !p.failed && ctx.Err() != nil {
					p.done = o.completed(ctx, p.r, ctx.Err())
				}
			}
			o.checkHeld(reps)
			o.unlockAll(ctx, reps)
			if perr != nil {
				return o.retryable(perr)
			}
			if err == nil {
				err = errRetry
			}
			return err
		}
		conflict, again := o.checkHeld(reps)
		if err := o.checkSlots(reps); err != nil {
			o.unlockAll(ctx, reps)
			return err
		}
		if !conflict && !again {
			return nil
		}
		if conflict {
			// Ask the live holders to end their leases, then give back
			// what was taken; take no lease on a contended key.
			o.contended(id)
			var want [8]byte
			putWords(want[:], uint64(o.me)+1)
			asked := map[ftrma.Rank]bool{}
			var held uint64
			holder := ftrma.Rank(-1)
			for _, p := range reps {
				if p.wanted {
					held = fingerprint(held, uint64(p.res))
					holder = p.holder
					o.v().w.Put(p.r, p.addr+slotWant*8, want[:])
					p.wanted = false
					if !asked[p.holder] {
						asked[p.holder] = true
						o.askLeases(p.holder)
					}
				}
			}
			o.unlockAll(ctx, reps)
			o.st.retries.Add(1)
			if o.stale() {
				return errNewView // the holder may be waiting for the next view
			}
			if hw == nil {
				hw = o.holdWatch()
			}
			if err := hw.met(held, fmt.Sprintf("key %q", id.key), holder); err != nil {
				return err
			}
			traceOf(ctx).phase("backoff")
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
	}
}

// checkHeld looks at the compare-and-swap results: which locks are now held,
// and whether a live rank holds one (conflict) or a retry with the value seen
// may succeed at once (again).
func (o *op) checkHeld(reps []*replica) (conflict, again bool) {
	for _, p := range reps {
		if p.held || !p.done {
			continue // held already, or its compare-and-swap's result is unknown
		}
		got := uint64(p.res)
		switch owner := lockOwner(got); {
		case got == p.expect:
			p.held, p.lock = true, got
		case owner == int(o.me):
			// Ours from an operation that ended early; this process's key
			// lock makes sure no other goroutine of it is inside.
			p.held, p.lock, p.expect = true, got, got
		case owner < 0:
			p.expect, again = got, true
		case o.failed(ftrma.Rank(owner)):
			p.expect, p.took, again = got, true, true
		default:
			p.expect, conflict, p.wanted, p.holder = lockWord(lockVersion(got), -1), true, true, ftrma.Rank(owner)
		}
	}
	return conflict, again
}

// unlockAll gives back the locks held, unchanged; the writes complete with
// the next flush toward each rank. They go through the live window (see
// live): a replica marked failed because the view's window was rebuilt is
// let go too. A lease this rank holds on a key whose locks go back here
// goes with them: the locks may have been the lease's (an operation that
// wrote under the lease and gives up), and a lease record that outlived
// its lock words let a later put write under locks another rank had taken
// since (DESIGN.md F42).
func (o *op) unlockAll(ctx context.Context, reps []*replica) {
	traceOf(ctx).phase("unlock")
	var w [8]byte
	for i, p := range reps {
		if p.held && (i == 0 || p.id != reps[i-1].id) {
			o.dropLease(p.id)
		}
		switch {
		case p.held && (!p.failed || p.done):
			putWords(w[:], lockWord(lockVersion(p.lock), -1))
			if lw := o.liveAt(p.r); lw != nil {
				lw.Put(p.r, p.addr+slotLock*8, w[:])
				if lw != o.v().w {
					lw.Push(p.r)
				}
			}
			p.expect = lockWord(lockVersion(p.lock), -1)
		case p.held:
			o.letGo(p, lockVersion(p.lock))
		}
		p.held, p.took = false, false
	}
	o.flushAll(ctx, reps)
}

// letGo releases the lock of p, which this rank holds with version ver,
// when the operation's view's window was rebuilt under it (p counts as
// failed, yet its rank may well be alive): through the current window, by
// compare-and-swap from the word this rank holds, so that a lock another
// rank took since is left alone.
func (o *op) letGo(p *replica, ver uint64) {
	lw := o.live()
	if lw == o.v().w || !o.sameProcess(p.r) {
		return // p's rank failed: its locks die with it
	}
	lw.CompareAndSwap(p.r, p.addr+slotLock*8, int64(lockWord(ver, int(o.me))), int64(lockWord(ver, -1)), new(int64))
	lw.Push(p.r)
}

func (o *op) retryable(err error) error {
	if retryErr(err) {
		return fmt.Errorf("%w: %v", errRetry, err)
	}
	return err
}

// nextVersion is the version of a new write of the key: one more than any
// version a replica shows, and than its rank's floor — the highest version a
// deletion left there. A key deleted and written again so continues its
// versions, also in new slots: a version names one value of the key, never
// two, which conditional writes (PutIfVersion) rely on. (The replicas of a
// key written again include at least one rank that saw the deletion, unless
// every copy of the key was lost.)
func nextVersion(reps []*replica) uint64 {
	v := newest(reps)
	for _, p := range reps {
		if !p.failed {
			v = max(v, word(p.floor[:], 0))
		}
	}
	return v + 1
}

// newest returns the highest version any replica shows, in its lock word or
// its descriptors.
func newest(reps []*replica) uint64 {
	var v uint64
	for _, p := range reps {
		if p.failed || p.slot < 0 {
			continue
		}
		v = max(v, lockVersion(p.lock), p.word(slotCurVer), p.word(slotPVer))
	}
	return v
}

// Put stores value under key on every live replica. When it returns nil,
// every live replica holds the value; a later Get anywhere returns it (or a
// newer one). Put takes the key's lock at every replica, writes the record
// into a fresh heap block at each, then the slot's descriptor and the
// unlocked lock word carrying the new version: two round trips, to all
// replicas at once.
func (s *Store) Put(ctx context.Context, key, value []byte) error {
	if err := s.check("store put", key, value); err != nil {
		return err
	}
	defer s.enter()()
	t := traceOf(ctx)
	t.begin("put")
	defer t.end()
	if err := s.write(ctx, s.ident(key), value, false); err != nil {
		return &ftrma.OpError{Op: "store put", Rank: -1, Err: err}
	}
	s.st.puts.Add(1)
	return nil
}

// Delete removes key: a later Get returns ErrNotFound. Deleting a missing key
// is not an error.
func (s *Store) Delete(ctx context.Context, key []byte) error {
	if err := s.check("store delete", key, nil); err != nil {
		return err
	}
	defer s.enter()()
	t := traceOf(ctx)
	t.begin("delete")
	defer t.end()
	if err := s.write(ctx, s.ident(key), nil, true); err != nil {
		return &ftrma.OpError{Op: "store delete", Rank: -1, Err: err}
	}
	s.st.deletes.Add(1)
	return nil
}

func (s *Store) write(ctx context.Context, id ident, value []byte, del bool) error {
	var wrote prior
	return s.writeKey(ctx, id, del, func(o *op) error { return o.writeLocked(ctx, id, value, del, &wrote) })
}

// prior is what earlier attempts of a write published: the version (0:
// none) and the processes (transport ranks) of the replicas that hold it.
type prior struct {
	ver uint64
	at  []ftrma.Rank
}

// published records that this attempt published version v at the replicas
// of reps marked written.
func (o *op) published(w *prior, reps []*replica, v uint64) {
	for _, p := range reps {
		if p.written {
			if w.ver != v {
				w.ver, w.at = v, w.at[:0]
			}
			w.at = append(w.at, o.v().c.TransportRank(p.r))
		}
	}
}

// deletedSince reports whether a replica that holds w's version, by its
// record, is live and holds no copy of the key now: only a deletion takes
// a live replica's copy away (Grow's drop comes after its move, which
// leaves a copy at least as new elsewhere), so the write came before a
// deletion and is done.
func (o *op) deletedSince(w *prior, reps []*replica) bool {
	for _, p := range reps {
		if p.failed || !slices.Contains(w.at, o.v().c.TransportRank(p.r)) {
			continue
		}
		if p.slot < 0 || p.word(slotCurAddr) == 0 {
			return true
		}
	}
	return false
}

// writeLocked is write, by a caller that holds the key's process lock;
// wrote is what earlier attempts of the same operation published, kept up
// to date (see writeOnce).
func (o *op) writeLocked(ctx context.Context, id ident, value []byte, del bool, wrote *prior) error {
	return o.retry(ctx, func() error { return o.writeOnce(ctx, id, value, del, wrote) })
}

// acquire returns the key's live replicas with their locks held by this
// rank: under its lease on the key when it has one and may use it, else
// found (their slots claimed) and locked. No live replica at all is an
// error wrapping ftrma.ErrProcFailed.
func (o *op) acquire(ctx context.Context, id ident, useLease bool) (reps []*replica, leased bool, err error) {
	traceOf(ctx).phase("lease")
	if useLease {
		if reps, leased = o.leased(id); leased {
			return reps, true, nil
		}
	}
	// A lease not used here ends first: the locks taken below belong to
	// this operation, which gives them back on every path, and no lease
	// record may outlive them (its expiry would free locks another rank
	// holds by then).
	o.endLease(id)
	traceOf(ctx).phase("find")
	if reps, err = o.replicas(ctx, id, true); err != nil {
		return nil, false, err
	}
	if len(reps) == 0 {
		return nil, false, fmt.Errorf("%w: no live rank left", ftrma.ErrProcFailed)
	}
	if err := o.lockAll(ctx, id, reps); err != nil {
		return nil, false, err
	}
	o.countTakeovers(reps)
	return reps, false, nil
}

// writeOnce is one attempt of a write. When an earlier attempt published
// version wrote.ver at some replicas (a replica failed, or the view changed,
// under it), readers may have seen it there; writing the value again under
// a new version would bring it back after any write that came since. So the
// replicas are settled first, as a repair does: a newer version means a
// later write took over (this one came before it, and is done), and so
// does a replica that held the version, still live, holding no copy now (a
// deletion came since: it leaves no version to compare with); the version
// itself is copied to the replicas that lack it; only a version that
// landed nowhere that is still live is written afresh. A deletion's own
// tombstones take copies away too, so for a deletion an older copy left at
// a replica (one its earlier attempt did not reach) means only that it is
// not done there: it deletes afresh (its tombstones cannot undo a later
// write, which would show as a newer version).
func (o *op) writeOnce(ctx context.Context, id ident, value []byte, del bool, wrote *prior) error {
	reps, leased, err := o.acquire(ctx, id, true)
	if err != nil {
		return err
	}
	if wrote.ver != 0 && !leased {
		traceOf(ctx).phase("resettle")
		if err := o.readRecords(ctx, reps); err != nil {
			o.unlockAll(ctx, reps)
			return err
		}
		best, ver, whole, err := o.settle(ctx, id, reps)
		switch {
		case err != nil:
			o.unlockAll(ctx, reps)
			return err
		case ver > wrote.ver || ver == wrote.ver && whole || ver < wrote.ver && !del && o.deletedSince(wrote, reps):
			o.release(ctx, id, reps)
			return nil
		case ver == wrote.ver:
			return o.publishSettled(ctx, id, reps, best, ver)
		}
		for _, p := range reps {
			p.same = false // settle's verdict: publish writes the new value everywhere
		}
	}
	traceOf(ctx).phase("encode")
	v := nextVersion(reps)
	if v > maxVersion {
		o.unlockAll(ctx, reps)
		return errLastVersion
	}
	var rec []byte
	if !del {
		rec = make([]byte, recordLen(len(id.key), len(value)))
		encodeRecord(rec, record{hash: id.h, version: v, key: []byte(id.key), value: value})
	}
	err = o.publish(ctx, id, reps, rec, v, o.keepLease(id))
	o.published(wrote, reps, v)
	if err != nil {
		return err
	}
	for _, p := range reps {
		if p.failed {
			// The key needs its new replica: write again.
			return fmt.Errorf("%w: rank %d failed during the write", errRetry, p.r)
		}
	}
	return nil
}

// publish writes rec (nil: a deletion) as version v at every replica whose
// lock this rank holds, in one batch per replica: the record into a fresh
// block, the descriptor (clearing any pending one), the lock word with the
// version, and the release of the old blocks. With keep the lock words go on
// naming this rank and the locks become a lease (see lease); without, they
// are released and any lease on the key ends. Its phases: blocks at every
// replica (allocBlocks), the batches (postPublish), one flush of them all
// and the done word (markDone), then letting go of what failed replicas
// hold and keeping the caches and the lease (afterPublish).
func (o *op) publish(ctx context.Context, id ident, reps []*replica, rec []byte, v uint64, keep bool) error {
	if rec == nil {
		return o.deletion(ctx, id, reps, v)
	}
	lv := max(v, newest(reps)) // the lock word's version: the highest seen
	t := traceOf(ctx)
	t.phase("alloc")
	if err := o.allocBlocks(ctx, id, reps, len(rec)); err != nil {
		return err
	}
	t.phase("publish.post")
	alone := doneInBatch(reps) // the done word goes in the batch
	o.postPublish(ctx, reps, rec, v, lv, keep, alone)
	t.phase("publish.wait")
	failed, err := o.flushAll(ctx, reps)
	if !failed && err == nil && !alone {
		t.phase("publish.done")
		o.markDone(reps, v)
	}
	t.phase("publish.end")
	o.afterPublish(id, reps, len(rec), lv, keep, failed || err != nil)
	return err
}

// allocBlocks takes a block of n bytes at every held replica that needs
// one, before anything is written, so that a replica that cannot take the
// value (ErrFull) fails the write first; it then frees the blocks taken and
// gives the locks back. A replica failing is marked so and skipped.
func (o *op) allocBlocks(ctx context.Context, id ident, reps []*replica, n int) error {
	for _, p := range reps {
		if !p.held || p.failed || p.same {
			continue
		}
		a, err := o.alloc(ctx, p.r, n)
		if errors.Is(err, ftrma.ErrProcFailed) {
			p.failed = true
			continue
		}
		if err != nil {
			for _, q := range reps {
				if q.block != 0 {
					o.free(ctx, q.r, q.block, uint64(n))
					q.block = 0
				}
			}
			o.unlockAll(ctx, reps)
			return err
		}
		p.block = a
	}
	return nil
}

// postPublish posts publish's batch at every held replica: the record, the
// descriptor, the lock word with version lv (naming this rank with keep),
// the done word when the primary is the only replica (alone), the frees of
// the old blocks, and with keep a read of the lease-ask word. A replica
// that already holds v (same) gets its lock word alone.
func (o *op) postPublish(ctx context.Context, reps []*replica, rec []byte, v, lv uint64, keep, alone bool) {
	var lw [8]byte
	if keep {
		putWords(lw[:], lockWord(lv, int(o.me)))
	} else {
		putWords(lw[:], lockWord(lv, -1))
	}
	dw := make([]byte, 6*8)
	for i, p := range reps {
		if hook := testHookPublish.get(); hook != nil {
			hook(o.Store, reps, i)
		}
		if !p.held || p.failed {
			continue
		}
		if p.same {
			if w := o.liveAt(p.r); w != nil {
				w.Put(p.r, p.addr+slotLock*8, lw[:]) // a release: see live
			}
			if alone {
				o.postDone(p, v)
			}
			continue
		}
		if err := o.v().w.Put(p.r, p.block, rec); err != nil {
			// Its window was rebuilt after the block was counted
			// (allocBlocks): give the block back (DESIGN.md F5).
			o.free(ctx, p.r, p.block, uint64(len(rec)))
			p.failed = true
			continue
		}
		putWords(dw, p.block, v, uint64(len(rec)), 0, 0, 0)
		if err := o.v().w.Put(p.r, p.addr+slotCurAddr*8, dw); err != nil {
			// Rebuilt since the record went out: the slot keeps naming
			// the old blocks, and the new one stays counted (F32).
			p.failed = true
			continue
		}
		if w := o.liveAt(p.r); w != nil {
			w.Put(p.r, p.addr+slotLock*8, lw[:]) // a release: see live
		}
		if alone {
			o.postDone(p, v)
		}
		o.freeBehind(ctx, p.r, p.word(slotCurAddr), p.word(slotCurLen))
		o.freeBehind(ctx, p.r, p.word(slotPAddr), p.word(slotPLen))
		if keep {
			o.v().w.Get(p.r, p.addr+slotWant*8, p.want[:])
		}
		p.written = true
	}
}

// afterPublish ends a publish of n bytes with lock version lv: it lets go
// of the locks of replicas that failed, counts Grow's move, updates the
// caches, and keeps the lease (keep, when no replica failed and the batch
// did not fail: failed) or ends it, releasing the lock words that named
// this rank. Another rank's ask for the key ends the lease at once.
func (o *op) afterPublish(id ident, reps []*replica, n int, lv uint64, keep, failed bool) {
	for _, p := range reps {
		if p.held && p.failed {
			// Its lock word was the one held, or lw: let go of either.
			o.letGo(p, lockVersion(p.lock))
			o.letGo(p, lv)
		}
	}
	if o.moving {
		o.countGrow(reps, n)
	}
	named := keep // the lock words written name this rank
	keep = keep && !failed
	for _, p := range reps {
		// A lease holds every replica of the key (see leased): also none
		// that failed before the flush.
		keep = keep && p.held && !p.failed
	}
	wanted := false
	for _, p := range reps {
		wanted = wanted || p.written && !p.failed && word(p.want[:], 0) != 0
	}
	var l *lease
	if keep {
		l = &lease{version: lv, since: time.Now(), used: time.Now(), view: o.v()}
	}
	for _, p := range reps {
		if !p.held || p.failed {
			continue
		}
		o.cache.Lock()
		o.cache.lock[p.ref] = lockWord(lv, -1)
		if p.written {
			o.cache.desc[p.ref] = desc{p.block, uint64(n)}
		}
		o.cache.Unlock()
		switch {
		case l != nil:
			l.reps = append(l.reps, leased{r: p.r, slot: p.slot, addr: p.addr, block: p.block, len: uint64(n), key: p.keyAddr, gen: p.gen})
		case named:
			// A lease was meant, but a replica failed: no lease is
			// kept, so its lock words are released here.
			var free [8]byte
			putWords(free[:], lockWord(lv, -1))
			if lw := o.liveAt(p.r); lw != nil {
				lw.Put(p.r, p.addr+slotLock*8, free[:])
				lw.Push(p.r)
			}
		}
		p.held = false
	}
	if l == nil {
		o.dropLease(id)
		return
	}
	o.leases.Lock()
	if old := o.leases.m[id]; old != nil {
		l.since = old.since
	}
	o.leases.m[id] = l
	o.leases.Unlock()
	if wanted {
		o.contended(id)
		o.endLease(id) // another rank waits for the key
	}
}

// tombstone publishes the deletion of id as version v at every replica
// whose lock this rank holds, and frees the key's slots there: each slot
// becomes a tombstone in one batch (descriptors cleared, key word slotTomb,
// generation counted up, hash word cleared, the key's and the value's blocks
// freed), and only once every batch is complete are the lock words released,
// carrying the version on. Until then nobody can lock the slots, so no write
// lands in a slot that is being freed; a rank that remembered a slot meets
// its new generation (errStale) and looks for the key again. Every replica
// of the key is freed at once, so a tombstone never stands beside an older
// copy of the key that a repair could bring back — but when this rank dies
// in the middle, a reader's repair may (the deletion then did not happen).
func (o *op) tombstone(ctx context.Context, id ident, reps []*replica, v uint64) error {
	lv := max(v, newest(reps))
	desc, tomb := make([]byte, 6*8), make([]byte, 3*8)
	var zero, lw [8]byte
	putWords(desc, 0, v, 0, 0, 0, 0)
	putWords(lw[:], lockWord(lv, -1))
	t := traceOf(ctx)
	t.phase("tombstone.post")
	for i, p := range reps {
		if hook := testHookPublish.get(); hook != nil {
			hook(o.Store, reps, i)
		}
		if !p.held || p.failed {
			continue
		}
		putWords(tomb, 0, slotTomb, p.word(slotGen)+1) // want, key, generation
		// The hash word is cleared before the key word turns the slot into
		// a tombstone: a claim (which takes no slot lock) may take the slot
		// as soon as it sees the tombstone, and its own hash word must not
		// be overwritten by this one.
		if err := o.v().w.Put(p.r, p.addr+slotHash*8, zero[:]); err != nil {
			p.failed = true // its window was rebuilt: nothing went out
			continue
		}
		o.v().w.Put(p.r, p.addr+slotCurAddr*8, desc)
		o.v().w.Put(p.r, p.addr+slotWant*8, tomb)
		p.written = true // posted: it may land whatever the flush says (see published)
		// Freed behind the tombstone, through the same window: a free that
		// went out while the tombstone did not would let the key block be
		// reused while the slot still names it (F32).
		o.freeBehind(ctx, p.r, p.word(slotCurAddr), p.word(slotCurLen))
		o.freeBehind(ctx, p.r, p.word(slotPAddr), p.word(slotPLen))
		if k := p.word(slotKey); k != 0 && k != slotTomb {
			o.freeBehind(ctx, p.r, k, uint64(keyBlockLen(len(id.key))))
		}
	}
	if hook := testHookPosted.get(); hook != nil {
		hook(ctx, o.Store, "tombstone", id.key)
	}
	t.phase("floors")
	o.raiseFloors(ctx, reps, lv)
	t.phase("tombstone.wait")
	_, err := o.flushAll(ctx, reps)
	t.phase("release")
	for _, p := range reps {
		switch {
		case p.held && (!p.failed || p.done):
			// Released through the current window (see live), also when
			// this one was rebuilt after the batch went out: a claim
			// reuses the slot.
			if w := o.liveAt(p.r); w != nil {
				w.Put(p.r, p.addr+slotLock*8, lw[:])
				w.Push(p.r)
			}
		case p.held:
			o.letGo(p, lockVersion(p.lock))
		}
		o.forget(p.r, id)
		o.cache.Lock()
		delete(o.cache.desc, p.ref)
		o.cache.lock[p.ref] = lockWord(lv, -1)
		o.cache.Unlock()
		p.held = false
	}
	if _, e := o.flushAll(ctx, reps); err == nil {
		err = e
	}
	o.dropLease(id)
	return err
}

// raiseFloors makes the version floor of every held replica's rank at least
// v, by compare-and-swap from the floor read with the lock (again from what
// it finds, while others raise it too). Called with the locks held, before
// they are released.
func (o *op) raiseFloors(ctx context.Context, reps []*replica, v uint64) {
	todo := make(map[ftrma.Rank]uint64)
	for _, p := range reps {
		if p.held && !p.failed {
			todo[p.r] = word(p.floor[:], 0)
		}
	}
	for len(todo) > 0 {
		got := make(map[ftrma.Rank]*int64, len(todo))
		for r, f := range todo {
			if f >= v {
				delete(todo, r)
				continue
			}
			got[r] = new(int64)
			o.v().w.CompareAndSwap(r, o.v().tables[r]+hdrFloor*8, int64(f), int64(v), got[r])
		}
		for r, g := range got {
			// Not pushed first: one round trip after another.
			if err := o.flush(ctx, r); err != nil || uint64(*g) == todo[r] {
				delete(todo, r) // raised, or the rank failed
			} else {
				todo[r] = uint64(*g)
			}
		}
	}
}

// release gives back the key's locks this rank holds, and frees its slots
// when no replica holds a value or a pending one (slots claimed for a key
// that then got no value).
func (o *op) release(ctx context.Context, id ident, reps []*replica) {
	for _, p := range reps {
		if !p.failed && p.slot >= 0 && (p.word(slotCurAddr) != 0 || p.word(slotPAddr) != 0) {
			o.unlockAll(ctx, reps)
			return
		}
	}
	o.tombstone(ctx, id, reps, newest(reps))
}

func (o *op) countTakeovers(reps []*replica) {
	for _, p := range reps {
		if p.took {
			o.st.takeovers.Add(1)
		}
	}
}

// Get returns the value of key: the newest complete copy, never a torn or
// mixed one. It reads every live replica at once; when they disagree (a
// write is under way, or a writer died in the middle of one) it waits for
// the live writer, or takes the lock of the dead one and makes the replicas
// agree on the newest complete copy before answering.
func (s *Store) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := s.check("store get", key, nil); err != nil {
		return nil, err
	}
	defer s.enter()()
	t := traceOf(ctx)
	t.begin("get")
	defer t.end()
	v, _, err := s.get(ctx, s.ident(key))
	if err != nil {
		return nil, &ftrma.OpError{Op: "store get", Rank: -1, Err: s.lost(key, err)}
	}
	s.st.gets.Add(1)
	return v, nil
}

func (s *Store) get(ctx context.Context, id ident) (val []byte, ver uint64, err error) {
	err = s.inView(func(o *op) error {
		var ok bool
		if val, ver, ok = o.fastGet(ctx, id); ok {
			s.st.fast.Add(1)
			return nil
		}
		val, ver, err = o.getAll(ctx, id)
		return err
	})
	return val, ver, err
}

// getAll is get from every live replica, making them agree when a writer
// died in the middle (recovery's check of a key).
func (o *op) getAll(ctx context.Context, id ident) ([]byte, uint64, error) {
	rt := o.retrier()
	var hw *holdWatch
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		reps, err := o.readReplicas(ctx, id, rt)
		if err != nil {
			return nil, 0, err
		}
		if len(reps) == 0 {
			return nil, 0, fmt.Errorf("%w: no live rank left", ftrma.ErrProcFailed)
		}
		val, ver, found, agree, busy := o.judge(id, reps)
		if agree {
			if !found {
				return nil, 0, o.missing(id.h)
			}
			return val, ver, nil
		}
		o.st.retries.Add(1)
		if busy {
			if o.stale() {
				return nil, 0, errNewView
			}
			if hw == nil {
				hw = o.holdWatch()
			}
			held, holder := heldWords(reps)
			if err := hw.met(held, fmt.Sprintf("key %q", id.key), holder); err != nil {
				return nil, 0, err
			}
			traceOf(ctx).phase("backoff")
			if err := backoff(ctx, attempt); err != nil {
				return nil, 0, err
			}
			continue
		}
		// Nobody live is writing, yet the copies differ: a writer died in
		// the middle. Make them agree.
		traceOf(ctx).phase("repair")
		rec, err := o.repair(ctx, id)
		if errors.Is(err, errRetry) {
			traceOf(ctx).phase("retry")
			if err := rt.again(ctx, err); err != nil {
				return nil, 0, err
			}
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		if rec == nil {
			return nil, 0, o.missing(id.h)
		}
		r, _ := decodeRecord(rec) // repair chose a whole record of id
		return r.value, r.version, nil
	}
}

// readReplicas finds the key's live replicas and reads them (readAll),
// starting again, paced by rt, while replicas fail under it.
func (o *op) readReplicas(ctx context.Context, id ident, rt *retrier) ([]*replica, error) {
	t := traceOf(ctx)
	for {
		t.phase("find")
		reps, err := o.replicas(ctx, id, false)
		if err == nil {
			t.phase("read")
			err = o.readAll(ctx, reps)
		}
		if !errors.Is(err, errRetry) {
			return reps, err
		}
		t.phase("retry")
		if err := rt.again(ctx, err); err != nil {
			return nil, err
		}
	}
}

// missing is the error for a key no live replica has.
func (o *op) missing(h uint64) error {
	if o.v().mayHaveHeld(h) >= o.opt.Copies {
		return ErrDataLost
	}
	return ErrNotFound
}

// readAll reads the slot of every replica that has one, then the records the
// slots point to.
func (o *op) readAll(ctx context.Context, reps []*replica) error {
	// The record a replica's slot pointed to when this rank last saw it is
	// read in the same round trip as the slot, speculatively: when the slot
	// still points there (a stable key, or this rank's own last write) the
	// read is done in one round trip.
	tolerable := func(err error) bool {
		return err == nil || errors.Is(err, ftrma.ErrOutOfBounds) || errors.Is(err, ftrma.ErrUnknownRegion)
	}
	limit := o.recordLimit()
	for _, p := range reps {
		p.rec, p.prec, p.guess = nil, nil, desc{}
		if p.slot < 0 {
			continue
		}
		if err := o.v().w.Get(p.r, p.addr, p.buf[:]); err != nil {
			return o.retryable(err)
		}
	}
	for _, p := range reps {
		if p.slot >= 0 {
			o.cache.Lock()
			p.guess = o.cache.desc[p.ref]
			o.cache.Unlock()
			if p.guess.addr != 0 && p.guess.len <= limit {
				p.rec = make([]byte, p.guess.len)
				if err := o.v().w.Get(p.r, p.guess.addr, p.rec); err != nil {
					p.rec = nil
				}
			}
		}
	}
	if failed, err := o.flushAll(ctx, reps); failed {
		return errRetry
	} else if !tolerable(err) {
		return err
	}
	if err := o.checkSlots(reps); err != nil {
		return err
	}
	again := false
	for _, p := range reps {
		if p.slot < 0 {
			continue
		}
		if a, n := p.word(slotCurAddr), p.word(slotCurLen); a == 0 || n > limit {
			p.rec = nil
		} else if a != p.guess.addr || n != p.guess.len || p.rec == nil {
			p.rec = make([]byte, n)
			if err := o.v().w.Get(p.r, a, p.rec); err != nil {
				p.rec = nil
			}
			again = true
		}
		if a, n := p.word(slotPAddr), p.word(slotPLen); a != 0 && n <= limit {
			p.prec = make([]byte, n)
			if err := o.v().w.Get(p.r, a, p.prec); err != nil {
				p.prec = nil
			}
			again = true
		}
	}
	if again {
		if failed, err := o.flushAll(ctx, reps); failed {
			return errRetry
		} else if !tolerable(err) {
			return err
		}
	}
	for _, p := range reps {
		if p.slot >= 0 {
			o.cache.Lock()
			o.cache.desc[p.ref] = desc{p.word(slotCurAddr), p.word(slotCurLen)}
			o.cache.Unlock()
		}
	}
	return nil
}

// heldWords is the fingerprint of the replicas' lock and pending words, and
// a rank holding one of them, for holdWatch.
func heldWords(reps []*replica) (uint64, ftrma.Rank) {
	var sum uint64
	holder := ftrma.Rank(-1)
	for _, p := range reps {
		if p.slot < 0 {
			continue
		}
		lw := p.word(slotLock)
		sum = fingerprint(fingerprint(sum, lw), p.word(slotPAddr))
		if o := lockOwner(lw); o >= 0 {
			holder = ftrma.Rank(o)
		}
	}
	return sum, holder
}

// judge decides what a lock-free read of every replica shows: agree when all
// of them have the same version, complete, with no transaction pending (then
// val and found are the answer); busy when they do not and a live rank holds
// a lock, so waiting will do.
func (o *op) judge(id ident, reps []*replica) (val []byte, ver uint64, found, agree, busy bool) {
	agree = true
	for i, p := range reps {
		var v uint64
		var value []byte
		has := false
		if p.slot >= 0 {
			lw := p.word(slotLock)
			if w := lockOwner(lw); w >= 0 && !o.failed(ftrma.Rank(w)) {
				busy = true
			}
			if p.word(slotPAddr) != 0 {
				agree = false
			}
			v = p.word(slotCurVer)
			if p.word(slotCurAddr) != 0 {
				r, ok := decodeRecord(p.rec)
				if !ok || !r.is(id) || r.version != v {
					// Torn or stale: the locked path (repair) sorts it out.
					agree = false
					continue
				}
				value, has = r.value, true
			}
		}
		if i == 0 {
			ver, val, found = v, value, has
		} else if v != ver || has != found {
			agree = false
		}
	}
	return val, ver, found, agree, busy && !agree
}

// Test hooks: called at the named points, unset outside tests. A store of an
// earlier test may still run its housekeeping while a later test sets or
// clears a hook, so a hook is read and written atomically.
var (
	testHookPublish testHook[func(s *Store, reps []*replica, i int)] // before writing replica i
	testHookCommit  testHook[func(s *Store, stage string)]           // "pending", "decided", "published-one"
	testHookHash    testHook[func(key []byte) uint64]                // replaces the keyed hash
	testHookRecover testHook[func(ctx context.Context, s *Store)]    // before a recovery scans the slots
	// between posting compare-and-swaps (or a claim's words) and flushing
	// them: "lock", "claim lock", "claim", "claimed" (the claim landed,
	// its hash word first), "tombstone", "chunk", "pending" (a commit's
	// pending records);
	// ctx is the operation's
	testHookPosted testHook[func(ctx context.Context, s *Store, at, key string)]
)

// testHook holds one test hook; its zero value is unset.
type testHook[F any] struct{ p atomic.Pointer[F] }

// get returns the hook, or F's zero value (a nil func) when unset.
func (h *testHook[F]) get() (f F) {
	if p := h.p.Load(); p != nil {
		f = *p
	}
	return f
}

// set sets the hook until t ends.
func (h *testHook[F]) set(t interface{ Cleanup(func()) }, f F) {
	h.p.Store(&f)
	t.Cleanup(h.clear)
}

// clear unsets the hook.
func (h *testHook[F]) clear() { h.p.Store(nil) }

// Replica is one copy of a key as Locate finds it.
type Replica struct {
	Rank     ftrma.Rank
	Version  uint64 // 0: this rank has no copy
	HasValue bool   // false for a deletion or no copy
	Complete bool   // the copy's record is whole and of its version (true for no copy)
}

// Locate reads the key's live replicas, in placement order, without locks: a
// tool for tests and operators to check placement and replication.
func (s *Store) Locate(ctx context.Context, key []byte) ([]Replica, error) {
	if err := s.check("store locate", key, nil); err != nil {
		return nil, err
	}
	defer s.enter()()
	id := s.ident(key)
	var reps []*replica
	err := s.inView(func(o *op) (err error) {
		reps, err = o.readReplicas(ctx, id, o.retrier())
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Replica, len(reps))
	for i, p := range reps {
		out[i].Rank = p.r
		if p.slot < 0 {
			out[i].Complete = true // no copy (never put, or deleted): nothing torn
			continue
		}
		out[i].Version = p.word(slotCurVer)
		out[i].HasValue = p.word(slotCurAddr) != 0
		r, ok := decodeRecord(p.rec)
		out[i].Complete = !out[i].HasValue || ok && r.version == out[i].Version && r.is(id)
	}
	return out, nil
}
