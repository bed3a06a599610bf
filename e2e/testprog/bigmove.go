package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/window"
)

// bigmove SIZE ROUNDS: rank 0 puts SIZE bytes into rank 1's window and gets
// them back, ROUNDS times, each time into fresh memory (a new window, a new
// buffer: their first touch costs page faults inside the copy, as for a
// store's heap that grows and a value read into a new buffer) and with the
// round stamped into every 4 KiB, checking every byte read back; rank 1
// checks its window's stamps; the other ranks only take part in the
// collectives. Every rank then prints "bigmove failed N" (N ranks known
// failed). The failure detector runs all along: a copy of SIZE bytes that
// held the processor for longer than its timeout would get a healthy rank
// declared failed.
func bigmove(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) < 2 {
		return errors.New("bigmove SIZE ROUNDS")
	}
	size, err := strconv.Atoi(args[0])
	if err != nil || size < page || size%page != 0 {
		return fmt.Errorf("bigmove: size %q: want a multiple of %d", args[0], page)
	}
	rounds, err := strconv.Atoi(args[1])
	if err != nil || rounds < 1 {
		return fmt.Errorf("bigmove: rounds %q", args[1])
	}
	if c.Size() < 2 {
		return errors.New("bigmove needs two ranks")
	}
	mine := 8
	if c.Rank() == 1 {
		mine = size
	}
	var src []byte
	if c.Rank() == 0 {
		src = make([]byte, size)
		for i := 0; i < size; i += 8 {
			binary.LittleEndian.PutUint64(src[i:], pattern(i))
		}
	}
	var took time.Duration
	for r := range rounds {
		w, err := window.Allocate(ctx, c, mine)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			for i := 0; i < size; i += page {
				binary.LittleEndian.PutUint64(src[i:], stamp(i, r))
			}
			dst := make([]byte, size)
			start := time.Now()
			if err := w.Put(1, 0, src); err != nil {
				return fmt.Errorf("round %d: put: %w", r, err)
			}
			if err := w.Flush(ctx, 1); err != nil {
				return fmt.Errorf("round %d: flush after put: %w", r, err)
			}
			if err := w.Get(1, 0, dst); err != nil {
				return fmt.Errorf("round %d: get: %w", r, err)
			}
			if err := w.Flush(ctx, 1); err != nil {
				return fmt.Errorf("round %d: flush after get: %w", r, err)
			}
			took += time.Since(start)
			if at := differs(dst, src); at >= 0 {
				return fmt.Errorf("round %d: the %d bytes read back differ from those put in the 64 KiB at %d", r, size, at)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			b := w.Bytes()
			for i := 0; i < size; i += page {
				if binary.LittleEndian.Uint64(b[i:]) != stamp(i, r) || binary.LittleEndian.Uint64(b[i+page-8:]) != pattern(i+page-8) {
					return fmt.Errorf("round %d: window page at %d is not the one put", r, i)
				}
			}
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
	}
	switch c.Rank() {
	case 0:
		fmt.Printf("bigmove moved %d x 2 x %d bytes in %v\n", rounds, size, took.Round(time.Millisecond))
	case 1:
		fmt.Println("bigmove window verified")
	}
	fmt.Printf("bigmove failed %d\n", len(c.Failed()))
	return c.Barrier(ctx)
}

// page is the stride of the round stamps.
const page = 4096

// pattern is the word at byte offset i of bigmove's data; stamp is the first
// word of each page in round r.
func pattern(i int) uint64  { return uint64(i) * 0x9e3779b97f4a7c15 }
func stamp(i, r int) uint64 { return pattern(i) ^ uint64(r+1)<<56 }

// differs returns the offset of the first 64 KiB block where a and b differ,
// or -1. It compares block by block and yields every 16 blocks, so that the
// check itself never holds the processor for long: bytes.Equal is assembly,
// which Go's scheduler cannot preempt, and a loop that spends nearly all its
// time in it is as good as unpreemptible.
func differs(a, b []byte) int {
	if len(a) != len(b) {
		return 0
	}
	const block = 64 << 10
	for i := 0; i < len(a); i += block {
		j := min(i+block, len(a))
		if !bytes.Equal(a[i:j], b[i:j]) {
			return i
		}
		if i%(16*block) == 0 {
			runtime.Gosched()
		}
	}
	return -1
}
