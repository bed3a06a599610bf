package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm/commtest"
)

// An attempt of lockAll whose posting stops at a failed replica tries none
// of the replicas after it, and must neither count them held nor give them
// back: their result words are the last attempt's, whose locks it gave back
// already, and another rank may hold them now (F30: a writer's unlockAll
// released a committing transaction's lock that way, and a repair then
// dropped its pending record while it decided).
func TestLockAllAttemptThatStopsEarlyGivesBackNothing(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 3, smallOptions(3))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	id := st[0].ident([]byte("k"))
	st[0].endLease(id)
	st[0].current().w.FlushAll(ctx)
	o := st[0].begin()
	defer o.end()
	reps, err := o.replicas(ctx, id, true)
	if err != nil || len(reps) != 3 {
		t.Fatalf("replicas: %d, %v; want 3", len(reps), err)
	}

	// Rank 2 fails; its replica goes first, so posting stops there. The
	// others carry what an earlier attempt left: a compare-and-swap that
	// found the lock free and took it (given back since).
	crashAndWait(ctx, t, w, st, 2)
	var order []*replica
	for _, p := range reps {
		if p.r == 2 {
			order = append([]*replica{p}, order...)
		} else {
			order = append(order, p)
		}
	}
	var held *replica // rank 1's replica: rank 1 holds its lock now
	for _, p := range order[1:] {
		p.expect = lockWord(3, -1)
		p.res, p.done = int64(p.expect), true
		if p.r == 1 {
			held = p
		}
	}
	lockAddr := held.addr + slotLock*8
	setWord(ctx, t, st[0], 1, lockAddr, lockWord(3, 1))

	if err := o.lockAll(ctx, id, order); !errors.Is(err, errRetry) && !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("lockAll with a failed first replica: %v, want a retry", err)
	}
	for _, p := range order[1:] {
		if p.held {
			t.Errorf("rank %d's replica counts held though its lock was not tried", p.r)
		}
	}
	var got [8]byte
	if err := o.v().w.Get(1, lockAddr, got[:]); err != nil {
		t.Fatal(err)
	}
	if err := o.v().w.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if lw := binary.NativeEndian.Uint64(got[:]); lw != lockWord(3, 1) {
		t.Fatalf("rank 1's lock word is %#x after the attempt, want %#x: the attempt gave back a lock rank 1 holds", lw, lockWord(3, 1))
	}
}

