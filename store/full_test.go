package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/window"
)

// A transport that registers only so many regions: Open sizes the chunk
// table within it by default and refuses more chunks than it can register.
func TestChunksFitTheTransport(t *testing.T) {
	const regions = 128
	world := commtest.NewSHMConfig(t, 2, shm.Config{Spin: -1, Regions: regions})
	ctx := testCtx(t, time.Minute)
	opt := smallOptions(2)
	opt.Chunks = regions
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		_, err := Open(ctx, c, opt)
		return err
	}) {
		if !errors.Is(err, ftrma.ErrInvalid) {
			t.Fatalf("rank %d: Open with %d chunks on a %d-region transport: %v", r, opt.Chunks, regions, err)
		}
	}
	opt.Chunks = 0
	stores := make([]*Store, 2)
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, err := Open(ctx, c, opt)
		stores[c.Rank()] = s
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: Open with default chunks: %v", r, err)
		}
	}
	for _, s := range stores {
		if s.opt.Chunks != regions-regionHeadroom {
			t.Errorf("rank %d: %d chunks on a %d-region transport", s.me, s.opt.Chunks, regions)
		}
	}
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		return stores[c.Rank()].Close(ctx)
	}) {
		if err != nil {
			t.Fatalf("rank %d: close: %v", r, err)
		}
	}
}

// When a rank cannot attach heap memory — here its transport's region table
// is used up by another window of the program — a Put that needs a new
// chunk there returns ErrFull, also without a deadline, and writes nothing;
// once regions are free again, puts succeed.
func TestPutWithoutRoomReturnsErrFull(t *testing.T) {
	const regions = 128
	world := commtest.NewSHMConfig(t, 2, shm.Config{Spin: -1, Regions: regions})
	ctx := testCtx(t, time.Minute)
	opt := smallOptions(2)
	opt.Chunks, opt.Reserve = 16, 0
	stores := make([]*Store, 2)
	others := make([]*window.Window, 2)
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, err := Open(ctx, c, opt)
		stores[c.Rank()] = s
		if err != nil {
			return err
		}
		others[c.Rank()], err = window.CreateDynamic(ctx, c)
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// The other window takes every region left at rank 1.
	var held []uint64
	for {
		mem, err := others[1].Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		a, err := others[1].Attach(mem)
		if err != nil {
			others[1].Release(mem)
			break
		}
		held = append(held, a)
		if len(held) > regions {
			t.Fatal("the transport registered more regions than its table holds")
		}
	}
	// Values that need a chunk of their own at both ranks: rank 1 has none
	// and can attach none.
	big := make([]byte, opt.ChunkSize)
	start := time.Now()
	err := stores[0].Put(context.Background(), []byte("big"), big)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("put with no room at rank 1: %v, want ErrFull", err)
	}
	t.Logf("ErrFull after %v: %v", time.Since(start), err)
	if _, err := stores[0].Get(ctx, []byte("big")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after the refused put: %v, want ErrNotFound (nothing written)", err)
	}
	for _, a := range held {
		if err := others[1].Detach(a); err != nil {
			t.Fatal(err)
		}
	}
	if err := stores[0].Put(ctx, []byte("big"), big); err != nil {
		t.Fatalf("put once rank 1 has room again: %v", err)
	}
	if v, err := stores[1].Get(ctx, []byte("big")); err != nil || len(v) != len(big) {
		t.Fatalf("get: %d bytes, %v", len(v), err)
	}
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		others[c.Rank()].Free(ctx)
		return stores[c.Rank()].Close(ctx)
	}) {
		if err != nil {
			t.Fatalf("rank %d: close: %v", r, err)
		}
	}
}

// A rank whose chunk table is full refuses with ErrFull at once.
func TestPutWithChunkTableFull(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	opt := smallOptions(1)
	opt.Chunks, opt.Reserve = 2, 0
	_, st := openAll(t, 1, opt)
	var err error
	i := 0
	for ; i < 10 && err == nil; i++ {
		err = st[0].Put(context.Background(), fmt.Appendf(nil, "k%d", i), make([]byte, opt.ChunkSize/4))
	}
	t.Logf("put %d: %v", i-1, err)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("puts into 2 chunks of 64 KiB: %v, want ErrFull", err)
	}
	if _, err := st[0].Get(ctx, []byte("k0")); err != nil {
		t.Fatalf("an earlier value: %v", err)
	}
}
