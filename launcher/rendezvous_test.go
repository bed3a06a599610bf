package launcher

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
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

// logger returns a logger whose lines (every level) l records.
func (l *logRecorder) logger() *slog.Logger { return logfLogger(l.logf, "", slog.LevelDebug) }

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
	s, err := listenRendezvous(rvConfig{Size: size, Secret: testSecret(1), Logger: logs.logger(), HandshakeTimeout: testTimeout, logEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close() })
	return s, logs
}

// testRank is a rank's side of the rendezvous, for testing the server: the
// conversation of startup's rendezvous client (TLS keyed by the job secret,
// jobwire's handshake, publish, addrs) without a transport.
type testRank struct {
	rank       ftrma.Rank
	size       int
	rendezvous string // the server's address
	secret     []byte // its host's secret
	host       int    // its host
}

// hostSecret0 is the secret of host 0 of the test jobs, whose ranks
// secret is testSecret(1).
var hostSecret0 = jobwire.HostSecret(testSecret(1), 0)

func fakeRank(s *rvServer, r ftrma.Rank, size int) testRank {
	return testRank{rank: r, size: size, rendezvous: s.addr(), secret: hostSecret0}
}

// rankFromEnv is the testRank of a helper rank, from the environment ftrun
// gave it.
func rankFromEnv() (testRank, error) {
	rank, err1 := strconv.Atoi(os.Getenv(jobwire.EnvRank))
	size, err2 := strconv.Atoi(os.Getenv(jobwire.EnvSize))
	secret, err3 := hex.DecodeString(os.Getenv(jobwire.EnvSecret))
	host, err4 := strconv.Atoi(os.Getenv(jobwire.EnvHostIndex))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return testRank{}, fmt.Errorf("job environment: %w", err)
	}
	return testRank{rank: ftrma.Rank(rank), size: size, rendezvous: os.Getenv(jobwire.EnvRendezvous), secret: secret, host: host}, nil
}

// join dials the server as rank r, publishes addr and returns the open
// connection (the supervision channel) with every rank's address.
func (r testRank) join(ctx context.Context, addr string) (net.Conn, []string, error) {
	return r.joinAddr(ctx, jobwire.WholeAddr(addr))
}

// joinAddr is join with an address that may be split (jobwire.Addr). As
// startup's rank does, it dials again when the server cuts its handshake
// off (jobwire.HandshakeTries).
func (r testRank) joinAddr(ctx context.Context, addr jobwire.Addr) (net.Conn, []string, error) {
	for try := 1; ; try++ {
		c, addrs, cut, err := r.joinOnce(ctx, addr)
		if !cut || try == jobwire.HandshakeTries || ctx.Err() != nil {
			return c, addrs, err
		}
		time.Sleep(time.Duration(try) * 20 * time.Millisecond)
	}
}

func (r testRank) joinOnce(ctx context.Context, addr jobwire.Addr) (net.Conn, []string, bool, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", r.rendezvous)
	if err != nil {
		return nil, nil, false, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(testTimeout)
	}
	c, err := jobwire.DialRendezvous(raw, r.secret, r.host, deadline)
	if err == nil {
		err = jobwire.ClientHandshake(c, r.secret, jobwire.RendezvousHandshake, uint32(r.rank))
	}
	if err != nil {
		raw.Close()
		return nil, nil, jobwire.ClosedByPeer(err), err
	}
	c.SetDeadline(deadline)
	addrs, err := r.exchange(c, addr)
	if err != nil {
		c.Close()
		return nil, nil, false, err
	}
	c.SetDeadline(time.Time{})
	return c, addrs, false, nil
}

// exchange is startup's, without its checks of addr: the server's are
// tested.
func (r testRank) exchange(c net.Conn, addr jobwire.Addr) ([]string, error) {
	if err := jobwire.WriteFrame(c, jobwire.MsgPublish, addr.Append(nil)); err != nil {
		return nil, err
	}
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxAddrsFrame)
	if err != nil {
		return nil, err
	}
	if err := jobwire.ExpectFrom(typ, p, jobwire.MsgAddrs, "addresses", "launcher"); err != nil {
		return nil, err
	}
	addrs, err := jobwire.ParseAddrs(p)
	if err == nil && len(addrs) != r.size {
		err = fmt.Errorf("%d addresses for a job of %d ranks", len(addrs), r.size)
	}
	return addrs, err
}

