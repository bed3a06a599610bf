package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// Done numbers operations that are complete already, from several goroutines
// at once: every sequence handed out is complete, each failure has a number
// of its own, an operation's number covers every failure its goroutine saw
// numbered before it, and every failure is reported once, by the first Wait
// or Flush covering it.
func TestCompletionImmediate(t *testing.T) {
	var c Completion
	c.SetImmediate()
	ctx := context.Background()
	const workers, each = 4, 500
	var wg sync.WaitGroup
	seqs := make([][]Seq, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				if i%100 == 7 {
					err = fmt.Errorf("op %d of worker %d", i, w)
				}
				seq := c.Done(err)
				seqs[w] = append(seqs[w], seq)
				if c.Completed() < seq {
					t.Errorf("sequence %d not complete once numbered", seq)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[Seq]bool{}
	for w, s := range seqs {
		last := Seq(0)
		for i, q := range s {
			if q < last {
				t.Fatalf("worker %d: operation %d numbered %d, below the %d of an earlier one", w, i, q, last)
			}
			last = q
			if i%100 != 7 {
				continue
			}
			if seen[q] {
				t.Fatalf("failure numbered %d twice", q)
			}
			seen[q] = true
		}
	}
	if failures := workers * each / 100; len(seen) != failures || c.Posted() != Seq(failures) {
		t.Fatalf("%d distinct failure numbers, posted %d, want %d", len(seen), c.Posted(), failures)
	}
	err := c.Wait(ctx, seqs[0][each/2], 0)
	err2 := c.Flush(ctx, 0)
	var n int
	for _, e := range []error{err, err2} {
		if e != nil {
			n += strings.Count(e.Error(), "op ")
		}
	}
	if n != workers*each/100 {
		t.Fatalf("%d failures reported (%v; %v), want %d", n, err, err2, workers*each/100)
	}
	if err := c.Flush(ctx, 0); err != nil {
		t.Fatalf("a failure reported twice: %v", err)
	}
}

// Test never blocks: it is false while a sequence is outstanding, then true
// with the failures of the sequences up to it (once: a second Test or Wait
// finds them taken), and true with the peer-down error for a sequence that
// can no longer complete.
func TestCompletionTest(t *testing.T) {
	var c Completion
	s1, s2, s3 := c.Next(), c.Next(), c.Next()
	if done, err := c.Test(s1); done || err != nil {
		t.Fatalf("Test of an outstanding sequence: %v, %v; want false, nil", done, err)
	}
	boom := errors.New("boom")
	c.Complete(s1, boom)
	if done, err := c.Test(s2); done || err != nil {
		t.Fatalf("Test of s2 with only s1 complete: %v, %v; want false, nil", done, err)
	}
	c.Complete(s2, nil)
	if done, err := c.Test(s2); !done || !errors.Is(err, boom) {
		t.Fatalf("Test of s2 once complete: %v, %v; want true and s1's failure", done, err)
	}
	if done, err := c.Test(s2); !done || err != nil {
		t.Fatalf("second Test of s2: %v, %v; want true, nil (the failure was taken)", done, err)
	}
	down := ErrPeerDown(1, nil)
	c.Fail(down)
	if done, err := c.Test(s3); !done || !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("Test of s3 toward a peer that is down: %v, %v; want true, ErrProcFailed", done, err)
	}
}
