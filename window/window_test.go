package window_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
	"github.com/ftrma/ftrma/window/rmacheck"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run runs f on every rank of a fresh n-rank world, once over memnet and
// once over shared memory (goroutine ranks with real shared mappings), and
// fails the test with every rank's error.
func run(t *testing.T, n int, f func(ctx context.Context, c *comm.Comm) error) {
	t.Helper()
	for _, tr := range commtest.Worlds() {
		t.Run(tr.Name, func(t *testing.T) {
			w := tr.New(t, n)
			ctx := testCtx(t, time.Minute)
			for r, err := range w.Run(ctx, f) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// The foundation's acceptance counts, on goroutine ranks over memnet.
func TestCountersEightRanks(t *testing.T) {
	run(t, 8, func(ctx context.Context, c *comm.Comm) error {
		cas, fao, err := rmacheck.Counters(ctx, c, 2000)
		if err == nil && (cas != 16000 || fao != 16000) {
			err = fmt.Errorf("counters %d, %d", cas, fao)
		}
		return err
	})
}

func TestLockedCounterEightRanks(t *testing.T) {
	run(t, 8, func(ctx context.Context, c *comm.Comm) error {
		v, err := rmacheck.LockedCounter(ctx, c, 500)
		if err == nil && v != 4000 {
			err = fmt.Errorf("locked counter %d", v)
		}
		return err
	})
}

func TestPutFlushGetFromThirdRank(t *testing.T) {
	var sizes []int
	for s := 1; s <= 4<<20; s *= 2 {
		sizes = append(sizes, s, s+3)
	}
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		return rmacheck.PutGetThird(ctx, c, sizes)
	})
}

func TestSharedLocksCoexistExclusiveWaits(t *testing.T) {
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		switch c.Rank() {
		case 1, 2:
			if err := w.Lock(ctx, 0, window.Shared); err != nil {
				return err
			}
		}
		// Ranks 1 and 2 both hold a shared lock on rank 0 now: the barrier
		// proves it, since each took its lock before entering.
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 3 {
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := w.Lock(short, 0, window.Exclusive)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("exclusive lock while shared locks are held: %v, want DeadlineExceeded", err)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		switch c.Rank() {
		case 1, 2:
			if err := w.Unlock(ctx, 0); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 3 {
			if err := w.Lock(ctx, 0, window.Exclusive); err != nil {
				return fmt.Errorf("exclusive lock after the shared holders left: %v", err)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := w.Lock(short, 0, window.Shared)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("shared lock while an exclusive lock is held: %v, want DeadlineExceeded", err)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 3 {
			if err := w.Unlock(ctx, 0); err != nil {
				return err
			}
		}
		return w.Free(ctx)
	})
}

// Writers store whole 64-byte blocks of one repeated word with REPLACE
// accumulate while readers read them; every aligned word read must be one of
// the words written, never a mix.
func TestReplaceAccumulateNeverTorn(t *testing.T) {
	const block = 8
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8*block)
		if err != nil {
			return err
		}
		valid := func(v uint64) bool {
			b := byte(v)
			return v == 0 || v == 0x0101010101010101*uint64(b)
		}
		me := c.Rank()
		for i := range 300 {
			switch me {
			case 1, 2:
				val := make([]int64, block)
				for j := range val {
					val[j] = int64(0x0101010101010101 * uint64(byte(int(me)*50+i%40+1)))
				}
				if err := w.Accumulate(0, 0, val, window.Replace); err != nil {
					return err
				}
				if i%3 == 0 {
					raw := make([]byte, 8*block)
					for j := range block {
						binary.NativeEndian.PutUint64(raw[8*j:], uint64(val[j]))
					}
					if err := w.AccumulateBytes(0, 0, raw, window.Replace); err != nil {
						return err
					}
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
			case 3:
				got := make([]int64, block)
				if err := w.GetAccumulate(0, 0, make([]int64, block), got, window.NoOp); err != nil {
					return err
				}
				raw := make([]byte, 8*block)
				if err := w.Get(0, 0, raw); err != nil {
					return err
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
				for j := range block {
					if v := uint64(got[j]); !valid(v) {
						return fmt.Errorf("torn word %#x read by GetAccumulate NO_OP", v)
					}
					if v := binary.NativeEndian.Uint64(raw[8*j:]); !valid(v) && w.WholeWords() {
						return fmt.Errorf("torn word %#x read by Get", v)
					}
				}
			}
		}
		return w.Free(ctx)
	})
}

func TestDynamicWindowAttach(t *testing.T) {
	run(t, 4, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.CreateDynamic(ctx, c)
		if err != nil {
			return err
		}
		var mem []byte
		var addr [8]byte
		if c.Rank() == 0 {
			if mem, err = w.Alloc(64); err != nil {
				return err
			}
			a, err := w.Attach(mem)
			if err != nil {
				return err
			}
			binary.BigEndian.PutUint64(addr[:], a)
		}
		got, err := c.Bcast(ctx, 0, addr[:])
		if err != nil {
			return err
		}
		base := binary.BigEndian.Uint64(got)
		if c.Rank() != 0 {
			if err := w.PutSync(ctx, 0, base+8*uint64(c.Rank()), []byte(fmt.Sprintf("rank%d..", c.Rank()))); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			for r := 1; r < 4; r++ {
				if want := fmt.Sprintf("rank%d..", r); string(mem[8*r:8*r+7]) != want {
					return fmt.Errorf("attached memory at %d = %q, want %q", 8*r, mem[8*r:8*r+7], want)
				}
			}
			if err := w.Detach(base); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			// Beyond the attached buffer, and into a detached one.
			if err := w.PutSync(ctx, 0, base+1000, []byte{1}); !errors.Is(err, ftrma.ErrUnknownRegion) {
				return fmt.Errorf("put into detached memory: %v, want ErrUnknownRegion", err)
			}
		}
		return w.Free(ctx)
	})
}

func TestDynamicWindowBounds(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.CreateDynamic(ctx, c)
		if err != nil {
			return err
		}
		var addr [8]byte
		if c.Rank() == 0 {
			mem, err := w.Alloc(16)
			if err != nil {
				return err
			}
			a, err := w.Attach(mem)
			if err != nil {
				return err
			}
			binary.BigEndian.PutUint64(addr[:], a)
		}
		got, err := c.Bcast(ctx, 0, addr[:])
		if err != nil {
			return err
		}
		if c.Rank() == 1 {
			base := binary.BigEndian.Uint64(got)
			if err := w.PutSync(ctx, 0, base+12, make([]byte, 8)); !errors.Is(err, ftrma.ErrOutOfBounds) {
				return fmt.Errorf("put past the attached buffer: %v, want ErrOutOfBounds", err)
			}
			if err := w.PutSync(ctx, 0, base+8, make([]byte, 8)); err != nil {
				return fmt.Errorf("put at the end of the attached buffer: %v", err)
			}
		}
		return w.Free(ctx)
	})
}

