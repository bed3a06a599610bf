//go:build linux

package shm

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/ftrma/ftrma"
)

// alignedCopy returns b copied into 8-byte aligned memory of n bytes (at
// least len(b)), as a mapping is.
func alignedCopy(b []byte, n int) []byte {
	n = max(n, len(b))
	w := make([]uint64, (n+7)/8+1)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)[:n]
	copy(mem, b)
	return mem
}

// maxFuzzSegment bounds the control segments the fuzzer builds.
const maxFuzzSegment = 4 << 20

// FuzzParseCtl: a peer's control segment comes from another process, so
// its header is arbitrary bytes. parseCtl never panics on it, and a layout
// it accepts fits the segment: every active line, key-table entry and ring
// it places lies inside.
func FuzzParseCtl(f *testing.F) {
	seed := func(slots, ring, regions int, rank ftrma.Rank, size int) []byte {
		lay := makeLayout(slots, ring, regions)
		c := &ctl{mem: alignedCopy(nil, headerBytes), lay: lay}
		c.initHeader(rank, size, 99, 1234)
		return c.mem
	}
	f.Add(seed(2, minRingBytes, 4, 1, 2), uint16(2), uint16(1), uint16(2), uint64(99))
	f.Add(seed(3, 2*minRingBytes, 8, 0, 5), uint16(5), uint16(0), uint16(3), uint64(99))
	f.Add([]byte("ftrmashm"), uint16(1), uint16(0), uint16(1), uint64(0))
	f.Fuzz(func(t *testing.T, hdr []byte, size, rank, slots uint16, sum uint64) {
		if slots > 64 {
			slots %= 64
		}
		// The segment is as long as its header says, when that is small
		// enough to build, else as long as the header.
		n := len(hdr)
		if len(hdr) >= headerBytes {
			if total := binary.LittleEndian.Uint64(hdr[offTotal:]); total <= maxFuzzSegment {
				n = int(total)
			}
		}
		mem := alignedCopy(hdr, n)
		lay, err := parseCtl(mem, int(size), ftrma.Rank(rank), int(slots), sum)
		if err != nil {
			return
		}
		if lay.total != len(mem) || lay.slots != int(slots) {
			t.Fatalf("accepted a layout of %d bytes and %d slots for a segment of %d bytes and %d slots", lay.total, lay.slots, len(mem), slots)
		}
		c := &ctl{mem: mem, lay: lay}
		for s := range lay.slots {
			_ = *c.word(c.active(s) + actFenced)
			rg := c.ring(s)
			_, _ = *rg.head, *rg.waiting
			if len(rg.data) != lay.ringBytes {
				t.Fatalf("ring %d has %d bytes, want %d", s, len(rg.data), lay.ringBytes)
			}
		}
		_ = *c.word(c.entry(lay.regions-1) + entryLength)
	})
}

// FuzzRingTake: the ring's bytes and its tail come from the sender, another
// process. take never panics and never reads past what was published: it
// returns a piece that fits the ring, or an error. The consumer's own
// position (head) is trusted: 8-byte aligned.
func FuzzRingTake(f *testing.F) {
	rg := ring{data: alignedCopy(nil, 64)}
	tail := rg.put(0, []byte("hello"), false, false)
	tail = rg.put(tail, []byte("a longer piece of a message"), true, true)
	f.Add(append([]byte(nil), rg.data...), uint64(0), tail, uint16(64))
	f.Add(append([]byte(nil), rg.data...), uint64(56), uint64(72), uint16(8))
	f.Add([]byte{}, uint64(0), uint64(8), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, head, tail uint64, bufLen uint16) {
		size := len(data) &^ 7
		if size < 2*msgHeader {
			return // rings are at least minRingBytes; any multiple of 8 will do here
		}
		rg := ring{data: alignedCopy(data[:size], size)}
		head &^= 7
		buf := make([]byte, bufLen)
		for range 4 { // a few pieces in a row, as the progress loop takes them
			if _, ok := rg.room(head, tail); !ok {
				return
			}
			n, _, _, next, err := rg.take(head, tail, buf)
			if err != nil {
				return
			}
			if n > len(buf) || next <= head || next-head > tail-head || next%8 != 0 {
				t.Fatalf("take(%d, %d) with a %d-byte buffer: piece of %d bytes, next %d", head, tail, len(buf), n, next)
			}
			if head = next; head == tail {
				return
			}
		}
	})
}
