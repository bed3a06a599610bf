package seclink

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// KeySize is the length in bytes of the keys DeriveKey returns and of the
// secrets GenSecret makes.
const KeySize = 32

// MinKeySize is the shortest key Client and Server accept and the shortest
// secret ParseSecret accepts, in bytes (128 bits).
const MinKeySize = 16

var (
	// ErrUnknownKey reports that the peer of a handshake does not hold the
	// key: its certificate is not the one the key gives its role, or it
	// refused ours for that reason.
	ErrUnknownKey = errors.New("peer does not know the key")
	// ErrBadSecret reports a secret ParseSecret refuses.
	ErrBadSecret = errors.New("not a usable secret")
)

// Salts of the two HKDF uses, so that no label passed to DeriveKey can name an
// identity seed.
const (
	saltDerive   = "ftrma/seclink/v1 derive-key"
	saltIdentity = "ftrma/seclink/v1 identity"
)

// DeriveKey derives a KeySize-byte key for one purpose from secret, by
// HKDF-SHA256 with label as the info string. Keys for different labels are
// independent: holding one tells nothing of secret or of the others, so a host
// given DeriveKey(jobSecret, "agent h2") never learns the job secret.
// It never fails.
func DeriveKey(secret []byte, label string) []byte {
	k, err := hkdf.Key(sha256.New, secret, []byte(saltDerive), label, KeySize)
	if err != nil {
		panic("seclink: hkdf: " + err.Error()) // only for lengths beyond 255 hashes
	}
	return k
}

// role is one side of a link; each side has its own identity under a key, so
// a connection sent back to its origin meets the wrong certificate.
type role uint8

const (
	roleClient role = iota
	roleServer
)

func (r role) String() string {
	if r == roleClient {
		return "client"
	}
	return "server"
}

// Client runs the client's side of a mutually authenticated TLS 1.3
// handshake over c, keyed by key (at least MinKeySize bytes, usually from
// DeriveKey). Both sides present an Ed25519 certificate derived from key for
// their role; Client accepts the server only if its certificate carries
// exactly the server's public key under key. No CA, name or expiry is
// checked. After it returns, every byte on the returned connection is
// encrypted and authenticated.
//
// A non-zero deadline bounds the handshake: Client sets it on c and clears
// c's deadline before it returns. A zero deadline leaves c's deadline alone.
//
// If the server does not hold key, the error wraps ErrUnknownKey. On any
// error the caller still owns c and should close it. Client blocks until the
// handshake ends; it may be called from any goroutine.
func Client(c net.Conn, key []byte, deadline time.Time) (*tls.Conn, error) {
	return handshake(c, key, deadline, roleClient)
}

// Server runs the server's side of the handshake Client describes: it
// accepts the client only if the client's certificate carries exactly the
// client's public key under key. The deadline, errors and ownership of c are
// as for Client. Session tickets are off, so every connection proves the key
// afresh.
func Server(c net.Conn, key []byte, deadline time.Time) (*tls.Conn, error) {
	return handshake(c, key, deadline, roleServer)
}

func handshake(c net.Conn, key []byte, deadline time.Time, r role) (*tls.Conn, error) {
	ids, err := identitiesFor(key)
	if err != nil {
		return nil, err
	}
	if !deadline.IsZero() {
		if err := c.SetDeadline(deadline); err != nil {
			return nil, err
		}
		defer c.SetDeadline(time.Time{})
	}
	var tc *tls.Conn
	if r == roleClient {
		tc = tls.Client(c, ids.client)
	} else {
		tc = tls.Server(c, ids.server)
	}
	if err := tc.Handshake(); err != nil {
		return nil, explain(err)
	}
	return tc, nil
}

