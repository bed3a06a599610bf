package store

import (
	"context"

	"github.com/ftrma/ftrma"
)

// Conditional writes: a write that takes effect only when the key's current
// value (or version) is what the caller says — Hazelcast's replace(k, old,
// new), putIfAbsent and remove(k, v), etcd's transactions that compare a
// key's version. Each is linearizable like Put: the condition is checked
// and the write made under the key's lock at every live replica, so no other
// write of the key comes in between. When the replicas disagree (a writer
// died in the middle of a write) they are first made to agree on the newest
// complete copy, as a Get would, and the condition is checked against that.
//
// A conditional write that returns (false, nil) changed nothing. One that
// returns an error may or may not have taken effect, like a Put that
// returns an error.

// GetVersion returns the key's value and its version: a number that names
// this value of the key, never another one (a key's versions only grow,
// also across a deletion and a new put, unless every copy of the key was
// lost). It fails like Get.
func (s *Store) GetVersion(ctx context.Context, key []byte) ([]byte, uint64, error) {
	if err := s.check("store get", key, nil); err != nil {
		return nil, 0, err
	}
	defer s.enter()()
	v, ver, err := s.get(ctx, s.ident(key))
	if err != nil {
		return nil, 0, &ftrma.OpError{Op: "store get", Rank: -1, Err: s.lost(key, err)}
	}
	s.st.gets.Add(1)
	return v, ver, nil
}

// CompareAndSwap sets key to new if its value is old, and reports whether it
// did. A nil old means "the key has no value" (put if absent); a nil new
// deletes the key (delete if the value is old). An empty, non-nil old or new
// is the empty value.
func (s *Store) CompareAndSwap(ctx context.Context, key, old, new []byte) (bool, error) {
	return s.writeIf(ctx, "store compare-and-swap", key, new, new == nil, func(cur []byte, found bool, _ uint64) bool {
		if old == nil {
			return !found
		}
		return found && equalYielding(cur, old)
	})
}

// PutIfAbsent sets key to value if the key has no value, and reports
// whether it did.
func (s *Store) PutIfAbsent(ctx context.Context, key, value []byte) (bool, error) {
	if value == nil {
		value = []byte{}
	}
	return s.CompareAndSwap(ctx, key, nil, value)
}

// PutIfVersion sets key to value if the key's version (GetVersion) is
// version, and reports whether it did; version 0 means "the key has no
// value".
func (s *Store) PutIfVersion(ctx context.Context, key, value []byte, version uint64) (bool, error) {
	if value == nil {
		value = []byte{}
	}
	return s.writeIf(ctx, "store put-if-version", key, value, false, sameVersion(version))
}

// DeleteIfVersion deletes key if its version (GetVersion) is version, and
// reports whether it did.
func (s *Store) DeleteIfVersion(ctx context.Context, key []byte, version uint64) (bool, error) {
	return s.writeIf(ctx, "store delete-if-version", key, nil, true, sameVersion(version))
}

func sameVersion(version uint64) func([]byte, bool, uint64) bool {
	return func(_ []byte, found bool, ver uint64) bool {
		if version == 0 {
			return !found
		}
		return found && ver == version
	}
}

// writeIf writes value (del: deletes the key) if cond holds for the key's
// current value (found: it has one) and version.
func (s *Store) writeIf(ctx context.Context, name string, key, value []byte, del bool,
	cond func(cur []byte, found bool, ver uint64) bool) (bool, error) {
	if err := s.check(name, key, value); err != nil {
		return false, err
	}
	defer s.enter()()
	id := s.ident(key)
	done := false
	var wrote prior // what writeIfOnce published
	err := s.writeKey(ctx, id, del, func(o *op) error {
		return o.retry(ctx, func() (err error) {
			if done {
				// It took effect, but a replica failed meanwhile: the
				// key needs its new replica, so the same is written
				// again, unconditionally (as writeOnce does it after a
				// published attempt).
				return o.writeOnce(ctx, id, value, del, &wrote)
			}
			done, err = o.writeIfOnce(ctx, id, value, del, cond, &wrote)
			return err
		})
	})
	if err != nil {
		return false, &ftrma.OpError{Op: name, Rank: -1, Err: err}
	}
	if done {
		if del {
			s.st.deletes.Add(1)
		} else {
			s.st.puts.Add(1)
		}
	}
	return done, nil
}

// writeIfOnce is one attempt of writeIf, under the key's process lock.
// errRetry with done false means nothing was written by it (a repair may
// have been); with done true, that the write took effect but a replica
// failed under it.
func (o *op) writeIfOnce(ctx context.Context, id ident, value []byte, del bool,
	cond func([]byte, bool, uint64) bool, wrote *prior) (bool, error) {
	reps, leased, err := o.acquire(ctx, id, true)
	if err != nil {
		return false, err
	}
	release := func() { o.unlockAll(context.WithoutCancel(ctx), reps) }
	if err := o.readRecords(ctx, reps); err != nil {
		release()
		return false, err
	}
	best, ver, whole, err := o.settle(ctx, id, reps)
	if err != nil {
		release()
		return false, err
	}
	if !whole {
		// Make the replicas agree first, then check against that.
		if err := o.publishSettled(ctx, id, reps, best, ver); err != nil {
			return false, err
		}
		return false, errAgain
	}
	var cur []byte
	if best != nil {
		r, _ := decodeRecord(best) // settle chose a whole record of id
		cur = r.value
	}
	if !cond(cur, best != nil, ver) {
		if best == nil {
			// No value: free the slots this attempt may have claimed.
			return false, o.tombstone(ctx, id, reps, ver)
		}
		if !leased {
			release()
		}
		return false, nil
	}
	v := nextVersion(reps)
	if v > maxVersion {
		release()
		return false, errLastVersion
	}
	for _, p := range reps {
		p.same = false // settle's verdict: publish writes the new value everywhere
	}
	var rec []byte
	if !del {
		rec = make([]byte, recordLen(len(id.key), len(value)))
		encodeRecord(rec, record{hash: id.h, version: v, key: []byte(id.key), value: value})
	}
	err = o.publish(ctx, id, reps, rec, v, o.keepLease(id))
	o.published(wrote, reps, v)
	if err != nil {
		return false, err
	}
	for _, p := range reps {
		if p.failed {
			// The write took effect where it went out; the key needs its
			// new replica (writeIf writes it). If it went out nowhere
			// (the window was rebuilt before any record was posted),
			// nothing happened: the condition is checked again, against
			// what others wrote meanwhile (DESIGN.md F27).
			return wrote.ver == v, errRetry
		}
	}
	return true, nil
}
