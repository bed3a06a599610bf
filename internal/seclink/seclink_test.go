package seclink

import (
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	testKey  = DeriveKey([]byte("test job secret, 32 bytes long.."), "test link")
	otherKey = DeriveKey([]byte("test job secret, 32 bytes long.."), "other link")
	marker   = []byte("MARKER-7f3a-plaintext-must-not-appear")
)

// tcpPair returns the two ends of a loopback TCP connection, closed at the end
// of the test.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

type result struct {
	tc  *tls.Conn
	err error
}

// handshakeBoth runs Client on cc with ckey and Server on sc with skey at
// once and returns both outcomes.
func handshakeBoth(cc, sc net.Conn, ckey, skey []byte, deadline time.Time) (client, server result) {
	done := make(chan result, 1)
	go func() {
		tc, err := Server(sc, skey, deadline)
		done <- result{tc, err}
	}()
	tc, err := Client(cc, ckey, deadline)
	client = result{tc, err}
	if err != nil {
		// The server may wait for a flight that will never come.
		cc.Close()
	}
	server = <-done
	return client, server
}

func soon() time.Time { return time.Now().Add(10 * time.Second) }

// exchange sends msg from a to b and reply from b to a, and checks both
// arrive intact.
func exchange(t *testing.T, a, b net.Conn, msg, reply []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(b, buf); err != nil {
			errc <- err
			return
		}
		if !bytes.Equal(buf, msg) {
			errc <- errors.New("server got " + string(buf))
			return
		}
		_, err := b.Write(reply)
		errc <- err
	}()
	if _, err := a.Write(msg); err != nil {
		t.Fatalf("client write: %v", err)
	}
	buf := make([]byte, len(reply))
	if _, err := io.ReadFull(a, buf); err != nil {
		t.Fatalf("client read: %v", err)
	}
	if !bytes.Equal(buf, reply) {
		t.Fatalf("client got %q, want %q", buf, reply)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server side: %v", err)
	}
}

func TestSameKeyDataFlowsBothWays(t *testing.T) {
	for _, tr := range []struct {
		name string
		pair func(testing.TB) (net.Conn, net.Conn)
	}{
		{"pipe", func(testing.TB) (net.Conn, net.Conn) { return net.Pipe() }},
		{"tcp", tcpPair},
	} {
		t.Run(tr.name, func(t *testing.T) {
			cc, sc := tr.pair(t)
			c, s := handshakeBoth(cc, sc, testKey, testKey, soon())
			if c.err != nil || s.err != nil {
				t.Fatalf("handshake: client %v, server %v", c.err, s.err)
			}
			defer cc.Close() // not tc.Close: its close_notify would wait for a reader
			defer sc.Close()
			for _, tc := range []*tls.Conn{c.tc, s.tc} {
				st := tc.ConnectionState()
				if st.Version != tls.VersionTLS13 || len(st.PeerCertificates) != 1 {
					t.Fatalf("version %x, %d peer certificates", st.Version, len(st.PeerCertificates))
				}
			}
			exchange(t, c.tc, s.tc, marker, []byte("reply"))
			exchange(t, c.tc, s.tc, bytes.Repeat([]byte("x"), 100_000), []byte("big reply"))
		})
	}
}

func TestDifferentKeysBothSidesRefuse(t *testing.T) {
	cc, sc := tcpPair(t)
	c, s := handshakeBoth(cc, sc, testKey, otherKey, soon())
	for _, r := range []struct {
		side string
		result
	}{{"client", c}, {"server", s}} {
		if r.tc != nil || !errors.Is(r.err, ErrUnknownKey) {
			t.Errorf("%s: got %v, %v; want no connection and ErrUnknownKey", r.side, r.tc, r.err)
		}
		if msg := r.err.Error(); !strings.Contains(msg, "peer does not know the key") {
			t.Errorf("%s: error %q does not say the peer does not know the key", r.side, msg)
		}
		t.Logf("%s: %v", r.side, r.err)
	}
}

