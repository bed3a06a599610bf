package window_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/window"
)

// regTransport counts one rank's registrations: a region deregistered twice,
// or never registered, is an error, and live lists those not deregistered.
type regTransport struct {
	transport.Transport
	mu   sync.Mutex
	live map[transport.Key]bool
	errs []error
}

func (t *regTransport) Register(mem []byte) (transport.Key, error) {
	k, err := t.Transport.Register(mem)
	if err == nil {
		t.mu.Lock()
		t.live[k] = true
		t.mu.Unlock()
	}
	return k, err
}

func (t *regTransport) Deregister(k transport.Key) error {
	t.mu.Lock()
	if !t.live[k] {
		t.errs = append(t.errs, fmt.Errorf("region %d deregistered while not registered", k))
	}
	delete(t.live, k)
	t.mu.Unlock()
	return t.Transport.Deregister(k)
}

// check reports a double or unknown deregistration, or a region still
// registered.
func (t *regTransport) check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.live) > 0 {
		t.errs = append(t.errs, fmt.Errorf("%d region(s) still registered", len(t.live)))
	}
	return errors.Join(t.errs...)
}

// regComm is a communicator whose windows register through a regTransport.
type regComm struct {
	*comm.Comm
	t *regTransport
}

func (c regComm) Transport() transport.Transport { return c.t }

// rebuildWorld runs setup on every rank of an n-rank memnet world with one
// spare, crashes rank victim, has the survivors Replace the communicator
// (the spare starts and takes victim's number), and runs after on every rank
// of the new communicator: survivors with their window from setup, the spare
// with nil. Windows register through a regTransport per rank, checked (no
// double deregistration, nothing left registered) once after has returned
// everywhere. It fails the test with every rank's error.
func rebuildWorld(t *testing.T, n int, victim ftrma.Rank,
	setup func(ctx context.Context, c window.Comm) (*window.Window, error),
	after func(ctx context.Context, nc window.Comm, old *window.Window) error) {
	t.Helper()
	rebuildWorldCrash(t, n, victim, setup, nil, after)
}