func TestOperationSemantics(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 1 {
			res := make([]int64, 2)
			steps := []struct {
				name string
				do   func() error
				want []int64 // the target's words 0..1 afterwards
				old  []int64 // result, if checked
			}{
				{"accumulate sum", func() error { return w.Accumulate(0, 0, []int64{5, 7}, window.Sum) }, []int64{5, 7}, nil},
				{"get-accumulate sum", func() error { return w.GetAccumulate(0, 0, []int64{1, -2}, res, window.Sum) }, []int64{6, 5}, []int64{5, 7}},
				{"get-accumulate replace", func() error { return w.GetAccumulate(0, 0, []int64{100, 200}, res, window.Replace) }, []int64{100, 200}, []int64{6, 5}},
				{"get-accumulate no-op", func() error { return w.GetAccumulate(0, 0, []int64{9, 9}, res, window.NoOp) }, []int64{100, 200}, []int64{100, 200}},
				{"accumulate replace", func() error { return w.Accumulate(0, 0, []int64{-1, -3}, window.Replace) }, []int64{-1, -3}, nil},
				{"accumulate no-op", func() error { return w.Accumulate(0, 0, []int64{50, 50}, window.NoOp) }, []int64{-1, -3}, nil},
				{"fetch-and-op replace", func() error { return w.FetchAndOp(0, 8, 42, &res[1], window.Replace) }, []int64{-1, 42}, nil},
				{"compare-and-swap hit", func() error { return w.CompareAndSwap(0, 0, -1, 11, &res[0]) }, []int64{11, 42}, nil},
				{"compare-and-swap miss", func() error { return w.CompareAndSwap(0, 0, -1, 12, &res[0]) }, []int64{11, 42}, nil},
			}
			for _, s := range steps {
				if err := s.do(); err != nil {
					return fmt.Errorf("%s: %v", s.name, err)
				}
				if err := w.Flush(ctx, 0); err != nil {
					return fmt.Errorf("%s: flush: %v", s.name, err)
				}
				if s.old != nil && (res[0] != s.old[0] || res[1] != s.old[1]) {
					return fmt.Errorf("%s: result %v, want %v", s.name, res, s.old)
				}
				now := make([]int64, 2)
				if err := w.GetAccumulate(0, 0, make([]int64, 2), now, window.NoOp); err != nil {
					return err
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
				if now[0] != s.want[0] || now[1] != s.want[1] {
					return fmt.Errorf("%s: target holds %v, want %v", s.name, now, s.want)
				}
			}
			if res[0] != 11 {
				return fmt.Errorf("missed compare-and-swap returned %d, want 11", res[0])
			}
			// Request-based operations and PutSync.
			rp, err := w.Rput(0, 16, []byte("request"))
			if err != nil {
				return err
			}
			if err := rp.Wait(ctx); err != nil {
				return err
			}
			buf := make([]byte, 7)
			rg, err := w.Rget(0, 16, buf)
			if err != nil {
				return err
			}
			if err := rg.Wait(ctx); err != nil || string(buf) != "request" {
				return fmt.Errorf("rget after rput: %q, %v", buf, err)
			}
			if err := w.PutSync(ctx, 0, 32, []byte("sync")); err != nil {
				return err
			}
			swapped := make([]byte, 4)
			if err := w.GetAccumulateBytes(0, 32, []byte("next"), swapped, window.Replace); err != nil {
				return err
			}
			if err := w.Flush(ctx, 0); err != nil {
				return err
			}
			if string(swapped) != "sync" {
				return fmt.Errorf("get-accumulate bytes returned %q, want \"sync\"", swapped)
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 && !bytes.Equal(w.Bytes()[32:36], []byte("next")) {
			return fmt.Errorf("PutSync/GetAccumulateBytes left %q", w.Bytes()[32:36])
		}
		return w.Free(ctx)
	})
}

// Every bad input returns its documented error, and nothing panics.
func TestBadInput(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		if c.Rank() == 1 {
			var res int64
			buf := make([]byte, 8)
			cases := []struct {
				name string
				err  error
				want error
			}{
				{"put to rank -1", w.Put(-1, 0, buf), ftrma.ErrRankOutOfRange},
				{"put to rank 2", w.Put(2, 0, buf), ftrma.ErrRankOutOfRange},
				{"get from rank 7", w.Get(7, 0, buf), ftrma.ErrRankOutOfRange},
				{"flush rank 9", w.Flush(ctx, 9), ftrma.ErrRankOutOfRange},
				{"lock rank 9", w.Lock(ctx, 9, window.Shared), ftrma.ErrRankOutOfRange},
				{"put past the end", w.Put(0, 60, buf), ftrma.ErrOutOfBounds},
				{"get past the end", w.Get(0, 57, buf), ftrma.ErrOutOfBounds},
				{"put at a huge offset", w.Put(0, 1<<63, buf), ftrma.ErrOutOfBounds},
				{"accumulate past the end", w.Accumulate(0, 56, []int64{1, 2}, window.Sum), ftrma.ErrOutOfBounds},
				{"misaligned CAS", w.CompareAndSwap(0, 4, 0, 1, &res), ftrma.ErrMisaligned},
				{"misaligned fetch-and-op", w.FetchAndOp(0, 3, 1, &res, window.Sum), ftrma.ErrMisaligned},
				{"misaligned accumulate", w.Accumulate(0, 12, []int64{1}, window.Sum), ftrma.ErrMisaligned},
				{"unknown op", w.Accumulate(0, 0, []int64{1}, window.Op(99)), ftrma.ErrInvalid},
				{"sum on bytes", w.AccumulateBytes(0, 0, buf, window.Sum), ftrma.ErrInvalid},
				{"result of wrong length", w.GetAccumulate(0, 0, []int64{1}, nil, window.Sum), ftrma.ErrInvalid},
				{"attach to a static window", attachErr(w), ftrma.ErrInvalid},
				{"unlock without lock", w.Unlock(ctx, 0), ftrma.ErrNotLocked},
				{"bad lock type", w.Lock(ctx, 0, window.LockType(7)), ftrma.ErrInvalid},
			}
			for _, cs := range cases {
				if !errors.Is(cs.err, cs.want) {
					return fmt.Errorf("%s: got %v, want %v", cs.name, cs.err, cs.want)
				}
			}
			if err := w.Lock(ctx, 0, window.Exclusive); err != nil {
				return err
			}
			if err := w.Lock(ctx, 0, window.Shared); !errors.Is(err, ftrma.ErrLockHeld) {
				return fmt.Errorf("second lock: %v, want ErrLockHeld", err)
			}
			if err := w.Free(ctx); !errors.Is(err, ftrma.ErrLockHeld) {
				return fmt.Errorf("free with a lock held: %v, want ErrLockHeld", err)
			}
			if err := w.Unlock(ctx, 0); err != nil {
				return err
			}
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
		var res int64
		buf := make([]byte, 8)
		for name, err := range map[string]error{
			"put":          w.Put(0, 0, buf),
			"get":          w.Get(0, 0, buf),
			"cas":          w.CompareAndSwap(0, 0, 0, 1, &res),
			"fetch-and-op": w.FetchAndOp(0, 0, 1, &res, window.Sum),
			"accumulate":   w.Accumulate(0, 0, []int64{1}, window.Sum),
			"flush":        w.Flush(ctx, 0),
			"flush all":    w.FlushAll(ctx),
			"lock":         w.Lock(ctx, 0, window.Shared),
			"unlock":       w.Unlock(ctx, 0),
			"free":         w.Free(ctx),
			"attach":       attachErr(w),
		} {
			if !errors.Is(err, window.ErrFreed) || !errors.Is(err, ftrma.ErrClosed) {
				return fmt.Errorf("%s on a freed window: %v, want ErrFreed", name, err)
			}
		}
		return nil
	})
	w := commtest.New(t, 1)
	if _, err := window.Allocate(testCtx(t, 10*time.Second), w.Comms[0], -1); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("negative size: %v", err)
	}
}

