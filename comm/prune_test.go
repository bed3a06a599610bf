package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/revoke"
	"github.com/ftrma/ftrma/transport/memnet"
)

// retained counts what a runtime keeps that could grow with the
// communicators it has made: notices (the runtime's and the machine's),
// broadcast IDs remembered among ids, early agreement messages, collective
// contributions, notice waiters, live communicators and closed ids.
type retained struct {
	notices, machineNotices, seen, early, inbox, awaited, comms, closed int
}

// onRun runs f on rt's run goroutine and waits for it.
func onRun(rt *runtime, f func()) {
	done := make(chan struct{})
	rt.do(func() { f(); close(done) })
	<-done
}

func (rt *runtime) retained(ids []string) retained {
	var r retained
	onRun(rt, func() {
		r.machineNotices = len(rt.m.notices)
		for _, id := range ids {
			if rt.m.bc.Seen(id) {
				r.seen++
			}
		}
		for _, e := range rt.m.early {
			r.early += len(e)
		}
		r.closed = len(rt.m.closed.ids)
	})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r.notices, r.inbox, r.awaited, r.comms = len(rt.notices), len(rt.inbox), len(rt.awaited), len(rt.comms)
	r.closed = max(r.closed, len(rt.closedC.ids))
	return r
}

// Revoke and shrink, 300 rounds: each round a rank revokes the current
// communicator while the others are in a barrier on it (their
// contributions to it are abandoned), every rank waits for the
// revocation, shrinks, and closes the revoked communicator. What each
// runtime keeps stays bounded: no notice, remembered revocation, early
// message or contribution of a closed communicator, and at most keep
// closed ids. Then a late copy of the last pruned revocation arrives: it is
// dropped (not noticed, not remembered), and the live communicator stays
// unrevoked.
func TestPruneRevokeShrinkRounds(t *testing.T) {
	const n, rounds, keep = 4, 300, 16
	net := memnet.New(n)
	defer net.Close()
	cfg := Config{OnDeclaredFailed: func(string) {}}
	cfg.Detector.Period, cfg.Detector.Timeout = 50*time.Millisecond, 2*time.Second
	world := make([]*Comm, n)
	for r := range world {
		c, err := New(net.Endpoint(ftrma.Rank(r)), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		world[r] = c
		onRun(c.rt, func() { c.rt.m.closed.keep = keep })
		c.rt.mu.Lock()
		c.rt.closedC.keep = keep
		c.rt.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := make([][]string, n) // the revocations each rank closed
	last := make([]*Comm, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				cur, err := c.Shrink(ctx)
				if err != nil {
					return err
				}
				for i := range rounds {
					revoker := ftrma.Rank(i % n)
					if cur.Rank() == revoker {
						cur.Revoke()
					} else if err := cur.Barrier(ctx); !errors.Is(err, ftrma.ErrRevoked) {
						return fmt.Errorf("round %d: barrier on a communicator being revoked: %v", i, err)
					}
					select {
					case <-cur.Revoked():
					case <-ctx.Done():
						return fmt.Errorf("round %d: revocation never came", i)
					}
					next, err := cur.Shrink(ctx)
					if err != nil {
						return fmt.Errorf("round %d: shrink: %w", i, err)
					}
					ids[r] = append(ids[r], cur.revokeID())
					cur.Close()
					cur = next
				}
				last[r] = cur
				return cur.Barrier(ctx)
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, c := range world {
		got := c.rt.retained(ids[r])
		// Live: the world and the last shrunk communicator. Contributions
		// left: at most one per other rank (the last barrier's, were it
		// abandoned; it was not).
		want := retained{comms: 2, closed: keep}
		if got.notices != 0 || got.machineNotices != 0 || got.seen != 0 || got.early != 0 || got.inbox > n-1 ||
			got.awaited != 0 || got.comms != want.comms || got.closed > want.closed {
			t.Errorf("rank %d after %d rounds retains %+v; want no notices, remembered revocations, early messages or waiters, %d communicators, at most %d closed ids, %d contributions",
				r, rounds, got, want.comms, keep, n-1)
		}
	}

	// A late copy of the last pruned revocation, from a neighbour.
	rt := world[1].rt
	id := ids[1][len(ids[1])-1]
	msg := revoke.Message{ID: id}.AppendBinary([]byte{kindBcast})
	rt.HandleMessage(0, msg)
	rt.HandleMessage(2, append([]byte{kindNotice}, id...)) // and as RevokeGroup's direct notice
	got := rt.retained([]string{id})
	if got.notices != 0 || got.machineNotices != 0 || got.seen != 0 {
		t.Errorf("after a late copy of %s: %+v; want it dropped", id, got)
	}
	if world[1].Noticed(id) || last[1].IsRevoked() {
		t.Errorf("a late copy of %s: noticed %v, live communicator revoked %v", id, world[1].Noticed(id), last[1].IsRevoked())
	}
}