// explain turns a handshake error into one a user can act on: a peer that
// refused our certificate (alert bad_certificate) does not hold the key either.
func explain(err error) error {
	if errors.Is(err, ErrUnknownKey) {
		return err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil &&
		op.Err.Error() == tls.AlertError(alertBadCertificate).Error() {
		return fmt.Errorf("%w (it refused our certificate)", ErrUnknownKey)
	}
	return fmt.Errorf("TLS handshake: %w", err)
}

// alertBadCertificate is the TLS alert a peer sends when its pinned check of
// our certificate fails.
const alertBadCertificate = 42

// identities holds, for one key, the TLS configuration of each role. Both are
// immutable once built and shared by every connection under the key.
type identities struct {
	client *tls.Config
	server *tls.Config
}

// cache maps sha256(key) to *identities, so that repeated connections under
// one key do not derive keys and sign certificates again (about 100 µs). It is
// emptied when it passes maxCached entries, which bounds the memory a
// long-running process spends on keys it no longer uses.
var (
	cache     sync.Map
	cacheSize atomic.Int64
)

const maxCached = 256

func identitiesFor(key []byte) (*identities, error) {
	if len(key) < MinKeySize {
		return nil, fmt.Errorf("seclink: key of %d bytes, want at least %d", len(key), MinKeySize)
	}
	h := sha256.Sum256(key)
	if v, ok := cache.Load(h); ok {
		return v.(*identities), nil
	}
	ids, err := newIdentities(key)
	if err != nil {
		return nil, err
	}
	if v, loaded := cache.LoadOrStore(h, ids); loaded {
		return v.(*identities), nil
	}
	if cacheSize.Add(1) > maxCached {
		cache.Clear()
		cacheSize.Store(0)
	}
	return ids, nil
}

// newIdentities derives both roles' Ed25519 keys from key, makes their
// self-signed certificates, and builds each role's configuration, pinned to
// the other role's public key.
func newIdentities(key []byte) (*identities, error) {
	clientCert, clientPub, err := makeIdentity(key, roleClient)
	if err != nil {
		return nil, err
	}
	serverCert, serverPub, err := makeIdentity(key, roleServer)
	if err != nil {
		return nil, err
	}
	return &identities{
		client: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{clientCert},
			// The chain and name checks are replaced by the pin below.
			InsecureSkipVerify:    true,
			VerifyPeerCertificate: pin(serverPub, roleServer),
		},
		server: &tls.Config{
			MinVersion:             tls.VersionTLS13,
			Certificates:           []tls.Certificate{serverCert},
			ClientAuth:             tls.RequireAnyClientCert,
			VerifyPeerCertificate:  pin(clientPub, roleClient),
			SessionTicketsDisabled: true,
		},
	}, nil
}

// makeIdentity derives r's Ed25519 key under key (HKDF-SHA256 with its own
// salt, info "client" or "server") and a self-signed certificate for it.
// The certificate's fields carry no meaning: only its public key is checked.
func makeIdentity(key []byte, r role) (tls.Certificate, ed25519.PublicKey, error) {
	seed, err := hkdf.Key(sha256.New, key, []byte(saltIdentity), r.String(), ed25519.SeedSize)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "ftrma seclink " + r.String()},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("seclink: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, pub, nil
}

// pin returns a VerifyPeerCertificate that accepts exactly one certificate
// whose public key is want, the key of role r.
func pin(want ed25519.PublicKey, r role) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) != 1 {
			return fmt.Errorf("%w (the %s sent %d certificates, want 1)", ErrUnknownKey, r, len(raw))
		}
		cert, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("%w (the %s's certificate does not parse: %v)", ErrUnknownKey, r, err)
		}
		got, ok := cert.PublicKey.(ed25519.PublicKey)
		if !ok || !got.Equal(want) {
			return fmt.Errorf("%w (the %s's certificate is not the one the key gives)", ErrUnknownKey, r)
		}
		return nil
	}
}

// Gate bounds how many handshakes a server runs at once, so that peers who
// open connections and never finish (or never start) a handshake cannot make
// it hold an unbounded number of them, nor shut out a peer that does: when
// the gate is full, a new handshake cuts off the oldest one under way (its
// connection is closed, so its handshake fails at once). A real peer's
// handshake takes milliseconds; to cut it off, others must open more
// connections than the gate holds within that time. Its methods may be
// called from any goroutine.
type Gate struct {
	mu      sync.Mutex
	max     int
	pending []*gateSlot // oldest first
	evicted int         // handshakes cut off so far
}

// gateSlot is one handshake under way.
type gateSlot struct{ c net.Conn }

// NewGate returns a gate that holds at most n handshakes at once (at least
// 1).
func NewGate(n int) *Gate {
	return &Gate{max: max(n, 1)}
}

// Admit takes a slot for the handshake on c, cutting off the oldest
// handshake under way when none is free, and returns the function that
// gives the slot back once c's handshake has ended (call it once).
func (g *Gate) Admit(c net.Conn) (release func()) {
	slot := &gateSlot{c: c}
	var evict net.Conn
	g.mu.Lock()
	if len(g.pending) >= g.max {
		evict = g.pending[0].c
		g.pending = g.pending[1:]
		g.evicted++
	}
	g.pending = append(g.pending, slot)
	g.mu.Unlock()
	if evict != nil {
		evict.Close()
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, s := range g.pending {
			if s == slot {
				g.pending = append(g.pending[:i], g.pending[i+1:]...)
				return
			}
		}
	}
}

