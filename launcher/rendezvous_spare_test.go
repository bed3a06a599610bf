package launcher

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// startSpareServer starts a rendezvous server for size ranks, the first
// initial of them started at once, closed with the test.
func startSpareServer(t *testing.T, initial, size int, spawn func(ftrma.Rank, int, []byte) ([]ftrma.Rank, error)) *rvServer {
	t.Helper()
	logs := new(logRecorder)
	cfg := rvConfig{Size: size, Initial: initial, Secret: testSecret(1), Logger: logs.logger(), HandshakeTimeout: testTimeout}
	if spawn != nil {
		cfg.Spawn = func(by ftrma.Rank, k int, payload []byte, _ []ftrma.Rank) ([]ftrma.Rank, error) {
			return spawn(by, k, payload)
		}
	}
	s, err := listenRendezvous(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close() })
	return s
}

// splitAddr is rank r's address of a job of size ranks: common "cR" and
// the part "aRQ" for each rank Q.
func splitAddr(t *testing.T, r, size int) jobwire.Addr {
	parts := make([]string, size)
	for q := range parts {
		parts[q] = fmt.Sprintf("a%d%d", r, q)
	}
	a, err := jobwire.SplitAddr(fmt.Sprintf("c%d", r), parts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// nextFrame reads c's next frame of type typ, skipping others.
func nextFrame(t *testing.T, c net.Conn, typ byte) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(testTimeout))
	for {
		got, p, err := jobwire.ReadFrame(c, jobwire.MaxSuperFrame)
		if err != nil {
			t.Fatalf("waiting for a frame of type %d: %v", typ, err)
		}
		if got == typ {
			return p
		}
	}
}

// The address lists of a job with spares: the first ranks' lists leave
// the spares out; a spare's list holds each live rank's address as the
// spare gets it (the first ranks' parts for it, and an earlier spare's),
// leaves out the failed and the absent, and its roster names the failed;
// each live rank's admission carries the spare's address as that rank gets
// it, with the payload.
func TestRendezvousSpareAddresses(t *testing.T) {
	const initial, size = 2, 4
	s := startSpareServer(t, initial, size, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conns := make([]net.Conn, size)
	errc := make(chan error, initial)
	for r := range initial {
		go func() {
			c, addrs, err := fakeRank(s, ftrma.Rank(r), size).joinAddr(ctx, splitAddr(t, r, size))
			if err == nil {
				if want := []string{"c0a0" + fmt.Sprint(r), "c1a1" + fmt.Sprint(r), "", ""}; !reflect.DeepEqual(addrs, want) {
					err = fmt.Errorf("rank %d got %q, want %q", r, addrs, want)
				}
			}
			conns[r] = c
			errc <- err
		}()
	}
	for range initial {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()

	// Spare 2.
	if err := s.expect(2, []byte("pay2"), 0); err != nil {
		t.Fatal(err)
	}
	c, addrs, err := fakeRank(s, 2, size).joinAddr(ctx, splitAddr(t, 2, size))
	if err != nil {
		t.Fatal(err)
	}
	conns[2] = c
	if want := []string{"c0a02", "c1a12", "c2a22", ""}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("spare 2 got %q, want %q", addrs, want)
	}
	if failed, err := jobwire.ParseRanks(nextFrame(t, c, jobwire.MsgRoster), size); err != nil || len(failed) != 0 {
		t.Errorf("spare 2's roster: %v, %v; want none", failed, err)
	}
	if err := s.awaitSpare(2, testTimeout); err != nil {
		t.Fatal(err)
	}
	if err := s.admit(2); err != nil {
		t.Fatal(err)
	}
	for q := range initial {
		a, err := jobwire.ParseAdmit(nextFrame(t, conns[q], jobwire.MsgAdmit), size)
		if want := (jobwire.Admission{Rank: 2, Addr: fmt.Sprintf("c2a2%d", q), Payload: []byte("pay2")}); err != nil || !reflect.DeepEqual(a, want) {
			t.Errorf("rank %d's admission: %+v, %v; want %+v", q, a, err, want)
		}
	}

	// Rank 1 fails; spare 3 joins.
	s.rankExited(1, "exited with status 1", false)
	nextFrame(t, conns[0], jobwire.MsgExit)
	if err := s.expect(3, []byte("pay3"), 0); err != nil {
		t.Fatal(err)
	}
	c, addrs, err = fakeRank(s, 3, size).joinAddr(ctx, splitAddr(t, 3, size))
	if err != nil {
		t.Fatal(err)
	}
	conns[3] = c
	if want := []string{"c0a03", "", "c2a23", "c3a33"}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("spare 3 got %q, want %q", addrs, want)
	}
	if failed, err := jobwire.ParseRanks(nextFrame(t, c, jobwire.MsgRoster), size); err != nil || !reflect.DeepEqual(failed, []ftrma.Rank{1}) {
		t.Errorf("spare 3's roster: %v, %v; want [1]", failed, err)
	}
	if err := s.awaitSpare(3, testTimeout); err != nil {
		t.Fatal(err)
	}
	if err := s.admit(3); err != nil {
		t.Fatal(err)
	}
	for _, q := range []int{0, 2} {
		a, err := jobwire.ParseAdmit(nextFrame(t, conns[q], jobwire.MsgAdmit), size)
		if want := (jobwire.Admission{Rank: 3, Addr: fmt.Sprintf("c3a3%d", q), Payload: []byte("pay3")}); err != nil || !reflect.DeepEqual(a, want) {
			t.Errorf("rank %d's admission: %+v, %v; want %+v", q, a, err, want)
		}
	}
	if err := s.expect(3, nil, 0); err == nil {
		t.Error("expect of spare 3 again: no error")
	}
}

