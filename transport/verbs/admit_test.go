//go:build linux && cgo && verbs

package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// TestAbsentConfig: Config.Absent may not name this rank or a rank outside
// the job.
func TestAbsentConfig(t *testing.T) {
	for _, absent := range [][]ftrma.Rank{{0}, {3}, {-1}} {
		if _, err := Open(Config{Rank: 0, Size: 3, Absent: absent}); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("absent %v: %v, want ErrInvalid", absent, err)
		}
	}
}

// TestAdmitSplitAddress: a spare admitted as ftrun does it. Each live rank
// gets the spare's common address part and the part for it
// (SplitAddress), the spare each live rank's common part and the part for
// the spare; writes and messages then go both ways.
func TestAdmitSplitAddress(t *testing.T) {
	needDevice(t)
	const size = 3
	ts := make([]*Transport, size)
	recs := make([]*recorder, size)
	commons := make([]string, size)
	parts := make([][]string, size)
	open := func(r int, absent []ftrma.Rank, late bool) {
		tr, err := Open(Config{Rank: ftrma.Rank(r), Size: size, GIDIndex: -1, Bound: 2 * time.Second, Logger: testLogger(t), Absent: absent, Late: late})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[r], recs[r] = tr, newRecorder()
		tr.SetReceiver(recs[r])
		if commons[r], parts[r], err = SplitAddress(tr.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	forRank := func(of, to int) string { return commons[of] + parts[of][to] }
	open(0, []ftrma.Rank{2}, false)
	open(1, []ftrma.Rank{2}, false)
	errc := make(chan error, 2)
	for r := range 2 {
		go func() { errc <- ts[r].Connect(ctx(t), []string{forRank(0, r), forRank(1, r), ""}) }()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	open(2, nil, true)
	if err := ts[2].Connect(ctx(t), []string{forRank(0, 2), forRank(1, 2), ""}); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if err := ts[r].Admit(2, forRank(2, r)); err != nil {
			t.Fatalf("rank %d: admit: %v", r, err)
		}
	}
	mems := make([][]byte, size)
	keys := make([]transport.Key, size)
	for r := range size {
		mems[r] = make([]byte, 16)
		var err error
		if keys[r], err = ts[r].Register(mems[r]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ from, to int }{{2, 0}, {2, 1}, {0, 2}, {1, 2}} {
		if _, err := ts[c.from].Write(ftrma.Rank(c.to), keys[c.to], uint64(c.from), []byte{byte(10 + c.from)}); err != nil {
			t.Fatal(err)
		}
		if err := ts[c.from].Flush(ctx(t), ftrma.Rank(c.to)); err != nil || mems[c.to][c.from] != byte(10+c.from) {
			t.Fatalf("rank %d's write toward rank %d: %v, memory %v", c.from, c.to, err, mems[c.to])
		}
		if err := ts[c.from].Send(ftrma.Rank(c.to), []byte("hi")); err != nil {
			t.Fatal(err)
		}
		rec := recs[c.to]
		rec.until(t, "the message", func() bool { return len(rec.msgs[ftrma.Rank(c.from)]) == 1 })
	}
	for r := range size {
		if len(recs[r].downs) != 0 {
			t.Errorf("rank %d: peer-down events %v", r, recs[r].downs)
		}
	}
}

// TestLateRankWaitsForHello: a spare connected long before a live rank
// admits it (twice the retry budget of its queue pairs) posts
// nothing toward that rank until its hello: its message and its write,
// issued before the admission, arrive after it, and neither side sees the
// other fail. Sent at once, they would have run out of retries against
// the live rank's queue pair, still in INIT, and the spare would have
// counted the live rank down.
func TestLateRankWaitsForHello(t *testing.T) {
	const bound = time.Second
	w := spareJobBound(t, 1, 1, bound)
	live := w.Ranks[0].(*Transport)
	recLive := newRecorder()
	live.SetReceiver(recLive)
	mem := make([]byte, 8)
	key, err := live.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	tr, addr, connect := w.Start(1, []int{0}, nil)
	spare := tr.(*Transport)
	recSpare := newRecorder()
	spare.SetReceiver(recSpare)
	if err := connect(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := spare.Send(0, []byte("early")); err != nil {
		t.Fatalf("the spare's message before its admission: %v", err)
	}
	wrote := make(chan error, 1)
	go func() {
		seq, err := spare.Write(0, key, 0, []byte{7})
		if err == nil {
			err = spare.Wait(context.Background(), 0, seq)
		}
		wrote <- err
	}()
	time.Sleep(2 * bound)
	select {
	case err := <-wrote:
		t.Fatalf("the spare's write completed before rank 0 admitted it: %v", err)
	default:
	}
	if err := live.Admit(1, addr); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil || mem[0] != 7 {
		t.Fatalf("the spare's write after its admission: %v, memory %d", err, mem[0])
	}
	recLive.until(t, "the spare's early message", func() bool { return len(recLive.msgs[1]) == 1 })
	if got := string(recLive.msgs[1][0]); got != "early" {
		t.Fatalf("rank 0 got %q from the spare", got)
	}
	recSpare.mu.Lock()
	downs := len(recSpare.downs)
	recSpare.mu.Unlock()
	recLive.mu.Lock()
	downs += len(recLive.downs)
	recLive.mu.Unlock()
	if downs != 0 {
		t.Fatalf("peer-down events: spare %v, rank 0 %v", recSpare.downs, recLive.downs)
	}
}
