//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Alloc hands out aligned memory of the size asked (reads and writes on it
// are in the contract suite).
func TestAllocAligned(t *testing.T) {
	ts, _, _ := cluster(t, 1, clusterOpts{})
	for _, size := range []int{1, 64, 256 << 10} {
		mem := must(ts[0].Alloc(size))
		if uintptrOf(mem)%8 != 0 || len(mem) != size || cap(mem) != size {
			t.Fatalf("Alloc(%d) returned %d/%d bytes at %#x", size, len(mem), cap(mem), uintptrOf(mem))
		}
		if err := ts[0].Release(mem); err != nil {
			t.Fatal(err)
		}
	}
}

func uintptrOf(b []byte) uintptr {
	return uintptr(unsafePointer(b))
}

// The rules of shm's memory and arguments (the errors every transport
// reports are in the contract suite).
func TestOperationErrors(t *testing.T) {
	ts, _, _ := cluster(t, 2, clusterOpts{})
	ctx := testCtx(t)
	a, b := ts[0], ts[1]
	mem := must(b.Alloc(64))
	key := must(b.Register(mem))
	odd := must(b.Register(mem[4:36]))

	// Deregistered keys are unknown, toward self too.
	if err := b.Deregister(key); err != nil {
		t.Fatal(err)
	}
	seq, err := b.Read(1, key, 0, make([]byte, 1))
	if err != nil || !errors.Is(b.Wait(ctx, 1, seq), ftrma.ErrUnknownRegion) {
		t.Fatal("read toward self after deregister did not fail with ErrUnknownRegion")
	}
	for _, k := range []transport.Key{12345, transport.MaxKey, transport.MaxKey + 1} {
		seq, err = a.Write(1, k, 0, []byte{1})
		if err == nil {
			err = a.Wait(ctx, 1, seq)
		}
		if !errors.Is(err, ftrma.ErrUnknownRegion) {
			t.Fatalf("write to key %d: %v", k, err)
		}
	}

	// Memory rules.
	beyond := unsafeSlice(unsafePointer(mem), 5000) // past the segment's one page
	if _, err := b.Register(beyond); !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "inside memory from Alloc but is not inside it") {
		t.Fatalf("register memory past the end of a segment: %v", err)
	}
	if err := b.Release(mem); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("release of registered memory: %v", err)
	}
	if err := b.Deregister(odd); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string][]byte{"heap memory": make([]byte, 64), "a sub-slice": mem[8:], "nil": nil} {
		if err := b.Release(m); !errors.Is(err, ftrma.ErrInvalid) {
			t.Fatalf("release of %s: %v", name, err)
		}
	}
	if err := b.Release(mem); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(mem); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("second release: %v", err)
	}
	if _, err := b.Alloc(-1); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("alloc of -1 bytes: %v", err)
	}
	empty := must(b.Alloc(0))
	ek := must(b.Register(empty))
	if seq, err := a.Write(1, ek, 0, nil); err != nil || a.Wait(ctx, 1, seq) != nil {
		t.Fatalf("empty write to an empty region: %v", err)
	}

	// Arguments.
	if err := a.Wait(ctx, 1, a.peers[1].comp.Posted()+1); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("wait for an unposted sequence: %v", err)
	}
	if err := a.Fence(0); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("fence of self: %v", err)
	}
	if got := a.Caps(); !got.Has(transport.CapOneSided | transport.CapNativeAtomics | transport.CapOrdered | transport.CapRemoteCompletion) {
		t.Fatalf("caps %b", got)
	}
}

