package tcp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// subsetCluster starts n transports and connects each to the ranks
// peer(me, r) allows (the same both ways), leaving the other addresses
// empty.
func subsetCluster(t *testing.T, n int, peer func(a, b int) bool) ([]*Transport, []*recorder, *logSink) {
	t.Helper()
	logs := &logSink{}
	ts := make([]*Transport, n)
	rs := make([]*recorder, n)
	addrs := make([]string, n)
	for r := range ts {
		tr, err := Listen(Config{Rank: ftrma.Rank(r), Size: n, Secret: secret, Spin: -1, Logger: logs.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		ts[r], rs[r], addrs[r] = tr, newRecorder(), tr.Addr()
		tr.SetReceiver(rs[r])
		t.Cleanup(func() { tr.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, n)
	for me, tr := range ts {
		mine := make([]string, n)
		for r := range mine {
			if r == me || peer(me, r) {
				mine[r] = addrs[r]
			}
		}
		go func() { errc <- tr.Connect(ctx, mine) }()
	}
	for range ts {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	return ts, rs, logs
}

// otherHost: ranks {0, 1} and {2, 3} are on two hosts; tcp serves the
// pairs across them only.
func otherHost(a, b int) bool { return a/2 != b/2 }

// A transport connected to a subset of the ranks dials and accepts those
// only; operations toward the others fail at once with ftrma.ErrInvalid,
// and no peer-down event ever names them.
func TestConnectSubset(t *testing.T) {
	ts, rs, logs := subsetCluster(t, 4, otherHost)
	ctx := testCtx(t)
	keys := make([]transport.Key, 4)
	for r, tr := range ts {
		keys[r] = must(tr.Register(words(64)))
	}
	for me, tr := range ts {
		for r := range 4 {
			rr := ftrma.Rank(r)
			_, werr := tr.FetchAndAdd64(rr, keys[r], 0, 1, nil)
			if r == me || otherHost(me, r) {
				if werr != nil || tr.Flush(ctx, rr) != nil || tr.Send(rr, []byte("hi")) != nil {
					t.Errorf("rank %d toward %d: %v", me, r, werr)
				}
				continue
			}
			for what, err := range map[string]error{"fetch-and-add": werr, "send": tr.Send(rr, []byte("hi")), "flush": tr.Flush(ctx, rr), "wait": tr.Wait(ctx, rr, 1), "fence": tr.Fence(rr)} {
				if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "not a peer") {
					t.Errorf("rank %d: %s toward rank %d of its host: %v", me, what, r, err)
				}
			}
			tr.Push(rr) // does nothing
		}
	}
	// A connection from a rank that is not a peer is refused.
	if err := ts[0].dial(ctx, 1, ts[1].Addr()); err == nil {
		t.Error("rank 1 accepted rank 0, which is not its peer")
	}
	waitFor(t, func() bool { return logs.Contains("not a peer of this transport") }, "the refusal logged")
	for _, tr := range ts[1:] {
		tr.Close()
	}
	waitFor(t, func() bool {
		rs[0].mu.Lock()
		defer rs[0].mu.Unlock()
		return len(rs[0].down) == 2
	}, "rank 0 hears of ranks 2 and 3")
	rs[0].mu.Lock()
	defer rs[0].mu.Unlock()
	for _, r := range rs[0].down {
		if r == 1 {
			t.Errorf("rank 0 heard of rank 1, which is not its peer: %v", rs[0].down)
		}
	}
}

// A rank that connected before Connect told this one it is not a peer (the
// ranks disagree) is cut off, quietly here and as lost at the other end.
func TestConnectSubsetCutsEarlyStranger(t *testing.T) {
	ts := make([]*Transport, 2)
	rs := make([]*recorder, 2)
	logs := &logSink{}
	addrs := make([]string, 2)
	for r := range ts {
		ts[r] = must(Listen(Config{Rank: ftrma.Rank(r), Size: 2, Secret: secret, Spin: -1, Logger: logs.Logger()}))
		rs[r] = newRecorder()
		ts[r].SetReceiver(rs[r])
		addrs[r] = ts[r].Addr()
		defer ts[r].Close()
	}
	ctx := testCtx(t)
	if err := ts[0].Connect(ctx, addrs); err != nil { // dials rank 1, which accepts
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		select {
		case <-ts[1].peers[0].ready:
			return true
		default:
			return false
		}
	}, "rank 1 accepts rank 0")
	if err := ts[1].Connect(ctx, []string{"", addrs[1]}); err != nil {
		t.Fatal(err)
	}
	if !logs.Contains("not a peer of this transport") {
		t.Errorf("no log of the cut: %q", logs.String())
	}
	if err := ts[1].Send(0, []byte("x")); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("send toward a rank that is not a peer: %v", err)
	}
	waitFor(t, func() bool {
		rs[0].mu.Lock()
		defer rs[0].mu.Unlock()
		return len(rs[0].down) == 1
	}, "rank 0 loses rank 1")
	rs[1].mu.Lock()
	defer rs[1].mu.Unlock()
	if len(rs[1].down) != 0 {
		t.Errorf("rank 1 reported rank 0, which is not its peer: %v", rs[1].down)
	}
}

// RegisterKey: the caller's key names the region to every peer; a key is
// registered once; a transport uses either its own keys or its caller's.
func TestRegisterKey(t *testing.T) {
	ts, _ := cluster(t, 2, -1)
	ctx := testCtx(t)
	mem := words(4 << 20)
	const key = transport.Key(0x123456)
	if err := ts[1].RegisterKey(key, mem); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].RegisterKey(key, words(8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("second RegisterKey of one key: %v", err)
	}
	for _, k := range []transport.Key{0, transport.MaxKey + 1} {
		if err := ts[1].RegisterKey(k, words(8)); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("RegisterKey(%d): %v", k, err)
		}
	}
	if _, err := ts[1].Register(words(8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Register after RegisterKey: %v", err)
	}
	// Every path names the region by the caller's key: small and large
	// (direct) writes, reads, atomics, and the loopback path.
	for _, origin := range []ftrma.Rank{0, 1} {
		tr := ts[origin]
		big := make([]byte, 1<<20)
		big[0], big[len(big)-1] = 7, 9
		tr.Write(1, key, 8, big)
		var old uint64
		tr.FetchAndAdd64(1, key, 0, 3, &old)
		if err := tr.Flush(ctx, 1); err != nil {
			t.Fatalf("rank %d: %v", origin, err)
		}
		dst := make([]byte, 1<<20)
		seq, err := tr.Read(1, key, 8, dst)
		if err == nil {
			err = tr.Wait(ctx, 1, seq)
		}
		if err != nil || dst[0] != 7 || dst[len(dst)-1] != 9 || old != 3*uint64(origin) {
			t.Errorf("rank %d: read %v, %d %d, fetch-add saw %d", origin, err, dst[0], dst[len(dst)-1], old)
		}
		if _, err := tr.Write(1, key+1, 0, []byte{1}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Flush(ctx, 1); !errors.Is(err, ftrma.ErrUnknownRegion) {
			t.Errorf("rank %d: write to an unregistered key: %v", origin, err)
		}
	}
	if err := ts[1].Deregister(key); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Deregister(key); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Errorf("second Deregister: %v", err)
	}
	ts[0].Write(1, key, 0, []byte{1})
	if err := ts[0].Flush(ctx, 1); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Errorf("write after Deregister: %v", err)
	}
	// The other way round: once Register chose a key, RegisterKey is refused.
	if _, err := ts[0].Register(words(8)); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].RegisterKey(99, words(8)); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("RegisterKey after Register: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
