package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// writeTestSnapshot writes a complete snapshot of cut with two ranks'
// files under root, or without its manifest when complete is false.
func writeTestSnapshot(t *testing.T, root string, cut uint64, complete bool) string {
	t.Helper()
	dir := filepath.Join(root, snapDirName(cut))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &snapManifest{cut: cut, unixNano: 1, ranks: 2, copies: 2}
	for r := range uint32(2) {
		d := &snapData{cut: cut, rank: r, records: []snapRecord{{key: []byte{'k', byte('0' + r)}, value: []byte{byte(cut)}, version: cut}}}
		e, err := writeSnapDataFile(dir, d)
		if err != nil {
			t.Fatal(err)
		}
		m.files = append(m.files, e)
	}
	if complete {
		if err := writeSnapManifestFile(dir, m); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The newest complete snapshot is read; newer ones without a manifest, or
// with a file truncated or changed, are skipped, each with its reason, and
// no complete one at all is an error.
func TestNewestSnapshot(t *testing.T) {
	root := t.TempDir()
	writeTestSnapshot(t, root, 5, true)
	writeTestSnapshot(t, root, 9, true)
	ls, skipped, err := newestSnapshot(root, 64, 64)
	if err != nil || ls.manifest.cut != 9 || len(skipped) != 0 || len(ls.data) != 2 || ls.data[1].records[0].value[0] != 9 {
		t.Fatalf("newest of 5 and 9: %+v, %v, %v", ls, skipped, err)
	}

	writeTestSnapshot(t, root, 12, false) // torn: no manifest
	truncated := writeTestSnapshot(t, root, 11, true)
	p := filepath.Join(truncated, snapDataName(1))
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-1], 0o644)
	changed := writeTestSnapshot(t, root, 10, true)
	p = filepath.Join(changed, snapDataName(0))
	b, _ = os.ReadFile(p)
	b[20] ^= 1
	os.WriteFile(p, b, 0o644)
	ls, skipped, err = newestSnapshot(root, 64, 64)
	if err != nil || ls.manifest.cut != 9 || len(skipped) != 3 {
		t.Fatalf("with 10, 11 and 12 damaged: %+v, skipped %v, %v", ls, skipped, err)
	}
	for _, e := range skipped[1:] {
		if !errors.Is(e, errSnapCorrupt) {
			t.Errorf("skipped for %v, want errSnapCorrupt", e)
		}
	}

	os.RemoveAll(filepath.Join(root, snapDirName(9)))
	os.Remove(filepath.Join(root, snapDirName(5), snapManifestName))
	if _, _, err := newestSnapshot(root, 64, 64); !errors.Is(err, errNoSnapshot) {
		t.Fatalf("no complete snapshot: %v, want errNoSnapshot", err)
	}
}

// A manifest moved into another snapshot's directory is refused: a
// snapshot's files are all of its cut.
func TestSnapshotDirIsItsCut(t *testing.T) {
	root := t.TempDir()
	a := writeTestSnapshot(t, root, 3, true)
	b := writeTestSnapshot(t, root, 4, false)
	m, _ := os.ReadFile(filepath.Join(a, snapManifestName))
	os.WriteFile(filepath.Join(b, snapManifestName), m, 0o644)
	if _, err := loadSnapshot(b, 64, 64); !errors.Is(err, errSnapCorrupt) {
		t.Fatalf("cut 3's manifest in cut 4's directory: %v", err)
	}
}
