package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// Snapshot files (issue 28; DESIGN.md §8 has the format). A snapshot is a
// directory holding one data file per rank that wrote keys into it and,
// written last, a manifest naming those files with their lengths and
// checksums: a snapshot without a manifest, or whose files do not match
// it, is incomplete and never read. Both kinds of file are versioned,
// little-endian and end in a CRC-32C (Castagnoli) of every byte before it,
// so a torn or corrupted file is refused as a whole.

const (
	snapDataMagic     = "FTSNAPD\x00" // a rank's data file
	snapManifestMagic = "FTSNAPM\x00" // the manifest
	snapVersion       = 1
	// snapDataHeaderLen is a data file's bytes before its first record:
	// magic, version, flags, rank, cut and record count.
	snapDataHeaderLen = 8 + 2 + 2 + 4 + 8 + 8
	// snapMaxFiles bounds a manifest's file count: a store has at most
	// ownerMask ranks.
	snapMaxFiles = ownerMask
	// snapMaxName bounds a file name in a manifest.
	snapMaxName = 255
)

var snapCRC = crc32.MakeTable(crc32.Castagnoli)

// errSnapCorrupt is why a snapshot file is refused: it is not a whole file
// of the format (torn, truncated, corrupted, or of another version).
var errSnapCorrupt = errors.New("store: snapshot file corrupt")

// snapRecord is one key of a snapshot with its value and version.
type snapRecord struct {
	key, value []byte
	version    uint64
}

// snapData is a rank's data file: the records it wrote at cut point cut.
type snapData struct {
	cut     uint64 // the snapshot's cut: the same in every file of one snapshot
	rank    uint32 // the rank that wrote it
	records []snapRecord
}

// snapFileEntry is a data file as the manifest names it.
type snapFileEntry struct {
	name    string
	length  uint64 // bytes
	crc     uint32 // the file's own checksum (its last four bytes)
	records uint64
}

// snapManifest describes a complete snapshot.
type snapManifest struct {
	cut      uint64 // the cut point, the snapshot's identity
	unixNano int64  // when the cut was taken
	ranks    uint32 // the store's ranks at the cut
	copies   uint32 // the store's Config.Copies at the cut
	files    []snapFileEntry
}

// snapWriter writes little-endian fields and keeps the running checksum.
type snapWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	n   uint64
	err error
}

func newSnapWriter(w io.Writer) *snapWriter {
	return &snapWriter{w: bufio.NewWriterSize(w, 1<<16), crc: crc32.New(snapCRC)}
}

func (s *snapWriter) bytes(b []byte) {
	if s.err != nil {
		return
	}
	s.crc.Write(b)
	_, s.err = s.w.Write(b)
	s.n += uint64(len(b))
}

func (s *snapWriter) u16(v uint16) { s.bytes(binary.LittleEndian.AppendUint16(nil, v)) }
func (s *snapWriter) u32(v uint32) { s.bytes(binary.LittleEndian.AppendUint32(nil, v)) }
func (s *snapWriter) u64(v uint64) { s.bytes(binary.LittleEndian.AppendUint64(nil, v)) }

// finish writes the checksum of everything written and flushes; it returns
// the file's length and checksum.
func (s *snapWriter) finish() (uint64, uint32, error) {
	sum := s.crc.Sum32()
	if s.err == nil {
		_, s.err = s.w.Write(binary.LittleEndian.AppendUint32(nil, sum))
		s.n += 4
	}
	if s.err == nil {
		s.err = s.w.Flush()
	}
	return s.n, sum, s.err
}

// writeSnapData writes d to w in the data file format and returns the
// manifest's entry for it (its name left empty).
func writeSnapData(w io.Writer, d *snapData) (snapFileEntry, error) {
	s := newSnapWriter(w)
	s.bytes([]byte(snapDataMagic))
	s.u16(snapVersion)
	s.u16(0) // flags: none defined
	s.u32(d.rank)
	s.u64(d.cut)
	s.u64(uint64(len(d.records)))
	for _, r := range d.records {
		s.u32(uint32(len(r.key)))
		s.u32(uint32(len(r.value)))
		s.u64(r.version)
		s.bytes(r.key)
		s.bytes(r.value)
	}
	n, sum, err := s.finish()
	return snapFileEntry{length: n, crc: sum, records: uint64(len(d.records))}, err
}

// writeSnapManifest writes m to w in the manifest format.
func writeSnapManifest(w io.Writer, m *snapManifest) error {
	s := newSnapWriter(w)
	s.bytes([]byte(snapManifestMagic))
	s.u16(snapVersion)
	s.u16(0)
	s.u64(m.cut)
	s.u64(uint64(m.unixNano))
	s.u32(m.ranks)
	s.u32(m.copies)
	s.u32(uint32(len(m.files)))
	for _, f := range m.files {
		s.u16(uint16(len(f.name)))
		s.bytes([]byte(f.name))
		s.u64(f.length)
		s.u32(f.crc)
		s.u64(f.records)
	}
	_, _, err := s.finish()
	return err
}

