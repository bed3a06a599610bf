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

// The lease's rule (stepAt): held until expiry, rescued for a quarter term
// after it, stopped at once from then on — a quarter term before ftrun may
// tell the others (1.5 terms after the ask of the last grant, expiry + term/2).
func TestLeaseStepAt(t *testing.T) {
	const term = time.Second
	expiry := time.Unix(100, 0)
	tests := []struct {
		after time.Duration // now - expiry
		want  leaseStep
	}{
		{-term, leaseHeld},
		{0, leaseHeld},
		{time.Nanosecond, leaseRescue},
		{term / 20, leaseRescue},
		{term/4 - time.Nanosecond, leaseRescue},
		{term / 4, leaseStop},
		{term / 2, leaseStop},
		{10 * term, leaseStop},
	}
	for _, tt := range tests {
		if got := stepAt(expiry.Add(tt.after), expiry, term); got != tt.want {
			t.Errorf("%v after expiry: %v, want %v", tt.after, got, tt.want)
		}
	}
	if end, ftrun := rescueEnd(expiry, term), expiry.Add(-term).Add(term*3/2); !end.Before(ftrun) || ftrun.Sub(end) < term/4 {
		t.Errorf("the rescue ends at %v, ftrun may tell the others at %v: want a quarter term between", end, ftrun)
	}
}

// A rank whose lease ran out while it did not run (a stall) keeps it when
// ftrun still grants and it finds the loss within a quarter term: it asks
// once more, holding new work back (Rescuing) until the grant comes.
func TestLeaseSurvivesStall(t *testing.T) {
	const term = 400 * time.Millisecond
	var grant atomic.Bool
	grant.Store(true)
	s, lost := leaseSession(t, term, &grant)
	time.Sleep(term / 2)
	grant.Store(false) // so that the rescue can be seen before the grant
	// As after a stall: the lease's end lies just past, the asks that
	// would renew it were never answered.
	s.lmu.Lock()
	s.expiry = time.Now().Add(-term / 20)
	s.asked = map[uint64]time.Time{}
	s.lmu.Unlock()
	var held <-chan struct{}
	for end := time.Now().Add(term / 4); held == nil && time.Now().Before(end); time.Sleep(time.Millisecond) {
		held = s.Rescuing()
	}
	if held == nil {
		t.Fatalf("no rescue within a quarter term of a lease found run out")
	}
	grant.Store(true)
	s.askLease() // the rescue's own ask went ungranted above
	select {
	case <-held:
	case <-time.After(term):
		t.Fatalf("the rescue did not end on the grant")
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("a rank whose lease ftrun still grants stopped after a stall (%d)", n)
	}
	if s.Rescuing() != nil {
		t.Errorf("still rescuing after the grant")
	}
	time.Sleep(2 * term)
	if n := lost.Load(); n != 0 {
		t.Errorf("a rank whose lease ftrun grants stopped (%d)", n)
	}
}

// A rank that finds its lease run out a quarter term or more ago (it woke
// from a longer stall) stops at once, without a rescue, though ftrun would
// still grant: ftrun may have told the others already.
func TestLeaseStopsAfterLongStall(t *testing.T) {
	const term = 200 * time.Millisecond
	var grant atomic.Bool
	grant.Store(true)
	s, lost := leaseSession(t, term, &grant)
	time.Sleep(term / 2)
	// As after a stall of over half a term past the lease's end: ftrun,
	// had it given the rank up, may have told the others by now.
	s.lmu.Lock()
	s.expiry = time.Now().Add(-term / 2)
	s.asked = map[uint64]time.Time{}
	s.lmu.Unlock()
	found := time.Now()
	rescued := false
	for lost.Load() == 0 && time.Since(found) < term {
		rescued = rescued || s.Rescuing() != nil && lost.Load() == 0 && time.Since(found) > term/10
		time.Sleep(time.Millisecond)
	}
	if rescued {
		t.Errorf("a rank past its rescue's end asked for a rescue")
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("lease lost %d times, want once", n)
	}
	// The next check (a twentieth of a term) stops it; no rescue's
	// quarter term is waited.
	if d := time.Since(found); d > term/5 {
		t.Errorf("stopped %v after its lease was past its rescue, want at the next check", d)
	}
}

// A rank cut off from ftrun stops by the end of its rescue, a quarter term
// after its lease ran out (a quarter term before ftrun may tell the
// others), holding new work back meanwhile.
func TestLeaseRescueEndsInTime(t *testing.T) {
	const term = 200 * time.Millisecond
	var grant atomic.Bool
	grant.Store(true)
	s, lost := leaseSession(t, term, &grant)
	time.Sleep(term / 2)
	grant.Store(false)
	s.lmu.Lock()
	expiry := s.expiry
	s.lmu.Unlock()
	var held <-chan struct{}
	for held == nil && time.Until(expiry) > -term/4 {
		time.Sleep(time.Millisecond)
		held = s.Rescuing()
	}
	if held == nil {
		t.Fatalf("no rescue after the lease ran out")
	}
	select {
	case <-held:
	case <-time.After(term):
		t.Fatalf("the rescue did not end")
	}
	at := time.Now()
	if n := lost.Load(); n != 1 {
		t.Fatalf("the rescue ended without a grant, lease lost %d times, want once (before the rescue's end was signalled)", n)
	}
	if late := at.Sub(rescueEnd(expiry, term)); late > term/10 {
		t.Errorf("stopped %v after the rescue's end", late)
	}
	if early := expiry.Sub(at); early > 0 {
		t.Errorf("stopped %v before the lease ran out", early)
	}
}

