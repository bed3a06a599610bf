package tcp

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/ftrma/ftrma"
)

// Host keys (Config.HostKey). When the launcher gives each host's ranks a
// secret of their own, the connections are not proven with one job
// secret but with a key each pair of hosts shares and no other host can
// compute:
//
//	host key pair  X25519, private key HKDF-SHA256(HostKey, "ftrma tcp host x25519 v1")
//	address        Addr() is "IP:PORT#PUB", PUB the host's public key in hex
//	pair key       HKDF-SHA256(X25519(own private key, peer host's public key),
//	               info "ftrma tcp pair v1" | lower public key | higher public key)
//
// Two ranks on hosts A and B compute the same pair key (static
// Diffie-Hellman); a third host C computes only its own pairs. The
// handshake (handshake.go) then runs as with a job secret, keyed by the
// pair key, with the dialer's public key in its hello: the acceptor checks
// that it is the key in the address of the rank the dialer claims to be
// (from Connect, or Admit for a spare; it waits for that address, within
// the handshake's deadline, if the dialer was faster than its book). So a
// host that is broken into can pose as none of another host's ranks: it
// holds neither that host's private key nor a pair key of that host with
// anyone. What binds a rank to its host's key is the address the rank
// published, which the launcher's rendezvous accepts only from the ranks
// placed on that host (each host's ranks prove their host's secret there).

const hostKeyLen = 32

// hostIdentity is this rank's host key pair and the pair keys it made.
type hostIdentity struct {
	priv *ecdh.PrivateKey
	pub  []byte

	mu    sync.Mutex
	pairs map[string][]byte // by the peer host's public key
}

// newHostIdentity derives the host key pair from the host's secret.
func newHostIdentity(secret []byte) (*hostIdentity, error) {
	seed, err := hkdf.Key(sha256.New, secret, nil, "ftrma tcp host x25519 v1", hostKeyLen)
	if err != nil {
		return nil, err
	}
	priv, err := ecdh.X25519().NewPrivateKey(seed)
	if err != nil {
		return nil, err
	}
	return &hostIdentity{priv: priv, pub: priv.PublicKey().Bytes(), pairs: make(map[string][]byte)}, nil
}

// pairKey is the key this host shares with the host whose public key is
// peer.
func (h *hostIdentity) pairKey(peer []byte) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k, ok := h.pairs[string(peer)]; ok {
		return k, nil
	}
	pk, err := ecdh.X25519().NewPublicKey(peer)
	if err != nil {
		return nil, fmt.Errorf("%w: a host key of %d bytes", errAuth, len(peer))
	}
	shared, err := h.priv.ECDH(pk)
	if err != nil {
		return nil, fmt.Errorf("%w: host key: %v", errAuth, err)
	}
	lo, hi := h.pub, peer
	if bytes.Compare(lo, hi) > 0 {
		lo, hi = hi, lo
	}
	k, err := hkdf.Key(sha256.New, shared, nil, "ftrma tcp pair v1"+string(lo)+string(hi), 32)
	if err != nil {
		return nil, err
	}
	if len(h.pairs) < 1<<16 {
		h.pairs[string(peer)] = k
	}
	return k, nil
}

// withHostKey is addr with the host public key pub appended ("#PUB").
func withHostKey(addr string, pub []byte) string { return addr + "#" + hex.EncodeToString(pub) }

// splitHostKey splits an address of a transport with a host key into the
// network address and the public key; one without a key gives a nil key.
func splitHostKey(addr string) (string, []byte, error) {
	netAddr, k, ok := strings.Cut(addr, "#")
	if !ok {
		return addr, nil, nil
	}
	pub, err := hex.DecodeString(k)
	if err != nil || len(pub) != hostKeyLen {
		return "", nil, fmt.Errorf("tcp: address %q: the host key is not %d hex bytes: %w", addr, hostKeyLen, ftrma.ErrInvalid)
	}
	return netAddr, pub, nil
}
