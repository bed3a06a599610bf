package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/seclink"
)

// testTimeout bounds every wait in these tests; it is a safety net, never a
// measurement.
const testTimeout = 30 * time.Second

// logRecorder collects a server's log lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func testSecret(b byte) []byte { return bytes.Repeat([]byte{b}, secretSize) }

// startServer starts a rendezvous server for size ranks, closed with the test.
func startServer(t *testing.T, size int) (*rvServer, *logRecorder) {
	t.Helper()
	logs := new(logRecorder)
	s, err := listenRendezvous(rvConfig{Size: size, Secret: testSecret(1), Logf: logs.logf, HandshakeTimeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close() })
	return s, logs
}

func fakeEnv(s *rvServer, r ftrma.Rank, size int) jobEnv {
	return jobEnv{rank: r, size: size, rendezvous: s.addr(), secret: testSecret(1), job: "test", localSize: size}
}

type joinResult struct {
	conn  net.Conn
	addrs []string
	err   error
}

// joinAll runs fake ranks in goroutines; each publishes "addr-R".
func joinAll(ctx context.Context, envs []jobEnv) []joinResult {
	res := make([]joinResult, len(envs))
	var wg sync.WaitGroup
	for i, env := range envs {
		wg.Go(func() {
			c, a, err := rendezvous(ctx, env, fmt.Sprintf("addr-%d", env.rank))
			res[i] = joinResult{c, a, err}
		})
	}
	wg.Wait()
	return res
}

func closeAll(res []joinResult) {
	for _, r := range res {
		if r.conn != nil {
			r.conn.Close()
		}
	}
}

func wantAddrs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("addr-%d", i)
	}
	return a
}

func TestRendezvousExchangesAddresses(t *testing.T) {
	const n = 5
	s, logs := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	envs := make([]jobEnv, n)
	for i := range envs {
		envs[i] = fakeEnv(s, ftrma.Rank(n-1-i), n) // join in reverse order
	}
	res := joinAll(ctx, envs)
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("rank %d: %v", envs[i].rank, r.err)
		}
		if !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, want %q", envs[i].rank, r.addrs, wantAddrs(n))
		}
	}
	// The server holds every rank's connection open.
	s.mu.Lock()
	open := len(s.conns)
	s.mu.Unlock()
	if open != n {
		t.Errorf("server holds %d connections, want %d", open, n)
	}
	if logs.String() != "" {
		t.Errorf("unexpected server log:\n%s", logs)
	}
	// The kept connection is the supervision channel: the server notices when
	// a rank closes it (and does nothing else yet).
	res[0].conn.Close()
	res[0].conn = nil
	if !waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.conns) == n-1 }) {
		t.Error("server did not notice a rank's closed connection")
	}
}

func TestRendezvousSingleRank(t *testing.T) {
	s, _ := startServer(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := joinAll(ctx, []jobEnv{fakeEnv(s, 0, 1)})
	defer closeAll(res)
	if res[0].err != nil || !reflect.DeepEqual(res[0].addrs, []string{"addr-0"}) {
		t.Fatalf("got %q, %v", res[0].addrs, res[0].err)
	}
}

// A rank with the wrong secret is refused and logged, and the others still
// complete the rendezvous, including the rank whose number the impostor claimed.
func TestRendezvousRefusesWrongSecret(t *testing.T) {
	const n = 3
	s, logs := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	bad := fakeEnv(s, 1, n)
	bad.secret = testSecret(2)
	c, _, err := rendezvous(ctx, bad, "evil")
	if err == nil {
		c.Close()
		t.Fatal("a rank with the wrong secret joined")
	}
	if !strings.Contains(err.Error(), "does not know the key") {
		t.Errorf("impostor's error %q does not say the launcher does not know its key", err)
	}
	// The server logs after answering, so the impostor may hear first.
	if !waitFor(func() bool { return strings.Contains(logs.String(), "does not know the key") }) {
		t.Errorf("server log %q does not report the refused connection", logs)
	}

	envs := []jobEnv{fakeEnv(s, 0, n), fakeEnv(s, 1, n), fakeEnv(s, 2, n)}
	res := joinAll(ctx, envs)
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil || !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, %v", i, r.addrs, r.err)
		}
	}
}

