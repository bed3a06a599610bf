package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ftrma/ftrma"
)

// Tx is a multi-key transaction: its puts and deletes become visible all
// together at Commit, or not at all, also when the writer dies in the middle
// of Commit. Begin one with Store.Begin; a Tx is used by one goroutine.
type Tx struct {
	s     *Store
	ops   map[string]txOp
	reads map[string]uint64 // keys Get read, with the version read (0: no value)
	done  bool
}

type txOp struct {
	value []byte
	del   bool
}

// Begin starts a transaction.
func (s *Store) Begin() *Tx { return &Tx{s: s, ops: map[string]txOp{}, reads: map[string]uint64{}} }

// Get returns key's value as the transaction sees it: the transaction's own
// write of the key if it made one, else the value the store holds now (or
// ErrNotFound). The key joins the transaction's read set: Commit fails with
// ErrConflict, writing nothing, when a key the transaction read has another
// version by then (optimistic concurrency control). Committed transactions
// are so serializable: each one's reads and writes take effect at one point,
// its commit. Reads of a transaction that does not commit may see values
// that no serial order explains (as in any optimistic scheme): act on them
// only after Commit returns nil. A key read twice with different versions
// between fails at once with ErrConflict.
func (t *Tx) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := t.usable("tx get", key, nil); err != nil {
		return nil, err
	}
	if op, ok := t.ops[string(key)]; ok {
		if op.del {
			return nil, &ftrma.OpError{Op: "tx get", Rank: -1, Err: ErrNotFound}
		}
		return cloneYielding(op.value), nil
	}
	leave := t.s.enter()
	v, ver, err := t.s.get(ctx, t.s.ident(key))
	leave()
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, &ftrma.OpError{Op: "tx get", Rank: -1, Err: err}
	}
	if old, ok := t.reads[string(key)]; ok && old != ver {
		return nil, &ftrma.OpError{Op: "tx get", Rank: -1, Err: fmt.Errorf("%w: %q changed between two reads of the transaction", ErrConflict, key)}
	}
	t.reads[string(key)] = ver
	if err != nil {
		return nil, &ftrma.OpError{Op: "tx get", Rank: -1, Err: err}
	}
	return v, nil
}

// Put adds a put of value under key to the transaction (the last write of a
// key in a transaction wins). It checks its arguments at once.
func (t *Tx) Put(key, value []byte) error {
	if err := t.usable("tx put", key, value); err != nil {
		return err
	}
	t.ops[string(key)] = txOp{value: cloneYielding(value)}
	return nil
}

// Delete adds the deletion of key to the transaction.
func (t *Tx) Delete(key []byte) error {
	if err := t.usable("tx delete", key, nil); err != nil {
		return err
	}
	t.ops[string(key)] = txOp{del: true}
	return nil
}

func (t *Tx) usable(op string, key, value []byte) error {
	if t.done {
		return &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: transaction already committed", ftrma.ErrInvalid)}
	}
	return t.s.check(op, key, value)
}

type txKeyState struct {
	id      ident
	op      txOp
	write   bool   // op is the transaction's write of the key
	read    bool   // the transaction read the key, at version readVer
	readVer uint64 // (0: no value)
	reps    []*replica
	ver     uint64
	rec     []byte
}

