//go:build linux

package multi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport/multi"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/tcp"
)

var secret = []byte("test secret, 32 bytes long......")

// recorder is a transport.Receiver that keeps what it is given.
type recorder struct {
	mu      sync.Mutex
	msgs    map[ftrma.Rank][][]byte
	downs   map[ftrma.Rank][]error
	changed chan struct{} // signalled (buffer of one) on every arrival
}

func newRecorder() *recorder {
	return &recorder{msgs: map[ftrma.Rank][][]byte{}, downs: map[ftrma.Rank][]error{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) HandleMessage(from ftrma.Rank, msg []byte) {
	r.mu.Lock()
	r.msgs[from] = append(r.msgs[from], slices.Clone(msg))
	r.mu.Unlock()
	r.signal()
}

func (r *recorder) HandlePeerDown(peer ftrma.Rank, err error) {
	r.mu.Lock()
	r.downs[peer] = append(r.downs[peer], err)
	r.mu.Unlock()
	r.signal()
}

func (r *recorder) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) from(p ftrma.Rank) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs[p])
}

func (r *recorder) downsOf(p ftrma.Rank) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.downs[p])
}

// await waits until cond holds, re-checking on every arrival and every few
// milliseconds, or fails the test when ctx ends.
func (r *recorder) await(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-r.changed:
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// logSink collects log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// world is a job of ranks in this process spread over pretend hosts: the
// ranks of a host share an shm directory (each host its own) and every rank
// has a tcp transport on loopback; each rank's multi transport routes its
// host's ranks through shm and the others through tcp.
type world struct {
	ts     []*multi.Transport
	shms   []*shm.Transport
	tcps   []*tcp.Transport
	recs   []*recorder
	hostOf []int
	logs   *logSink
}

type worldOpts struct {
	noReceiver bool // install no receiver (a caller installs its own, then connects)
	noConnect  bool
}

// newWorld builds and connects a world; hosts lists each host's ranks.
func newWorld(tb testing.TB, hosts [][]ftrma.Rank, o worldOpts) *world {
	tb.Helper()
	n := 0
	for _, h := range hosts {
		n += len(h)
	}
	w := &world{
		ts:     make([]*multi.Transport, n),
		shms:   make([]*shm.Transport, n),
		tcps:   make([]*tcp.Transport, n),
		recs:   make([]*recorder, n),
		hostOf: make([]int, n),
		logs:   &logSink{},
	}
	addrs := make([]string, n)
	for h, ranks := range hosts {
		dir := tb.TempDir()
		for _, r := range ranks {
			w.hostOf[r] = h
			st, err := shm.Open(shm.Config{Rank: r, Size: n, Job: "t", Dir: dir, Ranks: ranks, Logf: w.logs.logf})
			if err != nil {
				tb.Fatal(err)
			}
			tt, err := tcp.Listen(tcp.Config{Rank: r, Size: n, Secret: secret, Logf: w.logs.logf})
			if err != nil {
				tb.Fatal(err)
			}
			m, err := multi.New([]multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt}}, multi.HostRoute(n, ranks))
			if err != nil {
				tb.Fatal(err)
			}
			w.ts[r], w.shms[r], w.tcps[r], w.recs[r] = m, st, tt, newRecorder()
			addrs[r] = m.Addr()
			if !o.noReceiver {
				m.SetReceiver(w.recs[r])
			}
			tb.Cleanup(func() { m.Close() })
		}
	}
	if !o.noConnect {
		w.connect(tb, addrs)
	}
	return w
}

func (w *world) addrs() []string {
	out := make([]string, len(w.ts))
	for r, m := range w.ts {
		out[r] = m.Addr()
	}
	return out
}

func (w *world) connect(tb testing.TB, addrs []string) {
	tb.Helper()
	if addrs == nil {
		addrs = w.addrs()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, len(w.ts))
	for _, m := range w.ts {
		go func() { errc <- m.Connect(ctx, addrs) }()
	}
	for range w.ts {
		if err := <-errc; err != nil {
			tb.Fatal(err)
		}
	}
}

func (w *world) sameHost(a, b ftrma.Rank) bool { return w.hostOf[a] == w.hostOf[b] }

// twoHosts is the usual world: ranks 0 and 1 on one host, 2 and 3 on another.
var twoHosts = [][]ftrma.Rank{{0, 1}, {2, 3}}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