// Clients that break the protocol are refused one by one, without crashing
// the server, which then completes the rendezvous for the real ranks.
func TestRendezvousRefusesBadClients(t *testing.T) {
	const n = 2
	s, logs := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	// rawAuth answers the server's hello with an auth built by mk.
	rawAuth := func(mk func(h hello) []byte) func(c net.Conn) {
		return func(c net.Conn) {
			typ, p, err := readFrame(c, maxSmall)
			if err != nil || typ != msgHello {
				t.Errorf("no hello: %d, %v", typ, err)
				return
			}
			h, _ := parseHello(p)
			c.Write(appendFrame(nil, msgAuth, mk(h)))
		}
	}
	goodAuth := func(r uint32) func(h hello) []byte {
		return func(h hello) []byte {
			nonce := bytes.Repeat([]byte{5}, nonceSize)
			return auth{rvVersion, r, nonce, proof(testSecret(1), labelRank, rvVersion, r, h.nonce, nonce)}.append(nil)
		}
	}
	bad := []struct {
		name string
		talk func(c net.Conn)
		log  string // what the server's log must say
	}{
		{"http request", func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) }, "malformed"},
		{"huge frame", func(c net.Conn) { c.Write([]byte{0xff, 0xff, 0xff, 0xff, msgAuth}) }, "malformed"},
		{"publish before auth", func(c net.Conn) { c.Write(appendFrame(nil, msgPublish, []byte("x"))) }, "want auth"},
		{"short auth", rawAuth(func(hello) []byte { return []byte{0, 1, 2} }), "malformed"},
		{"future version", rawAuth(func(hello) []byte { return []byte{0, 9} }), "version 9"},
		{"replayed proof", rawAuth(func(hello) []byte {
			nonce := make([]byte, nonceSize)
			return auth{rvVersion, 0, nonce, proof(testSecret(1), labelRank, rvVersion, 0, make([]byte, nonceSize), nonce)}.append(nil)
		}), "authentication failed"},
		{"launcher's proof reflected", rawAuth(func(h hello) []byte {
			nonce := make([]byte, nonceSize)
			return auth{rvVersion, 0, nonce, proof(testSecret(1), labelLauncher, rvVersion, 0, h.nonce, nonce)}.append(nil)
		}), "authentication failed"},
		{"rank out of range", rawAuth(goodAuth(n)), "out of range"},
		{"hang up after auth", rawAuth(goodAuth(0)), "EOF"},
	}
	for _, b := range bad {
		raw, err := net.Dial("tcp", s.addr())
		if err != nil {
			t.Fatal(err)
		}
		// Inside TLS keyed by the job secret: the rendezvous protocol's own
		// checks are what is tested here.
		c, err := seclink.Client(raw, rendezvousKey(testSecret(1)), time.Now().Add(testTimeout))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(testTimeout))
		b.talk(c)
		if b.name == "hang up after auth" {
			readFrame(c, maxSmall) // the launcher's proof
			c.Close()
		}
		// The server answers with an error frame or just closes: read until EOF.
		for {
			if _, _, err := readFrame(c, maxSmall); err != nil {
				break
			}
		}
		c.Close()
		if !waitFor(func() bool { return strings.Contains(logs.String(), b.log) }) {
			t.Errorf("%s: server log %q does not say %q", b.name, logs, b.log)
		}
	}

	t.Logf("server log:\n%s", logs)
	res := joinAll(ctx, []jobEnv{fakeEnv(s, 0, n), fakeEnv(s, 1, n)})
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil || !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, %v", i, r.addrs, r.err)
		}
	}
	// A rank cannot join twice.
	_, _, err := rendezvous(ctx, fakeEnv(s, 1, n), "again")
	if err == nil || !strings.Contains(err.Error(), "already joined") {
		t.Fatalf("second rank 1: %v, want already joined", err)
	}
}

// waitFor polls cond until it holds or testTimeout passes.
func waitFor(cond func() bool) bool {
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// A rank that exits before publishing makes the rendezvous fail for the ranks
// waiting in it, and for later ones, instead of leaving them waiting forever.
func TestRendezvousFailsWhenRankExits(t *testing.T) {
	const n = 3
	s, _ := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			c, _, err := rendezvous(ctx, fakeEnv(s, ftrma.Rank(r), n), "a")
			if c != nil {
				c.Close()
			}
			errs[r] = err
		})
	}
	// Let both publish, then report rank 2's death.
	if !waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.published == 2 }) {
		t.Fatal("ranks 0 and 1 did not publish")
	}
	s.rankExited(2, "exited with status 7", false)
	wg.Wait()
	const want = "rank 2 exited with status 7 before the rendezvous completed"
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want an error containing %q", r, err, want)
		}
	}
	_, _, err := rendezvous(ctx, fakeEnv(s, 2, n), "late")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("late rank 2: %v, want an error containing %q", err, want)
	}
}

// A rank's exit after the rendezvous completed changes nothing.
func TestRankExitAfterRendezvous(t *testing.T) {
	s, _ := startServer(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := joinAll(ctx, []jobEnv{fakeEnv(s, 0, 2), fakeEnv(s, 1, 2)})
	defer closeAll(res)
	s.rankExited(1, "exited with status 0", true)
	if res[0].err != nil || res[1].err != nil {
		t.Fatal(res[0].err, res[1].err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != "" {
		t.Fatalf("failure %q after completion", s.failure)
	}
}

// Join gives up when its context ends.
func TestRendezvousContext(t *testing.T) {
	s, _ := startServer(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.published == 1 })
		cancel()
	}()
	_, _, err := rendezvous(ctx, fakeEnv(s, 0, 2), "a")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("rendezvous after cancel: %v, want context.Canceled", err)
	}
}