// recorder is a net.Conn that keeps a copy of every byte written through it.
type recorder struct {
	net.Conn
	mu      sync.Mutex
	written bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.written.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

// An application that writes before the handshake is done (tls.Conn
// handshakes on first Write) with the wrong key sends nothing of its data: TLS
// 1.3 in Go has no 0-RTT, so the write fails and no plaintext, nor even a
// ciphertext of it, reaches the wire, and the server hands nothing up.
func TestDifferentKeysNothingReachesServer(t *testing.T) {
	ids, err := identitiesFor(testKey)
	if err != nil {
		t.Fatal(err)
	}
	cc, sc := tcpPair(t)
	rec := &recorder{Conn: cc}
	done := make(chan result, 1)
	go func() {
		tc, err := Server(sc, otherKey, soon())
		done <- result{tc, err}
	}()
	tc := tls.Client(rec, ids.client)
	if _, err := tc.Write(marker); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("client write: %v, want ErrUnknownKey", err)
	}
	tc.Close()
	s := <-done
	if s.tc != nil || !errors.Is(s.err, ErrUnknownKey) {
		t.Fatalf("server: %v, %v", s.tc, s.err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if bytes.Contains(rec.written.Bytes(), marker) {
		t.Fatal("the application's data went on the wire")
	}
	// After the ClientHello, the client only sends the dummy
	// change_cipher_spec and its bad_certificate alert: no application data
	// record (type 23 carrying more than an alert's size) follows.
	if n := rec.written.Len(); n > 2048 {
		t.Fatalf("client wrote %d bytes, more than a hello and an alert", n)
	}
}

// relay copies bytes between a and b in both directions, calling tap on
// every chunk before it forwards it (tap may change the chunk in place). dir
// is 0 for a→b, 1 for b→a. relay returns when both directions end.
func relay(a, b net.Conn, tap func(dir int, p []byte)) *sync.WaitGroup {
	var wg sync.WaitGroup
	pump := func(dir int, from, to net.Conn) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := from.Read(buf)
			if n > 0 {
				tap(dir, buf[:n])
				if _, werr := to.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		to.Close()
		from.Close()
	}
	wg.Add(2)
	go pump(0, a, b)
	go pump(1, b, a)
	return &wg
}

// A relay that does not hold the key and terminates TLS itself, under a key it
// made up, completes no handshake with either side.
func TestRelayWithoutKeyCannotImpersonate(t *testing.T) {
	client, relayFront := tcpPair(t)
	relayBack, server := tcpPair(t)
	madeUp := make([]byte, KeySize)
	rand.Read(madeUp)

	var wg sync.WaitGroup
	var front, back result
	wg.Add(2)
	go func() { // the relay, as a server to the client
		defer wg.Done()
		tc, err := Server(relayFront, madeUp, soon())
		front = result{tc, err}
		relayFront.Close()
	}()
	go func() { // the relay, as a client to the server
		defer wg.Done()
		tc, err := Client(relayBack, madeUp, soon())
		back = result{tc, err}
		relayBack.Close()
	}()
	sres := make(chan result, 1)
	go func() {
		tc, err := Server(server, testKey, soon())
		sres <- result{tc, err}
	}()
	ctc, cerr := Client(client, testKey, soon())
	s := <-sres
	wg.Wait()

	if ctc != nil || !errors.Is(cerr, ErrUnknownKey) {
		t.Errorf("client accepted the relay: %v, %v", ctc, cerr)
	}
	if s.tc != nil || !errors.Is(s.err, ErrUnknownKey) {
		t.Errorf("server accepted the relay: %v, %v", s.tc, s.err)
	}
	if front.err == nil || back.err == nil {
		t.Errorf("relay completed a handshake: front %v, back %v", front.err, back.err)
	}
	t.Logf("client: %v; server: %v", cerr, s.err)
}

// A transparent relay that flips one bit of a record after the handshake
// makes the receiver fail with bad record MAC; it never reads altered data.
func TestRelayFlippedByteIsDetected(t *testing.T) {
	for _, dir := range []int{0, 1} {
		t.Run([]string{"client-to-server", "server-to-client"}[dir], func(t *testing.T) {
			client, relayFront := tcpPair(t)
			relayBack, server := tcpPair(t)
			var armed, flipped atomic.Bool
			wg := relay(relayFront, relayBack, func(d int, p []byte) {
				// After the handshake, the first chunk starts a record; past
				// its 5-byte header every byte is ciphertext or tag.
				if d == dir && armed.Load() && len(p) > 5 && !flipped.Swap(true) {
					p[len(p)-1] ^= 0x01
				}
			})
			defer wg.Wait()
			c, s := handshakeBoth(client, server, testKey, testKey, soon())
			if c.err != nil || s.err != nil {
				t.Fatalf("handshake through a transparent relay: client %v, server %v", c.err, s.err)
			}
			defer c.tc.Close()
			defer s.tc.Close()
			armed.Store(true)

			from, to := c.tc, s.tc
			if dir == 1 {
				from, to = s.tc, c.tc
			}
			if _, err := from.Write(marker); err != nil {
				t.Fatal(err)
			}
			to.SetReadDeadline(soon())
			buf := make([]byte, 1024)
			n, err := to.Read(buf)
			if n != 0 || err == nil {
				t.Fatalf("receiver got %q, %v; want nothing and an error", buf[:n], err)
			}
			if !flipped.Load() {
				t.Fatal("the relay flipped nothing")
			}
			if !strings.Contains(err.Error(), "bad record MAC") {
				t.Fatalf("receiver error %q, want bad record MAC", err)
			}
		})
	}
}

// A transparent relay sees neither the application's data nor the key.
func TestRelaySeesNoPlaintext(t *testing.T) {
	client, relayFront := tcpPair(t)
	relayBack, server := tcpPair(t)
	var mu sync.Mutex
	var seen bytes.Buffer
	wg := relay(relayFront, relayBack, func(_ int, p []byte) {
		mu.Lock()
		seen.Write(p)
		mu.Unlock()
	})
	c, s := handshakeBoth(client, server, testKey, testKey, soon())
	if c.err != nil || s.err != nil {
		t.Fatalf("handshake: client %v, server %v", c.err, s.err)
	}
	reply := append([]byte("reply "), marker...)
	exchange(t, c.tc, s.tc, marker, reply)
	c.tc.Close()
	s.tc.Close()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if seen.Len() < 2*len(marker) {
		t.Fatalf("relay saw only %d bytes", seen.Len())
	}
	for _, secret := range [][]byte{marker, []byte("MARKER"), testKey} {
		if bytes.Contains(seen.Bytes(), secret) {
			t.Errorf("relay saw %q in the clear", secret)
		}
	}
}

// A Client connected to a Client, or a Server to a Server, never completes:
// neither side accepts the other's first flight, and the deadline ends the
// wait of two servers.
func TestReflectionFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(c net.Conn, key []byte, deadline time.Time) (*tls.Conn, error)
	}{{"client-client", Client}, {"server-server", Server}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := net.Pipe()
				deadline := time.Now().Add(5 * time.Second)
				errs := make(chan error, 2)
				for _, c := range []net.Conn{a, b} {
					go func() {
						tc, err := tc.run(c, testKey, deadline)
						if tc != nil {
							tc.Close()
						}
						c.Close()
						errs <- err
					}()
				}
				for range 2 {
					if err := <-errs; err == nil {
						t.Fatal("a reflected handshake succeeded")
					} else {
						t.Log(err)
					}
				}
			})
		})
	}
}

