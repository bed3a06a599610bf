package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// Two transactions of one rank, committing at once: A draws its number
// first, B after it. B decides and publishes one of its two keys; then A
// decides and the rank dies. When a transaction counted committed if its
// writer's decision key held its number or a later one, A's decision
// written after B's said B's number had not committed, and B came out half
// applied (its published key new, its pending one rolled back); decisions
// then had to go out in number order. Now a transaction is committed when
// its number is open in its writer's decision record (DESIGN.md F41), in
// whatever order they are decided: B runs ahead, and whatever the crash
// catches is all or nothing.
func TestTxDecisionsInAnyOrder(t *testing.T) {
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
			case <-time.After(time.Second): // B did not get there
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

// An attempt of a Commit that aborted and left its pending record behind
// (its clearing lost, as in DESIGN.md F37) must never count as committed,
// whatever its rank decides afterwards: its number is in no decision
// record. Under the rule before (a transaction committed when its writer's
// decision key held its number or a later one), the writer's next Commit,
// of another key, made the leftover record current at the next read.
func TestAbortedLeftoverIsNoCommit(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 4, smallOptions(3))
	writer := st[0]
	if err := writer.Put(ctx, []byte("a"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	// The leftover: a pending record of "a" under a number the writer
	// drew and never decided, with the key's locks given back.
	k := &txKeyState{id: writer.ident([]byte("a")), op: txOp{value: []byte("aborted")}, write: true}
	err := writer.inView(func(o *op) error {
		all, err := o.lockTx(ctx, []*txKeyState{k})
		if err != nil {
			return err
		}
		defer o.unlockAll(ctx, all)
		seq, err := o.drawTx(ctx)
		if err != nil {
			return err
		}
		return o.writePending(ctx, []*txKeyState{k}, all, txTag(seq, o.me))
	})
	if err != nil {
		t.Fatal(err)
	}
	tx := writer.Begin()
	tx.Put([]byte("b"), []byte("B"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for r, s := range st {
		if v, err := s.Get(ctx, []byte("a")); err != nil || string(v) != "old" {
			t.Errorf("rank %d reads a = %q, %v after the writer's later commit; want \"old\" (the leftover is no commit)", r, v, err)
		}
	}
	if v, err := st[1].Get(ctx, []byte("b")); err != nil || string(v) != "B" {
		t.Errorf("b = %q, %v; want \"B\"", v, err)
	}
}

// A rank's respawned process goes on with its predecessor's decision
// record (DESIGN.md §3.3, F41): the predecessor decided a transaction and
// died before publishing it, so its number must stay open — its pending
// records read as committed — and the new process must draw its numbers
// above its predecessor's reservation, never one the predecessor may have
// used. A new process that started afresh drew number 1 again and wrote a
// record without the old open number.
func TestRespawnedWriterGoesOnWithItsDecisions(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	defer stacksIfSlow(t, 60*time.Second)()
	const W = ftrma.Rank(1)
	w, st := openSpares(t, 4, 1, smallOptions(3))
	for _, k := range []string{"a", "b"} {
		if err := st[0].Put(ctx, []byte(k), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	var crashed sync.Once
	testHookCommit.set(t, func(s *Store, stage string) {
		if s == st[W] && stage == "decided" {
			crashed.Do(func() { w.Crash(W) })
			<-ctx.Done() // dies before it publishes
		}
	})
	go func() {
		tx := st[W].Begin()
		tx.Put([]byte("a"), []byte("new"))
		tx.Put([]byte("b"), []byte("new"))
		tx.Commit(ctx)
	}()
	for !st[0].current().c.ProcFailed(W) {
		if ctx.Err() != nil {
			t.Fatal("the writer's failure never became known")
		}
		time.Sleep(time.Millisecond)
	}
	testHookCommit.set(t, nil)
	nst, errs := replaceAndGrow(ctx, t, w, st, []ftrma.Rank{W})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d's Grow or Join: %v", r, err)
		}
	}
	tx := nst[W].Begin()
	tx.Put([]byte("c"), []byte("C"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if last := nst[W].tx.last; last <= txBlock {
		t.Errorf("the respawned process drew number %d, within its predecessor's reservation (1..%d)", last, txBlock)
	}
	var reserved uint64
	var open []uint64
	if err := nst[0].inView(func(o *op) (err error) { reserved, open, err = o.readDecisions(ctx, int(W)); return err }); err != nil {
		t.Fatal(err)
	}
	if reserved < 2*txBlock || !slices.Contains(open, 1) {
		t.Errorf("rank %d's decision record: reserved %d, open %v; want a second reservation and the predecessor's decided number 1 still open", W, reserved, open)
	}
	for _, k := range []string{"a", "b"} {
		if v, err := nst[2].Get(ctx, []byte(k)); err != nil || string(v) != "new" {
			t.Errorf("%s = %q, %v; want \"new\" (decided before its writer died)", k, v, err)
		}
	}
}
