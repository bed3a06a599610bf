package launcher

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ftrma/ftrma"
)

// The rendezvous wire format, version 1.
//
// Every message is one frame:
//
//	length   uint32, big endian: the number of bytes that follow (1 + payload)
//	type     uint8 (values below; append-only)
//	payload  length-1 bytes
//
// A conversation, L the launcher and R a rank:
//
//	L→R  hello    "FTRV", version uint16, launcher nonce [32]
//	R→L  auth     version uint16, rank uint32, rank nonce [32], rank proof [32]
//	L→R  proof    launcher proof [32]
//	R→L  publish  the rank's transport address, 1..maxAddr bytes
//	L→R  addrs    count uint32, then count × (length uint16, address); sent once
//	              every rank of the job has published
//	any  error    UTF-8 text, at most maxErrorText bytes; its sender closes the
//	              connection after it
//
// and afterwards, on the supervision channel:
//
//	L→R  exit     rank uint32: that rank's process is gone (sent at once when
//	              the launcher reaps it)
//	R→L  suspect  rank uint32: this rank's failure detector declared that rank
//	              failed; the launcher kills it if it still runs (a false
//	              suspicion must not leave a live process behind)
//	R→L  connected  empty: this rank's transport is connected to every peer
//	              (sent by transports whose peers must not send before that,
//	              verbs: a queue pair drops what arrives before it is ready)
//	L→R  start    empty: every rank sent connected or is gone; sent once
//	R→L  leaving  empty: this rank finishes on purpose; if it then exits with
//	              status 0, its exit is no failure and the others are not told
//
// with, for both proofs, HMAC-SHA256 keyed by the job secret over
//
//	label || version uint16 || rank uint32 || launcher nonce || rank nonce
//
// where label is "ftrma rendezvous rank\x00" for the rank's proof and
// "ftrma rendezvous launcher\x00" for the launcher's, so that neither proof can
// be replayed as the other. Fresh nonces on both sides keep a recorded proof
// from being replayed on a later connection. After addrs the connection stays
// open for the rank's lifetime (the supervision channel).
//
// All integers are big endian. A malformed frame ends the conversation with an
// error; it never panics.
const (
	rvMagic   = "FTRV"
	rvVersion = 1

	nonceSize = 32
	proofSize = sha256.Size

	maxAddr      = 16 << 10 // longest transport address, bytes (verbs: a queue pair number per rank)
	maxErrorText = 1024     // longest error text, bytes
	maxSmall     = 4 << 10  // largest frame other than addrs
	maxAddrs     = 64 << 20
)

// Message types. Append-only: never renumber.
const (
	msgHello   byte = 1
	msgAuth    byte = 2
	msgProof   byte = 3
	msgPublish byte = 4
	msgAddrs   byte = 5
	msgError   byte = 6
	msgExit    byte = 7 // L→R: rank uint32 — that rank's process is gone
	msgSuspect byte = 8 // R→L: rank uint32 — this rank declared that rank failed
	msgLeaving byte = 9 // R→L: empty — this rank is leaving the job on purpose
	// 10..14 are the agent protocol's (agentwire.go).
	msgConnected byte = 15 // R→L: empty — this rank's transport is connected to every peer
	msgStart     byte = 16 // L→R: empty — every rank is connected (or gone)
)

const (
	labelRank     = "ftrma rendezvous rank\x00"
	labelLauncher = "ftrma rendezvous launcher\x00"
)

var errMalformed = errors.New("malformed rendezvous message")

// rankPayload encodes a rank for the exit and suspect messages.
func rankPayload(r ftrma.Rank) []byte { return binary.BigEndian.AppendUint32(nil, uint32(r)) }

// parseRank decodes a rank payload of a job of size ranks.
func parseRank(p []byte, size int) (ftrma.Rank, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: rank payload of %d bytes", errMalformed, len(p))
	}
	r := binary.BigEndian.Uint32(p)
	if uint64(r) >= uint64(size) {
		return 0, fmt.Errorf("%w: rank %d of %d", errMalformed, r, size)
	}
	return ftrma.Rank(r), nil
}

// appendFrame appends a frame of type typ carrying payload to b.
func appendFrame(b []byte, typ byte, payload []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(1+len(payload)))
	b = append(b, typ)
	return append(b, payload...)
}

// writeFrame writes one frame.
func writeFrame(w io.Writer, typ byte, payload []byte) error {
	_, err := w.Write(appendFrame(make([]byte, 0, 5+len(payload)), typ, payload))
	return err
}

