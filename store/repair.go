package store

import (
	"context"
	"errors"

	"github.com/ftrma/ftrma"
)

// repair makes the key's live replicas agree, under the key's lock at every
// one of them: it decides any transaction a failed writer left pending,
// picks the newest complete copy (a value or a deletion), writes it where it
// is missing or older, and releases the locks. It returns the chosen record
// (nil when the key has no value), a whole record of id. Readers call it when the copies differ and
// no live writer holds a lock; recovery calls it for the keys a failed rank
// shared.
func (o *op) repair(ctx context.Context, id ident) (rec []byte, err error) {
	if err := o.keys.lock(ctx, id); err != nil {
		return nil, err
	}
	defer o.keys.unlock(id)
	err = o.retry(ctx, func() (err error) {
		rec, err = o.repairOnce(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

func (o *op) repairOnce(ctx context.Context, id ident) ([]byte, error) {
	reps, _, err := o.acquire(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if err := o.readRecords(ctx, reps); err != nil {
		o.unlockAll(ctx, reps)
		return nil, err
	}
	best, ver, _, err := o.settle(ctx, id, reps)
	if err != nil {
		o.unlockAll(ctx, reps)
		return nil, err
	}
	if err := o.publishSettled(ctx, id, reps, best, ver); err != nil {
		return nil, err
	}
	return best, nil
}

// settle decides what the key's replicas, locked by this rank and read
// (readRecords), hold: the newest complete copy among their current records
// and the pending records of transactions that committed — best (nil for a
// deletion, or no value at all) of version ver — and whether every live
// replica already holds exactly that with nothing pending (whole).
func (o *op) settle(ctx context.Context, id ident, reps []*replica) (best []byte, ver uint64, whole bool, err error) {
	have := false
	consider := func(rec []byte, v uint64) {
		if !have || v > ver {
			best, ver, have = rec, v, true
		}
	}
	for _, p := range reps {
		if p.failed || p.slot < 0 {
			continue
		}
		// A slot without a value is no copy, whatever its version says: a
		// slot claimed for the key may be a reused tombstone, whose
		// version is the version of another key's deletion, and a plain
		// deletion frees the key's slots (one cut short by its writer's
		// death may be undone; a transaction's shows in its pending
		// records, below).
		v := p.word(slotCurVer)
		if p.word(slotCurAddr) != 0 {
			if r, ok := decodeRecord(p.rec); ok && r.is(id) && r.version == v {
				consider(p.rec, v)
			}
		}
		if p.word(slotPAddr) != 0 {
			r, ok := decodeRecord(p.prec)
			if !ok || !r.is(id) || r.version != p.word(slotPVer) {
				continue
			}
			committed, err := o.txCommitted(ctx, r.tx)
			if err != nil {
				return nil, 0, false, err
			}
			if committed && r.deleted {
				consider(nil, r.version)
			} else if committed {
				consider(p.prec, r.version)
			}
		}
	}
	whole = true
	for _, p := range reps {
		if p.failed {
			continue
		}
		p.same = p.slot >= 0 && p.word(slotPAddr) == 0 && p.word(slotCurVer) == ver &&
			(p.word(slotCurAddr) != 0) == (best != nil) && p.rec != nil == (best != nil)
		if p.same && best != nil {
			r, ok := decodeRecord(p.rec)
			p.same = ok && r.version == ver
		}
		if !have {
			p.same = p.slot < 0 || p.word(slotCurAddr) == 0 && p.word(slotPAddr) == 0
		}
		whole = whole && p.same
	}
	return best, ver, whole, nil
}

// publishSettled makes the locked replicas hold what settle chose and
// releases their locks; a key with no value at all gets its slots freed.
func (o *op) publishSettled(ctx context.Context, id ident, reps []*replica, best []byte, ver uint64) error {
	if err := o.publish(ctx, id, reps, best, ver, false); err != nil {
		return err
	}
	o.st.repairs.Add(1)
	for _, p := range reps {
		if p.failed {
			return errRetry
		}
	}
	return nil
}

// readRecords reads the records the (already read) slots point to.
func (o *op) readRecords(ctx context.Context, reps []*replica) error {
	limit := o.recordLimit()
	for _, p := range reps {
		p.rec, p.prec = nil, nil
		if p.slot < 0 || p.failed {
			continue
		}
		if a, n := p.word(slotCurAddr), p.word(slotCurLen); a != 0 && n <= limit {
			p.rec = make([]byte, n)
			if err := o.v().w.Get(p.r, a, p.rec); err != nil {
				p.rec = nil
			}
		}
		if a, n := p.word(slotPAddr), p.word(slotPLen); a != 0 && n <= limit {
			p.prec = make([]byte, n)
			if err := o.v().w.Get(p.r, a, p.prec); err != nil {
				p.prec = nil
			}
		}
	}
	failed, err := o.flushAll(ctx, reps)
	if failed {
		return errRetry
	}
	if err != nil && !errors.Is(err, ftrma.ErrOutOfBounds) && !errors.Is(err, ftrma.ErrUnknownRegion) {
		return err
	}
	return nil
}
