package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// DataLostError is the error of Get and GetVersion for a key whose every
// copy may be gone (it wraps ErrDataLost) when the store knows a snapshot:
// the last this rank took or was restored from. It says whether that
// snapshot holds the key, so that a program knows where to take it from
// again (Restore, or its own copy).
type DataLostError struct {
	Key        []byte
	Snapshot   string // the snapshot's directory
	Cut        uint64 // its cut
	InSnapshot bool   // the snapshot holds a value of Key
	// Why is set when the snapshot could not be read to say.
	Why error
}

func (e *DataLostError) Error() string {
	switch {
	case e.Why != nil:
		return fmt.Sprintf("%v: %q (snapshot %s unreadable: %v)", ErrDataLost, e.Key, e.Snapshot, e.Why)
	case e.InSnapshot:
		return fmt.Sprintf("%v: %q; snapshot %s (cut %d) holds it", ErrDataLost, e.Key, e.Snapshot, e.Cut)
	}
	return fmt.Sprintf("%v: %q; not in snapshot %s (cut %d)", ErrDataLost, e.Key, e.Snapshot, e.Cut)
}

func (e *DataLostError) Unwrap() error { return ErrDataLost }

// knownSnapshot is the last snapshot a rank took or restored, and, once a
// lost key asked for it, the keys it holds.
type knownSnapshot struct {
	dir string
	cut uint64

	once sync.Once
	keys map[string]bool
	err  error
}

// noteSnapshot remembers the snapshot in dir with cut cut as this rank's
// last.
func (s *Store) noteSnapshot(dir string, cut uint64) {
	s.lastSnap.Store(&knownSnapshot{dir: dir, cut: cut})
}

// lost turns ErrDataLost for key into a DataLostError naming the last
// snapshot, reading its keys the first time; other errors pass.
func (s *Store) lost(key []byte, err error) error {
	ks := s.lastSnap.Load()
	if ks == nil || !errors.Is(err, ErrDataLost) {
		return err
	}
	ks.once.Do(func() {
		ls, err := loadSnapshot(ks.dir, s.opt.MaxKeySize, s.opt.MaxValueSize)
		if err != nil {
			ks.err = err
			return
		}
		ks.keys = map[string]bool{}
		for _, d := range ls.data {
			for _, r := range d.records {
				ks.keys[string(r.key)] = true
			}
		}
	})
	return &DataLostError{Key: slices.Clone(key), Snapshot: ks.dir, Cut: ks.cut, InSnapshot: ks.keys[string(key)], Why: ks.err}
}

// PruneSnapshots removes from dir the snapshots older than its keep newest
// complete ones (complete or not), and returns the directories it removed.
// Newer incomplete ones stay: one may be under way. keep must be at least 1;
// a directory without a complete snapshot is left as it is. Not collective:
// one process calls it, after a Snapshot returned.
func PruneSnapshots(ctx context.Context, dir string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("store: PruneSnapshots keeps %d snapshots: at least 1", keep)
	}
	cuts, err := snapCuts(dir)
	if err != nil {
		return nil, err
	}
	kept, oldest := 0, -1
	for i := len(cuts) - 1; i >= 0 && kept < keep; i-- {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The manifest's presence is what makes a snapshot complete; a
		// damaged one is no reason to keep an older one fewer.
		if _, err := os.Stat(filepath.Join(dir, snapDirName(cuts[i]), snapManifestName)); err == nil {
			kept, oldest = kept+1, i
		}
	}
	if kept < keep {
		return nil, nil
	}
	var removed []string
	for _, cut := range cuts[:oldest] {
		d := filepath.Join(dir, snapDirName(cut))
		if err := os.RemoveAll(d); err != nil {
			return removed, err
		}
		removed = append(removed, d)
	}
	return removed, nil
}
