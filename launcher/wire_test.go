package launcher

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	for _, payload := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("y"), 1000)} {
		if err := writeFrame(&b, msgPublish, payload); err != nil {
			t.Fatal(err)
		}
		typ, p, err := readFrame(&b, maxSmall)
		if err != nil || typ != msgPublish || !bytes.Equal(p, payload) {
			t.Fatalf("readFrame = %d, %q, %v; want %d, %q", typ, p, err, msgPublish, payload)
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
		{"zero length", []byte{0, 0, 0, 0}, errMalformed},
		{"too long", []byte{0, 1, 0, 0, 1}, errMalformed},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), errMalformed},
		{"truncated body", []byte{0, 0, 0, 5, 1, 2}, io.ErrUnexpectedEOF},
		{"header only", []byte{0, 0, 0, 5}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		_, _, err := readFrame(bytes.NewReader(tt.in), maxSmall)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: readFrame error %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	nonce := bytes.Repeat([]byte{7}, nonceSize)
	h, err := parseHello(hello{version: rvVersion, nonce: nonce}.append(nil))
	if err != nil || h.version != rvVersion || !bytes.Equal(h.nonce, nonce) {
		t.Fatalf("hello round trip: %+v, %v", h, err)
	}
	a := auth{version: rvVersion, rank: 5, nonce: nonce, proof: bytes.Repeat([]byte{9}, proofSize)}
	got, err := parseAuth(a.append(nil))
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("auth round trip: %+v, %v; want %+v", got, err, a)
	}
	addrs := []string{"127.0.0.1:1", "127.0.0.1:65535", strings.Repeat("h", maxAddr)}
	list, err := parseAddrs(appendAddrs(nil, addrs))
	if err != nil || !reflect.DeepEqual(list, addrs) {
		t.Fatalf("addrs round trip: %q, %v", list, err)
	}
	// Another version parses far enough to be named, and no further.
	h, err = parseHello(hello{version: 7}.append(nil))
	if err != nil || h.version != 7 {
		t.Fatalf("hello version 7: %+v, %v", h, err)
	}
}

func TestParseRejects(t *testing.T) {
	nonce := bytes.Repeat([]byte{7}, nonceSize)
	good := hello{version: rvVersion, nonce: nonce}.append(nil)
	if _, err := parseHello(good[:len(good)-1]); err == nil {
		t.Error("parseHello accepted a short nonce")
	}
	if _, err := parseHello(append([]byte("XXXX"), good[4:]...)); err == nil {
		t.Error("parseHello accepted a bad magic")
	}
	a := auth{version: rvVersion, rank: 1, nonce: nonce, proof: nonce}.append(nil)
	if _, err := parseAuth(a[:len(a)-1]); err == nil {
		t.Error("parseAuth accepted a short proof")
	}
	if _, err := parseAuth(append(a, 0)); err == nil {
		t.Error("parseAuth accepted a trailing byte")
	}
	for _, p := range [][]byte{
		{0, 0},
		{0, 0, 0, 1},                        // one entry, no bytes
		{0, 0, 0, 1, 0, 0, 'x'},             // empty address
		{0, 0, 0, 1, 0, 5, 'x'},             // address longer than the rest
		{0, 0, 0, 1, 0, 1, 'x', 'y'},        // trailing byte
		{0xff, 0xff, 0xff, 0xff, 0, 1, 'x'}, // absurd count
	} {
		if l, err := parseAddrs(p); err == nil {
			t.Errorf("parseAddrs(%v) = %q, want an error", p, l)
		}
	}
}

func TestProofsDiffer(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, secretSize)
	n1, n2 := bytes.Repeat([]byte{2}, nonceSize), bytes.Repeat([]byte{3}, nonceSize)
	base := proof(secret, labelRank, rvVersion, 1, n1, n2)
	for name, p := range map[string][]byte{
		"launcher label": proof(secret, labelLauncher, rvVersion, 1, n1, n2),
		"other rank":     proof(secret, labelRank, rvVersion, 2, n1, n2),
		"other version":  proof(secret, labelRank, rvVersion+1, 1, n1, n2),
		"swapped nonces": proof(secret, labelRank, rvVersion, 1, n2, n1),
		"other secret":   proof(bytes.Repeat([]byte{4}, secretSize), labelRank, rvVersion, 1, n1, n2),
	} {
		if bytes.Equal(p, base) {
			t.Errorf("proof with %s equals the base proof", name)
		}
	}
}

// FuzzParse feeds arbitrary bytes to every parser: none may panic, and an
// address list that parses re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	f.Add(hello{version: rvVersion, nonce: make([]byte, nonceSize)}.append(nil))
	f.Add(auth{version: rvVersion, rank: 3, nonce: make([]byte, nonceSize), proof: make([]byte, proofSize)}.append(nil))
	f.Add(appendAddrs(nil, []string{"a:1", "b:2"}))
	f.Add(appendFrame(nil, msgError, []byte("x")))
	f.Fuzz(func(t *testing.T, p []byte) {
		parseHello(p)
		parseAuth(p)
		printable(p)
		readFrame(bytes.NewReader(p), maxSmall)
		if l, err := parseAddrs(p); err == nil && !bytes.Equal(appendAddrs(nil, l), p) {
			t.Fatalf("parseAddrs(%v) = %q, which re-encodes differently", p, l)
		}
	})
}
