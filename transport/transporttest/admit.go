package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Spares is a job of the transport under test started with spare ranks
// (ftrun --respawn), all in this process. Every transport has Size
// len(Ranks).
type Spares struct {
	// Ranks holds rank r's transport at index r: the started ranks 0 to
	// Live-1 connected, with no receiver set; nil for the spares, which
	// are absent until Start. The suite fills in the spares it starts.
	Ranks []transport.Transport
	Live  int
	// Start starts spare s: live lists the ranks up now (their transports
	// built and connected), failed the ranks that failed (known to the
	// suite as killed); every other rank is absent for s. It returns s's
	// transport, which implements transport.Admitter, the address the live
	// ranks admit it with, and connect, which ends s's start: it returns
	// when s is connected to every rank of live. A transport may need the
	// live ranks to admit s first, so the suite runs connect while they
	// do. The transport's clean-up is registered with t.Cleanup.
	Start func(s int, live, failed []int) (tr transport.Transport, addr string, connect func(context.Context) error)
	// Kill makes a started rank (a spare included) vanish as a crashed
	// process does. Nil: the suite closes the rank's transport instead.
	Kill func(r int)
}

// SpareFactory builds a job of live started ranks and spares absent
// spares (live+spares is at most 5) for one test, as Factory does.
type SpareFactory func(t testing.TB, live, spares int) *Spares

// RunAdmission runs the admission contract (transport.Admitter) against
// jobs with spares built by f, one subtest per part:
//
//   - Absent: operations, Wait, Flush and Send toward a spare not admitted
//     fail at once with ftrma.ErrRankOutOfRange, saying it has not
//     started, never with ftrma.ErrProcFailed, and no peer-down event is
//     reported for it.
//   - AdmitErrors: Admit of self, of a started peer, of a rank out of range,
//     of a spare reported down (PeerDown) or fenced while absent, and after
//     Close fail; a spare reported down while absent fails operations with
//     ftrma.ErrProcFailed and is reported down once.
//   - RoundTrip: a spare admitted by every live rank writes, reads, runs
//     atomics and exchanges messages both ways; a second spare started
//     later is admitted by the first one too and reaches it; admitting
//     twice fails.
//   - AfterFailure: a spare started after a rank failed sees the failed
//     rank down (ftrma.ErrProcFailed), not absent; when the spare is killed
//     every live rank gets HandlePeerDown once, operations toward it fail
//     with ftrma.ErrProcFailed, and it cannot be admitted again.
//   - Fence: after a live rank fences an admitted spare, the spare's writes
//     no longer land there, operations toward it fail, and the other ranks
//     still reach it.
func RunAdmission(t *testing.T, f SpareFactory) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, SpareFactory)
	}{
		{"Absent", testAbsent},
		{"AdmitErrors", testAdmitErrors},
		{"RoundTrip", testAdmitRoundTrip},
		{"AfterFailure", testAdmitAfterFailure},
		{"Fence", testAdmitFence},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}

// spareJob builds a job with spares, a Recorder installed at each live
// rank (recs has room for the spares).
func spareJob(t *testing.T, f SpareFactory, live, spares int) (*Spares, []*Recorder) {
	t.Helper()
	w := f(t, live, spares)
	if len(w.Ranks) != live+spares || w.Live != live {
		t.Fatalf("the factory built %d ranks, %d live; want %d and %d", len(w.Ranks), w.Live, live+spares, live)
	}
	recs := make([]*Recorder, live+spares)
	for r := range live {
		tr := w.Ranks[r]
		if tr.Rank() != ftrma.Rank(r) || tr.Size() != live+spares {
			t.Fatalf("rank %d says it is rank %d of %d", r, tr.Rank(), tr.Size())
		}
		if _, ok := tr.(transport.Admitter); !ok {
			t.Fatalf("rank %d's transport is no transport.Admitter", r)
		}
		recs[r] = NewRecorder()
		tr.SetReceiver(recs[r])
	}
	return w, recs
}

func admitter(t testing.TB, tr transport.Transport) transport.Admitter {
	t.Helper()
	a, ok := tr.(transport.Admitter)
	if !ok {
		t.Fatalf("rank %d's transport is no transport.Admitter", tr.Rank())
	}
	return a
}

