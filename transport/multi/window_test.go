//go:build linux

package multi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/window"
	"github.com/ftrma/ftrma/window/rmacheck"
)

// The window layer's acceptance checks over a multi transport: windows,
// locks, CAS loops, fetch-and-op and large puts and gets between ranks of
// one host (shm) and of two (tcp), with hosts whose ranks are not
// contiguous (ftrun's --map-by node).
func TestWindowChecksOverMulti(t *testing.T) {
	comms := commsOverMulti(t)
	ctx := testCtx(t)
	sizes := []int{1, 8, 13, 4096, 64<<10 + 5, 1 << 20}
	checks := []struct {
		name string
		f    func(ctx context.Context, c *comm.Comm) error
	}{
		{"counters", func(ctx context.Context, c *comm.Comm) error {
			cas, fao, err := rmacheck.Counters(ctx, c, 300)
			if err == nil && (cas != 1200 || fao != 1200) {
				err = fmt.Errorf("counters %d, %d", cas, fao)
			}
			return err
		}},
		{"locked counter", func(ctx context.Context, c *comm.Comm) error {
			v, err := rmacheck.LockedCounter(ctx, c, 100)
			if err == nil && v != 400 {
				err = fmt.Errorf("locked counter %d", v)
			}
			return err
		}},
		{"put get third", func(ctx context.Context, c *comm.Comm) error { return rmacheck.PutGetThird(ctx, c, sizes) }},
	}
	for _, check := range checks {
		var wg sync.WaitGroup
		errs := make([]error, len(comms))
		for r, c := range comms {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = check.f(ctx, c) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("%s: rank %d: %v", check.name, r, err)
			}
		}
	}
}

// commsOverMulti builds a world communicator at each of four ranks on two
// pretend hosts whose ranks are not contiguous ({0, 2} and {1, 3}: shared
// memory within a host, tcp between), closed at the end of the test.
func commsOverMulti(t *testing.T) []*comm.Comm {
	t.Helper()
	w := newWorld(t, [][]ftrma.Rank{{0, 2}, {1, 3}}, worldOpts{noReceiver: true, noConnect: true})
	comms := make([]*comm.Comm, len(w.ts))
	for r, m := range w.ts {
		cfg := commtest.TestConfig()
		cfg.OnDeclaredFailed = func(by string) { t.Errorf("rank %d declared failed by %s", r, by) }
		c, err := comm.New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
		t.Cleanup(func() { c.Close() })
	}
	w.connect(t, nil)
	return comms
}

// AllocateShared over the ranks of two hosts is refused at every rank with
// transport.ErrNotShared; SplitShared gives each host's ranks their own
// communicator, over which it works: a rank's store into the other's memory
// through SharedQuery is what that rank finds in its window memory.
func TestAllocateSharedByHost(t *testing.T) {
	comms := commsOverMulti(t)
	ctx := testCtx(t)
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = sharedByHost(ctx, c) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func sharedByHost(ctx context.Context, c *comm.Comm) error {
	if w, err := window.AllocateShared(ctx, c, 64); !errors.Is(err, transport.ErrNotShared) {
		if err == nil {
			w.Free(ctx)
		}
		return fmt.Errorf("AllocateShared over two hosts: %v, want ErrNotShared", err)
	}
	hc, err := c.SplitShared(ctx)
	if err != nil {
		return err
	}
	defer hc.Close()
	// The hosts are {0, 2} and {1, 3}.
	if hc.Size() != 2 || hc.TransportRank(0) != c.Rank()%2 || hc.TransportRank(1) != c.Rank()%2+2 {
		return fmt.Errorf("host communicator of %d ranks, %d and %d", hc.Size(), hc.TransportRank(0), hc.TransportRank(1))
	}
	w, err := window.AllocateShared(ctx, hc, 64)
	if err != nil {
		return err
	}
	other := 1 - hc.Rank()
	b, err := w.SharedQuery(other)
	if err != nil {
		return err
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[8])), uint64(500+c.Rank()))
	if err := hc.Barrier(ctx); err != nil {
		return err
	}
	want := uint64(500 + hc.TransportRank(other))
	if got := atomic.LoadUint64((*uint64)(unsafe.Pointer(&w.Bytes()[8]))); got != want {
		return fmt.Errorf("word 1 of this rank's memory holds %d, want %d (the other rank's store)", got, want)
	}
	return w.Free(ctx)
}
