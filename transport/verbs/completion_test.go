//go:build linux && cgo && verbs

package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// settle waits up to 20 s for cond, without touching the transports: what
// it waits for must be done by their own goroutines.
func settle(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPushedOperationsComplete: operations nobody waits for are completed by
// the transport itself once pushed (the send queue is armed only on demand,
// so this is the progress goroutine's path, not a waiter's), and every kind
// of request is counted in flight until it completes.
func TestPushedOperationsComplete(t *testing.T) {
	ts, _ := world(t, 2)
	mem := make([]byte, 256<<10)
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts[0].Write(1, key, 0, []byte{1}); err != nil { // resolve the key first
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	var res uint64
	dst := make([]byte, 8)
	big := make([]byte, 200<<10) // four pieces
	ops := []struct {
		name string
		post func() (transport.Seq, error)
	}{
		{"write", func() (transport.Seq, error) { return ts[0].Write(1, key, 8, []byte("12345678")) }},
		{"read", func() (transport.Seq, error) { return ts[0].Read(1, key, 8, dst) }},
		{"compare-and-swap", func() (transport.Seq, error) { return ts[0].CompareAndSwap64(1, key, 16, 0, 5, &res) }},
		{"fetch-and-add", func() (transport.Seq, error) { return ts[0].FetchAndAdd64(1, key, 16, 1, &res) }},
		{"large write", func() (transport.Seq, error) { return ts[0].Write(1, key, 4096, big) }},
		{"out of bounds", func() (transport.Seq, error) { return ts[0].Write(1, key, 1<<30, []byte{1}) }},
	}
	p := ts[0].peers[1]
	for _, op := range ops {
		seq, err := op.post()
		if err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		ts[0].Push(1)
		settle(t, op.name+" completed without a waiter", func() bool { return p.comp.Completed() >= seq })
		settle(t, "nothing in flight after "+op.name, func() bool { return ts[0].inflight.Load() == 0 })
	}
	if string(dst) != "12345678" || res != 5 {
		t.Fatalf("read %q, fetch-and-add found %d; want 12345678 and 5", dst, res)
	}
	// The out-of-bounds write's error is reported by the next Flush.
	if err := ts[0].Flush(ctx(t), 1); !errors.Is(err, ftrma.ErrOutOfBounds) {
		t.Fatalf("flush after an out-of-bounds write: %v", err)
	}
	// Messages are completed by the progress goroutine too.
	for range 50 {
		if err := ts[0].Send(1, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, "sends completed", func() bool { return ts[0].inflight.Load() == 0 })
}

// TestSpinningWaiterSeesPeerLoss: a waiter spinning in C (a spin longer than
// the failure bound) returns ErrProcFailed when its peer stops answering,
// within the bound and its context, not when its spin ends.
func TestSpinningWaiterSeesPeerLoss(t *testing.T) {
	ts, _ := worldSpin(t, 2, time.Minute)
	mem := make([]byte, 64)
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts[0].Write(1, key, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	// Rank 1 cuts rank 0 off silently (as a host that vanished: no fenced
	// notice, which Fence would send): rank 0's requests go unanswered
	// until its retries run out (Bound: 2 s).
	cutOff(ts[1], 0)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res uint64
	seq, err := ts[0].CompareAndSwap64(1, key, 0, 1, 2, &res)
	if err == nil {
		err = ts[0].Wait(c, 1, seq)
	}
	if !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("wait toward a rank that cut us off: %v, want ErrProcFailed", err)
	}
	// A spinning waiter also gives up with its context.
	ts2, _ := worldSpin(t, 2, time.Minute)
	key2, err := ts2[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts2[0].Write(1, key2, 0, []byte{1}); err != nil { // resolve the key
		t.Fatal(err)
	}
	if err := ts2[0].Flush(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	cutOff(ts2[1], 0)
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	seq, err = ts2[0].Read(1, key2, 0, make([]byte, 8))
	if err == nil {
		err = ts2[0].Wait(short, 1, seq)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with a short context: %v, want its deadline", err)
	}
}

// cutOff makes tr drop peer as Fence does, without the fenced notice: the
// peer is not told, and its requests go unanswered.
func cutOff(tr *Transport, peer ftrma.Rank) { tr.down(tr.peers[peer], errFenced) }
