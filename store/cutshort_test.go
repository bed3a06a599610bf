package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// markOp marks the context of the operation a test cuts short.
type markOp struct{}

// An operation of rank 0 is cut short right after it posted compare-and-
// swaps or a claim's words (testHookPosted), before it flushed them: Grow
// rebuilds the store's window under it (rebuilt), and or its context ends
// (gives up). Whatever it took — key locks, the claim lock, a key slot, a
// heap chunk — is let go, and a slot it claimed has its hash word (the
// scans of recovery and Grow go by it): once everything is quiet, rank 0
// holds nothing anywhere (takenBy), and no aborted commit left a pending
// record.
func TestCutShortLetsGo(t *testing.T) {
	big := make([]byte, 70<<10) // larger than a chunk: a chunk of its own
	put := func(key string, val []byte) func(context.Context, *Store) error {
		return func(ctx context.Context, s *Store) error { return s.Put(ctx, []byte(key), val) }
	}
	del := func(key string) func(context.Context, *Store) error {
		return func(ctx context.Context, s *Store) error { return s.Delete(ctx, []byte(key)) }
	}
	commit := func(key string, val []byte) func(context.Context, *Store) error {
		return func(ctx context.Context, s *Store) error {
			tx := s.Begin()
			if err := tx.Put([]byte(key), val); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
	}
	for _, c := range []struct {
		name    string
		at      string // testHookPosted's point
		rebuilt bool   // Grow rebuilds the window at the pause
		givesUp bool   // the operation's context ends at the pause
		op      func(context.Context, *Store) error
	}{
		{"lock/rebuilt/gives up", "lock", true, true, put("k1", []byte("new"))},
		{"lock/gives up", "lock", false, true, put("k1", []byte("new"))},
		{"claim lock/rebuilt/gives up", "claim lock", true, true, put("fresh", []byte("new"))},
		{"claim lock/gives up", "claim lock", false, true, put("fresh", []byte("new"))},
		{"claim/rebuilt", "claim", true, false, put("fresh", []byte("new"))},
		{"claim/gives up", "claim", false, true, put("fresh", []byte("new"))},
		{"claimed/rebuilt", "claimed", true, false, put("fresh", []byte("new"))},
		{"tombstone/rebuilt", "tombstone", true, false, del("k1")},
		{"tombstone/rebuilt/gives up", "tombstone", true, true, del("k1")},
		{"chunk/rebuilt/gives up", "chunk", true, true, put("fresh", big)},
		{"chunk/gives up", "chunk", false, true, put("fresh", big)},
		{"pending/rebuilt/gives up", "pending", true, true, commit("k1", []byte("new"))},
		{"pending/gives up", "pending", false, true, commit("k1", []byte("new"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			w, st := openSpares(t, 6, 1, smallOptions(3))
			want := putKeys(ctx, t, st, 60)
			if c.rebuilt {
				crashAndWait(ctx, t, w, st, 4)
			}
			w0 := st[0].current().w
			opCtx, cancel := context.WithCancel(context.WithValue(ctx, markOp{}, true))
			defer cancel()
			paused := make(chan struct{})
			var once sync.Once
			testHookPosted.set(t, func(octx context.Context, s *Store, at, _ string) {
				if octx.Value(markOp{}) == nil || at != c.at {
					return
				}
				once.Do(func() {
					close(paused)
					for c.rebuilt && s.current().w == w0 && ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					if c.givesUp {
						cancel()
					}
				})
			})
			var opErr atomic.Value
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := c.op(opCtx, st[0]); err != nil {
					opErr.Store(err)
				}
			}()
			select {
			case <-paused:
			case <-ctx.Done():
				t.Fatalf("the operation never reached %q", c.at)
			case <-done:
				select {
				case <-paused: // and then ended, cut short
				default:
					t.Fatalf("the operation ended (%v) without reaching %q", opErr.Load(), c.at)
				}
			}
			nst := st
			if c.rebuilt {
				var errs map[ftrma.Rank]error
				nst, errs = replaceAndGrow(ctx, t, w, st, []ftrma.Rank{4})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: grow: %v", r, err)
					}
				}
			}
			<-done
			if err, _ := opErr.Load().(error); err != nil && !(c.givesUp && errors.Is(err, context.Canceled)) {
				t.Errorf("operation: %v", err)
			}
			if t.Failed() {
				t.FailNow()
			}
			// Quiet: leases end after leaseIdle; what is still taken then
			// stays taken.
			var left []string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if left = takenBy(nst, 0); len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(left) > 0 {
				t.Fatalf("rank 0 still holds, 5 s after its operation ended:\n%s", strings.Join(left, "\n"))
			}
			// And the others can write what it touched.
			for _, k := range []string{"k1", "fresh"} {
				if err := nst[2].Put(ctx, []byte(k), []byte("after")); err != nil {
					t.Fatalf("rank 2: put %s: %v", k, err)
				}
			}
			for k, v := range want {
				if k == "k1" {
					v = "after"
				}
				if got, err := nst[3].Get(ctx, []byte(k)); err != nil || string(got) != v {
					t.Fatalf("rank 3: get %s: %q, %v; want %q; copies:\n%s", k, got, err, v, describeKey(ctx, nst, k))
				}
			}
		})
	}
}

// takenBy lists what rank me holds in the tables of the live stores st:
// slot locks and claim locks naming it, key slots without a hash word,
// pending records (any rank's: a pending record outlives no commit), and
// heap chunks it owns unsealed that are not the chunks its arenas fill.
func takenBy(st []*Store, me ftrma.Rank) []string {
	var out []string
	cv := st[me].current()
	filling := func(a *arena) int {
		if a.mu.lock(context.Background()) != nil {
			return -1
		}
		defer a.mu.unlock()
		if a.cur == nil {
			return -1
		}
		return a.cur.entry
	}
	for r, s := range st {
		if s == nil || cv.c.ProcFailed(ftrma.Rank(r)) {
			continue
		}
		if c := atomic.LoadUint64(&s.table[hdrClaim]); c == uint64(me)+1 {
			out = append(out, fmt.Sprintf("rank %d's claim lock", r))
		}
		for i := range s.opt.Slots {
			sw := s.table[hdrWords+i*slotWords:][:slotWords]
			lw, key, h := atomic.LoadUint64(&sw[slotLock]), atomic.LoadUint64(&sw[slotKey]), atomic.LoadUint64(&sw[slotHash])
			if lockOwner(lw) == int(me) {
				out = append(out, fmt.Sprintf("rank %d's slot %d: locked", r, i))
			}
			if key != 0 && key != slotTomb && h == 0 {
				out = append(out, fmt.Sprintf("rank %d's slot %d: a key without its hash word", r, i))
			}
			if pa := atomic.LoadUint64(&sw[slotPAddr]); pa != 0 {
				o := s.begin()
				ka, h := o.ownSlot(context.Background(), i)
				id, _ := o.ownKey(context.Background(), h, ka)
				o.end()
				out = append(out, fmt.Sprintf("rank %d's slot %d: a pending record at %#x (key %q, lock %x)", r, i, pa, id.key, lw))
			}
		}
		mine := map[int]bool{filling(cv.arenas[r]): true, filling(cv.keyArenas[r]): true}
		if ftrma.Rank(r) == me {
			mine[filling(&st[me].ownArena)] = true
		}
		for e := range int(s.heap.entries.Load()) {
			if o := s.entry(e, chunkOwner).Load(); o == uint64(me)+1 && !mine[e] {
				out = append(out, fmt.Sprintf("rank %d's chunk %d: owned, not filled, not sealed", r, e))
			}
		}
	}
	return out
}
