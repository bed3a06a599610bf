package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/ftrma/ftrma/transport"
)

// The handshake proves, in both directions, knowledge of the connection's
// secret without sending it (HMAC-SHA256 challenge–response), and settles
// whether the connection is sealed (seal.go). The secret is the job secret
// (Config.Secret), or, with host keys (Config.HostKey, hostkey.go), the key
// of the two ranks' hosts; the dialer then sends its host's public key:
//
//	dialer   -> acceptor: magic[8] | from u32 | to u32 | nonceD[32] [| pubD[32], with host keys]
//	acceptor -> dialer:   nonceA[32] | HMAC(secret, "acceptor" mode | from | to | nonceD | nonceA)
//	dialer   -> acceptor: HMAC(secret, "dialer" mode | from | to | nonceA | nonceD)
//	acceptor -> dialer:   1 byte, 1 = accepted, 2 = not admitted yet (try again), 3 = fenced
//	                      (the acceptor counts the dialer failed: transport.ErrFenced), 0 = refused
//
// magic is "ftrmatc1" for a plain connection and "ftrmatc2" for a sealed
// one, as the dialer chose, and "ftrmatk1", "ftrmatk2" with host keys; mode
// is "" or " sealed" accordingly, followed by " keyed" with host keys, so
// that a relay that changes the magic fails both proofs. An acceptor
// refuses a hello of the other kind of key (job secret or host keys), and,
// with host keys, a pubD that is not the key in the address of rank from.
// An acceptor that wants its connections sealed refuses a plain one; one
// that does not accepts a sealed one. Once accepted, a sealed connection's
// frames go in records keyed by dataKeys.
//
// A connection that fails any step is closed and logged by the acceptor.
var (
	magic            = [8]byte{'f', 't', 'r', 'm', 'a', 't', 'c', '1'}
	magicSealed      = [8]byte{'f', 't', 'r', 'm', 'a', 't', 'c', '2'}
	magicKeyed       = [8]byte{'f', 't', 'r', 'm', 'a', 't', 'k', '1'}
	magicKeyedSealed = [8]byte{'f', 't', 'r', 'm', 'a', 't', 'k', '2'}
)

// errPlainRefused: a plain connection where this side seals.
var errPlainRefused = errors.New("tcp: a plain connection, but this rank seals its connections to other hosts")

// keys is the outcome of a sealed handshake: this side's sending and
// receiving keys (nil for a plain connection).
type keys struct{ send, recv []byte }

// modeString is the mode's part of the proofs.
func modeString(sealed, keyed bool) string {
	m := ""
	if sealed {
		m = " sealed"
	}
	if keyed {
		m += " keyed"
	}
	return m
}

// helloMagic is the magic of a hello.
func helloMagic(sealed, keyed bool) [8]byte {
	switch {
	case keyed && sealed:
		return magicKeyedSealed
	case keyed:
		return magicKeyed
	case sealed:
		return magicSealed
	}
	return magic
}

const (
	nonceLen         = 32
	macLen           = sha256.Size
	handshakeTimeout = 5 * time.Second
)

var errAuth = errors.New("tcp: authentication failed")

// errNotAdmitted refuses, for now, a proven rank that the acceptor has not
// admitted yet (transport.Admitter); the dialer retries.
var errNotAdmitted = errors.New("tcp: not admitted yet")

// errRefusedFenced refuses a proven rank that the acceptor has fenced out
// (it counts it failed); the dialer's error wraps transport.ErrFenced.
var errRefusedFenced = fmt.Errorf("tcp: %w", transport.ErrFenced)

// errHungUp is the dialer's error when the acceptor closed or reset the
// connection during the handshake, before accepting or refusing it: it is
// closing, or its process ended (an acceptor that refuses a hello closes
// too). A dialer that starts late (Config.Late)
// retries, as it does while the port refuses connections, until the peer
// is reported down (PeerDown: ftrun's exit notice) or its context ends.
var errHungUp = errors.New("tcp: peer hung up during the handshake")

func mac(secret []byte, role string, from, to uint32, n1, n2 []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(role))
	var ids [8]byte
	binary.BigEndian.PutUint32(ids[:], from)
	binary.BigEndian.PutUint32(ids[4:], to)
	h.Write(ids[:])
	h.Write(n1)
	h.Write(n2)
	return h.Sum(nil)
}

// hungUp is the error of a handshake with rank to whose connection failed
// with err (closed, reset) before a verdict: the acceptor is closing or its
// process ended.
func hungUp(err error, to uint32) error {
	return fmt.Errorf("%w: rank %d (%w)", errHungUp, to, err)
}