// rebuildWorldCrash is rebuildWorld calling beforeCrash, when not nil, with
// the world and the windows of setup just before the crash.
func rebuildWorldCrash(t *testing.T, n int, victim ftrma.Rank,
	setup func(ctx context.Context, c window.Comm) (*window.Window, error),
	beforeCrash func(world *commtest.World, wins []*window.Window) error,
	after func(ctx context.Context, nc window.Comm, old *window.Window) error) {
	t.Helper()
	world := commtest.NewSpares(t, n, 1)
	ctx := testCtx(t, time.Minute)
	regs := make([]*regTransport, n+1)
	wrap := func(c *comm.Comm, r ftrma.Rank) regComm {
		return regComm{Comm: c, t: regs[r]}
	}
	for r := range n + 1 {
		regs[r] = &regTransport{Transport: world.Net.Endpoint(ftrma.Rank(r)), live: make(map[transport.Key]bool)}
	}
	wins := make([]*window.Window, n)
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := setup(ctx, wrap(c, c.Rank()))
		wins[c.Rank()] = w
		return err
	}) {
		if err != nil {
			t.Fatalf("setup, rank %d: %v", r, err)
		}
	}
	if beforeCrash != nil {
		if err := beforeCrash(world, wins); err != nil {
			t.Fatal(err)
		}
	}
	world.Crash(victim)
	comms := world.Comms[:n]
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		if ftrma.Rank(r) == victim {
			continue
		}
		wg.Go(func() {
			nc, err := c.Replace(ctx)
			if err == nil {
				err = after(ctx, wrap(nc, ftrma.Rank(r)), wins[r])
			}
			errs[r] = err
		})
	}
	wg.Go(func() {
		select {
		case j := <-world.Joined():
			errs[victim] = j.Err
			if j.Err == nil {
				errs[victim] = after(ctx, wrap(j.Comm, j.Rank), nil)
			}
		case <-ctx.Done():
			errs[victim] = fmt.Errorf("no spare joined: %w", ctx.Err())
		}
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for r, reg := range regs {
		if ftrma.Rank(r) == victim {
			continue // crashed holding its window
		}
		if err := reg.check(); err != nil {
			t.Errorf("rank %d's registrations: %v", r, err)
		}
	}
}

// pattern is rank r's memory content in the rebuild tests.
func pattern(r ftrma.Rank, n int) []byte {
	return bytes.Repeat([]byte{byte(0x10 + r)}, n)
}

// getAll reads size(rank) bytes at disp of every rank's window w and checks
// each against want(rank).
func getAll(ctx context.Context, w *window.Window, disp uint64, size func(ftrma.Rank) int, want func(ftrma.Rank) []byte) error {
	for q := range ftrma.Rank(w.Size()) {
		buf := make([]byte, size(q))
		if err := w.Get(q, disp, buf); err != nil {
			return fmt.Errorf("get from rank %d: %w", q, err)
		}
		if err := w.Flush(ctx, q); err != nil {
			return fmt.Errorf("flush rank %d: %w", q, err)
		}
		if !bytes.Equal(buf, want(q)) {
			return fmt.Errorf("rank %d holds %x, want %x", q, buf, want(q))
		}
	}
	return nil
}

// A dynamic window rebuilt over the communicator of a Replace: survivors'
// regions attached before stay attached at the same addresses, and every
// rank, the spare included, reads them through the new window; the spare
// attaches a region that every survivor reads; a
// survivor detaches through the new window; the old window returns
// ErrRebuilt; freeing the old window first and then the new one releases
// every region once.
func TestRebuildDynamic(t *testing.T) {
	const n, size, victim = 4, 64, 2
	addrs := make([]uint64, n)
	bufs := make([][]byte, n+1)
	rebuildWorld(t, n, victim, func(ctx context.Context, c window.Comm) (*window.Window, error) {
		w, err := window.CreateDynamic(ctx, c)
		if err != nil {
			return nil, err
		}
		buf, err := w.Alloc(size)
		if err != nil {
			return nil, err
		}
		copy(buf, pattern(c.Rank(), size))
		bufs[c.Rank()] = buf
		addr, err := w.Attach(buf)
		if err != nil {
			return nil, err
		}
		all, err := c.Allgather(ctx, binary.BigEndian.AppendUint64(nil, addr))
		if err != nil {
			return nil, err
		}
		if c.Rank() == 0 {
			for r, b := range all {
				addrs[r] = binary.BigEndian.Uint64(b)
			}
		}
		return w, c.Barrier(ctx)
	}, func(ctx context.Context, nc window.Comm, old *window.Window) error {
		w, err := window.Rebuild(ctx, nc, old, func([]byte) { panic("init called for a dynamic window") })
		if err != nil {
			return err
		}
		me := nc.Rank()
		if old == nil && w.Bytes() != nil {
			return errors.New("a dynamic window has Bytes")
		}
		// Every survivor's region, at the address it had.
		for q := range ftrma.Rank(n) {
			if q == victim {
				continue
			}
			buf := make([]byte, size)
			if err := w.Get(q, addrs[q], buf); err != nil {
				return err
			}
			if err := w.Flush(ctx, q); err != nil {
				return fmt.Errorf("read rank %d's old region: %w", q, err)
			}
			if !bytes.Equal(buf, pattern(q, size)) {
				return fmt.Errorf("rank %d's region holds %x, want its pattern", q, buf)
			}
		}
		// The spare attaches; everyone reads it.
		var mine []byte
		if old == nil {
			buf, err := w.Alloc(size)
			if err != nil {
				return err
			}
			copy(buf, "attached by the replacement")
			bufs[n] = buf
			addr, err := w.Attach(buf)
			if err != nil {
				return err
			}
			mine = binary.BigEndian.AppendUint64(nil, addr)
		}
		all, err := nc.Allgather(ctx, mine)
		if err != nil {
			return err
		}
		got := make([]byte, len("attached by the replacement"))
		if err := w.Get(victim, binary.BigEndian.Uint64(all[victim]), got); err != nil {
			return err
		}
		if err := w.Flush(ctx, victim); err != nil {
			return err
		}
		if string(got) != "attached by the replacement" {
			return fmt.Errorf("the replacement's region holds %q", got)
		}
		if old != nil {
			if err := old.Put(me, addrs[me], []byte{1}); !errors.Is(err, window.ErrRebuilt) || !errors.Is(err, window.ErrFreed) {
				return fmt.Errorf("put on the old window: %v, want ErrRebuilt", err)
			}
			if _, err := old.Attach(make([]byte, 8)); !errors.Is(err, window.ErrRebuilt) {
				return fmt.Errorf("attach on the old window: %v, want ErrRebuilt", err)
			}
			if err := old.Free(ctx); err != nil {
				return fmt.Errorf("free of the old window: %w", err)
			}
			if err := old.Free(ctx); !errors.Is(err, window.ErrRebuilt) {
				return fmt.Errorf("second free of the old window: %v, want ErrRebuilt", err)
			}
		}
		// Freeing old released nothing the new window uses.
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		for q := range ftrma.Rank(n) {
			if q == victim {
				continue
			}
			buf := make([]byte, size)
			if err := w.Get(q, addrs[q], buf); err != nil {
				return err
			}
			if err := w.Flush(ctx, q); err != nil {
				return fmt.Errorf("read rank %d's region after the old window's Free: %w", q, err)
			}
		}
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		if me == 0 {
			if err := w.Detach(addrs[me]); err != nil {
				return fmt.Errorf("detach through the new window: %w", err)
			}
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
		if old == nil {
			return w.Release(bufs[n])
		}
		return w.Release(bufs[me])
	})
}

// An Allocate window rebuilt over the communicator of a Replace, with and
// without init. Rank r's window has 64+8r bytes. Survivors keep their memory
// (the same memory: Bytes is the old Bytes) and its content; the spare gets
// the failed rank's size, zeroed or as init wrote it, and every rank reads
// every rank's content through the new window. The old window's Bytes is
// nil, its operations return ErrRebuilt, and freeing both windows releases
// every region once.
func TestRebuildAllocate(t *testing.T) {
	const n, victim = 4, 2
	size := func(r ftrma.Rank) int { return 64 + 8*int(r) }
	for _, withInit := range []bool{false, true} {
		t.Run(fmt.Sprintf("init=%v", withInit), func(t *testing.T) {
			var init func([]byte)
			want := func(r ftrma.Rank) []byte {
				if r != victim {
					return pattern(r, size(r))
				}
				if withInit {
					return bytes.Repeat([]byte("init"), size(r)/4)
				}
				return make([]byte, size(r))
			}
			if withInit {
				init = func(mem []byte) {
					for i := 0; i+4 <= len(mem); i += 4 {
						copy(mem[i:], "init")
					}
				}
			}
			rebuildWorld(t, n, victim, func(ctx context.Context, c window.Comm) (*window.Window, error) {
				w, err := window.Allocate(ctx, c, size(c.Rank()))
				if err != nil {
					return nil, err
				}
				copy(w.Bytes(), pattern(c.Rank(), size(c.Rank())))
				return w, c.Barrier(ctx)
			}, func(ctx context.Context, nc window.Comm, old *window.Window) error {
				var before []byte
				if old != nil {
					before = old.Bytes()
				}
				w, err := window.Rebuild(ctx, nc, old, init)
				if err != nil {
					return err
				}
				me := nc.Rank()
				if len(w.Bytes()) != size(me) {
					return fmt.Errorf("window of %d bytes, want %d", len(w.Bytes()), size(me))
				}
				if old != nil && &w.Bytes()[0] != &before[0] {
					return errors.New("a survivor's window memory moved")
				}
				if err := getAll(ctx, w, 0, size, want); err != nil {
					return err
				}
				if err := w.Put(victim, uint64(size(victim)), []byte{1}); !errors.Is(err, ftrma.ErrOutOfBounds) {
					return fmt.Errorf("put past the replacement's window: %v, want ErrOutOfBounds", err)
				}
				if old != nil {
					if old.Bytes() != nil {
						return errors.New("the old window still has Bytes")
					}
					var v int64
					if err := old.FetchAndOp(0, 0, 1, &v, window.Sum); !errors.Is(err, window.ErrRebuilt) {
						return fmt.Errorf("fetch-and-op on the old window: %v, want ErrRebuilt", err)
					}
					if err := old.Free(ctx); err != nil {
						return err
					}
				}
				if err := nc.Barrier(ctx); err != nil {
					return err
				}
				return w.Free(ctx)
			})
		})
	}
}

// Locks do not carry over: at the failure, rank 1 holds an exclusive lock
// on rank 3, the failed rank 2 one on rank 0, and rank 3 a shared one on
// rank 1, all on the old window. On the rebuilt window the replacement
// takes an exclusive lock on rank 3 and rank 1 locks rank 3 again (its old
// lock was dropped, not kept); then every rank increments a counter at the
// replacement under an exclusive lock (get, flush, put) and the count is
// exact. The old windows free without ErrLockHeld.
func TestRebuildLocks(t *testing.T) {
	const n, victim, iters = 4, 2, 20
	rebuildWorldCrash(t, n, victim, func(ctx context.Context, c window.Comm) (*window.Window, error) {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return nil, err
		}
		return w, c.Barrier(ctx)
	}, func(_ *commtest.World, wins []*window.Window) error {
		ctx := testCtx(t, 10*time.Second)
		for _, l := range []struct {
			by, on ftrma.Rank
			lt     window.LockType
		}{{1, 3, window.Exclusive}, {victim, 0, window.Exclusive}, {3, 1, window.Shared}} {
			if err := wins[l.by].Lock(ctx, l.on, l.lt); err != nil {
				return fmt.Errorf("rank %d locks %d: %w", l.by, l.on, err)
			}
		}
		return nil
	}, func(ctx context.Context, nc window.Comm, old *window.Window) error {
		w, err := window.Rebuild(ctx, nc, old, nil)
		if err != nil {
			return err
		}
		me := nc.Rank()
		// Bounded: a lock kept from the old window would never be free.
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if me == victim || me == 1 {
			if err := w.Lock(lctx, 3, window.Exclusive); err != nil {
				return fmt.Errorf("exclusive lock on rank 3: %w", err)
			}
			if err := w.Unlock(lctx, 3); err != nil {
				return err
			}
		}
		for range iters {
			if err := w.Lock(lctx, victim, window.Exclusive); err != nil {
				return err
			}
			var b [8]byte
			if err := w.Get(victim, 0, b[:]); err != nil {
				return err
			}
			if err := w.Flush(lctx, victim); err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(b[:], binary.LittleEndian.Uint64(b[:])+1)
			if err := w.Put(victim, 0, b[:]); err != nil {
				return err
			}
			if err := w.Unlock(lctx, victim); err != nil {
				return err
			}
		}
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		if me == victim {
			if got := binary.LittleEndian.Uint64(w.Bytes()); got != n*iters {
				return fmt.Errorf("counter %d, want %d", got, n*iters)
			}
		}
		if old != nil {
			if err := old.Free(ctx); err != nil {
				return fmt.Errorf("free of the old window: %w", err)
			}
		}
		return w.Free(ctx)
	})
}

// A failed rank's late writes never land: the failed rank's puts toward
// ranks 0 and 3, held on the links (memnet Delay) when it is killed, are
// still on their way while the survivors replace it and rebuild the window
// over the same memory. After the delay has passed, ranks 0 and 3 still
// hold their own content, read through the new window by every rank.
func TestRebuildLateWrite(t *testing.T) {
	const n, victim, size = 4, 2, 64
	const delay = 300 * time.Millisecond
	rebuildWorldCrash(t, n, victim, func(ctx context.Context, c window.Comm) (*window.Window, error) {
		w, err := window.Allocate(ctx, c, size)
		if err != nil {
			return nil, err
		}
		copy(w.Bytes(), pattern(c.Rank(), size))
		return w, c.Barrier(ctx)
	}, func(world *commtest.World, wins []*window.Window) error {
		for _, q := range []ftrma.Rank{0, 3} {
			world.Net.Delay(victim, q, delay)
			if err := wins[victim].Put(q, 0, bytes.Repeat([]byte{0xee}, size)); err != nil {
				return err
			}
		}
		return nil
	}, func(ctx context.Context, nc window.Comm, old *window.Window) error {
		w, err := window.Rebuild(ctx, nc, old, nil)
		if err != nil {
			return err
		}
		time.Sleep(2 * delay) // the late writes would have arrived
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		err = getAll(ctx, w, 0, func(ftrma.Rank) int { return size }, func(q ftrma.Rank) []byte {
			if q == victim {
				return make([]byte, size)
			}
			return pattern(q, size)
		})
		if err != nil {
			return err
		}
		if old != nil {
			old.Free(ctx)
		}
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	})
}

// A Create window rebuilt over the communicator of a Replace on memnet,
// where the window memory is the caller's buffer: a survivor's new window
// memory is still its buffer, and puts through the new window land in it;
// the replacement gets memory of the failed rank's buffer's size.
func TestRebuildCreate(t *testing.T) {
	const n, victim = 4, 2
	size := func(r ftrma.Rank) int { return 32 + 8*int(r) }
	bufs := make([][]byte, n)
	rebuildWorld(t, n, victim, func(ctx context.Context, c window.Comm) (*window.Window, error) {
		buf := pattern(c.Rank(), size(c.Rank()))
		bufs[c.Rank()] = buf
		w, err := window.Create(ctx, c, buf)
		if err != nil {
			return nil, err
		}
		return w, c.Barrier(ctx)
	}, func(ctx context.Context, nc window.Comm, old *window.Window) error {
		w, err := window.Rebuild(ctx, nc, old, nil)
		if err != nil {
			return err
		}
		me := nc.Rank()
		if len(w.Bytes()) != size(me) {
			return fmt.Errorf("window of %d bytes, want %d", len(w.Bytes()), size(me))
		}
		if old != nil && &w.Bytes()[0] != &bufs[me][0] {
			return errors.New("a survivor's window memory is not its buffer any more")
		}
		err = getAll(ctx, w, 0, size, func(q ftrma.Rank) []byte {
			if q == victim {
				return make([]byte, size(q))
			}
			return pattern(q, size(q))
		})
		if err != nil {
			return err
		}
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		next := (me + 1) % n
		if err := w.PutSync(ctx, next, 0, []byte{0xa0 + byte(me)}); err != nil {
			return err
		}
		if old != nil {
			old.Free(ctx)
		}
		if err := nc.Barrier(ctx); err != nil {
			return err
		}
		if got, want := w.Bytes()[0], 0xa0+byte((me+n-1)%n); got != want {
			return fmt.Errorf("first byte %#x, want %#x put by the rank before", got, want)
		}
		return w.Free(ctx)
	})
}

// Rebuild where every rank survives (over a Dup of the communicator), on
// every world, shared memory included: Allocate and Create windows keep
// their memory in place; on shared memory, where a Create window's memory
// is a copy, Free of the old window does not write it back into the buffer
// and Free of the new window does, with what a neighbour put through the
// new window.
func TestRebuildAllSurvive(t *testing.T) {
	for _, created := range []bool{false, true} {
		t.Run(fmt.Sprintf("create=%v", created), func(t *testing.T) {
			run(t, 3, func(ctx context.Context, c *comm.Comm) error {
				me, n := c.Rank(), ftrma.Rank(c.Size())
				buf := pattern(me, 16)
				var old *window.Window
				var err error
				if created {
					old, err = window.Create(ctx, c, buf)
				} else {
					old, err = window.Allocate(ctx, c, 16)
					if err == nil {
						copy(old.Bytes(), buf)
					}
				}
				if err != nil {
					return err
				}
				mem := old.Bytes()
				nc, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer nc.Close()
				w, err := window.Rebuild(ctx, nc, old, nil)
				if err != nil {
					return err
				}
				if &w.Bytes()[0] != &mem[0] {
					return errors.New("the window memory moved")
				}
				if err := getAll(ctx, w, 0, func(ftrma.Rank) int { return 16 }, func(q ftrma.Rank) []byte { return pattern(q, 16) }); err != nil {
					return err
				}
				if err := nc.Barrier(ctx); err != nil {
					return err
				}
				if err := w.PutSync(ctx, (me+1)%n, 0, []byte{0xa0 + byte(me)}); err != nil {
					return err
				}
				if err := old.Free(ctx); err != nil {
					return err
				}
				if err := nc.Barrier(ctx); err != nil {
					return err
				}
				copied := &mem[0] != &buf[0]
				if created && copied && buf[0] != byte(0x10+me) {
					return errors.New("Free of the old window wrote the memory back into the buffer")
				}
				want := 0xa0 + byte((me+n-1)%n)
				if got := w.Bytes()[0]; got != want {
					return fmt.Errorf("first byte %#x, want %#x", got, want)
				}
				if err := w.Free(ctx); err != nil {
					return err
				}
				if created && buf[0] != want {
					return fmt.Errorf("buffer's first byte %#x after Free, want %#x", buf[0], want)
				}
				return nil
			})
		})
	}
}

// Rebuild refuses windows that do not fit, at every rank, with
// ftrma.ErrInvalid (the rank with the bad window with its own reason), and
// nobody hangs. After each refusal the old window still works, and
// everything Rebuild made was released.
func TestRebuildInvalid(t *testing.T) {
	reverse := func(ctx context.Context, c window.Comm) (window.Comm, error) {
		s, err := c.(regComm).Split(ctx, 0, -int(c.Rank()))
		return regComm{s, c.(regComm).t}, err
	}
	halves := func(ctx context.Context, c window.Comm) (window.Comm, error) {
		s, err := c.(regComm).Split(ctx, int(c.Rank())/2, 0)
		return regComm{s, c.(regComm).t}, err
	}
	same := func(_ context.Context, c window.Comm) (window.Comm, error) { return c, nil }
	for _, tc := range []struct {
		name string
		nc   func(ctx context.Context, c window.Comm) (window.Comm, error)
		pass func(c window.Comm, w, other *window.Window) *window.Window
		why  string // in every rank's error
	}{
		{"no window", same, func(window.Comm, *window.Window, *window.Window) *window.Window { return nil }, "no rank passed its old window"},
		{"survivor passes nil", same, func(c window.Comm, w, _ *window.Window) *window.Window {
			if c.Rank() == 1 {
				return nil
			}
			return w
		}, "rank 1: ftrma: invalid argument: it passed no old window, but its process held that number"},
		{"ranks renumbered", reverse, func(_ window.Comm, w, _ *window.Window) *window.Window { return w }, " in the old window, "},
		{"fewer ranks", halves, func(_ window.Comm, w, _ *window.Window) *window.Window { return w }, "its old window has 3 ranks"},
		{"different windows", same, func(c window.Comm, w, other *window.Window) *window.Window {
			if c.Rank() == 2 {
				return other
			}
			return w
		}, "rank 2: ftrma: invalid argument: it passed another old window than rank 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			world := commtest.New(t, 3)
			ctx := testCtx(t, time.Minute)
			regs := make([]*regTransport, 3)
			for r := range regs {
				regs[r] = &regTransport{Transport: world.Net.Endpoint(ftrma.Rank(r)), live: make(map[transport.Key]bool)}
			}
			for r, err := range world.Run(ctx, func(ctx context.Context, cc *comm.Comm) error {
				c := regComm{cc, regs[cc.Rank()]}
				w, err := window.Allocate(ctx, c, 8)
				if err != nil {
					return err
				}
				other, err := window.Allocate(ctx, c, 8)
				if err != nil {
					return err
				}
				nc, err := tc.nc(ctx, c)
				if err != nil {
					return err
				}
				nw, err := window.Rebuild(ctx, nc, tc.pass(c, w, other), nil)
				if nw != nil || !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), tc.why) {
					return fmt.Errorf("Rebuild gave %v, %v; want ErrInvalid saying %q", nw, err, tc.why)
				}
				// The old window still works.
				var v int64
				if err := w.FetchAndOp(0, 0, 1, &v, window.Sum); err != nil {
					return err
				}
				if err := w.FlushAll(ctx); err != nil {
					return err
				}
				if err := w.Free(ctx); err != nil {
					return err
				}
				return other.Free(ctx)
			}) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			for r, reg := range regs {
				if err := reg.check(); err != nil {
					t.Errorf("rank %d's registrations: %v", r, err)
				}
			}
		})
	}
}

