//go:build linux

package multi_test

import (
	"sync"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/internal/rmacheck"
)

// window.Create over a multi transport (shared memory within a host, tcp
// between hosts): the window memory is a copy in the transport's memory,
// and every rank's buffer holds the window's last contents after Free.
func TestWindowCreateOverMulti(t *testing.T) {
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
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			direct, err := rmacheck.Create(ctx, c)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			} else if direct {
				t.Errorf("rank %d: the window memory is the buffer; want a copy in the transport's memory", r)
			}
		}()
	}
	wg.Wait()
}
