package transport

import (
	"errors"
	"testing"

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
