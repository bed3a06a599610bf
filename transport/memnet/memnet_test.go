package memnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// testCtx returns a context whose generous deadline only keeps a broken test
// from hanging; no test depends on it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// region returns an 8-byte aligned buffer of n words, as words and as bytes.
func region(n int) ([]uint64, []byte) {
	w := make([]uint64, n)
	return w, unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n*8)
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// event is one call of a Receiver method.
type event struct {
	from ftrma.Rank
	msg  string
	down error // non-nil for HandlePeerDown
}

// recorder is a Receiver that records what it is given.
type recorder struct {
	onMsg func(from ftrma.Rank, msg []byte) // optional; called on the transport's goroutine

	mu     sync.Mutex
	events []event
	wake   chan struct{} // capacity 1: an event was recorded
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) HandleMessage(from ftrma.Rank, msg []byte) {
	if r.onMsg != nil {
		r.onMsg(from, msg)
	}
	r.add(event{from: from, msg: string(msg)})
}

func (r *recorder) HandlePeerDown(peer ftrma.Rank, err error) {
	if err == nil {
		err = errors.New("nil error given to HandlePeerDown")
	}
	r.add(event{from: peer, down: err})
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// messages returns the control messages received from from, in order.
func (r *recorder) messages(from ftrma.Rank) []string {
	var out []string
	for _, e := range r.snapshot() {
		if e.down == nil && e.from == from {
			out = append(out, e.msg)
		}
	}
	return out
}

// downs counts the HandlePeerDown calls per peer.
func (r *recorder) downs() map[ftrma.Rank]int {
	out := map[ftrma.Rank]int{}
	for _, e := range r.snapshot() {
		if e.down != nil {
			out[e.from]++
			if !errors.Is(e.down, ftrma.ErrProcFailed) {
				panic(fmt.Sprintf("HandlePeerDown(%d) error %v does not wrap ErrProcFailed", e.from, e.down))
			}
		}
	}
	return out
}

// waitDown blocks until peer-down for peer has been recorded.
func (r *recorder) waitDown(ctx context.Context, peer ftrma.Rank) error {
	for r.downs()[peer] == 0 {
		select {
		case <-r.wake:
		case <-ctx.Done():
			return fmt.Errorf("no peer-down for rank %d: %w", peer, ctx.Err())
		}
	}
	return nil
}

// roundTrip makes sure everything from has sent to to so far has been handled at
// to: per-link FIFO order puts a write round trip behind it.
func roundTrip(t *testing.T, ctx context.Context, from *Transport, to ftrma.Rank, key transport.Key) {
	t.Helper()
	seq, err := from.Write(to, key, 0, nil)
	if err != nil {
		t.Fatalf("sync write: %v", err)
	}
	if err := from.Wait(ctx, to, seq); err != nil {
		t.Fatalf("sync wait: %v", err)
	}
}

func TestAtomicsFromManyRanks(t *testing.T) {
	const ranks, adds, casIncs = 8, 1000, 100
	net := New(ranks)
	defer net.Close()
	ctx := testCtx(t)
	words, mem := region(2) // word 0: FADD counter, word 1: CAS counter
	key, err := net.Endpoint(0).Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	priors := make([][]uint64, ranks)
	var wg sync.WaitGroup
	errs := make(chan error, ranks)
	for r := range ranks {
		priors[r] = make([]uint64, adds)
		wg.Go(func() {
			tr := net.Endpoint(ftrma.Rank(r)) // rank 0 goes through loopback
			for i := range adds {
				if _, err := tr.FetchAndAdd64(0, key, 0, 1, &priors[r][i]); err != nil {
					errs <- err
					return
				}
			}
			if err := tr.Flush(ctx, 0); err != nil {
				errs <- err
				return
			}
			// Increment word 1 casIncs times with a CAS loop.
			cur := uint64(0)
			for range casIncs {
				for {
					var prior uint64
					seq, err := tr.CompareAndSwap64(0, key, 8, cur, cur+1, &prior)
					if err == nil {
						err = tr.Wait(ctx, 0, seq)
					}
					if err != nil {
						errs <- err
						return
					}
					if prior == cur {
						cur++
						break
					}
					cur = prior
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := atomic.LoadUint64(&words[0]); got != ranks*adds {
		t.Errorf("FADD counter = %d, want %d", got, ranks*adds)
	}
	if got := atomic.LoadUint64(&words[1]); got != ranks*casIncs {
		t.Errorf("CAS counter = %d, want %d", got, ranks*casIncs)
	}
	seen := make([]bool, ranks*adds)
	for r := range priors {
		for i, p := range priors[r] {
			if p >= uint64(len(seen)) || seen[p] {
				t.Fatalf("rank %d add %d fetched %d: out of range or seen before", r, i, p)
			}
			if i > 0 && p <= priors[r][i-1] {
				t.Errorf("rank %d: add %d fetched %d after %d: not in posting order", r, i, p, priors[r][i-1])
			}
			seen[p] = true
		}
	}
}

func TestCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := New(3)
		defer net.Close()
		ctx := context.Background()
		recs := make([]*recorder, 3)
		keys := make([]transport.Key, 3)
		words := make([][]uint64, 3)
		for r := range 3 {
			recs[r] = newRecorder()
			net.Endpoint(ftrma.Rank(r)).SetReceiver(recs[r])
			var mem []byte
			words[r], mem = region(1)
			var err error
			if keys[r], err = net.Endpoint(ftrma.Rank(r)).Register(mem); err != nil {
				t.Fatal(err)
			}
		}
		a, c := net.Endpoint(0), net.Endpoint(2)

		// Rank 0's write toward 2 is held back, so Flush is pending at the crash.
		net.Delay(0, 2, time.Hour)
		if _, err := a.Write(2, keys[2], 0, u64(1)); err != nil {
			t.Fatal(err)
		}
		flushed := make(chan error, 1)
		go func() { flushed <- a.Flush(ctx, 2) }()
		// Rank 2's write and message toward 1 are in flight at the crash.
		net.Delay(2, 1, time.Second)
		if _, err := c.Write(1, keys[1], 0, u64(2)); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(1, []byte("from the grave")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		net.Crash(2)
		if err := <-flushed; !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("pending Flush toward crashed rank = %v, want ErrProcFailed", err)
		}
		if _, err := a.Write(2, keys[2], 0, u64(3)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("Write toward crashed rank = %v, want ErrProcFailed", err)
		}
		if err := a.Send(2, []byte("hello?")); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("Send toward crashed rank = %v, want ErrProcFailed", err)
		}
		if _, err := c.Write(0, keys[0], 0, u64(4)); !errors.Is(err, ftrma.ErrClosed) {
			t.Errorf("Write from crashed rank = %v, want ErrClosed", err)
		}
		// Neither gives a second peer-down event.
		if err := a.Fence(2); err != nil {
			t.Errorf("Fence of crashed rank: %v", err)
		}
		net.Crash(2)

		time.Sleep(2 * time.Second) // past rank 2's delayed traffic
		synctest.Wait()
		if v := atomic.LoadUint64(&words[1][0]); v != 0 {
			t.Errorf("write from crashed rank landed: word = %d", v)
		}
		if msgs := recs[1].messages(2); len(msgs) != 0 {
			t.Errorf("messages from crashed rank delivered: %q", msgs)
		}
		for r := range 2 {
			if d := recs[r].downs(); d[2] != 1 || len(d) != 1 {
				t.Errorf("rank %d peer-down calls %v, want exactly one for rank 2", r, d)
			}
		}
		if ev := recs[2].snapshot(); len(ev) != 0 {
			t.Errorf("crashed rank's receiver called: %v", ev)
		}
		// The survivors still talk.
		roundTrip(t, ctx, a, 1, keys[1])
		if err := net.Endpoint(1).Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close of crashed rank: %v", err)
		}
	})
}

func TestCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := New(2)
		defer net.Close()
		a, b := net.Endpoint(0), net.Endpoint(1)
		ra, rb := newRecorder(), newRecorder()
		a.SetReceiver(ra)
		b.SetReceiver(rb)
		words, mem := region(2)
		key, err := b.Register(mem)
		if err != nil {
			t.Fatal(err)
		}

		// In flight when the link is cut: dropped, even though it heals before
		// the delay passes.
		net.Delay(0, 1, time.Second)
		if err := a.Send(1, []byte("in flight")); err != nil {
			t.Fatal(err)
		}
		net.Cut(0, 1)
		net.Heal(0, 1)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if msgs := rb.messages(0); len(msgs) != 0 {
			t.Errorf("message in flight across a cut delivered after Heal: %q", msgs)
		}

		net.Delay(0, 1, 0)
		net.Cut(0, 1)

		if _, err := a.Write(1, key, 0, u64(1)); err != nil {
			t.Fatal(err)
		}
		if err := a.Send(1, []byte("cut")); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(0, []byte("cut")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = a.Flush(ctx, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Flush across cut link = %v, want DeadlineExceeded", err)
		}
		synctest.Wait()
		if ev := ra.snapshot(); len(ev) != 0 {
			t.Errorf("rank 0 got %v across a cut link", ev)
		}
		if ev := rb.snapshot(); len(ev) != 0 {
			t.Errorf("rank 1 got %v across a cut link", ev)
		}

		net.Heal(0, 1)
		if _, err := a.Write(1, key, 8, u64(2)); err != nil {
			t.Fatal(err)
		}
		err = a.Flush(context.Background(), 1)
		if !errors.Is(err, ErrLost) || !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("Flush after Heal = %v, want the lost write's ErrLost (and ErrProcFailed)", err)
		}
		if err := a.Flush(context.Background(), 1); err != nil {
			t.Errorf("second Flush after Heal = %v", err)
		}
		if w0, w1 := atomic.LoadUint64(&words[0]), atomic.LoadUint64(&words[1]); w0 != 0 || w1 != 2 {
			t.Errorf("words = %d, %d; want 0 (lost), 2", w0, w1)
		}
		if err := a.Send(1, []byte("healed")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if msgs := rb.messages(0); !slices.Equal(msgs, []string{"healed"}) {
			t.Errorf("rank 1 got %q, want just \"healed\"", msgs)
		}
		if d := ra.downs(); len(d) != 0 {
			t.Errorf("cut produced peer-down events %v", d)
		}
	})
}

