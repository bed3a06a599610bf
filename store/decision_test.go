package store

import (
	"errors"
	"testing"
	"time"
)

// A Commit that would leave more than maxOpen numbers open in its writer's
// decision record (transactions decided and not yet known published
// everywhere) is refused with ErrFull before its commit point: nothing of
// it is visible, its keys are free for other writers, and once numbers
// leave the record (their transactions published) Commits go through
// again.
func TestTooManyOpenDecisionsIsFull(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	_, st := openAll(t, 3, smallOptions(2))
	writer, other := st[0], st[1]
	if err := writer.Put(ctx, []byte("k"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	// maxOpen transactions decided and not published yet, as a rank whose
	// Commits were cut short by failures would have them.
	if err := writer.decide.lock(ctx); err != nil {
		t.Fatal(err)
	}
	stuck := make([]uint64, maxOpen)
	for i := range stuck {
		stuck[i] = uint64(1<<30 + i)
	}
	writer.tx.open = append(writer.tx.open, stuck...)
	writer.decide.unlock()

	tx := writer.Begin()
	tx.Put([]byte("k"), []byte("new"))
	if err := tx.Commit(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("Commit with %d open decisions: %v, want ErrFull", maxOpen, err)
	}
	if v, err := other.Get(ctx, []byte("k")); err != nil || string(v) != "old" {
		t.Fatalf("after the refused Commit another rank reads %q, %v; want \"old\"", v, err)
	}
	if err := other.Put(ctx, []byte("k"), []byte("other")); err != nil {
		t.Fatalf("another rank's put of the refused Commit's key: %v", err)
	}

	for _, n := range stuck {
		(&op{Store: writer}).publishedTx(n)
	}
	tx = writer.Begin()
	tx.Put([]byte("k"), []byte("again"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit once the open decisions were published: %v", err)
	}
	if v, err := other.Get(ctx, []byte("k")); err != nil || string(v) != "again" {
		t.Fatalf("after the second Commit another rank reads %q, %v; want \"again\"", v, err)
	}
	if n := len(writer.tx.open); n > 1 {
		t.Errorf("%d numbers still open after the second Commit's record write; want at most its own", n)
	}
}