// The two roles have distinct identities under one key: a server presenting
// the client's certificate (a client's flight sent back to it) is refused.
func TestRolesHaveDistinctIdentities(t *testing.T) {
	ids, err := identitiesFor(testKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ids.server.Clone()
	cfg.Certificates = ids.client.Certificates
	cc, sc := tcpPair(t)
	go func() {
		tls.Server(sc, cfg).Handshake()
		sc.Close()
	}()
	if tc, err := Client(cc, testKey, soon()); tc != nil || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("client accepted a server with the client's identity: %v", err)
	}

	cfg = ids.client.Clone()
	cfg.Certificates = ids.server.Certificates
	cc2, sc2 := tcpPair(t)
	go func() {
		tls.Client(cc2, cfg).Handshake()
		cc2.Close()
	}()
	if tc, err := Server(sc2, testKey, soon()); tc != nil || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("server accepted a client with the server's identity: %v", err)
	}
}

// deadlineConn records the deadlines set on it.
type deadlineConn struct {
	net.Conn
	mu   sync.Mutex
	sets []time.Time
}

func (d *deadlineConn) SetDeadline(t time.Time) error {
	d.mu.Lock()
	d.sets = append(d.sets, t)
	d.mu.Unlock()
	return d.Conn.SetDeadline(t)
}

func TestDeadlineSetThenCleared(t *testing.T) {
	cc, sc := net.Pipe()
	dc := &deadlineConn{Conn: cc}
	deadline := soon()
	c, s := handshakeBoth(dc, sc, testKey, testKey, deadline)
	if c.err != nil || s.err != nil {
		t.Fatalf("handshake: client %v, server %v", c.err, s.err)
	}
	cc.Close()
	sc.Close()
	if len(dc.sets) != 2 || !dc.sets[0].Equal(deadline) || !dc.sets[1].IsZero() {
		t.Fatalf("deadlines set: %v, want [%v, zero]", dc.sets, deadline)
	}
}

func TestHandshakeTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc, sc := net.Pipe() // the server never answers
		defer sc.Close()
		start := time.Now()
		_, err := Client(cc, testKey, start.Add(3*time.Second))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want a deadline error", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("gave up after %v", d)
		}
	})
}

func TestShortKeyRefused(t *testing.T) {
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	if _, err := Client(cc, make([]byte, MinKeySize-1), soon()); err == nil {
		t.Fatal("a 15-byte key was accepted")
	}
}

// A full gate cuts off its oldest handshake: two peers that connect and
// never send a byte hold both slots; a real client then gets through at
// once, the oldest silent one's handshake fails at once (not at its
// deadline), and the other still waits.
func TestGateCutsOffTheOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		g := NewGate(2)
		var ends []chan error
		var silent []net.Conn
		for range 2 {
			peer, c := net.Pipe()
			silent = append(silent, peer)
			end := make(chan error, 1)
			ends = append(ends, end)
			go func() {
				_, err := g.Serve(c, testKey, timeout)
				end <- err
			}()
			synctest.Wait() // in order: the first is the oldest
		}
		cc, sc := net.Pipe()
		cres := make(chan result, 1)
		go func() {
			tc, err := Client(cc, testKey, time.Now().Add(timeout))
			cres <- result{tc, err}
		}()
		start := time.Now()
		if _, err := g.Serve(sc, testKey, timeout); err != nil {
			t.Fatalf("a real client behind two silent ones: %v", err)
		}
		if c := <-cres; c.err != nil {
			t.Fatal(c.err)
		}
		if time.Since(start) != 0 {
			t.Fatal("the real client waited")
		}
		synctest.Wait()
		select {
		case err := <-ends[0]:
			if err == nil {
				t.Fatal("the oldest silent handshake succeeded")
			}
		default:
			t.Fatal("the oldest silent handshake was not cut off")
		}
		select {
		case err := <-ends[1]:
			t.Fatalf("the younger silent handshake ended: %v", err)
		default:
		}
		if g.Evicted() != 1 {
			t.Errorf("evicted %d, want 1", g.Evicted())
		}
		time.Sleep(timeout)
		if err := <-ends[1]; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the other silent handshake ended with %v, want its deadline", err)
		}
		cc.Close()
		sc.Close()
		for _, p := range silent {
			p.Close()
		}
	})
}

// A released slot is free again: a gate of 1 holds one handshake, and
// admits the next without cutting anyone off once it is released.
func TestGateRelease(t *testing.T) {
	g := NewGate(0) // means 1
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	release := g.Admit(a)
	release()
	g.Admit(b)()
	if g.Evicted() != 0 {
		t.Fatalf("evicted %d after releases", g.Evicted())
	}
}

// Refusals logs one line per source per interval and then says how many it
// left out; sources are apart.
func TestRefusals(t *testing.T) {
	r := NewRefusals(time.Second)
	now := time.Unix(1000, 0)
	a := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 1}
	a2 := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 2}
	b := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 1}
	logged := 0
	for i := range 100 {
		src := a
		if i%2 == 1 {
			src = a2 // the same host, another port
		}
		if ok, _ := r.Note(src, now.Add(time.Duration(i)*time.Millisecond)); ok {
			logged++
		}
	}
	if logged != 1 {
		t.Errorf("100 refusals from one host within 0.1 s: %d lines, want 1", logged)
	}
	if ok, _ := r.Note(b, now); !ok {
		t.Error("another host's first refusal was not logged")
	}
	if ok, skipped := r.Note(a, now.Add(time.Second)); !ok || skipped != 99 {
		t.Errorf("a second later: log %v, %d left out; want true, 99", ok, skipped)
	}
	if Suffix(0) != "" || !strings.Contains(Suffix(99), "99 more") {
		t.Errorf("Suffix: %q, %q", Suffix(0), Suffix(99))
	}
}