func TestIsolate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := New(3)
		defer net.Close()
		recs := []*recorder{newRecorder(), newRecorder(), newRecorder()}
		for r, rec := range recs {
			net.Endpoint(ftrma.Rank(r)).SetReceiver(rec)
		}
		net.Isolate(1)
		for from := range 3 {
			for to := range 3 {
				if err := net.Endpoint(ftrma.Rank(from)).Send(ftrma.Rank(to), []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
		}
		synctest.Wait()
		want := [][]ftrma.Rank{{0, 2}, {1}, {0, 2}} // senders each rank hears from
		for r, rec := range recs {
			var got []ftrma.Rank
			for _, e := range rec.snapshot() {
				got = append(got, e.from)
			}
			slices.Sort(got)
			if !slices.Equal(got, want[r]) {
				t.Errorf("rank %d heard from %v, want %v", r, got, want[r])
			}
		}
	})
}

func TestFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := New(2)
		defer net.Close()
		ctx := context.Background()
		a, b := net.Endpoint(0), net.Endpoint(1)
		ra, rb := newRecorder(), newRecorder()
		a.SetReceiver(ra)
		b.SetReceiver(rb)
		wa, mema := region(1)
		keyA, err := a.Register(mema)
		if err != nil {
			t.Fatal(err)
		}
		_, memb := region(1)
		keyB, err := b.Register(memb)
		if err != nil {
			t.Fatal(err)
		}

		// Rank 1's write and message are in flight when rank 0 fences it.
		net.Delay(1, 0, time.Second)
		if _, err := b.Write(0, keyA, 0, u64(7)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(0, []byte("late")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := a.Fence(1); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(ctx, 0); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("fenced rank's Flush = %v, want ErrProcFailed", err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if v := atomic.LoadUint64(&wa[0]); v != 0 {
			t.Errorf("write from fenced rank landed: word = %d", v)
		}
		if msgs := ra.messages(1); len(msgs) != 0 {
			t.Errorf("messages from fenced rank delivered: %q", msgs)
		}
		if _, err := a.Write(1, keyB, 0, u64(1)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("Write toward fenced rank = %v, want ErrProcFailed", err)
		}
		if _, err := b.Write(0, keyA, 0, u64(1)); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("Write from fenced rank after the reset = %v, want ErrProcFailed", err)
		}
		if err := a.Fence(1); err != nil {
			t.Errorf("second Fence: %v", err)
		}
		if err := a.Fence(0); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("Fence of self = %v, want ErrInvalid", err)
		}
		net.Heal(0, 1) // fencing is permanent, whatever the links do
		if err := b.Send(0, []byte("still fenced")); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("Send from fenced rank = %v, want ErrProcFailed", err)
		}
		synctest.Wait()
		if d := ra.downs(); d[1] != 1 || len(d) != 1 {
			t.Errorf("fencing rank's peer-down calls %v, want one for rank 1", d)
		}
		if d := rb.downs(); d[0] != 1 || len(d) != 1 {
			t.Errorf("fenced rank's peer-down calls %v, want one for rank 0", d)
		}
	})
}

