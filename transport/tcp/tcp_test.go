package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

var secret = []byte("test secret, 32 bytes long......")

// logSink records the transports' log lines.
type logSink = transporttest.LogSink

// cluster starts n connected transports in this process (on loopback:
// plain, by SealRemote).
func cluster(t testing.TB, n int, spin time.Duration) ([]*Transport, *logSink) {
	return clusterSealed(t, n, spin, SealRemote)
}

// clusterSealed is cluster with the transports' SealMode.
func clusterSealed(t testing.TB, n int, spin time.Duration, seal SealMode) ([]*Transport, *logSink) {
	return clusterConfig(t, n, func(cfg *Config) { cfg.Spin, cfg.Seal = spin, seal })
}

// clusterConfig is cluster with each rank's Config as adjust leaves it.
func clusterConfig(t testing.TB, n int, adjust func(*Config)) ([]*Transport, *logSink) {
	t.Helper()
	logs := &logSink{}
	ts := make([]*Transport, n)
	addrs := make([]string, n)
	for r := range ts {
		cfg := Config{Rank: ftrma.Rank(r), Size: n, Secret: secret, Logger: logs.Logger()}
		adjust(&cfg)
		tr, err := Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts[r], addrs[r] = tr, tr.Addr()
		t.Cleanup(func() { tr.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, n)
	for _, tr := range ts {
		go func() { errc <- tr.Connect(ctx, addrs) }()
	}
	for range ts {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	return ts, logs
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// words returns an 8-byte aligned byte slice.
func words(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafeBytes(w)[:n]
}

func TestWriteReadSizes(t *testing.T) {
	for _, c := range []struct {
		spin time.Duration
		seal SealMode
	}{{-1, SealRemote}, {0, SealRemote}, {-1, SealAll}, {0, SealAll}} {
		spin := c.spin
		ts, _ := clusterSealed(t, 3, spin, c.seal)
		ctx := testCtx(t)
		mem := words(4 << 20)
		key, err := ts[1].Register(mem)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 7, 8, 100, 4096, 65536, 1<<20 + 3, 4 << 20} {
			src := make([]byte, size)
			for i := range src {
				src[i] = byte(i*7 + size)
			}
			if _, err := ts[0].Write(1, key, 0, src); err != nil {
				t.Fatal(err)
			}
			if err := ts[0].Flush(ctx, 1); err != nil {
				t.Fatalf("size %d: flush: %v", size, err)
			}
			dst := make([]byte, size)
			seq, err := ts[2].Read(1, key, 0, dst)
			if err != nil {
				t.Fatal(err)
			}
			if err := ts[2].Wait(ctx, 1, seq); err != nil {
				t.Fatalf("size %d: wait: %v", size, err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatalf("spin %v seal %v size %d: read back differs", spin, c.seal, size)
			}
		}
	}
}

// Large operations (frames of their own, straight from or to the socket)
// fail as a whole, as small ones do (those are in the contract suite).
func TestLargeOperationErrors(t *testing.T) {
	ts, _ := cluster(t, 2, -1)
	ctx := testCtx(t)
	key, _ := ts[1].Register(words(64))
	cases := []struct {
		name string
		post func() (transport.Seq, error)
		want error
	}{
		{"large write beyond end", func() (transport.Seq, error) { return ts[0].Write(1, key, 0, make([]byte, 3*directBytes)) }, ftrma.ErrOutOfBounds},
		{"large write to unknown region", func() (transport.Seq, error) { return ts[0].Write(1, key+9, 0, make([]byte, directBytes)) }, ftrma.ErrUnknownRegion},
		{"large read beyond end", func() (transport.Seq, error) { return ts[0].Read(1, key, 0, make([]byte, 2*directBytes)) }, ftrma.ErrOutOfBounds},
	}
	for _, c := range cases {
		seq, err := c.post()
		if err == nil {
			err = ts[0].Wait(ctx, 1, seq)
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// A failed operation does not poison the connection.
	if _, err := ts[0].Write(1, key, 0, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx, 1); err != nil {
		t.Fatalf("flush after errors: %v", err)
	}
}

type recorder struct {
	mu    sync.Mutex
	msgs  []string
	down  []ftrma.Rank
	onMsg func(from ftrma.Rank, msg []byte)
	got   chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 1024)} }

func (r *recorder) HandleMessage(from ftrma.Rank, msg []byte) {
	if r.onMsg != nil {
		r.onMsg(from, msg)
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, fmt.Sprintf("%d:%s", from, msg))
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) HandlePeerDown(peer ftrma.Rank, err error) {
	r.mu.Lock()
	r.down = append(r.down, peer)
	r.mu.Unlock()
	r.got <- struct{}{}
}

// A fenced rank cannot connect again, even with the secret (the fence
// itself is in the contract suite), and it is told why: its error wraps
// transport.ErrFenced (a spare fenced out before it connected learns that
// its Replace was called off).
func TestFencedRankCannotReconnect(t *testing.T) {
	ts, _ := cluster(t, 2, -1)
	ctx := testCtx(t)
	if err := ts[0].Fence(1); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", ts[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := dialHandshake(conn, secret, nil, 1, 0, false); err == nil {
		t.Fatal("fenced rank reconnected")
	} else if !errors.Is(err, transport.ErrFenced) {
		t.Errorf("the fenced rank's error %v does not wrap transport.ErrFenced", err)
	}
	if err := ts[0].Flush(ctx, 1); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("flush toward fenced rank: %v", err)
	}
}

func TestRefusesConnectionWithoutSecret(t *testing.T) {
	ts, logs := cluster(t, 2, -1)
	ctx := testCtx(t)
	mem := words(8)
	key, _ := ts[0].Register(mem)

	// Wrong secret: refused and logged.
	conn, err := net.Dial("tcp", ts[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialHandshake(conn, []byte("wrong"), nil, 1, 0, false); err == nil {
		t.Fatal("connection with a wrong secret was accepted")
	}
	conn.Close()

	// No handshake at all, just a frame.
	conn, err = net.Dial("tcp", ts[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(appendOp(make([]byte, 0, 64), frameWrite, 1, uint32(key), 0, 0, 0, make([]byte, 64)))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _ := conn.Read(make([]byte, 1)); n != 0 {
		t.Fatal("unauthenticated connection got an answer")
	}
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !logs.Contains("refused connection") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !logs.Contains("refused connection") {
		t.Fatal("refused connection was not logged")
	}
	if mem[0] != 0 {
		t.Fatal("an unauthenticated write landed")
	}
	// The job's own connection still works.
	if _, err := ts[1].Write(0, key, 0, []byte{5}); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Flush(ctx, 0); err != nil || mem[0] != 5 {
		t.Fatalf("write after refusals: %v, mem %d", err, mem[0])
	}
}

func TestGarbageFromAuthenticatedPeerDoesNotCrash(t *testing.T) {
	// Rank 1 of 2 is played by hand: it authenticates, then sends garbage.
	logs := &logSink{}
	tr, err := Listen(Config{Rank: 0, Size: 2, Secret: secret, Spin: -1, Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	rec := newRecorder()
	tr.SetReceiver(rec)
	mem := words(8)
	if _, err := tr.Register(mem); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := dialHandshake(conn, secret, nil, 1, 0, false); err == nil {
		t.Fatal("rank 1 must be dialed by rank 0, yet the handshake passed")
	}
	conn.Close()

	tr2, err := Listen(Config{Rank: 1, Size: 2, Secret: secret, Spin: -1, Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	tr2.SetReceiver(newRecorder())
	// Rank 0 dials rank 1; rank 1's side is replaced by a raw listener.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := raw.Accept()
		if err == nil {
			if _, _, err := acceptHandshake(c, 1, 2, false, jobSecret(secret), func(uint32) error { return nil }); err == nil {
				accepted <- c
				return
			}
			c.Close()
		}
		close(accepted)
	}()
	ctx := testCtx(t)
	if err := tr.Connect(ctx, []string{tr.Addr(), raw.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	if c == nil {
		t.Fatal("raw handshake failed")
	}
	defer c.Close()
	c.Write([]byte{0, 0, 0, 2, 99, 1})
	select {
	case <-rec.got:
	case <-time.After(10 * time.Second):
		t.Fatal("garbage did not bring the connection down")
	}
	if err := tr.Flush(ctx, 1); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("flush toward garbage peer: %v", err)
	}
	if mem[0] != 0 {
		t.Fatal("garbage touched memory")
	}
}

// A large write, which lands straight from the socket, is complete in the
// target's memory when Flush returns, never merely on its way.
func TestLargeWriteVisibleAtFlush(t *testing.T) {
	for _, seal := range []SealMode{SealRemote, SealAll} {
		testLargeWriteVisibleAtFlush(t, seal)
	}
}

func testLargeWriteVisibleAtFlush(t *testing.T, seal SealMode) {
	ts, _ := clusterSealed(t, 2, 0, seal)
	ctx := testCtx(t)
	mem := words(3 << 20)
	key, _ := ts[1].Register(mem)
	target := unsafeWords(mem)
	for i, size := range []int{directBytes, directBytes + 8, 1 << 20, 3 << 20, directBytes, 1 << 20} {
		src := make([]uint64, size/8)
		for j := range src {
			src[j] = uint64(i)<<40 | uint64(j)
		}
		if _, err := ts[0].Write(1, key, 0, unsafeBytes(src)); err != nil {
			t.Fatal(err)
		}
		if err := ts[0].Flush(ctx, 1); err != nil {
			t.Fatal(err)
		}
		for j := len(src) - 1; j >= 0; j-- { // the last word lands last
			if got, want := atomic.LoadUint64(&target[j]), src[j]; got != want {
				t.Fatalf("write %d of %d bytes: word %d = %#x after Flush, want %#x", i, size, j, got, want)
			}
		}
	}
}

// Reads larger than readAhead keep only readAhead bytes in flight, posting
// their later pieces as earlier ones complete: they still read every byte,
// at any offset, and a control message sent meanwhile still arrives.
func TestLargeReads(t *testing.T) {
	for _, seal := range []SealMode{SealRemote, SealAll} {
		testLargeReads(t, seal)
	}
}

func testLargeReads(t *testing.T, seal SealMode) {
	ts, _ := clusterSealed(t, 2, 0, seal)
	ctx := testCtx(t)
	rec := newRecorder()
	ts[1].SetReceiver(rec)
	const size = 3*readAhead + 5
	mem := words(size + 8)
	for i := range mem {
		mem[i] = byte(i*31 + i>>13)
	}
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if ts[0].Send(1, []byte("hb")) == nil {
				n++
			}
		}
	}()
	for _, c := range []struct{ off, n int }{{0, readAhead + 1}, {3, size}, {8, 2 * readAhead}} {
		dst := make([]byte, c.n)
		seq, err := ts[0].Read(1, key, uint64(c.off), dst)
		if err != nil {
			t.Fatal(err)
		}
		if err := ts[0].Wait(ctx, 1, seq); err != nil {
			t.Fatalf("read of %d at %d: %v", c.n, c.off, err)
		}
		if !bytes.Equal(dst, mem[c.off:c.off+c.n]) {
			t.Fatalf("read of %d at %d: bytes differ", c.n, c.off)
		}
	}
	// A large read past the end fails as a whole, reported by Flush.
	if _, err := ts[0].Read(1, key, 16, make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx, 1); !errors.Is(err, ftrma.ErrOutOfBounds) {
		t.Fatalf("large read past the end: %v, want ErrOutOfBounds", err)
	}
	close(stop)
	n := <-sent
	for deadline := time.Now().Add(10 * time.Second); ; {
		rec.mu.Lock()
		got := len(rec.msgs)
		rec.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages sent during the reads arrived", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A large read toward a peer that goes away returns, or its Flush fails,
// with the peer-down error: it never waits for ever for room.
func TestLargeReadPeerDown(t *testing.T) {
	ts, _ := cluster(t, 2, -1)
	ctx := testCtx(t)
	const size = 64 << 20
	key, err := ts[1].Register(words(size))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := ts[0].Read(1, key, 0, make([]byte, size))
		if err == nil {
			err = ts[0].Flush(ctx, 1)
		}
		errc <- err
	}()
	time.Sleep(2 * time.Millisecond)
	ts[1].Close()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("read toward a peer that closed: %v, want nil or ErrProcFailed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a large read toward a closed peer did not return")
	}
}

// jobSecret is acceptHandshake's secretFor for a transport without host
// keys.
func jobSecret(secret []byte) func(uint32, []byte) ([]byte, error) {
	return func(_ uint32, pub []byte) ([]byte, error) {
		if pub != nil {
			return nil, errAuth
		}
		return secret, nil
	}
}

// A rank fences a peer that streams writes at it without pause, on a
// sealed and a plain connection: Fence returns while the stream goes on.
// (The sealed read loop used to go on reading while its opener held part
// of a record, which a stream keeps true, holding the read token that
// Fence takes: Fence waited for the stream to stop, 20 s in one CI run.)
func TestFenceWhileStreaming(t *testing.T) {
	for _, seal := range []SealMode{SealRemote, SealAll} {
		for _, spin := range []time.Duration{-1, 0} {
			t.Run(fmt.Sprintf("seal=%d/spin=%v", seal, spin), func(t *testing.T) {
				ts, _ := clusterSealed(t, 2, spin, seal)
				ctx := testCtx(t)
				mem := words(1 << 10)
				key, err := ts[0].Register(mem)
				if err != nil {
					t.Fatal(err)
				}
				stop := make(chan struct{})
				var posted atomic.Int64
				streamed := make(chan error, 1)
				go func() {
					data := make([]byte, 512)
					for i := 0; ; i++ {
						select {
						case <-stop:
							streamed <- nil
							return
						default:
						}
						if _, err := ts[1].Write(0, key, 0, data); err != nil {
							streamed <- err
							return
						}
						posted.Add(1)
						if i%64 == 63 {
							ts[1].Push(0)
						}
					}
				}()
				defer close(stop)
				for posted.Load() < 20000 {
					select {
					case err := <-streamed:
						t.Fatalf("the stream stopped before the fence: %v", err)
					case <-ctx.Done():
						t.Fatalf("%d writes posted, want 20000", posted.Load())
					default:
						time.Sleep(time.Millisecond)
					}
				}
				fenced := make(chan error, 1)
				go func() { fenced <- ts[0].Fence(1) }()
				select {
				case err := <-fenced:
					if err != nil {
						t.Fatal(err)
					}
				case <-ctx.Done():
					t.Fatalf("Fence did not return while the peer streamed (%d writes posted)", posted.Load())
				}
				if err := ts[0].Flush(ctx, 1); !errors.Is(err, ftrma.ErrProcFailed) {
					t.Fatalf("flush toward the fenced rank: %v", err)
				}
			})
		}
	}
}
