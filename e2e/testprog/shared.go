package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/window"
)

// sharedkill VICTIM: every rank of the host communicator fills its memory
// of a window.AllocateShared with its rank and word index, reads every
// other's directly, and rank VICTIM then SIGKILLs itself. The others, once
// they count it failed, read its memory through SharedQuery (still mapped,
// still holding what it stored), write into it, Shrink the window, and
// check that the mapping survived the Shrink; then they free the window.
func sharedkill(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("sharedkill VICTIM")
	}
	v, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	victim := ftrma.Rank(v)
	hc, err := c.SplitShared(ctx)
	if err != nil {
		return err
	}
	if hc.Size() != c.Size() {
		return fmt.Errorf("the host communicator has %d of %d ranks: run on one host", hc.Size(), c.Size())
	}
	w, err := window.AllocateShared(ctx, hc, 1<<16)
	if err != nil {
		return err
	}
	words := func(r ftrma.Rank) ([]uint64, error) {
		b, err := w.SharedQuery(r)
		if err != nil {
			return nil, err
		}
		return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8), nil
	}
	me := hc.Rank()
	mine, err := words(me)
	if err != nil {
		return err
	}
	for i := range mine {
		atomic.StoreUint64(&mine[i], uint64(me)<<32|uint64(i))
	}
	if err := hc.Barrier(ctx); err != nil {
		return err
	}
	check := func(r ftrma.Rank, skip int) error {
		ws, err := words(r)
		if err != nil {
			return err
		}
		for i := range ws {
			if got := atomic.LoadUint64(&ws[i]); i >= skip && got != uint64(r)<<32|uint64(i) {
				return fmt.Errorf("word %d of rank %d's shared memory holds %#x", i, r, got)
			}
		}
		return nil
	}
	for r := range ftrma.Rank(hc.Size()) {
		if err := check(r, 0); err != nil {
			return err
		}
	}
	if me == victim {
		syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {}
	}
	for !hc.ProcFailed(victim) {
		select {
		case <-hc.FailuresChanged():
		case <-ctx.Done():
			return fmt.Errorf("rank %d never counted failed: %w", victim, ctx.Err())
		}
	}
	// The words below the ranks' count are theirs to write.
	if err := check(victim, hc.Size()); err != nil {
		return fmt.Errorf("after its kill: %w", err)
	}
	dead, _ := words(victim)
	atomic.StoreUint64(&dead[me], 7)
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	if err := check(victim, hc.Size()); err != nil {
		return fmt.Errorf("after Shrink: %w", err)
	}
	if err := s.Free(ctx); err != nil {
		return err
	}
	fmt.Printf("rank %d: the killed rank's shared memory was kept\n", me)
	return nil
}
