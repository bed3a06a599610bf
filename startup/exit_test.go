package startup

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// downRecorder is a transport.Receiver that records peer-down events.
type downRecorder struct {
	mu    sync.Mutex
	downs []string // "rank:exit" or "rank:lost"
}

func (d *downRecorder) HandleMessage(ftrma.Rank, []byte) {}

func (d *downRecorder) HandlePeerDown(r ftrma.Rank, err error) {
	kind := "lost"
	if errors.Is(err, ErrExitReported) {
		kind = "exit"
		if !errors.Is(err, ftrma.ErrProcFailed) {
			panic("an exit notice that does not wrap ErrProcFailed")
		}
	}
	d.mu.Lock()
	d.downs = append(d.downs, fmt.Sprintf("%d:%s", r, kind))
	d.mu.Unlock()
}

// fakeDowner is a transport's PeerDown as the contract says: a peer not
// down yet is marked down and its receiver told (at once, or later when
// deferred), a peer already down is ignored.
type fakeDowner struct {
	recv    transport.Receiver
	down    map[ftrma.Rank]bool
	defer_  bool
	pending []func()
}

func (f *fakeDowner) lose(r ftrma.Rank, cause error) {
	if f.down[r] {
		return
	}
	f.down[r] = true
	call := func() { f.recv.HandlePeerDown(r, transport.ErrPeerDown(r, cause)) }
	if f.defer_ {
		f.pending = append(f.pending, call)
	} else {
		call()
	}
}

func (f *fakeDowner) PeerDown(r ftrma.Rank, cause error) { f.lose(r, cause) }

func (f *fakeDowner) flush() {
	for _, c := range f.pending {
		c()
	}
	f.pending = nil
}

// ftrun's exit notice reaches the receiver exactly once per rank, whether
// the transport had lost the peer before (it then ignores PeerDown) or not,
// and whether the transport tells its receiver at once or later; a
// transport's own loss of a peer is passed on, unless ftrun's notice of it
// came first.
func TestExitNoticeReachesReceiver(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		rec := &downRecorder{}
		x := newExitReceiver(rec, 4)
		tr := &fakeDowner{recv: x, down: map[ftrma.Rank]bool{}, defer_: deferred}
		tr.lose(1, io.EOF) // the transport lost rank 1 first
		tr.flush()
		x.exited(tr, 1) // ftrun: rank 1 exited
		x.exited(tr, 2) // ftrun: rank 2 exited; the transport had it up
		x.exited(tr, 2) // a repeated notice
		tr.flush()
		tr.lose(2, io.EOF) // ignored by the transport: already down
		x.HandlePeerDown(2, transport.ErrPeerDown(2, io.EOF))
		tr.flush()
		rec.mu.Lock()
		got := slices.Clone(rec.downs)
		rec.mu.Unlock()
		want := []string{"1:lost", "1:exit", "2:exit"}
		if !slices.Equal(got, want) {
			t.Errorf("deferred=%v: receiver heard %v, want %v", deferred, got, want)
		}
	}
	if err := exitError(3); !errors.Is(err, ErrExitReported) || !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("exitError(3) = %v: wraps ErrExitReported %v, ErrProcFailed %v", err,
			errors.Is(err, ErrExitReported), errors.Is(err, ftrma.ErrProcFailed))
	}
}

// While the transport has a peer up, ftrun's exit notice reaches the
// receiver only through the transport, after what the peer sent before it
// exited (a transport that defers the report until its queue is drained):
// told at once, the receiver would fence the peer with its last messages
// undelivered (a finished rank's contribution to the final barrier).
func TestExitNoticeWaitsForTheTransport(t *testing.T) {
	rec := &downRecorder{}
	x := newExitReceiver(rec, 4)
	tr := &fakeDowner{recv: x, down: map[ftrma.Rank]bool{}, defer_: true}
	x.exited(tr, 3)
	rec.mu.Lock()
	early := slices.Clone(rec.downs)
	rec.mu.Unlock()
	if len(early) != 0 {
		t.Fatalf("the receiver heard %v before the transport delivered the peer's last messages", early)
	}
	tr.flush()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if want := []string{"3:exit"}; !slices.Equal(rec.downs, want) {
		t.Errorf("receiver heard %v, want %v", rec.downs, want)
	}
}
