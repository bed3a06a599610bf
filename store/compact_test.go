package store

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// Long-lived values written between bursts of overwrites would each pin a
// chunk; compaction moves them so the chunks come back. With 12 chunks of
// 64 KiB a rank, 30 rounds of (one long-lived key, then 80 KiB of
// overwrites of a hot key) would need 30 pinned chunks.
func TestCompactionFreesPinnedChunks(t *testing.T) {
	old := leaseIdle
	leaseIdle = 0 // long-lived values are not written again: no lease keeps them
	t.Cleanup(func() { leaseIdle = old })
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		opt := smallOptions(1)
		opt.Chunks, opt.Reserve = 12, 1
		_, st := openAllOn(t, newWorld, 1, opt)
		s := st[0]
		hot := make([]byte, 4000)
		for round := range 30 {
			long := fmt.Appendf(nil, "long/%d", round)
			if err := s.Put(ctx, long, long); err != nil {
				t.Fatalf("round %d: put of a long-lived key: %v", round, err)
			}
			for range 20 {
				if err := s.Put(ctx, []byte("hot"), hot); err != nil {
					t.Fatalf("round %d: put of the hot key: %v\nchunks: %s", round, err, s.chunkTable())
				}
			}
			// Compaction runs every compactEvery in the housekeeping;
			// here at once, after the long-lived key's lease ended.
			s.expireLeases()
			s.compactNow()
		}
		for round := range 30 {
			long := fmt.Appendf(nil, "long/%d", round)
			if v, err := s.Get(ctx, long); err != nil || !bytes.Equal(v, long) {
				t.Fatalf("%s after compaction: %q %v", long, v, err)
			}
		}
		t.Logf("heap: %d bytes attached, %d live", s.Stats().HeapAttached, s.Stats().HeapLive)
	})
}

// chunkTable describes this rank's chunk table: owner word and live bytes.
func (s *Store) chunkTable() string {
	out := ""
	for e := range int(s.heap.entries.Load()) {
		out += fmt.Sprintf("[%x %d/%d] ", s.entry(e, chunkOwner).Load(), s.entry(e, chunkLive).Load(), s.entry(e, chunkSize).Load())
	}
	return out + fmt.Sprintf("want %d noroom %d", s.table[hdrWant], s.table[hdrNoRoom])
}
