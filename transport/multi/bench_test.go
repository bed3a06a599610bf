//go:build linux

package multi_test

import (
	"context"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// BenchmarkPutFlush measures an 8-byte write and its flush from rank 0 of
// a two-host world to rank 1 (same host) and rank 2 (other host), through
// the multi transport and through the sub-transport that serves the peer
// directly, with the same key: the difference is the cost of routing.
func BenchmarkPutFlush(b *testing.B) {
	w := newWorld(b, twoHosts, worldOpts{})
	_, keys := w.regions(b, 64)
	paths := []struct {
		name string
		t    transport.Transport
		peer ftrma.Rank
	}{
		{"shm-direct", w.shms[0], 1},
		{"multi-shm", w.ts[0], 1},
		{"tcp-direct", w.tcps[0], 2},
		{"multi-tcp", w.ts[0], 2},
	}
	src := make([]byte, 8)
	ctx := context.Background()
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.t.Write(p.peer, keys[p.peer], 0, src); err != nil {
					b.Fatal(err)
				}
				if err := p.t.Flush(ctx, p.peer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
