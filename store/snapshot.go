package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// enter holds the read side of the store's gate for one public operation or
// one unit of background work, and returns what lets it go (DESIGN.md
// §8.2).
func (s *Store) enter() func() {
	s.gate.RLock()
	return s.gate.RUnlock
}

// SnapshotInfo describes a snapshot Snapshot wrote.
type SnapshotInfo struct {
	Dir  string // the snapshot's own directory, under the one Snapshot was given
	Cut  uint64 // the cut's identity; later snapshots have larger ones
	Keys int    // keys in the snapshot, over every rank's file
}

// Snapshot writes a consistent cut of the store under dir (DESIGN.md §8):
// every key with the value it had at one moment of the whole job, each put
// or delete acknowledged before Snapshot began in it, none that began after
// Snapshot returned, and a write under way either whole in it or not at
// all. Collective: every rank calls it with the same dir, which all of them
// must reach (one file system, or one host).
//
// Writers are held only for the cut itself: each rank waits for its own
// operations under way, holds back new ones (reads too), the ranks agree
// that all have, each copies from the store the keys it is the first live
// replica of, they agree again, and the operations go on while each rank
// writes its file. A rank then writes the manifest, last: until it is there
// the snapshot is incomplete, and Restore never reads it.
//
// It fails with an error wrapping ftrma.ErrProcFailed when a rank fails
// during it (take another once the failure is known), and with the file
// system's error when a file cannot be written. Not yet done: completing
// over the survivors when a rank fails midway.
func (s *Store) Snapshot(ctx context.Context, dir string) (SnapshotInfo, error) {
	const op = "store snapshot"
	fail := func(err error) (SnapshotInfo, error) {
		return SnapshotInfo{}, &ftrma.OpError{Op: op, Rank: -1, Err: err}
	}
	if s.closed.Load() {
		return fail(ErrClosed)
	}
	if s.growing.Load() {
		return fail(fmt.Errorf("%w: a Grow is under way", ftrma.ErrInvalid))
	}
	c := s.current().c
	recs, cut, err := s.takeCut(ctx, c)
	if err != nil {
		return fail(err)
	}
	sdir := filepath.Join(dir, snapDirName(cut))
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return fail(err)
	}
	e, err := writeSnapDataFile(sdir, &snapData{cut: cut, rank: uint32(s.me), records: recs})
	var mine []byte
	if err == nil {
		mine = binary.LittleEndian.AppendUint64(mine, e.length)
		mine = binary.LittleEndian.AppendUint32(mine, e.crc)
		mine = binary.LittleEndian.AppendUint64(mine, e.records)
	}
	all, gerr := c.Allgather(ctx, mine)
	if err == nil {
		err = gerr
	}
	if err != nil {
		return fail(err)
	}
	m := &snapManifest{cut: cut, unixNano: time.Now().UnixNano(), ranks: uint32(len(all)), copies: uint32(s.opt.Copies)}
	keys := 0
	for r, b := range all {
		if len(b) != 20 {
			return fail(fmt.Errorf("rank %d could not write its file", r))
		}
		f := snapFileEntry{name: snapDataName(uint32(r)), length: binary.LittleEndian.Uint64(b), crc: binary.LittleEndian.Uint32(b[8:]), records: binary.LittleEndian.Uint64(b[12:])}
		keys += int(f.records)
		m.files = append(m.files, f)
	}
	written := []byte{1}
	if s.me == 0 {
		if err = writeSnapManifestFile(sdir, m); err != nil {
			written[0] = 0
		}
	}
	// Every rank returns once rank 0 says the manifest is there: Snapshot
	// returning nil means the snapshot is complete.
	said, gerr := c.Allgather(ctx, written)
	switch {
	case err != nil:
	case gerr != nil:
		err = gerr
	case len(said[0]) != 1 || said[0][0] != 1:
		err = errors.New("rank 0 could not write the manifest")
	}
	if err != nil {
		return fail(err)
	}
	return SnapshotInfo{Dir: sdir, Cut: cut, Keys: keys}, nil
}