// Commit makes the transaction's writes visible, all of them or none.
//
// It takes the lock of every key at every replica (in hash order, giving all
// back and retrying after a backoff when a live rank holds one), writes each
// new value into a fresh block at each replica as the slot's pending record,
// and then commits by putting the transaction's number under this rank's
// decision key — the commit point. Then it moves each pending record to the
// slot's current descriptor and releases the locks. Readers wait while a key
// has a pending record and its writer lives; when the writer has failed,
// whoever meets the key next (a reader or recovery) reads the decision key:
// if it holds the transaction's number the pending records are made current
// everywhere, if not they are dropped.
//
// When Commit returns nil every write is visible at every live replica. An
// error before the commit point leaves nothing visible; after it, Commit
// finishes regardless of ctx.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return &ftrma.OpError{Op: "tx commit", Rank: -1, Err: fmt.Errorf("%w: transaction already committed", ftrma.ErrInvalid)}
	}
	s := t.s
	if s.closed.Load() {
		return &ftrma.OpError{Op: "tx commit", Rank: -1, Err: ErrClosed}
	}
	t.done = true
	if len(t.ops) == 0 && len(t.reads) == 0 {
		return nil
	}
	defer s.enter()()
	keys := make([]*txKeyState, 0, len(t.ops)+len(t.reads))
	for k, op := range t.ops {
		ver, read := t.reads[k]
		keys = append(keys, &txKeyState{id: s.ident([]byte(k)), op: op, write: true, read: read, readVer: ver})
	}
	for k, ver := range t.reads {
		if _, ok := t.ops[k]; !ok {
			keys = append(keys, &txKeyState{id: s.ident([]byte(k)), read: true, readVer: ver})
		}
	}
	slices.SortFunc(keys, func(a, b *txKeyState) int {
		return cmp.Or(cmp.Compare(a.id.h, b.id.h), strings.Compare(a.id.key, b.id.key))
	})
	del := slices.ContainsFunc(keys, func(k *txKeyState) bool { return k.op.del })
	var repairs []ident
	attempt := func() (err error) {
		for i, k := range keys {
			if err := s.keys.lock(ctx, k.id); err != nil {
				for _, l := range keys[:i] {
					s.keys.unlock(l.id)
				}
				return err
			}
		}
		repairs, err = s.commit(ctx, keys, del)
		for _, k := range keys {
			s.keys.unlock(k.id)
		}
		return err
	}
	if err := s.outsideInterim(ctx, del, attempt); err != nil {
		return err
	}
	// Keys that lost a replica meanwhile get their new one now (recovery
	// would too), under their process locks again, each alone: taken
	// back while holding the others, they could wait on a Commit that
	// took one and waits for ours.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBound)
	defer cancel()
	for _, id := range repairs {
		if err := s.inView(func(o *op) error { _, err := o.repair(cctx, id); return err }); err != nil {
			return &ftrma.OpError{Op: "tx commit", Rank: -1, Err: fmt.Errorf("committed; restoring a lost copy: %w", err)}
		}
	}
	return nil
}

// commit runs the attempts of a commit whose keys' process locks the
// caller holds; it returns the keys that lost a replica meanwhile, or,
// for a commit that deletes (del), errInterim (see outsideInterim).
// Attempts restart in the next view only before the commit point, where
// nothing is visible (DESIGN.md §4.4).
func (s *Store) commit(ctx context.Context, keys []*txKeyState, del bool) ([]ident, error) {
	var repairs []ident
	err := s.inView(func(o *op) error {
		if err := o.interim(del); err != nil {
			return err // before the commit point: nothing is visible
		}
		return o.retry(ctx, func() (err error) {
			repairs, err = o.commitOnce(ctx, keys)
			return err
		})
	})
	if errors.Is(err, errInterim) {
		return nil, err
	}
	if err != nil {
		s.st.aborts.Add(1)
		return nil, &ftrma.OpError{Op: "tx commit", Rank: -1, Err: err}
	}
	s.st.commits.Add(1)
	return repairs, nil
}

