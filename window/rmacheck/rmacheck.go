// Package rmacheck holds RMA workloads that verify their own results. The same
// code runs as goroutine ranks on memnet (the window tests) and as processes
// under ftrun (the end-to-end tests and the demo), so both paths check one
// thing the same way.
package rmacheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// Counters has every rank increment two counters at rank 0, iters times each:
// one by a compare-and-swap loop, one by FetchAndOp SUM. After a barrier rank 0
// checks that both equal Size()*iters. It returns the two final values (on
// every rank) and an error if they are wrong.
func Counters(ctx context.Context, c window.Comm, iters int) (casCount, faoCount int64, err error) {
	w, err := window.Allocate(ctx, c, 64)
	if err != nil {
		return 0, 0, err
	}
	defer w.Free(ctx)
	for range iters {
		if err := casIncrement(ctx, w, 0, 0); err != nil {
			return 0, 0, err
		}
		var old int64
		if err := w.FetchAndOp(0, 8, 1, &old, window.Sum); err != nil {
			return 0, 0, err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return 0, 0, err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return 0, 0, err
	}
	if casCount, err = readInt(ctx, w, 0, 0); err != nil {
		return 0, 0, err
	}
	if faoCount, err = readInt(ctx, w, 0, 8); err != nil {
		return 0, 0, err
	}
	want := int64(c.Size() * iters)
	if casCount != want || faoCount != want {
		return casCount, faoCount, fmt.Errorf("counters: CAS loop %d, FetchAndOp %d, want %d each", casCount, faoCount, want)
	}
	return casCount, faoCount, c.Barrier(ctx)
}

// casIncrement adds one to the int64 at disp of target by a CAS loop.
func casIncrement(ctx context.Context, w *window.Window, target ftrma.Rank, disp uint64) error {
	cur, err := readInt(ctx, w, target, disp)
	if err != nil {
		return err
	}
	for {
		var old int64
		if err := w.CompareAndSwap(target, disp, cur, cur+1, &old); err != nil {
			return err
		}
		if err := w.Flush(ctx, target); err != nil {
			return err
		}
		if old == cur {
			return nil
		}
		cur = old
	}
}

// readInt reads the int64 at disp of target atomically.
func readInt(ctx context.Context, w *window.Window, target ftrma.Rank, disp uint64) (int64, error) {
	var v int64
	if err := w.FetchAndOp(target, disp, 0, &v, window.NoOp); err != nil {
		return 0, err
	}
	return v, w.Flush(ctx, target)
}

// LockedCounter has every rank do rounds of Lock(exclusive), Get, +1, Put,
// Flush, Unlock on one counter at rank 0 — a read-modify-write that is only
// correct if the lock excludes. It returns the final value and an error unless
// it equals Size()*rounds.
func LockedCounter(ctx context.Context, c window.Comm, rounds int) (int64, error) {
	w, err := window.Allocate(ctx, c, 8)
	if err != nil {
		return 0, err
	}
	defer w.Free(ctx)
	buf := make([]byte, 8)
	for range rounds {
		if err := w.Lock(ctx, 0, window.Exclusive); err != nil {
			return 0, err
		}
		if err := w.Get(0, 0, buf); err != nil {
			return 0, err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return 0, err
		}
		v := int64(binary.LittleEndian.Uint64(buf)) + 1
		binary.LittleEndian.PutUint64(buf, uint64(v))
		if err := w.Put(0, 0, buf); err != nil {
			return 0, err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return 0, err
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return 0, err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return 0, err
	}
	v, err := readInt(ctx, w, 0, 0)
	if err != nil {
		return 0, err
	}
	if want := int64(c.Size() * rounds); v != want {
		return v, fmt.Errorf("locked counter: %d, want %d", v, want)
	}
	return v, c.Barrier(ctx)
}

// PutGetThird has rank r put a pattern of each size into rank r+1's window
// and flush; after a barrier rank r+2 gets it back and compares. It needs at
// least 3 ranks to involve a third party.
func PutGetThird(ctx context.Context, c window.Comm, sizes []int) error {
	maxSize := 0
	for _, s := range sizes {
		maxSize = max(maxSize, s)
	}
	w, err := window.Allocate(ctx, c, maxSize)
	if err != nil {
		return err
	}
	defer w.Free(ctx)
	n := c.Size()
	me := int(c.Rank())
	for _, size := range sizes {
		src := (me + n - 2) % n // whose pattern I read back from rank me-1
		data := pattern(me, size)
		if err := w.Put(ftrma.Rank((me+1)%n), 0, data); err != nil {
			return err
		}
		if err := w.Flush(ctx, ftrma.Rank((me+1)%n)); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		got := make([]byte, size)
		if err := w.Get(ftrma.Rank((me+n-1)%n), 0, got); err != nil {
			return err
		}
		if err := w.Flush(ctx, ftrma.Rank((me+n-1)%n)); err != nil {
			return err
		}
		if want := pattern(src, size); !bytes.Equal(got, want) {
			return fmt.Errorf("rank %d: %d bytes written by rank %d into rank %d read back wrong", me, size, src, (me+n-1)%n)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	return nil
}

// pattern is size bytes that differ by writer and by position.
func pattern(writer, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*131 + writer*17 + size)
	}
	return b
}
