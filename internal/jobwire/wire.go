package jobwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/seclink"
)

// The rendezvous wire format, version 4.
//
// A rank holds the secret of its host (FTRMA_SECRET: HostSecret of the
// job's ranks secret and the host's index, FTRMA_HOST_INDEX), never the
// job's. It dials the launcher's rendezvous (FTRMA_RENDEZVOUS), sends
//
//	R→L  host     host uint32: the index of the host whose secret it holds
//
// in a frame before anything else, and both run TLS keyed by RendezvousKey
// of that host's secret (internal/seclink; DialRendezvous,
// AcceptRendezvous). The launcher accepts a rank only from the host it
// placed the rank on, so the ranks of one host cannot speak for another's.
// Inside TLS, every message is one frame:
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
//	R→L  publish  the rank's transport address (Addr): common length uint16,
//	              common part (1..MaxAddr bytes), part width uint8
//	              (0..MaxAddrPart), then size × width bytes: the part for
//	              each rank, in rank order (none with width 0: the address
//	              is the same for every rank); a frame of at most
//	              MaxPublish(size) bytes
//	L→R  addrs    count uint32, count × (length uint16, common part), then
//	              count × (length uint8, part): for each rank q, q's common
//	              part and the part q published for this rank; sent once
//	              every rank of the job has published. Rank q's address, as
//	              this rank gets it, is its common part followed by its part.
//	              The first half is the same for every rank; a rank
//	              downloads O(size) bytes however its peers' addresses grow
//	              with the size (verbs: a queue pair number per peer).
//	              A rank that is not live (a spare not yet started, or,
//	              in a spare's list, a rank that failed) has an empty
//	              common part and no part: see spawn.go
//	any  error    UTF-8 text, at most MaxErrorText bytes; its sender closes the
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
//	R→L  spawn    start spare ranks; L→R spawned (the answer), admit (a
//	              spare joined), roster (to a spare): see spawn.go
//
// with, for both proofs, HMAC-SHA256 keyed by the host's secret over
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
// error; it never panics. A size over a limit below is an error that names
// the limit, the size and the rank (LimitError), sent to the peer as well:
// a rank checks its address before it publishes and tells the launcher why
// it gives up; the launcher, finding a publish frame too long, answers with
// the error and reads the frame away before it closes, so that the rank reads
// the answer rather than a connection reset.
//
// Version 3 keyed every rank with one secret of the whole job: the ranks of
// one host that was broken into could pose as any rank.
//
// Version 1 published every address whole and sent every rank the list of
// them whole: O(size²) bytes per rank with verbs, which broke the limits
// beyond about 570 ranks. Version 2's spawn request had no near list
// (spawn.go): a spare's host could not follow the rank it replaces.
const (
	RendezvousMagic   = "FTRV"
	RendezvousVersion = 4

	NonceSize = 32
	ProofSize = sha256.Size

	MaxAddr       = 16 << 10 // longest common part of an address (a whole address), bytes
	MaxAddrPart   = 32       // longest part of an address for one rank (verbs: a queue pair number), bytes
	MaxErrorText  = 1024     // longest error text, bytes
	MaxSmallFrame = 4 << 10  // largest frame other than publish (MaxPublish) and addrs
	MaxAddrsFrame = 64 << 20 // largest addrs frame
)

// Message types. Append-only: never renumber. The agent protocol of
// launcher/agentwire.go (ftrun and its agents) frames its messages the same
// way and takes its types from the same numbering.
const (
	MsgHello   byte = 1
	MsgAuth    byte = 2
	MsgProof   byte = 3
	MsgPublish byte = 4
	MsgAddrs   byte = 5
	MsgError   byte = 6
	MsgExit    byte = 7 // L→R: rank uint32 — that rank's process is gone
	MsgSuspect byte = 8 // R→L: rank uint32 — this rank declared that rank failed
	MsgLeaving byte = 9 // R→L: empty — this rank is leaving the job on purpose
	// 10..14 are the agent protocol's (launcher/agentwire.go).
	MsgConnected byte = 15 // R→L: empty — this rank's transport is connected to every peer
	MsgStart     byte = 16 // L→R: empty — every rank is connected (or gone)
	// 17..20 are the agent protocol's (launcher/agentwire.go,
	// launcher/membership.go).
	MsgLeaseAsk   byte = 21 // R→L: seq uint64 — renew this rank's lease (see LeaseTerm)
	MsgLeaseGrant byte = 22 // L→R: seq uint64 — the lease asked for with seq is renewed; under ftrun --arbiter GrantPayload (seq and term: supervisor.go)
	MsgProbe      byte = 23 // L→R: empty — another rank suspects this one: answer if alive
	MsgProbeReply byte = 24 // R→L: empty — the answer to MsgProbe
	MsgSpawn      byte = 25 // R→L: SpawnRequest — start spare ranks (spawn.go)
	MsgSpawned    byte = 26 // L→R: SpawnAnswer — the answer to MsgSpawn with the same id
	MsgAdmit      byte = 27 // L→R: Admission — a spare rank started and joined
	MsgRoster     byte = 28 // L→R, to a spare only, right after addrs: the ranks that had failed by then
	// 29..43 are the agent protocol's (launcher).
	MsgHost byte = 44 // R→L, before TLS: host uint32 — the host whose secret the rank holds
	// 29 and 30 are the agent protocol's (launcher/agentwire.go).
	// The next free type is 31.
)

