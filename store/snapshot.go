package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
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
// all. Collective: every live rank calls it with the same dir, which all of
// them must reach (one file system, or one host); a rank's calls are taken
// one at a time, so ranks that call it from several goroutines must call it
// with one dir.
//
// Writers are held only for the cut itself: each rank waits for its own
// operations under way, holds back new ones (reads too), the ranks agree
// that all have, each scans its slot table and pins its heap (cutCopy),
// they agree again, and the operations go on while each rank reads the
// records of the keys it is the first live replica of and writes its
// file. Every rank then checks the files of the others and writes the
// manifest, last: until it is there the snapshot is incomplete, and
// Restore never reads it.
//
// Ranks that failed before it are left out: the live replicas hold their
// keys. A rank that fails during it makes the survivors take the cut again
// without it (its keys from their next live replica), so that the snapshot
// completes over the survivors with every key that has a live copy — or,
// when the failure leaves a key no live copy, with the others, Get telling
// ErrDataLost for that key. Every live rank returns the same result: nil
// once the snapshot is complete on disk. It fails with the file system's
// error when a file cannot be written, with ctx's, or with ErrInvalid when
// the ranks name different directories.
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
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	c := s.current().c
	dir = filepath.Clean(dir)
	_, same, err := agreeVote(ctx, c, 1, crc32.Checksum([]byte(dir), snapCRC))
	switch {
	case err != nil:
		return fail(err)
	case !same:
		return fail(fmt.Errorf("%w: the ranks named different directories", ftrma.ErrInvalid))
	}
	// Each attempt that is taken again follows a failure during the one
	// before: there are at most Size of them.
	for attempt := 0; ; attempt++ {
		info, err := s.snapshotOnce(ctx, c, dir)
		if errors.Is(err, errSnapAgain) && attempt < c.Size() {
			continue
		}
		if err != nil {
			return fail(err)
		}
		return info, nil
	}
}

// testHookSnapshot is called at five points of a snapshot's attempt: "cut"
// once the cut is agreed, "copied" once this rank has taken its copy,
// "read" after its gate opened and before it reads its records, "file"
// once its data file is written, "manifest" once the manifest is.
var testHookSnapshot testHook[func(s *Store, at string)]

// errSnapAgain: a rank failed during a snapshot's attempt; the survivors
// take the cut again.
var errSnapAgain = errors.New("a rank failed during the snapshot")

// snapshotOnce is one attempt of Snapshot: the cut, every live rank's file,
// the manifest. Every step ends in an agreement of the survivors, so every
// live rank takes the same way out of it.
func (s *Store) snapshotOnce(ctx context.Context, c window.Comm, dir string) (SnapshotInfo, error) {
	cut, cp, live, err := s.takeCut(ctx, c)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if hook := testHookSnapshot.get(); hook != nil {
		hook(s, "read")
	}
	recs, werr := s.readOwn(cp, live)
	sdir := filepath.Join(dir, snapDirName(cut))
	if werr == nil {
		werr = os.MkdirAll(sdir, 0o755)
	}
	if werr == nil {
		_, werr = writeSnapDataFile(sdir, &snapData{cut: cut, rank: uint32(s.me), records: recs})
	}
	if hook := testHookSnapshot.get(); hook != nil {
		hook(s, "file")
	}
	// Once every live rank has said, its file is there or it failed.
	if ok, _, err := agreeVote(ctx, c, okBit(werr), 0); err != nil || ok == 0 {
		return SnapshotInfo{}, cmp.Or(err, werr, errors.New("a rank could not write its file"))
	}
	m := &snapManifest{cut: cut, unixNano: int64(cut), ranks: uint32(c.Size()), copies: uint32(s.opt.Copies)}
	keys := 0
	var missing, merr error
	for _, r := range live {
		e, err := statSnapDataFile(sdir, snapDataName(uint32(r)), cut)
		if err != nil {
			missing = err
			break
		}
		keys += int(e.records)
		m.files = append(m.files, e)
	}
	if missing == nil {
		merr = writeSnapManifestFile(sdir, m)
	}
	if hook := testHookSnapshot.get(); hook != nil {
		hook(s, "manifest")
	}
	// Bit 0: the manifest written; bit 1: no live rank's file missing.
	said, _, err := agreeVote(ctx, c, okBit(merr)|okBit(missing)<<1, 0)
	switch {
	case err != nil:
		return SnapshotInfo{}, err
	case said&2 == 0:
		os.RemoveAll(sdir) // a rank failed before writing its file: never complete
		return SnapshotInfo{}, fmt.Errorf("%w: %w", errSnapAgain, cmp.Or(missing, errors.New("another rank found a file missing")))
	case said&1 == 0:
		return SnapshotInfo{}, cmp.Or(merr, errors.New("a rank could not write the manifest"))
	}
	s.noteSnapshot(sdir, cut)
	return SnapshotInfo{Dir: sdir, Cut: cut, Keys: keys}, nil
}

