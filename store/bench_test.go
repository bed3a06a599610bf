package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// benchStore runs op b.N times at rank 0 of a four-rank store with three
// copies, over shared memory (goroutine ranks with real shared mappings)
// and over memnet, while the other ranks wait in a barrier: the store's own
// cost per call without processes (bench/store times whole jobs against
// Hazelcast, Redis and etcd).
func benchStore(b *testing.B, op func(ctx context.Context, s *Store, i int) error) {
	for _, m := range commtest.Worlds() {
		b.Run(m.Name, func(b *testing.B) {
			world := m.New(b, 4)
			defer world.Close()
			ctx := context.Background()
			for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
				s, err := Open(ctx, c, Config{Copies: 3, Slots: 4096, ChunkSize: 1 << 20, MaxValueSize: 1 << 20})
				if err != nil {
					return err
				}
				if c.Rank() == 0 {
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if err := op(ctx, s, i); err != nil {
							return err
						}
						i++
					}
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				return s.Close(ctx)
			}) {
				if err != nil {
					b.Fatalf("rank %d: %v", r, err)
				}
			}
		})
	}
}

func benchPut(b *testing.B, size, keys int) {
	value := make([]byte, size)
	benchStore(b, func(ctx context.Context, s *Store, i int) error {
		return s.Put(ctx, fmt.Appendf(nil, "k%d", i%keys), value)
	})
	b.SetBytes(int64(size))
}

// Put overwrites one of 64 keys: the checkpoint pattern (a writer rewriting
// its own keys).
func BenchmarkPut64(b *testing.B)  { benchPut(b, 64, 64) }
func BenchmarkPut64K(b *testing.B) { benchPut(b, 64<<10, 64) }

func benchGet(b *testing.B, size int) {
	benchStore(b, func(ctx context.Context, s *Store, i int) error {
		key := fmt.Appendf(nil, "k%d", i%64)
		if i < 64 {
			if err := s.Put(ctx, key, make([]byte, size)); err != nil {
				return err
			}
		}
		v, err := s.Get(ctx, key)
		if err == nil && len(v) != size {
			err = fmt.Errorf("got %d bytes, want %d", len(v), size)
		}
		return err
	})
}

func BenchmarkGet64(b *testing.B)  { benchGet(b, 64) }
func BenchmarkGet64K(b *testing.B) { benchGet(b, 64<<10) }
