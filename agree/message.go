package agree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// MaxRanks bounds the size of an agreement's communicator, and so every rank
// a message may name.
const MaxRanks = 1 << 20

// Kind is a message type. Kind numbers are part of the wire format: they are
// only ever appended to, never renumbered.
type Kind uint8

const (
	// KindStart opens a round: START(inst, round, F). The receiver, a member
	// of the round (a rank not in F), joins it and passes it on to its
	// children in the round's tree.
	KindStart Kind = 1
	// KindReport carries a subtree's aggregate to the parent:
	// REPORT(inst, round, AND of the values, ranks covered, failures known,
	// the latest decision seen in the subtree if any).
	KindReport Kind = 2
	// KindDecide carries a decision: DECIDE(inst, round, value, F), where
	// round is the round whose coordinator decided.
	KindDecide Kind = 3
	// KindNudge says "I am waiting in this round and can no longer count on
	// its coordinator or my parent": NUDGE(inst, round). It goes to the
	// lowest rank the sender believes alive, which answers with a decision of
	// that round or later, or runs a new round above it.
	KindNudge Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindStart:
		return "START"
	case KindReport:
		return "REPORT"
	case KindDecide:
		return "DECIDE"
	case KindNudge:
		return "NUDGE"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Round names a round of one instance: rounds are ordered by Counter, then by
// Coord, the rank that coordinates it. The zero Round, (0, 0), is the implicit
// first round of every instance: coordinated by rank 0 over all ranks, joined
// without any START message.
type Round struct {
	Counter uint64
	Coord   int
}

// Less orders rounds lexicographically by (Counter, Coord).
func (r Round) Less(o Round) bool {
	return r.Counter < o.Counter || r.Counter == o.Counter && r.Coord < o.Coord
}

func (r Round) String() string { return fmt.Sprintf("(%d,%d)", r.Counter, r.Coord) }

// decision is a coordinator's decision: the value and failed set it decided,
// tagged with the round in which it decided. A decision is never modified
// after it is made: messages and instances share it.
type decision struct {
	tag    Round
	value  uint64
	failed bitset
}

// later returns whichever of a and b has the higher tag (nil counts lowest).
func later(a, b *decision) *decision {
	if a == nil || b != nil && a.tag.Less(b.tag) {
		return b
	}
	return a
}

// Message is one protocol message. Build messages only through the
// Agreement; a message handed out in Ready is shared and read-only. The wire
// form is AppendBinary's; ParseMessage reverses it.
type Message struct {
	Kind  Kind
	Inst  uint64 // the agreement instance
	Round Round  // see Kind for its meaning per message type
	Value uint64 // REPORT: AND of the covered contributions; DECIDE: the value

	failed  bitset    // START: the round's failed set; REPORT: failures known in the subtree; DECIDE: the decided set
	covered bitset    // REPORT: the ranks whose contributions Value holds
	dec     *decision // REPORT: the latest decision seen in the subtree, or nil
}

// ErrMalformed is returned by ParseMessage for bytes that are not a message.
var ErrMalformed = errors.New("agree: malformed message")

var le = binary.LittleEndian

// AppendBinary appends the wire form of m to b and returns the extended
// buffer.
//
//	kind byte | uvarint inst | round | kind-specific fields
//	round    = uvarint counter | uvarint coord
//	START    : set F
//	REPORT   : u64 value | set covered | set failed | 0, or 1 round u64 value set F
//	DECIDE   : u64 value | set F
//	NUDGE    : -
//	set      = 0 uvarint count, count uvarint gaps (rank - previous rank - 1)
//	         | 1 uvarint nbytes, nbytes of bitmap (rank r = bit r%8 of byte r/8)
//
// u64 is 8 bytes little-endian. Sets take whichever form is shorter.
func (m Message) AppendBinary(b []byte) []byte {
	b = append(b, byte(m.Kind))
	b = binary.AppendUvarint(b, m.Inst)
	b = appendRound(b, m.Round)
	switch m.Kind {
	case KindStart:
		b = appendSet(b, m.failed)
	case KindReport:
		b = le.AppendUint64(b, m.Value)
		b = appendSet(b, m.covered)
		b = appendSet(b, m.failed)
		if m.dec == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendRound(b, m.dec.tag)
			b = le.AppendUint64(b, m.dec.value)
			b = appendSet(b, m.dec.failed)
		}
	case KindDecide:
		b = le.AppendUint64(b, m.Value)
		b = appendSet(b, m.failed)
	}
	return b
}