// A freed old window, and a window made by Shrink, are refused: ErrFreed
// at the rank that passes the freed one, ftrma.ErrInvalid elsewhere.
func TestRebuildFreedOrShrunk(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		freed, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		if err := freed.Free(ctx); err != nil {
			return err
		}
		pass := w
		if c.Rank() == 0 {
			pass = freed
		}
		nw, err := window.Rebuild(ctx, c, pass, nil)
		if c.Rank() == 0 && !errors.Is(err, window.ErrFreed) || c.Rank() != 0 && !errors.Is(err, ftrma.ErrInvalid) || nw != nil {
			return fmt.Errorf("Rebuild with a freed window at rank 0: %v, %v", nw, err)
		}
		s, err := w.Shrink(ctx)
		if err != nil {
			return err
		}
		if nw, err := window.Rebuild(ctx, c, s, nil); nw != nil || !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("Rebuild of a shrunk window: %v, %v; want ErrInvalid", nw, err)
		}
		return s.Free(ctx)
	})
}

// A rank that fails during Rebuild (the replacement, killed as it starts)
// makes Rebuild fail at every survivor with an error wrapping
// ftrma.ErrProcFailed, within the test's bound; the old window still works
// toward live ranks, and Rebuild released what it made.
func TestRebuildFailure(t *testing.T) {
	const n, victim = 4, 2
	var world *commtest.World
	rebuildWorldCrash(t, n, victim, func(ctx context.Context, c window.Comm) (*window.Window, error) {
		w, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return nil, err
		}
		return w, c.Barrier(ctx)
	}, func(w *commtest.World, _ []*window.Window) error {
		world = w
		return nil
	}, func(ctx context.Context, nc window.Comm, old *window.Window) error {
		if old == nil {
			world.Crash(nc.TransportRank(nc.Rank()))
			return nil
		}
		w, err := window.Rebuild(ctx, nc, old, nil)
		if w != nil || !errors.Is(err, ftrma.ErrProcFailed) {
			return fmt.Errorf("Rebuild with the replacement killed: %v, %v; want ErrProcFailed", w, err)
		}
		var v int64
		if err := old.FetchAndOp(0, 0, 1, &v, window.Sum); err != nil {
			return err
		}
		if err := old.Flush(ctx, 0); err != nil {
			return err
		}
		return old.Free(ctx)
	})
}

