//go:build linux

package multi_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// With a transport that reaches every rank and whose atomics are not the
// CPU's (hcaTCP, as verbs on Soft-RoCE), every atomic goes through it,
// toward every rank, self included, while writes and reads keep the route
// (shm on the host); Caps drops CapOrdered, since an atomic and a write
// toward one peer take different paths.
func TestSplitAtomicsRoutes(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{splitAtomics: true})
	mems, keys := w.regions(t, 64)
	ctx := testCtx(t)
	for me, m := range w.ts {
		want := transport.CapRemoteCompletion | transport.CapWholeWords
		if got := m.Caps(); got != want {
			t.Errorf("rank %d: Caps %b, want %b (no CapOrdered, no CapLocalAtomics)", me, got, want)
		}
		for r := range w.ts {
			tr := ftrma.Rank(r)
			var old uint64
			seq, err := m.FetchAndAdd64(tr, keys[r], 8, 1, &old)
			if err == nil {
				err = m.Wait(ctx, tr, seq)
			}
			if err != nil {
				t.Fatalf("rank %d: fetch-and-add toward %d: %v", me, r, err)
			}
			if seq, err = m.CompareAndSwap64(tr, keys[r], 16, 0, 7, nil); err == nil {
				err = m.Wait(ctx, tr, seq)
			}
			if err != nil {
				t.Fatalf("rank %d: compare-and-swap toward %d: %v", me, r, err)
			}
			if seq, err = m.Write(tr, keys[r], 24, []byte{1}); err == nil {
				err = m.Wait(ctx, tr, seq)
			}
			if err != nil {
				t.Fatalf("rank %d: write toward %d: %v", me, r, err)
			}
			h := w.hcas[me]
			if n := h.atomics[r].Load(); n != 2 {
				t.Errorf("rank %d: %d atomics toward %d through tcp, want 2", me, n, r)
			}
			wantData := int64(1)
			if w.sameHost(ftrma.Rank(me), tr) {
				wantData = 0
			}
			if n := h.data[r].Load(); n != wantData {
				t.Errorf("rank %d: %d writes toward %d through tcp, want %d", me, n, r, wantData)
			}
		}
	}
	for r, mem := range mems {
		if got := *word(mem, 1); got != uint64(len(w.ts)) {
			t.Errorf("rank %d's counter %d, want %d", r, got, len(w.ts))
		}
		if got := *word(mem, 2); got != 7 {
			t.Errorf("rank %d's swapped word %d, want 7", r, got)
		}
	}
}

// Waiting for a write through shm covers an atomic posted before it
// through tcp toward the same peer: sequences toward a peer complete in
// order across both paths. The atomic's result is filled when the write's
// Wait returns (tcp's target answers it later; shm's write is complete
// when posted, so without the cover the result is still unset).
func TestSplitWaitCoversEarlierAtomic(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{splitAtomics: true})
	_, keys := w.regions(t, 64)
	ctx := testCtx(t)
	m := w.ts[0]
	for i := range 200 {
		result := ^uint64(0)
		if _, err := m.FetchAndAdd64(1, keys[1], 0, 1, &result); err != nil {
			t.Fatal(err)
		}
		seq, err := m.Write(1, keys[1], 8, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Wait(ctx, 1, seq); err != nil {
			t.Fatal(err)
		}
		if result != uint64(i) {
			t.Fatalf("round %d: the fetch-and-add posted before the write holds %#x after the write's Wait, want %d", i, result, i)
		}
		if done, err := m.Test(1, seq); !done || err != nil {
			t.Fatalf("round %d: Test after Wait: %v, %v", i, done, err)
		}
	}
	if err := m.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// Atomics from every rank on one word sum exactly although the owner's
// host reaches it through shm for data and every atomic goes through tcp;
// the owner's own atomics too (toward itself).
func TestSplitAtomicsSum(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{splitAtomics: true})
	mems, keys := w.regions(t, 8)
	ctx := testCtx(t)
	const each = 300
	var wg sync.WaitGroup
	errc := make(chan error, len(w.ts))
	for _, m := range w.ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := m.FetchAndAdd64(0, keys[0], 0, 1, nil); err != nil {
					errc <- err
					return
				}
			}
			errc <- m.Flush(ctx, 0)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := *word(mems[0], 0); got != each*uint64(len(w.ts)) {
		t.Fatalf("counter %d, want %d", got, each*len(w.ts))
	}
}

