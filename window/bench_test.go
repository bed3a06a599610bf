package window_test

import (
	"context"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
)

// benchOrigin runs op b.N times at rank 0 of a two-rank shared-memory world
// (goroutine ranks with real shared mappings), on a 1 MiB window, while
// rank 1 waits in a barrier: the paths bench/rma times, without processes.
func benchOrigin(b *testing.B, op func(ctx context.Context, w *window.Window) error) {
	benchOn(b, 2, func(ctx context.Context, c *comm.Comm) (*window.Window, error) {
		return window.Allocate(ctx, c, 1<<20)
	}, op)
}

// benchOn runs op b.N times at rank 0 of an n-rank shared-memory world, on
// the window mk makes at every rank, while the others wait in a barrier.
func benchOn(b *testing.B, n int, mk func(ctx context.Context, c *comm.Comm) (*window.Window, error), op func(ctx context.Context, w *window.Window) error) {
	world := commtest.NewSHM(b, n)
	defer world.Close()
	ctx := context.Background()
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := mk(ctx, c)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			b.ReportAllocs()
			for b.Loop() {
				if err := op(ctx, w); err != nil {
					return err
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	}) {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}

// BenchmarkSHMCreatePutFlush8 is BenchmarkSHMPutFlush8 on a window made
// by Create over a buffer of the caller's: over shared memory the target
// executes each operation (a request and an answer through the rings).
func BenchmarkSHMCreatePutFlush8(b *testing.B) {
	buf := make([]byte, 8)
	benchOn(b, 2, func(ctx context.Context, c *comm.Comm) (*window.Window, error) {
		return window.Create(ctx, c, make([]byte, 1<<20))
	}, func(ctx context.Context, w *window.Window) error {
		if err := w.Put(1, 0, buf); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

// An 8-byte store into rank 1's memory through SharedQuery
// (AllocateShared), made visible with a fence, against BenchmarkSHMPutFlush8:
// the load/store path AllocateShared opens beside Put.
func BenchmarkSHMSharedStore8(b *testing.B) {
	var words []uint64
	benchOn(b, 2, func(ctx context.Context, c *comm.Comm) (*window.Window, error) {
		w, err := window.AllocateShared(ctx, c, 1<<20)
		if err == nil && c.Rank() == 0 {
			var mem []byte
			if mem, err = w.SharedQuery(1); err == nil {
				words = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
			}
		}
		return w, err
	}, func(ctx context.Context, w *window.Window) error {
		atomic.AddUint64(&words[0], 1) // a store that is also a full fence
		return nil
	})
}

func BenchmarkSHMPutFlush8(b *testing.B) {
	buf := make([]byte, 8)
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.Put(1, 0, buf); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

func BenchmarkSHMGetFlush8(b *testing.B) {
	buf := make([]byte, 8)
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.Get(1, 0, buf); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

func BenchmarkSHMPut16K(b *testing.B) {
	buf := make([]byte, 16<<10)
	b.SetBytes(int64(len(buf)))
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.Put(1, 0, buf); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

func BenchmarkSHMCompareAndSwap(b *testing.B) {
	var old int64
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.CompareAndSwap(1, 0, old, old+1, &old); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

func BenchmarkSHMFetchAndAdd(b *testing.B) {
	var old int64
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.FetchAndOp(1, 0, 1, &old, window.Sum); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

func BenchmarkSHMLockUnlock(b *testing.B) {
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.Lock(ctx, 1, window.Exclusive); err != nil {
			return err
		}
		return w.Unlock(ctx, 1)
	})
}

// BenchmarkLockFloor is the floor of BenchmarkSHMLockUnlock's protocol:
// its memory accesses alone, in one function, on ordinary memory: the
// rank's lock state taken (CAS) and released (CAS, store), the gate taken
// (CAS), the two slots read, the gate given back (CAS). Each shared-memory
// access through the transport adds the fast path's announcement
// (transport/shm's BenchmarkFastPathFloor).
func BenchmarkLockFloor(b *testing.B) {
	var state atomic.Int32
	ctl := make([]uint64, 3) // the gate and two slots
	for b.Loop() {
		state.CompareAndSwap(0, 2)
		atomic.CompareAndSwapUint64(&ctl[0], 0, 1<<32)
		if atomic.LoadUint64(&ctl[1])|atomic.LoadUint64(&ctl[2]) != 0 {
			b.Fatal("a slot is taken")
		}
		state.CompareAndSwap(2, 3)
		atomic.CompareAndSwapUint64(&ctl[0], 1<<32, 0)
		state.Store(0)
	}
}

func BenchmarkSHMPut1M(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.Put(1, 0, buf); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

func BenchmarkSHMGet1M(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		if err := w.Get(1, 0, buf); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	})
}

// BenchmarkSHMPutRate is bench/rma's put_rate: 64 puts of 8 bytes to
// distinct offsets, then one flush (ns/op is per batch of 64).
func BenchmarkSHMPutRate(b *testing.B) {
	buf := make([]byte, 8)
	benchOrigin(b, func(ctx context.Context, w *window.Window) error {
		for i := range 64 {
			if err := w.Put(1, uint64(8*i), buf); err != nil {
				return err
			}
		}
		return w.Flush(ctx, 1)
	})
}
