//go:build linux

package shm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// recorder is a transport.Receiver that keeps what it is given.
type recorder struct {
	mu      sync.Mutex
	msgs    map[ftrma.Rank][][]byte
	n       int
	events  []string // "msg <from>" and "down <peer>", in arrival order
	downs   map[ftrma.Rank][]error
	changed chan struct{} // signalled (buffer of one) on every arrival
	hook    func(from ftrma.Rank, msg []byte)
}

func newRecorder() *recorder {
	return &recorder{msgs: map[ftrma.Rank][][]byte{}, downs: map[ftrma.Rank][]error{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) HandleMessage(from ftrma.Rank, msg []byte) {
	if r.hook != nil {
		r.hook(from, msg)
	}
	r.mu.Lock()
	r.msgs[from] = append(r.msgs[from], slices.Clone(msg))
	r.n++
	r.events = append(r.events, fmt.Sprintf("msg %d", from))
	r.mu.Unlock()
	r.signal()
}

func (r *recorder) HandlePeerDown(peer ftrma.Rank, err error) {
	r.mu.Lock()
	r.downs[peer] = append(r.downs[peer], err)
	r.events = append(r.events, fmt.Sprintf("down %d", peer))
	r.mu.Unlock()
	r.signal()
}

func (r *recorder) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
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

// await waits until cond holds, re-checking on every arrival and every
// few milliseconds, or fails the test when ctx ends.
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

func (l *logSink) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

type clusterOpts struct {
	cfg          func(*Config) // adjusts every rank's Config
	noReceiver   bool          // do not install the recorders
	dir, job     string        // default t.TempDir() and "t"
	skipConnect  bool
	skipCleanups bool
}

// cluster opens n transports of one job in this process, each with a
// recorder, and connects them.
func cluster(t testing.TB, n int, o clusterOpts) ([]*Transport, []*recorder, *logSink) {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.job == "" {
		o.job = "t"
	}
	logs := &logSink{}
	ts := make([]*Transport, n)
	rs := make([]*recorder, n)
	for r := range ts {
		cfg := Config{Rank: ftrma.Rank(r), Size: n, Job: o.job, Dir: o.dir, Logf: logs.logf}
		if o.cfg != nil {
			o.cfg(&cfg)
		}
		tr, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts[r], rs[r] = tr, newRecorder()
		if !o.noReceiver {
			tr.SetReceiver(rs[r])
		}
		if !o.skipCleanups {
			t.Cleanup(func() { tr.Close() })
		}
	}
	if !o.skipConnect {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc := make(chan error, n)
		for _, tr := range ts {
			go func() { errc <- tr.Connect(ctx) }()
		}
		for range ts {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	}
	return ts, rs, logs
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must returns v, or panics (failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
