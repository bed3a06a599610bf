//go:build linux

package shm

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/ftrma/ftrma"
)

// The control segment of a rank (see doc.go for the picture). Offsets are in
// bytes from the start of the file; every word is accessed with sync/atomic.
// Words written by different processes sit on different 64-byte lines.
const (
	magicWord     = 0x6d6873616d727466 // "ftrmashm" in little-endian bytes
	layoutVersion = 5                  // 2: lines and rings for Config.Ranks only; 3: bells instead of futexes, ring headers apart from their data; 4: reader lines, offBarrier; 5: internal messages (pieceInternal), target-executed regions

	// Header: written once by Open before the file gets its final name,
	// except for the words from offState on.
	offMagic     = 0
	offVersion   = 8
	offSize      = 16 // ranks of the job
	offRank      = 24 // the owner's rank
	offRingBytes = 32 // capacity of each incoming ring
	offRegions   = 40 // key-table entries, a power of two
	offPID       = 48 // the owner's process id
	offTotal     = 56 // file size
	offState     = 64 // stateOpen, then stateClosed when the owner closes, or stateExited when the launcher reaped it (MarkExited)
	offSlots     = 72 // ranks served (len(Config.Ranks)): active lines and rings
	offRanksSum  = 80 // ranksSum(Config.Ranks)
	// offSleeping (uint32) is set while the owner's progress goroutine
	// parks: senders ring its bell after publishing a message if it is set.
	// (Word 128, the futex doorbell of version 2, is no longer used.)
	offSleeping = 132
	// offEpoch selects which of the two in-flight counters of an origin new
	// operations count themselves in; Deregister flips it and waits for the
	// other to drain.
	offEpoch = 192
	// offReleaseGen counts Release calls: a peer that sees it change drops
	// its mappings of segments whose files are gone.
	offReleaseGen = 256
	// offBarrier is 1 when the owner registered for membarrier's global
	// expedited command (Open): it takes the fast path toward peers that did
	// too, and its Deregister and Fence issue the barrier (see fast.go).
	offBarrier  = 320
	headerBytes = 512

	// One line per processor (P) of the owner's Go runtime below
	// readerSlots: the fast path's announcement (fast.go). target is the
	// slot+1 of the rank whose memory an operation running on that P is
	// accessing, 0 when none; seq counts the operations begun there.
	// Written by the owner only, read by every rank it may access.
	readerSlots  = 64
	readerStride = 64
	readerTarget = 0
	readerSeq    = 8

	// One line per served origin rank, by its slot (its position in the
	// sorted Config.Ranks): operations of that origin under way in this
	// rank's memory, counted in the slot of the epoch they entered in, and
	// whether this rank fenced the origin.
	activeStride = 64
	actCount0    = 0
	actCount1    = 8
	actFenced    = 16

	// Key table entry: state is key<<8|1 while the key is registered, 0 when
	// free; the other words are written before state is published.
	entryBytes  = 32
	entryState  = 0
	entrySeg    = 8
	entryOffset = 16
	entryLength = 24

	// Incoming ring from one sender: its header (with the others'), and
	// apart, RingBytes of data.
	ringHead    = 0   // consumer position (bytes consumed), written by the owner
	ringTail    = 64  // producer position (bytes published), written by the sender
	ringClosed  = 128 // uint32: the sender closed its transport after its last message
	ringSpace   = 192 // uint32: bumped when a waiting sender may have room (the sender's bell rings too)
	ringWaiting = 196 // uint32: the sender is parked waiting for room
	ringHeader  = 256

	stateOpen   = 1
	stateClosed = 2
	stateExited = 3
)

var pageSize = os.Getpagesize()

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// layout places the parts of a control segment. The active lines and the
// rings are indexed by slot: a served rank's position in the sorted list of
// served ranks (its rank when every rank is served).
//
// The rings' headers sit together, before their data areas, which take whole
// pages each and end the segment. Open reserves the segment up to the data
// (reserved); a ring's data is reserved by its sender before its first
// message (reserveRing), and nobody touches the data of a ring that never
// carried one, so the pages of pairs that do not talk are never allocated.
type layout struct {
	slots, ringBytes, regions        int
	readers, active, keys, ringHeads int // offsets of the reader lines, active lines, key table, ring headers
	ringData, ringStride             int // offset and stride of the rings' data areas
	reserved, total                  int // bytes reserved by Open; bytes in all
}

func makeLayout(slots, ringBytes, regions int) layout {
	l := layout{slots: slots, ringBytes: ringBytes, regions: regions}
	l.readers = headerBytes
	l.active = l.readers + readerSlots*readerStride
	l.keys = l.active + slots*activeStride
	l.ringHeads = l.keys + regions*entryBytes
	l.ringData = alignUp(l.ringHeads+slots*ringHeader, pageSize)
	l.ringStride = alignUp(ringBytes, pageSize)
	l.reserved = l.ringData
	l.total = l.ringData + slots*l.ringStride
	return l
}

