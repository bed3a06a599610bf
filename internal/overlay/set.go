package overlay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// Set is a set of ranks in [0, n), stored as a bitset. It suits the sets the
// protocols exchange (failed ranks, agreement participants) for jobs of up to
// a few thousand ranks.
//
// Like a map, a Set refers to shared storage: copies of a Set value see and
// make the same changes. Use Clone for an independent copy. The zero Set is
// the empty set over zero ranks. A Set is not safe for concurrent mutation.
type Set struct {
	n     int      // universe size; ranks are in [0, n)
	words []uint64 // bit r%64 of words[r/64] is rank r; bits >= n are always 0
}

// NewSet returns an empty set over the ranks [0, n). It panics if n < 0.
func NewSet(n int) Set {
	if n < 0 {
		panic(fmt.Sprintf("overlay: set over %d ranks", n))
	}
	return Set{n: n, words: make([]uint64, (n+63)/64)}
}

// Size returns n, the number of ranks the set ranges over (not the number of
// members; see Len).
func (s Set) Size() int { return s.n }

// Add puts rank r in the set and reports whether it was absent. It panics
// unless 0 <= r < Size(): mixing ranks of different jobs is a caller bug.
func (s Set) Add(r int) bool {
	if r < 0 || r >= s.n {
		panic(fmt.Sprintf("overlay: rank %d outside a set over %d ranks", r, s.n))
	}
	w, b := r/64, uint64(1)<<(r%64)
	if s.words[w]&b != 0 {
		return false
	}
	s.words[w] |= b
	return true
}

// Has reports whether rank r is in the set. Ranks outside [0, Size()) are
// never members.
func (s Set) Has(r int) bool {
	if r < 0 || r >= s.n {
		return false
	}
	return s.words[r/64]&(1<<(r%64)) != 0
}

// Len returns the number of ranks in the set.
func (s Set) Len() int {
	c := 0
	for _, w := range s.words {
		c += bits.OnesCount64(w)
	}
	return c
}

// Union adds every member of other to s and reports whether s changed. Both
// sets must range over the same number of ranks; Union panics otherwise.
func (s Set) Union(other Set) (changed bool) {
	if s.n != other.n {
		panic(fmt.Sprintf("overlay: union of sets over %d and %d ranks", s.n, other.n))
	}
	for i, w := range other.words {
		if w&^s.words[i] != 0 {
			changed = true
			s.words[i] |= w
		}
	}
	return changed
}

// Ranks returns the members in ascending order, in a new slice (nil when the
// set is empty).
func (s Set) Ranks() []int {
	var out []int
	for i, w := range s.words {
		for w != 0 {
			out = append(out, i*64+bits.TrailingZeros64(w))
			w &= w - 1
		}
	}
	return out
}

// Equal reports whether s and other range over the same ranks and have the
// same members.
func (s Set) Equal(other Set) bool {
	if s.n != other.n {
		return false
	}
	for i, w := range s.words {
		if other.words[i] != w {
			return false
		}
	}
	return true
}

// Clone returns an independent copy of s.
func (s Set) Clone() Set {
	return Set{n: s.n, words: append([]uint64(nil), s.words...)}
}

// String formats the set as its members in braces, e.g. "{1 5 7}".
func (s Set) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, r := range s.Ranks() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, r)
	}
	b.WriteByte('}')
	return b.String()
}

// The two encodings of a set, chosen by whichever is shorter.
const (
	formList   = 0 // count, then ascending ranks as gaps (first rank, then difference-1)
	formBitmap = 1 // ⌈n/8⌉ bytes, rank r at bit r%8 of byte r/8
)

// AppendBinary appends the encoding of s to b and returns the extended
// slice. The encoding is uvarint(n), a form byte, then either a list of the
// members as uvarint gaps (for sparse sets) or a bitmap of ⌈n/8⌉ bytes,
// whichever is shorter. It is canonical: equal sets encode to equal bytes.
func (s Set) AppendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(s.n))
	if s.form() == formBitmap {
		b = append(b, formBitmap)
		for i := range (s.n + 7) / 8 {
			b = append(b, byte(s.words[i/8]>>(8*(i%8))))
		}
		return b
	}
	b = append(b, formList)
	b = binary.AppendUvarint(b, uint64(s.Len()))
	prev := -1
	for _, r := range s.Ranks() {
		b = binary.AppendUvarint(b, uint64(r-prev-1))
		prev = r
	}
	return b
}

