package overlay

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
)

// randomSet builds a Set over n ranks and the reference map from the same
// random members; density picks sparse or dense sets.
func randomSet(rng *rand.Rand, n int) (Set, map[int]bool) {
	s, ref := NewSet(n), map[int]bool{}
	if n == 0 {
		return s, ref
	}
	k := rng.IntN(n + 1)
	if rng.IntN(2) == 0 {
		k = rng.IntN(min(n, 8) + 1)
	}
	for range k {
		r := rng.IntN(n)
		s.Add(r)
		ref[r] = true
	}
	return s, ref
}

func sortedKeys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSetMatchesMap checks Add, Has, Len, Ranks, Union, Equal and Clone
// against a map[int]bool.
func TestSetMatchesMap(t *testing.T) {
	prop := func(seed uint64, size uint16) bool {
		rng := rand.New(rand.NewPCG(seed, 0))
		n := int(size) % 3000
		a, refA := randomSet(rng, n)
		b, refB := randomSet(rng, n)
		if a.Len() != len(refA) || !slices.Equal(a.Ranks(), sortedKeys(refA)) {
			return false
		}
		for r := -2; r < n+2; r++ {
			if a.Has(r) != refA[r] {
				return false
			}
		}
		c := a.Clone()
		changed := c.Union(b)
		for r := range refB {
			refA[r] = true
		}
		if !slices.Equal(c.Ranks(), sortedKeys(refA)) {
			return false
		}
		if changed != (c.Len() != a.Len()) || changed == c.Equal(a) {
			return false
		}
		// The clone is independent: a did not change.
		return !changed || !a.Equal(c)
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 300}); err != nil {
		t.Fatal(err)
	}
}

func TestSetAddReportsNew(t *testing.T) {
	s := NewSet(130)
	if !s.Add(129) || s.Add(129) || !s.Add(0) {
		t.Fatal("Add did not report whether the rank was new")
	}
	alias := s // copies share storage, like a map
	alias.Add(64)
	if !s.Has(64) || s.Len() != 3 || s.String() != "{0 64 129}" {
		t.Fatalf("set is %v, want {0 64 129}", s)
	}
	if s.Equal(NewSet(131)) || NewSet(5).Equal(NewSet(6)) || !NewSet(5).Equal(NewSet(5)) {
		t.Fatal("Equal ignores the universe size")
	}
	for _, bad := range []int{-1, 130} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Add(%d) on a set over 130 ranks did not panic", bad)
				}
			}()
			s.Add(bad)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Union of sets over different sizes did not panic")
			}
		}()
		s.Union(NewSet(4))
	}()
	var zero Set
	if zero.Len() != 0 || zero.Has(0) || zero.Ranks() != nil || zero.Size() != 0 {
		t.Fatal("the zero Set is not empty")
	}
}