// takeCut closes this rank's gate, agrees with the others on the cut's
// identity (which says all are closed), takes what it needs of its own
// memory (copyAtCut), agrees again and opens the gate. It returns the cut,
// the copy (readOwn finishes it) and the ranks that copy: those not known
// failed at the copy, the same set at every live rank, or errSnapAgain.
func (s *Store) takeCut(ctx context.Context, c window.Comm) (uint64, *cutCopy, []ftrma.Rank, error) {
	s.gate.Lock()
	defer s.gate.Unlock()
	// The cut's identity: larger than any a live rank took or restored
	// (the bitwise OR of the proposals is at least their largest).
	cut, err := agreeOr(ctx, c, max(uint64(time.Now().UnixNano()), s.lastCut.Load()+1))
	if err != nil {
		return 0, nil, nil, err
	}
	s.lastCut.Store(cut)
	if hook := testHookSnapshot.get(); hook != nil {
		hook(s, "cut")
	}
	// Every live rank's writes are held now: what each copies is the cut.
	// The failed ranks are fixed for the copy, and the ranks check that
	// they fixed the same ones: then each key has one copier.
	var live []ftrma.Rank
	var failed []byte
	for r := range ftrma.Rank(c.Size()) {
		if c.ProcFailed(r) {
			failed = binary.LittleEndian.AppendUint32(failed, uint32(r))
		} else {
			live = append(live, r)
		}
	}
	cp, err := s.copyAtCut(ctx, notIn(live))
	if hook := testHookSnapshot.get(); hook != nil {
		hook(s, "copied")
	}
	ok, same, aerr := agreeVote(ctx, c, okBit(err), crc32.Checksum(failed, snapCRC))
	if aerr == nil && same && ok != 0 {
		return cut, cp, live, nil
	}
	cp.release()
	switch {
	case aerr != nil:
		return 0, nil, nil, aerr
	case !same:
		return 0, nil, nil, errSnapAgain // a failure became known during the copy
	}
	return 0, nil, nil, cmp.Or(err, errors.New("a rank could not copy its keys"))
}

// notIn is the failed-rank test of a copy: r is not among live.
func notIn(live []ftrma.Rank) func(ftrma.Rank) bool {
	return func(r ftrma.Rank) bool { return !slices.Contains(live, r) }
}

// cutCopy is what a rank took of its own memory at the cut. Records are
// written once into heap blocks and never in place: a put writes a new
// block and frees the old one, which stays as it was until its chunk is
// handed back to writers (grow's reclaim). So at the cut a rank copies
// only its slot table, and pins its heap (no chunk is reclaimed while a
// copy holds it); the records the table points to are read after the gate
// opens, while writers go on writing elsewhere (readOwn).
type cutCopy struct {
	s     *Store
	heap  ownHeap
	slots []cutSlot    // records to read from this rank's heap
	recs  []snapRecord // the keys read through the store at the cut
}

// cutSlot is a slot whose current record is read after the cut: its
// address, length, version and the key's hash.
type cutSlot struct{ addr, len, ver, hash uint64 }

// release unpins the heap; nil-safe.
func (cp *cutCopy) release() {
	if cp != nil && cp.s != nil {
		cp.s.heapPins.Add(-1)
		cp.s = nil
	}
}

// copyAtCut reads this rank's slot table, under the gate, and lists the
// slots whose current version is done (every live replica held it when it
// was written: the fast read's rule, fastread.go), with nothing pending
// and a record of no transaction: those records are the cut's, read after
// the gate opens. The keys of the other slots that this rank is the first
// replica of (not failed by failed) — a write left pending by a failed
// writer, a version not yet marked done, a transaction's record — it reads
// now through the store's read, which settles them. The store's own keys
// (transaction decisions) are left out: a restored store starts with none.
func (s *Store) copyAtCut(ctx context.Context, failed func(ftrma.Rank) bool) (*cutCopy, error) {
	s.heapPins.Add(1)
	cp := &cutCopy{s: s}
	var slow []string
	err := s.inView(func(o *op) error {
		cp.slots, slow = cp.slots[:0], slow[:0]
		cp.heap = o.ownHeap()
		limit := o.recordLimit()
		for i := range o.opt.Slots {
			// This rank's own table: nothing writes its values now.
			base := hdrWords + i*slotWords
			w := func(f int) uint64 { return atomic.LoadUint64(&o.table[base+f]) }
			k, a := w(slotKey), w(slotCurAddr)
			if k == 0 || k == slotTomb || a == 0 {
				continue
			}
			h, n, v := w(slotHash), w(slotCurLen), w(slotCurVer)
			if h == 0 {
				continue
			}
			if hdr := cp.heap.bytes(a, recHeader); n >= recHeader && n <= limit && w(slotPAddr) == 0 && v == w(slotDone) &&
				hdr != nil && word(hdr, 0) == h && word(hdr, 1) == v && word(hdr, 2) == 0 && binary.LittleEndian.Uint32(hdr[36:])&recDeleted == 0 {
				cp.slots = append(cp.slots, cutSlot{addr: a, len: n, ver: v, hash: h})
				continue
			}
			id, err := o.ownKey(ctx, h, k)
			if err != nil {
				return err
			}
			if strings.HasPrefix(id.key, reservedPrefix) {
				continue
			}
			if reps := o.v().place.replicas(h, failed); len(reps) > 0 && reps[0] == s.me {
				slow = append(slow, id.key)
			}
		}
		return nil
	})
	for _, k := range slow {
		if err != nil {
			break
		}
		v, ver, gerr := s.get(ctx, s.ident([]byte(k)))
		switch {
		case errors.Is(gerr, ErrNotFound): // a slot left by a deletion
		case gerr != nil:
			err = gerr
		default:
			cp.recs = append(cp.recs, snapRecord{key: []byte(k), value: v, version: ver})
		}
	}
	if err != nil {
		cp.release()
		return nil, err
	}
	return cp, nil
}

