package transport

import (
	"bytes"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

func TestMemoryChecksEveryAccess(t *testing.T) {
	var m Memory
	w := make([]uint64, 4)
	key, err := m.Register(wordsAsBytes(w))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"write in bounds", m.Write(key, 24, make([]byte, 8)), nil},
		{"write past end", m.Write(key, 25, make([]byte, 8)), ftrma.ErrOutOfBounds},
		{"write at huge offset", m.Write(key, 1<<63, []byte{1}), ftrma.ErrOutOfBounds},
		{"read past end", m.Read(key, 0, make([]byte, 33)), ftrma.ErrOutOfBounds},
		{"unknown key", m.Write(key+1, 0, []byte{1}), ftrma.ErrUnknownRegion},
		{"misaligned cas", second(m.CompareAndSwap64(key, 4, 0, 1)), ftrma.ErrMisaligned},
		{"fadd past end", second(m.FetchAndAdd64(key, 32, 1)), ftrma.ErrOutOfBounds},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) || (c.want == nil && c.err != nil) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if old, err := m.FetchAndAdd64(key, 8, 5); err != nil || old != 0 {
		t.Fatalf("fadd: %d, %v", old, err)
	}
	if old, err := m.CompareAndSwap64(key, 8, 5, 9); err != nil || old != 5 || w[1] != 9 {
		t.Fatalf("cas hit: %d, %v, word %d", old, err, w[1])
	}
	if old, err := m.CompareAndSwap64(key, 8, 5, 11); err != nil || old != 9 || w[1] != 9 {
		t.Fatalf("cas miss: %d, %v, word %d", old, err, w[1])
	}
	// Unaligned source and destination both copy correctly.
	src := []byte("0123456789abcdefXYZ")
	for _, off := range []uint64{0, 3, 8} {
		if err := m.Write(key, off, src[1:17]); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 17)
		if err := m.Read(key, off, got[1:]); err != nil {
			t.Fatal(err)
		}
		if string(got[1:]) != string(src[1:17]) {
			t.Fatalf("offset %d: read back %q", off, got[1:])
		}
	}
	if err := m.Deregister(key); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(key, 0, []byte{1}); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Fatalf("write after deregister: %v", err)
	}
}

func second(_ uint64, err error) error { return err }

func wordsAsBytes(w []uint64) []byte { return wordBytesForTest(w) }

func BenchmarkMemoryWrite1MiB(b *testing.B) {
	var m Memory
	key, _ := m.Register(wordBytesForTest(make([]uint64, 1<<17)))
	src := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		m.Write(key, 0, src)
	}
}

func BenchmarkCopy1MiB(b *testing.B) {
	dst := make([]byte, 1<<20)
	src := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	for b.Loop() {
		copy(dst, src)
	}
}

func BenchmarkMemoryRead1MiB(b *testing.B) {
	var m Memory
	key, _ := m.Register(wordBytesForTest(make([]uint64, 1<<17)))
	dst := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		m.Read(key, 0, dst)
	}
}

func TestCopyInPieces(t *testing.T) {
	src := make([]byte, 3*CopyChunk+13)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	for _, n := range []int{0, 1, 4096, CopyChunk - 1, CopyChunk, CopyChunk + 1, 2 * CopyChunk, 3*CopyChunk + 5} {
		for _, skew := range []int{0, 3} {
			dst := make([]byte, n+skew)
			if got := Copy(dst[skew:], src[skew:skew+n]); got != n {
				t.Fatalf("Copy of %d bytes (skew %d) returned %d", n, skew, got)
			}
			if !bytes.Equal(dst[skew:], src[skew:skew+n]) {
				t.Fatalf("Copy of %d bytes (skew %d) differs", n, skew)
			}
		}
	}
	// Lengths differ: the shorter one counts, as with the builtin.
	dst := make([]byte, 2*CopyChunk)
	if got := Copy(dst, src); got != len(dst) || !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatalf("Copy into a shorter dst: %d", got)
	}
	if got := Copy(make([]byte, len(src)), src[:CopyChunk+1]); got != CopyChunk+1 {
		t.Fatalf("Copy from a shorter src: %d", got)
	}
	// Overlapping, dst before src (a buffer compacted to its front).
	b := bytes.Clone(src)
	Copy(b, b[100:])
	if !bytes.Equal(b[:len(b)-100], src[100:]) {
		t.Fatal("overlapping Copy toward the front differs")
	}
}