// A deletion whose window Grow rebuilt before its tombstones went out
// posts nothing: the slots keep naming the key, so the key's blocks must
// stay counted live. Before, the tombstone's Puts failed while the frees of
// the key block and the record fell back to the current window and landed:
// the chunk, counted empty, was handed out again, and the slot that still
// named the key block then named whatever key was written there next (F32:
// explorer seed 2287 found a rank holding one key in two slots).
func TestTombstoneThroughARebuiltWindowFreesNothing(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openSpares(t, 3, 1, smallOptions(3))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	id := st[0].ident([]byte("k"))
	st[0].endLease(id)
	st[0].current().w.FlushAll(ctx)

	o := st[0].begin() // an operation of the view before the Grow
	ended := false
	defer func() {
		if !ended {
			o.end()
		}
	}()
	reps, _, err := o.acquire(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	var own *replica
	for _, p := range reps {
		if p.r == 0 {
			own = p
		}
	}
	if own == nil {
		t.Fatal("rank 0 holds no copy of the key")
	}
	keyBlock, rec := own.word(slotKey), own.word(slotCurAddr)
	live := func(addr uint64) uint64 {
		e, ok := o.chunkOf(ctx, 0, addr)
		if !ok {
			t.Fatalf("no chunk of block %#x", addr)
		}
		return st[0].entry(e, chunkLive).Load()
	}
	keyLive, recLive := live(keyBlock), live(rec)

	// Rank 2 fails; the survivors' Respawn rebuilds the window (then waits
	// for this operation to end before it goes on).
	defer rebuildUnder(ctx, t, w, st, o, 2)()

	o.tombstone(ctx, id, reps, newest(reps)+1)
	st[0].current().w.FlushAll(ctx) // what went through the current window is there
	if !own.failed {
		t.Error("the replica whose tombstone could not be posted does not count failed: the deletion would not be made again")
	}
	if got := atomic.LoadUint64(&st[0].table[hdrWords+own.slot*slotWords+slotKey]); got != keyBlock {
		t.Fatalf("the slot's key word is %#x, want %#x: a tombstone landed through a rebuilt window", got, keyBlock)
	}
	if got := live(keyBlock); got != keyLive {
		t.Errorf("the key block's chunk counts %d live bytes, %d before: the key block was freed while its slot names it", got, keyLive)
	}
	if got := live(rec); got != recLive {
		t.Errorf("the record's chunk counts %d live bytes, %d before: the record was freed while its slot names it", got, recLive)
	}
	o.end()
	ended = true
}

// rebuildUnder crashes the victim and respawns it in the background
// (respawnInBackground), and returns once the window of o, an operation of
// the view before, is rebuilt: the Grow then waits for o to end. The
// function it returns waits for the respawn.
func rebuildUnder(ctx context.Context, t *testing.T, w *commtest.World, st []*Store, o *op, victim ftrma.Rank) (wait func()) {
	t.Helper()
	wait = respawnInBackground(ctx, t, w, st, victim)
	for !o.v().w.IsRebuilt() {
		select {
		case <-ctx.Done():
			t.Fatal("the window was never rebuilt")
		case <-time.After(time.Millisecond):
		}
	}
	return wait
}

// respawnInBackground crashes the victim and respawns it: the survivors'
// Respawn and the spare's JoinRespawned run in the background, and the
// function it returns waits for them. The new store is stopped when the
// test ends.
func respawnInBackground(ctx context.Context, t *testing.T, w *commtest.World, st []*Store, victim ftrma.Rank) (wait func()) {
	t.Helper()
	crashAndWait(ctx, t, w, st, victim)
	nst := slices.Clone(st)
	nst[victim] = nil
	var wg sync.WaitGroup
	t.Cleanup(func() {
		wg.Wait()
		stopAll(nst)
	})
	for r, s := range st {
		if ftrma.Rank(r) == victim {
			continue
		}
		wg.Go(func() {
			if _, _, err := Respawn(ctx, s, w.Comms[r]); err != nil {
				t.Errorf("rank %d: respawn: %v", r, err)
			}
		})
	}
	wg.Go(func() {
		select {
		case j := <-w.Joined():
			if j.Err != nil {
				t.Errorf("spare: %v", j.Err)
				return
			}
			s, _, err := JoinRespawned(ctx, j.Comm, Config{})
			if err != nil {
				t.Errorf("spare: join: %v", err)
				return
			}
			nst[victim] = s
		case <-ctx.Done():
			t.Error("no spare joined")
		}
	})
	return wg.Wait
}

// An operation whose context ended while its compare-and-swaps were under
// way learns their results by a flush that ignores the context (completed).
// When Grow rebuilt the window between the two, that flush must go through
// the current window: the compare-and-swaps went to the transport, and one
// that took a lock must be known, or the lock stays with a live rank that
// thinks it has none (F33: explorer seed 2970 with transactions, a key
// locked for good by a commit whose context ended).
func TestCompletedAfterTheContextEndedAndTheWindowWasRebuilt(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openSpares(t, 3, 1, smallOptions(3))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	o := st[0].begin()
	ended := false
	defer func() {
		if !ended {
			o.end()
		}
	}()
	var res int64
	tables := o.v().tables[1]
	if err := o.v().w.CompareAndSwap(1, tables+hdrFloor*8, 0, 0, &res); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	cancel()               // the operation's context ends before its flush
	o.v().w.Flush(octx, 1) // fails with the context's end, or is done: either way completed must say done
	defer rebuildUnder(ctx, t, w, st, o, 2)()
	if !o.completed(octx, 1, octx.Err()) {
		t.Error("completed: false; the compare-and-swap went out before the window was rebuilt, and a flush through the current window completes it")
	}
	o.end()
	ended = true
}

// A claim whose compare-and-swap took, but whose flush then failed (its
// context ended), cannot undo itself when a deletion made the slot a
// tombstone meanwhile: the slot was the key's for everyone as soon as it
// took, and the deletion freed its key block. The claim must then leave the
// block alone. Before, it freed it a second time: its chunk counted a live
// block's bytes free, was handed out again while a slot named a block in
// it, and a rank ended with a key in two slots and a deletion undone (F34:
// explorer seed 7407 with transactions).
func TestClaimCutShortAfterADeletionFreesNothing(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 3, smallOptions(1))
	var key []byte
	var r ftrma.Rank
	for i := 0; r == 0; i++ { // a key placed away from the claimer
		key = fmt.Appendf(nil, "k%d", i)
		r = st[0].current().replicas(st[0].ident(key).h, func(ftrma.Rank) bool { return false })[0]
	}

	// The key once written and deleted by rank 0: rank 0 knows rank r's
	// chunk table then (a free needs it, and its context ends below).
	if err := st[0].Put(ctx, key, []byte("v0")); err != nil {
		t.Fatal(err)
	}
	if err := st[0].Delete(ctx, key); err != nil {
		t.Fatal(err)
	}

	var live1 uint64
	entry := -1
	var once sync.Once
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	testHookPosted.set(t, func(_ context.Context, s *Store, point, k string) {
		if s != st[0] || point != "claim" || k != string(key) {
			return
		}
		once.Do(func() {
			// The claim's compare-and-swap lands at r, its answer is held
			// up; a deletion from rank 1 makes the slot a tombstone; then
			// the claimer's context ends, before the answer arrives.
			c := st[0].current().keyArenas[r].cur
			entry = c.entry
			block := c.addr + c.next - uint64(keyBlockLen(len(key)))
			for landed := false; !landed; {
				for i := range st[r].opt.Slots {
					landed = landed || atomic.LoadUint64(&st[r].table[hdrWords+i*slotWords+slotKey]) == block
				}
				select {
				case <-ctx.Done():
					t.Error("the claim never landed")
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
			live1 = st[r].entry(entry, chunkLive).Load()
			if err := st[1].Delete(ctx, key); err != nil {
				t.Errorf("deletion of the key being claimed: %v", err)
			}
			cancel()
		})
	})
	w.Net.Delay(r, 0, 50*time.Millisecond)
	err := st[0].Put(cctx, key, []byte("v"))
	w.Net.Delay(r, 0, 0)
	if err == nil {
		t.Fatal("the put whose context ended during its claim succeeded")
	}
	if entry < 0 {
		t.Fatal("the claim's hook never ran")
	}
	if err := st[0].current().w.Flush(ctx, r); err != nil { // what the claim posted last is there
		t.Fatal(err)
	}
	// The deletion freed the key block; nothing else of the chunk changed.
	want := live1 - uint64(keyBlockLen(len(key)))
	if got := st[r].entry(entry, chunkLive).Load(); got != want {
		t.Fatalf("the claimer's key chunk at rank %d counts %d live bytes, want %d (%d before the deletion): the key block was freed twice", r, got, want, live1)
	}
}

// A deletion whose writer dies after its tombstones landed and before it
// released their locks leaves tombstone slots locked by a failed rank:
// recovery gives those locks back (F23's second half), since a tombstone
// guards nothing, rather than leave them for the next claimer to take over.
func TestTombstoneOfAFailedDeleterIsUnlocked(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 3, smallOptions(3))
	if err := st[0].Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	st[0].endLease(st[0].ident([]byte("k")))
	st[0].current().w.FlushAll(ctx)
	var once sync.Once
	testHookPosted.set(t, func(_ context.Context, s *Store, point, key string) {
		if s != st[1] || point != "tombstone" || key != "k" {
			return
		}
		once.Do(func() {
			s.current().w.FlushAll(ctx) // the tombstones land, the releases never go out
			w.Crash(1)
		})
	})
	if err := st[1].Delete(ctx, []byte("k")); err == nil {
		t.Fatal("a deletion whose rank crashed in the middle succeeded")
	}
	heldBy1 := func(s *Store) (tombs, held int) {
		for i := range s.opt.Slots {
			base := hdrWords + i*slotWords
			if atomic.LoadUint64(&s.table[base+slotKey]) != slotTomb {
				continue
			}
			tombs++
			if lockOwner(atomic.LoadUint64(&s.table[base+slotLock])) == 1 {
				held++
			}
		}
		return tombs, held
	}
	// Recovery runs once the crash is known, within a housekeeping tick;
	// 10 s is far beyond that.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, r := range []int{0, 2} {
		for {
			tombs, held := heldBy1(st[r])
			if tombs == 0 {
				t.Fatalf("rank %d has no tombstone: the deletion's tombstones did not land", r)
			}
			if held == 0 {
				break
			}
			select {
			case <-wctx.Done():
				t.Fatalf("rank %d: %d tombstone slots still locked by crashed rank 1", r, held)
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// A transaction's fate, for a writer that died while its decision write
// was on the way, must read the same to every rank that asks: a decision
// that landed at one replica and not at the key's primary is settled by
// the first full read (which repairs the replicas), so a fast read at the
// primary must not answer first. Before, a reader's fast read said "not
// committed" and dropped the pending record at one key, while a later full
// read repaired the decision and made the record current at the other: a
// transaction half applied (F35: explorer seed 2110, rarely).
func TestDecisionOfADeadWriterReadsTheSameToAll(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	w, st := openAll(t, 3, smallOptions(3))
	for _, s := range st { // a fixed hash key: the placement below is the same every run
		s.sip = sipKey{k0: 7, k1: 11}
	}
	// A writer whose decision key it places last: the key's primary is the
	// same rank whether or not the writer's failure is known yet.
	writer := ftrma.Rank(-1)
	for r := range ftrma.Rank(3) {
		order := st[0].current().replicas(st[0].ident(txKey(int(r))).h, func(ftrma.Rank) bool { return false })
		if order[2] == r {
			writer = r
			break
		}
	}
	if writer < 0 {
		t.Fatal("no rank is last in its decision key's placement under this hash key: pick another")
	}
	id := st[0].ident(txKey(int(writer)))
	if err := st[writer].write(ctx, id, encodeDecisions(txBlock, []uint64{1}), false); err != nil { // as decideTx writes it
		t.Fatal(err)
	}
	st[writer].endLease(id)
	st[writer].current().w.FlushAll(ctx)
	// After the writer fails, the key's primary is the first other rank in
	// its placement; the decision for transaction 2 reaches the other
	// replica at once and the primary never (the writer dies first).
	var order []ftrma.Rank
	for _, r := range st[0].current().replicas(id.h, func(ftrma.Rank) bool { return false }) {
		if r != writer {
			order = append(order, r)
		}
	}
	primary, other := order[0], order[1]
	o := st[other].peek()
	sl, _, err := o.probe(ctx, other, id)
	if err != nil || sl.idx < 0 {
		t.Fatalf("no slot of the decision key at rank %d: %v", other, err)
	}
	verAt := func() uint64 {
		return atomic.LoadUint64(&st[other].table[hdrWords+sl.idx*slotWords+slotCurVer])
	}
	before := verAt()
	var armed atomic.Bool
	armed.Store(true)
	testHookPublish.set(t, func(s *Store, _ []*replica, i int) {
		if s == st[writer] && i == 0 && armed.Swap(false) {
			w.Net.Delay(writer, primary, time.Hour) // from the publish on: its locks are taken
		}
	})
	go st[writer].write(ctx, id, encodeDecisions(txBlock, []uint64{1, 2}), false) // its flush never returns: the writer crashes
	for verAt() == before {
		select {
		case <-ctx.Done():
			t.Fatal("the decision never reached the other replica")
		case <-time.After(100 * time.Microsecond):
		}
	}
	w.Crash(writer) // the primary asks at once, before recovery repairs the key

	tag := txTag(2, writer)
	first, err := st[primary].txCommitted(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	// A full read of the key (a reader's repair, or recovery's check)
	// settles what the replicas hold.
	if err := st[other].inView(func(o *op) error { _, _, err := o.getAll(ctx, id); return err }); err != nil {
		t.Fatal(err)
	}
	second, err := st[other].txCommitted(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("transaction 2 of the dead writer read committed=%v first (at the primary, rank %d), then committed=%v (rank %d)", first, primary, second, other)
	}
}
