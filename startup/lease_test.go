package startup

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
)

// leaseSession is a Session on one end of a pipe whose other end grants
// lease asks while grant is true.
func leaseSession(t *testing.T, term time.Duration, grant *atomic.Bool) (*Session, *atomic.Int32) {
	t.Helper()
	rank, launcher := net.Pipe()
	s := &Session{rank: 1, size: 2, conn: rank, term: term, stop: make(chan struct{}),
		asked: make(map[uint64]time.Time), expiry: time.Now().Add(term)}
	lost := new(atomic.Int32)
	s.OnLeaseLost(func() { lost.Add(1) })
	go func() {
		for {
			typ, p, err := jobwire.ReadFrame(launcher, jobwire.MaxSmallFrame)
			if err != nil {
				return
			}
			if typ == jobwire.MsgLeaseAsk && grant.Load() {
				seq, _ := jobwire.ParseLease(p)
				jobwire.WriteFrame(launcher, jobwire.MsgLeaseGrant, jobwire.LeasePayload(seq))
			}
		}
	}()
	s.watching.Add(2)
	go s.watch()
	go s.keepLease()
	t.Cleanup(func() { s.Close(); launcher.Close() })
	return s, lost
}

// A rank keeps its lease while ftrun grants it, loses it (once) a term
// after the grants stop, and after Leave no longer cares.
func TestLease(t *testing.T) {
	const term = 100 * time.Millisecond
	var grant atomic.Bool
	grant.Store(true)
	_, lost := leaseSession(t, term, &grant)
	time.Sleep(6 * term)
	if n := lost.Load(); n != 0 {
		t.Fatalf("lease lost %d times while ftrun granted it", n)
	}
	grant.Store(false)
	for end := time.Now().Add(20 * term); lost.Load() == 0 && time.Now().Before(end); time.Sleep(term / 10) {
	}
	if lost.Load() != 1 {
		t.Fatalf("lease lost %d times after the grants stopped, want 1", lost.Load())
	}
	time.Sleep(3 * term)
	if n := lost.Load(); n != 1 {
		t.Errorf("lease loss reported %d times, want once", n)
	}

	var grant2 atomic.Bool
	s2, lost2 := leaseSession(t, term, &grant2) // never granted
	s2.Leave()
	time.Sleep(4 * term)
	if n := lost2.Load(); n != 0 {
		t.Errorf("a rank that left lost its lease %d times", n)
	}
}

// A rank whose lease ran out while it did not run (a stall) keeps it when
// ftrun still grants: it asks once more before it stops.
func TestLeaseSurvivesStall(t *testing.T) {
	const term = 100 * time.Millisecond
	var grant atomic.Bool
	grant.Store(true)
	s, lost := leaseSession(t, term, &grant)
	time.Sleep(2 * term)
	// As after a stall: the lease's end lies in the past, the asks that
	// would renew it were never answered.
	s.lmu.Lock()
	s.expiry = time.Now().Add(-term)
	s.asked = map[uint64]time.Time{}
	s.lmu.Unlock()
	time.Sleep(3 * term)
	if n := lost.Load(); n != 0 {
		t.Errorf("a rank whose lease ftrun still grants stopped after a stall (%d)", n)
	}
}
