//go:build linux

package multi_test

import (
	"context"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport/multi"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/tcp"
	"github.com/ftrma/ftrma/transport/transporttest"
)

var secret = []byte("test secret, 32 bytes long......")

// The receiver and log of the tests (shared with the other transports').
type (
	recorder = transporttest.Recorder
	logSink  = transporttest.LogSink
)

var newRecorder = transporttest.NewRecorder

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
			st, err := shm.Open(shm.Config{Rank: r, Size: n, Job: "t", Dir: dir, Ranks: ranks, Logger: w.logs.Logger()})
			if err != nil {
				tb.Fatal(err)
			}
			tt, err := tcp.Listen(tcp.Config{Rank: r, Size: n, Secret: secret, Logger: w.logs.Logger()})
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