// commitOnce runs one attempt; errRetry and errNewView (before the commit
// point only) mean nothing is visible and the locks are given back. Once it
// committed it returns the keys that lost a replica meanwhile. Its phases
// (DESIGN.md §4.4): lock every key (lockTx), settle what failed writers
// left pending there (settleLeftPending), check the reads (checkReads),
// write the pending records (writePending), decide (the commit point,
// decideTx), make the pending records current and release (publishTx), and
// free what the old records held (finishTx).
func (o *op) commitOnce(ctx context.Context, keys []*txKeyState) (repairs []ident, err error) {
	all, err := o.lockTx(ctx, keys)
	if err != nil {
		return nil, err
	}
	if err := o.settleLeftPending(ctx, keys); err != nil {
		return nil, err
	}
	writes, err := checkReads(keys)
	if err != nil {
		return nil, o.abortTx(ctx, keys, err)
	}
	if writes == 0 {
		for _, k := range keys {
			o.release(ctx, k.id, k.reps) // a read-only transaction: its reads hold now
		}
		return nil, nil
	}
	seq, err := o.drawTx(ctx)
	if err != nil {
		return nil, o.abortTx(ctx, keys, err)
	}
	tag := txTag(seq, o.me)
	if err := o.writePending(ctx, keys, all, tag); err != nil {
		return nil, o.abortTx(ctx, keys, err)
	}
	commitHook := testHookCommit.get()
	if commitHook != nil {
		commitHook(o.Store, "pending")
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBound)
	defer cancel()
	if err := o.decideTx(cctx, seq, tag); err != nil {
		if errors.Is(err, errUndecided) {
			return nil, err // locks stay held; the key is decided when this rank fails
		}
		return nil, o.abortTx(ctx, keys, err)
	}
	if commitHook != nil {
		commitHook(o.Store, "decided")
	}
	clean := o.publishTx(cctx, keys, all, commitHook)
	repairs = o.finishTx(cctx, keys)
	if clean && len(repairs) == 0 {
		o.publishedTx(seq)
	}
	return repairs, nil
}

// lockTx finds the replicas of every key of the transaction and locks them
// all, in hash order within one round of compare-and-swaps; it returns them
// all.
func (o *op) lockTx(ctx context.Context, keys []*txKeyState) ([]*replica, error) {
	var all []*replica
	for _, k := range keys {
		o.endLease(k.id) // as in acquire: the commit's locks are its own
		reps, err := o.replicas(ctx, k.id, true)
		if err != nil {
			return nil, err
		}
		k.reps = reps
		all = append(all, reps...)
	}
	if err := o.lockAll(ctx, ident{}, all); err != nil {
		return nil, err
	}
	o.countTakeovers(all)
	return all, nil
}

// settleLeftPending decides the pending records that the locked keys hold
// (each left by a writer that failed: a live one holds its keys' locks
// until it publishes or drops them) before the attempt goes on. Each such
// key is settled as a repair does (settle, publishSettled: its locks go
// back), the other keys' locks are given back, and the attempt starts again
// (errAgain). Without this, an attempt that took such a key over and then
// aborted (its reads had changed, as they have while the record is pending)
// gave the lock back with the record still there, where nothing would
// settle it: a fast read takes the primary alone, and recovery checks only
// the keys whose lock or replicas a failure touched; every later
// transaction on the key then aborted (DESIGN.md F36).
func (o *op) settleLeftPending(ctx context.Context, keys []*txKeyState) error {
	left := func(k *txKeyState) bool {
		return slices.ContainsFunc(k.reps, func(p *replica) bool {
			return p.held && !p.failed && p.slot >= 0 && p.word(slotPAddr) != 0
		})
	}
	if !slices.ContainsFunc(keys, left) {
		return nil
	}
	var first error
	for _, k := range keys {
		if !left(k) || first != nil {
			o.release(ctx, k.id, k.reps)
			continue
		}
		err := o.readRecords(ctx, k.reps)
		var best []byte
		var ver uint64
		if err == nil {
			best, ver, _, err = o.settle(ctx, k.id, k.reps)
		}
		if err != nil {
			o.release(ctx, k.id, k.reps)
			first = err
			continue
		}
		first = o.publishSettled(ctx, k.id, k.reps, best, ver)
	}
	if first != nil {
		return first
	}
	return errAgain
}

// checkReads fails with ErrConflict when a key the transaction read changed
// since, and counts the keys it writes.
func checkReads(keys []*txKeyState) (writes int, err error) {
	for _, k := range keys {
		if k.read && !unchanged(k) {
			return 0, fmt.Errorf("%w: %q changed since the transaction read it", ErrConflict, k.id.key)
		}
		if k.write {
			writes++
		}
	}
	return writes, nil
}