// TestFenceStopsConcurrentWrites fences a peer that is writing as fast as it
// can and checks that its memory never changes after Fence returns.
func TestFenceStopsConcurrentWrites(t *testing.T) {
	net := New(2)
	defer net.Close()
	ctx := testCtx(t)
	a, b := net.Endpoint(0), net.Endpoint(1)
	words, mem := region(1)
	key, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	writerDone := make(chan error, 1)
	go func() {
		for i := uint64(1); ; i++ {
			if _, err := b.Write(0, key, 0, u64(i)); err != nil {
				writerDone <- err
				return
			}
			if i%64 == 0 {
				if err := b.Flush(ctx, 0); err != nil {
					writerDone <- err
					return
				}
			}
		}
	}()
	for atomic.LoadUint64(&words[0]) < 1000 {
		select {
		case err := <-writerDone:
			t.Fatalf("writer stopped early: %v", err)
		default:
		}
	}
	if err := a.Fence(1); err != nil {
		t.Fatal(err)
	}
	frozen := atomic.LoadUint64(&words[0])
	if err := <-writerDone; !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("writer's error = %v, want ErrProcFailed", err)
	}
	// Everything rank 1 queued at rank 0 was queued before its writer
	// stopped; a loopback round trip at rank 0 comes after all of it.
	roundTrip(t, ctx, a, 0, key)
	if v := atomic.LoadUint64(&words[0]); v != frozen {
		t.Errorf("word changed from %d to %d after Fence returned", frozen, v)
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		net := New(3)
		defer net.Close()
		a, b, c := net.Endpoint(0), net.Endpoint(1), net.Endpoint(2)
		words, mem := region(1)
		key, err := a.Register(mem)
		if err != nil {
			t.Fatal(err)
		}
		var bad atomic.Int64
		rec := newRecorder()
		rec.onMsg = func(from ftrma.Rank, msg []byte) {
			if from == 1 && atomic.LoadUint64(&words[0]) != binary.LittleEndian.Uint64(msg) {
				bad.Add(1)
			}
		}
		a.SetReceiver(rec)

		net.Delay(1, 0, time.Second)
		for i := uint64(1); i <= n; i++ {
			if i == n/2 {
				net.Delay(1, 0, 0) // shrinking the delay must not let later messages overtake
			}
			if _, err := b.Write(0, key, 0, u64(i)); err != nil {
				t.Fatal(err)
			}
			if err := b.Send(0, u64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Send(0, []byte("undelayed")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if msgs := rec.messages(1); len(msgs) != 0 {
			t.Errorf("%d delayed messages delivered early", len(msgs))
		}
		if msgs := rec.messages(2); !slices.Equal(msgs, []string{"undelayed"}) {
			t.Errorf("other link held up: rank 2's messages %q", msgs)
		}

		time.Sleep(time.Second)
		synctest.Wait()
		msgs := rec.messages(1)
		if len(msgs) != n {
			t.Fatalf("got %d messages after the delay, want %d", len(msgs), n)
		}
		for i, m := range msgs {
			if got := binary.LittleEndian.Uint64([]byte(m)); got != uint64(i+1) {
				t.Fatalf("message %d is %d: out of order", i+1, got)
			}
		}
		if k := bad.Load(); k != 0 {
			t.Errorf("%d messages overtook the write posted before them", k)
		}
		if err := b.Flush(context.Background(), 0); err != nil {
			t.Errorf("Flush: %v", err)
		}
	})
}

// dropPattern sends count numbered messages over a link dropping half of
// them and returns which arrived.
func dropPattern(t *testing.T, seed int64, setSeed bool, count int) []string {
	t.Helper()
	net := New(2)
	defer net.Close()
	if setSeed {
		net.SetSeed(seed)
	}
	a, b := net.Endpoint(0), net.Endpoint(1)
	rec := newRecorder()
	b.SetReceiver(rec)
	_, mem := region(1)
	key, err := b.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	net.Drop(0, 1, 0.5)
	for i := range count {
		if err := a.Send(1, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip(t, testCtx(t), a, 1, key)
	return rec.messages(0)
}

func TestDrop(t *testing.T) {
	const count = 200
	ctx := testCtx(t)
	for _, tc := range []struct {
		name     string
		p        float64
		min, max int // delivered messages
	}{
		{"never", 0, count, count},
		{"always", 1, 0, 0},
		{"half", 0.5, 1, count - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := New(2)
			defer net.Close()
			a, b := net.Endpoint(0), net.Endpoint(1)
			rec := newRecorder()
			b.SetReceiver(rec)
			words, mem := region(count)
			key, err := b.Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			net.Drop(0, 1, tc.p)
			for i := range count {
				if err := a.Send(1, []byte("m")); err != nil {
					t.Fatal(err)
				}
				if _, err := a.Write(1, key, uint64(8*i), u64(uint64(i+1))); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Flush(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if got := len(rec.messages(0)); got < tc.min || got > tc.max {
				t.Errorf("%d of %d messages delivered, want %d..%d", got, count, tc.min, tc.max)
			}
			for i := range words {
				if v := atomic.LoadUint64(&words[i]); v != uint64(i+1) {
					t.Fatalf("write %d lost under Drop: word = %d", i, v)
				}
			}
		})
	}

	t.Run("seeded", func(t *testing.T) {
		def := dropPattern(t, 0, false, count)
		one := dropPattern(t, 1, true, count)
		two := dropPattern(t, 2, true, count)
		if !slices.Equal(def, one) {
			t.Errorf("default seed and SetSeed(1) differ:\n%q\n%q", def, one)
		}
		if again := dropPattern(t, 2, true, count); !slices.Equal(two, again) {
			t.Errorf("same seed, different drops:\n%q\n%q", two, again)
		}
		if slices.Equal(one, two) {
			t.Errorf("seeds 1 and 2 dropped the same messages")
		}
	})
}

func TestClose(t *testing.T) {
	net := New(2)
	defer net.Close()
	ctx := testCtx(t)
	a, b := net.Endpoint(0), net.Endpoint(1)
	rb := newRecorder()
	b.SetReceiver(rb)
	_, mem := region(1)
	key, err := b.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	keyA, err := a.Register(make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}

	net.Delay(1, 0, time.Hour) // holds back the reply: rank 0's write stays pending
	seq, err := a.Write(1, key, 0, u64(1))
	if err != nil {
		t.Fatal(err)
	}
	pending := make(chan error, 1)
	go func() { pending <- a.Wait(ctx, 1, seq) }()

	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := <-pending; !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("pending Wait = %v, want ErrClosed", err)
	}
	var r uint64
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Register", func() error { _, err := a.Register(make([]byte, 8)); return err }},
		{"Deregister", func() error { return a.Deregister(keyA) }},
		{"Write", func() error { _, err := a.Write(1, key, 0, u64(1)); return err }},
		{"Read", func() error { _, err := a.Read(1, key, 0, make([]byte, 8)); return err }},
		{"CompareAndSwap64", func() error { _, err := a.CompareAndSwap64(1, key, 0, 0, 1, &r); return err }},
		{"FetchAndAdd64", func() error { _, err := a.FetchAndAdd64(1, key, 0, 1, &r); return err }},
		{"Wait", func() error { return a.Wait(ctx, 1, seq) }},
		{"Flush", func() error { return a.Flush(ctx, 1) }},
		{"Send", func() error { return a.Send(1, []byte("x")) }},
		{"Fence", func() error { return a.Fence(1) }},
	} {
		if err := tc.call(); !errors.Is(err, ftrma.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", tc.name, err)
		}
	}
	a.SetReceiver(newRecorder()) // does nothing, must not panic

	// The peer sees a closed connection.
	if err := rb.waitDown(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(0, keyA, 0, u64(1)); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("Write toward closed rank = %v, want ErrProcFailed", err)
	}
	net.Close()
	net.Close()
	if err := b.Send(0, nil); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("Send after Network.Close = %v, want ErrClosed", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	net := New(2)
	defer net.Close()
	ctx := testCtx(t)
	a := net.Endpoint(0)
	var r uint64
	for _, peer := range []ftrma.Rank{-1, 2} {
		for _, tc := range []struct {
			op   string
			call func() error
		}{
			{"write", func() error { _, err := a.Write(peer, 1, 0, u64(1)); return err }},
			{"read", func() error { _, err := a.Read(peer, 1, 0, make([]byte, 8)); return err }},
			{"cas", func() error { _, err := a.CompareAndSwap64(peer, 1, 0, 0, 1, &r); return err }},
			{"fadd", func() error { _, err := a.FetchAndAdd64(peer, 1, 0, 1, &r); return err }},
			{"wait", func() error { return a.Wait(ctx, peer, 1) }},
			{"flush", func() error { return a.Flush(ctx, peer) }},
			{"send", func() error { return a.Send(peer, []byte("x")) }},
			{"fence", func() error { return a.Fence(peer) }},
		} {
			err := tc.call()
			var oe *ftrma.OpError
			if !errors.Is(err, ftrma.ErrRankOutOfRange) || !errors.As(err, &oe) || oe.Rank != peer || oe.Op != tc.op {
				t.Errorf("%s toward rank %d = %#v, want *OpError{%q, %d, ErrRankOutOfRange}", tc.op, peer, err, tc.op, peer)
			}
		}
	}
	if err := a.Send(1, make([]byte, transport.MaxControlMessage+1)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("oversized Send = %v, want ErrInvalid", err)
	}
	if err := a.Send(1, make([]byte, transport.MaxControlMessage)); err != nil {
		t.Errorf("Send of MaxControlMessage bytes = %v", err)
	}
	if err := a.Wait(ctx, 1, 1); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Wait for an unposted sequence = %v, want ErrInvalid", err)
	}
	if err := a.Wait(ctx, 1, 0); err != nil {
		t.Errorf("Wait for sequence 0 = %v", err)
	}
	if err := a.Flush(ctx, 1); err != nil {
		t.Errorf("Flush with nothing posted = %v", err)
	}
	if got := a.Caps(); got != transport.CapOrdered|transport.CapRemoteCompletion|transport.CapLocalAtomics|transport.CapWholeWords {
		t.Errorf("Caps = %b", got)
	}
	if a.Rank() != 0 || a.Size() != 2 || net.Size() != 2 {
		t.Errorf("Rank, Size = %d, %d, %d", a.Rank(), a.Size(), net.Size())
	}
}

func TestReceiver(t *testing.T) {
	net := New(2)
	defer net.Close()
	ctx := testCtx(t)
	a, b := net.Endpoint(0), net.Endpoint(1)
	_, mem := region(1)
	key, err := b.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	send := func(s string) {
		t.Helper()
		if err := a.Send(1, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	// Before any receiver is set, messages are held, then delivered first.
	send("a")
	send("b")
	roundTrip(t, ctx, a, 1, key)
	first := newRecorder()
	b.SetReceiver(first)
	send("c")
	roundTrip(t, ctx, a, 1, key)
	if got := first.messages(0); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("first receiver got %q, want a b c", got)
	}

	// A nil receiver drops.
	b.SetReceiver(nil)
	send("d")
	roundTrip(t, ctx, a, 1, key)
	second := newRecorder()
	b.SetReceiver(second)
	send("e")
	roundTrip(t, ctx, a, 1, key)
	if got := second.messages(0); !slices.Equal(got, []string{"e"}) {
		t.Errorf("second receiver got %q, want just e", got)
	}
	if got := first.messages(0); len(got) != 3 {
		t.Errorf("replaced receiver got more messages: %q", got)
	}
}

func TestReceiverMaySend(t *testing.T) {
	// A receiver that forwards every message to the next rank (a ring) must
	// not deadlock, loopback included.
	synctest.Test(t, func(t *testing.T) {
		const n = 4
		net := New(n)
		defer net.Close()
		var hops atomic.Int64
		for r := range n {
			tr := net.Endpoint(ftrma.Rank(r))
			rec := newRecorder()
			rec.onMsg = func(from ftrma.Rank, msg []byte) {
				if len(msg) == 1 && msg[0] > 0 {
					left := msg[0]
					hops.Add(1)
					tr.Send(ftrma.Rank((r+1)%n), []byte{left - 1})
					tr.Send(tr.Rank(), nil)
				}
			}
			tr.SetReceiver(rec)
		}
		if err := net.Endpoint(0).Send(1, []byte{200}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h := hops.Load(); h != 200 {
			t.Errorf("%d hops, want 200", h)
		}
	})
}

func TestManyRanks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 256
		net := New(n)
		defer net.Close()
		ctx := context.Background()
		words, mem := region(1)
		key, err := net.Endpoint(0).Register(mem)
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]*recorder, n)
		for r := range n {
			recs[r] = newRecorder()
			net.Endpoint(ftrma.Rank(r)).SetReceiver(recs[r])
		}
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				tr := net.Endpoint(ftrma.Rank(r))
				if err := tr.Send(ftrma.Rank((r+1)%n), []byte("hi")); err != nil {
					t.Error(err)
				}
				if _, err := tr.FetchAndAdd64(0, key, 0, 1, nil); err != nil {
					t.Error(err)
				}
				if err := tr.Flush(ctx, 0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if v := atomic.LoadUint64(&words[0]); v != n {
			t.Errorf("counter = %d, want %d", v, n)
		}
		synctest.Wait() // the ring messages arrive
		net.Crash(7)
		synctest.Wait()
		for r := range n {
			if got := recs[r].messages(ftrma.Rank((r + n - 1) % n)); len(got) != 1 {
				t.Errorf("rank %d got %q from its left neighbour", r, got)
			}
			if d := recs[r].downs(); r != 7 && d[7] != 1 {
				t.Errorf("rank %d peer-down calls %v, want one for rank 7", r, d)
			}
		}
	})
}