// Fencing a rank of this host cuts both of its paths: after rank 0 fences
// rank 1, rank 1's atomics (tcp) and writes (shm) toward rank 0 fail, and
// rank 0's memory does not change.
func TestSplitFenceCutsBothPaths(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{splitAtomics: true})
	mems, keys := w.regions(t, 16)
	ctx := testCtx(t)
	if err := w.ts[0].Fence(1); err != nil {
		t.Fatal(err)
	}
	m := w.ts[1]
	seq, err := m.FetchAndAdd64(0, keys[0], 0, 1, nil)
	if err == nil {
		err = m.Wait(ctx, 0, seq)
	}
	if !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("atomic of the fenced rank: %v, want ErrProcFailed", err)
	}
	seq, err = m.Write(0, keys[0], 8, []byte{9})
	if err == nil {
		err = m.Wait(ctx, 0, seq)
	}
	if !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("write of the fenced rank: %v, want ErrProcFailed", err)
	}
	if *word(mems[0], 0) != 0 || mems[0][8] != 0 {
		t.Errorf("the fenced rank changed rank 0's memory: %v", mems[0])
	}
}

// A rank of this host whose transports close is reported down once,
// although both paths to it see it go.
func TestSplitPeerLostOnce(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{splitAtomics: true})
	w.ts[1].Close()
	ctx := testCtx(t)
	w.recs[0].Await(t, ctx, "rank 0 hears that rank 1 closed", func() bool { return len(w.recs[0].DownsOf(1)) > 0 })
	// Both paths may report; the second report is not passed on.
	w.ts[0].PeerDown(1, nil)
	if err := w.ts[0].Fence(1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("fence after loss: %v", err)
	}
	if n := len(w.recs[0].DownsOf(1)); n != 1 {
		t.Errorf("rank 0 heard of rank 1 %d times, want once", n)
	}
}

// The transport that reaches every rank does not report the orderly
// departure of a rank of this host (its goodbye may overtake the rank's
// last messages through shm, which reports the departure after them), but
// it does report that rank's failure. Its events are injected here as the
// sub-transport would deliver them.
func TestSplitDepartureKeepsOrder(t *testing.T) {
	w := newWorld(t, twoHosts, worldOpts{splitAtomics: true})
	reach := *w.hcas[0].recv.Load()
	reach.HandlePeerDown(1, transport.ErrPeerDown(1, transport.ErrPeerLeft))
	if err := w.ts[1].Send(0, []byte("last")); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	w.recs[0].Await(t, ctx, "rank 1's message through shm", func() bool { return len(w.recs[0].From(1)) == 1 })
	if d := w.recs[0].DownsOf(1); len(d) != 0 {
		t.Fatalf("rank 1's departure reported by tcp, before its last message: %v", d)
	}
	// A failure it sees is passed on, once.
	reach.HandlePeerDown(1, transport.ErrPeerDown(1, errors.New("queue pair broke")))
	reach.HandlePeerDown(1, transport.ErrPeerDown(1, errors.New("again")))
	if d := w.recs[0].DownsOf(1); len(d) != 1 || !strings.Contains(d[0].Error(), "queue pair broke") {
		t.Fatalf("rank 1's failure seen by tcp: reported %v, want once", d)
	}
	// A rank of the other host is tcp's own: its departure is reported.
	reach.HandlePeerDown(2, transport.ErrPeerDown(2, transport.ErrPeerLeft))
	if d := w.recs[0].DownsOf(2); len(d) != 1 {
		t.Fatalf("rank 2's departure through tcp: reported %v, want once", d)
	}
}

// A message sent after an atomic toward a rank of this host arrives after
// the atomic landed, although the atomic went through tcp and the message
// through shm (messages follow the operations posted before them); and an
// atomic's failure that Send waited out is reported by the next Wait.
func TestSplitMessagesFollowAtomics(t *testing.T) {
	const rounds = 200
	w := newWorld(t, twoHosts, worldOpts{noReceiver: true, splitAtomics: true})
	mems, keys := w.regions(t, 8)
	rec := newRecorder()
	var bad atomic.Int64
	rec.Hook = func(_ ftrma.Rank, msg []byte) {
		if atomic.LoadUint64(word(mems[1], 0)) < binary.NativeEndian.Uint64(msg) {
			bad.Add(1)
		}
	}
	w.ts[1].SetReceiver(rec)
	w.ts[0].SetReceiver(newRecorder())
	ctx := testCtx(t)
	for i := uint64(1); i <= rounds; i++ {
		if _, err := w.ts[0].FetchAndAdd64(1, keys[1], 0, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.ts[0].Send(1, binary.NativeEndian.AppendUint64(nil, i)); err != nil {
			t.Fatal(err)
		}
	}
	rec.Await(t, ctx, "the messages", func() bool { return rec.Count() >= rounds })
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d messages arrived before the fetch-and-add posted before them landed", n, rounds)
	}
	// A failing atomic (no such key), then a message: Send waits it out
	// and the next Wait reports it.
	if _, err := w.ts[0].FetchAndAdd64(1, keys[1]+999, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.ts[0].Send(1, binary.NativeEndian.AppendUint64(nil, rounds+1)); err != nil {
		t.Fatal(err)
	}
	seq, err := w.ts[0].Write(1, keys[1], 0, make([]byte, 0))
	if err == nil {
		err = w.ts[0].Wait(ctx, 1, seq)
	}
	if !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Fatalf("Wait after Send took the failure of an atomic: %v, want ErrUnknownRegion", err)
	}
}