// awaitStart is a rank's side of the start barrier on its supervision
// channel c: it says it is connected and waits for start, returning the
// exit notices that came first.
func (r testRank) awaitStart(c net.Conn) ([]ftrma.Rank, error) {
	if err := jobwire.WriteFrame(c, jobwire.MsgConnected, nil); err != nil {
		return nil, err
	}
	var exits []ftrma.Rank
	for {
		typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
		if err != nil {
			return exits, err
		}
		switch typ {
		case jobwire.MsgStart:
			return exits, nil
		case jobwire.MsgExit:
			q, err := jobwire.ParseRank(p, r.size)
			if err != nil {
				return exits, err
			}
			exits = append(exits, q)
		case jobwire.MsgError:
			return exits, fmt.Errorf("launcher says: %s", jobwire.Printable(p))
		}
	}
}

type joinResult struct {
	conn  net.Conn
	addrs []string
	err   error
}

// joinAll runs fake ranks in goroutines; each publishes "addr-R".
func joinAll(ctx context.Context, ranks []testRank) []joinResult {
	res := make([]joinResult, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			c, a, err := r.join(ctx, fmt.Sprintf("addr-%d", r.rank))
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
	ranks := make([]testRank, n)
	for i := range ranks {
		ranks[i] = fakeRank(s, ftrma.Rank(n-1-i), n) // join in reverse order
	}
	res := joinAll(ctx, ranks)
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("rank %d: %v", ranks[i].rank, r.err)
		}
		if !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, want %q", ranks[i].rank, r.addrs, wantAddrs(n))
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
	res := joinAll(ctx, []testRank{fakeRank(s, 0, 1)})
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

	bad := fakeRank(s, 1, n)
	bad.secret = testSecret(2)
	c, _, err := bad.join(ctx, "evil")
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

	ranks := []testRank{fakeRank(s, 0, n), fakeRank(s, 1, n), fakeRank(s, 2, n)}
	res := joinAll(ctx, ranks)
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil || !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, %v", i, r.addrs, r.err)
		}
	}
}

