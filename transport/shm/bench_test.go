//go:build linux

package shm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma/transport"
)

func benchPair(b *testing.B) ([]*Transport, []*recorder, transport.Key) {
	ts, rs, _ := cluster(b, 2, clusterOpts{})
	mem := must(ts[1].Alloc(64 << 10))
	return ts, rs, must(ts[1].Register(mem))
}

func BenchmarkWrite8(b *testing.B) {
	ts, _, key := benchPair(b)
	src := make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		ts[0].Write(1, key, 0, src)
	}
}

func BenchmarkRead4K(b *testing.B) {
	ts, _, key := benchPair(b)
	dst := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		ts[0].Read(1, key, 0, dst)
	}
}

func BenchmarkWrite32K(b *testing.B) {
	ts, _, key := benchPair(b)
	src := make([]byte, transport.WordAtomicWrite)
	b.SetBytes(transport.WordAtomicWrite)
	b.ReportAllocs()
	for b.Loop() {
		ts[0].Write(1, key, 0, src)
	}
}

func BenchmarkCompareAndSwapWait(b *testing.B) {
	ts, _, key := benchPair(b)
	ctx := context.Background()
	var old uint64
	b.ReportAllocs()
	for b.Loop() {
		seq, _ := ts[0].CompareAndSwap64(1, key, 0, old, old+1, &old)
		ts[0].Wait(ctx, 1, seq)
	}
}

func BenchmarkSendPingPong(b *testing.B) {
	for _, spin := range []time.Duration{-1, 0, 50 * time.Microsecond} {
		b.Run("spin="+spin.String(), func(b *testing.B) { benchPingPong(b, spin) })
	}
}

func benchPingPong(b *testing.B, spin time.Duration) {
	ts, rs, _ := cluster(b, 2, clusterOpts{cfg: func(c *Config) { c.Spin = spin }})
	ctx := context.Background()
	msg := make([]byte, 64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		ts[0].Send(1, msg)
		rs[1].Await(b, ctx, "ping", func() bool { return rs[1].Count() >= i })
		ts[1].Send(0, msg)
		rs[0].Await(b, ctx, "pong", func() bool { return rs[0].Count() >= i })
	}
}

// BenchmarkWriteLarge and BenchmarkReadLarge move 16 MiB, in pieces of
// copyPiece.
func BenchmarkWriteLarge(b *testing.B) { benchLarge(b, true) }
func BenchmarkReadLarge(b *testing.B)  { benchLarge(b, false) }

func benchLarge(b *testing.B, write bool) {
	const size = 16 << 20
	ts, _, _ := cluster(b, 2, clusterOpts{})
	key := must(ts[1].Register(must(ts[1].Alloc(size))))
	buf := make([]byte, size)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if write {
			ts[0].Write(1, key, 0, buf)
		} else {
			ts[0].Read(1, key, 0, buf)
		}
	}
}

// BenchmarkFastPathFloor is the floor of a fast-path write: what
// executeFast does to memory (pin, announce, the target's state, fence
// flag, key entry and release count, the 8-byte store, the announcement
// cleared, unpin), in one function, without the calls, checks and
// bookkeeping around it. BenchmarkWrite8 against it is the cost of the
// layers.
func BenchmarkFastPathFloor(b *testing.B) {
	ts, _, key := benchPair(b)
	t, p := ts[0], ts[0].peers[1]
	c := p.fast.Load().c
	reg, err := p.resolve(c, key)
	if err != nil {
		b.Fatal(err)
	}
	e := c.entry(int(key) & (c.lay.regions - 1))
	act := c.active(t.selfSlot)
	for b.Loop() {
		i := procPin()
		line := t.own.reader(i)
		tw, sw := t.own.word(line+readerTarget), t.own.word(line+readerSeq)
		announce(sw, *sw+1)
		announce(tw, 2)
		if atomic.LoadUint64(c.word(offState)) == stateOpen && atomic.LoadUint64(c.word(act+actFenced)) == 0 &&
			atomic.LoadUint64(c.word(e+entryState)) == uint64(key)<<8|1 && atomic.LoadUint64(c.word(offReleaseGen)) == p.relGen.Load() {
			storeWord(&reg[0], 1)
		}
		announce(tw, 0)
		procUnpin()
	}
}
