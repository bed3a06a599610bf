package jobwire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
)

// secretSize is the size of the job secrets ftrun makes.
const secretSize = 32

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	for _, payload := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("y"), 1000)} {
		if err := WriteFrame(&b, MsgPublish, payload); err != nil {
			t.Fatal(err)
		}
		typ, p, err := ReadFrame(&b, MaxSmallFrame)
		if err != nil || typ != MsgPublish || !bytes.Equal(p, payload) {
			t.Fatalf("ReadFrame = %d, %q, %v; want %d, %q", typ, p, err, MsgPublish, payload)
		}
	}
}

func TestReadFrameRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"short header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"zero length", []byte{0, 0, 0, 0}, ErrMalformed},
		{"too long", []byte{0, 1, 0, 0, 1}, ErrMalformed},
		{"too long, a size", []byte{0, 1, 0, 0, 1}, ErrTooLarge},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), ErrMalformed},
		{"truncated body", []byte{0, 0, 0, 5, 1, 2}, io.ErrUnexpectedEOF},
		{"header only", []byte{0, 0, 0, 5}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		_, _, err := ReadFrame(bytes.NewReader(tt.in), MaxSmallFrame)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: ReadFrame error %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	nonce := bytes.Repeat([]byte{7}, NonceSize)
	h, err := ParseHello(Hello{Version: RendezvousVersion, Nonce: nonce}.Append(nil))
	if err != nil || h.Version != RendezvousVersion || !bytes.Equal(h.Nonce, nonce) {
		t.Fatalf("hello round trip: %+v, %v", h, err)
	}
	a := Auth{Version: RendezvousVersion, Rank: 5, Nonce: nonce, Proof: bytes.Repeat([]byte{9}, ProofSize)}
	got, err := ParseAuth(a.Append(nil))
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("auth round trip: %+v, %v; want %+v", got, err, a)
	}
	addrs := []string{"127.0.0.1:1", "127.0.0.1:65535", strings.Repeat("h", MaxAddr)}
	whole := make([]Addr, len(addrs))
	for q, a := range addrs {
		whole[q] = WholeAddr(a)
	}
	list, err := ParseAddrs(AppendAddrs(nil, whole, 1))
	if err != nil || !reflect.DeepEqual(list, addrs) {
		t.Fatalf("addrs round trip: %q, %v", list, err)
	}
	// Another version parses far enough to be named, and no further.
	h, err = ParseHello(Hello{Version: 7}.Append(nil))
	if err != nil || h.Version != 7 {
		t.Fatalf("hello version 7: %+v, %v", h, err)
	}
}

func TestParseRejects(t *testing.T) {
	nonce := bytes.Repeat([]byte{7}, NonceSize)
	good := Hello{Version: RendezvousVersion, Nonce: nonce}.Append(nil)
	if _, err := ParseHello(good[:len(good)-1]); err == nil {
		t.Error("ParseHello accepted a short nonce")
	}
	if _, err := ParseHello(append([]byte("XXXX"), good[4:]...)); err == nil {
		t.Error("ParseHello accepted a bad magic")
	}
	a := Auth{Version: RendezvousVersion, Rank: 1, Nonce: nonce, Proof: nonce}.Append(nil)
	if _, err := ParseAuth(a[:len(a)-1]); err == nil {
		t.Error("ParseAuth accepted a short proof")
	}
	if _, err := ParseAuth(append(a, 0)); err == nil {
		t.Error("ParseAuth accepted a trailing byte")
	}
	for _, p := range [][]byte{
		{0, 0},
		{0, 0, 0, 1},                           // one entry, no bytes
		{0, 0, 0, 1, 0, 0, 'x', 0},             // empty address
		{0, 0, 0, 1, 0, 5, 'x', 0},             // address longer than the rest
		{0, 0, 0, 1, 0, 1, 'x', 0, 'y'},        // trailing byte
		{0, 0, 0, 1, 0, 1, 'x', 2, 'y'},        // part longer than the rest
		{0, 0, 0, 2, 0, 1, 'x', 0, 1, 'y', 0},  // a part missing
		{0xff, 0xff, 0xff, 0xff, 0, 1, 'x', 0}, // absurd count
		append([]byte{0, 0, 0, 1, 0, 1, 'x', MaxAddrPart + 1}, make([]byte, MaxAddrPart+1)...), // part too long
	} {
		if l, err := ParseAddrs(p); err == nil {
			t.Errorf("ParseAddrs(%v) = %q, want an error", p, l)
		}
	}
}

