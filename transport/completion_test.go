package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// Await waits as Wait does but leaves the failures to Wait.
func TestCompletionAwaitLeavesFailures(t *testing.T) {
	var c Completion
	ctx := context.Background()
	s1, s2 := c.Next(), c.Next()
	boom := errors.New("boom")
	done := make(chan error, 1)
	go func() { done <- c.Await(ctx, s2) }()
	c.Complete(s1, boom)
	select {
	case err := <-done:
		t.Fatalf("Await returned %v before its sequence completed", err)
	case <-time.After(10 * time.Millisecond):
	}
	c.Complete(s2, nil)
	if err := <-done; err != nil {
		t.Fatalf("Await: %v, want nil (the failure is Wait's to report)", err)
	}
	if err := c.Await(ctx, s1); err != nil {
		t.Fatalf("Await of a completed sequence: %v", err)
	}
	if err := c.Wait(ctx, s2, 0); !errors.Is(err, boom) {
		t.Fatalf("Wait after Await: %v, want the failure", err)
	}
	if err := c.Wait(ctx, s2, 0); err != nil {
		t.Fatalf("second Wait: %v", err)
	}

	s3 := c.Next()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if err := c.Await(cctx, s3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await with an expired context: %v", err)
	}
	down := ErrPeerDown(1, nil)
	c.Fail(down)
	if err := c.Await(ctx, s3); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("Await toward a peer that is down: %v", err)
	}
}
