package launcher

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
)

// handshakeKind names one of the protocols that open with the mutual
// challenge/response of wire.go: hello (server), auth (client), proof
// (server). The rendezvous (server: the launcher, client: a rank) and the
// agent protocol (server: an agent, client: the launcher) differ only in these
// constants, so that a proof made for one is worthless in the other.
type handshakeKind struct {
	name         string // the protocol, for errors: "rendezvous"
	magic        string // the hello's first four bytes
	version      uint16
	client       string // who the client is, for errors: "rank"
	server       string // who the server is, for errors: "launcher"
	idName       string // what the auth's id field means, or "" if it is unused
	secretName   string // which secret the proofs are keyed by, for errors
	clientLabel  string // HMAC label of the client's proof
	serverLabel  string // HMAC label of the server's proof
	maxFrameSize int    // largest handshake frame
}

var rvHandshake = handshakeKind{
	name: "rendezvous", magic: rvMagic, version: rvVersion,
	client: "rank", server: "launcher", idName: "rank", secretName: "job secret",
	clientLabel: labelRank, serverLabel: labelLauncher, maxFrameSize: maxSmall,
}

// serverHandshake runs the server's side of k's handshake on c: it sends a
// hello with a fresh nonce, checks the client's auth, lets admit refuse the
// client's id (admit's error text is sent to the client), and proves the
// secret in turn. It returns the client's id. On a protocol error it tells the
// peer why, except that an unauthenticated peer only learns that
// authentication failed.
func serverHandshake(c io.ReadWriter, secret []byte, k handshakeKind, admit func(id uint32) error) (uint32, error) {
	refuse := func(err error) (uint32, error) {
		writeFrame(c, msgError, errorText(err.Error()))
		return 0, err
	}
	nonce := make([]byte, nonceSize)
	rand.Read(nonce)
	if err := writeFrame(c, msgHello, hello{version: k.version, nonce: nonce}.appendAs(nil, k)); err != nil {
		return 0, err
	}
	typ, p, err := readFrame(c, k.maxFrameSize)
	if err != nil {
		return 0, err
	}
	switch typ {
	case msgAuth:
	case msgError:
		return 0, fmt.Errorf("peer gave up: %s", printable(p))
	default:
		return refuse(fmt.Errorf("unexpected message type %d, want auth", typ))
	}
	a, err := parseAuthAs(p, k.version)
	if err != nil {
		return refuse(err)
	}
	if a.version != k.version {
		return refuse(fmt.Errorf("%s version %d not supported (%s speaks %d)", k.name, a.version, k.server, k.version))
	}
	if !hmac.Equal(proof(secret, k.clientLabel, k.version, a.rank, nonce, a.nonce), a.proof) {
		// Say no more than that to an unauthenticated peer.
		writeFrame(c, msgError, []byte("authentication failed"))
		claim := ""
		if k.idName != "" {
			claim = fmt.Sprintf("claims %s %d: ", k.idName, a.rank)
		}
		return 0, fmt.Errorf("%sauthentication failed (wrong %s)", claim, k.secretName)
	}
	if admit != nil {
		if err := admit(a.rank); err != nil {
			return refuse(err)
		}
	}
	if err := writeFrame(c, msgProof, proof(secret, k.serverLabel, k.version, a.rank, nonce, a.nonce)); err != nil {
		return 0, err
	}
	return a.rank, nil
}

// clientHandshake runs the client's side of k's handshake on c, as id: it
// answers the server's hello with its own nonce and proof and checks the
// server's proof.
func clientHandshake(c io.ReadWriter, secret []byte, k handshakeKind, id uint32) error {
	typ, p, err := readFrame(c, k.maxFrameSize)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if err := expectFrom(typ, p, msgHello, "hello", k.server); err != nil {
		return err
	}
	h, err := parseHelloAs(p, k)
	if err != nil {
		return err
	}
	if h.version != k.version {
		writeFrame(c, msgError, errorText(fmt.Sprintf("%s speaks %s version %d only", k.client, k.name, k.version)))
		return fmt.Errorf("%s speaks %s version %d, this %s %d", k.server, k.name, h.version, k.client, k.version)
	}
	nonce := make([]byte, nonceSize)
	rand.Read(nonce)
	a := auth{version: k.version, rank: id, nonce: nonce, proof: proof(secret, k.clientLabel, k.version, id, h.nonce, nonce)}
	if err := writeFrame(c, msgAuth, a.append(nil)); err != nil {
		return fmt.Errorf("send auth: %w", err)
	}
	typ, p, err = readFrame(c, k.maxFrameSize)
	if err != nil {
		return fmt.Errorf("read proof: %w", err)
	}
	if err := expectFrom(typ, p, msgProof, "proof", k.server); err != nil {
		return err
	}
	if !hmac.Equal(proof(secret, k.serverLabel, k.version, id, h.nonce, nonce), p) {
		writeFrame(c, msgError, []byte("authentication failed"))
		return fmt.Errorf("the %s failed to prove it knows the %s", k.server, k.secretName)
	}
	return nil
}

// expectFrom checks that a frame from peer has type want, turning an error
// frame into peer's error.
func expectFrom(typ byte, p []byte, want byte, name, peer string) error {
	switch typ {
	case want:
		return nil
	case msgError:
		return fmt.Errorf("%s says: %s", peer, printable(p))
	default:
		return fmt.Errorf("unexpected message type %d, want %s", typ, name)
	}
}

var errAgentSecret = errors.New(EnvAgentSecret + " unset or empty: the launcher and every agent need the same agent secret")
