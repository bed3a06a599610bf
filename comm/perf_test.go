package comm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/memnet"
	"github.com/ftrma/ftrma/transport/tcp"
)

// The benchmarks below time Agree, Shrink and Revoke in one process, every
// rank a goroutine with its own runtime, over memnet and over real TCP
// connections on the loopback. All ranks share one Go scheduler, unlike a
// job of processes (bench/ft), so the numbers show the runtime's own path
// (machine steps, goroutine hand-offs, allocation, the transport's send and
// receive), not the operating system's wake-ups between processes. Each
// reports msgs/op, the control messages of the protocol timed (agreement
// messages for Agree and Shrink, reliable-broadcast messages for Revoke)
// sent per operation by all ranks together.

// countingTransport counts the control messages its rank sends, by their
// first byte (comm's message kind).
type countingTransport struct {
	transport.Transport
	sent *[256]atomic.Int64
}

func (t countingTransport) Send(r ftrma.Rank, msg []byte) error {
	if len(msg) > 0 {
		t.sent[msg[0]].Add(1)
	}
	return t.Transport.Send(r, msg)
}

// comm's message kinds (runtime.go) that the benchmarks count.
const (
	kindBcast = 3
	kindAgree = 4
)

// perfWorld is a world of n communicators for the benchmarks.
type perfWorld struct {
	comms []*comm.Comm
	sent  [256]atomic.Int64
}

func benchConfig() comm.Config {
	c := commtest.TestConfig()
	c.OnDeclaredFailed = func(string) {}
	return c
}

