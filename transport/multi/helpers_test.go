//go:build linux

package multi_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
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
	hcas   []*hcaTCP // with splitAtomics
	recs   []*recorder
	hostOf []int
	logs   *logSink
}

type worldOpts struct {
	noReceiver bool // install no receiver (a caller installs its own, then connects)
	noConnect  bool
	// splitAtomics: tcp reaches every rank (multi.Sub.Reach) and, lacking
	// CapLocalAtomics (hcaTCP), executes every atomic; data goes by route.
	splitAtomics bool
}

// hcaTCP is a tcp transport that says its atomics are not atomic with the
// CPU's, as an RDMA device with IBV_ATOMIC_HCA does, and counts the
// atomics and data operations posted through it, by target.
type hcaTCP struct {
	*tcp.Transport
	atomics, data []atomic.Int64
	recv          atomic.Pointer[transport.Receiver] // what multi installed
}

func (h *hcaTCP) SetReceiver(r transport.Receiver) {
	h.recv.Store(&r)
	h.Transport.SetReceiver(r)
}

func (h *hcaTCP) Caps() transport.Caps {
	return h.Transport.Caps() &^ transport.CapLocalAtomics
}

func (h *hcaTCP) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	h.atomics[peer].Add(1)
	return h.Transport.CompareAndSwap64(peer, key, off, old, new, result)
}

func (h *hcaTCP) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	h.atomics[peer].Add(1)
	return h.Transport.FetchAndAdd64(peer, key, off, delta, result)
}

func (h *hcaTCP) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	h.data[peer].Add(1)
	return h.Transport.Write(peer, key, off, src)
}

func (h *hcaTCP) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	h.data[peer].Add(1)
	return h.Transport.Read(peer, key, off, dst)
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
		hcas:   make([]*hcaTCP, n),
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
			subs := []multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt}}
			if o.splitAtomics {
				h := &hcaTCP{Transport: tt, atomics: make([]atomic.Int64, n), data: make([]atomic.Int64, n)}
				w.hcas[r] = h
				subs[1] = multi.Sub{Name: "tcp", T: h, Reach: true}
			}
			route, err := multi.AskRoute(n, nil, subs[0].T, subs[1].T)
			if err != nil {
				tb.Fatal(err)
			}
			m, err := multi.New(subs, route)
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
