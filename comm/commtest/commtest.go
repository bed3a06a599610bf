// Package commtest builds in-process worlds of ranks for tests: N communicators
// over a memnet network, one per goroutine rank, with the network's fault
// hooks at hand.
package commtest

import (
	"context"
	"sync"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/transport/memnet"
)

// World is n communicators over one memnet network.
type World struct {
	Net   *memnet.Network
	Comms []*comm.Comm
}

// New builds a world of n ranks. Close it when done (tb.Cleanup does when tb
// is not nil).
func New(tb testing.TB, n int) *World {
	w := &World{Net: memnet.New(n), Comms: make([]*comm.Comm, n)}
	for r := range n {
		w.Comms[r] = comm.New(w.Net.Endpoint(ftrma.Rank(r)))
	}
	if tb != nil {
		tb.Cleanup(w.Close)
	}
	return w
}

// Run calls f for every rank in its own goroutine and returns the ranks'
// errors, indexed by rank.
func (w *World) Run(ctx context.Context, f func(ctx context.Context, c *comm.Comm) error) []error {
	errs := make([]error, len(w.Comms))
	var wg sync.WaitGroup
	for r, c := range w.Comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(ctx, c)
		}()
	}
	wg.Wait()
	return errs
}

// Close closes every communicator and the network.
func (w *World) Close() {
	for _, c := range w.Comms {
		c.Close()
	}
	w.Net.Close()
}
