package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/ftrma/ftrma"
)

// Key slots: finding, claiming and freeing them.
//
// A key's slot at a rank is found by linear probing from its hash mod Slots:
// a slot whose hash word is the key's, or not written yet, is the key's when
// its key block names the key; tombstones and other keys' slots are passed
// over; a never-used slot ends the chain. Claims are serialized per rank by
// the claim lock in the rank's header: a claimer takes it (compare-and-swap
// free → me, or failed holder → me), probes again, and takes the first
// tombstone or never-used slot of the chain, so two writers of one key
// cannot claim two slots for it. A deletion frees the key's slots: it turns
// them into tombstones (see publish), which later claims reuse; the slot's
// generation tells a rank that remembered the slot that it is no longer its
// key's (errStale).

// slotID is where a key's slot is at a rank, as found: its index (-1: none),
// and its key word and generation then.
type slotID struct {
	idx      int
	key, gen uint64
}

var noSlot = slotID{idx: -1}

// errStale: a slot this rank remembered for a key holds another key now (the
// key was deleted and the slot reused); find it again.
var errStale = fmt.Errorf("%w: key slot reused", errAgain)

// findSlot finds id's slot at rank r, claiming one when claim is set; noSlot
// when r has none.
func (o *op) findSlot(ctx context.Context, r ftrma.Rank, id ident, claim bool) (slotID, error) {
	ck := keyAt{o.v().epoch, r, id.key}
	o.cache.Lock()
	sl, ok := o.cache.slot[ck]
	o.cache.Unlock()
	if ok {
		return sl, nil
	}
	sl, free, err := o.probe(ctx, r, id)
	if err != nil || sl.idx >= 0 || !claim {
		if sl.idx >= 0 {
			o.remember(r, id, sl)
		}
		return sl, err
	}
	traceOf(ctx).phase("claim")
	// One claimer of this process at a time: the lock names a rank.
	if err := o.claiming[r].lock(ctx); err != nil {
		return noSlot, err
	}
	defer o.claiming[r].unlock()
	if err := o.lockClaims(ctx, r); err != nil {
		return noSlot, err
	}
	defer o.unlockClaims(r)
	if sl, free, err = o.probe(ctx, r, id); err != nil || sl.idx >= 0 {
		if sl.idx >= 0 {
			o.remember(r, id, sl)
		}
		return sl, err
	}
	if free.idx < 0 {
		return noSlot, &ftrma.OpError{Op: "store put", Rank: r, Err: fmt.Errorf("%w: all %d key slots of rank %d are taken (Config.Slots)", ErrFull, o.opt.Slots, r)}
	}
	blockLen := keyBlockLen(len(id.key))
	block, err := o.allocKey(ctx, r, blockLen)
	if err != nil {
		return noSlot, err
	}
	at := o.slotAddr(r, free.idx)
	var old int64
	posted := false // the claim's compare-and-swap
	var hw [8]byte
	putWords(hw[:], id.h)
	err = o.v().w.Put(r, block, encodeKeyBlock(id.h, id.key))
	if err == nil {
		// The hash word before the key word, so that no slot ever names a
		// key without its hash word (the scans of recovery, Grow and Scan
		// go by it: DESIGN.md F21). The slot is free (a tombstone, or never
		// used) and this rank holds the claim lock, so nobody reads or
		// writes its hash word meanwhile; a claim that stops here leaves a
		// free slot with a hash word, which probes and scans skip by its
		// key word, and which the next claim of it overwrites.
		err = o.v().w.Put(r, at+slotHash*8, hw[:])
	}
	if err == nil {
		err = o.flush(ctx, r) // the block is whole before the slot names it
	}
	if err == nil {
		err = o.v().w.CompareAndSwap(r, at+slotKey*8, int64(free.key), int64(block), &old)
		posted = err == nil
	}
	if hook := testHookPosted.get(); hook != nil && posted {
		hook(ctx, o.Store, "claim", id.key)
	}
	known := false // the compare-and-swap's result is in old
	if err == nil {
		err = o.flush(ctx, r)
		known = err == nil
	}
	if err == nil && uint64(old) != free.key {
		// Only a claim could have changed it, and claims hold the lock:
		// a claimer taken over as failed whose compare-and-swap landed
		// before its fencing. Its key's hash word is its own, or 0 (the
		// slot's key block says which key it names) but not this one's.
		// Probe again.
		o.v().w.CompareAndSwap(r, at+slotHash*8, int64(id.h), 0, new(int64))
		err = fmt.Errorf("%w: slot %d of rank %d claimed under the claim lock", errRetry, free.idx, r)
	}
	if err != nil {
		// The key block is this claim's to free only while no slot names
		// it: the compare-and-swap did not go out, or did not take. A claim
		// that took stays, even when its operation fails: the slot is the
		// key's at once for every other writer of the key, whose probes
		// without the claim lock find it, lock it and write the key's value
		// there (undoing the claim then lost that value: F38), and a
		// deletion may have made it a tombstone and freed the block (a
		// second free counted a live block free: F34). It is then as a
		// claimer's death leaves it: the key's slot without a value. When
		// the outcome is unknown, the block is left counted (a leak, never
		// a reuse).
		named := posted && (!known && !o.completed(ctx, r, err) || uint64(old) == free.key)
		if !named {
			o.free(ctx, r, block, uint64(blockLen))
		}
		return noSlot, err
	}
	if hook := testHookPosted.get(); hook != nil {
		hook(ctx, o.Store, "claimed", id.key)
	}
	sl = slotID{free.idx, block, free.gen}
	o.remember(r, id, sl)
	return sl, nil
}