// readOwn finishes the copy after the gate opened: it reads the listed
// records from this rank's heap, keeps those of keys this rank is the first
// replica of among live (not the store's own keys), unpins the heap, and
// returns every record of the copy in key order.
func (s *Store) readOwn(cp *cutCopy, live []ftrma.Rank) ([]snapRecord, error) {
	defer cp.release()
	s.memMu.RLock() // Close releases the heap's memory under the write side
	defer s.memMu.RUnlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	recs := cp.recs
	failed := notIn(live)
	v := s.current()
	for _, sl := range cp.slots {
		if reps := v.place.replicas(sl.hash, failed); len(reps) == 0 || reps[0] != s.me {
			continue
		}
		rec, ok := decodeRecord(cp.heap.bytes(sl.addr, sl.len))
		if !ok || rec.hash != sl.hash || rec.version != sl.ver || rec.tx != 0 {
			return nil, fmt.Errorf("store: the record of version %d at %#x changed after the cut", sl.ver, sl.addr)
		}
		if strings.HasPrefix(string(rec.key), reservedPrefix) {
			continue
		}
		recs = append(recs, snapRecord{key: bytes.Clone(rec.key), value: bytes.Clone(rec.value), version: sl.ver})
	}
	slices.SortFunc(recs, func(a, b snapRecord) int { return bytes.Compare(a.key, b.key) })
	return recs, nil
}

// ownHeap is this rank's heap chunks by window address.
type ownHeap struct {
	addrs []uint64
	mem   [][]byte
}

// ownHeap returns this rank's chunks, sorted by address.
func (o *op) ownHeap() ownHeap {
	o.heap.Lock()
	hp := ownHeap{addrs: slices.Clone(o.heap.addrs), mem: slices.Clone(o.heap.mem)}
	o.heap.Unlock()
	idx := make([]int, len(hp.addrs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(hp.addrs[a], hp.addrs[b]) })
	sorted := ownHeap{addrs: make([]uint64, len(idx)), mem: make([][]byte, len(idx))}
	for i, j := range idx {
		sorted.addrs[i], sorted.mem[i] = hp.addrs[j], hp.mem[j]
	}
	return sorted
}

// bytes returns the n bytes at window address a, in this rank's own
// memory, or nil when they are not all in one of its chunks.
func (hp ownHeap) bytes(a, n uint64) []byte {
	i, _ := slices.BinarySearch(hp.addrs, a+1)
	if i == 0 {
		return nil
	}
	base, mem := hp.addrs[i-1], hp.mem[i-1]
	if off := a - base; off+n <= uint64(len(mem)) && off+n >= off {
		return mem[off : off+n]
	}
	return nil
}

// agreeOr returns the bitwise OR of the live ranks' v, the same at each:
// the agreement's AND of the complements. Failed ranks are no error here:
// the survivors' value stands.
func agreeOr(ctx context.Context, c window.Comm, v uint64) (uint64, error) {
	a, err := c.Agree(ctx, ^v)
	if errors.Is(err, ftrma.ErrProcFailed) {
		err = nil
	}
	return ^a, err
}

// agreeVote is one step's agreement among the live ranks: the AND of their
// two bits, and whether every one gave the same 30-bit digest (the AND of
// the digests equals that of their complements, complemented). Failed ranks
// are no error: the survivors' value stands.
func agreeVote(ctx context.Context, c window.Comm, bits uint64, digest uint32) (uint64, bool, error) {
	const m = 1<<30 - 1
	d := uint64(digest) & m
	a, err := c.Agree(ctx, bits<<60|d<<30|^d&m)
	if errors.Is(err, ftrma.ErrProcFailed) {
		err = nil
	}
	return a >> 60 & 3, a>>30&m == ^a&m, err
}

// okBit is 1 when err is nil.
func okBit(err error) uint64 {
	if err != nil {
		return 0
	}
	return 1
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
		s.noteSnapshot(ls.dir, ls.manifest.cut)
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
