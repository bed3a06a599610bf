package window_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport/tcp"
	"github.com/ftrma/ftrma/window"
	"github.com/ftrma/ftrma/window/rmacheck"
)

// tcpWorld builds n communicators over connected TCP transports on the
// loopback, closed at the end of the test.
func tcpWorld(t *testing.T, n int) []*comm.Comm {
	t.Helper()
	ts := make([]*tcp.Transport, n)
	addrs := make([]string, n)
	for r := range n {
		tt, err := tcp.Listen(tcp.Config{Rank: ftrma.Rank(r), Size: n, Secret: []byte("create"), Spin: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ts[r], addrs[r] = tt, tt.Addr()
	}
	ctx := testCtx(t, 30*time.Second)
	errs := make(chan error, n)
	for _, tt := range ts {
		go func() { errs <- tt.Connect(ctx, addrs) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	comms := make([]*comm.Comm, n)
	for r, tt := range ts {
		cfg := commtest.TestConfig()
		cfg.OnDeclaredFailed = func(by string) { t.Errorf("rank %d declared failed by %s", r, by) }
		c, err := comm.New(tt, cfg)
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
		t.Cleanup(func() { c.Close() })
	}
	return comms
}

// runComms runs f on every communicator in its own goroutine and fails the
// test with every rank's error.
func runComms(t *testing.T, comms []*comm.Comm, f func(ctx context.Context, c *comm.Comm) error) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(ctx, c) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// createCheck runs rmacheck.Create and checks where the window memory is:
// the buffer itself, or (wantCopy) a copy in the transport's memory.
func createCheck(wantCopy bool) func(ctx context.Context, c *comm.Comm) error {
	return func(ctx context.Context, c *comm.Comm) error {
		direct, err := rmacheck.Create(ctx, c)
		if err == nil && direct == wantCopy {
			err = fmt.Errorf("window memory is the buffer: %v, want %v", direct, !wantCopy)
		}
		return err
	}
}

// Create works on memnet, on memnet without whole-word writes, and on
// shared memory, the buffer being the window memory on each (shared memory
// executes its peers' operations on it): rmacheck.Create checks the contents
// at every step.
func TestCreate(t *testing.T) {
	for _, tr := range commtest.Worlds() {
		t.Run(tr.Name, func(t *testing.T) {
			w := tr.New(t, 4)
			runComms(t, w.Comms, createCheck(false))
		})
	}
}

// Create works on TCP, exposing the buffer itself.
func TestCreateTCP(t *testing.T) {
	runComms(t, tcpWorld(t, 3), createCheck(false))
}

// A buffer that does not start on an 8-byte boundary is refused at Create
// with ErrMisaligned, on every transport.
func TestCreateMisaligned(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		buf := make([]byte, 24)
		w, err := window.Create(ctx, c, buf[3:])
		if !errors.Is(err, ftrma.ErrMisaligned) || w != nil {
			return fmt.Errorf("Create of a misaligned buffer: %v, %v; want ErrMisaligned", w, err)
		}
		var oe *ftrma.OpError
		if !errors.As(err, &oe) {
			return fmt.Errorf("error %v is not an *ftrma.OpError", err)
		}
		return nil
	})
}

// A nil or empty buffer exposes no memory at that rank (as MPI allows): its
// Bytes are empty, accesses to it fail with ErrOutOfBounds, and the other
// ranks' memory works as usual.
func TestCreateEmpty(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		var buf []byte
		switch c.Rank() {
		case 1:
			buf = []byte{}
		case 2:
			buf = make([]byte, 16)
		}
		w, err := window.Create(ctx, c, buf)
		if err != nil {
			return err
		}
		if c.Rank() != 2 && len(w.Bytes()) != 0 {
			return fmt.Errorf("an empty buffer gave a window of %d bytes", len(w.Bytes()))
		}
		for _, target := range []ftrma.Rank{0, 1} {
			if err := w.Put(target, 0, []byte{1}); !errors.Is(err, ftrma.ErrOutOfBounds) {
				return fmt.Errorf("put to rank %d's empty window: %v, want ErrOutOfBounds", target, err)
			}
		}
		var old int64
		if err := w.FetchAndOp(2, 8, 1, &old, window.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, 2); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 2 {
			var v int64
			if err := w.FetchAndOp(2, 8, 0, &v, window.NoOp); err != nil {
				return err
			}
			if err := w.Flush(ctx, 2); err != nil {
				return err
			}
			if v != 3 {
				return fmt.Errorf("rank 2's counter is %d, want 3", v)
			}
		}
		return w.Free(ctx)
	})
}

// Create makes the caller's buffer the window's memory on every transport,
// as MPI_Win_create does, shared memory included (whose peers cannot map
// the buffer: the owner executes their operations on it): each rank stores
// into its own buffer after Create and the others read that; what they put
// lands in the buffer in place, where a rank polling a flag in its own
// buffer sees it; and Free leaves the buffer as the window left it.
func TestCreateIsTheBuffer(t *testing.T) {
	run(t, 4, createIsTheBuffer)
	t.Run("tcp", func(t *testing.T) { runComms(t, tcpWorld(t, 4), createIsTheBuffer) })
}

func createIsTheBuffer(ctx context.Context, c *comm.Comm) error {
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
		if err := awaitFlag(ctx, &words[40], "the flag rank 1 put into this rank's buffer"); err != nil {
			return err
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
}

// awaitFlag polls the word at p, which another rank sets to 1 (a put, a
// store through shared memory), until it is 1 or ctx ends.
func awaitFlag(ctx context.Context, p *uint64, what string) error {
	for atomic.LoadUint64(p) != 1 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never showed: %w", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
