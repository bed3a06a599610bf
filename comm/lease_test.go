package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/transport/memnet"
)

// fakeLease is a lease being rescued until release.
type fakeLease struct {
	held chan struct{}
	term time.Duration
}

func (f *fakeLease) LeaseTerm() time.Duration { return f.term }

func (f *fakeLease) Rescuing() <-chan struct{} {
	select {
	case <-f.held:
		return nil
	default:
		return f.held
	}
}

// While this rank's lease is being rescued, a new collective or agreement
// waits (or ends with its context) and starts once the rescue ends.
func TestCollectivesWaitForLeaseRescue(t *testing.T) {
	net := memnet.New(2)
	defer net.Close()
	var cs [2]*Comm
	for r := range cs {
		c, err := New(net.Endpoint(ftrma.Rank(r)), Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[r] = c
	}
	lease := &fakeLease{held: make(chan struct{})}
	cs[0].rt.lease = lease
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := cs[0].Barrier(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("barrier while the lease is rescued: %v, want the context's end", err)
	}
	if _, err := cs[0].Agree(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("agree while the lease is rescued: %v, want the context's end", err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() { _, err := cs[0].Bcast(ctx, 0, []byte("x")); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("bcast started during the rescue: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(lease.held)
	if err := <-done; err != nil {
		t.Fatalf("bcast after the rescue: %v", err)
	}
	if got, err := cs[1].Bcast(ctx, 0, nil); err != nil || string(got) != "x" {
		t.Fatalf("bcast at rank 1: %q, %v", got, err)
	}
}

// VerdictBound is the job's chain of failure bounds with this rank's
// detector timeout and lease term; without a lease, the detector's alone.
func TestVerdictBound(t *testing.T) {
	net := memnet.New(1)
	defer net.Close()
	c, err := New(net.Endpoint(0), Config{Detector: failure.Config{Timeout: 240 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := c.VerdictBound(), (failure.Chain{Detector: 240 * time.Millisecond}).Verdict(); got != want {
		t.Errorf("without a lease: %v, want %v", got, want)
	}
	c.rt.lease = &fakeLease{held: make(chan struct{}), term: 4 * time.Second}
	if got, want := c.VerdictBound(), (failure.Chain{Detector: 240 * time.Millisecond, Lease: 4 * time.Second}).Verdict(); got != want {
		t.Errorf("with a 4 s lease: %v, want %v", got, want)
	}
	// Under the arbiter its verdict bound is the host path when longer.
	c.rt.lease = &arbiterLease{fakeLease{held: make(chan struct{}), term: time.Second}, 7 * time.Second}
	if got, want := c.VerdictBound(), 7*time.Second+(failure.Chain{Lease: time.Second}).Notice(); got != want {
		t.Errorf("with the arbiter's 7 s bound: %v, want %v", got, want)
	}
}

// arbiterLease is a lease from an agent under the replicated arbiter,
// whose verdict bound on a silent host is bound.
type arbiterLease struct {
	fakeLease
	bound time.Duration
}

func (a *arbiterLease) HostVerdictBound() time.Duration { return a.bound }
