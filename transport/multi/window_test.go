//go:build linux

package multi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/internal/rmacheck"
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
