package comm_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
)

// wantSplit is the reference of Split: for each rank, the world ranks of its
// new communicator in order (nil for a negative color).
func wantSplit(colors, keys []int) [][]ftrma.Rank {
	out := make([][]ftrma.Rank, len(colors))
	for r, col := range colors {
		if col < 0 {
			continue
		}
		var g []int
		for q := range colors {
			if colors[q] == col {
				g = append(g, q)
			}
		}
		slices.SortStableFunc(g, func(a, b int) int { return cmp.Or(cmp.Compare(keys[a], keys[b]), cmp.Compare(a, b)) })
		for _, q := range g {
			out[r] = append(out[r], ftrma.Rank(q))
		}
	}
	return out
}

// Split groups ranks by color, orders them by key and then by old rank,
// gives a rank of negative color nil, and gives each group its own context
// id, the same at all its ranks; the new communicators work (Allgather
// sees exactly the group, in order).
func TestSplitColorsAndKeys(t *testing.T) {
	const n = 9
	colors := []int{2, 0, 2, 1, comm.Undefined, 0, 2, 1, -7}
	keys := []int{5, 1, -3, 0, 0, 1, 5, 9, 0} // ties: ranks 1 and 5 (key 1), 0 and 6 (key 5)
	want := wantSplit(colors, keys)
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	ids := make([]uint32, n)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		r := c.Rank()
		sc, err := c.Split(ctx, colors[r], keys[r])
		if err != nil {
			return err
		}
		if want[r] == nil {
			if sc != nil {
				return fmt.Errorf("color %d: got a communicator of %d ranks, want nil", colors[r], sc.Size())
			}
			return c.Barrier(ctx)
		}
		if sc == nil {
			return errors.New("nil communicator for a defined color")
		}
		var got []ftrma.Rank
		for q := range sc.Size() {
			got = append(got, sc.TransportRank(ftrma.Rank(q)))
		}
		if !slices.Equal(got, want[r]) {
			return fmt.Errorf("members %v, want %v", got, want[r])
		}
		if sc.TransportRank(sc.Rank()) != r {
			return fmt.Errorf("my new rank %d maps to %d", sc.Rank(), sc.TransportRank(sc.Rank()))
		}
		if sc.ContextID() == c.ContextID() {
			return errors.New("split kept the parent's context id")
		}
		ids[r] = sc.ContextID()
		all, err := sc.Allgather(ctx, []byte(fmt.Sprint(r)))
		if err != nil {
			return err
		}
		for q, b := range all {
			if string(b) != fmt.Sprint(want[r][q]) {
				return fmt.Errorf("allgather on the split: [%d] = %s, want %d", q, b, want[r][q])
			}
		}
		return c.Barrier(ctx)
	})
	checkAll(t, errs)
	for r := range n {
		for q := range n {
			if want[r] == nil || want[q] == nil {
				continue
			}
			same := colors[r] == colors[q]
			if same != (ids[r] == ids[q]) {
				t.Errorf("ranks %d (color %d) and %d (color %d): context ids %d and %d", r, colors[r], q, colors[q], ids[r], ids[q])
			}
		}
	}
}

// A duplicate is independent of its parent: a revocation of the dup does
// not revoke the parent, the parent's collectives and a further Dup still
// work, and the dup has a context id of its own.
func TestDupIndependence(t *testing.T) {
	const n = 5
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		d, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		if d.Size() != c.Size() || d.Rank() != c.Rank() || d.ContextID() == c.ContextID() {
			return fmt.Errorf("dup: rank %d of %d, id %d; parent rank %d of %d, id %d", d.Rank(), d.Size(), d.ContextID(), c.Rank(), c.Size(), c.ContextID())
		}
		if err := d.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 3 {
			d.Revoke()
		}
		select {
		case <-d.Revoked():
		case <-ctx.Done():
			return errors.New("the dup's revocation never arrived")
		}
		if err := d.Barrier(ctx); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("barrier on the revoked dup: %v, want ErrRevoked", err)
		}
		if c.IsRevoked() {
			return errors.New("revoking the dup revoked the parent")
		}
		sum, err := comm.Allreduce(ctx, c, []int64{int64(c.Rank())}, comm.Sum)
		if err != nil {
			return fmt.Errorf("allreduce on the parent: %v", err)
		}
		if sum[0] != n*(n-1)/2 {
			return fmt.Errorf("allreduce on the parent: %d", sum[0])
		}
		// A Dup of the revoked dup fails everywhere; one of the parent works.
		if _, err := d.Dup(ctx); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("dup of a revoked communicator: %v, want ErrRevoked", err)
		}
		d2, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		if d2.ContextID() == d.ContextID() || d2.ContextID() == c.ContextID() {
			return fmt.Errorf("second dup reuses context id %d", d2.ContextID())
		}
		return d2.Barrier(ctx)
	})
	checkAll(t, errs)
}

