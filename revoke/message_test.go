package revoke

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"
)

func TestMessageRoundTrip(t *testing.T) {
	prop := func(id string, payload, prefix []byte) bool {
		m := Message{ID: id, Payload: payload}
		enc := m.AppendBinary(bytes.Clone(prefix))
		if !bytes.HasPrefix(enc, prefix) {
			return false
		}
		got, err := ParseMessage(enc[len(prefix):])
		if err != nil || got.ID != id || !bytes.Equal(got.Payload, payload) {
			return false
		}
		// The result does not alias the input.
		clear(enc)
		return got.ID == id && bytes.Equal(got.Payload, payload)
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 1000}); err != nil {
		t.Fatal(err)
	}
	big := Message{ID: strings.Repeat("x", 300), Payload: bytes.Repeat([]byte{7}, 70000)}
	if got, err := ParseMessage(big.AppendBinary(nil)); err != nil || got.ID != big.ID || !bytes.Equal(got.Payload, big.Payload) {
		t.Fatalf("large message: %v", err)
	}
	if got, err := ParseMessage(Message{ID: "x", Payload: []byte{}}.AppendBinary(nil)); err != nil || got.Payload != nil {
		t.Fatalf("empty payload decodes as %#v, %v; want nil", got.Payload, err)
	}
	// A tree copy keeps its root; a flood copy says so.
	if got, err := ParseMessage(Message{ID: "x", tree: 1 + 300}.AppendBinary(nil)); err != nil || got.tree != 301 || got.Flood() {
		t.Fatalf("tree copy of root 300 decodes as %+v, %v", got, err)
	}
	if got, err := ParseMessage(Message{ID: "x"}.AppendBinary(nil)); err != nil || !got.Flood() {
		t.Fatalf("flood copy decodes as %+v, %v", got, err)
	}
}

func TestParseMessageRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"no payload length", []byte{1, 'a'}},
		{"ID beyond end", []byte{5, 'a', 'b'}},
		{"payload beyond end", []byte{1, 'a', 3, 1, 2}},
		{"no tree", []byte{1, 'a', 1, 9}},
		{"trailing bytes", []byte{1, 'a', 1, 9, 0, 0}},
		{"overlong tree", []byte{1, 'a', 0, 0x80, 0x00}},
		{"tree root beyond any rank", []byte{1, 'a', 0, 0x80, 0x80, 0x80, 0x80, 0x08}},
		{"overlong length", []byte{0x81, 0x00, 'a', 0}},
		{"overflowing length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
	} {
		if _, err := ParseMessage(c.b); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: ParseMessage(%x) = %v, want ErrBadMessage", c.name, c.b, err)
		}
	}
}

// TestParseMessageGarbage feeds random bytes and corrupted encodings to
// ParseMessage: it must never panic, and what it accepts must re-encode to
// its input.
func TestParseMessageGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50000 {
		var b []byte
		if rng.IntN(2) == 0 {
			b = make([]byte, rng.IntN(40))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
		} else {
			id := make([]byte, rng.IntN(10))
			payload := make([]byte, rng.IntN(10))
			b = Message{ID: string(id), Payload: payload}.AppendBinary(nil)
			for range 1 + rng.IntN(2) {
				b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
			}
		}
		checkParseMessage(t, b)
	}
}

func checkParseMessage(t *testing.T, b []byte) {
	m, err := ParseMessage(b)
	if err != nil {
		if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("ParseMessage(%x): %v does not wrap ErrBadMessage", b, err)
		}
		return
	}
	if enc := m.AppendBinary(nil); !bytes.Equal(enc, b) {
		t.Fatalf("ParseMessage(%x) = %+v, which encodes as %x", b, m, enc)
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add(Message{ID: "fail/3"}.AppendBinary(nil))
	f.Add(Message{ID: "revoke/ctx7", Payload: []byte{1, 2, 3}}.AppendBinary(nil))
	f.Add([]byte{})
	f.Fuzz(checkParseMessage)
}