// Each host's ranks hold that host's secret only: a rank of host 1 cannot
// join as a rank placed on host 0, neither naming its own host (it runs
// elsewhere) nor host 0 (whose secret it does not hold); the ranks of
// both hosts then join.
func TestRendezvousRanksSpeakOnlyForTheirHost(t *testing.T) {
	const n = 3
	logs := new(logRecorder)
	s, err := listenRendezvous(rvConfig{Size: n, Secret: testSecret(1), HostOf: []int{0, 0, 1}, Logger: logs.logger(), HandshakeTimeout: testTimeout, logEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	host1 := jobwire.HostSecret(testSecret(1), 1)
	for _, c := range []struct {
		name   string
		host   int
		secret []byte
		want   string
	}{
		{"naming its own host", 1, host1, "runs on another host"},
		{"naming host 0", 0, host1, "does not know the key"},
	} {
		bad := fakeRank(s, 1, n) // placed on host 0
		bad.host, bad.secret = c.host, c.secret
		conn, _, err := bad.join(ctx, "evil")
		if err == nil {
			conn.Close()
			t.Fatalf("a rank of host 1, %s, joined as rank 1 of host 0", c.name)
		}
		if !waitFor(func() bool { return strings.Contains(logs.String(), c.want) }) {
			t.Errorf("%s: the server's log does not say %q:\n%s", c.name, c.want, logs)
		}
	}
	ranks := []testRank{fakeRank(s, 0, n), fakeRank(s, 1, n), fakeRank(s, 2, n)}
	ranks[2].host, ranks[2].secret = 1, host1
	res := joinAll(ctx, ranks)
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
	rawAuth := func(mk func(h jobwire.Hello) []byte) func(c net.Conn) {
		return func(c net.Conn) {
			typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			if err != nil || typ != jobwire.MsgHello {
				t.Errorf("no hello: %d, %v", typ, err)
				return
			}
			h, _ := jobwire.ParseHello(p)
			c.Write(jobwire.AppendFrame(nil, jobwire.MsgAuth, mk(h)))
		}
	}
	goodAuth := func(r uint32) func(h jobwire.Hello) []byte {
		return func(h jobwire.Hello) []byte {
			nonce := bytes.Repeat([]byte{5}, jobwire.NonceSize)
			return jobwire.Auth{Version: jobwire.RendezvousVersion, Rank: r, Nonce: nonce, Proof: jobwire.Proof(hostSecret0, jobwire.LabelRank, jobwire.RendezvousVersion, r, h.Nonce, nonce)}.Append(nil)
		}
	}
	bad := []struct {
		name string
		talk func(c net.Conn)
		log  string // what the server's log must say
	}{
		{"http request", func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) }, "malformed"},
		{"huge frame", func(c net.Conn) { c.Write([]byte{0xff, 0xff, 0xff, 0xff, jobwire.MsgAuth}) }, "malformed"},
		{"publish before auth", func(c net.Conn) { c.Write(jobwire.AppendFrame(nil, jobwire.MsgPublish, []byte("x"))) }, "want auth"},
		{"short auth", rawAuth(func(jobwire.Hello) []byte { return []byte{0, 1, 2} }), "malformed"},
		{"future version", rawAuth(func(jobwire.Hello) []byte { return []byte{0, 9} }), "version 9"},
		{"replayed proof", rawAuth(func(jobwire.Hello) []byte {
			nonce := make([]byte, jobwire.NonceSize)
			return jobwire.Auth{Version: jobwire.RendezvousVersion, Rank: 0, Nonce: nonce, Proof: jobwire.Proof(hostSecret0, jobwire.LabelRank, jobwire.RendezvousVersion, 0, make([]byte, jobwire.NonceSize), nonce)}.Append(nil)
		}), "authentication failed"},
		{"launcher's proof reflected", rawAuth(func(h jobwire.Hello) []byte {
			nonce := make([]byte, jobwire.NonceSize)
			return jobwire.Auth{Version: jobwire.RendezvousVersion, Rank: 0, Nonce: nonce, Proof: jobwire.Proof(hostSecret0, jobwire.LabelLauncher, jobwire.RendezvousVersion, 0, h.Nonce, nonce)}.Append(nil)
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
		c, err := jobwire.DialRendezvous(raw, hostSecret0, 0, time.Now().Add(testTimeout))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(testTimeout))
		b.talk(c)
		if b.name == "hang up after auth" {
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // the launcher's proof
			c.Close()
		}
		// The server answers with an error frame or just closes: read until EOF.
		for {
			if _, _, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame); err != nil {
				break
			}
		}
		c.Close()
		if !waitFor(func() bool { return strings.Contains(logs.String(), b.log) }) {
			t.Errorf("%s: server log %q does not say %q", b.name, logs, b.log)
		}
	}

	t.Logf("server log:\n%s", logs)
	res := joinAll(ctx, []testRank{fakeRank(s, 0, n), fakeRank(s, 1, n)})
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil || !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, %v", i, r.addrs, r.err)
		}
	}
	// A rank cannot join twice.
	_, _, err := fakeRank(s, 1, n).join(ctx, "again")
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
			c, _, err := fakeRank(s, ftrma.Rank(r), n).join(ctx, "a")
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
	_, _, err := fakeRank(s, 2, n).join(ctx, "late")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("late rank 2: %v, want an error containing %q", err, want)
	}
}