// outcome is what one rank's Split or Dup gave.
type outcome struct {
	ok   bool
	err  error
	size int
}

// sameOutcome fails the test unless every listed rank got an error
// wrapping ftrma.ErrProcFailed, or every one got a communicator of the
// same size.
func sameOutcome(t *testing.T, outs []outcome, ranks []ftrma.Rank) {
	t.Helper()
	first := outs[ranks[0]]
	for _, r := range ranks {
		o := outs[r]
		if o.ok != first.ok || o.size != first.size {
			t.Fatalf("rank %d: ok %v size %d (%v), rank %d: ok %v size %d (%v)", r, o.ok, o.size, o.err, ranks[0], first.ok, first.size, first.err)
		}
		if !o.ok && !errors.Is(o.err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d: %v, want ErrProcFailed", r, o.err)
		}
	}
}

// A rank dead before Split makes Split fail with ErrProcFailed at every
// survivor, and so does one that dies during it, at any moment: the
// survivors never hang and never disagree on the outcome. After Shrink,
// Split works again.
func TestSplitWithDeadRank(t *testing.T) {
	const n = 6
	for i, delay := range []time.Duration{-1, 0, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			w := commtest.New(t, n)
			ctx := testCtx(t, time.Minute)
			const victim = 4
			if delay < 0 {
				w.Net.Crash(victim)
			} else {
				go func() {
					time.Sleep(delay)
					w.Net.Crash(victim)
				}()
			}
			outs := make([]outcome, n)
			survivors := []ftrma.Rank{0, 1, 2, 3, 5}
			ranks := survivors
			if delay >= 0 {
				ranks = append(slices.Clone(survivors), victim)
			}
			errs := w.RunRanks(ctx, ranks, func(ctx context.Context, c *comm.Comm) error {
				if c.Rank() == victim {
					// Crashed at some point of its Split, which may then
					// wait for ever: its own context ends it.
					vctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					defer cancel()
					c.Split(vctx, 0, 0)
					return nil
				}
				sc, err := c.Split(ctx, int(c.Rank())%2, 0)
				outs[c.Rank()] = outcome{ok: err == nil, err: err}
				if err == nil {
					outs[c.Rank()].size = sc.Size()
				}
				// Whatever happened, the survivors recover together.
				s, err := c.Shrink(ctx)
				if err != nil {
					return err
				}
				sc, err = s.Split(ctx, int(s.Rank())%2, 0)
				if err != nil {
					return fmt.Errorf("split after shrink: %v", err)
				}
				return sc.Barrier(ctx)
			})
			for _, r := range survivors {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
			}
			sameOutcome(t, outs, survivors)
			t.Logf("crash after %v: split ok %v (%v)", delay, outs[0].ok, outs[0].err)
			if delay < 0 && outs[0].ok {
				t.Fatal("split with a rank dead before it succeeded")
			}
		})
	}
}

