package agree

import (
	"bytes"
	"encoding/hex"
	"math"
	"math/rand"
	"reflect"
	"testing"
)

func setOf(ranks ...int) bitset {
	var s bitset
	for _, r := range ranks {
		for len(s) <= r/64 {
			s = append(s, 0)
		}
		s.set(r)
	}
	return s
}

// sameMessage compares two messages by content (sets compared as sets, so
// that trailing zero words do not matter).
func sameMessage(a, b Message) bool {
	if a.Kind != b.Kind || a.Inst != b.Inst || a.Round != b.Round || a.Value != b.Value ||
		!a.failed.equal(b.failed) || !a.covered.equal(b.covered) || (a.dec == nil) != (b.dec == nil) {
		return false
	}
	return a.dec == nil || a.dec.tag == b.dec.tag && a.dec.value == b.dec.value && a.dec.failed.equal(b.dec.failed)
}

var sampleMessages = []Message{
	{Kind: KindStart, Inst: 1, Round: Round{1, 0}, failed: setOf(3, 5)},
	{Kind: KindStart, Inst: math.MaxUint64, Round: Round{math.MaxUint64, MaxRanks - 1}},
	{Kind: KindReport, Inst: 7, Round: Round{}, Value: 0xdeadbeef, covered: setOf(0, 1, 2, 3, 64, 65, 200), failed: setOf(9)},
	{Kind: KindReport, Inst: 7, Round: Round{3, 2}, Value: 1, covered: setOf(2),
		dec: &decision{tag: Round{2, 1}, value: 42, failed: setOf(0)}},
	{Kind: KindDecide, Inst: 2, Round: Round{0, 0}, Value: math.MaxUint64},
	{Kind: KindDecide, Inst: 2, Round: Round{5, 3}, Value: 0, failed: setOf(0, 1, 2, MaxRanks-1)},
	{Kind: KindNudge, Inst: 3, Round: Round{4, 1}},
}

func TestMessageRoundTrip(t *testing.T) {
	// Dense sets take the bitmap form, sparse ones the list form.
	dense := newBitset(1000)
	for r := range 1000 {
		if r%3 != 0 {
			dense.set(r)
		}
	}
	msgs := append(sampleMessages, Message{Kind: KindReport, Inst: 9, Round: Round{1, 1}, covered: dense, failed: setOf(999)})
	for _, m := range msgs {
		b := m.AppendBinary([]byte("prefix"))
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("%v: AppendBinary lost the prefix", m)
		}
		got, err := ParseMessage(b[len("prefix"):])
		if err != nil {
			t.Fatalf("%v: ParseMessage: %v (bytes %x)", m, err, b)
		}
		if !sameMessage(got, m) {
			t.Fatalf("round trip changed the message:\n got %v\nwant %v", got, m)
		}
	}
	if n := len(msgs[len(msgs)-1].AppendBinary(nil)); n > 200 {
		t.Errorf("a dense 1000-rank set took %d bytes; the bitmap form needs about 130", n)
	}
}

// TestMessageWireFormat pins the encoding: kind numbers and layout are part
// of the wire format.
func TestMessageWireFormat(t *testing.T) {
	for _, tc := range []struct {
		m   Message
		hex string
	}{
		{Message{Kind: KindNudge, Inst: 3, Round: Round{4, 1}}, "04030401"},
		{Message{Kind: KindStart, Inst: 1, Round: Round{1, 0}, failed: setOf(3, 5)}, "01010100" + "010128"}, // bitmap form: shorter than the list 00 02 03 01
		{Message{Kind: KindDecide, Inst: 300, Round: Round{0, 0}, Value: 7}, "03ac02" + "0000" + "0700000000000000" + "0000"},
	} {
		if got := hex.EncodeToString(tc.m.AppendBinary(nil)); got != tc.hex {
			t.Errorf("%v: encoded %s, want %s", tc.m, got, tc.hex)
		}
	}
}

func TestParseMessageGarbage(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
	}{
		{"empty", ""},
		{"kind zero", "00010000"},
		{"unknown kind", "09010000"},
		{"no inst", "04"},
		{"truncated varint", "0480"},
		{"overlong varint", "04ffffffffffffffffffff01"},
		{"no round coord", "040104"},
		{"coord too large", "0401048080c000"}, // coord = 1<<20
		{"trailing byte", "0403040100"},
		{"start without set", "01010100"},
		{"bad set form", "0101010002"},
		{"list longer than input", "010101000005"},
		{"list rank too large", "01010100000180808001"},
		{"bitmap longer than input", "010101000105ff"},
		{"decide short value", "030101000700"},
		{"report bad flag", "02010100" + "0000000000000000" + "0000" + "0000" + "07"},
		{"report truncated decision", "02010100" + "0000000000000000" + "0000" + "0000" + "01"},
	} {
		b, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatalf("%s: bad test hex: %v", tc.name, err)
		}
		if m, err := ParseMessage(b); err == nil {
			t.Errorf("%s: ParseMessage(%x) = %v, want an error", tc.name, b, m)
		}
	}
}