// takeCut closes this rank's gate, agrees with the others that all are
// closed, copies the keys this rank is the first live replica of, agrees
// again and opens the gate. It returns the records and the cut's identity.
func (s *Store) takeCut(ctx context.Context, c window.Comm) ([]snapRecord, uint64, error) {
	s.gate.Lock()
	defer s.gate.Unlock()
	// The cut's identity: larger than any this rank saw, agreed by taking
	// the largest proposal (a collective that also says every rank is here).
	prop := max(uint64(time.Now().UnixNano()), s.lastCut.Load()+1)
	all, err := c.Allgather(ctx, binary.LittleEndian.AppendUint64(nil, prop))
	if err != nil {
		return nil, 0, err
	}
	var cut uint64
	for _, b := range all {
		if len(b) == 8 {
			cut = max(cut, binary.LittleEndian.Uint64(b))
		}
	}
	s.lastCut.Store(cut)
	// Every rank's writes are held now: what each copies is the cut.
	recs, err := s.copyFirst(ctx)
	flag := uint64(1)
	if err != nil {
		flag = 0
	}
	v, aerr := c.Agree(ctx, flag)
	switch {
	case err != nil:
		return nil, 0, err
	case aerr != nil:
		return nil, 0, aerr
	case v != 1:
		return nil, 0, errors.New("a rank could not copy its keys")
	}
	return recs, cut, nil
}

// copyFirst reads the keys held at this rank for which it is the first
// live replica, with their values and versions, in key order.
func (s *Store) copyFirst(ctx context.Context) ([]snapRecord, error) {
	var names []string
	err := s.inView(func(o *op) error {
		all, err := o.keysAt(ctx, s.me)
		if err != nil {
			return err
		}
		names = names[:0]
		for _, k := range all {
			reps := o.v().place.replicas(s.hash([]byte(k)), o.failed)
			if len(reps) > 0 && reps[0] == s.me {
				names = append(names, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	recs := make([]snapRecord, 0, len(names))
	for _, k := range names {
		v, ver, err := s.get(ctx, s.ident([]byte(k)))
		if errors.Is(err, ErrNotFound) {
			continue // a slot left by a deletion
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, snapRecord{key: []byte(k), value: v, version: ver})
	}
	return recs, nil
}

// Restore opens a store over c, as Open, and fills it from the newest
// complete snapshot under dir (any number of ranks may have written it):
// each rank puts the keys of a share of the snapshot's files. Snapshots
// newer than the one read that are incomplete or damaged are skipped;
// RestoreInfo.Skipped says which and why. It fails with
// an error wrapping ErrNoSnapshot when dir holds no complete snapshot.
// Collective. Restored keys get new versions.
func Restore(ctx context.Context, c window.Comm, dir string, cfg Config) (*Store, RestoreInfo, error) {
	const op = "store restore"
	s, err := Open(ctx, c, cfg)
	if err != nil {
		return nil, RestoreInfo{}, err
	}
	ls, skipped, err := newestSnapshot(dir, s.opt.MaxKeySize, s.opt.MaxValueSize)
	if err == nil {
		info := RestoreInfo{Dir: ls.dir, Cut: ls.manifest.cut, Skipped: skipped}
		for i, d := range ls.data {
			if i%c.Size() != int(c.Rank()) {
				continue
			}
			for _, r := range d.records {
				if err = s.Put(ctx, r.key, r.value); err != nil {
					break
				}
				info.Keys++
			}
		}
		s.lastCut.Store(ls.manifest.cut)
		flag := uint64(1)
		if err != nil {
			flag = 0
		}
		if v, aerr := c.Agree(ctx, flag); err == nil && (aerr != nil || v != 1) {
			err = errors.Join(aerr, errors.New("a rank could not restore its share"))
		}
		if err == nil {
			return s, info, nil
		}
	}
	s.Close(ctx)
	return nil, RestoreInfo{}, &ftrma.OpError{Op: op, Rank: -1, Err: err}
}

// RestoreInfo describes what Restore read.
type RestoreInfo struct {
	Dir     string  // the snapshot's directory
	Cut     uint64  // its cut
	Keys    int     // keys this rank put
	Skipped []error // newer snapshots skipped, and why
}

// ErrNoSnapshot is wrapped by Restore's error when the directory holds no
// complete snapshot.
var ErrNoSnapshot = errNoSnapshot