// A Dup over a communicator with a dead rank fails at every survivor.
func TestDupWithDeadRank(t *testing.T) {
	const n = 4
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	w.Net.Crash(2)
	outs := make([]outcome, n)
	survivors := []ftrma.Rank{0, 1, 3}
	errs := w.RunRanks(ctx, survivors, func(ctx context.Context, c *comm.Comm) error {
		d, err := c.Dup(ctx)
		outs[c.Rank()] = outcome{ok: err == nil, err: err}
		if d != nil {
			outs[c.Rank()].size = d.Size()
		}
		return nil
	})
	checkAll(t, errs)
	sameOutcome(t, outs, survivors)
	if outs[0].ok {
		t.Fatal("dup with a dead rank succeeded")
	}
}

// forceIDs makes the first `forced` candidates of every new communicator's
// context id equal to id, until the test ends.
func forceIDs(t *testing.T, forced int, id func(kind string, group int64) uint32) {
	restore := comm.SetIDHash(func(parent uint32, kind string, inst uint64, group int64, j int) uint32 {
		if j < forced {
			return id(kind, group)
		}
		return comm.IDHash(parent, kind, inst, group, j)
	})
	t.Cleanup(restore)
}

// When the derived id of a new communicator is taken — here by a live
// communicator of only some ranks (one color of a Split) — every rank
// picks the same next candidate: the communicators keep apart (a
// revocation of one leaves the other alone) and both work. Without the
// check the new communicator would take over the live one's id at ranks 0
// and 1.
func TestContextIDCollisionAtSomeRanks(t *testing.T) {
	const n = 4
	const x = 0xC0111DE
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	var mu sync.Mutex
	ids := map[string][]uint32{}
	note := func(what string, r ftrma.Rank, id uint32) {
		mu.Lock()
		defer mu.Unlock()
		if ids[what] == nil {
			ids[what] = make([]uint32, n)
		}
		ids[what][r] = id
	}
	// Color 0's communicator gets x.
	forceIDs(t, 1, func(kind string, group int64) uint32 { return x + uint32(group) })
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		sc, err := c.Split(ctx, int(c.Rank())/2, 0)
		if err != nil {
			return err
		}
		note("split", c.Rank(), sc.ContextID())
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// Candidate 0 of the world's Dup and Shrink is x: live at ranks 0
		// and 1 only.
		d, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		note("dup", c.Rank(), d.ContextID())
		s, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		note("shrink", c.Rank(), s.ContextID())
		if c.Rank() == 0 {
			d.Revoke()
		}
		select {
		case <-d.Revoked():
		case <-ctx.Done():
			return errors.New("the dup's revocation never arrived")
		}
		if sc.IsRevoked() || s.IsRevoked() {
			return errors.New("revoking the dup revoked the split or the shrunk communicator")
		}
		sum, err := comm.Allreduce(ctx, sc, []int64{int64(c.Rank())}, comm.Sum)
		if err != nil {
			return err
		}
		if want := []int64{1, 5}[c.Rank()/2]; sum[0] != want {
			return fmt.Errorf("allreduce on the split: %d, want %d", sum[0], want)
		}
		return s.Barrier(ctx)
	})
	checkAll(t, errs)
	if t.Failed() {
		return
	}
	if got := ids["split"]; got[0] != x || got[2] != x+1 {
		t.Fatalf("split ids %v, want candidate 0 (%d, %d): nothing was taken", got, x, x+1)
	}
	for _, what := range []string{"dup", "shrink"} {
		got := ids[what]
		for r := range n {
			if got[r] != got[0] {
				t.Fatalf("%s ids differ between ranks: %v", what, got)
			}
		}
		if got[0] == x || got[0] == x+1 {
			t.Fatalf("%s took context id %d, live at some ranks", what, got[0])
		}
	}
	if ids["dup"][0] == ids["shrink"][0] {
		t.Fatalf("dup and shrink share context id %d", ids["dup"][0])
	}
}