// abortTx gives up the attempt before its commit point: the pending records
// it wrote are dropped and the locks given back. It returns err.
func (o *op) abortTx(ctx context.Context, keys []*txKeyState, err error) error {
	o.dropPending(ctx, keys)
	for _, k := range keys {
		o.release(ctx, k.id, k.reps)
	}
	return err
}

// writePending writes every written key's record, tagged with the
// transaction, into a fresh block at each of its replicas, and points the
// slot's pending descriptor at it; it returns once every replica has them
// (errRetry when one failed).
func (o *op) writePending(ctx context.Context, keys []*txKeyState, all []*replica, tag uint64) error {
	pdesc := make([]byte, 3*8)
	for _, k := range keys {
		if !k.write {
			continue
		}
		k.ver = nextVersion(k.reps)
		if k.ver > maxVersion {
			return errLastVersion
		}
		k.rec = make([]byte, recordLen(len(k.id.key), len(k.op.value)))
		encodeRecord(k.rec, record{hash: k.id.h, version: k.ver, tx: tag, key: []byte(k.id.key), value: k.op.value, deleted: k.op.del})
		for _, p := range k.reps {
			a, err := o.alloc(ctx, p.r, len(k.rec))
			if errors.Is(err, ftrma.ErrProcFailed) {
				return errRetry
			}
			if err != nil {
				return err
			}
			p.pending = a
			o.v().w.Put(p.r, a, k.rec)
			putWords(pdesc, a, k.ver, uint64(len(k.rec)))
			o.v().w.Put(p.r, p.addr+slotPAddr*8, pdesc)
		}
	}
	if hook := testHookPosted.get(); hook != nil {
		hook(ctx, o.Store, "pending", keys[0].id.key)
	}
	if failed, err := o.flushAll(ctx, all); failed || err != nil {
		if err == nil {
			err = errRetry
		}
		return err
	}
	return nil
}

// publishTx makes every written key's pending record its current one and
// releases its locks with the new version, marks the versions done once
// every replica has them, releases the keys only read, and deletes the keys
// deleted (their tombstones release their locks). It reports whether every
// write went out and completed: then no pending record of the transaction
// is left.
func (o *op) publishTx(ctx context.Context, keys []*txKeyState, all []*replica, commitHook func(*Store, string)) (clean bool) {
	for ki, k := range keys {
		if ki == 1 && commitHook != nil {
			o.flushAll(ctx, keys[0].reps)
			commitHook(o.Store, "published-one")
		}
		if !k.write || k.op.del {
			continue // below
		}
		for _, p := range k.reps {
			if p.failed {
				continue
			}
			var lw [8]byte
			putWords(lw[:], lockWord(max(k.ver, lockVersion(p.lock)), -1))
			desc := make([]byte, 6*8)
			putWords(desc, p.pending, k.ver, uint64(len(k.rec)), 0, 0, 0)
			o.v().w.Put(p.r, p.addr+slotCurAddr*8, desc)
			if w := o.liveAt(p.r); w != nil {
				w.Put(p.r, p.addr+slotLock*8, lw[:]) // a release: see live
			}
		}
	}
	failed, err := o.flushAll(ctx, all)
	clean = !failed && err == nil
	if clean {
		for _, k := range keys {
			if k.write && !k.op.del {
				o.markDone(k.reps, k.ver)
			}
		}
	}
	for _, k := range keys {
		switch {
		case !k.write:
			o.release(ctx, k.id, k.reps) // read only
		case k.op.del:
			// Deletions free the key's slots (and release their locks).
			clean = o.deletion(ctx, k.id, k.reps, k.ver) == nil && clean
		}
	}
	return clean
}