// startSpare starts spare s, with every rank of live admitting it while
// it connects, and installs a Recorder at it.
func startSpare(t *testing.T, ctx context.Context, w *Spares, recs []*Recorder, s int, live, failed []int) {
	t.Helper()
	tr, addr, connect := w.Start(s, live, failed)
	if tr.Rank() != ftrma.Rank(s) || tr.Size() != len(w.Ranks) {
		t.Fatalf("spare %d says it is rank %d of %d", s, tr.Rank(), tr.Size())
	}
	recs[s] = NewRecorder()
	tr.SetReceiver(recs[s])
	errc := make(chan error, 1)
	go func() { errc <- connect(ctx) }()
	for _, r := range live {
		if err := admitter(t, w.Ranks[r]).Admit(ftrma.Rank(s), addr); err != nil {
			t.Fatalf("rank %d: admit spare %d: %v", r, s, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("spare %d: connect: %v", s, err)
	}
	w.Ranks[s] = tr
}

// wantAbsent checks that err is the error toward a rank not started.
func wantAbsent(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ftrma.ErrRankOutOfRange) || errors.Is(err, ftrma.ErrProcFailed) || !strings.Contains(fmt.Sprint(err), "not started") {
		t.Errorf("%s: %v, want ErrRankOutOfRange saying the rank has not started (not ErrProcFailed)", what, err)
	}
}

func testAbsent(t *testing.T, f SpareFactory) {
	w, recs := spareJob(t, f, 2, 2)
	ctx := ctxFor(t)
	var res uint64
	for r := range 2 {
		tr := w.Ranks[r]
		for _, s := range []ftrma.Rank{2, 3} {
			for name, err := range map[string]error{
				"write": func() error { _, err := tr.Write(s, 1, 0, []byte{1}); return err }(),
				"read":  func() error { _, err := tr.Read(s, 1, 0, make([]byte, 8)); return err }(),
				"cas":   func() error { _, err := tr.CompareAndSwap64(s, 1, 0, 0, 1, &res); return err }(),
				"fadd":  func() error { _, err := tr.FetchAndAdd64(s, 1, 0, 1, nil); return err }(),
				"send":  tr.Send(s, []byte("hello")),
				"flush": tr.Flush(ctx, s),
				"wait":  tr.Wait(ctx, s, 1),
			} {
				wantAbsent(t, fmt.Sprintf("rank %d: %s toward spare %d", r, name, s), err)
			}
		}
	}
	// The live ranks reach each other, and nobody heard of the spares.
	mem := Mem(t, w.Ranks[1], 8)
	key := register(t, w.Ranks[1], mem)
	if seq, err := w.Ranks[0].Write(1, key, 0, []byte{9}); complete(ctx, w.Ranks[0], 1, seq, err) != nil || mem[0] != 9 {
		t.Fatalf("rank 0's write toward rank 1: %v", err)
	}
	if err := w.Ranks[1].Send(0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	recs[0].Await(t, ctx, "rank 1's message", func() bool { return len(recs[0].From(1)) == 1 })
	for r := range 2 {
		for _, s := range []ftrma.Rank{2, 3} {
			if d := recs[r].DownsOf(s); len(d) != 0 {
				t.Errorf("rank %d: peer-down events for absent spare %d: %v", r, s, d)
			}
		}
	}
}

func testAdmitErrors(t *testing.T, f SpareFactory) {
	w, recs := spareJob(t, f, 3, 2)
	ctx := ctxFor(t)
	a0 := admitter(t, w.Ranks[0])
	for _, c := range []struct {
		name string
		peer ftrma.Rank
		want error
	}{
		{"self", 0, ftrma.ErrInvalid},
		{"a started peer", 1, ftrma.ErrInvalid},
		{"rank -1", -1, ftrma.ErrRankOutOfRange},
		{"a rank beyond the job", 5, ftrma.ErrRankOutOfRange},
	} {
		if err := a0.Admit(c.peer, ""); !errors.Is(err, c.want) {
			t.Errorf("admit %s: %v, want %v", c.name, err, c.want)
		}
	}
	// A spare that died before rank 0 admitted it (the launcher's exit
	// notice) is down for good.
	cause := errors.New("the launcher saw it exit")
	w.Ranks[0].PeerDown(3, cause)
	w.Ranks[0].PeerDown(3, errors.New("again"))
	recs[0].Await(t, ctx, "the peer-down event of the spare", func() bool { return len(recs[0].DownsOf(3)) > 0 })
	for name, err := range map[string]error{
		"write": func() error { _, err := w.Ranks[0].Write(3, 1, 0, []byte{1}); return err }(),
		"send":  w.Ranks[0].Send(3, []byte("x")),
		"flush": w.Ranks[0].Flush(ctx, 3),
	} {
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("%s toward a spare reported down before admission: %v, want ErrProcFailed", name, err)
		}
	}
	if err := a0.Admit(3, ""); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("admit a spare reported down: %v, want ErrInvalid", err)
	}
	// Fencing an absent spare fails it too.
	if err := w.Ranks[1].Fence(4); err != nil {
		t.Fatalf("rank 1: fence absent spare 4: %v", err)
	}
	if err := admitter(t, w.Ranks[1]).Admit(4, ""); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("admit a fenced spare: %v, want ErrInvalid", err)
	}
	// A message of rank 0 to itself, sent after the event, comes after it:
	// a second event would have shown by then.
	if err := w.Ranks[0].Send(0, []byte("after")); err != nil {
		t.Fatal(err)
	}
	recs[0].Await(t, ctx, "the message to self", func() bool { return len(recs[0].From(0)) == 1 })
	if d := recs[0].DownsOf(3); len(d) != 1 || !errors.Is(d[0], ftrma.ErrProcFailed) {
		t.Errorf("peer-down events for spare 3: %v, want one wrapping ErrProcFailed", d)
	}
	// Rank 2 did not hear of either, and still has them absent.
	if _, err := w.Ranks[2].Write(3, 1, 0, []byte{1}); err != nil {
		wantAbsent(t, "rank 2: write toward spare 3", err)
	} else {
		t.Error("rank 2: write toward absent spare 3 was accepted")
	}
	w.Ranks[2].Close()
	if err := admitter(t, w.Ranks[2]).Admit(4, ""); !errors.Is(err, ftrma.ErrClosed) {
		t.Errorf("admit after Close: %v, want ErrClosed", err)
	}
}

