package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Two transactions of one rank, committing at once: A draws its number
// first, B after it. B decides and publishes one of its two keys; then A
// decides and the rank dies. A transaction counts committed when its
// writer's decision key holds its number or a later one, so the decision
// key must never go back: written A-after-B, it said B's number had not
// committed, and B came out half applied (its published key new, its
// pending one rolled back). Decisions now go out in number order: B cannot
// draw its number before A decided, and whatever the crash catches is all
// or nothing.
func TestTxDecisionsInNumberOrder(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 4, smallOptions(3))
	writer, reader := st[0], st[1]
	for _, k := range []string{"a", "b1", "b2"} {
		if err := writer.Put(ctx, []byte(k), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	pendings := 0
	aAtPending, bPublished := make(chan struct{}), make(chan struct{})
	var bOnce, crashed sync.Once
	testHookCommit.set(t, func(s *Store, stage string) {
		if s != writer {
			return
		}
		mu.Lock()
		first := stage == "pending" && pendings == 0
		if stage == "pending" {
			pendings++
		}
		mu.Unlock()
		switch {
		case first: // A, its number drawn: wait for B to get ahead
			close(aAtPending)
			select {
			case <-bPublished:
			case <-time.After(time.Second): // B cannot (decisions in order)
			}
		case stage == "published-one": // B
			bOnce.Do(func() { close(bPublished) })
			<-ctx.Done() // held until the rank dies; its result does not matter
		case stage == "decided" && pendingsAt(&mu, &pendings) >= 1:
			select {
			case <-bPublished: // A decided after B: the rank dies now
				crashed.Do(func() { w.Crash(s.me) })
			default:
			}
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		tx := writer.Begin()
		tx.Put([]byte("a"), []byte("A"))
		tx.Commit(ctx)
	})
	<-aAtPending
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tx := writer.Begin()
		tx.Put([]byte("b1"), []byte("B"))
		tx.Put([]byte("b2"), []byte("B"))
		tx.Commit(bctx)
	}()
	wg.Wait()
	// In order, A decided alone: the rank dies now, wherever B is.
	crashed.Do(func() { w.Crash(writer.me) })
	for !reader.current().c.ProcFailed(writer.me) {
		if ctx.Err() != nil {
			t.Fatal("the writer's failure never became known")
		}
		time.Sleep(time.Millisecond)
	}
	b1, err1 := reader.Get(ctx, []byte("b1"))
	b2, err2 := reader.Get(ctx, []byte("b2"))
	if err1 != nil || err2 != nil {
		t.Fatalf("get b1, b2: %v, %v", err1, err2)
	}
	if string(b1) != string(b2) {
		t.Fatalf("transaction B half applied after its writer died: b1 %q, b2 %q", b1, b2)
	}
	if a, err := reader.Get(ctx, []byte("a")); err != nil || string(a) != "A" {
		t.Fatalf("transaction A, decided: a = %q, %v; want \"A\"", a, err)
	}
}

func pendingsAt(mu *sync.Mutex, n *int) int {
	mu.Lock()
	defer mu.Unlock()
	return *n
}