// readFrame reads one frame of at most max bytes after the length.
func readFrame(r io.Reader, max int) (typ byte, payload []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 || uint64(n) > uint64(max) {
		return 0, nil, fmt.Errorf("%w: frame length %d not in [1, %d]", errMalformed, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// proof computes a rank's or the launcher's proof (label says which).
func proof(secret []byte, label string, version uint16, rank uint32, launcherNonce, rankNonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	var b [6]byte
	binary.BigEndian.PutUint16(b[:2], version)
	binary.BigEndian.PutUint32(b[2:], rank)
	m.Write(b[:])
	m.Write(launcherNonce)
	m.Write(rankNonce)
	return m.Sum(nil)
}

// hello is the launcher's first message.
type hello struct {
	version uint16
	nonce   []byte
}

func (h hello) append(b []byte) []byte { return h.appendAs(b, rvHandshake) }

// appendAs encodes h as the hello of protocol k.
func (h hello) appendAs(b []byte, k handshakeKind) []byte {
	b = append(b, k.magic...)
	b = binary.BigEndian.AppendUint16(b, h.version)
	return append(b, h.nonce...)
}

// parseHello accepts any version, so that the rank can say which one it does
// not speak; the rest must be exactly a version-1 hello.
func parseHello(p []byte) (hello, error) { return parseHelloAs(p, rvHandshake) }

// parseHelloAs parses the hello of protocol k (see parseHello).
func parseHelloAs(p []byte, k handshakeKind) (hello, error) {
	if len(p) < len(k.magic)+2 || string(p[:len(k.magic)]) != k.magic {
		return hello{}, fmt.Errorf("%w: not a %s hello", errMalformed, k.name)
	}
	h := hello{version: binary.BigEndian.Uint16(p[len(k.magic):])}
	if h.version != k.version {
		return h, nil
	}
	rest := p[len(k.magic)+2:]
	if len(rest) != nonceSize {
		return hello{}, fmt.Errorf("%w: hello of %d bytes", errMalformed, len(p))
	}
	h.nonce = rest
	return h, nil
}

// auth is the rank's answer to hello.
type auth struct {
	version uint16
	rank    uint32
	nonce   []byte
	proof   []byte
}

func (a auth) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, a.version)
	b = binary.BigEndian.AppendUint32(b, a.rank)
	b = append(b, a.nonce...)
	return append(b, a.proof...)
}

// parseAuth parses an auth; a version other than rvVersion is returned with
// the other fields unset.
func parseAuth(p []byte) (auth, error) { return parseAuthAs(p, rvVersion) }

// parseAuthAs parses an auth of a protocol at version (see parseAuth).
func parseAuthAs(p []byte, version uint16) (auth, error) {
	if len(p) < 2 {
		return auth{}, fmt.Errorf("%w: auth of %d bytes", errMalformed, len(p))
	}
	a := auth{version: binary.BigEndian.Uint16(p)}
	if a.version != version {
		return a, nil
	}
	if len(p) != 2+4+nonceSize+proofSize {
		return auth{}, fmt.Errorf("%w: auth of %d bytes", errMalformed, len(p))
	}
	a.rank = binary.BigEndian.Uint32(p[2:])
	a.nonce = p[6 : 6+nonceSize]
	a.proof = p[6+nonceSize:]
	return a, nil
}

// appendAddrs encodes the address list.
func appendAddrs(b []byte, addrs []string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(addrs)))
	for _, a := range addrs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(a)))
		b = append(b, a...)
	}
	return b
}

// parseAddrs decodes an address list; every address must be 1..maxAddr bytes.
func parseAddrs(p []byte) ([]string, error) {
	if len(p) < 4 {
		return nil, fmt.Errorf("%w: short address list", errMalformed)
	}
	n := binary.BigEndian.Uint32(p)
	p = p[4:]
	if uint64(n) > uint64(len(p))/3 { // each entry takes at least 3 bytes
		return nil, fmt.Errorf("%w: address list claims %d entries in %d bytes", errMalformed, n, len(p))
	}
	addrs := make([]string, n)
	for i := range addrs {
		if len(p) < 2 {
			return nil, fmt.Errorf("%w: truncated address list", errMalformed)
		}
		l := int(binary.BigEndian.Uint16(p))
		p = p[2:]
		if l < 1 || l > maxAddr || l > len(p) {
			return nil, fmt.Errorf("%w: address %d of %d bytes", errMalformed, i, l)
		}
		addrs[i] = string(p[:l])
		p = p[l:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after address list", errMalformed, len(p))
	}
	return addrs, nil
}

// errorText bounds an error message for an error frame.
func errorText(msg string) []byte {
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText]
	}
	return []byte(msg)
}

// printable makes text from the network safe to log: control bytes become '?'
// and the length is bounded.
func printable(p []byte) string {
	if len(p) > maxErrorText {
		p = p[:maxErrorText]
	}
	b := make([]byte, len(p))
	for i, c := range p {
		if c < 0x20 || c == 0x7f {
			c = '?'
		}
		b[i] = c
	}
	return string(b)
}