// Evicted reports how many handshakes the gate has cut off.
func (g *Gate) Evicted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.evicted
}

// Serve runs Server on c within timeout, holding a slot of the gate for
// the handshake only (Admit). Unlike Server, Serve closes c on any error,
// so the caller owns c only when the error is nil.
func (g *Gate) Serve(c net.Conn, key []byte, timeout time.Duration) (*tls.Conn, error) {
	release := g.Admit(c)
	tc, err := Server(c, key, time.Now().Add(timeout))
	release()
	if err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// Refusals rate-limits the log lines of refused connections: at most one
// line per source address per interval, a later one saying how many were
// left out, so that junk connections cannot flood a log. Its methods may
// be called from any goroutine.
type Refusals struct {
	mu       sync.Mutex
	interval time.Duration
	bySource map[string]*refusalState
}

type refusalState struct {
	last    time.Time // when the last line was logged
	skipped int       // refusals since, not logged
}

// maxRefusalSources bounds the sources Refusals remembers; past it, those
// quiet for an interval are forgotten.
const maxRefusalSources = 1024

// NewRefusals returns a limiter of one line per source per interval.
func NewRefusals(interval time.Duration) *Refusals {
	return &Refusals{interval: interval, bySource: make(map[string]*refusalState)}
}

// Note counts a refusal of a connection from addr (its host is the source)
// at now, and reports whether to log it and how many refusals from that
// source were left out before it.
func (r *Refusals) Note(addr net.Addr, now time.Time) (log bool, skipped int) {
	src := ""
	if addr != nil {
		src = addr.String()
		if h, _, err := net.SplitHostPort(src); err == nil {
			src = h
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.bySource[src]
	if st == nil {
		if len(r.bySource) >= maxRefusalSources {
			for k, v := range r.bySource {
				if now.Sub(v.last) >= r.interval {
					delete(r.bySource, k)
				}
			}
		}
		st = &refusalState{}
		r.bySource[src] = st
	} else if now.Sub(st.last) < r.interval {
		st.skipped++
		return false, 0
	}
	skipped, st.skipped, st.last = st.skipped, 0, now
	return true, skipped
}

// Suffix is what a logged refusal line ends with when skipped were left
// out before it ("" for none).
func Suffix(skipped int) string {
	if skipped == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d more refused from there, not logged)", skipped)
}

// GenSecret returns a new secret: KeySize bytes from crypto/rand as
// lowercase hex (64 characters), the form ParseSecret accepts and
// `openssl rand -hex 32` also prints.
func GenSecret() string {
	b := make([]byte, KeySize)
	rand.Read(b) // never fails (it crashes the program instead)
	return hex.EncodeToString(b)
}

// genHint is how every ParseSecret error ends.
const genHint = "; make one with `ftrun agent --gen-secret`"

// ParseSecret decodes a secret made by GenSecret: hex digits (either case),
// with any surrounding whitespace (a key file's final newline) ignored. It
// refuses, with an error wrapping ErrBadSecret, anything else: text that is
// not hex (a passphrase), fewer than MinKeySize bytes, and hex too regular to
// be random (few distinct bytes, as in "0000..." or "abab...", or no digit
// 0-9 at all, as in words spelt with the letters a-f). The last checks refuse
// a random secret with a probability below 1e-13.
// The error never quotes the secret.
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	bad := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("%w: "+format+genHint, append([]any{ErrBadSecret}, args...)...)
	}
	if s == "" {
		return bad("it is empty")
	}
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			digits++
		case 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return bad("character %d is not a hex digit (a passphrase will not do)", i+1)
		}
	}
	if len(s)%2 != 0 {
		return bad("it has an odd number (%d) of hex digits", len(s))
	}
	key, err := hex.DecodeString(s)
	if err != nil {
		return bad("it is not hex")
	}
	if len(key) < MinKeySize {
		return bad("it has %d bytes (%d bits), at least %d (%d bits) are needed", len(key), 8*len(key), MinKeySize, 8*MinKeySize)
	}
	var seen [256]bool
	distinct := 0
	for _, b := range key {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	if distinct < len(key)/2 {
		return bad("it is too regular to be random (%d distinct bytes of %d)", distinct, len(key))
	}
	if digits == 0 {
		return bad("it has no digit 0-9, like words spelt with a-f, not random hex")
	}
	return key, nil
}
