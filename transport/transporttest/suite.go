package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// World is a job of ranks of the transport under test, all in this process.
type World struct {
	// Ranks holds rank r's transport at index r, connected to the others,
	// with no receiver set.
	Ranks []transport.Transport
	// Kill makes rank r vanish as a crashed process does, without a
	// goodbye if the transport can help it. Nil: the suite closes the
	// rank's transport instead.
	Kill func(r int)
}

// Factory builds a connected world of n ranks (n is at most 4) for one
// test. It registers the world's clean-up with t.Cleanup and fails t if the
// world cannot be built.
type Factory func(t testing.TB, n int) *World

// Bound is how long the suite waits for anything the contract says
// happens (a peer-down event, a failed Flush) before it fails the test.
// Generous: it only keeps a broken transport from hanging the test.
const Bound = 20 * time.Second

// Run runs the transport contract of package transport against worlds
// built by f, one subtest per part of the contract:
//
//   - WriteRead: writes and reads of many sizes and offsets, toward a peer
//     and toward self, land in the owner's memory and read back the same.
//   - Atomics: CompareAndSwap64 and FetchAndAdd64 return the prior value
//     and change the word as documented, toward a peer and toward self;
//     FetchAndAdd64 allows a nil result.
//   - AtomicsFromManyRanks: concurrent atomics of every rank on one word
//     lose no update, and each prior value is seen once.
//   - OperationErrors: out of bounds, misaligned, unknown and deregistered
//     keys fail as *ftrma.OpError for the target rank, are reported once,
//     leave memory alone and do not break the link; bad ranks and oversized
//     messages are refused when posted.
//   - Keys: keys are non-zero, at most transport.MaxKey, not reused.
//   - MessagesInOrder: control messages of one pair arrive in order, from
//     several senders at once and toward self.
//   - MessagesFollowWrites: a message arrives after the writes posted
//     before it are visible.
//   - HeldUntilReceiver: messages sent before SetReceiver are delivered to
//     it, in order.
//   - PeerDown: after PeerDown every operation toward the peer fails with
//     ftrma.ErrProcFailed and the cause, and HandlePeerDown runs once.
//   - Fence: after Fence returns, operations toward the peer fail, the
//     peer's writes no longer land, and other ranks are not affected.
//   - Kill: a rank that dies is reported by HandlePeerDown at every other
//     rank, and operations toward it fail with ftrma.ErrProcFailed, within
//     Bound.
//   - Close: after Close every method fails with ftrma.ErrClosed, a second
//     Close returns, and the peers see the rank down.
func Run(t *testing.T, f Factory) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"WriteRead", testWriteRead},
		{"Atomics", testAtomics},
		{"AtomicsFromManyRanks", testAtomicsFromManyRanks},
		{"OperationErrors", testOperationErrors},
		{"Keys", testKeys},
		{"MessagesInOrder", testMessagesInOrder},
		{"MessagesFollowWrites", testMessagesFollowWrites},
		{"HeldUntilReceiver", testHeldUntilReceiver},
		{"PeerDown", testPeerDown},
		{"Fence", testFence},
		{"Kill", testKill},
		{"Close", testClose},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}

// Mem returns size bytes of zeroed, 8-byte aligned memory that tr can
// register: from its Alloc when it is a transport.Allocator (it stays until
// the transport closes), else from the Go heap.
func Mem(t testing.TB, tr transport.Transport, size int) []byte {
	t.Helper()
	if a, ok := tr.(transport.Allocator); ok {
		mem, err := a.Alloc(size)
		if err != nil {
			t.Fatalf("alloc %d bytes: %v", size, err)
		}
		return mem
	}
	if size == 0 {
		return []byte{}
	}
	w := make([]uint64, (size+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), size)
}

// word is the 8-byte word at byte offset off of mem, which must be 8-byte
// aligned there.
func word(mem []byte, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&mem[off]))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	t.Cleanup(cancel)
	// A failed test shows where every goroutine was (before the world's
	// cleanup, registered earlier, tears it down): a stuck operation
	// names its wait.
	t.Cleanup(func() {
		if t.Failed() {
			buf := make([]byte, 4<<20)
			t.Logf("goroutines when the test failed:\n%s", buf[:runtime.Stack(buf, true)])
		}
	})
	return ctx
}