// fakeLauncher serves one connection with talk and returns its address.
func fakeLauncher(t *testing.T, talk func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc, err := seclink.Server(c, rendezvousKey(testSecret(1)), time.Now().Add(testTimeout))
		if err != nil {
			return
		}
		tc.SetDeadline(time.Now().Add(testTimeout))
		talk(tc)
	}()
	return ln.Addr().String()
}

// A rank checks that the launcher knows the secret too, and which protocol
// version it speaks.
func TestRankChecksLauncher(t *testing.T) {
	nonce := bytes.Repeat([]byte{3}, nonceSize)
	tests := []struct {
		name string
		talk func(c net.Conn)
		want string
	}{
		{"wrong secret", func(c net.Conn) {
			writeFrame(c, msgHello, hello{rvVersion, nonce}.append(nil))
			_, p, _ := readFrame(c, maxSmall)
			a, _ := parseAuth(p)
			writeFrame(c, msgProof, proof(testSecret(9), labelLauncher, rvVersion, a.rank, nonce, a.nonce))
			readFrame(c, maxSmall)
		}, "failed to prove"},
		{"rank's proof reflected", func(c net.Conn) {
			writeFrame(c, msgHello, hello{rvVersion, nonce}.append(nil))
			_, p, _ := readFrame(c, maxSmall)
			a, _ := parseAuth(p)
			writeFrame(c, msgProof, a.proof)
			readFrame(c, maxSmall)
		}, "failed to prove"},
		{"newer version", func(c net.Conn) {
			writeFrame(c, msgHello, hello{version: 2}.append(nil))
			readFrame(c, maxSmall)
		}, "version 2"},
		{"not a launcher", func(c net.Conn) {
			c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
		}, "malformed"},
		{"wrong address count", func(c net.Conn) {
			writeFrame(c, msgHello, hello{rvVersion, nonce}.append(nil))
			_, p, _ := readFrame(c, maxSmall)
			a, _ := parseAuth(p)
			writeFrame(c, msgProof, proof(testSecret(1), labelLauncher, rvVersion, a.rank, nonce, a.nonce))
			readFrame(c, maxSmall)
			writeFrame(c, msgAddrs, appendAddrs(nil, []string{"addr-0"}))
		}, "1 addresses for a job of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := jobEnv{rank: 0, size: 2, rendezvous: fakeLauncher(t, tt.talk), secret: testSecret(1)}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, _, err := rendezvous(ctx, env, "addr-0")
			if err == nil {
				c.Close()
				t.Fatal("rendezvous succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// peerDowns records the exit notices awaitStart hands on.
type peerDowns struct {
	mu    sync.Mutex
	ranks []ftrma.Rank
}

func (p *peerDowns) PeerDown(r ftrma.Rank, err error) {
	p.mu.Lock()
	p.ranks = append(p.ranks, r)
	p.mu.Unlock()
}

// The start barrier: no rank starts before every rank that has not exited
// said it is connected; a rank that exits first counts as done, and its exit
// notice reaches the waiting ranks' transports.
func TestStartWaitsForEveryRankConnected(t *testing.T) {
	const n = 3
	s, _ := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	envs := []jobEnv{fakeEnv(s, 0, n), fakeEnv(s, 1, n), fakeEnv(s, 2, n)}
	res := joinAll(ctx, envs)
	defer closeAll(res)
	for _, r := range res {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	done := make([]chan error, 2)
	downs := make([]*peerDowns, 2)
	for r := range 2 {
		done[r], downs[r] = make(chan error, 1), new(peerDowns)
		go func() { done[r] <- awaitStart(ctx, res[r].conn, envs[r], downs[r]) }()
	}
	// Ranks 0 and 1 are connected, rank 2 is not: nobody may start.
	if !waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.connected[0] && s.connected[1] }) {
		t.Fatal("the launcher did not record ranks 0 and 1 connected")
	}
	select {
	case err := <-done[0]:
		t.Fatalf("rank 0 started while rank 2 was not connected (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	s.rankExited(2, "was killed by signal 9", false)
	for r := range 2 {
		if err := <-done[r]; err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		downs[r].mu.Lock()
		got := downs[r].ranks
		downs[r].mu.Unlock()
		if !reflect.DeepEqual(got, []ftrma.Rank{2}) {
			t.Errorf("rank %d was told of exits %v, want [2]", r, got)
		}
	}
}
