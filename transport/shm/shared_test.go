//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// MapShared gives a mapping of the peer's memory of the caller's own: it
// sees the peer's stores, and keeps the memory after the peer deregisters
// and releases it and closes (the file is gone, the transport's own
// mappings of the peer dropped). A region of the caller's own memory
// (target-executed), an unknown key and a rank of another host are
// refused.
func TestMapShared(t *testing.T) {
	ts, _, _ := cluster(t, 3, clusterOpts{cfg: func(c *Config) {
		if c.Rank != 2 {
			c.Ranks = []ftrma.Rank{0, 1} // rank 2 is on another host
		} else {
			c.Ranks = []ftrma.Rank{2}
		}
	}, skipConnect: true})
	mem := must(ts[1].Alloc(4096))
	key := must(ts[1].Register(mem[64:128]))
	copy(mem[64:], "before")
	got, unmap, err := ts[0].MapShared(1, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 64 || !bytes.HasPrefix(got, []byte("before")) {
		t.Fatalf("mapped %d bytes %q", len(got), got[:6])
	}
	copy(mem[64:], "after ")
	if !bytes.HasPrefix(got, []byte("after ")) {
		t.Fatalf("the mapping does not see the owner's store: %q", got[:6])
	}
	self, unmapSelf, err := ts[1].MapShared(1, key)
	if err != nil || &self[0] != &mem[64] {
		t.Fatalf("MapShared of this rank's own region: %v, not the region itself", err)
	}
	unmapSelf()

	foreign := make([]byte, 64)
	fkey := must(ts[1].Register(foreign))
	if _, _, err := ts[0].MapShared(1, fkey); !errors.Is(err, transport.ErrNotShared) {
		t.Errorf("MapShared of a region of the caller's own memory: %v, want ErrNotShared", err)
	}
	if _, _, err := ts[0].MapShared(1, key+1<<20); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Errorf("MapShared of an unknown key: %v, want ErrUnknownRegion", err)
	}
	if ts[0].Shares(2) || !ts[0].Shares(1) || !ts[0].Shares(0) {
		t.Errorf("Shares: rank 2 %v, 1 %v, 0 %v; want false, true, true", ts[0].Shares(2), ts[0].Shares(1), ts[0].Shares(0))
	}
	if _, _, err := ts[0].MapShared(2, key); !errors.Is(err, transport.ErrNotShared) {
		t.Errorf("MapShared of a rank of another host: %v, want ErrNotShared", err)
	}

	// The owner lets go of everything; the mapping keeps the bytes.
	if err := ts[1].Deregister(key); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Release(mem); err != nil {
		t.Fatal(err)
	}
	ts[1].Close()
	ts[0].PeerDown(1, errors.New("test"))
	if _, _, err := ts[0].MapShared(1, key); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("MapShared of a rank down: %v, want ErrProcFailed", err)
	}
	if !bytes.HasPrefix(got, []byte("after ")) {
		t.Fatalf("the mapping after the owner left: %q", got[:6])
	}
	copy(got, "still writable")
	unmap()
	unmap() // a second call does nothing
}