func appendRound(b []byte, r Round) []byte {
	b = binary.AppendUvarint(b, r.Counter)
	return binary.AppendUvarint(b, uint64(max(r.Coord, 0)))
}

func appendSet(b []byte, s bitset) []byte {
	// Cost of both forms: the list needs a pass over the members.
	last, count, listLen := -1, 0, 0
	for w, x := range s {
		for x != 0 {
			r := w*64 + bits.TrailingZeros64(x)
			x &= x - 1
			listLen += uvarintLen(uint64(r - last - 1))
			last = r
			count++
		}
	}
	listLen += uvarintLen(uint64(count))
	mapBytes := (last + 8) / 8 // 0 when empty
	mapLen := uvarintLen(uint64(mapBytes)) + mapBytes
	if listLen <= mapLen {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(count))
		last = -1
		for w, x := range s {
			for x != 0 {
				r := w*64 + bits.TrailingZeros64(x)
				x &= x - 1
				b = binary.AppendUvarint(b, uint64(r-last-1))
				last = r
			}
		}
		return b
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(mapBytes))
	for i := range mapBytes {
		b = append(b, byte(s[i/8]>>(8*(i%8))))
	}
	return b
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// ParseMessage decodes a message written by AppendBinary. It never panics:
// anything else, including trailing bytes, ranks of MaxRanks or more and
// unknown kinds, gives ErrMalformed. Its allocations are bounded by
// MaxRanks/8 bytes per set. The result does not alias b.
func ParseMessage(b []byte) (Message, error) {
	r := reader{b: b}
	var m Message
	m.Kind = Kind(r.byte())
	m.Inst = r.uvarint()
	m.Round = r.round()
	switch m.Kind {
	case KindStart:
		m.failed = r.set()
	case KindReport:
		m.Value = r.u64()
		m.covered = r.set()
		m.failed = r.set()
		switch r.byte() {
		case 0:
		case 1:
			d := &decision{}
			d.tag = r.round()
			d.value = r.u64()
			d.failed = r.set()
			m.dec = d
		default:
			r.bad = true
		}
	case KindDecide:
		m.Value = r.u64()
		m.failed = r.set()
	case KindNudge:
	default:
		r.bad = true
	}
	if r.bad || len(r.b) != 0 {
		return Message{}, ErrMalformed
	}
	return m, nil
}

// reader decodes from b; after the first error every read returns zero and
// bad stays set.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) byte() byte {
	if r.bad || len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) u64() uint64 {
	if r.bad || len(r.b) < 8 {
		r.bad = true
		return 0
	}
	x := le.Uint64(r.b)
	r.b = r.b[8:]
	return x
}

func (r *reader) round() Round {
	c := r.uvarint()
	k := r.uvarint()
	if k >= MaxRanks {
		r.bad = true
		return Round{}
	}
	return Round{Counter: c, Coord: int(k)}
}

func (r *reader) set() bitset {
	switch r.byte() {
	case 0:
		count := r.uvarint()
		if count > uint64(len(r.b)) { // every member takes at least one byte
			r.bad = true
			return nil
		}
		var s bitset
		last := -1
		for range count {
			gap := r.uvarint()
			if r.bad || gap >= MaxRanks || last+1+int(gap) >= MaxRanks {
				r.bad = true
				return nil
			}
			last += 1 + int(gap)
			for len(s) <= last/64 {
				s = append(s, 0)
			}
			s.set(last)
		}
		return s
	case 1:
		nb := r.uvarint()
		if r.bad || nb > uint64(len(r.b)) || nb > MaxRanks/8 {
			r.bad = true
			return nil
		}
		s := make(bitset, (nb+7)/8)
		for i := range int(nb) {
			s[i/8] |= uint64(r.b[i]) << (8 * (i % 8))
		}
		r.b = r.b[nb:]
		return s
	}
	r.bad = true
	return nil
}

// String gives a one-line human form, for logs and test failures.
func (m Message) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v inst=%d round=%v", m.Kind, m.Inst, m.Round)
	switch m.Kind {
	case KindStart:
		fmt.Fprintf(&sb, " F=%v", m.failed.list())
	case KindReport:
		fmt.Fprintf(&sb, " and=%#x covered=%v F=%v", m.Value, m.covered.list(), m.failed.list())
		if m.dec != nil {
			fmt.Fprintf(&sb, " dec=%v:%#x:%v", m.dec.tag, m.dec.value, m.dec.failed.list())
		}
	case KindDecide:
		fmt.Fprintf(&sb, " value=%#x F=%v", m.Value, m.failed.list())
	}
	return sb.String()
}