func attachErr(w *window.Window) error {
	_, err := w.Attach(make([]byte, 8))
	return err
}

// Operations toward a crashed rank fail with ErrProcFailed and do not hang;
// operations toward live ranks keep working.
func TestCrashedTargetFails(t *testing.T) {
	world := commtest.New(t, 3)
	ctx := testCtx(t, time.Minute)
	wins := make([]*window.Window, 3)
	var wg sync.WaitGroup
	for r, c := range world.Comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := window.Allocate(ctx, c, 64)
			if err != nil {
				t.Error(err)
			}
			wins[r] = w
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	w := wins[0]
	if err := w.Lock(ctx, 2, window.Exclusive); err != nil {
		t.Fatal(err)
	}
	world.Net.Crash(2)
	var res int64
	if err := w.Put(2, 0, []byte{1}); err == nil {
		err = w.Flush(ctx, 2)
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("put+flush toward a crashed rank: %v", err)
		}
	}
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"flush", func() error { return w.Flush(ctx, 2) }},
		{"unlock", func() error { return w.Unlock(ctx, 2) }},
		{"lock", func() error { return w.Lock(ctx, 2, window.Shared) }},
		{"putsync", func() error { return w.PutSync(ctx, 2, 0, []byte{1}) }},
		{"cas", func() error {
			if err := w.CompareAndSwap(2, 0, 0, 1, &res); err != nil {
				return err
			}
			return w.Flush(ctx, 2)
		}},
	} {
		if err := c.f(); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("%s toward a crashed rank: %v, want ErrProcFailed", c.name, err)
		}
	}
	if err := w.PutSync(ctx, 1, 0, []byte{7}); err != nil {
		t.Fatalf("put toward a live rank after another crashed: %v", err)
	}
}

// Lock code waits for its own atomics after its context ended as long as the
// runtime may take to declare an unresponsive target (the communicator's
// VerdictBound), not a number of its own.
func TestSettleWaitIsTheVerdictBound(t *testing.T) {
	world := commtest.New(t, 2)
	ctx := testCtx(t, 10*time.Second)
	for _, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		defer w.Free(ctx)
		if got, want := w.SettleWait(), c.VerdictBound(); got != want {
			return fmt.Errorf("settle wait %v, want the verdict bound %v", got, want)
		}
		return nil
	}) {
		if err != nil {
			t.Error(err)
		}
	}
}