func testAdmitRoundTrip(t *testing.T, f SpareFactory) {
	w, recs := spareJob(t, f, 2, 2)
	ctx := ctxFor(t)
	startSpare(t, ctx, w, recs, 2, []int{0, 1}, nil)
	ts := w.Ranks
	mems := make([][]byte, 4)
	keys := make([]transport.Key, 4)
	for _, r := range []int{0, 1, 2} {
		mems[r] = Mem(t, ts[r], 64)
		keys[r] = register(t, ts[r], mems[r])
	}
	// Rank 0 toward the spare, the spare toward rank 1.
	for _, c := range []struct{ from, to int }{{0, 2}, {2, 1}, {1, 2}, {2, 0}} {
		what := fmt.Sprintf("rank %d toward rank %d", c.from, c.to)
		tr, to := ts[c.from], ftrma.Rank(c.to)
		src := []byte(fmt.Sprintf("from %d to %d", c.from, c.to))
		seq, err := tr.Write(to, keys[c.to], 16, src)
		if err := complete(ctx, tr, to, seq, err); err != nil {
			t.Fatalf("%s: write: %v", what, err)
		}
		if got := string(mems[c.to][16 : 16+len(src)]); got != string(src) {
			t.Fatalf("%s: memory holds %q after the write", what, got)
		}
		dst := make([]byte, len(src))
		seq, err = tr.Read(to, keys[c.to], 16, dst)
		if err := complete(ctx, tr, to, seq, err); err != nil || string(dst) != string(src) {
			t.Fatalf("%s: read %q, %v", what, dst, err)
		}
		var old uint64
		*word(mems[c.to], 0) = 0
		seq, err = tr.CompareAndSwap64(to, keys[c.to], 0, 0, 7, &old)
		if err := complete(ctx, tr, to, seq, err); err != nil || old != 0 {
			t.Fatalf("%s: cas: prior %d, %v", what, old, err)
		}
		seq, err = tr.FetchAndAdd64(to, keys[c.to], 0, 3, &old)
		if err := complete(ctx, tr, to, seq, err); err != nil || old != 7 || *word(mems[c.to], 0) != 10 {
			t.Fatalf("%s: fetch-and-add: prior %d, word %d, %v", what, old, *word(mems[c.to], 0), err)
		}
		if err := tr.Flush(ctx, to); err != nil {
			t.Fatalf("%s: flush: %v", what, err)
		}
	}
	// Messages both ways, in order.
	for i := range 3 {
		for _, c := range []struct{ from, to int }{{0, 2}, {2, 0}, {2, 1}} {
			if err := ts[c.from].Send(ftrma.Rank(c.to), []byte{byte(c.from), byte(i)}); err != nil {
				t.Fatalf("rank %d: send to %d: %v", c.from, c.to, err)
			}
		}
	}
	for _, c := range []struct{ from, to int }{{0, 2}, {2, 0}, {2, 1}} {
		recs[c.to].Await(t, ctx, fmt.Sprintf("rank %d's messages at %d", c.from, c.to), func() bool { return len(recs[c.to].From(ftrma.Rank(c.from))) == 3 })
		for i, m := range recs[c.to].From(ftrma.Rank(c.from)) {
			if len(m) != 2 || m[0] != byte(c.from) || m[1] != byte(i) {
				t.Fatalf("rank %d: message %d from rank %d is %v", c.to, i, c.from, m)
			}
		}
	}
	if err := admitter(t, ts[0]).Admit(2, ""); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("admit a spare twice: %v, want ErrInvalid", err)
	}
	// A second spare, started later: the first one admits it too.
	startSpare(t, ctx, w, recs, 3, []int{0, 1, 2}, nil)
	mems[3] = Mem(t, ts[3], 64)
	keys[3] = register(t, ts[3], mems[3])
	for _, c := range []struct{ from, to int }{{2, 3}, {3, 2}, {3, 0}} {
		tr, to := ts[c.from], ftrma.Rank(c.to)
		seq, err := tr.Write(to, keys[c.to], 40, []byte{byte(c.from + 1)})
		if err := complete(ctx, tr, to, seq, err); err != nil || mems[c.to][40] != byte(c.from+1) {
			t.Fatalf("rank %d toward rank %d: write: %v", c.from, c.to, err)
		}
		if err := tr.Send(to, []byte("second")); err != nil {
			t.Fatalf("rank %d: send to %d: %v", c.from, c.to, err)
		}
		recs[c.to].Await(t, ctx, fmt.Sprintf("rank %d's message at %d", c.from, c.to), func() bool {
			for _, m := range recs[c.to].From(ftrma.Rank(c.from)) {
				if string(m) == "second" {
					return true
				}
			}
			return false
		})
	}
	for r := range 4 {
		for p := range 4 {
			if d := recs[r].DownsOf(ftrma.Rank(p)); len(d) != 0 {
				t.Errorf("rank %d: peer-down events for rank %d: %v", r, p, d)
			}
		}
	}
}