// A rank whose connection to ftrun breaks stops at once, long before its
// lease would run out: ftrun, seeing the connection close, counts it gone.
func TestLeaseLostWhenLinkBreaks(t *testing.T) {
	const term = time.Hour // only the broken link can end it within the test
	rank, launcher := net.Pipe()
	s := &Session{rank: 1, size: 2, conn: rank, term: term, stop: make(chan struct{}),
		asked: make(map[uint64]time.Time), expiry: time.Now().Add(term)}
	lost := make(chan struct{})
	s.OnLeaseLost(func() { close(lost) })
	s.watching.Add(1)
	go s.watch()
	t.Cleanup(func() { s.Close() })
	launcher.Close()
	select {
	case <-lost:
	case <-time.After(time.Minute):
		t.Fatal("the connection to ftrun broke and the rank did not stop")
	}
}

// Under ftrun --arbiter on an agent's host (a lease channel to the agent:
// Session.local) a broken connection to ftrun does not stop the rank; the
// agent's grants keep its lease, capped by the term each grant carries,
// and the rank stops once they stop.
func TestLeaseFromAgentOutlivesFtrun(t *testing.T) {
	const term = 100 * time.Millisecond
	rank, launcher := net.Pipe()
	local, agent := net.Pipe()
	s := &Session{rank: 1, size: 2, conn: rank, local: local, term: term, stop: make(chan struct{}),
		asked: make(map[uint64]time.Time), expiry: time.Now().Add(term)}
	lost := new(atomic.Int32)
	s.OnLeaseLost(func() { lost.Add(1) })
	var grant atomic.Bool
	grant.Store(true)
	go func() {
		for {
			typ, p, err := jobwire.ReadFrame(agent, jobwire.MaxSmallFrame)
			if err != nil {
				return
			}
			if typ == jobwire.MsgLeaseAsk && grant.Load() {
				seq, _ := jobwire.ParseLease(p)
				jobwire.WriteFrame(agent, jobwire.MsgLeaseGrant, jobwire.GrantPayload(seq, time.Hour)) // capped by term
			}
		}
	}()
	s.watching.Add(3)
	go s.watch()
	go s.watchLocal()
	go s.keepLease()
	t.Cleanup(func() { s.Close(); agent.Close() })
	launcher.Close()
	time.Sleep(6 * term)
	if n := lost.Load(); n != 0 {
		t.Fatalf("the rank stopped %d times with ftrun's channel broken while its agent granted", n)
	}
	s.lmu.Lock()
	left := time.Until(s.expiry)
	s.lmu.Unlock()
	if e := left; e > term {
		t.Errorf("the lease runs %v more, want at most the term %v", e, term)
	}
	grant.Store(false)
	for end := time.Now().Add(20 * term); lost.Load() == 0 && time.Now().Before(end); time.Sleep(term / 10) {
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("lease lost %d times after the agent's grants stopped, want 1", n)
	}
}

// Under ftrun --arbiter, ftrun's grants to the ranks of its own host carry
// a term, bounded by its host lease from the arbiter (jobwire.GrantPayload):
// the rank's lease runs that term from its ask, not its usual one.
func TestLeaseGrantFromFtrunCarriesTerm(t *testing.T) {
	const term = time.Second
	rank, launcher := net.Pipe()
	s := &Session{rank: 1, size: 2, conn: rank, term: term, stop: make(chan struct{}),
		asked: make(map[uint64]time.Time), expiry: time.Now()}
	granted := make(chan struct{}, 16)
	go func() {
		for {
			typ, p, err := jobwire.ReadFrame(launcher, jobwire.MaxSmallFrame)
			if err != nil {
				return
			}
			if typ == jobwire.MsgLeaseAsk {
				seq, _ := jobwire.ParseLease(p)
				jobwire.WriteFrame(launcher, jobwire.MsgLeaseGrant, jobwire.GrantPayload(seq, term/10))
				granted <- struct{}{}
			}
		}
	}()
	s.watching.Add(1)
	go s.watch()
	t.Cleanup(func() { s.Close(); launcher.Close() })
	s.askLease()
	<-granted
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.lmu.Lock()
		left := time.Until(s.expiry)
		s.lmu.Unlock()
		if left > 0 {
			if left > term/10 {
				t.Errorf("the lease runs %v more after a grant of %v", left, term/10)
			}
			return
		}
		if time.Now().After(end) {
			t.Fatal("the grant carrying a term did not extend the lease")
		}
	}
}
