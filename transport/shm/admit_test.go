//go:build linux

package shm

import (
	"context"
	"errors"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestAdmission runs the admission contract (transporttest.RunAdmission) on
// shm: every rank serves the job's whole capacity, the spares absent; a
// spare opens with the spares not started yet absent and reports the
// failed ranks with PeerDown before Connect. A killed rank is closed.
func TestAdmission(t *testing.T) {
	transporttest.RunAdmission(t, func(t testing.TB, live, spares int) *transporttest.Spares {
		size := live + spares
		dir := t.TempDir()
		var absent []ftrma.Rank
		for s := live; s < size; s++ {
			absent = append(absent, ftrma.Rank(s))
		}
		ts, _, _ := cluster(t, live, clusterOpts{noReceiver: true, dir: dir, cfg: func(c *Config) {
			c.Size, c.Absent = size, absent
		}})
		w := &transporttest.Spares{Live: live, Ranks: make([]transport.Transport, size)}
		for r, tr := range ts {
			w.Ranks[r] = tr
		}
		w.Start = func(s int, up, failed []int) (transport.Transport, string, func(context.Context) error) {
			known := map[int]bool{s: true}
			for _, r := range append(append([]int(nil), up...), failed...) {
				known[r] = true
			}
			var absent []ftrma.Rank
			for r := range size {
				if !known[r] {
					absent = append(absent, ftrma.Rank(r))
				}
			}
			tr, err := Open(Config{Rank: ftrma.Rank(s), Size: size, Job: "t", Dir: dir, Absent: absent})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			for _, r := range failed {
				tr.PeerDown(ftrma.Rank(r), errors.New("failed before this rank started"))
			}
			return tr, "shm", tr.Connect
		}
		return w
	})
}

// A spare's messages sent before a rank admitted it wait in its ring and
// are delivered, in order, after Admit.
func TestAdmitDeliversEarlyMessages(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	live, err := Open(Config{Rank: 0, Size: 2, Job: "t", Dir: dir, Absent: []ftrma.Rank{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := live.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	live.SetReceiver(rec)
	spare, err := Open(Config{Rank: 1, Size: 2, Job: "t", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	if err := spare.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"one", "two"} {
		if err := spare.Send(0, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	// A message of rank 0 to itself, sent after the spare's, is delivered
	// by the same progress goroutine after it polled the rings.
	if err := live.Send(0, []byte("self")); err != nil {
		t.Fatal(err)
	}
	rec.Await(t, ctx, "the message to self", func() bool { return len(rec.From(0)) == 1 })
	live.wake()
	if err := live.Send(0, []byte("self again")); err != nil {
		t.Fatal(err)
	}
	rec.Await(t, ctx, "the second message to self", func() bool { return len(rec.From(0)) == 2 })
	if n := len(rec.From(1)); n != 0 {
		t.Fatalf("%d messages of the spare delivered before Admit", n)
	}
	if err := live.Admit(1, "shm"); err != nil {
		t.Fatal(err)
	}
	rec.Await(t, ctx, "the spare's messages", func() bool { return len(rec.From(1)) == 2 })
	if got := rec.From(1); string(got[0]) != "one" || string(got[1]) != "two" {
		t.Fatalf("messages %q", got)
	}
}

// A spare that sent, said goodbye and exited before a rank admitted it is
// reported down by the launcher's notice (its ring is never drained here).
func TestPeerDownOfAbsentSpareThatLeft(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	live, err := Open(Config{Rank: 0, Size: 2, Job: "t", Dir: dir, Absent: []ftrma.Rank{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	rec := newRecorder()
	live.SetReceiver(rec)
	spare, err := Open(Config{Rank: 1, Size: 2, Job: "t", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := spare.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := spare.Send(0, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	spare.Close()
	live.PeerDown(1, errors.New("the launcher saw it exit"))
	rec.Await(t, ctx, "the peer-down event", func() bool { return len(rec.DownsOf(1)) == 1 })
	if err := live.Admit(1, "shm"); !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("admit a spare reported down: %v, want ErrInvalid", err)
	}
	if n := len(rec.From(1)); n != 0 {
		t.Fatalf("%d messages of a spare never admitted were delivered", n)
	}
}