// world builds a world of n ranks with a Recorder installed at each.
func world(t *testing.T, f Factory, n int) (*World, []*Recorder) {
	t.Helper()
	w := f(t, n)
	if len(w.Ranks) != n {
		t.Fatalf("the factory built %d ranks, want %d", len(w.Ranks), n)
	}
	recs := make([]*Recorder, n)
	for r, tr := range w.Ranks {
		if tr.Rank() != ftrma.Rank(r) || tr.Size() != n {
			t.Fatalf("rank %d says it is rank %d of %d", r, tr.Rank(), tr.Size())
		}
		recs[r] = NewRecorder()
		tr.SetReceiver(recs[r])
	}
	return w, recs
}

func register(t testing.TB, tr transport.Transport, mem []byte) transport.Key {
	t.Helper()
	k, err := tr.Register(mem)
	if err != nil {
		t.Fatalf("rank %d: register %d bytes: %v", tr.Rank(), len(mem), err)
	}
	return k
}

// complete waits for seq when posting succeeded.
func complete(ctx context.Context, tr transport.Transport, peer ftrma.Rank, seq transport.Seq, err error) error {
	if err != nil {
		return err
	}
	return tr.Wait(ctx, peer, seq)
}

func testWriteRead(t *testing.T, f Factory) {
	w, _ := world(t, f, 3)
	ctx := ctxFor(t)
	ts := w.Ranks
	const regionBytes = 200 << 10
	sizes := []int{0, 1, 7, 8, 9, 63, 64, 100, 4095, 4096, 4097, transport.WordAtomicWrite, transport.WordAtomicWrite + 1, 100 << 10, 150 << 10}
	// Peers write and read rank 1's memory; then rank 1 does the same
	// toward itself, in memory of its own (an emulating transport's
	// loopback path and its progress goroutines are ordered through the
	// network, which the race detector does not see).
	for _, pair := range []struct{ writer, reader int }{{0, 2}, {1, 1}} {
		mem := Mem(t, ts[1], regionBytes+16)
		for _, base := range []int{0, 8, 3} {
			reg := mem[base : base+regionBytes]
			key := register(t, ts[1], reg)
			for _, size := range sizes {
				for _, off := range []uint64{0, 1, 8, 13} {
					what := fmt.Sprintf("rank %d to rank 1, base %d size %d off %d", pair.writer, base, size, off)
					src := make([]byte, size)
					for i := range src {
						src[i] = byte(i*7 + size + int(off) + base)
					}
					if _, err := ts[pair.writer].Write(1, key, off, src); err != nil {
						t.Fatalf("%s: write: %v", what, err)
					}
					if err := ts[pair.writer].Flush(ctx, 1); err != nil {
						t.Fatalf("%s: flush: %v", what, err)
					}
					if !bytes.Equal(reg[off:off+uint64(size)], src) {
						t.Fatalf("%s: the owner's memory differs", what)
					}
					dst := make([]byte, size)
					seq, err := ts[pair.reader].Read(1, key, off, dst)
					if err := complete(ctx, ts[pair.reader], 1, seq, err); err != nil {
						t.Fatalf("%s: rank %d's read: %v", what, pair.reader, err)
					}
					if !bytes.Equal(dst, src) {
						t.Fatalf("%s: rank %d read back something else", what, pair.reader)
					}
				}
			}
			if err := ts[1].Deregister(key); err != nil {
				t.Fatal(err)
			}
		}
	}
	mem := Mem(t, ts[1], 64)
	// Write copies src before it returns: changing it afterwards does not
	// change what lands.
	key := register(t, ts[1], mem[:64])
	src := []byte("0123456789abcdef")
	if _, err := ts[0].Write(1, key, 0, src); err != nil {
		t.Fatal(err)
	}
	copy(src, "XXXXXXXXXXXXXXXX")
	if err := ts[0].Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := string(mem[:16]); got != "0123456789abcdef" {
		t.Fatalf("memory %q: the caller's later change of src landed", got)
	}
	// Flush with nothing pending returns at once.
	for r := range ts {
		if err := ts[r].Flush(ctx, 1); err != nil {
			t.Fatalf("rank %d: idle flush: %v", r, err)
		}
	}
}