func TestGenSecretParses(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		s := GenSecret()
		if len(s) != 2*KeySize || strings.ToLower(s) != s {
			t.Fatalf("GenSecret gave %q, want %d lowercase hex digits", s, 2*KeySize)
		}
		if seen[s] {
			t.Fatal("GenSecret repeated itself")
		}
		seen[s] = true
		for _, text := range []string{s, s + "\n", "  " + s + "\r\n", strings.ToUpper(s)} {
			key, err := ParseSecret(text)
			if err != nil {
				t.Fatalf("ParseSecret(%q): %v", text, err)
			}
			if hex.EncodeToString(key) != s {
				t.Fatalf("ParseSecret(%q) = %x", text, key)
			}
		}
	}
}

func TestParseSecretRefusesWeakSecrets(t *testing.T) {
	short := make([]byte, 15)
	rand.Read(short)
	for _, s := range []string{
		"",
		"   \n",
		"hunter2",
		"secretsecretsecret",
		hex.EncodeToString(short),
		"the quick brown fox jumps over the lazy dog and then it sleeps ok", // 64 characters
		"thequickbrownfoxjumpsoverthelazydogandthenitsleepsallafternoonok",  // 64, no spaces
		strings.Repeat("0", 64),
		strings.Repeat("ab", 32),
		strings.Repeat("deadbeef", 8),
		"facadebeefcafedecadeaddedbeadfadedacedbaddeafcabbedfacebeadfeed", // a-f words, no digits
		GenSecret()[:63], // odd length
		"0x" + GenSecret(),
		GenSecret()[:32] + " " + GenSecret()[:32],
	} {
		key, err := ParseSecret(s)
		if err == nil || key != nil {
			t.Errorf("ParseSecret(%q) accepted it", s)
			continue
		}
		if !errors.Is(err, ErrBadSecret) || !strings.Contains(err.Error(), "ftrun agent --gen-secret") {
			t.Errorf("ParseSecret(%q): %q does not point at ftrun agent --gen-secret", s, err)
		}
		if len(s) > 8 && strings.Contains(err.Error(), strings.TrimSpace(s)) {
			t.Errorf("ParseSecret(%q): the error quotes the secret", s)
		}
	}
	t.Log(ParseSecret("hunter2"))
	t.Log(ParseSecret(hex.EncodeToString(short)))
}

func TestParseSecretAcceptsMinimum(t *testing.T) {
	b := make([]byte, MinKeySize)
	rand.Read(b)
	if _, err := ParseSecret(hex.EncodeToString(b)); err != nil {
		t.Fatal(err)
	}
}

func TestDeriveKey(t *testing.T) {
	secret := []byte("a job secret")
	a, b := DeriveKey(secret, "agent h1"), DeriveKey(secret, "agent h2")
	if len(a) != KeySize || bytes.Equal(a, b) || !bytes.Equal(a, DeriveKey(secret, "agent h1")) {
		t.Fatalf("DeriveKey: %x, %x", a, b)
	}
	// No label reaches an identity seed: the two uses have their own salts.
	seed, err := hkdf.Key(sha256.New, secret, []byte(saltIdentity), "client", 32)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(seed, DeriveKey(secret, "client")) {
		t.Fatal("DeriveKey(secret, \"client\") is the client's identity seed under secret")
	}
}

func TestIdentitiesCached(t *testing.T) {
	a, err := identitiesFor(testKey)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := identitiesFor(bytes.Clone(testKey))
	if a != b {
		t.Fatal("a second connection under the same key derived its identities again")
	}
}

func BenchmarkHandshake(b *testing.B) {
	identitiesFor(testKey) // the cache is warm in a running server
	b.Run("pipe", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cc, sc := net.Pipe()
			c, s := handshakeBoth(cc, sc, testKey, testKey, time.Time{})
			if c.err != nil || s.err != nil {
				b.Fatal(c.err, s.err)
			}
			cc.Close()
			sc.Close()
		}
	})
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					if tc, err := Server(c, testKey, time.Time{}); err == nil {
						io.Copy(tc, tc)
					}
					c.Close()
				}()
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			tc, err := Client(c, testKey, time.Time{})
			if err != nil {
				b.Fatal(err)
			}
			// The client is done before the server has checked its flight;
			// an echoed byte makes the server's work part of the time.
			one := []byte{1}
			if _, err := tc.Write(one); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(tc, one); err != nil {
				b.Fatal(err)
			}
			tc.Close()
		}
	})
}

// BenchmarkIdentities is the work the cache saves per connection.
func BenchmarkIdentities(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newIdentities(testKey); err != nil {
			b.Fatal(err)
		}
	}
}