func TestInPieces(t *testing.T) {
	for _, n := range []int{-1, 0, 1, CopyChunk, CopyChunk + 1, 5*CopyChunk - 1} {
		next := 0
		InPieces(n, func(lo, hi int) {
			if lo != next || hi <= lo || hi-lo > CopyChunk || hi > n {
				t.Fatalf("n %d: piece [%d, %d) after %d", n, lo, hi, next)
			}
			next = hi
		})
		if next != max(n, 0) {
			t.Fatalf("n %d: pieces ended at %d", n, next)
		}
	}
}

func TestGrowAndAppend(t *testing.T) {
	var b []byte
	var want []byte
	piece := make([]byte, CopyChunk/3+7)
	for i := range 20 {
		for j := range piece {
			piece[j] = byte(i + j)
		}
		b = Append(b, piece)
		want = append(want, piece...)
	}
	if !bytes.Equal(b, want) {
		t.Fatal("Append lost bytes")
	}
	g := Grow(b, 5)
	if cap(g)-len(g) < 5 || !bytes.Equal(g, want) {
		t.Fatalf("Grow: len %d cap %d", len(g), cap(g))
	}
	g = Grow(b, 3*CopyChunk)
	if cap(g)-len(g) < 3*CopyChunk || !bytes.Equal(g, want) {
		t.Fatalf("Grow of a large buffer: len %d cap %d", len(g), cap(g))
	}
	if s := make([]byte, 3, 10); &Grow(s, 7)[0] != &s[0] {
		t.Fatal("Grow moved a buffer with room")
	}
}

// yieldsDuring reports whether a goroutine that became runnable just before
// f ran got the processor before f returned, with GOMAXPROCS=1: whether f
// lets other goroutines run (a heartbeat, say) while it copies.
func yieldsDuring(f func()) bool {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var done, ranFirst atomic.Bool
	ran := make(chan struct{})
	go func() {
		ranFirst.Store(!done.Load())
		close(ran)
	}()
	f()
	done.Store(true)
	<-ran
	return ranFirst.Load()
}

// A Copy, Memory.Write and Memory.Read that run for longer than YieldEvery
// let other goroutines run. The test makes every pause between pieces due
// (yieldEvery 0), so that it does not hang on how fast this machine copies:
// a single due pause could fall on the scheduler's turn for its global
// queue, which holds the yielding goroutine itself.
func TestLargeCopiesYield(t *testing.T) {
	defer func(d time.Duration) { yieldEvery = d }(yieldEvery)
	yieldEvery = 0
	n := 8 * CopyChunk
	src, dst := make([]byte, n), make([]byte, n)
	if !yieldsDuring(func() { Copy(dst, src) }) {
		t.Errorf("Copy of %d MiB held the processor throughout", n>>20)
	}
	var m Memory
	key, err := m.Register(wordBytesForTest(make([]uint64, n/8)))
	if err != nil {
		t.Fatal(err)
	}
	if !yieldsDuring(func() { m.Write(key, 0, src) }) {
		t.Errorf("Memory.Write of %d MiB held the processor throughout", n>>20)
	}
	if !yieldsDuring(func() { m.Write(key, 3, src[:n-8]) }) {
		t.Errorf("unaligned Memory.Write of %d MiB held the processor throughout", n>>20)
	}
	if !yieldsDuring(func() { m.Read(key, 0, dst) }) {
		t.Errorf("Memory.Read of %d MiB held the processor throughout", n>>20)
	}
	big := make([]byte, n)
	if !yieldsDuring(func() { big = Grow(big, 1) }) {
		t.Errorf("Grow of a %d MiB buffer held the processor throughout", n>>20)
	}
}

func BenchmarkMemoryWrite4K(b *testing.B) {
	var m Memory
	key, _ := m.Register(wordBytesForTest(make([]uint64, 512)))
	src := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		m.Write(key, 0, src)
	}
}

func BenchmarkMemoryRead4K(b *testing.B) {
	var m Memory
	key, _ := m.Register(wordBytesForTest(make([]uint64, 512)))
	dst := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		m.Read(key, 0, dst)
	}
}