func TestProofsDiffer(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, secretSize)
	n1, n2 := bytes.Repeat([]byte{2}, NonceSize), bytes.Repeat([]byte{3}, NonceSize)
	base := Proof(secret, LabelRank, RendezvousVersion, 1, n1, n2)
	for name, p := range map[string][]byte{
		"launcher label": Proof(secret, LabelLauncher, RendezvousVersion, 1, n1, n2),
		"other rank":     Proof(secret, LabelRank, RendezvousVersion, 2, n1, n2),
		"other version":  Proof(secret, LabelRank, RendezvousVersion+1, 1, n1, n2),
		"swapped nonces": Proof(secret, LabelRank, RendezvousVersion, 1, n2, n1),
		"other secret":   Proof(bytes.Repeat([]byte{4}, secretSize), LabelRank, RendezvousVersion, 1, n1, n2),
	} {
		if bytes.Equal(p, base) {
			t.Errorf("proof with %s equals the base proof", name)
		}
	}
}

// FuzzParse feeds arbitrary bytes to every parser: none may panic, and a
// publish or an address list that parses re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	f.Add(Hello{Version: RendezvousVersion, Nonce: make([]byte, NonceSize)}.Append(nil))
	f.Add(Auth{Version: RendezvousVersion, Rank: 3, Nonce: make([]byte, NonceSize), Proof: make([]byte, ProofSize)}.Append(nil))
	f.Add(AppendAddrs(nil, []Addr{WholeAddr("a:1"), {Common: "b/", Width: 1, Parts: "xy"}}, 1))
	f.Add(Addr{Common: "b/", Width: 2, Parts: "xxyy"}.Append(nil))
	f.Add(AppendFrame(nil, MsgError, []byte("x")))
	f.Add(SpawnRequest{ID: 1, K: 2, Payload: []byte("p"), Near: []ftrma.Rank{1, 0}}.Append(nil))
	f.Fuzz(func(t *testing.T, p []byte) {
		ParseHello(p)
		ParseAuth(p)
		Printable(p)
		ParseSpawned(p, 4)
		ParseAdmit(p, 4)
		if q, err := ParseSpawn(p, 4); err == nil && !bytes.Equal(q.Append(nil), p) {
			t.Fatalf("ParseSpawn(%v) = %+v, which re-encodes differently", p, q)
		}
		ReadFrame(bytes.NewReader(p), MaxSmallFrame)
		if a, err := ParsePublish(p, 1, 2); err == nil && !bytes.Equal(a.Append(nil), p) {
			t.Fatalf("ParsePublish(%v) = %+v, which re-encodes differently", p, a)
		}
		if commons, parts, err := parseAddrs(p); err == nil {
			// One rank's parts as a job of one rank's addresses.
			addrs := make([]Addr, len(commons))
			for q := range addrs {
				addrs[q] = Addr{Common: string(commons[q]), Width: len(parts[q]), Parts: string(parts[q])}
			}
			if !bytes.Equal(AppendAddrs(nil, addrs, 0), p) {
				t.Fatalf("parseAddrs(%v) = %q, %q, which re-encodes differently", p, commons, parts)
			}
			if l, err := ParseAddrs(p); err != nil || len(l) != len(commons) {
				t.Fatalf("ParseAddrs(%v) = %q, %v after parseAddrs succeeded", p, l, err)
			}
		}
	})
}

// FuzzParseRanks: rank payloads come from the ranks and from the launcher.
// ParseRank and ParseRanks never panic, accept only ranks below the size,
// and what ParseRanks accepts encodes back to the same bytes.
func FuzzParseRanks(f *testing.F) {
	f.Add(RankPayload(3), 8)
	f.Add(AppendRanks(nil, []ftrma.Rank{0, 5, 2}), 8)
	f.Add([]byte{0, 0, 0, 1}, 1)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		size = max(1, size%(1<<20))
		if r, err := ParseRank(b, size); err == nil && (r < 0 || int(r) >= size) {
			t.Fatalf("ParseRank(% x, %d) = %d", b, size, r)
		}
		rs, err := ParseRanks(b, size)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r < 0 || int(r) >= size {
				t.Fatalf("ParseRanks(% x, %d) has rank %d", b, size, r)
			}
		}
		if again := AppendRanks(nil, rs); !bytes.Equal(again, b) {
			t.Fatalf("ParseRanks(% x) = %v, which encodes to % x", b, rs, again)
		}
	})
}