func testAdmitAfterFailure(t *testing.T, f SpareFactory) {
	w, recs := spareJob(t, f, 3, 1)
	ctx := ctxFor(t)
	kill := func(r int) {
		if w.Kill != nil {
			w.Kill(r)
		} else {
			w.Ranks[r].Close()
		}
	}
	kill(1)
	for _, r := range []int{0, 2} {
		recs[r].Await(t, ctx, fmt.Sprintf("rank %d's peer-down event for rank 1", r), func() bool { return len(recs[r].DownsOf(1)) > 0 })
	}
	startSpare(t, ctx, w, recs, 3, []int{0, 2}, []int{1})
	ts := w.Ranks
	if _, err := ts[3].Write(1, 1, 0, []byte{1}); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("spare: write toward the failed rank 1: %v, want ErrProcFailed", err)
	}
	if err := ts[3].Send(1, []byte("x")); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("spare: send toward the failed rank 1: %v, want ErrProcFailed", err)
	}
	if err := admitter(t, ts[3]).Admit(1, ""); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("spare: admit the failed rank 1: %v, want ErrInvalid", err)
	}
	mem := Mem(t, ts[3], 16)
	key := register(t, ts[3], mem)
	for _, r := range []int{0, 2} {
		if seq, err := ts[r].Write(3, key, uint64(r), []byte{byte(r + 1)}); complete(ctx, ts[r], 3, seq, err) != nil || mem[r] != byte(r+1) {
			t.Fatalf("rank %d's write toward the spare: %v", r, err)
		}
	}
	kill(3)
	for _, r := range []int{0, 2} {
		recs[r].Await(t, ctx, fmt.Sprintf("rank %d's peer-down event for the spare", r), func() bool { return len(recs[r].DownsOf(3)) > 0 })
		tr := ts[r]
		seq, err := tr.Write(3, key, 0, []byte{9})
		if err := complete(ctx, tr, 3, seq, err); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d: write toward the dead spare: %v, want ErrProcFailed", r, err)
		}
		if err := tr.Flush(ctx, 3); !errors.Is(err, ftrma.ErrProcFailed) {
			t.Errorf("rank %d: flush toward the dead spare: %v, want ErrProcFailed", r, err)
		}
		if err := admitter(t, tr).Admit(3, ""); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("rank %d: admit the dead spare again: %v, want ErrInvalid", r, err)
		}
		if err := tr.Send(ftrma.Rank(r), []byte("after")); err != nil {
			t.Fatal(err)
		}
		recs[r].Await(t, ctx, "the message to self", func() bool { return len(recs[r].From(ftrma.Rank(r))) == 1 })
		if d := recs[r].DownsOf(3); len(d) != 1 || !errors.Is(d[0], ftrma.ErrProcFailed) {
			t.Errorf("rank %d: peer-down events for the spare: %v, want one wrapping ErrProcFailed", r, d)
		}
	}
}