// A spare that ftrun did not start cannot join; one that did not join in
// time is given up and refused when it comes late; a spawn request to a
// job without spares is answered with a clear error.
func TestRendezvousSpareRefusals(t *testing.T) {
	s := startSpareServer(t, 1, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _, err := fakeRank(s, 0, 3).join(ctx, "addr-0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := fakeRank(s, 1, 3).join(ctx, "addr-1"); err == nil || !strings.Contains(err.Error(), "spare that ftrun has not started") {
		t.Errorf("a spare not started joins: %v", err)
	}
	if err := s.expect(1, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.awaitSpare(1, time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not join within") {
		t.Errorf("awaitSpare of a spare that never joins: %v", err)
	}
	if _, _, err := fakeRank(s, 1, 3).join(ctx, "addr-1"); err == nil {
		t.Error("a spare given up joined")
	}
	if err := s.admit(1); err == nil {
		t.Error("a spare given up was admitted")
	}

	if err := jobwire.WriteFrame(c, jobwire.MsgSpawn, jobwire.SpawnRequest{ID: 9, K: 1}.Append(nil)); err != nil {
		t.Fatal(err)
	}
	a, err := jobwire.ParseSpawned(nextFrame(t, c, jobwire.MsgSpawned), 3)
	if err != nil || a.ID != 9 || len(a.Ranks) != 0 || !strings.Contains(a.Err, "no spare ranks") {
		t.Errorf("answer to a spawn without spares: %+v, %v", a, err)
	}
}

// A spare lost with its host before it joined is given up at once: its
// spawn's wait ends with why, it cannot join or be admitted later, and a
// rank that is no spare being started, or one admitted, is not given up.
func TestRendezvousSpareLostWithHost(t *testing.T) {
	s := startSpareServer(t, 1, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _, err := fakeRank(s, 0, 3).join(ctx, "addr-0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s.giveUpSpare(0, "host lost") || s.giveUpSpare(2, "host lost") {
		t.Error("gave up a first rank, or a spare not being started")
	}
	if err := s.expect(1, nil, 0); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.awaitSpare(1, testTimeout) }()
	if !s.giveUpSpare(1, "agent h4 was silent for 2s") {
		t.Fatal("spare 1, started and not admitted, was not given up")
	}
	if err := <-waited; err == nil || !strings.Contains(err.Error(), "spare rank 1 was lost before it joined: agent h4 was silent for 2s") {
		t.Errorf("awaitSpare of a spare lost with its host: %v", err)
	}
	if _, _, err := fakeRank(s, 1, 3).join(ctx, "addr-1"); err == nil {
		t.Error("a spare given up joined")
	}
	if err := s.admit(1); err == nil {
		t.Error("a spare given up was admitted")
	}
}
