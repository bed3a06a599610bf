//go:build linux

package multi_test

import (
	"sync"
	"testing"

	"github.com/ftrma/ftrma/window/rmacheck"
)

// window.Create over a multi transport (shared memory within a host, tcp
// between hosts): the window memory is the buffer itself (shm executes its
// peers' operations on it, tcp its own), and every rank's buffer holds the
// window's last contents after Free.
func TestWindowCreateOverMulti(t *testing.T) {
	comms := commsOverMulti(t)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			direct, err := rmacheck.Create(ctx, c)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			} else if !direct {
				t.Errorf("rank %d: the window memory is a copy; want the buffer itself", r)
			}
		}()
	}
	wg.Wait()
}
