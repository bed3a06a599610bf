package rmacheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// Create has every rank expose a buffer of its own with window.Create
// (Size()+1 words and 3 bytes, filled with a pattern of the rank's), read a
// neighbour's buffer back, then add 1 to word 0 at rank 0 and put a word of
// its own at rank 0's word r+1. It checks, and returns an error unless: the
// window starts with the buffer's contents, the neighbour's pattern reads
// back, rank 0's window holds every rank's update, and after Free every
// rank's buffer holds its window's last contents. It reports whether the
// window memory was the buffer itself (else a copy).
func Create(ctx context.Context, c window.Comm) (direct bool, err error) {
	n, me := c.Size(), int(c.Rank())
	size := 8*(n+1) + 3
	buf := pattern(me, size)
	binary.LittleEndian.PutUint64(buf, uint64(100*me))
	initial := bytes.Clone(buf)
	w, err := window.Create(ctx, c, buf)
	if err != nil {
		return false, err
	}
	defer func() {
		if w != nil {
			w.Free(ctx)
		}
	}()
	direct = len(w.Bytes()) > 0 && &w.Bytes()[0] == &buf[0]
	if !bytes.Equal(w.Bytes(), initial) {
		return direct, fmt.Errorf("rank %d: the window does not start with the buffer's contents", me)
	}
	if err := c.Barrier(ctx); err != nil {
		return direct, err
	}
	next := ftrma.Rank((me + 1) % n)
	got := make([]byte, size)
	if err := w.Get(next, 0, got); err != nil {
		return direct, err
	}
	if err := w.Flush(ctx, next); err != nil {
		return direct, err
	}
	want := pattern(int(next), size)
	binary.LittleEndian.PutUint64(want, uint64(100*int(next)))
	if !bytes.Equal(got, want) {
		return direct, fmt.Errorf("rank %d: rank %d's buffer read back wrong", me, next)
	}
	if err := c.Barrier(ctx); err != nil { // every Get is done before rank 0 changes
		return direct, err
	}
	if err := w.FetchAndOp(0, 0, 1, nil, window.Sum); err != nil {
		return direct, err
	}
	word := binary.LittleEndian.AppendUint64(nil, uint64(1000+me))
	if err := w.Put(0, uint64(8*(me+1)), word); err != nil {
		return direct, err
	}
	if err := w.Flush(ctx, 0); err != nil {
		return direct, err
	}
	if err := c.Barrier(ctx); err != nil {
		return direct, err
	}
	final := bytes.Clone(w.Bytes())
	if me == 0 {
		if v := binary.LittleEndian.Uint64(final); v != uint64(n) {
			return direct, fmt.Errorf("rank 0: word 0 is %d after %d increments, want %d", v, n, n)
		}
		for r := range n {
			if v := binary.LittleEndian.Uint64(final[8*(r+1):]); v != uint64(1000+r) {
				return direct, fmt.Errorf("rank 0: word %d is %d, want rank %d's %d", r+1, v, r, 1000+r)
			}
		}
		if !direct && !bytes.Equal(buf, initial) {
			return direct, fmt.Errorf("rank 0: the buffer changed before Free although the window is a copy")
		}
	}
	err, w = w.Free(ctx), nil
	if err != nil {
		return direct, err
	}
	if !bytes.Equal(buf, final) {
		return direct, fmt.Errorf("rank %d: after Free the buffer does not hold the window's last contents", me)
	}
	return direct, nil
}
