package jobwire

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// FuzzHandshake: either side of the handshake reads whatever the other end
// of the connection sends. Given arbitrary bytes, neither panics nor waits
// for more than there is, and neither admits the peer: a proof cannot be
// forged without the secret, since each side proves over a nonce of its
// own.
func FuzzHandshake(f *testing.F) {
	secret := []byte("fuzz secret, 32 bytes long......")
	k := RendezvousHandshake
	var hello bytes.Buffer
	WriteFrame(&hello, MsgHello, Hello{Version: k.Version, Nonce: make([]byte, NonceSize)}.AppendAs(nil, k))
	var auth bytes.Buffer
	WriteFrame(&auth, MsgAuth, Auth{Version: k.Version, Rank: 3, Nonce: make([]byte, NonceSize), Proof: make([]byte, ProofSize)}.Append(nil))
	f.Add(hello.Bytes())
	f.Add(auth.Bytes())
	f.Add(AppendFrame(nil, MsgError, []byte("no")))
	f.Add(append(hello.Bytes(), AppendFrame(nil, MsgProof, make([]byte, ProofSize))...))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard}
		admitted := false
		if _, err := ServerHandshake(c, secret, k, func(uint32) error { admitted = true; return nil }); err == nil || admitted {
			t.Fatalf("the server admitted a client that sent %x (admit called: %v)", in, admitted)
		}
		c.Reader = bytes.NewReader(in)
		if err := ClientHandshake(c, secret, k, 1); err == nil {
			t.Fatalf("the client accepted a server that sent %x", in)
		}
		if typ, p, err := ReadFrame(bytes.NewReader(in), k.MaxFrameSize); err == nil {
			if err := ExpectFrom(typ, p, MsgHello, "hello", "launcher"); err != nil && typ == MsgError && !strings.Contains(err.Error(), "says") {
				t.Fatalf("an error frame read as %v", err)
			}
		}
		ParseLease(in)
		var a Addr
		if err := a.Check(0, 1); err == nil {
			t.Fatal("an empty address passed Check")
		}
		// in as the parts of a job of len(in)%7+1 ranks.
		size := len(in)%7 + 1
		parts := make([]string, size)
		for q := range parts {
			parts[q] = string(in[q*len(in)/size : (q+1)*len(in)/size])
		}
		if a, err := SplitAddr("c", parts); err == nil {
			if err := a.Check(0, size); err == nil {
				for q := range size {
					if a.For(q) != "c"+parts[q] {
						t.Fatalf("rank %d gets %q, want %q", q, a.For(q), "c"+parts[q])
					}
				}
			}
		}
	})
}