func testAtomics(t *testing.T, f Factory) {
	w, _ := world(t, f, 2)
	ctx := ctxFor(t)
	ts := w.Ranks
	mem := Mem(t, ts[1], 16)
	key := register(t, ts[1], mem)
	for _, from := range []int{0, 1} {
		*word(mem, 8) = 0
		if from == 1 && !ts[1].Caps().Has(transport.CapLocalAtomics) {
			// Without CapLocalAtomics the owner's own store above is not
			// atomic with the transport's; reset through the transport.
			if seq, err := ts[0].Write(1, key, 8, make([]byte, 8)); complete(ctx, ts[0], 1, seq, err) != nil {
				t.Fatal(err)
			}
		}
		tr := ts[from]
		for _, s := range []struct {
			name             string
			cas              bool
			old, arg         uint64 // cas: old, new; fadd: arg is the delta
			wantPrior, wantW uint64
		}{
			{"cas hits", true, 0, 5, 0, 5},
			{"cas misses", true, 0, 7, 5, 5},
			{"cas hits again", true, 5, 7, 5, 7},
			{"fadd", false, 0, 3, 7, 10},
			{"fadd of -1 wraps", false, 0, math.MaxUint64, 10, 9},
		} {
			prior := uint64(12345)
			var seq transport.Seq
			var err error
			if s.cas {
				seq, err = tr.CompareAndSwap64(1, key, 8, s.old, s.arg, &prior)
			} else {
				seq, err = tr.FetchAndAdd64(1, key, 8, s.arg, &prior)
			}
			if err := complete(ctx, tr, 1, seq, err); err != nil {
				t.Fatalf("rank %d: %s: %v", from, s.name, err)
			}
			var cur [8]byte
			seq, err = tr.Read(1, key, 8, cur[:])
			if err := complete(ctx, tr, 1, seq, err); err != nil {
				t.Fatal(err)
			}
			if got := binary.NativeEndian.Uint64(cur[:]); prior != s.wantPrior || got != s.wantW {
				t.Fatalf("rank %d: %s: prior %d, word %d; want %d, %d", from, s.name, prior, got, s.wantPrior, s.wantW)
			}
		}
		// FetchAndAdd64 allows a nil result.
		if _, err := tr.FetchAndAdd64(1, key, 8, 2, nil); err != nil {
			t.Fatal(err)
		}
		if err := tr.Flush(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := atomic.LoadUint64(word(mem, 8)); got != 11 {
			t.Fatalf("rank %d: word %d after a fetch-and-add with a nil result, want 11", from, got)
		}
	}
}

func testAtomicsFromManyRanks(t *testing.T, f Factory) {
	const n, goroutines, iters = 4, 2, 200
	w, _ := world(t, f, n)
	ctx := ctxFor(t)
	ts := w.Ranks
	mem := Mem(t, ts[0], 16)
	key := register(t, ts[0], mem)
	olds := make(chan uint64, n*goroutines*iters)
	errc := make(chan error, n*goroutines)
	var wg sync.WaitGroup
	for r := range ts {
		for g := range goroutines {
			wg.Go(func() {
				tr := ts[r] // rank 0 reaches its own memory through its transport
				for range iters {
					var old uint64
					if g%2 == 0 {
						seq, err := tr.FetchAndAdd64(0, key, 8, 1, &old)
						if err := complete(ctx, tr, 0, seq, err); err != nil {
							errc <- err
							return
						}
					} else {
						for cur := uint64(0); ; cur = old {
							seq, err := tr.CompareAndSwap64(0, key, 8, cur, cur+1, &old)
							if err := complete(ctx, tr, 0, seq, err); err != nil {
								errc <- err
								return
							}
							if old == cur {
								break
							}
						}
					}
					olds <- old
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	close(olds)
	for err := range errc {
		t.Fatal(err)
	}
	const total = n * goroutines * iters
	if got := atomic.LoadUint64(word(mem, 8)); got != total {
		t.Fatalf("counter is %d, want %d: updates were lost", got, total)
	}
	var all []uint64
	for v := range olds {
		all = append(all, v)
	}
	slices.Sort(all)
	for i, v := range all {
		if v != uint64(i) {
			t.Fatalf("prior value %d where %d was due: the increments did not each see a distinct value", v, i)
		}
	}
	if got := atomic.LoadUint64(word(mem, 0)); got != 0 {
		t.Fatalf("the neighbouring word changed to %d", got)
	}
}

func testOperationErrors(t *testing.T, f Factory) {
	w, _ := world(t, f, 2)
	ctx := ctxFor(t)
	a, b := w.Ranks[0], w.Ranks[1]
	mem := Mem(t, b, 64)
	key := register(t, b, mem)
	odd := register(t, b, mem[4:36])
	gone := register(t, b, mem[:8])
	if err := b.Deregister(gone); err != nil {
		t.Fatal(err)
	}
	if err := b.Deregister(gone); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Fatalf("second deregister: %v, want ErrUnknownRegion", err)
	}
	for i := range 8 {
		*word(mem, 8*i) = 0
	}
	var result uint64
	readDst := bytes.Repeat([]byte{0xaa}, 16)
	for _, c := range []struct {
		name, op string
		post     func() (transport.Seq, error)
		want     error
	}{
		{"write past the end", "write", func() (transport.Seq, error) { return a.Write(1, key, 60, make([]byte, 8)) }, ftrma.ErrOutOfBounds},
		{"write at a huge offset", "write", func() (transport.Seq, error) { return a.Write(1, key, math.MaxUint64-3, make([]byte, 8)) }, ftrma.ErrOutOfBounds},
		{"read past the end", "read", func() (transport.Seq, error) { return a.Read(1, key, 56, readDst) }, ftrma.ErrOutOfBounds},
		{"read at a huge offset", "read", func() (transport.Seq, error) { return a.Read(1, key, 1<<63, readDst[:1]) }, ftrma.ErrOutOfBounds},
		{"empty read beyond the end", "read", func() (transport.Seq, error) { return a.Read(1, key, 65, nil) }, ftrma.ErrOutOfBounds},
		{"cas past the end", "cas", func() (transport.Seq, error) { return a.CompareAndSwap64(1, key, 64, 0, 1, &result) }, ftrma.ErrOutOfBounds},
		{"fadd past the end", "fadd", func() (transport.Seq, error) { return a.FetchAndAdd64(1, key, 64, 1, &result) }, ftrma.ErrOutOfBounds},
		{"misaligned cas", "cas", func() (transport.Seq, error) { return a.CompareAndSwap64(1, key, 4, 0, 1, &result) }, ftrma.ErrMisaligned},
		{"misaligned fadd", "fadd", func() (transport.Seq, error) { return a.FetchAndAdd64(1, key, 12, 1, &result) }, ftrma.ErrMisaligned},
		{"fadd in a misaligned region", "fadd", func() (transport.Seq, error) { return a.FetchAndAdd64(1, odd, 0, 1, &result) }, ftrma.ErrMisaligned},
		{"write to an unknown key", "write", func() (transport.Seq, error) { return a.Write(1, key+100, 0, []byte{1}) }, ftrma.ErrUnknownRegion},
		{"write to key 0", "write", func() (transport.Seq, error) { return a.Write(1, 0, 0, []byte{1}) }, ftrma.ErrUnknownRegion},
		{"read of a deregistered key", "read", func() (transport.Seq, error) { return a.Read(1, gone, 0, readDst[:8]) }, ftrma.ErrUnknownRegion},
		{"fadd on a deregistered key", "fadd", func() (transport.Seq, error) { return a.FetchAndAdd64(1, gone, 0, 1, &result) }, ftrma.ErrUnknownRegion},
	} {
		seq, err := c.post()
		if err != nil {
			t.Fatalf("%s: posting failed: %v", c.name, err)
		}
		err = a.Wait(ctx, 1, seq)
		var oe *ftrma.OpError
		if !errors.Is(err, c.want) || !errors.As(err, &oe) || oe.Rank != 1 {
			t.Fatalf("%s: %v, want an *ftrma.OpError for rank 1 wrapping %v", c.name, err, c.want)
		}
		if err := a.Flush(ctx, 1); err != nil {
			t.Fatalf("%s: the error was reported twice: flush %v", c.name, err)
		}
		if result != 0 {
			t.Fatalf("%s: a failed atomic stored result %d", c.name, result)
		}
		if !bytes.Equal(readDst, bytes.Repeat([]byte{0xaa}, 16)) {
			t.Fatalf("%s: a failed read changed its destination: %x", c.name, readDst)
		}
		for i := range 8 {
			if v := atomic.LoadUint64(word(mem, 8*i)); v != 0 {
				t.Fatalf("%s: a failed operation changed word %d to %#x", c.name, i, v)
			}
		}
	}
	// An error among successes is reported by the next Flush, once; the
	// link goes on working.
	if _, err := a.Write(1, key, 64, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(1, key, 56, []byte{42}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, 1); !errors.Is(err, ftrma.ErrOutOfBounds) {
		t.Fatalf("flush: %v, want the earlier bounds error", err)
	}
	if err := a.Flush(ctx, 1); err != nil {
		t.Fatalf("second flush: %v", err)
	}
	if got := atomic.LoadUint64(word(mem, 56)); got&0xff != 42 {
		t.Fatalf("the write after the failed one did not land: %#x", got)
	}
	// Arguments refused when posted.
	var res uint64
	for name, err := range map[string]error{
		"write to rank 2 of 2": func() error { _, err := a.Write(2, key, 0, nil); return err }(),
		"read from rank -1":    func() error { _, err := a.Read(-1, key, 0, nil); return err }(),
		"cas on rank 7":        func() error { _, err := a.CompareAndSwap64(7, key, 0, 0, 1, &res); return err }(),
		"fadd on rank 2":       func() error { _, err := a.FetchAndAdd64(2, key, 0, 1, &res); return err }(),
		"send to rank 2":       a.Send(2, nil),
		"send to rank -1":      a.Send(-1, nil),
	} {
		if !errors.Is(err, ftrma.ErrRankOutOfRange) {
			t.Errorf("%s: %v, want ErrRankOutOfRange", name, err)
		}
	}
	if err := a.Send(1, make([]byte, transport.MaxControlMessage+1)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("oversized send: %v, want ErrInvalid", err)
	}
	if err := a.Send(1, make([]byte, transport.MaxControlMessage)); err != nil {
		t.Errorf("send of the largest message: %v", err)
	}
}

func testKeys(t *testing.T, f Factory) {
	w, _ := world(t, f, 2)
	tr := w.Ranks[0]
	mem := Mem(t, tr, 64)
	seen := map[transport.Key]bool{}
	var live []transport.Key
	for i := range 200 {
		k := register(t, tr, mem[8:16])
		if k == 0 || k > transport.MaxKey || seen[k] {
			t.Fatalf("registration %d: key %d (handed out before: %v)", i, k, seen[k])
		}
		seen[k] = true
		if i%2 == 0 {
			live = append(live, k) // keep some, free some
			if len(live) > 8 {
				if err := tr.Deregister(live[0]); err != nil {
					t.Fatal(err)
				}
				live = live[1:]
			}
		} else if err := tr.Deregister(k); err != nil {
			t.Fatal(err)
		}
	}
}

func testMessagesInOrder(t *testing.T, f Factory) {
	const n, goroutines, count = 3, 2, 200
	w, recs := world(t, f, n)
	ctx := ctxFor(t)
	ts := w.Ranks
	size := func(i int) int { return 8 + (i*13)%300 }
	errc := make(chan error, n*goroutines)
	var wg sync.WaitGroup
	for from := range ts {
		for g := range goroutines {
			wg.Go(func() {
				for i := range count {
					for to := range ts {
						msg := make([]byte, size(i))
						msg[0], msg[5] = byte(g), byte(from)
						binary.BigEndian.PutUint32(msg[1:], uint32(i))
						if err := ts[from].Send(ftrma.Rank(to), msg); err != nil {
							errc <- err
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for to, rec := range recs {
		rec.Await(t, ctx, fmt.Sprintf("rank %d's messages", to), func() bool { return rec.Count() >= n*goroutines*count })
		for from := range ts {
			next := make([]uint32, goroutines)
			for _, m := range rec.From(ftrma.Rank(from)) {
				g, i := m[0], binary.BigEndian.Uint32(m[1:])
				if int(g) >= goroutines || int(m[5]) != from || i != next[g] || len(m) != size(int(i)) {
					t.Fatalf("rank %d got message %d of goroutine %d of rank %d (%d bytes), want message %d", to, i, g, m[5], len(m), next[g])
				}
				next[g]++
			}
		}
		if got := rec.Count(); got != n*goroutines*count {
			t.Fatalf("rank %d got %d messages, want %d", to, got, n*goroutines*count)
		}
	}
}

func testMessagesFollowWrites(t *testing.T, f Factory) {
	const rounds = 300
	w, _ := world(t, f, 2)
	ctx := ctxFor(t)
	ts := w.Ranks
	for _, from := range []int{0, 1} { // a peer, and self
		mem := Mem(t, ts[1], 8)
		key := register(t, ts[1], mem)
		rec := NewRecorder()
		var bad atomic.Int64
		rec.Hook = func(_ ftrma.Rank, msg []byte) {
			// The word only grows; later writes may have landed too.
			if atomic.LoadUint64(word(mem, 0)) < binary.NativeEndian.Uint64(msg) {
				bad.Add(1)
			}
		}
		ts[1].SetReceiver(rec)
		for i := uint64(1); i <= rounds; i++ {
			b := binary.NativeEndian.AppendUint64(nil, i)
			if _, err := ts[from].Write(1, key, 0, b); err != nil {
				t.Fatal(err)
			}
			if err := ts[from].Send(1, b); err != nil {
				t.Fatal(err)
			}
		}
		rec.Await(t, ctx, "the messages", func() bool { return rec.Count() >= rounds })
		for i, m := range rec.From(ftrma.Rank(from)) {
			if got := binary.NativeEndian.Uint64(m); got != uint64(i+1) {
				t.Fatalf("from rank %d: message %d is %d: out of order", from, i+1, got)
			}
		}
		if n := bad.Load(); n != 0 {
			t.Fatalf("from rank %d: %d messages arrived before the write posted before them was visible", from, n)
		}
		if err := ts[from].Flush(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
}

func testHeldUntilReceiver(t *testing.T, f Factory) {
	w := f(t, 2) // no receivers yet
	ctx := ctxFor(t)
	ts := w.Ranks
	for i := range 10 {
		if err := ts[0].Send(1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].Send(1, []byte{byte(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Rank 0's messages have arrived when a write posted after them is
	// complete (messages and operations toward one peer stay in order).
	mem := Mem(t, ts[1], 8)
	key := register(t, ts[1], mem)
	if seq, err := ts[0].Write(1, key, 0, []byte{1}); complete(ctx, ts[0], 1, seq, err) != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	ts[1].SetReceiver(rec)
	rec.Await(t, ctx, "the held messages", func() bool { return rec.Count() >= 20 })
	for from, first := range map[ftrma.Rank]byte{0: 0, 1: 100} {
		got := rec.From(from)
		if len(got) != 10 {
			t.Fatalf("%d messages from rank %d, want 10", len(got), from)
		}
		for i, m := range got {
			if len(m) != 1 || m[0] != first+byte(i) {
				t.Fatalf("message %d from rank %d is %v, want [%d]", i, from, m, first+byte(i))
			}
		}
	}
}

func testPeerDown(t *testing.T, f Factory) {
	w, recs := world(t, f, 3)
	ctx := ctxFor(t)
	ts := w.Ranks
	mem := Mem(t, ts[1], 64)
	key := register(t, ts[1], mem)
	if seq, err := ts[0].Write(1, key, 0, []byte{1}); complete(ctx, ts[0], 1, seq, err) != nil {
		t.Fatal(err)
	}
	cause := errors.New("the launcher saw it exit")
	ts[0].PeerDown(1, cause)
	ts[0].PeerDown(1, errors.New("again"))
	for name, err := range opsToward(ctx, ts[0], 1, key, 2) {
		if !errors.Is(err, ftrma.ErrProcFailed) || !errors.Is(err, cause) {
			t.Errorf("%s toward a rank reported down: %v, want ErrProcFailed and the cause", name, err)
		}
	}
	recs[0].Await(t, ctx, "the peer-down event", func() bool { return len(recs[0].DownsOf(1)) > 0 })
	ts[0].PeerDown(0, cause) // self: ignored
	// Rank 2 still reaches rank 1; a message of rank 0 to rank 2 sent after
	// the event arrives after it, so a second event would have shown by then.
	if seq, err := ts[2].Write(1, key, 8, []byte{7}); complete(ctx, ts[2], 1, seq, err) != nil || mem[8] != 7 {
		t.Fatalf("rank 2's write toward rank 1: %v", err)
	}
	if err := ts[0].Send(0, []byte("after")); err != nil {
		t.Fatal(err)
	}
	recs[0].Await(t, ctx, "the message to self", func() bool { return len(recs[0].From(0)) == 1 })
	downs := recs[0].DownsOf(1)
	if len(downs) != 1 || !errors.Is(downs[0], ftrma.ErrProcFailed) || !errors.Is(downs[0], cause) {
		t.Fatalf("peer-down events for rank 1: %v, want one wrapping ErrProcFailed and the cause", downs)
	}
	if len(recs[0].DownsOf(0)) != 0 {
		t.Fatal("PeerDown of self was reported")
	}
}

func testFence(t *testing.T, f Factory) {
	w, recs := world(t, f, 3)
	ctx := ctxFor(t)
	ts := w.Ranks
	mem0 := Mem(t, ts[0], 64)
	key0 := register(t, ts[0], mem0)
	mem1 := Mem(t, ts[1], 64)
	key1 := register(t, ts[1], mem1)

	// Rank 1 writes a counter into rank 0's word 0 without pause, across
	// the fence.
	var posted atomic.Int64
	stop := make(chan struct{})
	writer := make(chan error, 1)
	go func() {
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				writer <- nil
				return
			default:
			}
			if _, err := ts[1].Write(0, key0, 0, binary.NativeEndian.AppendUint64(nil, i)); err != nil {
				writer <- err
				return
			}
			if i%64 == 0 {
				ts[1].Push(0)
			}
			posted.Add(1)
		}
	}()
	start := time.Now()
	for posted.Load() < 200 {
		select {
		case err := <-writer:
			t.Fatalf("the writer stopped before the fence: %v", err)
		case <-ctx.Done():
			t.Fatalf("the writer posted %d writes in %v, want 200", posted.Load(), time.Since(start))
		default:
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("%v: 200 writes posted; fencing", time.Since(start))
	if err := ts[0].Fence(1); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: fenced", time.Since(start))
	landed := atomic.LoadUint64(word(mem0, 0))
	// Give the writer time to post more (unless it saw the fence and
	// stopped), then stop it and let what it posted reach rank 0, or fail.
	stopped := false
	for target := posted.Load() + 200; !stopped && posted.Load() < target; {
		select {
		case <-writer:
			stopped = true
		case <-ctx.Done():
			t.Fatalf("after the fence the writer neither posted 200 more writes nor stopped (%d posted)", posted.Load())
		default:
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	t.Logf("%v: writer stopped (%v) after %d posts", time.Since(start), stopped, posted.Load())
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ts[1].Flush(fctx, 0) // any outcome: the fenced rank need not know yet
	cancel()
	if got := atomic.LoadUint64(word(mem0, 0)); got != landed {
		t.Fatalf("rank 1's write of %d landed after the fence (%d before)", got, landed)
	}

	// Rank 0's side: everything toward rank 1 fails; one peer-down event.
	for name, err := range opsToward(ctx, ts[0], 1, key1, 1) {
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("%s toward a fenced rank: %v, want ErrProcFailed", name, err)
		}
	}
	if mem1[0] != 0 {
		t.Fatalf("rank 0's write reached the rank it fenced")
	}
	recs[0].Await(t, ctx, "the peer-down event", func() bool { return len(recs[0].DownsOf(1)) > 0 })
	if err := ts[0].Fence(1); err != nil {
		t.Fatalf("second fence: %v", err)
	}
	// Rank 2 is not affected, either way.
	t.Logf("%v: rank 0's side checked", time.Since(start))
	if seq, err := ts[2].Write(0, key0, 8, []byte{7}); complete(ctx, ts[2], 0, seq, err) != nil || mem0[8] != 7 {
		t.Fatalf("rank 2's write toward rank 0: %v (byte %d)", complete(ctx, ts[2], 0, seq, err), mem0[8])
	}
	if seq, err := ts[2].Write(1, key1, 8, []byte{9}); complete(ctx, ts[2], 1, seq, err) != nil || mem1[8] != 9 {
		t.Fatalf("rank 2's write toward rank 1: %v (byte %d)", complete(ctx, ts[2], 1, seq, err), mem1[8])
	}
	if err := ts[2].Send(0, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	recs[0].Await(t, ctx, "rank 2's message", func() bool { return len(recs[0].From(2)) == 1 })
	if n := len(recs[0].DownsOf(1)); n != 1 {
		t.Fatalf("%d peer-down events for the fenced rank, want 1", n)
	}
	if n := len(recs[0].DownsOf(2)); n != 0 {
		t.Fatal("rank 2 was reported down")
	}
}

func testKill(t *testing.T, f Factory) {
	w, recs := world(t, f, 3)
	ctx := ctxFor(t)
	ts := w.Ranks
	mem := Mem(t, ts[1], 64)
	key := register(t, ts[1], mem)
	if seq, err := ts[0].Write(1, key, 0, []byte{1}); complete(ctx, ts[0], 1, seq, err) != nil {
		t.Fatal(err)
	}
	if w.Kill != nil {
		w.Kill(1)
	} else {
		ts[1].Close()
	}
	for _, r := range []int{0, 2} {
		recs[r].Await(t, ctx, fmt.Sprintf("rank %d's peer-down event for the dead rank", r), func() bool { return len(recs[r].DownsOf(1)) > 0 })
		if err := recs[r].DownsOf(1)[0]; !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d: peer-down error %v, want ErrProcFailed", r, err)
		}
		tr := ts[r]
		seq, err := tr.Write(1, key, 0, []byte{2})
		if err := complete(ctx, tr, 1, seq, err); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d: write toward the dead rank: %v, want ErrProcFailed", r, err)
		}
		if err := tr.Flush(ctx, 1); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d: flush toward the dead rank: %v, want ErrProcFailed", r, err)
		}
		if err := tr.Send(1, []byte("x")); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("rank %d: send toward the dead rank: %v, want ErrProcFailed", r, err)
		}
	}
	// The survivors still reach each other.
	mem0 := Mem(t, ts[0], 8)
	key0 := register(t, ts[0], mem0)
	if seq, err := ts[2].Write(0, key0, 0, []byte{5}); complete(ctx, ts[2], 0, seq, err) != nil || mem0[0] != 5 {
		t.Fatalf("rank 2's write toward rank 0 after the death: %v", err)
	}
	if n := len(recs[0].DownsOf(2)) + len(recs[2].DownsOf(0)); n != 0 {
		t.Fatal("a survivor was reported down")
	}
}

func testClose(t *testing.T, f Factory) {
	w, recs := world(t, f, 2)
	ctx := ctxFor(t)
	ts := w.Ranks
	mem := Mem(t, ts[1], 64)
	key := register(t, ts[1], mem)
	cl := ts[1]
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	var res uint64
	for name, err := range map[string]error{
		"write":      func() error { _, err := cl.Write(0, 1, 0, nil); return err }(),
		"read":       func() error { _, err := cl.Read(0, 1, 0, nil); return err }(),
		"cas":        func() error { _, err := cl.CompareAndSwap64(0, 1, 0, 0, 0, &res); return err }(),
		"fadd":       func() error { _, err := cl.FetchAndAdd64(0, 1, 0, 0, &res); return err }(),
		"wait":       cl.Wait(ctx, 0, 1),
		"flush":      cl.Flush(ctx, 0),
		"send":       cl.Send(0, nil),
		"send self":  cl.Send(1, nil),
		"fence":      cl.Fence(0),
		"register":   func() error { _, err := cl.Register(mem); return err }(),
		"deregister": cl.Deregister(key),
	} {
		if !errors.Is(err, ftrma.ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", name, err)
		}
	}
	cl.Close() // returns (its error is the transport's business)
	recs[0].Await(t, ctx, "the peer-down event for the closed rank", func() bool { return len(recs[0].DownsOf(1)) > 0 })
	if err := recs[0].DownsOf(1)[0]; !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("peer-down error %v, want ErrProcFailed", err)
	}
	seq, err := ts[0].Write(1, key, 0, []byte{1})
	if err := complete(ctx, ts[0], 1, seq, err); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("write toward a closed rank: %v, want ErrProcFailed", err)
	}
}

// opsToward runs one of each operation of t toward peer (on key at offset
// 0; a write stores v) and returns each one's error, for the checks that
// every kind fails alike toward a rank that is down or fenced.
func opsToward(ctx context.Context, t transport.Transport, peer ftrma.Rank, key transport.Key, v byte) map[string]error {
	var res uint64
	return map[string]error{
		"write": func() error { _, err := t.Write(peer, key, 0, []byte{v}); return err }(),
		"read": func() error {
			seq, err := t.Read(peer, key, 0, make([]byte, 1))
			return complete(ctx, t, peer, seq, err)
		}(),
		"cas": func() error {
			seq, err := t.CompareAndSwap64(peer, key, 0, 0, 1, &res)
			return complete(ctx, t, peer, seq, err)
		}(),
		"fadd":  func() error { _, err := t.FetchAndAdd64(peer, key, 0, 1, nil); return err }(),
		"send":  t.Send(peer, nil),
		"flush": t.Flush(ctx, peer),
	}
}