// The primary world. A rank belongs to the job's primary world while it
// holds a lease from ftrun: it asks for one every fifth of the lease term
// over its supervision channel, and a grant of the ask it sent at time t
// (its own clock) makes its lease run until t + term. A rank whose lease ran
// out, because it cannot reach ftrun (a partition, a cut link, ftrun gone),
// stops acting at once and exits with ExitLostPrimary. ftrun stops granting
// a rank's lease when it cannot confirm the rank's death otherwise (its
// host is lost, its link silent) and counts the rank as failed only 1.5
// terms after that: by then the rank has stopped, so the survivors never
// take over from a rank that still acts. The half term to spare covers
// clock rate differences and a late scheduling of the rank's check. The
// term is LeaseTerm, or what ftrun passes in EnvLease (it stretches it for
// slow clusters).
const (
	LeaseTerm       = time.Second
	ExitLostPrimary = 76
)

// LeasePayload encodes the sequence number of a lease ask or grant.
func LeasePayload(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// ParseLease decodes LeasePayload.
func ParseLease(p []byte) (uint64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: lease message of %d bytes", ErrMalformed, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// The HMAC labels of the rendezvous proofs.
const (
	LabelRank     = "ftrma rendezvous rank\x00"
	LabelLauncher = "ftrma rendezvous launcher\x00"
)

// ErrMalformed is wrapped by every error about bytes that break the format.
var ErrMalformed = errors.New("malformed rendezvous message")

// RendezvousKey is the TLS key of rendezvous connections, from the
// secret of the rank's host.
func RendezvousKey(secret []byte) []byte { return seclink.DeriveKey(secret, "ftrma rendezvous") }

// HostSecret is the secret of the ranks of host (an index into the job's
// hosts), from the job's ranks secret, which only the launcher holds.
func HostSecret(ranks []byte, host int) []byte {
	return seclink.DeriveKey(ranks, fmt.Sprintf("ftrma ranks host %d", host))
}

// DialRendezvous runs a rank's side of the rendezvous's start on c: the
// host frame, then TLS keyed by the host's secret. A non-zero deadline
// bounds it (and is cleared, as seclink.Client does).
func DialRendezvous(c net.Conn, hostSecret []byte, host int, deadline time.Time) (*tls.Conn, error) {
	c.SetDeadline(deadline)
	if err := WriteFrame(c, MsgHost, binary.BigEndian.AppendUint32(nil, uint32(host))); err != nil {
		return nil, err
	}
	return seclink.Client(c, RendezvousKey(hostSecret), deadline)
}

// ClosedByPeer reports whether err ends a connection because its other end
// closed it: EOF (FIN) or a reset, not a timeout or this side's own Close.
func ClosedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// HandshakeTries is how many times a rank dials the rendezvous when the
// other end closes the connection before the handshake is through: the
// launcher cuts off its oldest handshake when too many are under way
// (seclink.Gate), so that a flood of junk connections can delay a rank's
// start but not end it.
const HandshakeTries = 8

// AcceptRendezvous runs the launcher's (or an agent's) side of the
// rendezvous's start on c: it reads the host frame, asks secretFor for
// that host's secret (an error refuses the host), and runs TLS keyed by
// it. It returns the connection, the host and its secret.
func AcceptRendezvous(c net.Conn, secretFor func(host int) ([]byte, error), deadline time.Time) (*tls.Conn, int, []byte, error) {
	c.SetDeadline(deadline)
	typ, p, err := ReadFrame(c, MaxSmallFrame)
	if err != nil {
		return nil, 0, nil, err
	}
	if typ != MsgHost || len(p) != 4 {
		return nil, 0, nil, fmt.Errorf("%w: no host frame first", ErrMalformed)
	}
	host := int(binary.BigEndian.Uint32(p))
	secret, err := secretFor(host)
	if err != nil {
		return nil, 0, nil, err
	}
	tc, err := seclink.Server(c, RendezvousKey(secret), deadline)
	if err != nil {
		return nil, 0, nil, err
	}
	return tc, host, secret, nil
}

// RankPayload encodes a rank for the exit and suspect messages.
func RankPayload(r ftrma.Rank) []byte { return binary.BigEndian.AppendUint32(nil, uint32(r)) }

// ParseRank decodes a rank payload of a job of size ranks.
func ParseRank(p []byte, size int) (ftrma.Rank, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: rank payload of %d bytes", ErrMalformed, len(p))
	}
	r := binary.BigEndian.Uint32(p)
	if uint64(r) >= uint64(size) {
		return 0, fmt.Errorf("%w: rank %d of %d", ErrMalformed, r, size)
	}
	return ftrma.Rank(r), nil
}

// AppendFrame appends a frame of type typ carrying payload to b.
func AppendFrame(b []byte, typ byte, payload []byte) []byte {
	return append(AppendFrameHeader(b, typ, len(payload)), payload...)
}

// AppendFrameHeader appends the start of a frame of type typ whose payload
// of n bytes the caller writes after it.
func AppendFrameHeader(b []byte, typ byte, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(1+n))
	return append(b, typ)
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	_, err := w.Write(AppendFrame(make([]byte, 0, 5+len(payload)), typ, payload))
	return err
}