// finishTx frees the blocks the written keys' old records held (a deleted
// key's pending block: its tombstone freed the rest), updates the caches,
// and returns the keys that lost a replica during the commit.
func (o *op) finishTx(ctx context.Context, keys []*txKeyState) (repairs []ident) {
	for _, k := range keys {
		if !k.write {
			continue
		}
		o.dropLease(k.id) // the commit released the key's locks
		lost := false
		for _, p := range k.reps {
			if p.failed {
				lost = true
				continue
			}
			if k.op.del {
				o.free(ctx, p.r, p.pending, uint64(len(k.rec)))
				continue // the tombstone freed the rest
			}
			o.free(ctx, p.r, p.word(slotCurAddr), p.word(slotCurLen))
			o.free(ctx, p.r, p.word(slotPAddr), p.word(slotPLen))
			o.cache.Lock()
			o.cache.lock[p.ref] = lockWord(max(k.ver, lockVersion(p.lock)), -1)
			o.cache.Unlock()
			p.held = false
		}
		if lost {
			repairs = append(repairs, k.id)
		}
	}
	return repairs
}

// dropPending clears the pending descriptors this attempt wrote and frees
// their blocks. Where the clearing is not known to have landed — the
// replica is marked failed because the view's window was rebuilt (before
// the clearing went out, or under it), or its flush did not complete (the
// context ended) — the replica may be live and hold the descriptor: there
// it is cleared through the current window, by compare-and-swap from this
// attempt's block (clearPending), or a later commit of this rank would make
// the aborted transaction's record count as committed (DESIGN.md F3, F37).
func (o *op) dropPending(ctx context.Context, keys []*txKeyState) {
	zero := make([]byte, 3*8)
	for _, k := range keys {
		for _, p := range k.reps {
			if p.pending == 0 {
				continue
			}
			p.done = false
			if !p.failed && o.v().w.Put(p.r, p.addr+slotPAddr*8, zero) != nil {
				p.failed = true // its window was rebuilt: nothing went out
			}
		}
	}
	var stranded []*replica
	for _, k := range keys {
		o.flushAll(ctx, k.reps) // p.done: the clearing landed
		for _, p := range k.reps {
			if p.pending != 0 && !p.done && o.sameProcess(p.r) {
				stranded = append(stranded, p)
			}
		}
	}
	cleared := o.clearPending(ctx, stranded)
	for _, k := range keys {
		for _, p := range k.reps {
			if p.pending != 0 && (p.done || cleared[p]) {
				o.free(ctx, p.r, p.pending, uint64(len(k.rec)))
			}
			p.pending = 0
		}
	}
}

// clearPending clears, through the current window, the pending descriptors
// of reps (replicas of the same processes in the current view) that still
// name their replica's pending block: the first word goes from the block's
// address to 0 (a descriptor whose address is 0 names no pending record).
// Nobody else writes a descriptor while this rank holds the key's lock, so
// once the compare-and-swap completed, the descriptor no longer names the
// block (it did not, or does not now) and the block can be freed: cleared
// says which. Bounded by the verdict bound, whatever ctx.
func (o *op) clearPending(ctx context.Context, reps []*replica) (cleared map[*replica]bool) {
	if len(reps) == 0 {
		return nil
	}
	w := o.live()
	posted := map[ftrma.Rank][]*replica{}
	for _, p := range reps {
		if w.CompareAndSwap(p.r, p.addr+slotPAddr*8, int64(p.pending), 0, new(int64)) == nil {
			posted[p.r] = append(posted[p.r], p)
		}
	}
	cleared = map[*replica]bool{}
	for r, ps := range posted {
		if o.flushAnyway(ctx, w, r) == nil {
			for _, p := range ps {
				cleared[p] = true
			}
		}
	}
	return cleared
}

// unchanged reports whether key k, read by the transaction at version
// k.readVer, is still so at every live replica (locked by this rank).
func unchanged(k *txKeyState) bool {
	for _, p := range k.reps {
		if p.failed {
			continue
		}
		if p.slot < 0 || p.word(slotPAddr) != 0 {
			return false
		}
		has := p.word(slotCurAddr) != 0
		if k.readVer == 0 && has || k.readVer != 0 && (!has || p.word(slotCurVer) != k.readVer) {
			return false
		}
	}
	return true
}