// TestParseMessageTruncations: every strict prefix of a valid message is
// rejected, and so is every message with a byte appended.
func TestParseMessageTruncations(t *testing.T) {
	for _, m := range sampleMessages {
		b := m.AppendBinary(nil)
		for i := range len(b) {
			if _, err := ParseMessage(b[:i]); err == nil {
				t.Errorf("%v: prefix of %d of %d bytes parsed", m, i, len(b))
			}
		}
		if _, err := ParseMessage(append(b, 0)); err == nil {
			t.Errorf("%v: trailing byte accepted", m)
		}
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(m.AppendBinary(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 255, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			return
		}
		// What parses re-encodes to something that parses to the same.
		m2, err := ParseMessage(m.AppendBinary(nil))
		if err != nil || !sameMessage(m, m2) {
			t.Fatalf("re-encoding %v gave %v, %v", m, m2, err)
		}
		// And feeding it to machines in any state must not panic.
		for _, a := range fuzzMachines() {
			a.Step(1, m)
			a.Step(0, m)
			a.Step(3, m)
			a.Ready()
			a.Advance()
		}
	})
}

// fuzzMachines returns machines of a 4-rank group in a few states: fresh,
// started, in a later round, decided.
func fuzzMachines() []*Agreement {
	fresh := New(2, 4)
	started := New(2, 4)
	started.Start(1, 5)
	later := New(1, 4)
	later.Start(1, 5)
	later.Failed(0) // rank 1 leads and runs round (1,1)
	decided := New(0, 4)
	for r := 1; r < 4; r++ {
		decided.Failed(r)
	}
	decided.Start(1, 5) // alone: decides at once
	return []*Agreement{fresh, started, later, decided}
}

// TestStepNonsense feeds well-formed but meaningless messages: wrong
// instances, ranks out of range, rounds that do not fit, sets naming ranks
// beyond the group. Nothing may panic, and a machine that got only nonsense
// must still decide normally afterwards.
func TestStepNonsense(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const n = 4
	rounds := []Round{{}, {1, 0}, {1, 3}, {2, 99}, {math.MaxUint64, 0}, {math.MaxUint64, n - 1}, {7, -1}}
	sets := []bitset{nil, setOf(0), setOf(1, 2, 3), setOf(5000), setOf(0, 1, 2, 3), newBitset(n)}
	insts := []uint64{0, 1, 2, 65, 1 << 40, math.MaxUint64}
	var msgs []Message
	for _, k := range []Kind{0, KindStart, KindReport, KindDecide, KindNudge, 17} {
		for range 40 {
			m := Message{Kind: k, Inst: insts[rng.Intn(len(insts))], Round: rounds[rng.Intn(len(rounds))],
				Value: rng.Uint64(), failed: sets[rng.Intn(len(sets))], covered: sets[rng.Intn(len(sets))]}
			if rng.Intn(2) == 0 {
				m.dec = &decision{tag: rounds[rng.Intn(len(rounds))], value: rng.Uint64(), failed: sets[rng.Intn(len(sets))]}
			}
			msgs = append(msgs, m)
		}
	}
	for _, a := range fuzzMachines() {
		for _, m := range msgs {
			for _, from := range []int{-1, 0, 1, 2, 3, n, 1 << 30} {
				a.Step(from, m)
			}
		}
		for _, r := range []int{-5, n, 1 << 30} {
			a.Failed(r)
		}
		a.Ready()
		a.Advance()
	}

	// Messages from self or out of range leave no trace.
	a := New(0, 1)
	a.Step(0, Message{Kind: KindStart, Inst: 5, Round: Round{1, 0}}) // from self: dropped
	a.Step(3, Message{Kind: KindDecide, Inst: 5})                    // out of range: dropped
	a.Start(5, 9)
	rd := a.Ready()
	if len(rd.Decided) != 1 || rd.Decided[0].Value != 9 || len(rd.Decided[0].Failed) != 0 {
		t.Fatalf("alone, rank 0 decided %+v, want value 9 and no failure", rd.Decided)
	}
}

func TestInstanceWindow(t *testing.T) {
	a := New(1, 3)
	a.Step(0, Message{Kind: KindNudge, Inst: instWindow, Round: Round{}})
	a.Step(0, Message{Kind: KindNudge, Inst: instWindow + 1, Round: Round{}})
	if _, ok := a.insts[instWindow]; !ok {
		t.Errorf("instance %d (inside the window) got no state", instWindow)
	}
	if _, ok := a.insts[instWindow+1]; ok {
		t.Errorf("instance %d (beyond the window) got state", instWindow+1)
	}
	a.Forget(10)
	a.Step(0, Message{Kind: KindNudge, Inst: 9, Round: Round{}})
	if _, ok := a.insts[9]; ok {
		t.Errorf("forgotten instance 9 got state again")
	}
	if !reflect.DeepEqual(a.order, []uint64{instWindow}) {
		t.Errorf("order = %v, want [%d]", a.order, instWindow)
	}
}
