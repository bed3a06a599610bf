package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

func TestTxGet(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(st[0].Put(ctx, []byte("k"), []byte("1")))

		// Its own writes, then the store's values.
		tx := st[1].Begin()
		must(tx.Put([]byte("j"), []byte("mine")))
		if v, err := tx.Get(ctx, []byte("j")); err != nil || string(v) != "mine" {
			t.Fatalf("read of its own write: %q %v", v, err)
		}
		if v, err := tx.Get(ctx, []byte("k")); err != nil || string(v) != "1" {
			t.Fatalf("read: %q %v", v, err)
		}
		if _, err := tx.Get(ctx, []byte("absent")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("read of an absent key: %v", err)
		}
		must(tx.Commit(ctx))
		if v, err := st[2].Get(ctx, []byte("j")); err != nil || string(v) != "mine" {
			t.Fatalf("after commit: %q %v", v, err)
		}

		// A key read, then changed by another rank: the commit conflicts and
		// writes nothing.
		for _, change := range []func() error{
			func() error { return st[3].Put(ctx, []byte("k"), []byte("2")) },
			func() error { return st[3].Delete(ctx, []byte("k")) },
			func() error { return st[3].Put(ctx, []byte("absent"), []byte("now")) },
		} {
			tx := st[1].Begin()
			tx.Get(ctx, []byte("k"))
			tx.Get(ctx, []byte("absent"))
			must(tx.Put([]byte("out"), []byte("x")))
			must(change())
			if err := tx.Commit(ctx); !errors.Is(err, ErrConflict) {
				t.Fatalf("commit after a read key changed: %v, want ErrConflict", err)
			}
			if _, err := st[0].Get(ctx, []byte("out")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a conflicting transaction's write is visible: %v", err)
			}
			st[3].Delete(ctx, []byte("absent"))
			st[3].Put(ctx, []byte("k"), []byte("1"))
		}
	})
}

// Transfers between accounts by transactions from every rank, retried on
// conflict, keep the total; read-only transactions that commit see it too.
func TestTxSerializableTransfers(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, 2*time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		const accounts, start = 5, 100
		acct := func(i int) []byte { return fmt.Appendf(nil, "acct/%d", i) }
		for i := range accounts {
			if err := st[0].Put(ctx, acct(i), []byte(strconv.Itoa(start))); err != nil {
				t.Fatal(err)
			}
		}
		balance := func(tx *Tx, i int) (int, error) {
			v, err := tx.Get(ctx, acct(i))
			if err != nil {
				return 0, err
			}
			return strconv.Atoi(string(v))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		var mu sync.Mutex
		conflicts, audits := 0, 0
		for r, s := range st {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), 7))
				for done := 0; done < 10; {
					tx := s.Begin()
					if rng.IntN(4) == 0 { // an audit
						sum := 0
						for i := range accounts {
							b, err := balance(tx, i)
							if errors.Is(err, ErrConflict) {
								break
							}
							if err != nil {
								errs <- err
								return
							}
							sum += b
						}
						err := tx.Commit(ctx)
						if err == nil && sum != accounts*start {
							errs <- fmt.Errorf("a committed audit saw a total of %d", sum)
							return
						}
						mu.Lock()
						audits++
						mu.Unlock()
						continue
					}
					from, to := rng.IntN(accounts), rng.IntN(accounts-1)
					if to >= from {
						to++
					}
					a, err1 := balance(tx, from)
					b, err2 := balance(tx, to)
					if err := errors.Join(err1, err2); err != nil {
						errs <- err
						return
					}
					amt := rng.IntN(10)
					tx.Put(acct(from), []byte(strconv.Itoa(a-amt)))
					tx.Put(acct(to), []byte(strconv.Itoa(b+amt)))
					switch err := tx.Commit(ctx); {
					case err == nil:
						done++
					case errors.Is(err, ErrConflict):
						mu.Lock()
						conflicts++
						mu.Unlock()
					default:
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sum := 0
		for i := range accounts {
			v, err := st[i%4].Get(ctx, acct(i))
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(string(v))
			sum += n
		}
		t.Logf("40 transfers, %d conflicts, %d audits", conflicts, audits)
		if sum != accounts*start {
			t.Fatalf("total %d after the transfers, want %d", sum, accounts*start)
		}
	})
}

// A transaction that takes over the locks of a key its rank holds a lease
// on (here only to read it) ends the lease: the lease's expiry must never
// free locks that another rank holds by then.
func TestTxEndsTheLeaseItTakesOver(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 3, smallOptions(3))
		k := []byte("k")
		if err := st[0].Put(ctx, k, []byte("1")); err != nil { // rank 0 leases k
			t.Fatal(err)
		}
		tx := st[0].Begin()
		if _, err := tx.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		checked := false
		testHookCommit.set(t, func(s *Store, stage string) {
			if s != st[1] || stage != "pending" {
				return
			}
			// Rank 1 holds k's locks; rank 0's housekeeping expires what
			// leases it has.
			id := st[0].ident(k)
			if st[0].keys.tryLock(id) {
				st[0].endLease(id)
				st[0].keys.unlock(id)
			}
			st[0].current().w.FlushAll(ctx)
			for r, idx := range st[1].slotsOf(k) {
				var w [8]byte
				st[2].current().w.Get(ftrma.Rank(r), st[2].peek().slotAddr(ftrma.Rank(r), idx)+slotLock*8, w[:])
				if err := st[2].current().w.Flush(ctx, ftrma.Rank(r)); err != nil {
					t.Error(err)
				}
				if owner := lockOwner(word(w[:], 0)); owner != 1 {
					t.Errorf("rank %d's lock of k names %d while rank 1 commits", r, owner)
				}
				checked = true
			}
		})
		tx = st[1].Begin()
		tx.Put(k, []byte("2"))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		testHookCommit.clear()
		if !checked {
			t.Fatal("no lock word was checked")
		}
	})
}
