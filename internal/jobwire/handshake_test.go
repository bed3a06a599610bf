package jobwire

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
)

// handshake runs both sides of the rendezvous handshake over a pipe.
func handshake(serverSecret, clientSecret []byte, id uint32, admit func(uint32) error) (uint32, error, error) {
	s, c := net.Pipe()
	defer s.Close()
	defer c.Close()
	type result struct {
		id  uint32
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := ServerHandshake(s, serverSecret, RendezvousHandshake, admit)
		s.Close() // the server hangs up after a failure; unblocks the client
		done <- result{got, err}
	}()
	cerr := ClientHandshake(c, clientSecret, RendezvousHandshake, id)
	c.Close()
	r := <-done
	return r.id, r.err, cerr
}

func TestHandshake(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, secretSize)
	if id, serr, cerr := handshake(secret, secret, 3, nil); serr != nil || cerr != nil || id != 3 {
		t.Fatalf("handshake: id %d, server %v, client %v", id, serr, cerr)
	}
	other := bytes.Repeat([]byte{2}, secretSize)
	_, serr, cerr := handshake(secret, other, 3, nil)
	if serr == nil || !strings.Contains(serr.Error(), "claims rank 3: authentication failed (wrong host secret)") {
		t.Errorf("server with a client of another secret: %v", serr)
	}
	if cerr == nil || !strings.Contains(cerr.Error(), "authentication failed") {
		t.Errorf("client with another secret: %v", cerr)
	}
	_, serr, cerr = handshake(secret, secret, 9, func(id uint32) error {
		return fmt.Errorf("rank %d refused", id)
	})
	if serr == nil || cerr == nil || !strings.Contains(cerr.Error(), "launcher says: rank 9 refused") {
		t.Errorf("refused client: server %v, client %v", serr, cerr)
	}
}