func newPerfWorld(b *testing.B, kind string, n int) *perfWorld {
	w := &perfWorld{comms: make([]*comm.Comm, n)}
	ts := make([]transport.Transport, n)
	switch kind {
	case "memnet":
		mn := memnet.New(n)
		b.Cleanup(mn.Close)
		for r := range n {
			ts[r] = mn.Endpoint(ftrma.Rank(r))
		}
	case "tcp":
		tcps := make([]*tcp.Transport, n)
		addrs := make([]string, n)
		for r := range n {
			t, err := tcp.Listen(tcp.Config{Rank: ftrma.Rank(r), Size: n, Secret: []byte("bench"), Spin: perfSpin, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			tcps[r], addrs[r], ts[r] = t, t.Addr(), t
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs := make(chan error, n)
		for _, t := range tcps {
			go func() { errs <- t.Connect(ctx, addrs) }()
		}
		for range n {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	default:
		b.Fatalf("unknown world %q", kind)
	}
	for r := range n {
		c, err := comm.New(countingTransport{ts[r], &w.sent}, benchConfig())
		if err != nil {
			b.Fatal(err)
		}
		w.comms[r] = c
	}
	b.Cleanup(func() {
		for _, c := range w.comms {
			c.Close()
		}
	})
	// One agreement first: every connection is up and warm.
	w.all(b, func(ctx context.Context, c *comm.Comm) error {
		_, err := c.Agree(ctx, 1)
		return err
	})
	return w
}

// all runs f on every rank at once and fails b on any error.
func (w *perfWorld) all(b *testing.B, f func(ctx context.Context, c *comm.Comm) error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(w.comms))
	for r, c := range w.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(ctx, c)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// perfSpin is the TCP transport's busy-poll setting: none, as ftrun sets it
// when ranks share CPUs (jobs of more than 2 ranks on this 2-CPU machine).
const perfSpin = -1

var perfKinds = []string{"memnet", "tcp"}

var perfSizes = []int{4, 16, 32}

// perfEach runs f on each kind of world and size; msgKind is the kind of
// message counted in msgs/op.
func perfEach(b *testing.B, msgKind byte, f func(b *testing.B, w *perfWorld)) {
	for _, kind := range perfKinds {
		for _, n := range perfSizes {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				w := newPerfWorld(b, kind, n)
				start := w.sent[msgKind].Load()
				b.ReportAllocs()
				f(b, w)
				b.ReportMetric(float64(w.sent[msgKind].Load()-start)/float64(b.N), "msgs/op")
			})
		}
	}
}

// BenchmarkAgree times one Agree called by every rank at once, until the
// last rank has its decision.
func BenchmarkAgree(b *testing.B) {
	perfEach(b, kindAgree, func(b *testing.B, w *perfWorld) {
		for b.Loop() {
			w.all(b, func(ctx context.Context, c *comm.Comm) error {
				v, err := c.Agree(ctx, ^uint64(0)&^(1<<c.Rank()))
				if err == nil && v&(1<<c.Rank()) != 0 {
					err = fmt.Errorf("agree decided %#x", v)
				}
				return err
			})
		}
	})
}

// BenchmarkShrink times one Shrink of the world by every rank at once (no
// failures), until the last rank has its new communicator.
func BenchmarkShrink(b *testing.B) {
	perfEach(b, kindAgree, func(b *testing.B, w *perfWorld) {
		for b.Loop() {
			w.all(b, func(ctx context.Context, c *comm.Comm) error {
				s, err := c.Shrink(ctx)
				if err != nil {
					return err
				}
				if s.Size() != c.Size() {
					return fmt.Errorf("shrink without failures gave %d ranks of %d", s.Size(), c.Size())
				}
				return s.Close()
			})
		}
	})
}

// BenchmarkRevoke times a Revoke at rank 0 until every other rank has seen
// it (they wait on Revoked). Each round revokes a
// fresh communicator, made by an untimed Shrink.
func BenchmarkRevoke(b *testing.B) {
	perfEach(b, kindBcast, func(b *testing.B, w *perfWorld) {
		fresh := make([]*comm.Comm, len(w.comms))
		for b.Loop() {
			b.StopTimer()
			w.all(b, func(ctx context.Context, c *comm.Comm) error {
				s, err := c.Shrink(ctx)
				fresh[c.Rank()] = s
				return err
			})
			// Every rank has made its fresh communicator before rank 0
			// revokes it.
			w.all(b, func(ctx context.Context, c *comm.Comm) error { return c.Barrier(ctx) })
			b.StartTimer()
			w.all(b, func(ctx context.Context, c *comm.Comm) error {
				s := fresh[c.Rank()]
				if c.Rank() == 0 {
					s.Revoke()
					return nil
				}
				select {
				case <-s.Revoked():
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			b.StopTimer()
			for _, s := range fresh {
				s.Close()
			}
			b.StartTimer()
		}
	})
}

// Revoked is closed at every rank once the communicator is revoked, at once
// when asked afterwards, and only for the communicator revoked; RevokeGroup
// closes it at the listed ranks only.
func TestRevokedChannel(t *testing.T) {
	w := commtest.New(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		s, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		select {
		case <-s.Revoked():
			return fmt.Errorf("rank %d: Revoked closed before any revocation", c.Rank())
		default:
		}
		wait := s.Revoked()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 2 {
			s.Revoke()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("rank %d: never saw the revocation: %w", c.Rank(), ctx.Err())
		}
		if !s.IsRevoked() {
			return fmt.Errorf("rank %d: Revoked closed but IsRevoked is false", c.Rank())
		}
		select {
		case <-s.Revoked():
		default:
			return fmt.Errorf("rank %d: Revoked asked after the revocation is not closed", c.Rank())
		}
		select {
		case <-c.Revoked():
			return fmt.Errorf("rank %d: the world's Revoked closed by another communicator's revocation", c.Rank())
		default:
		}
		// RevokeGroup: rank 0 revokes the world at rank 1 only. Rank 0 may
		// leave this barrier, and revoke, while rank 1 is still finishing
		// it: rank 1's barrier then fails as revoked, as ULFM allows.
		if err := c.Barrier(ctx); err != nil && !(c.Rank() == 1 && errors.Is(err, ftrma.ErrRevoked)) {
			return err
		}
		if c.Rank() == 0 {
			if err := c.RevokeGroup([]ftrma.Rank{1}); err != nil {
				return err
			}
		}
		if c.Rank() <= 1 {
			select {
			case <-c.Revoked():
			case <-ctx.Done():
				return fmt.Errorf("rank %d: RevokeGroup never seen: %w", c.Rank(), ctx.Err())
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, r := range []int{2, 3} {
		select {
		case <-w.Comms[r].Revoked():
			t.Errorf("rank %d: RevokeGroup to rank 1 closed its Revoked", r)
		default:
		}
	}
}