// ReadFrame reads one frame of at most max bytes after the length. A longer
// one is a *FrameTooLongError, its bytes left unread.
func ReadFrame(r io.Reader, max int) (typ byte, payload []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 {
		return 0, nil, fmt.Errorf("%w: frame length %d not in [1, %d]", ErrMalformed, n, max)
	}
	if uint64(n) > uint64(max) {
		return 0, nil, &FrameTooLongError{Len: int(n), Max: max}
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

// Proof computes a rank's or the launcher's proof (label says which).
func Proof(secret []byte, label string, version uint16, rank uint32, launcherNonce, rankNonce []byte) []byte {
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

// Hello is the launcher's first message.
type Hello struct {
	Version uint16
	Nonce   []byte
}

// Append encodes h as a rendezvous hello.
func (h Hello) Append(b []byte) []byte { return h.AppendAs(b, RendezvousHandshake) }

// AppendAs encodes h as the hello of protocol k.
func (h Hello) AppendAs(b []byte, k HandshakeKind) []byte {
	b = append(b, k.Magic...)
	b = binary.BigEndian.AppendUint16(b, h.Version)
	return append(b, h.Nonce...)
}

// ParseHello accepts any version, so that the rank can say which one it does
// not speak; the rest must be exactly a version-1 hello.
func ParseHello(p []byte) (Hello, error) { return ParseHelloAs(p, RendezvousHandshake) }

// ParseHelloAs parses the hello of protocol k (see ParseHello).
func ParseHelloAs(p []byte, k HandshakeKind) (Hello, error) {
	if len(p) < len(k.Magic)+2 || string(p[:len(k.Magic)]) != k.Magic {
		return Hello{}, fmt.Errorf("%w: not a %s hello", ErrMalformed, k.Name)
	}
	h := Hello{Version: binary.BigEndian.Uint16(p[len(k.Magic):])}
	if h.Version != k.Version {
		return h, nil
	}
	rest := p[len(k.Magic)+2:]
	if len(rest) != NonceSize {
		return Hello{}, fmt.Errorf("%w: hello of %d bytes", ErrMalformed, len(p))
	}
	h.Nonce = rest
	return h, nil
}

// Auth is the rank's answer to hello.
type Auth struct {
	Version uint16
	Rank    uint32
	Nonce   []byte
	Proof   []byte
}

// Append encodes a.
func (a Auth) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, a.Version)
	b = binary.BigEndian.AppendUint32(b, a.Rank)
	b = append(b, a.Nonce...)
	return append(b, a.Proof...)
}

// ParseAuth parses an auth; a version other than RendezvousVersion is
// returned with the other fields unset.
func ParseAuth(p []byte) (Auth, error) { return ParseAuthAs(p, RendezvousVersion) }

// ParseAuthAs parses an auth of a protocol at version (see ParseAuth).
func ParseAuthAs(p []byte, version uint16) (Auth, error) {
	if len(p) < 2 {
		return Auth{}, fmt.Errorf("%w: auth of %d bytes", ErrMalformed, len(p))
	}
	a := Auth{Version: binary.BigEndian.Uint16(p)}
	if a.Version != version {
		return a, nil
	}
	if len(p) != 2+4+NonceSize+ProofSize {
		return Auth{}, fmt.Errorf("%w: auth of %d bytes", ErrMalformed, len(p))
	}
	a.Rank = binary.BigEndian.Uint32(p[2:])
	a.Nonce = p[6 : 6+NonceSize]
	a.Proof = p[6+NonceSize:]
	return a, nil
}

// ErrorText bounds an error message for an error frame.
func ErrorText(msg string) []byte {
	if len(msg) > MaxErrorText {
		msg = msg[:MaxErrorText]
	}
	return []byte(msg)
}

// Printable makes text from the network safe to log: control bytes become '?'
// and the length is bounded.
func Printable(p []byte) string {
	if len(p) > MaxErrorText {
		p = p[:MaxErrorText]
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