// dialHandshake runs the dialer's side on conn: rank from connecting to
// rank to, sealed or not, proving secret; pub is this rank's host public
// key with host keys (secret is then the pair key), else nil.
func dialHandshake(conn net.Conn, secret, pub []byte, from, to uint32, sealed bool) (keys, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	keyed := pub != nil
	hello := make([]byte, 8+4+4+nonceLen, 8+4+4+nonceLen+hostKeyLen)
	m := helloMagic(sealed, keyed)
	copy(hello, m[:])
	mode := modeString(sealed, keyed)
	binary.BigEndian.PutUint32(hello[8:], from)
	binary.BigEndian.PutUint32(hello[12:], to)
	nonceD := hello[16:]
	rand.Read(nonceD)
	hello = append(hello, pub...)
	if _, err := conn.Write(hello); err != nil {
		return keys{}, hungUp(err, to)
	}
	reply := make([]byte, nonceLen+macLen)
	if _, err := io.ReadFull(conn, reply); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return keys{}, fmt.Errorf("%w: %v", errAuth, err)
		}
		return keys{}, hungUp(err, to)
	}
	nonceA := reply[:nonceLen]
	if !hmac.Equal(reply[nonceLen:], mac(secret, "acceptor"+mode, from, to, nonceD, nonceA)) {
		return keys{}, fmt.Errorf("%w: peer does not know the connection's secret (the job secret, or its host's key)", errAuth)
	}
	if _, err := conn.Write(mac(secret, "dialer"+mode, from, to, nonceA, nonceD)); err != nil {
		return keys{}, hungUp(err, to)
	}
	var ok [1]byte
	switch _, err := io.ReadFull(conn, ok[:]); {
	case err == nil && ok[0] == 2:
		return keys{}, fmt.Errorf("%w by rank %d", errNotAdmitted, to)
	case err == nil && ok[0] == 3:
		return keys{}, fmt.Errorf("%w: by rank %d", errRefusedFenced, to)
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		return keys{}, hungUp(err, to)
	case err != nil || ok[0] != 1:
		return keys{}, fmt.Errorf("%w: refused by rank %d", errAuth, to)
	}
	if !sealed {
		return keys{}, nil
	}
	d, a, err := dataKeys(secret, from, to, nonceD, nonceA)
	return keys{send: d, recv: a}, err
}

// acceptHandshake runs the acceptor's side on conn for rank self, and returns
// the authenticated peer's rank and, for a sealed connection, the keys.
// secretFor gives the secret rank from must prove: the job secret (pub is
// then nil), or, with host keys, the pair key with the host whose public
// key pub the dialer sent, once it checked that pub is rank from's; it
// refuses a hello of the other kind. accept decides whether a proven peer
// may connect (it refuses duplicates and fenced ranks). With seal, a plain
// connection is refused.
func acceptHandshake(conn net.Conn, self uint32, size int, seal bool, secretFor func(from uint32, pub []byte) ([]byte, error), accept func(from uint32) error) (uint32, keys, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	hello := make([]byte, 8+4+4+nonceLen)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return 0, keys{}, fmt.Errorf("%w: short hello: %v", errAuth, err)
	}
	var sealed, keyed bool
	switch [8]byte(hello[:8]) {
	case magic:
	case magicSealed:
		sealed = true
	case magicKeyed:
		keyed = true
	case magicKeyedSealed:
		sealed, keyed = true, true
	default:
		return 0, keys{}, fmt.Errorf("%w: bad magic", errAuth)
	}
	mode := modeString(sealed, keyed)
	from, to := binary.BigEndian.Uint32(hello[8:]), binary.BigEndian.Uint32(hello[12:])
	if to != self || int(from) >= size || from == self {
		return 0, keys{}, fmt.Errorf("%w: hello names ranks %d->%d", errAuth, from, to)
	}
	var pub []byte
	if keyed {
		pub = make([]byte, hostKeyLen)
		if _, err := io.ReadFull(conn, pub); err != nil {
			return 0, keys{}, fmt.Errorf("%w: short hello: %v", errAuth, err)
		}
	}
	secret, err := secretFor(from, pub)
	if err != nil {
		return 0, keys{}, err
	}
	nonceD := hello[16:]
	reply := make([]byte, nonceLen, nonceLen+macLen)
	rand.Read(reply)
	nonceA := reply[:nonceLen]
	reply = append(reply, mac(secret, "acceptor"+mode, from, to, nonceD, nonceA)...)
	if _, err := conn.Write(reply); err != nil {
		return 0, keys{}, err
	}
	proof := make([]byte, macLen)
	if _, err := io.ReadFull(conn, proof); err != nil {
		return 0, keys{}, fmt.Errorf("%w: no proof: %v", errAuth, err)
	}
	if !hmac.Equal(proof, mac(secret, "dialer"+mode, from, to, nonceA, nonceD)) {
		return 0, keys{}, fmt.Errorf("%w: connection claiming rank %d does not know the connection's secret (the job secret, or its host's key)", errAuth, from)
	}
	err = accept(from)
	if err == nil && seal && !sealed {
		err = fmt.Errorf("rank %d: %w", from, errPlainRefused)
	}
	if err != nil {
		code := byte(0)
		switch {
		case errors.Is(err, errNotAdmitted):
			code = 2
		case errors.Is(err, errRefusedFenced):
			code = 3
		}
		conn.Write([]byte{code})
		return 0, keys{}, err
	}
	if _, err := conn.Write([]byte{1}); err != nil {
		return 0, keys{}, err
	}
	if !sealed {
		return from, keys{}, nil
	}
	d, a, err := dataKeys(secret, from, to, nonceD, nonceA)
	return from, keys{send: a, recv: d}, err
}