func testAdmitFence(t *testing.T, f SpareFactory) {
	w, recs := spareJob(t, f, 2, 1)
	ctx := ctxFor(t)
	startSpare(t, ctx, w, recs, 2, []int{0, 1}, nil)
	ts := w.Ranks
	mem0 := Mem(t, ts[0], 16)
	key0 := register(t, ts[0], mem0)
	mem1 := Mem(t, ts[1], 16)
	key1 := register(t, ts[1], mem1)
	if seq, err := ts[2].Write(0, key0, 0, []byte{1}); complete(ctx, ts[2], 0, seq, err) != nil || mem0[0] != 1 {
		t.Fatalf("spare's write toward rank 0: %v", err)
	}
	if err := ts[0].Fence(2); err != nil {
		t.Fatalf("rank 0: fence the spare: %v", err)
	}
	if _, err := ts[0].Write(2, 1, 0, []byte{1}); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("rank 0: write toward the fenced spare: %v, want ErrProcFailed", err)
	}
	// The spare learns of the fence (a closed connection, the fence flag),
	// and from then on its writes fail and never land.
	recs[2].Await(t, ctx, "the spare's peer-down event for rank 0", func() bool { return len(recs[2].DownsOf(0)) > 0 })
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	seq, err := ts[2].Write(0, key0, 0, []byte{2})
	err = complete(fctx, ts[2], 0, seq, err)
	cancel()
	if !errors.Is(err, ftrma.ErrProcFailed) {
		t.Errorf("the fenced spare's write toward rank 0: %v, want ErrProcFailed", err)
	}
	if mem0[0] != 1 {
		t.Errorf("the fenced spare's write landed at rank 0: %d", mem0[0])
	}
	if seq, err := ts[2].Write(1, key1, 0, []byte{3}); complete(ctx, ts[2], 1, seq, err) != nil || mem1[0] != 3 {
		t.Fatalf("spare's write toward rank 1 after rank 0 fenced it: %v", err)
	}
}

// AddressedTransport is a transport whose ranks connect with the list of
// every rank's address ("" for a rank not started), as tcp and verbs do.
type AddressedTransport interface {
	transport.Transport
	Addr() string
	Connect(ctx context.Context, addrs []string) error
}

// AddressedSpares builds a SpareFactory's job for an AddressedTransport:
// it opens live ranks of a job of live+spares ranks with the spares
// absent and connects them, and its Start opens a spare late with the
// ranks neither up nor failed absent, reports the failed ranks down, and
// connects it with the live ranks' addresses. open opens rank r of the
// job; the transports are closed at the test's clean-up.
func AddressedSpares[T AddressedTransport](t testing.TB, live, spares int, open func(r ftrma.Rank, absent []ftrma.Rank, late bool) (T, error)) *Spares {
	t.Helper()
	size := live + spares
	var absent []ftrma.Rank
	for s := live; s < size; s++ {
		absent = append(absent, ftrma.Rank(s))
	}
	w := &Spares{Live: live, Ranks: make([]transport.Transport, size)}
	addrs := make([]string, size)
	ts := make([]T, size)
	for r := range live {
		tr, err := open(ftrma.Rank(r), absent, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[r], addrs[r], w.Ranks[r] = tr, tr.Addr(), tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, live)
	for r := range live {
		go func() { errc <- ts[r].Connect(ctx, addrs) }()
	}
	for range live {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	w.Start = func(s int, up, failed []int) (transport.Transport, string, func(context.Context) error) {
		mine := make([]string, size)
		known := map[int]bool{s: true}
		for _, r := range up {
			mine[r], known[r] = addrs[r], true
		}
		for _, r := range failed {
			known[r] = true
		}
		var absent []ftrma.Rank
		for r := range size {
			if !known[r] {
				absent = append(absent, ftrma.Rank(r))
			}
		}
		tr, err := open(ftrma.Rank(s), absent, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[s], addrs[s] = tr, tr.Addr()
		for _, r := range failed {
			tr.PeerDown(ftrma.Rank(r), errors.New("failed before this rank started"))
		}
		return tr, tr.Addr(), func(ctx context.Context) error { return tr.Connect(ctx, mine) }
	}
	return w
}
