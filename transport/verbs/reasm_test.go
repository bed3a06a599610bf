package verbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// Message types of the tests (the transport's are in verbs.go, built only
// with the verbs tag).
const typA, typB, typC = 1, 2, 4

// frags cuts msg of type typ into fragments of at most n payload bytes, as
// sendLocked does.
func frags(typ byte, msg []byte, n int) [][]byte {
	var out [][]byte
	for done := 0; ; {
		k := min(len(msg)-done, n)
		f := make([]byte, fragHeader+k)
		f[0] = typ
		if done+k == len(msg) {
			f[1] = 1
		}
		binary.LittleEndian.PutUint16(f[2:], uint16(k))
		copy(f[fragHeader:], msg[done:done+k])
		out = append(out, f)
		done += k
		if done == len(msg) {
			return out
		}
	}
}

// feed adds fs in order and returns the messages that came out.
func feed(t *testing.T, a *reassembly, fs [][]byte) (msgs [][]byte, typs []byte) {
	t.Helper()
	for _, f := range fs {
		typ, msg, ok, err := a.add(f)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			msgs = append(msgs, append([]byte(nil), msg...))
			typs = append(typs, typ)
		}
	}
	return msgs, typs
}

func TestReassemblyRoundTrip(t *testing.T) {
	a := reassembly{max: 1000}
	big := bytes.Repeat([]byte("abcdefg"), 100) // 700 bytes, 7 pieces of 100
	var all [][]byte
	all = append(all, frags(typB, []byte{1, 2, 3, 4}, 100)...)
	all = append(all, frags(typA, big, 100)...)
	all = append(all, frags(typA, nil, 100)...)
	msgs, typs := feed(t, &a, all)
	if len(msgs) != 3 || typs[0] != typB || typs[1] != typA || typs[2] != typA {
		t.Fatalf("got %d messages of types %v", len(msgs), typs)
	}
	if !bytes.Equal(msgs[0], []byte{1, 2, 3, 4}) || !bytes.Equal(msgs[1], big) || len(msgs[2]) != 0 {
		t.Fatal("messages differ from those sent")
	}
	if a.pending() != 0 {
		t.Fatalf("%d bytes held after whole messages", a.pending())
	}
}

// A peer that goes down with a message half sent leaves nothing held, and
// later pieces of messages in pieces are not kept.
func TestReassemblyDropFreesPartial(t *testing.T) {
	a := reassembly{max: 1000}
	fs := frags(typA, make([]byte, 500), 100)
	feed(t, &a, fs[:3])
	if a.pending() != 300 {
		t.Fatalf("%d bytes held, want 300", a.pending())
	}
	a.drop()
	if a.pending() != 0 {
		t.Fatalf("%d bytes held after drop", a.pending())
	}
	msgs, _ := feed(t, &a, fs[3:])
	if len(msgs) != 0 || a.pending() != 0 {
		t.Fatalf("after drop: %d messages, %d bytes held", len(msgs), a.pending())
	}
	msgs, _ = feed(t, &a, frags(typA, make([]byte, 500), 100))
	if len(msgs) != 0 || a.pending() != 0 {
		t.Fatalf("a new message in pieces after drop: %d messages, %d bytes held", len(msgs), a.pending())
	}
	// A whole message of one fragment still comes out (as it did before
	// drop existed: the peer sent it before it went down).
	if msgs, _ = feed(t, &a, frags(typC, nil, 100)); len(msgs) != 1 {
		t.Fatalf("a one-fragment message after drop: %d messages", len(msgs))
	}
}

// A peer can make the receiver hold at most max bytes: a message that
// grows past it breaks the stream with an error, and nothing stays held.
func TestReassemblyBounded(t *testing.T) {
	a := reassembly{max: 1000}
	fs := frags(typA, make([]byte, 5000), 100)
	var err error
	i := 0
	for ; i < len(fs) && err == nil; i++ {
		_, _, _, err = a.add(fs[i])
		if a.pending() > a.max {
			t.Fatalf("%d bytes held, max %d", a.pending(), a.max)
		}
	}
	if !errors.Is(err, errFragment) || i != 11 {
		t.Fatalf("after %d fragments: %v, want errFragment at the 11th", i, err)
	}
	if a.pending() != 0 {
		t.Fatalf("%d bytes held after the broken message", a.pending())
	}
	// Exactly max is fine.
	msgs, _ := feed(t, &a, frags(typA, make([]byte, 1000), 100))
	if len(msgs) != 1 || len(msgs[0]) != 1000 {
		t.Fatal("a message of max bytes did not come out whole")
	}
}

func TestReassemblyBadFragments(t *testing.T) {
	a := reassembly{max: 1000}
	feed(t, &a, frags(typA, make([]byte, 500), 100)[:2])
	for _, f := range [][]byte{
		{1, 0},              // shorter than the header
		{1, 1, 10, 0, 1, 2}, // says 10 bytes, has 2
	} {
		if _, _, ok, err := a.add(f); ok || !errors.Is(err, errFragment) {
			t.Fatalf("fragment %v: ok %v, %v", f, ok, err)
		}
		if a.pending() != 0 {
			t.Fatalf("fragment %v: %d bytes held", f, a.pending())
		}
	}
}

func FuzzReassembly(f *testing.F) {
	for _, fr := range frags(typA, make([]byte, 300), 100) {
		f.Add(fr)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a := reassembly{max: 256}
		for i := 0; i < 4; i++ { // the same fragment, again and again
			_, msg, ok, _ := a.add(b)
			if a.pending() > a.max || len(msg) > a.max || (!ok && msg != nil) {
				t.Fatalf("held %d, message %d bytes, ok %v", a.pending(), len(msg), ok)
			}
		}
	})
}
