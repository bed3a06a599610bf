//go:build linux && cgo && verbs

package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// testLogger logs to t.Log, every level.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(ftrma.NewLogHandler(testWriter{t}, ftrma.LogOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimSuffix(b, []byte("\n"))))
	return len(b), nil
}

// These tests need an RDMA device (Soft-RoCE in the guest of
// scripts/rxe-vm.sh). Without one they fail, unless FTRMA_VERBS_OPTIONAL=1
// says the host is not expected to have one.
func needDevice(t testing.TB) {
	t.Helper()
	if _, err := Probe("", -1); err != nil {
		if os.Getenv("FTRMA_VERBS_OPTIONAL") == "1" {
			t.Skipf("no RDMA device: %v", err)
		}
		t.Fatalf("no RDMA device: %v", err)
	}
}

// recorder is a Receiver that records what it is given.
type recorder struct {
	mu    sync.Mutex
	msgs  map[ftrma.Rank][][]byte
	downs map[ftrma.Rank]error
	ch    chan struct{}
}

func newRecorder() *recorder {
	return &recorder{msgs: map[ftrma.Rank][][]byte{}, downs: map[ftrma.Rank]error{}, ch: make(chan struct{}, 1<<16)}
}

func (r *recorder) HandleMessage(from ftrma.Rank, msg []byte) {
	r.mu.Lock()
	r.msgs[from] = append(r.msgs[from], append([]byte(nil), msg...))
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *recorder) HandlePeerDown(peer ftrma.Rank, err error) {
	r.mu.Lock()
	r.downs[peer] = err
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// until waits for cond (checked under r.mu) for up to 20 s.
func (r *recorder) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.ch:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// world opens n connected transports on the device.
func world(t testing.TB, n int) ([]*Transport, []*recorder) {
	t.Helper()
	return worldSpin(t, n, 0)
}

// worldSpin is world with the transports' Config.Spin.
func worldSpin(t testing.TB, n int, spin time.Duration) ([]*Transport, []*recorder) {
	t.Helper()
	return openWorld(t, n, spin, true)
}

// openWorld opens n connected transports on the device, with recorders
// installed if withReceivers.
func openWorld(t testing.TB, n int, spin time.Duration, withReceivers bool) ([]*Transport, []*recorder) {
	t.Helper()
	needDevice(t)
	ts := make([]*Transport, n)
	recs := make([]*recorder, n)
	addrs := make([]string, n)
	for r := range n {
		tr, err := Open(Config{Rank: ftrma.Rank(r), Size: n, GIDIndex: -1, Spin: spin, Bound: 2 * time.Second, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ts[r] = tr
		recs[r] = newRecorder()
		if withReceivers {
			tr.SetReceiver(recs[r])
		}
		addrs[r] = tr.Addr()
		t.Cleanup(func() { tr.Close() })
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = ts[r].Connect(context.Background(), addrs) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ts, recs
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestAddressRoundTripOnDevice(t *testing.T) {
	ts, _ := world(t, 2)
	a, err := ParseAddress(ts[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != ts[0].Addr() || len(a.QPN) != 2 || a.QPN[1] == 0 {
		t.Fatalf("address %q parsed as %+v", ts[0].Addr(), a)
	}
	t.Logf("device %+v", ts[0].Device())
}

// TestOperationErrors: verbs' own refusals (the errors every transport
// reports are in the contract suite): a key of a slot's other generation
// is unknown, and CompareAndSwap64 needs a result.
func TestOperationErrors(t *testing.T) {
	ts, _ := world(t, 2)
	mem := make([]byte, 64)
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := ts[0].Write(1, key+1<<keySlotBit, 0, []byte{1})
	if err == nil {
		err = ts[0].Wait(ctx(t), 1, seq)
	}
	if !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Errorf("unknown key: got %v, want ErrUnknownRegion", err)
	}
	if _, err := ts[0].CompareAndSwap64(1, key, 0, 0, 1, nil); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("CAS with nil result: %v", err)
	}
	if err := ts[0].Fence(0); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("fence self: %v", err)
	}
	// The errors were the operations' own: the pair still works.
	if _, err := ts[0].Write(1, key, 0, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil || string(mem[:2]) != "ok" {
		t.Fatalf("write after errors: %v, memory %q", err, mem[:2])
	}
}

func TestMessagesInOrder(t *testing.T) {
	ts, recs := world(t, 3)
	sizes := []int{0, 1, 100, maxFrag, maxFrag + 1, 3*maxFrag + 5, transport.MaxControlMessage - 2}
	for i := range 200 {
		n := sizes[i%len(sizes)]
		msg := make([]byte, n+2)
		binary.LittleEndian.PutUint16(msg, uint16(i))
		for _, to := range []ftrma.Rank{1, 2} {
			if err := ts[0].Send(to, msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := ts[2].Send(2, msg); err != nil { // to self
			t.Fatal(err)
		}
	}
	for _, rc := range []struct {
		r    int
		from ftrma.Rank
	}{{1, 0}, {2, 0}, {2, 2}} {
		rec := recs[rc.r]
		rec.until(t, "200 messages", func() bool { return len(rec.msgs[rc.from]) == 200 })
		for i, m := range rec.msgs[rc.from] {
			if got := int(binary.LittleEndian.Uint16(m)); got != i || len(m) != sizes[i%len(sizes)]+2 {
				t.Fatalf("rank %d from %d: message %d is #%d of %d bytes", rc.r, rc.from, i, got, len(m))
			}
		}
	}
}

// TestFence: after rank 1 fences rank 0, rank 0's writes no longer land in
// rank 1's memory (the device refuses them), and both sides see ProcFailed.
func TestFence(t *testing.T) {
	ts, recs := world(t, 2)
	mem := make([]byte, 64)
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts[0].Write(1, key, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil || mem[0] != 1 {
		t.Fatalf("write before the fence: %v, %d", err, mem[0])
	}
	if err := ts[1].Fence(0); err != nil {
		t.Fatal(err)
	}
	// The late write: refused by the device, and rank 0 learns it.
	seq, err := ts[0].Write(1, key, 0, []byte{2})
	if err == nil {
		err = ts[0].Wait(ctx(t), 1, seq)
	}
	if !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("write of a fenced rank: %v, want ErrProcFailed", err)
	}
	if mem[0] != 1 {
		t.Fatalf("a write from a fenced rank landed: %d", mem[0])
	}
	if _, err := ts[1].Write(0, key, 0, []byte{1}); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("write toward a fenced rank: %v", err)
	}
	recs[0].until(t, "rank 0 sees rank 1 down", func() bool { return recs[0].downs[1] != nil })
	recs[1].until(t, "rank 1 reports rank 0 down", func() bool { return recs[1].downs[0] != nil })
	if !errors.Is(recs[1].downs[0], ftrma.ErrProcFailed) {
		t.Fatalf("peer-down error %v", recs[1].downs[0])
	}
}

// TestFenceNotice: a fenced rank that still runs learns of the fence
// without sending anything (Fence's notice): it reports the fencer down,
// saying why, and operations toward it fail.
func TestFenceNotice(t *testing.T) {
	ts, recs := world(t, 3)
	if err := ts[1].Fence(0); err != nil {
		t.Fatal(err)
	}
	recs[0].until(t, "rank 0 hears that rank 1 fenced it", func() bool { return recs[0].downs[1] != nil })
	recs[0].mu.Lock()
	err := recs[0].downs[1]
	recs[0].mu.Unlock()
	if !errors.Is(err, ftrma.ErrProcFailed) || !strings.Contains(err.Error(), "rank 1 fenced this rank") {
		t.Fatalf("rank 0's peer-down event for rank 1: %v, want ErrProcFailed saying rank 1 fenced it", err)
	}
	if err := ts[0].Send(1, []byte("x")); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("send toward the fencer: %v, want ErrProcFailed", err)
	}
	// Rank 2 heard of nothing.
	if err := ts[2].Send(0, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	recs[0].until(t, "rank 2's message", func() bool { return len(recs[0].msgs[2]) == 1 })
	recs[2].mu.Lock()
	defer recs[2].mu.Unlock()
	if len(recs[2].downs) != 0 {
		t.Fatalf("rank 2: peer-down events %v", recs[2].downs)
	}
}

// TestDeregister: once Deregister returns, a peer's access fails with
// ErrUnknownRegion (its cached key was revoked) and the pair still works.
func TestDeregister(t *testing.T) {
	ts, _ := world(t, 2)
	a, b := make([]byte, 64), make([]byte, 64)
	ka, err := ts[1].Register(a)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := ts[1].Register(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts[0].Write(1, ka, 0, []byte{7}); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil || a[0] != 7 {
		t.Fatalf("write: %v %d", err, a[0])
	}
	if err := ts[1].Deregister(ka); err != nil {
		t.Fatal(err)
	}
	seq, err := ts[0].Write(1, ka, 0, []byte{8})
	if err == nil {
		err = ts[0].Wait(ctx(t), 1, seq)
	}
	if !errors.Is(err, ftrma.ErrUnknownRegion) || a[0] != 7 {
		t.Fatalf("write after deregister: %v, memory %d", err, a[0])
	}
	if err := ts[1].Deregister(ka); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Fatalf("second deregister: %v", err)
	}
	if _, err := ts[0].Write(1, kb, 0, []byte{9}); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil || b[0] != 9 {
		t.Fatalf("write to the other region: %v %d", err, b[0])
	}
	// Slots are reused with a new generation: the old key stays unknown.
	c := make([]byte, 8)
	kc, err := ts[1].Register(c)
	if err != nil || kc == ka {
		t.Fatalf("register: key %d (old %d), %v", kc, ka, err)
	}
}

// RegisterKey takes the caller's keys (shared memory's, beside verbs in a
// multi transport): a key whose bits above the slot's are 0 (shm's first
// keys) is found by peers, a key whose slot is taken is refused, Register
// is refused once RegisterKey was used, and a deregistered key stays
// unknown.
func TestRegisterKey(t *testing.T) {
	ts, _ := world(t, 2)
	a, b := make([]byte, 64), make([]byte, 64)
	ka := transport.Key(1<<12 | 5)        // generation 1 of slot 5 of a 4096-entry table
	kb := transport.Key(0x3ff<<12 | 1<<2) // a high generation
	if err := ts[1].RegisterKey(ka, a); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].RegisterKey(kb, b); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].RegisterKey(ka+tableSlots, make([]byte, 8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("a key on a taken slot: %v, want ErrInvalid", err)
	}
	if _, err := ts[1].Register(make([]byte, 8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Register after RegisterKey: %v, want ErrInvalid", err)
	}
	if err := ts[1].RegisterKey(0, make([]byte, 8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("key 0: %v, want ErrInvalid", err)
	}
	if _, err := ts[0].Write(1, ka, 0, []byte{7}); err != nil {
		t.Fatal(err)
	}
	var old uint64
	if _, err := ts[0].FetchAndAdd64(1, kb, 8, 3, &old); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx(t), 1); err != nil || a[0] != 7 || binary.LittleEndian.Uint64(b[8:]) != 3 {
		t.Fatalf("write and fetch-and-add: %v, %d, %d", err, a[0], binary.LittleEndian.Uint64(b[8:]))
	}
	if err := ts[1].Deregister(ka); err != nil {
		t.Fatal(err)
	}
	seq, err := ts[0].Write(1, ka, 0, []byte{8})
	if err == nil {
		err = ts[0].Wait(ctx(t), 1, seq)
	}
	if !errors.Is(err, ftrma.ErrUnknownRegion) || a[0] != 7 {
		t.Fatalf("write after deregister: %v, memory %d", err, a[0])
	}
	// The slot is free again for the caller's next key.
	if err := ts[1].RegisterKey(ka+tableSlots, make([]byte, 8)); err != nil {
		t.Fatalf("a new key on the freed slot: %v", err)
	}
	if _, err := ts[0].Register(make([]byte, 8)); err != nil {
		t.Errorf("the other rank's Register: %v", err)
	}
}

func TestPeerDownAndClose(t *testing.T) {
	ts, recs := world(t, 3)
	ts[2].PeerDown(0, errors.New("the launcher saw it exit"))
	if err := ts[2].Send(0, []byte("x")); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("send to a peer reported down: %v", err)
	}
	recs[2].until(t, "peer-down event", func() bool { return recs[2].downs[0] != nil })
	// A clean close: messages sent before it are delivered, then ErrPeerLeft.
	if err := ts[1].Send(0, []byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Close(); err != nil {
		t.Fatal(err)
	}
	recs[0].until(t, "goodbye", func() bool { return recs[0].downs[1] != nil })
	if len(recs[0].msgs[1]) != 1 || !errors.Is(recs[0].downs[1], transport.ErrPeerLeft) {
		t.Fatalf("messages %q, down %v", recs[0].msgs[1], recs[0].downs[1])
	}
	if _, err := ts[1].Write(0, 1, 0, []byte{1}); !errors.Is(err, ftrma.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestAllToAll: eight ranks send messages of many sizes to each other, and
// hammer one counter, all at once.
func TestAllToAll(t *testing.T) {
	const n, msgs = 8, 100
	ts, recs := world(t, n)
	mem := make([]byte, 8)
	key, err := ts[0].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range msgs {
				msg := make([]byte, 2+(i*997)%(3*maxFrag))
				binary.LittleEndian.PutUint16(msg, uint16(i))
				for to := range n {
					if err := ts[r].Send(ftrma.Rank(to), msg); err != nil {
						errs <- err
						return
					}
				}
				seq, err := ts[r].FetchAndAdd64(0, key, 0, 1, nil)
				if err == nil {
					err = ts[r].Wait(ctx(t), 0, seq)
				}
				if err != nil {
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
	for r := range n {
		rec := recs[r]
		rec.until(t, "all messages", func() bool {
			for from := range n {
				if len(rec.msgs[ftrma.Rank(from)]) != msgs {
					return false
				}
			}
			return true
		})
		for from := range n {
			for i, m := range rec.msgs[ftrma.Rank(from)] {
				if int(binary.LittleEndian.Uint16(m)) != i || len(m) != 2+(i*997)%(3*maxFrag) {
					t.Fatalf("rank %d from %d: message %d wrong", r, from, i)
				}
			}
		}
	}
	if got := binary.LittleEndian.Uint64(mem); got != n*msgs {
		t.Fatalf("counter %d, want %d", got, n*msgs)
	}
}

// TestSendBeforePeerConnects: a message sent before the peer's queue pair
// is ready is retried by the device and arrives.
func TestSendBeforePeerConnects(t *testing.T) {
	needDevice(t)
	ts := make([]*Transport, 2)
	addrs := make([]string, 2)
	rec := newRecorder()
	for r := range 2 {
		tr, err := Open(Config{Rank: ftrma.Rank(r), Size: 2, GIDIndex: -1, Bound: 5 * time.Second, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		tr.SetReceiver(rec)
		ts[r], addrs[r] = tr, tr.Addr()
	}
	if err := ts[0].Connect(ctx(t), addrs); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Send(1, []byte("early")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := ts[1].Connect(ctx(t), addrs); err != nil {
		t.Fatal(err)
	}
	rec.until(t, "the early message", func() bool { return len(rec.msgs[0]) == 1 })
}

// Round-trip latencies at the transport: go test -tags verbs -bench . in the
// guest (emulator times; bench/verbslat sets them beside perftest).
func BenchmarkWriteFlush(b *testing.B) { benchOp(b, "write") }
func BenchmarkReadWait(b *testing.B)   { benchOp(b, "read") }
func BenchmarkCASWait(b *testing.B)    { benchOp(b, "cas") }

func benchOp(b *testing.B, op string) {
	spin, _ := time.ParseDuration(os.Getenv("FTRMA_BENCH_SPIN"))
	ts, _ := worldSpin(b, 2, spin)
	mem := make([]byte, 64)
	key, err := ts[1].Register(mem)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8)
	var res uint64
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		var seq transport.Seq
		switch op {
		case "write":
			seq, err = ts[0].Write(1, key, 0, buf)
		case "read":
			seq, err = ts[0].Read(1, key, 0, buf)
		case "cas":
			seq, err = ts[0].CompareAndSwap64(1, key, 0, uint64(i), uint64(i+1), &res)
		}
		if err == nil {
			err = ts[0].Wait(ctx, 1, seq)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenConnectClose: the set-up and tear-down of an 8-rank world,
// phase by phase (reported as metrics).
func BenchmarkOpenConnectClose(b *testing.B) {
	needDevice(b)
	const n = 8
	for range b.N {
		t0 := time.Now()
		ts := make([]*Transport, n)
		addrs := make([]string, n)
		for r := range n {
			tr, err := Open(Config{Rank: ftrma.Rank(r), Size: n, GIDIndex: -1, Bound: 2 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			ts[r], addrs[r] = tr, tr.Addr()
			tr.SetReceiver(newRecorder())
		}
		t1 := time.Now()
		for _, tr := range ts {
			if err := tr.Connect(context.Background(), addrs); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		for _, tr := range ts {
			tr.Close()
		}
		t3 := time.Now()
		b.ReportMetric(float64(t1.Sub(t0).Milliseconds())/n, "open-ms/rank")
		b.ReportMetric(float64(t2.Sub(t1).Milliseconds())/n, "connect-ms/rank")
		b.ReportMetric(float64(t3.Sub(t2).Milliseconds())/n, "close-ms/rank")
	}
}

func BenchmarkSelect(b *testing.B) {
	needDevice(b)
	for range b.N {
		if _, err := Select("", 1, -1); err != nil {
			b.Fatal(err)
		}
	}
}

// echoer answers every message with many big ones, from the progress
// goroutine: more than the send queue and the staging ring hold, so the
// sends wait in the backlog (they must never block the handler).
type echoer struct {
	t    *Transport
	to   ftrma.Rank
	errs chan error
}

func (e *echoer) HandleMessage(from ftrma.Rank, msg []byte) {
	for i := range 300 {
		m := make([]byte, 10<<10)
		binary.LittleEndian.PutUint16(m, uint16(msg[0])*300+uint16(i))
		if err := e.t.Send(e.to, m); err != nil {
			e.errs <- err
			return
		}
	}
}

func (e *echoer) HandlePeerDown(ftrma.Rank, error) {}

func TestHandlerSendsGoToBacklog(t *testing.T) {
	ts, recs := world(t, 2)
	e := &echoer{t: ts[1], to: 0, errs: make(chan error, 1)}
	ts[1].SetReceiver(e)
	for i := range 3 {
		if err := ts[0].Send(1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	rec := recs[0]
	rec.until(t, "900 answers", func() bool { return len(rec.msgs[1]) == 900 })
	select {
	case err := <-e.errs:
		t.Fatal(err)
	default:
	}
	for i, m := range rec.msgs[1] {
		if got := int(binary.LittleEndian.Uint16(m)); got != i || len(m) != 10<<10 {
			t.Fatalf("answer %d is #%d of %d bytes", i, got, len(m))
		}
	}
}

// TestDeregisterWithFailedPeer: Deregister waits for the live peers'
// acknowledgements only; a fenced peer (which can no longer reach the
// memory) does not hold it, and the live peer's late access is refused.
func TestDeregisterWithFailedPeer(t *testing.T) {
	ts, _ := world(t, 3)
	mem := make([]byte, 64)
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 2} {
		if _, err := ts[r].Write(1, key, 0, []byte{byte(r + 1)}); err != nil {
			t.Fatal(err)
		}
		if err := ts[r].Flush(ctx(t), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts[1].Fence(2); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ts[1].Deregister(key) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Deregister waited for the fenced rank")
	}
	seq, err := ts[0].Write(1, key, 0, []byte{9})
	if err == nil {
		err = ts[0].Wait(ctx(t), 1, seq)
	}
	if !errors.Is(err, ftrma.ErrUnknownRegion) || mem[0] != 3 {
		t.Fatalf("write after deregister: %v, memory %d", err, mem[0])
	}
}
