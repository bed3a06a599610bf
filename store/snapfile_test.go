package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func sampleSnapData() *snapData {
	return &snapData{cut: 42, rank: 3, records: []snapRecord{
		{key: []byte("task/1"), value: []byte("descriptor"), version: 7},
		{key: []byte("k"), value: nil, version: 1},
		{key: bytes.Repeat([]byte{0xff}, 300), value: bytes.Repeat([]byte{1, 2}, 5000), version: 1 << 40},
	}}
}

func sampleManifest() *snapManifest {
	return &snapManifest{cut: 42, unixNano: 1_700_000_000_000_000_000, ranks: 8, copies: 3, files: []snapFileEntry{
		{name: "rank-0", length: 100, crc: 0xdeadbeef, records: 3},
		{name: "rank-5", length: 7, crc: 1, records: 0},
	}}
}

// What is written reads back the same, data files and manifests.
func TestSnapFileRoundTrip(t *testing.T) {
	var b bytes.Buffer
	d := sampleSnapData()
	e, err := writeSnapData(&b, d)
	if err != nil {
		t.Fatal(err)
	}
	if e.length != uint64(b.Len()) || e.records != 3 || e.crc != binary.LittleEndian.Uint32(b.Bytes()[b.Len()-4:]) {
		t.Fatalf("entry %+v for a file of %d bytes", e, b.Len())
	}
	got, err := readSnapData(bytes.NewReader(b.Bytes()), 1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got.cut != d.cut || got.rank != d.rank || len(got.records) != len(d.records) {
		t.Fatalf("read %+v", got)
	}
	for i, r := range d.records {
		g := got.records[i]
		if !bytes.Equal(g.key, r.key) || !bytes.Equal(g.value, r.value) || g.version != r.version {
			t.Fatalf("record %d: %q=%q v%d, want %q=%q v%d", i, g.key, g.value, g.version, r.key, r.value, r.version)
		}
	}
	b.Reset()
	m := sampleManifest()
	if err := writeSnapManifest(&b, m); err != nil {
		t.Fatal(err)
	}
	gm, err := readSnapManifest(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if gm.cut != m.cut || gm.unixNano != m.unixNano || gm.ranks != m.ranks || gm.copies != m.copies || len(gm.files) != 2 || gm.files[1] != m.files[1] {
		t.Fatalf("manifest %+v, want %+v", gm, m)
	}
}

// A file cut short anywhere, with a byte changed anywhere, or with bytes
// after its end is refused as corrupt; so are records over the limits and
// a manifest naming a path or a file twice.
func TestSnapFileRefusesDamage(t *testing.T) {
	var b bytes.Buffer
	if _, err := writeSnapData(&b, sampleSnapData()); err != nil {
		t.Fatal(err)
	}
	whole := b.Bytes()
	read := func(p []byte) error { _, err := readSnapData(bytes.NewReader(p), 1024, 1<<20); return err }
	for n := range len(whole) {
		if err := read(whole[:n]); !errors.Is(err, errSnapCorrupt) {
			t.Fatalf("cut to %d of %d bytes: %v", n, len(whole), err)
		}
	}
	for i := 0; i < len(whole); i += 7 {
		p := bytes.Clone(whole)
		p[i] ^= 0x10
		if err := read(p); !errors.Is(err, errSnapCorrupt) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
	if err := read(append(bytes.Clone(whole), 0)); !errors.Is(err, errSnapCorrupt) {
		t.Fatalf("a byte after the end: %v", err)
	}
	if _, err := readSnapData(bytes.NewReader(whole), 100, 1<<20); !errors.Is(err, errSnapCorrupt) {
		t.Fatalf("a 300-byte key with a limit of 100: %v", err)
	}
	for _, name := range []string{"../x", "a/b", "", ".."} {
		m := sampleManifest()
		m.files[0].name = name
		b.Reset()
		writeSnapManifest(&b, m)
		if _, err := readSnapManifest(bytes.NewReader(b.Bytes())); !errors.Is(err, errSnapCorrupt) {
			t.Fatalf("a file named %q: %v", name, err)
		}
	}
	m := sampleManifest()
	m.files[1].name = m.files[0].name
	b.Reset()
	writeSnapManifest(&b, m)
	if _, err := readSnapManifest(bytes.NewReader(b.Bytes())); !errors.Is(err, errSnapCorrupt) {
		t.Fatalf("a file named twice: %v", err)
	}
}

// Any input: the readers never panic, and allocate at most the limits a
// record at a time; what they accept writes back to the same bytes.
func FuzzReadSnapFile(f *testing.F) {
	var b bytes.Buffer
	writeSnapData(&b, sampleSnapData())
	f.Add(b.Bytes())
	b.Reset()
	writeSnapManifest(&b, sampleManifest())
	f.Add(b.Bytes())
	f.Add([]byte(snapDataMagic))
	f.Fuzz(func(t *testing.T, p []byte) {
		if d, err := readSnapData(bytes.NewReader(p), 1024, 1<<20); err == nil {
			var w bytes.Buffer
			if _, err := writeSnapData(&w, d); err != nil || !bytes.Equal(w.Bytes(), p) {
				t.Fatalf("a data file read back does not write back the same (%v)", err)
			}
		}
		if m, err := readSnapManifest(bytes.NewReader(p)); err == nil {
			var w bytes.Buffer
			if err := writeSnapManifest(&w, m); err != nil || !bytes.Equal(w.Bytes(), p) {
				t.Fatalf("a manifest read back does not write back the same (%v)", err)
			}
		}
	})
}
