//go:build linux && cgo && verbs

package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on
// verbs, on the device of the Soft-RoCE guest; a killed rank is closed.
func TestContract(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
		ts, _ := openWorld(t, n, 0, false)
		w := &transporttest.World{}
		for _, tr := range ts {
			w.Ranks = append(w.Ranks, transport.Transport(tr))
		}
		return w
	})
}

// spareJob opens live connected ranks of a job of live+spares ranks on the
// device, the spares absent, and says how to start a spare: Open with Late
// and the spares not started yet absent, PeerDown the failed ranks,
// Connect with the live ranks' addresses. The live ranks admit it with its
// whole address (every queue pair number), as a test can give one string
// to all; ftrun gives each its own part (see TestAdmitSplitAddress).
func spareJob(t testing.TB, live, spares int) *transporttest.Spares {
	t.Helper()
	return spareJobBound(t, live, spares, 2*time.Second)
}

// spareJobBound is spareJob with the transports' Config.Bound.
func spareJobBound(t testing.TB, live, spares int, bound time.Duration) *transporttest.Spares {
	t.Helper()
	needDevice(t)
	size := live + spares
	var absent []ftrma.Rank
	for s := live; s < size; s++ {
		absent = append(absent, ftrma.Rank(s))
	}
	w := &transporttest.Spares{Live: live, Ranks: make([]transport.Transport, size)}
	addrs := make([]string, size)
	ts := make([]*Transport, size)
	for r := range live {
		tr, err := Open(Config{Rank: ftrma.Rank(r), Size: size, GIDIndex: -1, Bound: bound, Logger: testLogger(t), Absent: absent})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[r], addrs[r], w.Ranks[r] = tr, tr.Addr(), tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, live)
	for r := range live {
		go func() { errc <- ts[r].Connect(ctx, addrs) }()
	}
	for range live {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	w.Start = func(s int, up, failed []int) (transport.Transport, string, func(context.Context) error) {
		mine := make([]string, size)
		known := map[int]bool{s: true}
		for _, r := range up {
			mine[r], known[r] = addrs[r], true
		}
		for _, r := range failed {
			known[r] = true
		}
		var absent []ftrma.Rank
		for r := range size {
			if !known[r] {
				absent = append(absent, ftrma.Rank(r))
			}
		}
		tr, err := Open(Config{Rank: ftrma.Rank(s), Size: size, GIDIndex: -1, Bound: bound, Logger: testLogger(t), Absent: absent, Late: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[s], addrs[s] = tr, tr.Addr()
		for _, r := range failed {
			tr.PeerDown(ftrma.Rank(r), errors.New("failed before this rank started"))
		}
		return tr, tr.Addr(), func(ctx context.Context) error { return tr.Connect(ctx, mine) }
	}
	return w
}

// TestAdmission runs the admission contract (transporttest.RunAdmission) on
// verbs; a killed rank is closed.
func TestAdmission(t *testing.T) {
	transporttest.RunAdmission(t, func(t testing.TB, live, spares int) *transporttest.Spares {
		return spareJob(t, live, spares)
	})
}
