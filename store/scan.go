package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ftrma/ftrma"
)

// Scan lists the keys that start with prefix and come after after (nil: from
// the first) in byte order, at most limit of them (0: all); more reports
// whether there are further keys, which a Scan with after set to the last key
// returned lists. Len counts the keys.
//
// A scan reads the key slots of every live rank one-sidedly (a few round
// trips a rank, its whole slot table: a tool for exploring and for
// occasional listings, not for every operation). It is not a snapshot: a key
// that has a value for the whole scan is listed and one that has none for
// the whole scan is not; a key put or deleted meanwhile may or may not be. A
// key whose replicas disagree because a writer died mid-put is listed when a
// live replica holds a value of it (a Get would then repair it to that
// value, or to a newer one).
func (s *Store) Scan(ctx context.Context, prefix, after []byte, limit int) (keys [][]byte, more bool, err error) {
	if s.closed.Load() {
		return nil, false, &ftrma.OpError{Op: "store scan", Rank: -1, Err: ErrClosed}
	}
	if limit < 0 {
		return nil, false, &ftrma.OpError{Op: "store scan", Rank: -1, Err: fmt.Errorf("%w: limit %d", ftrma.ErrInvalid, limit)}
	}
	all, err := s.listKeys(ctx, string(prefix))
	if err != nil {
		return nil, false, &ftrma.OpError{Op: "store scan", Rank: -1, Err: err}
	}
	slices.Sort(all)
	i := 0
	if after != nil {
		i, _ = slices.BinarySearch(all, string(after))
		if i < len(all) && all[i] == string(after) {
			i++
		}
	}
	all = all[i:]
	if limit > 0 && len(all) > limit {
		all, more = all[:limit], true
	}
	keys = make([][]byte, len(all))
	for j, k := range all {
		keys[j] = []byte(k)
	}
	return keys, more, nil
}

// Len returns the number of keys that have a value, with Scan's semantics.
func (s *Store) Len(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, &ftrma.OpError{Op: "store len", Rank: -1, Err: ErrClosed}
	}
	all, err := s.listKeys(ctx, "")
	if err != nil {
		return 0, &ftrma.OpError{Op: "store len", Rank: -1, Err: err}
	}
	return len(all), nil
}

// listKeys returns the distinct user keys with prefix that a live rank holds
// a value of, unordered.
func (s *Store) listKeys(ctx context.Context, prefix string) ([]string, error) {
	defer s.enter()()
	var out []string
	err := s.inView(func(o *op) error {
		seen := map[string]bool{}
		for r := range ftrma.Rank(s.n) {
			if o.failed(r) {
				continue // its keys have replicas on live ranks
			}
			keys, err := o.keysAt(ctx, r)
			if err != nil && retryErr(err) && o.stale() {
				return errNewView
			}
			if err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
				return err // a rank failing meanwhile has its keys elsewhere
			}
			for _, k := range keys {
				if strings.HasPrefix(k, prefix) && !strings.HasPrefix(k, reservedPrefix) {
					seen[k] = true
				}
			}
		}
		out = make([]string, 0, len(seen))
		for k := range seen {
			out = append(out, k)
		}
		return nil
	})
	return out, err
}

// keysAt reads rank r's slot table and the keys of its slots that hold a
// value. A key block is believed only when the key hashes to the slot's hash
// word (a slot freed and reused under the read shows another key's, or a
// freed block's bytes).
func (o *op) keysAt(ctx context.Context, r ftrma.Rank) ([]string, error) {
	tbl := make([]byte, o.opt.Slots*slotBytes)
	if err := o.v().w.Get(r, o.slotAddr(r, 0), tbl); err != nil {
		return nil, err
	}
	if err := o.v().w.Flush(ctx, r); err != nil {
		return nil, err
	}
	type cand struct {
		h, addr uint64
		hdr     [keyHeader]byte
		block   []byte
	}
	var cands []*cand
	for i := range o.opt.Slots {
		w := func(f int) uint64 { return word(tbl, i*slotWords+f) }
		if k := w(slotKey); k != 0 && k != slotTomb && w(slotHash) != 0 && w(slotCurAddr) != 0 {
			c := &cand{h: w(slotHash), addr: k}
			if err := o.v().w.Get(r, c.addr, c.hdr[:]); err != nil {
				return nil, err
			}
			cands = append(cands, c)
		}
	}
	if err := o.v().w.Flush(ctx, r); err != nil {
		return nil, err
	}
	var reads []*cand
	for _, c := range cands {
		n := word(c.hdr[:], 1)
		if word(c.hdr[:], 0) != c.h || n == 0 || n > uint64(o.keyLimit()) {
			continue
		}
		c.block = make([]byte, keyBlockLen(int(n)))
		if err := o.v().w.Get(r, c.addr, c.block); err != nil {
			continue
		}
		reads = append(reads, c)
	}
	if err := o.v().w.Flush(ctx, r); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(reads))
	for _, c := range reads {
		key := c.block[keyHeader : keyHeader+int(word(c.block, 1))]
		if o.hash(key) == c.h && bytes.Equal(c.block[:8], c.hdr[:8]) {
			out = append(out, string(key))
		}
	}
	return out, nil
}