// Rebuild works on a revoked window, and the new window is not revoked: it
// has a revocation notice of its own.
func TestRebuildRevoked(t *testing.T) {
	run(t, 3, func(ctx context.Context, c *comm.Comm) error {
		old, err := window.Allocate(ctx, c, 8)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			old.Revoke()
		}
		for !old.IsRevoked() {
			if ctx.Err() != nil {
				return errors.New("the revocation never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		nc, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		defer nc.Close()
		w, err := window.Rebuild(ctx, nc, old, nil)
		if err != nil {
			return err
		}
		if w.IsRevoked() {
			return errors.New("the rebuilt window is revoked")
		}
		var v int64
		if err := w.FetchAndOp(0, 0, 1, &v, window.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		if err := old.Free(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	})
}

// Kill, replace, rebuild, kill the replacement, replace and rebuild again
// (rank number 2 three times): the survivors' memory is kept through both
// rebuilds, and each replacement starts with what its init wrote.
func TestRebuildTwice(t *testing.T) {
	const n, number, size = 4, 2, 32
	world := commtest.NewSpares(t, n, 2)
	ctx := testCtx(t, time.Minute)
	comms := make(map[ftrma.Rank]*comm.Comm)
	wins := make(map[ftrma.Rank]*window.Window)
	var mu sync.Mutex
	for r, err := range world.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, size)
		if err != nil {
			return err
		}
		copy(w.Bytes(), pattern(c.Rank(), size))
		mu.Lock()
		comms[c.Rank()], wins[c.Rank()] = c, w
		mu.Unlock()
		return c.Barrier(ctx)
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	initText := func(round int) []byte { return bytes.Repeat([]byte{byte(0xe0 + round)}, size) }
	// use checks every rank's memory through w, then frees old.
	use := func(ctx context.Context, w, old *window.Window, round int) error {
		err := getAll(ctx, w, 0, func(ftrma.Rank) int { return size }, func(q ftrma.Rank) []byte {
			if q == number {
				return initText(round)
			}
			return pattern(q, size)
		})
		if err == nil && old != nil {
			err = old.Free(ctx)
		}
		return err
	}
	victim := ftrma.Rank(number)
	for round := range 2 {
		delete(comms, victim)
		delete(wins, victim)
		world.Crash(victim)
		var wg sync.WaitGroup
		errs := make(map[ftrma.Rank]error)
		for r, c := range comms {
			old := wins[r]
			wg.Go(func() {
				nc, err := c.Replace(ctx)
				var w *window.Window
				if err == nil {
					w, err = window.Rebuild(ctx, nc, old, nil)
				}
				if err == nil {
					err = use(ctx, w, old, round)
				}
				mu.Lock()
				comms[r], wins[r], errs[r] = nc, w, err
				mu.Unlock()
			})
		}
		wg.Go(func() {
			var j commtest.Joined
			select {
			case j = <-world.Joined():
			case <-ctx.Done():
				mu.Lock()
				errs[-1] = ctx.Err()
				mu.Unlock()
				return
			}
			err := j.Err
			var w *window.Window
			if err == nil {
				w, err = window.Rebuild(ctx, j.Comm, nil, func(mem []byte) { copy(mem, initText(round)) })
			}
			if err == nil {
				err = use(ctx, w, nil, round)
			}
			mu.Lock()
			comms[j.Rank], wins[j.Rank], errs[j.Rank] = j.Comm, w, err
			victim = j.Rank
			mu.Unlock()
		})
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d, rank %d: %v", round, r, err)
			}
		}
	}
	for r, err := range world.RunRanks(ctx, slices.Collect(maps.Keys(wins)), func(ctx context.Context, c *comm.Comm) error {
		mu.Lock()
		w := wins[c.TransportRank(c.Rank())]
		mu.Unlock()
		return w.Free(ctx)
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
