package window_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/window"
)

// Create makes the caller's buffer the window's memory on every transport,
// as MPI_Win_create does, shared memory included (whose peers cannot map
// the buffer: the owner executes their operations on it): each rank stores
// into its own buffer after Create and the others read that; what they put
// lands in the buffer in place, where a rank polling a flag in its own
// buffer sees it; and Free leaves the buffer as the window left it.
func TestCreateIsTheBuffer(t *testing.T) {
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		me, n := c.Rank(), c.Size()
		words := make([]uint64, 512)
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))
		w, err := window.Create(ctx, c, buf)
		if err != nil {
			return err
		}
		atomic.StoreUint64(&words[0], uint64(100+me)) // the owner's own store, after Create
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		word := make([]byte, 8)
		for r := range n {
			target := ftrma.Rank(r)
			if err := w.Put(target, uint64(64+8*me), binary.NativeEndian.AppendUint64(nil, uint64(1000+me))); err != nil {
				return err
			}
			if err := w.Get(target, 0, word); err != nil {
				return err
			}
			if err := w.Flush(ctx, target); err != nil {
				return err
			}
			if got := binary.NativeEndian.Uint64(word); got != uint64(100+r) {
				return fmt.Errorf("get of rank %d's word 0: %d, want what it stored into its own buffer, %d", r, got, 100+r)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for r := range n {
			if got := atomic.LoadUint64(&words[8+r]); got != uint64(1000+r) {
				return fmt.Errorf("rank %d's put is not in this rank's own buffer: word %d holds %d", r, 8+r, got)
			}
		}
		// A flag in rank 0's buffer, set by rank 1's put, seen by polling.
		switch me {
		case 1:
			if err := w.Put(0, 8*40, binary.NativeEndian.AppendUint64(nil, 1)); err != nil {
				return err
			}
			if err := w.Flush(ctx, 0); err != nil {
				return err
			}
		case 0:
			deadline := time.Now().Add(20 * time.Second)
			for atomic.LoadUint64(&words[40]) != 1 {
				if time.Now().After(deadline) {
					return errors.New("the flag rank 1 put into this rank's buffer never showed")
				}
				time.Sleep(time.Millisecond)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
		if atomic.LoadUint64(&words[0]) != uint64(100+me) || atomic.LoadUint64(&words[8+n-1]) != uint64(1000+n-1) {
			return errors.New("Free changed the buffer")
		}
		return nil
	})
}