func BenchmarkWriteWait(b *testing.B) {
	net := New(2)
	defer net.Close()
	ctx := context.Background()
	a := net.Endpoint(0)
	_, mem := region(1)
	key, err := net.Endpoint(1).Register(mem)
	if err != nil {
		b.Fatal(err)
	}
	src := u64(1)
	b.ReportAllocs()
	for b.Loop() {
		seq, err := a.Write(1, key, 0, src)
		if err == nil {
			err = a.Wait(ctx, 1, seq)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// A spare's operations and messages toward a rank that has not admitted it
// yet wait there, in order, and are handled right after Admit.
func TestAdmitHoldsEarlyTraffic(t *testing.T) {
	net := NewSpares(1, 1)
	defer net.Close()
	a, s := net.Endpoint(0), net.Endpoint(1)
	rec := transporttest.NewRecorder()
	a.SetReceiver(rec)
	mem := make([]byte, 8)
	key, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.Write(0, key, 0, []byte{5})
	if err != nil {
		t.Fatalf("the spare's write toward a started rank: %v", err)
	}
	if err := s.Send(0, []byte("early")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = s.Wait(ctx, 0, seq)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || mem[0] != 0 || rec.Count() != 0 {
		t.Fatalf("before admission: wait %v, memory %d, %d messages; want the write and message held", err, mem[0], rec.Count())
	}
	if err := a.Admit(1, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), transporttest.Bound)
	defer cancel()
	if err := s.Wait(ctx, 0, seq); err != nil || mem[0] != 5 {
		t.Fatalf("after admission: wait %v, memory %d", err, mem[0])
	}
	rec.Await(t, ctx, "the early message", func() bool { return rec.Count() == 1 })
	if got := rec.From(1); string(got[0]) != "early" {
		t.Fatalf("message %q", got[0])
	}
}
