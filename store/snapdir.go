package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A snapshot directory holds one snapshot in a directory named after its
// cut (snapDirName) under the directory the user names; the newest
// complete one is what a restore reads (newestSnapshot). DESIGN.md §8.1.

// snapManifestName is the manifest's file name in a snapshot's directory.
const snapManifestName = "MANIFEST"

// snapDirName is the directory of the snapshot with cut point cut: zero
// padded, so that names sort as cuts do.
func snapDirName(cut uint64) string { return fmt.Sprintf("snap-%020d", cut) }

// snapDataName is the data file rank writes in a snapshot's directory.
func snapDataName(rank uint32) string { return fmt.Sprintf("rank-%d", rank) }

// writeFileSynced writes a file through write into dir under name: to a
// temporary name, synced, then renamed and the directory synced, so that
// the name never stands for a part of the file.
func writeFileSynced(dir, name string, write func(*os.File) error) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeSnapDataFile writes d as its rank's data file of the snapshot in
// dir and returns the manifest's entry for it.
func writeSnapDataFile(dir string, d *snapData) (snapFileEntry, error) {
	e := snapFileEntry{name: snapDataName(d.rank)}
	err := writeFileSynced(dir, e.name, func(f *os.File) error {
		w, err := writeSnapData(f, d)
		e.length, e.crc, e.records = w.length, w.crc, w.records
		return err
	})
	return e, err
}

// writeSnapManifestFile writes the manifest of the snapshot in dir, last:
// the snapshot is complete once it is there.
func writeSnapManifestFile(dir string, m *snapManifest) error {
	return writeFileSynced(dir, snapManifestName, func(f *os.File) error { return writeSnapManifest(f, m) })
}

// loadedSnapshot is a complete snapshot read back: its manifest and every
// data file it names, verified.
type loadedSnapshot struct {
	dir      string
	manifest *snapManifest
	data     []*snapData
}

// loadSnapshot reads and verifies the snapshot in dir: its manifest, then
// each file it names against the manifest's length, checksum and record
// count, and the cut every file carries.
func loadSnapshot(dir string, maxKey, maxValue int) (*loadedSnapshot, error) {
	mb, err := os.ReadFile(filepath.Join(dir, snapManifestName))
	if err != nil {
		return nil, fmt.Errorf("no manifest (an incomplete snapshot): %w", err)
	}
	m, err := readSnapManifest(bytes.NewReader(mb))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if filepath.Base(dir) != snapDirName(m.cut) {
		return nil, fmt.Errorf("%w: the manifest's cut %d is not the directory's", errSnapCorrupt, m.cut)
	}
	ls := &loadedSnapshot{dir: dir, manifest: m}
	for _, e := range m.files {
		b, err := os.ReadFile(filepath.Join(dir, e.name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if uint64(len(b)) != e.length || len(b) < 4 || binary.LittleEndian.Uint32(b[len(b)-4:]) != e.crc {
			return nil, fmt.Errorf("%w: %s: %d bytes, not the manifest's %d with its checksum", errSnapCorrupt, e.name, len(b), e.length)
		}
		d, err := readSnapData(bytes.NewReader(b), maxKey, maxValue)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if d.cut != m.cut || uint64(len(d.records)) != e.records {
			return nil, fmt.Errorf("%w: %s: cut %d with %d records, the manifest says cut %d with %d", errSnapCorrupt, e.name, d.cut, len(d.records), m.cut, e.records)
		}
		ls.data = append(ls.data, d)
	}
	return ls, nil
}

// snapCuts lists the cuts of the snapshot directories under root, in
// increasing order.
func snapCuts(root string) ([]uint64, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var cuts []uint64
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "snap-")
		if !e.IsDir() || !ok {
			continue
		}
		if cut, err := strconv.ParseUint(name, 10, 64); err == nil && snapDirName(cut) == e.Name() {
			cuts = append(cuts, cut)
		}
	}
	slices.Sort(cuts)
	return cuts, nil
}

// errNoSnapshot is wrapped by newestSnapshot's error when root holds no
// complete snapshot.
var errNoSnapshot = errors.New("store: no complete snapshot")

// newestSnapshot returns the newest complete snapshot under root (the
// largest cut whose directory verifies), and why each newer one was
// skipped.
func newestSnapshot(root string, maxKey, maxValue int) (*loadedSnapshot, []error, error) {
	cuts, err := snapCuts(root)
	if err != nil {
		return nil, nil, err
	}
	var skipped []error
	for i := len(cuts) - 1; i >= 0; i-- {
		dir := filepath.Join(root, snapDirName(cuts[i]))
		ls, err := loadSnapshot(dir, maxKey, maxValue)
		if err == nil {
			return ls, skipped, nil
		}
		skipped = append(skipped, fmt.Errorf("%s: %w", dir, err))
	}
	return nil, skipped, fmt.Errorf("%w under %s (%d incomplete or damaged: %w)", errNoSnapshot, root, len(skipped), errors.Join(skipped...))
}

// statSnapDataFile returns the manifest's entry for the data file name in
// dir from its header, its trailing checksum and its length, and checks
// that it belongs to the snapshot with cut cut. Data files appear under
// their names only whole (writeFileSynced), so a file that is there is
// complete; loadSnapshot verifies every byte when the snapshot is read.
func statSnapDataFile(dir, name string, cut uint64) (snapFileEntry, error) {
	e := snapFileEntry{name: name}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return e, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return e, err
	}
	s := newSnapReader(io.LimitReader(f, snapDataHeaderLen))
	s.header(snapDataMagic)
	s.u32() // the rank
	fileCut, records := s.u64(), s.u64()
	var sum [4]byte
	switch {
	case s.err != nil:
		return e, fmt.Errorf("%s: %w", name, s.err)
	case fileCut != cut:
		return e, fmt.Errorf("%w: %s: cut %d, not %d", errSnapCorrupt, name, fileCut, cut)
	case fi.Size() < snapDataHeaderLen+4:
		return e, fmt.Errorf("%w: %s: %d bytes", errSnapCorrupt, name, fi.Size())
	}
	if _, err := f.ReadAt(sum[:], fi.Size()-4); err != nil {
		return e, err
	}
	e.length, e.crc, e.records = uint64(fi.Size()), binary.LittleEndian.Uint32(sum[:]), records
	return e, nil
}