// Groups of one Split never share an id, even when their derived ids are
// equal: when no candidate of the first batch gives them different ids, the
// ranks agree on a second batch. A Dup of one group then takes the first
// candidate again, free for it.
func TestContextIDCollisionWholeBatch(t *testing.T) {
	const n = 4
	const x = 0xBADC0DE
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	ids := make([][2]uint32, n)
	// Every candidate of the first batch gives both colors the same id.
	restore := comm.SetIDHash(func(parent uint32, kind string, inst uint64, group int64, j int) uint32 {
		if j < comm.IDCandidates {
			return x
		}
		return comm.IDHash(parent, kind, inst, group, j)
	})
	t.Cleanup(restore)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		sc, err := c.Split(ctx, int(c.Rank())%2, 0)
		if err != nil {
			return err
		}
		ids[c.Rank()][0] = sc.ContextID()
		d, err := sc.Dup(ctx)
		if err != nil {
			return err
		}
		ids[c.Rank()][1] = d.ContextID()
		return d.Barrier(ctx)
	})
	checkAll(t, errs)
	if t.Failed() {
		return
	}
	if ids[0][0] == ids[1][0] {
		t.Fatalf("both colors got context id %d", ids[0][0])
	}
	for r := range n {
		if ids[r][0] != ids[r%2][0] || ids[r][1] != ids[r%2][1] {
			t.Fatalf("rank %d: ids %v, rank %d: %v", r, ids[r], r%2, ids[r%2])
		}
		if ids[r][0] == x {
			t.Fatalf("rank %d: split id %d: the first batch's candidate, shared by both colors", r, x)
		}
		if ids[r][1] != x {
			t.Fatalf("rank %d: dup id %d, want %d: the first batch's candidate, free for a single group", r, ids[r][1], x)
		}
	}
}

// Windows work on a Split communicator, and a failure in one color's
// communicator does not disturb the other color: its collectives and its
// window go on, while the stricken color's collectives fail with
// ErrProcFailed.
func TestWindowOnSplitIsolatesFailure(t *testing.T) {
	const n = 6
	const victim = 3 // color 1: ranks 1, 3, 5
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	passed := make(chan struct{}, 2) // color 1's survivors passed the first barrier
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		color := int(c.Rank()) % 2
		sc, err := c.Split(ctx, color, 0)
		if err != nil {
			return err
		}
		win, err := window.Allocate(ctx, sc, 8*sc.Size())
		if err != nil {
			return fmt.Errorf("allocate on the split: %v", err)
		}
		// Every rank writes its world rank into slot r of its right
		// neighbour's window.
		next := (sc.Rank() + 1) % ftrma.Rank(sc.Size())
		var b [8]byte
		b[7] = byte(c.Rank())
		if err := win.PutSync(ctx, next, uint64(8*sc.Rank()), b[:]); err != nil {
			return err
		}
		if err := sc.Barrier(ctx); err != nil {
			return err
		}
		prev := (sc.Rank() + ftrma.Rank(sc.Size()) - 1) % ftrma.Rank(sc.Size())
		if got := win.Bytes()[8*prev+7]; got != byte(sc.TransportRank(prev)) {
			return fmt.Errorf("slot %d holds %d, want %d", prev, got, sc.TransportRank(prev))
		}
		if color == 1 {
			if c.Rank() == victim {
				// Crash once the others passed the barrier: a crash drops
				// what is in flight, its contribution to it too.
				for range 2 {
					select {
					case <-passed:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				w.Net.Crash(victim)
				return nil
			}
			passed <- struct{}{}
			// The victim never contributes: whatever waits for it fails.
			if err := sc.Barrier(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
				return fmt.Errorf("barrier in the stricken color: %v, want ErrProcFailed", err)
			}
			if _, err := comm.Allreduce(ctx, sc, []int64{1}, comm.Sum); !errors.Is(err, ftrma.ErrProcFailed) {
				return fmt.Errorf("allreduce in the stricken color: %v, want ErrProcFailed", err)
			}
			return nil
		}
		for round := range 20 {
			sum, err := comm.Allreduce(ctx, sc, []int64{int64(c.Rank())}, comm.Sum)
			if err != nil {
				return fmt.Errorf("round %d: allreduce in the healthy color: %v", round, err)
			}
			if sum[0] != 0+2+4 {
				return fmt.Errorf("allreduce in the healthy color: %d", sum[0])
			}
			if err := win.PutSync(ctx, next, uint64(8*sc.Rank()), b[:]); err != nil {
				return fmt.Errorf("round %d: put in the healthy color: %v", round, err)
			}
		}
		// Wait until the failure is known here, then go on once more.
		for {
			changed := c.FailuresChanged()
			if c.ProcFailed(victim) {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return errors.New("the victim's failure never became known")
			}
		}
		if _, err := comm.Allreduce(ctx, sc, []int64{1}, comm.Sum); err != nil {
			return fmt.Errorf("allreduce in the healthy color after the failure is known: %v", err)
		}
		if err := sc.Barrier(ctx); err != nil {
			return err
		}
		return win.Free(ctx)
	})
	checkAll(t, errs)
}