// snapReader reads little-endian fields, keeping the running checksum;
// its first error sticks.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	n   uint64
	err error
}

func newSnapReader(r io.Reader) *snapReader {
	return &snapReader{r: bufio.NewReaderSize(r, 1<<16), crc: crc32.New(snapCRC)}
}

func (s *snapReader) fail(format string, a ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: at byte %d: %s", errSnapCorrupt, s.n, fmt.Sprintf(format, a...))
	}
}

// bytes reads n bytes; n is checked against the caller's bound before.
func (s *snapReader) bytes(n int) []byte {
	if s.err != nil {
		return nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		s.fail("%d bytes: %v", n, err)
		return nil
	}
	s.crc.Write(b)
	s.n += uint64(n)
	return b
}

func (s *snapReader) u16() uint16 {
	if b := s.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (s *snapReader) u32() uint32 {
	if b := s.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (s *snapReader) u64() uint64 {
	if b := s.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// header checks the magic, the version and the flags.
func (s *snapReader) header(magic string) {
	if m := s.bytes(len(magic)); s.err == nil && string(m) != magic {
		s.fail("not a %q file", magic[:len(magic)-1])
	}
	if v := s.u16(); s.err == nil && v != snapVersion {
		s.fail("version %d, this reader knows %d", v, snapVersion)
	}
	if f := s.u16(); s.err == nil && f != 0 {
		s.fail("unknown flags %#x", f)
	}
}

// end checks the trailing checksum and that nothing follows it.
func (s *snapReader) end() error {
	if s.err != nil {
		return s.err
	}
	want := s.crc.Sum32()
	var b [4]byte
	if _, err := io.ReadFull(s.r, b[:]); err != nil {
		s.fail("checksum: %v", err)
		return s.err
	}
	if got := binary.LittleEndian.Uint32(b[:]); got != want {
		s.fail("checksum %#08x, content sums to %#08x", got, want)
		return s.err
	}
	if _, err := s.r.ReadByte(); err != io.EOF {
		s.fail("bytes after the checksum")
	}
	return s.err
}

// readSnapData reads a data file, refusing keys over maxKey bytes and
// values over maxValue (the store's limits), so that a corrupt length
// cannot make it allocate more than the file could hold.
func readSnapData(r io.Reader, maxKey, maxValue int) (*snapData, error) {
	s := newSnapReader(r)
	s.header(snapDataMagic)
	d := &snapData{rank: s.u32(), cut: s.u64()}
	count := s.u64()
	for i := uint64(0); i < count && s.err == nil; i++ {
		kl, vl, ver := s.u32(), s.u32(), s.u64()
		if s.err != nil {
			break
		}
		if kl == 0 || int64(kl) > int64(maxKey) || int64(vl) > int64(maxValue) {
			s.fail("record %d: key of %d bytes, value of %d (limits %d, %d)", i, kl, vl, maxKey, maxValue)
			break
		}
		d.records = append(d.records, snapRecord{version: ver, key: s.bytes(int(kl)), value: s.bytes(int(vl))})
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	return d, nil
}

// readSnapManifest reads a manifest.
func readSnapManifest(r io.Reader) (*snapManifest, error) {
	s := newSnapReader(r)
	s.header(snapManifestMagic)
	m := &snapManifest{cut: s.u64(), unixNano: int64(s.u64()), ranks: s.u32(), copies: s.u32()}
	n := s.u32()
	if s.err == nil && n > snapMaxFiles {
		s.fail("%d files", n)
	}
	for i := uint32(0); i < n && s.err == nil; i++ {
		l := s.u16()
		if s.err == nil && (l == 0 || l > snapMaxName) {
			s.fail("file %d: a name of %d bytes", i, l)
			break
		}
		f := snapFileEntry{name: string(s.bytes(int(l))), length: s.u64(), crc: s.u32(), records: s.u64()}
		if s.err == nil && !validSnapName(f.name) {
			s.fail("file %d: name %q", i, f.name)
		}
		m.files = append(m.files, f)
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(m.files))
	for _, f := range m.files {
		if seen[f.name] {
			return nil, fmt.Errorf("%w: file %q named twice", errSnapCorrupt, f.name)
		}
		seen[f.name] = true
	}
	return m, nil
}

// validSnapName reports whether name is a plain file name a manifest may
// name: no directory, no path tricks.
func validSnapName(name string) bool {
	if name == "" || name == "." || name == ".." || len(name) > snapMaxName {
		return false
	}
	for _, c := range []byte(name) {
		if c == '/' || c == '\\' || c == 0 {
			return false
		}
	}
	return true
}