func TestConfigAndOpenErrors(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []Config{
		{Rank: 0, Size: 0, Job: "j"},
		{Rank: 2, Size: 2, Job: "j"},
		{Rank: -1, Size: 2, Job: "j"},
	} {
		cfg.Dir = dir
		if _, err := Open(cfg); !errors.Is(err, ftrma.ErrRankOutOfRange) {
			t.Errorf("Open(%+v): %v", cfg, err)
		}
	}
	for _, job := range []string{"", "a/b", "..", "a b", strings.Repeat("x", 129)} {
		if _, err := Open(Config{Size: 1, Job: job, Dir: dir}); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("job %q: %v", job, err)
		}
	}
	if _, err := Open(Config{Size: 1, Job: "j", Dir: dir, RingBytes: 1000}); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("tiny ring: %v", err)
	}
	tr, err := Open(Config{Size: 2, Job: "j", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := Open(Config{Size: 2, Job: "j", Dir: dir}); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "RemoveJob") {
		t.Fatalf("second Open of rank 0: %v", err)
	}
	// A peer of a different size is refused when mapped.
	other, err := Open(Config{Rank: 1, Size: 3, Job: "j", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := tr.Connect(ctx); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("connect to a rank of another size: %v", err)
	}
}

func TestConnectWaitsForPeers(t *testing.T) {
	dir := t.TempDir()
	a := must(Open(Config{Rank: 0, Size: 2, Job: "j", Dir: dir}))
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := a.Connect(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect without the peer: %v", err)
	}
	if err := a.Send(1, []byte("x")); !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "not opened") {
		t.Fatalf("send to a rank that has not opened: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- a.Connect(ctx)
	}()
	time.Sleep(20 * time.Millisecond)
	b := must(Open(Config{Rank: 1, Size: 2, Job: "j", Dir: dir}))
	defer b.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// b never called Connect: it maps a when it first sends.
	rec := newRecorder()
	a.SetReceiver(rec)
	if err := b.Send(0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	rec.Await(t, testCtx(t), "the message", func() bool { return rec.Count() == 1 })
}

// A reader never sees an aligned word half written, for writes up to
// transport.WordAtomicWrite, aligned or not.
func TestWordAtomicity(t *testing.T) {
	ts, _, _ := cluster(t, 3, clusterOpts{})
	ctx := testCtx(t)
	const size = transport.WordAtomicWrite
	mem := must(ts[0].Alloc(size + 64))
	key := must(ts[0].Register(mem))
	patterns := [2][]byte{bytes.Repeat([]byte{0x11}, size), bytes.Repeat([]byte{0xee}, size)}
	for _, off := range []uint64{0, 3} {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		stopWriter := sync.OnceFunc(func() { close(stop); wg.Wait() })
		defer stopWriter()
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := ts[1].Write(0, key, off, patterns[i%2][off:]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		dst := make([]byte, size)
		deadline := time.Now().Add(150 * time.Millisecond)
		for reads := 0; reads < 20 || time.Now().Before(deadline); reads++ {
			seq, err := ts[2].Read(0, key, 0, dst)
			if err == nil {
				err = ts[2].Wait(ctx, 0, seq)
			}
			if err != nil {
				t.Fatal(err)
			}
			for w := 1; w < size/8; w++ { // word 0 is partly covered when off is 3
				v := binary.NativeEndian.Uint64(dst[8*w:])
				if v != 0 && v != 0x1111111111111111 && v != 0xeeeeeeeeeeeeeeee {
					t.Fatalf("offset %d: word %d read as %#x: torn", off, w, v)
				}
			}
		}
		stopWriter()
	}
}

// Large messages wrap around the ring's end many times; in rings smaller
// than twice a message they go in pieces, delivered whole and in order.
func TestLargeMessagesWrapAround(t *testing.T) {
	for _, ring := range []int{defaultRingBytes, minRingBytes, 3*minRingBytes + 8} {
		t.Run(fmt.Sprint(ring), func(t *testing.T) { testLargeMessages(t, ring) })
	}
}

func testLargeMessages(t *testing.T, ring int) {
	ts, rs, _ := cluster(t, 3, clusterOpts{cfg: func(c *Config) { c.RingBytes = ring }})
	ctx := testCtx(t)
	sizes := []int{transport.MaxControlMessage, 1, 777, transport.MaxControlMessage - 1, 40000, 0, 65535, 8, 12345, ring/2 - 8, ring/2 - 7, min(ring, transport.MaxControlMessage)}
	const count = 60
	body := func(from, i int) []byte {
		m := make([]byte, sizes[i%len(sizes)])
		for j := range m {
			m[j] = byte(i + j*31 + from)
		}
		return m
	}
	for _, from := range []int{0, 2} { // two senders interleave their pieces at rank 1
		go func() {
			for i := range count {
				if err := ts[from].Send(1, body(from, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	rs[1].Await(t, ctx, "every message", func() bool { return rs[1].Count() == 2*count })
	for _, from := range []int{0, 2} {
		for i, m := range rs[1].From(ftrma.Rank(from)) {
			if !bytes.Equal(m, body(from, i)) {
				t.Fatalf("message %d from rank %d: %d bytes differ from the %d sent", i, from, len(m), len(body(from, i)))
			}
		}
	}
	if head := atomic.LoadUint64(ts[1].peers[0].in.head); head <= 2*uint64(ring) {
		t.Fatalf("the ring did not wrap: %d bytes consumed", head)
	}
}

// The default rings shrink as the served ranks grow, so that a host's rings
// stay within ringBytesPerHost per rank.
func TestDefaultRingBytes(t *testing.T) {
	for _, c := range []struct{ ranks, want int }{{2, 128 << 10}, {16, 128 << 10}, {17, (ringBytesPerHost/17 + 7) &^ 7}, {64, 32 << 10}, {256, 8 << 10}, {1024, 8 << 10}} {
		cfg, err := Config{Rank: 0, Size: c.ranks, Job: "j"}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.RingBytes != c.want {
			t.Errorf("%d ranks: rings of %d bytes, want %d", c.ranks, cfg.RingBytes, c.want)
		}
	}
}

// A full ring makes Send wait for the receiver; nothing is lost.
func TestFullRingWaitsForSlowReceiver(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{noReceiver: true, cfg: func(c *Config) { c.RingBytes = minRingBytes }})
	ctx := testCtx(t)
	release := make(chan struct{})
	var first sync.Once
	rs[1].Hook = func(ftrma.Rank, []byte) {
		first.Do(func() { <-release }) // the receiver stalls on its first message
	}
	ts[1].SetReceiver(rs[1])
	const count, size = 500, 1000
	var sent atomic.Int64
	go func() {
		for i := range count {
			m := make([]byte, size)
			binary.BigEndian.PutUint32(m, uint32(i))
			if err := ts[0].Send(1, m); err != nil {
				t.Error(err)
				return
			}
			sent.Add(1)
		}
	}()
	// The sender stops once the ring is full.
	for last := int64(-1); ; {
		time.Sleep(30 * time.Millisecond)
		n := sent.Load()
		if n == last {
			break
		}
		last = n
	}
	if n := sent.Load(); n == count || n*(size+msgHeader) < minRingBytes-size {
		t.Fatalf("the sender stopped after %d messages of %d bytes with a ring of %d bytes", n, size, minRingBytes)
	}
	close(release)
	rs[1].Await(t, ctx, "every message", func() bool { return rs[1].Count() == count })
	for i, m := range rs[1].From(0) {
		if binary.BigEndian.Uint32(m) != uint32(i) || len(m) != size {
			t.Fatalf("message %d is %d", i, binary.BigEndian.Uint32(m))
		}
	}
}

// Messages that arrive before the receiver is set wait for it.
func TestMessagesHeldUntilReceiver(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{noReceiver: true})
	ctx := testCtx(t)
	for i := range 10 {
		if err := ts[0].Send(1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].Send(1, []byte{byte(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	ts[1].PeerDown(0, errors.New("test"))
	time.Sleep(20 * time.Millisecond)
	ts[1].SetReceiver(rs[1])
	rs[1].Await(t, ctx, "held messages", func() bool { return rs[1].Count() == 10 && len(rs[1].DownsOf(0)) == 1 })
	for i, m := range rs[1].From(1) {
		if m[0] != byte(100+i) {
			t.Fatalf("self message %d is %d", i, m[0])
		}
	}
	// Rank 0's messages were dropped with it: it is down.
	if got := rs[1].From(0); len(got) != 0 {
		t.Fatalf("%d messages of a rank reported down were delivered", len(got))
	}
}

// The fenced rank notices the fence, as a closed connection, and the
// fencing rank unmaps its segments (the fence itself is in the contract
// suite).
func TestFence(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{})
	ctx := testCtx(t)
	mem0 := must(ts[0].Alloc(64))
	key0 := must(ts[0].Register(mem0))
	mem1 := must(ts[1].Alloc(64))
	key1 := must(ts[1].Register(mem1))
	if seq, err := ts[0].Write(1, key1, 0, []byte{1}); err != nil || ts[0].Wait(ctx, 1, seq) != nil {
		t.Fatal(err) // rank 0 maps rank 1's segment
	}
	if err := ts[0].Fence(1); err != nil {
		t.Fatal(err)
	}
	rs[1].Await(t, ctx, "rank 1's peer-down event", func() bool { return len(rs[1].DownsOf(0)) == 1 })
	if _, err := ts[1].Write(0, key0, 0, []byte{1}); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("write by the fenced rank: %v", err)
	}
	if err := ts[1].Send(0, nil); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("send by the fenced rank: %v", err)
	}
	if ts[0].peers[1].ctl != nil || len(*ts[0].peers[1].segs.Load()) != 0 {
		t.Fatal("the fenced rank's segments are still mapped")
	}
}

// Messages of a fenced rank waiting in the ring are not delivered; Fence
// works while the receiver is busy with one of them.
func TestFenceDropsQueuedMessages(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{noReceiver: true})
	ctx := testCtx(t)
	inside, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	rs[0].Hook = func(ftrma.Rank, []byte) {
		first.Do(func() { close(inside); <-release })
	}
	ts[0].SetReceiver(rs[0])
	for i := range 20 {
		if err := ts[1].Send(0, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	<-inside
	if err := ts[0].Fence(1); err != nil {
		t.Fatal(err)
	}
	close(release)
	rs[0].Await(t, ctx, "the peer-down event", func() bool { return len(rs[0].DownsOf(1)) == 1 })
	time.Sleep(20 * time.Millisecond)
	if n := len(rs[0].From(1)); n != 1 {
		t.Fatalf("%d messages delivered, want only the one under way at the fence", n)
	}
}

// After Fence returns, a fenced rank's operations no longer land, even if it
// has not noticed the fence yet (its progress goroutine is stopped here):
// each operation checks the fence flag itself.
func TestFenceStopsOperationsOfPeer(t *testing.T) {
	ts, _, _ := cluster(t, 2, clusterOpts{})
	mem := must(ts[0].Alloc(64))
	key := must(ts[0].Register(mem))
	ts[1].stop.Store(true) // rank 1 stops watching its peers
	ts[1].wake()
	ts[1].wg.Wait()
	errc := make(chan error, 1)
	var writes atomic.Int64
	go func() {
		for i := uint64(1); ; i++ {
			var b [8]byte
			binary.NativeEndian.PutUint64(b[:], i)
			if _, err := ts[1].Write(0, key, 0, b[:]); err != nil {
				errc <- err
				return
			}
			writes.Add(1)
		}
	}()
	for writes.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	if err := ts[0].Fence(1); err != nil {
		t.Fatal(err)
	}
	word := binary.NativeEndian.Uint64(mem)
	time.Sleep(30 * time.Millisecond)
	if got := binary.NativeEndian.Uint64(mem); got != word {
		t.Fatalf("rank 1 wrote %d after the fence (was %d)", got, word)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("the fenced rank's write failed with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fenced rank's writes still succeed")
	}
}

// The doorbell wakes a parked receiver at once, not at its park timeout.
func TestPingPongWakesPromptly(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{cfg: func(c *Config) { c.Spin = -1 }})
	ctx := testCtx(t)
	const rounds = 200
	start := time.Now()
	for i := range rounds {
		if err := ts[0].Send(1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		rs[1].Await(t, ctx, "ping", func() bool { return rs[1].Count() == i+1 })
		if err := ts[1].Send(0, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		rs[0].Await(t, ctx, "pong", func() bool { return rs[0].Count() == i+1 })
	}
	el := time.Since(start)
	t.Logf("%d round trips without spinning: %v, %v each", rounds, el, el/rounds)
	if el > rounds*parkTimeout/4 {
		t.Fatalf("%d round trips took %v: wake-ups wait for the park timeout", rounds, el)
	}
}

// Deregister waits for an access under way, and not for a peer that is down.
func TestDeregisterWaitsForAccess(t *testing.T) {
	for _, how := range []string{"finish", "peer down"} {
		t.Run(how, func(t *testing.T) {
			ts, _, _ := cluster(t, 2, clusterOpts{})
			mem := must(ts[0].Alloc(64))
			key := must(ts[0].Register(mem))
			// Rank 1 enters rank 0's memory as an operation does, and stays.
			p := ts[1].peers[0]
			c, err := p.lock()
			if err != nil {
				t.Fatal(err)
			}
			slot := enter(c, c.active(1))
			leave := sync.OnceFunc(func() {
				atomic.AddUint64(slot, ^uint64(0))
				p.mu.RUnlock()
			})
			defer leave()
			done := make(chan error, 1)
			go func() { done <- ts[0].Deregister(key) }()
			select {
			case err := <-done:
				t.Fatalf("Deregister returned (%v) during an access", err)
			case <-time.After(30 * time.Millisecond):
			}
			if how == "finish" {
				leave()
			} else {
				ts[0].PeerDown(1, errors.New("gone"))
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Deregister did not return")
			}
		})
	}
}

func TestReleasedSegmentsAreUnmappedByPeers(t *testing.T) {
	ts, _, _ := cluster(t, 2, clusterOpts{})
	ctx := testCtx(t)
	a := must(ts[1].Alloc(64))
	ka := must(ts[1].Register(a))
	b := must(ts[1].Alloc(64))
	kb := must(ts[1].Register(b))
	for _, k := range []transport.Key{ka, kb} {
		if seq, err := ts[0].Write(1, k, 0, []byte{1}); err != nil || ts[0].Wait(ctx, 1, seq) != nil {
			t.Fatal(err)
		}
	}
	if n := len(*ts[0].peers[1].segs.Load()); n != 2 {
		t.Fatalf("%d segments of rank 1 mapped, want 2", n)
	}
	if err := ts[1].Deregister(ka); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Release(a); err != nil {
		t.Fatal(err)
	}
	if seq, err := ts[0].Write(1, kb, 0, []byte{2}); err != nil || ts[0].Wait(ctx, 1, seq) != nil || b[0] != 2 {
		t.Fatal(err)
	}
	if n := len(*ts[0].peers[1].segs.Load()); n != 1 {
		t.Fatalf("%d segments of rank 1 mapped after a release, want 1", n)
	}
}

func TestKeys(t *testing.T) {
	ts, _, _ := cluster(t, 1, clusterOpts{cfg: func(c *Config) { c.Regions = 4 }})
	mem := must(ts[0].Alloc(64))
	seen := map[transport.Key]bool{}
	for range 1000 {
		k := must(ts[0].Register(mem[8:16]))
		if k == 0 || k > transport.MaxKey || seen[k] {
			t.Fatalf("key %d (seen before: %v)", k, seen[k])
		}
		seen[k] = true
		if err := ts[0].Deregister(k); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		must(ts[0].Register(mem))
	}
	if _, err := ts[0].Register(mem); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("register into a full key table: %v", err)
	}
}

// Close says goodbye: the peer gets everything sent before, then a
// peer-down event with transport.ErrPeerLeft.
func TestClose(t *testing.T) {
	dir := t.TempDir()
	ts, rs, _ := cluster(t, 2, clusterOpts{dir: dir})
	ctx := testCtx(t)
	mem := must(ts[1].Alloc(64))
	key := must(ts[1].Register(mem))
	kept := must(ts[1].Alloc(100))
	for i := range 100 {
		if err := ts[1].Send(0, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts[1].Close(); err != nil {
		t.Fatal(err)
	}
	rs[0].Await(t, ctx, "the goodbye", func() bool { return len(rs[0].DownsOf(1)) == 1 })
	events := rs[0].Events()
	if len(events) != 101 || events[100] != "down 1" {
		t.Fatalf("events %v, want 100 messages then the goodbye", events)
	}
	if err := rs[0].DownsOf(1)[0]; !errors.Is(err, transport.ErrPeerLeft) || !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("goodbye error %v", err)
	}
	if _, err := ts[0].Write(1, key, 0, []byte{1}); !errors.Is(err, transport.ErrPeerLeft) || !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("write toward a closed rank: %v", err)
	}
	// Rank 1's files are gone.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "ftrma-t-1-") {
			t.Fatalf("%s left behind", e.Name())
		}
	}
	// Alloc and Connect fail with ErrClosed after Close too (the methods of
	// transport.Transport are in the contract suite).
	cl := ts[1]
	if _, err := cl.Alloc(8); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("alloc after close: %v", err)
	}
	if err := cl.Connect(ctx); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("connect after close: %v", err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	kept[99] = 1 // memory not released stays usable
	if err := cl.Release(kept); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveJob(t *testing.T) {
	dir := t.TempDir()
	job := []string{"ftrma-j-0-ctl", "ftrma-j-12-seg-3", "ftrma-j-2-ctl.tmp", "ftrma-j-3-bell"}
	other := []string{"ftrma-j-x-ctl", "ftrma-j-1-0-ctl", "ftrma-jj-0-ctl", "ftrma-j-1-seg-", "ftrma-j-1-segx-1", "other", "ftrma-j-0-ctl.old", "ftrma-j-3-bell.x"}
	for _, name := range append(slices.Clone(job), other...) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveJob(dir, "j"); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	sort.Strings(other)
	if !slices.Equal(left, other) {
		t.Fatalf("left %v, want %v", left, other)
	}
	if err := RemoveJob(filepath.Join(dir, "missing"), "j"); err != nil {
		t.Fatalf("missing directory: %v", err)
	}
	if err := RemoveJob(dir, "../x"); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("bad job name: %v", err)
	}

	// The files of a transport that never closed.
	ts, _, _ := cluster(t, 2, clusterOpts{dir: dir, job: "k"})
	must(ts[1].Alloc(10))
	if err := RemoveJob(dir, "k"); err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "ftrma-k-") {
			t.Fatalf("%s left behind", e.Name())
		}
	}
}

func TestRemoveRanks(t *testing.T) {
	dir := t.TempDir()
	names := []string{"ftrma-j-0-ctl", "ftrma-j-1-seg-3", "ftrma-j-12-ctl.tmp", "ftrma-j-12-seg-1", "ftrma-j-2-ctl", "ftrma-jj-1-ctl", "ftrma-j-1-0-ctl", "other"}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveRanks(dir, "j", []ftrma.Rank{1, 12}); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{"ftrma-j-0-ctl", "ftrma-j-1-0-ctl", "ftrma-j-2-ctl", "ftrma-jj-1-ctl", "other"}
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	if err := RemoveRanks(filepath.Join(dir, "missing"), "j", []ftrma.Rank{0}); err != nil {
		t.Fatalf("missing directory: %v", err)
	}
	if err := RemoveRanks(dir, "../x", nil); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("bad job name: %v", err)
	}
}

// Two "hosts" of one job share the shared-memory directory (network
// namespaces on one machine do), each rank's transport serving its own
// host's ranks, as under shm+tcp. Host b's ranks are lost (killed: their
// files stay) and their files removed, as b's agent does. Host a's ranks
// must still reach each other's memory: a segment rank 0 never mapped, and
// one it had mapped, after rank 1 releases another segment (peers then
// forget the segments whose files are gone). Removing every file of the
// job instead (RemoveJob, which the agent used to call) breaks both with
// ftrma.ErrUnknownRegion: the failure seen on a four-host cluster after a
// host was cut off.
func TestHostLossLeavesOtherHostsSegments(t *testing.T) {
	for _, c := range []struct {
		name    string
		remove  func(dir, job string) error
		wantErr error
	}{
		{"RemoveRanks", func(dir, job string) error { return RemoveRanks(dir, job, []ftrma.Rank{2, 3}) }, nil},
		{"RemoveJob", RemoveJob, ftrma.ErrUnknownRegion},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := testCtx(t)
			var a, b []*Transport
			for r := range 4 {
				host := []ftrma.Rank{0, 1}
				if r >= 2 {
					host = []ftrma.Rank{2, 3}
				}
				tr := must(Open(Config{Rank: ftrma.Rank(r), Size: 4, Ranks: host, Job: "j", Dir: dir}))
				tr.SetReceiver(newRecorder())
				t.Cleanup(func() { tr.Close() })
				if r < 2 {
					a = append(a, tr)
				} else {
					b = append(b, tr)
				}
			}
			for _, tr := range append(slices.Clone(a), b...) {
				if err := tr.Connect(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Rank 1's memory: a segment rank 0 reads before the loss, one
			// it first reads after, and one released after the loss.
			var keys []transport.Key
			for i := range 2 {
				mem := must(a[1].Alloc(4096))
				mem[0] = byte(10 + i)
				keys = append(keys, must(a[1].Register(mem)))
			}
			spare := must(a[1].Alloc(4096))
			read := func(key transport.Key) (byte, error) {
				var buf [8]byte
				if _, err := a[0].Read(1, key, 0, buf[:]); err != nil {
					return 0, err
				}
				return buf[0], a[0].Flush(ctx, 1)
			}
			if v, err := read(keys[0]); err != nil || v != 10 {
				t.Fatalf("read before the loss: %d, %v", v, err)
			}
			// Host b is lost: its agent removes files (its ranks, killed,
			// could not), and host a learns of the loss.
			if err := c.remove(dir, "j"); err != nil {
				t.Fatal(err)
			}
			for _, r := range []ftrma.Rank{2, 3} {
				a[0].PeerDown(r, ftrma.ErrProcFailed)
				a[1].PeerDown(r, ftrma.ErrProcFailed)
			}
			if v, err := read(keys[1]); !errors.Is(err, c.wantErr) || err == nil && v != 11 {
				t.Errorf("first read of a segment after the loss: %d, %v; want error %v", v, err, c.wantErr)
			} else if err != nil && !strings.Contains(err.Error(), "segment 2 of rank 1 is gone (no file ") {
				t.Errorf("the error does not say the segment's file is gone: %v", err)
			}
			if err := a[1].Release(spare); err != nil {
				t.Fatal(err)
			}
			if v, err := read(keys[0]); !errors.Is(err, c.wantErr) || err == nil && v != 10 {
				t.Errorf("read of a mapped segment after a release: %d, %v; want error %v", v, err, c.wantErr)
			}
			for _, r := range []ftrma.Rank{2, 3} {
				if matches, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("ftrma-j-%d-*", r))); len(matches) > 0 {
					t.Errorf("files of lost rank %d left: %v", r, matches)
				}
			}
		})
	}
}

// 32 ranks on a host with fewer cores exchange messages all to all and
// increment a counter, without busy-waiting each other out.
func TestManyRanksAllToAll(t *testing.T) {
	const n, count = 32, 20
	ts, rs, _ := cluster(t, n, clusterOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	mem := must(ts[0].Alloc(8))
	key := must(ts[0].Register(mem))
	var wg sync.WaitGroup
	for from := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range count {
				for to := range ts {
					if err := ts[from].Send(ftrma.Rank(to), []byte{byte(from), byte(i)}); err != nil {
						t.Error(err)
						return
					}
				}
			}
			if seq, err := ts[from].FetchAndAdd64(0, key, 0, 1, nil); err != nil || ts[from].Wait(ctx, 0, seq) != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, rec := range rs {
		rec.Await(t, ctx, "every message", func() bool { return rec.Count() == n*count })
	}
	if got := binary.NativeEndian.Uint64(mem); got != n {
		t.Fatalf("counter %d, want %d", got, n)
	}
	t.Logf("%d ranks, %d messages each way: %v", n, count, time.Since(start))
}

// A sender parked on a full ring is woken when the receiver frees room, not
// at its park timeout.
func TestFullRingSenderWakesPromptly(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{noReceiver: true, cfg: func(c *Config) { c.Spin = -1; c.RingBytes = minRingBytes }})
	release := make(chan struct{})
	rs[1].Hook = func(_ ftrma.Rank, m []byte) {
		if len(m) == 1 {
			<-release // a stall marker: wait for the test
		}
	}
	ts[1].SetReceiver(rs[1])
	waiting := ts[1].peers[0].in.waiting
	const rounds = 15
	var took []time.Duration
	for range rounds {
		done := make(chan error, 1)
		go func() {
			if err := ts[0].Send(1, []byte{1}); err != nil {
				done <- err
				return
			}
			for range minRingBytes/1008 + 2 { // more than the ring holds
				if err := ts[0].Send(1, make([]byte, 1000)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for atomic.LoadUint32(waiting) == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Millisecond) // parked by now
		start := time.Now()
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("parked sender done after %v (median of %d)", took[rounds/2], rounds)
	if took[rounds/2] > parkTimeout/4 {
		t.Fatalf("median %v from freeing room to the sender's return: the sender waits for its park timeout", took[rounds/2])
	}
}

// No operation lands in a region after its Deregister returned, while a peer
// keeps writing to every key it has been given.
func TestNoWriteAfterDeregister(t *testing.T) {
	ts, _, _ := cluster(t, 3, clusterOpts{})
	mem := must(ts[0].Alloc(4096))
	var cur atomic.Uint32 // the key the writers aim at
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 1; w <= 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := bytes.Repeat([]byte{0xff}, 64)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ts[w].Write(0, transport.Key(cur.Load()), 0, one)
			}
		}()
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		region := mem[64*(i%64) : 64*(i%64)+64]
		k := must(ts[0].Register(region))
		cur.Store(uint32(k))
		time.Sleep(50 * time.Microsecond)
		if err := ts[0].Deregister(k); err != nil {
			t.Fatal(err)
		}
		clear(region)
		for range 200 {
			runtime.Gosched()
		}
		if !bytes.Equal(region, make([]byte, 64)) {
			t.Fatalf("round %d: a write landed after Deregister returned", i)
		}
	}
	close(stop)
	wg.Wait()
}

// A peer that said goodbye (Close) and then exited: the launcher's exit
// notice (PeerDown) must not cut off what it sent before leaving; it is
// delivered, and the peer is reported gone with ErrPeerLeft.
func TestPeerDownAfterGoodbye(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{})
	ctx := testCtx(t)
	for i := range 50 {
		if err := ts[1].Send(0, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts[1].Close(); err != nil {
		t.Fatal(err)
	}
	ts[0].PeerDown(1, errors.New("the launcher saw it exit"))
	rs[0].Await(t, ctx, "the peer-down event", func() bool { return len(rs[0].DownsOf(1)) > 0 })
	if got := rs[0].From(1); len(got) != 50 {
		t.Fatalf("%d of 50 messages delivered", len(got))
	}
	if downs := rs[0].DownsOf(1); !errors.Is(downs[0], transport.ErrPeerLeft) {
		t.Fatalf("peer-down error %v, want ErrPeerLeft", downs[0])
	}
}

// Writes and reads larger than copyPiece go in pieces: the bytes
// arrive whole at any alignment, one out of bounds copies nothing, and a
// Send toward the target while a long copy is under way does not wait for it
// (it only needs the peer's mapping lock, which the copy lets go between
// pieces; after a release by the peer the Send takes it for writing).
func TestLargeOperationsInPieces(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{})
	ctx := testCtx(t)
	const size = 3*transport.CopyChunk + 4100
	mem := must(ts[1].Alloc(size + 16))
	key := must(ts[1].Register(mem))
	for _, off := range []uint64{0, 5, 8} {
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*13 + int(off))
		}
		if _, err := ts[0].Write(1, key, off, src); err != nil {
			t.Fatal(err)
		}
		if err := ts[0].Flush(ctx, 1); err != nil {
			t.Fatalf("off %d: %v", off, err)
		}
		if !bytes.Equal(mem[off:off+size], src) {
			t.Fatalf("off %d: the owner's memory differs", off)
		}
		dst := make([]byte, size)
		if _, err := ts[0].Read(1, key, off, dst); err != nil {
			t.Fatal(err)
		}
		if err := ts[0].Flush(ctx, 1); err != nil || !bytes.Equal(dst, src) {
			t.Fatalf("off %d: read back differs (%v)", off, err)
		}
	}
	// Out of bounds by one byte at the far end: not a byte lands.
	clear(mem)
	big := bytes.Repeat([]byte{0xee}, size+1)
	if _, err := ts[0].Write(1, key, 16, big); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx, 1); !errors.Is(err, ftrma.ErrOutOfBounds) {
		t.Fatalf("large write past the end: %v, want ErrOutOfBounds", err)
	}
	if i := bytes.IndexByte(mem, 0xee); i >= 0 {
		t.Fatalf("a large write out of bounds landed at byte %d", i)
	}
	if _, err := ts[0].Read(1, key, 16, big); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx, 1); !errors.Is(err, ftrma.ErrOutOfBounds) {
		t.Fatalf("large read past the end: %v, want ErrOutOfBounds", err)
	}

	// A long write toward rank 1, during which rank 1 releases a segment:
	// a Send toward rank 1 then drops the released mapping, under the
	// mapping lock for writing, which it gets between two pieces of the
	// write instead of after the whole write.
	if raceBuild {
		t.Skip("the long write takes too long under the race detector")
	}
	const long = 128 << 20
	lkey := must(ts[1].Register(must(ts[1].Alloc(long))))
	lsrc := make([]byte, long)
	spare := must(ts[1].Alloc(8))
	sent := make(chan time.Duration, 1)
	started := make(chan struct{})
	go func() {
		<-started
		time.Sleep(3 * time.Millisecond) // into the write
		if err := ts[1].Release(spare); err != nil {
			t.Error(err)
		}
		t0 := time.Now()
		if err := ts[0].Send(1, []byte("ping")); err != nil {
			t.Error(err)
		}
		sent <- time.Since(t0)
	}()
	t0 := time.Now()
	close(started)
	if _, err := ts[0].Write(1, lkey, 0, lsrc); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	d := <-sent
	t.Logf("write of %d MiB: %v; a Send during it: %v", long>>20, took, d)
	if took > 30*time.Millisecond && d > took/2 {
		t.Errorf("a Send during a write of %d MiB (%v) waited %v", long>>20, took, d)
	}
	rs[1].Await(t, ctx, "the ping", func() bool { return len(rs[1].From(0)) > 0 })
}

// ControlBytes bounds what the control segments take with every ring in
// use: 256 ranks stay under 1 GiB.
func TestControlBytes(t *testing.T) {
	for _, m := range []int{1, 4, 64, 256} {
		cfg, err := Config{Size: m, Job: "x"}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ControlBytes(m), uint64(m)*uint64(makeLayout(m, cfg.RingBytes, cfg.Regions).total); got != want {
			t.Errorf("ControlBytes(%d) = %d, want %d", m, got, want)
		}
	}
	if b := ControlBytes(256); b > 1<<30 {
		t.Errorf("256 ranks' control segments may take %d MiB", b>>20)
	}
}