func (o *op) remember(r ftrma.Rank, id ident, sl slotID) {
	o.cache.Lock()
	o.cache.slot[keyAt{o.v().epoch, r, id.key}] = sl
	o.cache.Unlock()
}

// forget drops what this rank remembered of id's slot at r.
func (o *op) forget(r ftrma.Rank, id ident) {
	o.cache.Lock()
	delete(o.cache.slot, keyAt{o.v().epoch, r, id.key})
	o.cache.Unlock()
}

// probe looks for id's slot at r along its chain; free is the first slot of
// the chain a claim could take (a tombstone, or the never-used slot that
// ends the chain), with its key word and generation; free.idx is -1 when
// the chain covers every slot and none is free.
func (o *op) probe(ctx context.Context, r ftrma.Rank, id ident) (found, free slotID, err error) {
	const group = 8
	free = noSlot
	buf := make([]byte, group*slotBytes)
	start := int(id.h % uint64(o.opt.Slots))
	for probed := 0; probed < o.opt.Slots; {
		first := (start + probed) % o.opt.Slots
		n := min(group, o.opt.Slots-first, o.opt.Slots-probed)
		if err := o.v().w.Get(r, o.slotAddr(r, first), buf[:n*slotBytes]); err != nil {
			return noSlot, noSlot, err
		}
		if err := o.flush(ctx, r); err != nil {
			return noSlot, noSlot, err
		}
		for j := range n {
			sl := slotID{first + j, word(buf, j*slotWords+slotKey), word(buf, j*slotWords+slotGen)}
			hw := word(buf, j*slotWords+slotHash)
			switch {
			case sl.key == 0:
				if free.idx < 0 {
					free = sl
				}
				return noSlot, free, nil
			case sl.key == slotTomb:
				if free.idx < 0 {
					free = sl
				}
				continue
			case hw != 0 && hw != id.h:
				continue
			}
			mine, err := o.isKeyAt(ctx, r, sl.key, id)
			if err != nil {
				return noSlot, noSlot, err
			}
			if mine {
				return sl, free, nil
			}
		}
		probed += n
	}
	return noSlot, free, nil
}

// isKeyAt reports whether the key block at addr at rank r names id.
func (o *op) isKeyAt(ctx context.Context, r ftrma.Rank, addr uint64, id ident) (bool, error) {
	b := make([]byte, keyBlockLen(len(id.key)))
	err := o.v().w.Get(r, addr, b)
	if err == nil {
		err = o.flush(ctx, r)
	}
	if errors.Is(err, ftrma.ErrOutOfBounds) || errors.Is(err, ftrma.ErrUnknownRegion) {
		return false, nil // the block ends before id's would: a shorter key's
	}
	if err != nil {
		return false, err
	}
	return isKeyBlock(b, id), nil
}

// lockClaims takes rank r's claim lock: compare-and-swap free → this rank,
// or a failed holder → this rank; a live holder claims one slot and lets go,
// so it is waited for with a backoff.
func (o *op) lockClaims(ctx context.Context, r ftrma.Rank) error {
	at := o.v().tables[r] + hdrClaim*8
	var expect int64
	var hw *holdWatch
	for attempt := 0; ; attempt++ {
		var got int64
		if err := o.v().w.CompareAndSwap(r, at, expect, int64(o.me)+1, &got); err != nil {
			return err
		}
		if hook := testHookPosted.get(); hook != nil {
			hook(ctx, o.Store, "claim lock", "")
		}
		if err := o.flush(ctx, r); err != nil {
			if o.completed(ctx, r, err) && got == expect {
				o.unlockClaims(r) // taken through a window rebuilt meanwhile
			}
			return err
		}
		switch holder := ftrma.Rank(got - 1); {
		case got == expect:
			return nil
		case holder == o.me:
			return nil // left by an earlier claim of this process's whose unlock failed
		case o.failed(holder):
			expect = got
			o.st.takeovers.Add(1)
			continue
		}
		expect = 0
		if o.stale() {
			return errNewView // the holder may be waiting for the next view
		}
		if hw == nil {
			hw = o.holdWatch()
		}
		// One claim lets go at once; the same holder met for the whole
		// bound is one that does not (its claims would have let us in).
		if err := hw.met(uint64(got), fmt.Sprintf("rank %d's claim lock", r), ftrma.Rank(got-1)); err != nil {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

func (o *op) unlockClaims(r ftrma.Rank) {
	var z [8]byte
	if lw := o.liveAt(r); lw != nil { // see live
		lw.Put(r, o.v().tables[r]+hdrClaim*8, z[:])
		lw.Push(r)
	}
}

// checkSlots reports errStale, and forgets the slots, when a replica's slot
// as just read is no longer the one this rank found for its key.
func (o *op) checkSlots(reps []*replica) error {
	var err error
	for _, p := range reps {
		if p.slot >= 0 && !p.failed && (p.word(slotKey) != p.keyAddr || p.word(slotGen) != p.gen) {
			o.forget(p.r, p.id)
			err = errStale
		}
	}
	return err
}
