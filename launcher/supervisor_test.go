package launcher

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
)

// The host supervisor's grant rule: no grant while the node does not act
// or once its host lease has ended; otherwise the lease term, cut to what
// remains of the host lease.
func TestSupervisorGrant(t *testing.T) {
	const term = time.Second
	now := time.Unix(1000, 0)
	tests := []struct {
		name   string
		acting bool
		left   time.Duration // leaseEnd - now
		want   time.Duration
		ok     bool
	}{
		{"not acting", false, 10 * time.Second, 0, false},
		{"not acting, lease run out", false, -time.Second, 0, false},
		{"acting, long lease", true, 10 * time.Second, term, true},
		{"acting, lease of exactly a term", true, term, term, true},
		{"acting, lease shorter than a term", true, 300 * time.Millisecond, 300 * time.Millisecond, true},
		{"acting, lease ends now", true, 0, 0, false},
		{"acting, lease run out", true, -time.Millisecond, 0, false},
		{"never held a lease", true, -now.Sub(time.Time{}), 0, false},
	}
	for _, tt := range tests {
		got, ok := supervisorGrant(tt.acting, now.Add(tt.left), now, term)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: supervisorGrant = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
		if ok && (got > term || now.Add(got).After(now.Add(tt.left))) {
			t.Errorf("%s: a grant of %v outlives the term or the host lease", tt.name, got)
		}
	}
}

// The endpoint itself: a rank that proves the job secret gets no grant
// while the node does not act (its ask is held), the grant once it acts,
// with the term cut to what remains of the host lease; a client with
// another secret is refused.
func TestSupervisorEndpoint(t *testing.T) {
	const term = time.Second
	secret := bytes.Repeat([]byte{7}, jobwire.MinSecret)
	var mu sync.Mutex
	acting, end := false, time.Time{}
	lease := func() (bool, time.Time) { mu.Lock(); defer mu.Unlock(); return acting, end }
	s, err := listenSupervisor(secret, term, lease, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	c, err := net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, err := seclink.Client(c, jobwire.SupervisorKey(secret), time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := jobwire.WriteFrame(tc, jobwire.MsgLeaseAsk, jobwire.LeasePayload(5)); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(3 * term / 10))
	if typ, _, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame); err == nil {
		t.Fatalf("got message %d while the node does not act", typ)
	}
	tc.SetReadDeadline(time.Time{})
	// A read that timed out leaves a TLS connection unusable: ask anew
	// on a new one.
	c.Close()
	c, err = net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, err = seclink.Client(c, jobwire.SupervisorKey(secret), time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := jobwire.WriteFrame(tc, jobwire.MsgLeaseAsk, jobwire.LeasePayload(6)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(term / 10) // held
	mu.Lock()
	acting, end = true, time.Now().Add(term/2)
	mu.Unlock()
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, p, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame)
	if err != nil || typ != jobwire.MsgLeaseGrant {
		t.Fatalf("no grant once the node acts: type %d, %v", typ, err)
	}
	seq, g, err := jobwire.ParseGrant(p)
	if err != nil || seq != 6 || g > term/2 || g <= 0 {
		t.Fatalf("grant of seq %d for %v (%v), want seq 6 for at most %v", seq, g, err, term/2)
	}

	bad, err := net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := seclink.Client(bad, jobwire.SupervisorKey(bytes.Repeat([]byte{8}, jobwire.MinSecret)), time.Now().Add(10*time.Second)); err == nil {
		t.Error("a client with another job's secret was let in")
	}
}

// The arbiter's exit notices reach the ranks through their supervisor: a
// channel that opens gets every rank gone before, and then each one gone
// while it is open (jobwire/supervisor.go).
func TestSupervisorExitNotices(t *testing.T) {
	const term = time.Second
	secret := bytes.Repeat([]byte{7}, jobwire.MinSecret)
	lease := func() (bool, time.Time) { return true, time.Now().Add(term) }
	s, err := listenSupervisor(secret, term, lease, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.exited(3)
	c, err := net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, err := seclink.Client(c, jobwire.SupervisorKey(secret), time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	next := func() ftrma.Rank {
		t.Helper()
		typ, p, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame)
		if err != nil || typ != jobwire.MsgExit {
			t.Fatalf("got message %d (%v), want an exit notice", typ, err)
		}
		r, err := jobwire.ParseRank(p, 8)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := next(); r != 3 {
		t.Errorf("the notice of a rank gone before names rank %d, want 3", r)
	}
	// Once the channel is registered (its first notice came), later ones
	// follow as they are applied.
	s.exited(5)
	if r := next(); r != 5 {
		t.Errorf("the notice of a rank gone now names rank %d, want 5", r)
	}
}