// form returns the encoding AppendBinary uses for s: the shorter one, the
// list on a tie.
func (s Set) form() byte {
	listLen := uvarintLen(uint64(s.Len()))
	prev := -1
	for _, r := range s.Ranks() {
		listLen += uvarintLen(uint64(r - prev - 1))
		prev = r
	}
	if (s.n+7)/8 < listLen {
		return formBitmap
	}
	return formList
}

// ErrBadSet is wrapped by every error ParseSet returns.
var ErrBadSet = errors.New("overlay: malformed rank set")

// ParseSet decodes a set over n ranks from the front of b, as written by
// AppendBinary, and returns it with the bytes that follow it. It accepts only
// the canonical encoding of a set over exactly n ranks, so for any b it
// accepts, re-encoding the set yields the consumed bytes. It never panics and
// never allocates more than a set over n ranks, whatever b holds; the set
// does not alias b. Errors wrap ErrBadSet.
func ParseSet(b []byte, n int) (s Set, rest []byte, err error) {
	if n < 0 {
		return Set{}, b, fmt.Errorf("%w: negative size %d", ErrBadSet, n)
	}
	size, b, err := readUvarint(b)
	if err != nil {
		return Set{}, b, err
	}
	if size != uint64(n) {
		return Set{}, b, fmt.Errorf("%w: set over %d ranks, want %d", ErrBadSet, size, n)
	}
	if len(b) < 1 {
		return Set{}, b, fmt.Errorf("%w: missing form", ErrBadSet)
	}
	form := b[0]
	b = b[1:]
	s = NewSet(n)
	switch form {
	case formBitmap:
		mapLen := (n + 7) / 8
		if len(b) < mapLen {
			return Set{}, b, fmt.Errorf("%w: bitmap of %d bytes, want %d", ErrBadSet, len(b), mapLen)
		}
		for i := range mapLen {
			s.words[i/8] |= uint64(b[i]) << (8 * (i % 8))
		}
		if n%8 != 0 && b[mapLen-1]>>(n%8) != 0 {
			return Set{}, b, fmt.Errorf("%w: bitmap names ranks beyond %d", ErrBadSet, n-1)
		}
		b = b[mapLen:]
	case formList:
		count, rest, err := readUvarint(b)
		if err != nil {
			return Set{}, b, err
		}
		b = rest
		if count > uint64(n) {
			return Set{}, b, fmt.Errorf("%w: %d members in a set over %d ranks", ErrBadSet, count, n)
		}
		prev := -1
		for range count {
			gap, rest, err := readUvarint(b)
			if err != nil {
				return Set{}, b, err
			}
			b = rest
			if gap >= uint64(n-prev-1) {
				return Set{}, b, fmt.Errorf("%w: rank beyond %d", ErrBadSet, n-1)
			}
			prev += int(gap) + 1
			s.Add(prev)
		}
	default:
		return Set{}, b, fmt.Errorf("%w: unknown form %d", ErrBadSet, form)
	}
	if s.form() != form {
		return Set{}, b, fmt.Errorf("%w: non-canonical form %d", ErrBadSet, form)
	}
	return s, b, nil
}

// readUvarint reads a minimally encoded uvarint from the front of b.
func readUvarint(b []byte) (uint64, []byte, error) {
	v, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, b, fmt.Errorf("%w: truncated or overflowing varint", ErrBadSet)
	}
	if k != uvarintLen(v) {
		return 0, b, fmt.Errorf("%w: overlong varint", ErrBadSet)
	}
	return v, b[k:], nil
}

// uvarintLen returns the length of the minimal uvarint encoding of v.
func uvarintLen(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}
