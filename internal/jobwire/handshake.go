package jobwire

import (
	"crypto/hmac"
	"crypto/rand"
	"fmt"
	"io"
)

// HandshakeKind names one of the protocols that open with the mutual
// challenge/response of wire.go: hello (server), auth (client), proof
// (server). The rendezvous (server: the launcher, client: a rank) and the
// agent protocol (server: an agent, client: the launcher) differ only in these
// constants, so that a proof made for one is worthless in the other.
type HandshakeKind struct {
	Name         string // the protocol, for errors: "rendezvous"
	Magic        string // the hello's first four bytes
	Version      uint16
	Client       string // who the client is, for errors: "rank"
	Server       string // who the server is, for errors: "launcher"
	IDName       string // what the auth's id field means, or "" if it is unused
	SecretName   string // which secret the proofs are keyed by, for errors
	ClientLabel  string // HMAC label of the client's proof
	ServerLabel  string // HMAC label of the server's proof
	MaxFrameSize int    // largest handshake frame
}

// RendezvousHandshake is the handshake of the rendezvous: the launcher
// serves, a rank is the client and its id is its rank, and the proofs are
// keyed by the secret of the rank's host (HostSecret).
var RendezvousHandshake = HandshakeKind{
	Name: "rendezvous", Magic: RendezvousMagic, Version: RendezvousVersion,
	Client: "rank", Server: "launcher", IDName: "rank", SecretName: "host secret",
	ClientLabel: LabelRank, ServerLabel: LabelLauncher, MaxFrameSize: MaxSmallFrame,
}

// ServerHandshake runs the server's side of k's handshake on c: it sends a
// hello with a fresh nonce, checks the client's auth, lets admit refuse the
// client's id (admit's error text is sent to the client), and proves the
// secret in turn. It returns the client's id. On a protocol error it tells the
// peer why, except that an unauthenticated peer only learns that
// authentication failed.
func ServerHandshake(c io.ReadWriter, secret []byte, k HandshakeKind, admit func(id uint32) error) (uint32, error) {
	refuse := func(err error) (uint32, error) {
		WriteFrame(c, MsgError, ErrorText(err.Error()))
		return 0, err
	}
	nonce := make([]byte, NonceSize)
	rand.Read(nonce)
	if err := WriteFrame(c, MsgHello, Hello{Version: k.Version, Nonce: nonce}.AppendAs(nil, k)); err != nil {
		return 0, err
	}
	typ, p, err := ReadFrame(c, k.MaxFrameSize)
	if err != nil {
		return 0, err
	}
	switch typ {
	case MsgAuth:
	case MsgError:
		return 0, fmt.Errorf("peer gave up: %s", Printable(p))
	default:
		return refuse(fmt.Errorf("unexpected message type %d, want auth", typ))
	}
	a, err := ParseAuthAs(p, k.Version)
	if err != nil {
		return refuse(err)
	}
	if a.Version != k.Version {
		return refuse(fmt.Errorf("%s version %d not supported (%s speaks %d)", k.Name, a.Version, k.Server, k.Version))
	}
	if !hmac.Equal(Proof(secret, k.ClientLabel, k.Version, a.Rank, nonce, a.Nonce), a.Proof) {
		// Say no more than that to an unauthenticated peer.
		WriteFrame(c, MsgError, []byte("authentication failed"))
		claim := ""
		if k.IDName != "" {
			claim = fmt.Sprintf("claims %s %d: ", k.IDName, a.Rank)
		}
		return 0, fmt.Errorf("%sauthentication failed (wrong %s)", claim, k.SecretName)
	}
	if admit != nil {
		if err := admit(a.Rank); err != nil {
			return refuse(err)
		}
	}
	if err := WriteFrame(c, MsgProof, Proof(secret, k.ServerLabel, k.Version, a.Rank, nonce, a.Nonce)); err != nil {
		return 0, err
	}
	return a.Rank, nil
}

// ClientHandshake runs the client's side of k's handshake on c, as id: it
// answers the server's hello with its own nonce and proof and checks the
// server's proof.
func ClientHandshake(c io.ReadWriter, secret []byte, k HandshakeKind, id uint32) error {
	typ, p, err := ReadFrame(c, k.MaxFrameSize)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if err := ExpectFrom(typ, p, MsgHello, "hello", k.Server); err != nil {
		return err
	}
	h, err := ParseHelloAs(p, k)
	if err != nil {
		return err
	}
	if h.Version != k.Version {
		WriteFrame(c, MsgError, ErrorText(fmt.Sprintf("%s speaks %s version %d only", k.Client, k.Name, k.Version)))
		return fmt.Errorf("%s speaks %s version %d, this %s %d", k.Server, k.Name, h.Version, k.Client, k.Version)
	}
	nonce := make([]byte, NonceSize)
	rand.Read(nonce)
	a := Auth{Version: k.Version, Rank: id, Nonce: nonce, Proof: Proof(secret, k.ClientLabel, k.Version, id, h.Nonce, nonce)}
	if err := WriteFrame(c, MsgAuth, a.Append(nil)); err != nil {
		return fmt.Errorf("send auth: %w", err)
	}
	typ, p, err = ReadFrame(c, k.MaxFrameSize)
	if err != nil {
		return fmt.Errorf("read proof: %w", err)
	}
	if err := ExpectFrom(typ, p, MsgProof, "proof", k.Server); err != nil {
		return err
	}
	if !hmac.Equal(Proof(secret, k.ServerLabel, k.Version, id, h.Nonce, nonce), p) {
		WriteFrame(c, MsgError, []byte("authentication failed"))
		return fmt.Errorf("the %s failed to prove it knows the %s", k.Server, k.SecretName)
	}
	return nil
}

// ExpectFrom checks that a frame from peer has type want, turning an error
// frame into peer's error.
func ExpectFrom(typ byte, p []byte, want byte, name, peer string) error {
	switch typ {
	case want:
		return nil
	case MsgError:
		return fmt.Errorf("%s says: %s", peer, Printable(p))
	default:
		return fmt.Errorf("unexpected message type %d, want %s", typ, name)
	}
}