// On every transport, a window built on each color of a Split reaches the
// members of its color only, at their own ranks: a rank reads back what its
// left neighbour in the color wrote, and the colors' windows are apart.
func TestWindowOnSplitEveryWorld(t *testing.T) {
	const n = 5
	for _, mk := range commtest.Worlds() {
		t.Run(mk.Name, func(t *testing.T) {
			w := mk.New(t, n)
			ctx := testCtx(t, time.Minute)
			errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
				color := int(c.Rank()) % 2
				// Keys reverse the order within a color.
				sc, err := c.Split(ctx, color, -int(c.Rank()))
				if err != nil {
					return err
				}
				win, err := window.Allocate(ctx, sc, 8)
				if err != nil {
					return fmt.Errorf("allocate on the split: %v", err)
				}
				next := (sc.Rank() + 1) % ftrma.Rank(sc.Size())
				b := []byte{byte(color), byte(c.Rank()), 0, 0, 0, 0, 0, 0}
				if err := win.PutSync(ctx, next, 0, b); err != nil {
					return err
				}
				if err := sc.Barrier(ctx); err != nil {
					return err
				}
				prev := (sc.Rank() + ftrma.Rank(sc.Size()) - 1) % ftrma.Rank(sc.Size())
				want := []byte{byte(color), byte(sc.TransportRank(prev)), 0, 0, 0, 0, 0, 0}
				if got := win.Bytes()[:8]; !slices.Equal(got, want) {
					return fmt.Errorf("window holds %v, want %v", got, want)
				}
				if err := win.Free(ctx); err != nil {
					return err
				}
				return c.Barrier(ctx)
			})
			checkAll(t, errs)
		})
	}
}

// When every rank gives Undefined, every rank gets nil and no error, and the
// communicator goes on (a Split of one color then gives back the whole
// group, in key order).
func TestSplitAllUndefined(t *testing.T) {
	const n = 4
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		sc, err := c.Split(ctx, comm.Undefined, 0)
		if err != nil || sc != nil {
			return fmt.Errorf("all undefined: %v, %v; want nil, nil", sc, err)
		}
		sc, err = c.Split(ctx, 7, n-int(c.Rank()))
		if err != nil {
			return err
		}
		if sc.Size() != n || sc.Rank() != ftrma.Rank(n-1)-c.Rank() {
			return fmt.Errorf("one color, reversed keys: rank %d of %d", sc.Rank(), sc.Size())
		}
		return sc.Barrier(ctx)
	})
	checkAll(t, errs)
}

// A closed communicator's id is not given to the next one while the
// runtime remembers it closed (late messages or a late revocation of the
// old one must not reach the new one): the first Dup gets x and is closed;
// the second Dup, whose first candidate is x again, gets another id.
func TestContextIDOfClosedCommNotReused(t *testing.T) {
	const n = 3
	const x = 0xC105ED
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	forceIDs(t, 1, func(string, int64) uint32 { return x })
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		d1, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		if d1.ContextID() != x {
			return fmt.Errorf("first Dup: id %#x, want the forced %#x", d1.ContextID(), x)
		}
		if err := d1.Close(); err != nil {
			return err
		}
		d2, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		if d2.ContextID() == x {
			return fmt.Errorf("second Dup reused the closed communicator's id %#x", x)
		}
		return d2.Barrier(ctx)
	})
	checkAll(t, errs)
}