// ringDataRange returns the bytes of the data area of the ring from slot.
func (l layout) ringDataRange(slot int) (off, n int) {
	return l.ringData + slot*l.ringStride, l.ringStride
}

// ctl is a mapping of a rank's control segment, the owner's or a peer's.
type ctl struct {
	mem []byte // the whole mapping
	lay layout
}

func (c *ctl) word(off int) *uint64   { return (*uint64)(unsafe.Pointer(&c.mem[off])) }
func (c *ctl) word32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.mem[off])) }

// reader returns the offset of the reader line of processor i.
func (c *ctl) reader(i int) int { return c.lay.readers + i*readerStride }

// active returns the offset of the line of the origin in slot.
func (c *ctl) active(slot int) int { return c.lay.active + slot*activeStride }

// entry returns the offset of key-table slot i.
func (c *ctl) entry(i int) int { return c.lay.keys + i*entryBytes }

// ring returns the incoming ring from the sender in slot.
func (c *ctl) ring(slot int) ring {
	off := c.lay.ringHeads + slot*ringHeader
	data, _ := c.lay.ringDataRange(slot)
	return ring{
		head:    c.word(off + ringHead),
		tail:    c.word(off + ringTail),
		closed:  c.word32(off + ringClosed),
		space:   c.word32(off + ringSpace),
		waiting: c.word32(off + ringWaiting),
		data:    c.mem[data : data+c.lay.ringBytes : data+c.lay.ringBytes],
	}
}

// initHeader writes a new control segment's header.
func (c *ctl) initHeader(rank ftrma.Rank, size int, sum uint64, pid int) {
	*c.word(offMagic) = magicWord
	*c.word(offVersion) = layoutVersion
	*c.word(offSize) = uint64(size)
	*c.word(offSlots) = uint64(c.lay.slots)
	*c.word(offRanksSum) = sum
	*c.word(offRank) = uint64(rank)
	*c.word(offRingBytes) = uint64(c.lay.ringBytes)
	*c.word(offRegions) = uint64(c.lay.regions)
	*c.word(offPID) = uint64(pid)
	*c.word(offTotal) = uint64(c.lay.total)
}

// parseCtl checks the header of a peer's control segment mem against what
// this rank expects (the job's size, the peer's rank, and the served ranks:
// how many, and their fingerprint) and returns its layout. The file comes
// from another process: nothing in it is trusted further than checked here.
func parseCtl(mem []byte, size int, rank ftrma.Rank, slots int, sum uint64) (layout, error) {
	if len(mem) < headerBytes {
		return layout{}, fmt.Errorf("control segment of %d bytes", len(mem))
	}
	c := &ctl{mem: mem}
	w := func(off int) uint64 { return *c.word(off) }
	if w(offMagic) != magicWord || w(offVersion) != layoutVersion {
		return layout{}, fmt.Errorf("not an ftrma shm control segment of version %d", layoutVersion)
	}
	if w(offSize) != uint64(size) || w(offRank) != uint64(rank) {
		return layout{}, fmt.Errorf("control segment of rank %d of %d, want rank %d of %d", w(offRank), w(offSize), rank, size)
	}
	if w(offSlots) != uint64(slots) || w(offRanksSum) != sum {
		return layout{}, fmt.Errorf("rank %d serves %d ranks (fingerprint %#x), this rank %d (%#x): the ranks were given different Config.Ranks", rank, w(offSlots), w(offRanksSum), slots, sum)
	}
	rb, rg := w(offRingBytes), w(offRegions)
	if rb < minRingBytes || rb > maxRingBytes || rb%8 != 0 || rg < 1 || rg > maxRegions || rg&(rg-1) != 0 {
		return layout{}, fmt.Errorf("control segment with rings of %d bytes and %d regions", rb, rg)
	}
	lay := makeLayout(slots, int(rb), int(rg))
	if w(offTotal) != uint64(lay.total) || len(mem) != lay.total {
		return layout{}, fmt.Errorf("control segment of %d bytes, its header says %d, its layout %d", len(mem), w(offTotal), lay.total)
	}
	return lay, nil
}

// ControlBytes is the most shared memory the control segments of m ranks
// served together take with the default Config: each reserves its header,
// active lines, key table and ring headers at Open, and at most a ring per
// peer that sends to it, of the default size for m ranks.
func ControlBytes(m int) uint64 {
	cfg, err := Config{Size: max(m, 1), Job: "x"}.withDefaults()
	if err != nil {
		return 0
	}
	l := makeLayout(len(cfg.Ranks), cfg.RingBytes, cfg.Regions)
	return uint64(m) * uint64(l.total)
}
