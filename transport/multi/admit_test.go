//go:build linux

package multi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/multi"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/tcp"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// spareWorld is a job with spares over two pretend hosts: rank r (a spare
// included) runs on host hostOf(r). Every host's shm serves its started
// ranks and every spare (a spare may start on any host); what is not
// started on the host is absent there.
func spareWorld(t testing.TB, live, spares int, hostOf func(r int) int) *transporttest.Spares {
	t.Helper()
	size := live + spares
	dirs := []string{t.TempDir(), t.TempDir()}
	hostName := func(h int) string { return fmt.Sprintf("host%d", h) }
	// open builds rank r's multi transport: up are the ranks started (r's
	// peers now), failed those that failed; the rest are absent.
	open := func(r int, up, failed []int, late bool) *multi.Transport {
		h := hostOf(r)
		var ranks, shmAbsent, tcpAbsent []ftrma.Rank
		route := make([]int, size)
		for p := range size {
			started := p == r || slices.Contains(up, p) || slices.Contains(failed, p)
			here := hostOf(p) == h
			if here && p < live || p >= live {
				ranks = append(ranks, ftrma.Rank(p))
				if p != r && (!started || !here) {
					shmAbsent = append(shmAbsent, ftrma.Rank(p))
				}
			}
			if !started {
				tcpAbsent = append(tcpAbsent, ftrma.Rank(p))
				route[p] = multi.Absent
			} else if here {
				route[p] = 0
			} else {
				route[p] = 1
			}
		}
		st, err := shm.Open(shm.Config{Rank: ftrma.Rank(r), Size: size, Job: "t", Dir: dirs[h], Ranks: ranks, Absent: shmAbsent})
		if err != nil {
			t.Fatal(err)
		}
		tt, err := tcp.Listen(tcp.Config{Rank: ftrma.Rank(r), Size: size, Secret: secret, Absent: tcpAbsent, Late: late})
		if err != nil {
			t.Fatal(err)
		}
		m, err := multi.NewAdmitting([]multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt}}, route, multi.Admission{Host: hostName(h), Local: 0, Remote: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		for _, f := range failed {
			m.PeerDown(ftrma.Rank(f), errors.New("failed before this rank started"))
		}
		return m
	}
	w := &transporttest.Spares{Live: live, Ranks: make([]transport.Transport, size)}
	addrs := make([]string, size)
	var ups []int
	for r := range live {
		ups = append(ups, r)
	}
	ms := make([]*multi.Transport, size)
	for r := range live {
		ms[r] = open(r, ups, nil, false)
		w.Ranks[r], addrs[r] = ms[r], ms[r].Addr()
	}
	ctx := testCtx(t)
	errc := make(chan error, live)
	for r := range live {
		go func() { errc <- ms[r].Connect(ctx, addrs) }()
	}
	for range live {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	w.Start = func(s int, up, failed []int) (transport.Transport, string, func(context.Context) error) {
		m := open(s, up, failed, true)
		ms[s], addrs[s] = m, m.Addr()
		mine := make([]string, size)
		for _, r := range up {
			mine[r] = addrs[r]
		}
		mine[s] = m.Addr()
		return m, multi.AdmitAddr(hostName(hostOf(s)), m.Addr()), func(ctx context.Context) error { return m.Connect(ctx, mine) }
	}
	return w
}

// TestAdmission runs the admission contract (transporttest.RunAdmission) on
// multi, with ranks and spares on two pretend hosts two ways: in pairs
// (spare 2 meets ranks 0 and 1 through tcp, spare 3 meets spare 2 through
// shm) and alternating (spare 2 meets rank 0 through shm and rank 1
// through tcp). A killed rank is closed.
func TestAdmission(t *testing.T) {
	for _, c := range []struct {
		name   string
		hostOf func(r int) int
	}{
		{"pairs", func(r int) int { return r / 2 % 2 }},
		{"alternating", func(r int) int { return r % 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunAdmission(t, func(t testing.TB, live, spares int) *transporttest.Spares {
				return spareWorld(t, live, spares, c.hostOf)
			})
		})
	}
}

// Admit routes a spare by the host its address names, and refuses an
// address without one and a transport made without admission.
func TestAdmitRoutesByHost(t *testing.T) {
	w := spareWorld(t, 2, 2, func(r int) int { return r % 2 })
	ctx := testCtx(t)
	m0 := w.Ranks[0].(*multi.Transport)
	if err := m0.Admit(2, "127.0.0.1:1"); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("admit with an address naming no host: %v, want ErrInvalid", err)
	}
	if got := m0.Route(2); got != "" {
		t.Errorf("absent rank routed to %q", got)
	}
	tr, addr, connect := w.Start(2, []int{0, 1}, nil) // on host0, with rank 0
	errc := make(chan error, 1)
	go func() { errc <- connect(ctx) }()
	for r := range 2 {
		if err := w.Ranks[r].(transport.Admitter).Admit(2, addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := m0.Route(2); got != "shm" {
		t.Errorf("rank 0 routes the spare on its host to %q, want shm", got)
	}
	if got := w.Ranks[1].(*multi.Transport).Route(2); got != "tcp" {
		t.Errorf("rank 1 routes the spare on another host to %q, want tcp", got)
	}
	plain, err := multi.New([]multi.Sub{{Name: "tcp", T: must(tcp.Listen(tcp.Config{Rank: 0, Size: 2, Secret: secret}))}}, []int{0, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Admit(1, multi.AdmitAddr("h", "x")); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("admit on a transport made by New: %v, want ErrInvalid", err)
	}
}

// An absent rank reported down before the receiver is set is reported to
// it once it is.
func TestAbsentDownHeldForReceiver(t *testing.T) {
	tt := must(tcp.Listen(tcp.Config{Rank: 0, Size: 2, Secret: secret, Absent: []ftrma.Rank{1}}))
	m, err := multi.NewAdmitting([]multi.Sub{{Name: "tcp", T: tt}}, []int{0, multi.Absent}, multi.Admission{Host: "h", Local: 0, Remote: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.PeerDown(1, errors.New("exited"))
	m.PeerDown(1, errors.New("again"))
	rec := newRecorder()
	m.SetReceiver(rec)
	if d := rec.DownsOf(1); len(d) != 1 || !errors.Is(d[0], ftrma.ErrProcFailed) {
		t.Fatalf("peer-down events %v, want one wrapping ErrProcFailed", d)
	}
	if _, err := m.Write(1, 1, 0, []byte{1}); !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("write toward it: %v, want ErrProcFailed", err)
	}
}