// TestSetEncodingRoundTrip checks that ParseSet inverts AppendBinary, leaves
// the following bytes alone and does not alias its input.
func TestSetEncodingRoundTrip(t *testing.T) {
	prop := func(seed uint64, size uint16, prefix, suffix []byte) bool {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := int(size) % 3000
		s, _ := randomSet(rng, n)
		enc := s.AppendBinary(slices.Clone(prefix))
		if !bytes.HasPrefix(enc, prefix) {
			return false
		}
		enc = append(enc, suffix...)
		got, rest, err := ParseSet(enc[len(prefix):], n)
		if err != nil || !got.Equal(s) || !bytes.Equal(rest, suffix) {
			return false
		}
		clear(enc)
		return got.Equal(s)
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

// TestSetEncodingCompact checks that sparse sets use the list form and dense
// ones the bitmap, so neither costs more than about n/8 bytes.
func TestSetEncodingCompact(t *testing.T) {
	s := NewSet(4096)
	s.Add(7)
	s.Add(4000)
	if got := len(s.AppendBinary(nil)); got > 8 {
		t.Errorf("two ranks of 4096 encode in %d bytes", got)
	}
	for r := 0; r < 4096; r += 3 {
		s.Add(r)
	}
	if got := len(s.AppendBinary(nil)); got > 4096/8+4 {
		t.Errorf("a dense set over 4096 ranks encodes in %d bytes", got)
	}
}

func TestParseSetRejects(t *testing.T) {
	one := NewSet(10)
	one.Add(3)
	good := one.AppendBinary(nil) // 10, list, 1, 3
	for _, c := range []struct {
		name string
		b    []byte
		n    int
	}{
		{"empty", nil, 10},
		{"wrong size", good, 11},
		{"negative size", good, -1},
		{"missing form", []byte{10}, 10},
		{"unknown form", []byte{10, 7, 0}, 10},
		{"truncated list", []byte{10, formList, 2, 3}, 10},
		{"count beyond n", []byte{10, formList, 11}, 10},
		{"rank beyond n", []byte{10, formList, 1, 10}, 10},
		{"gap beyond n", []byte{10, formList, 2, 3, 6}, 10},
		{"overlong varint", []byte{10, formList, 0x81, 0x00, 3}, 10},
		{"overflowing varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10},
		{"truncated bitmap", []byte{16, formBitmap, 0xff}, 16},
		{"bitmap beyond n", []byte{10, formBitmap, 0xff, 0xff}, 10},
		{"non-canonical bitmap", []byte{10, formBitmap, 0x08, 0x00}, 10},
		{"non-canonical list", []byte{10, formList, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 10},
	} {
		if _, _, err := ParseSet(c.b, c.n); !errors.Is(err, ErrBadSet) {
			t.Errorf("%s: ParseSet(%x, %d) = %v, want ErrBadSet", c.name, c.b, c.n, err)
		}
	}
	if s, rest, err := ParseSet(good, 10); err != nil || !s.Equal(one) || len(rest) != 0 {
		t.Fatalf("ParseSet(%x) = %v, %x, %v", good, s, rest, err)
	}
}

// TestParseSetGarbage feeds random bytes, and random corruptions of valid
// encodings, to ParseSet: it must not panic, and whatever it accepts must
// re-encode to the bytes it consumed.
func TestParseSetGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		n := rng.IntN(300)
		var b []byte
		if rng.IntN(2) == 0 {
			b = make([]byte, rng.IntN(60))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if len(b) > 0 && rng.IntN(2) == 0 {
				b[0] = byte(n % 128) // pass the size check now and then
				n %= 128
			}
		} else {
			s, _ := randomSet(rng, n)
			b = s.AppendBinary(nil)
			for range 1 + rng.IntN(3) {
				b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
			}
		}
		checkParseSet(t, b, n)
	}
}

func checkParseSet(t *testing.T, b []byte, n int) {
	s, rest, err := ParseSet(b, n)
	if err != nil {
		if !errors.Is(err, ErrBadSet) {
			t.Fatalf("ParseSet(%x, %d): error %v does not wrap ErrBadSet", b, n, err)
		}
		return
	}
	if s.Size() != n {
		t.Fatalf("ParseSet(%x, %d) = set over %d ranks", b, n, s.Size())
	}
	for _, r := range s.Ranks() {
		if !s.Has(r) { // Has is false outside [0, n)
			t.Fatalf("ParseSet(%x, %d) = %v, with a rank outside the set's range", b, n, s)
		}
	}
	if consumed := b[:len(b)-len(rest)]; !bytes.Equal(s.AppendBinary(nil), consumed) {
		t.Fatalf("ParseSet(%x, %d) = %v, which encodes as %x", b, n, s, s.AppendBinary(nil))
	}
}

func FuzzParseSet(f *testing.F) {
	for _, n := range []int{0, 1, 10, 64, 100} {
		s := NewSet(n)
		f.Add(s.AppendBinary(nil), n)
		for r := 0; r < n; r += 2 {
			s.Add(r)
		}
		f.Add(s.AppendBinary(nil), n)
	}
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 5000 {
			return
		}
		checkParseSet(t, b, n)
	})
}

func BenchmarkSetUnion(b *testing.B) {
	x, y := NewSet(4096), NewSet(4096)
	for r := 0; r < 4096; r += 7 {
		y.Add(r)
	}
	b.ReportAllocs()
	for b.Loop() {
		x.Union(y)
	}
}