// A rank's exit after the rendezvous completed changes nothing.
func TestRankExitAfterRendezvous(t *testing.T) {
	s, _ := startServer(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := joinAll(ctx, []testRank{fakeRank(s, 0, 2), fakeRank(s, 1, 2)})
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

// The start barrier: no rank starts before every rank that has not exited
// said it is connected; a rank that exits first counts as done, and its exit
// notice reaches the waiting ranks before start. (startup's tests check that
// a rank hands such notices to its transport.)
func TestStartWaitsForEveryRankConnected(t *testing.T) {
	const n = 3
	s, _ := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ranks := []testRank{fakeRank(s, 0, n), fakeRank(s, 1, n), fakeRank(s, 2, n)}
	res := joinAll(ctx, ranks)
	defer closeAll(res)
	for _, r := range res {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	type started struct {
		exits []ftrma.Rank
		err   error
	}
	done := make([]chan started, 2)
	for r := range 2 {
		done[r] = make(chan started, 1)
		res[r].conn.SetDeadline(time.Now().Add(testTimeout))
		go func() {
			exits, err := ranks[r].awaitStart(res[r].conn)
			done[r] <- started{exits, err}
		}()
	}
	// Ranks 0 and 1 are connected, rank 2 is not: nobody may start.
	if !waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.connected[0] && s.connected[1] }) {
		t.Fatal("the launcher did not record ranks 0 and 1 connected")
	}
	select {
	case st := <-done[0]:
		t.Fatalf("rank 0 started while rank 2 was not connected (%v)", st.err)
	case <-time.After(200 * time.Millisecond):
	}
	s.rankExited(2, "was killed by signal 9", false)
	for r := range 2 {
		st := <-done[r]
		if st.err != nil {
			t.Fatalf("rank %d: %v", r, st.err)
		}
		if got := st.exits; !reflect.DeepEqual(got, []ftrma.Rank{2}) {
			t.Errorf("rank %d was told of exits %v, want [2]", r, got)
		}
	}
}

// A rank whose process closes its supervision channel without saying it
// leaves has hung up: it is gone (ftrun need not wait out its lease). One
// that said it leaves first has not hung up.
func TestSupervisionHangUp(t *testing.T) {
	s, _ := startServer(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := joinAll(ctx, []testRank{fakeRank(s, 0, 2), fakeRank(s, 1, 2)})
	defer closeAll(res)
	if res[0].err != nil || res[1].err != nil {
		t.Fatal(res[0].err, res[1].err)
	}
	jobwire.WriteFrame(res[0].conn, jobwire.MsgLeaving, nil)
	res[0].conn.Close()
	res[1].conn.Close()
	select {
	case <-s.hungUpChan(1):
	case <-ctx.Done():
		t.Fatal("rank 1 closed its supervision channel, and ftrun did not see it hang up")
	}
	if !waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.super[0] == nil }) {
		t.Fatal("ftrun still serves rank 0's closed channel")
	}
	select {
	case <-s.hungUpChan(0):
		t.Error("rank 0 said it leaves, and counts as hung up")
	default:
	}
}

// Connections that never start a handshake, more than the rendezvous runs
// at once, and a thousand that send junk, do not keep the job's ranks out:
// the oldest silent handshake is cut off when a new connection comes (the
// silent ones would otherwise hold their slots for the handshake timeout,
// here longer than the ranks wait), and the junk is logged once per source
// a second.
func TestRendezvousSilentAndJunkConnections(t *testing.T) {
	const n = 3
	logs := new(logRecorder)
	s, err := listenRendezvous(rvConfig{Size: n, Secret: testSecret(1), Logger: logs.logger(), HandshakeTimeout: 4 * testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range maxHandshakes + n + 8 {
		c, err := net.Dial("tcp", s.addr())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	junk := make(chan struct{})
	go func() {
		defer close(junk)
		for range 1000 {
			c, err := net.Dial("tcp", s.addr())
			if err != nil {
				continue
			}
			c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ranks := make([]testRank, n)
	for r := range ranks {
		ranks[r] = fakeRank(s, ftrma.Rank(r), n)
	}
	res := joinAll(ctx, ranks)
	defer closeAll(res)
	<-junk
	for i, r := range res {
		if r.err != nil || !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d behind %d silent connections: %q, %v", i, len(silent), r.addrs, r.err)
		}
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 20 {
		t.Errorf("%d log lines for 1,000 junk connections from one source:\n%s", lines, logs)
	}
}
