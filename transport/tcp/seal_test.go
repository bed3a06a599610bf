package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/ftrma/ftrma"
)

// sealPair is a sealer and the opener of its records, under one key.
func sealPair(t testing.TB) (*sealer, *opener) {
	t.Helper()
	key := bytes.Repeat([]byte{7}, keyLen)
	sk, err := newRecordKey(key)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := newRecordKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &sealer{k: sk}, newOpener(rk)
}

// feeder is a raw read over wire that hands out at most chunk bytes a
// call, and nothing every other call.
type feeder struct {
	wire  []byte
	rng   *rand.Rand
	calls int
}

func (f *feeder) read(b []byte) (int, error) {
	f.calls++
	if f.calls%2 == 0 || len(b) == 0 {
		return 0, nil
	}
	if len(f.wire) == 0 {
		return 0, nil
	}
	n := copy(b, f.wire[:min(len(f.wire), 1+f.rng.IntN(3*maxRecord))])
	f.wire = f.wire[n:]
	return n, nil
}

// readAll reads what o opens from f until want bytes or an error, with
// reads of random sizes.
func readAll(o *opener, f *feeder, want int) ([]byte, error) {
	var got []byte
	for idle := 0; len(got) < want && idle < 4; {
		b := make([]byte, 1+f.rng.IntN(2*maxRecord+100))
		n, err := o.read(b, f.read)
		if err != nil {
			return got, err
		}
		if n == 0 {
			idle++
			continue
		}
		idle = 0
		got = append(got, b[:n]...)
	}
	return got, nil
}

// The record layer round trip: batches of every size, records whole and
// split, read back through reads of every size, what arrives in pieces
// of every size, including across a rekey (every 3 records here).
func TestSealRoundTrip(t *testing.T) {
	defer func(n uint64) { rekeyEvery = n }(rekeyEvery)
	rekeyEvery = 3
	rng := rand.New(rand.NewPCG(1, 2))
	s, o := sealPair(t)
	var plain, wire []byte
	for _, n := range []int{1, 40, maxRecord - 1, maxRecord, maxRecord + 1, 3*maxRecord + 17, 1 << 20, 5, 0, 64} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		plain = append(plain, p...)
		wire = s.seal(wire, p)
	}
	if want := len(plain) + (4+sealTag)*int(s.k.n); len(wire) != want {
		t.Fatalf("%d bytes on the wire for %d of plaintext in %d records, want %d", len(wire), len(plain), s.k.n, want)
	}
	if bytes.Contains(wire, plain[len(plain)-64:]) {
		t.Fatal("the plaintext shows on the wire")
	}
	f := &feeder{wire: wire, rng: rng}
	got, err := readAll(o, f, len(plain))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("read back %d of %d bytes (%v); equal %v", len(got), len(plain), err, bytes.Equal(got, plain))
	}
	if s.k.n < 3*rekeyEvery || bytes.Equal(s.k.key, bytes.Repeat([]byte{7}, keyLen)) || !bytes.Equal(s.k.key, o.k.key) {
		t.Errorf("after %d records: the sealer's key %x, the opener's %x", s.k.n, s.k.key, o.k.key)
	}
}

// records splits a wire of records into its records.
func records(wire []byte) [][]byte {
	var out [][]byte
	for len(wire) > 0 {
		l := 4 + int(uint32(wire[0])<<24|uint32(wire[1])<<16|uint32(wire[2])<<8|uint32(wire[3]))
		out = append(out, wire[:l])
		wire = wire[l:]
	}
	return out
}

// An altered byte anywhere, a record repeated, two records swapped, one
// dropped, or a length out of range: the opener refuses with
// errSealBroken, having handed out only the records before the damage. (A
// length made longer makes it wait for more: the bytes that come next fail
// too.)
func TestSealRefusesDamage(t *testing.T) {
	msgs := [][]byte{[]byte("first record, which lands"), []byte("second: 8-byte put of 0xdeadbeef"), []byte("third")}
	fresh := func() ([][]byte, *opener) {
		s, o := sealPair(t)
		var recs [][]byte
		for _, m := range msgs {
			recs = append(recs, s.seal(nil, m))
		}
		return recs, o
	}
	type damage struct {
		wire     func(r [][]byte) []byte
		prefix   []byte // what may be handed out
		mayStall bool   // a length made longer: no error until more comes
	}
	one, two := msgs[0], append(bytes.Clone(msgs[0]), msgs[1]...)
	cases := map[string]damage{
		"repeated":  {func(r [][]byte) []byte { return bytes.Join([][]byte{r[0], r[1], r[1], r[2]}, nil) }, two, false},
		"swapped":   {func(r [][]byte) []byte { return bytes.Join([][]byte{r[0], r[2], r[1]}, nil) }, one, false},
		"dropped":   {func(r [][]byte) []byte { return bytes.Join([][]byte{r[0], r[2]}, nil) }, one, false},
		"too long":  {func(r [][]byte) []byte { return append(bytes.Clone(r[0]), 0, 1, 0, 0) }, one, false},
		"too short": {func(r [][]byte) []byte { return append(bytes.Clone(r[0]), 0, 0, 0, 3, 1, 2, 3) }, one, false},
	}
	recs, _ := fresh()
	for i := range len(recs[1]) + len(recs[2]) {
		d := damage{prefix: one}
		at := len(recs[0]) + i
		if i >= len(recs[1]) {
			d.prefix = two
		}
		d.mayStall = i < 4 || i >= len(recs[1]) && i < len(recs[1])+4
		d.wire = func(r [][]byte) []byte {
			w := bytes.Join(r, nil)
			w[at] ^= 0x20
			return w
		}
		cases[fmt.Sprintf("byte %d", at)] = d
	}
	for name, d := range cases {
		recs, o := fresh()
		f := &feeder{wire: d.wire(recs), rng: rand.New(rand.NewPCG(3, 4))}
		got, err := readAll(o, f, 1<<20)
		if !errors.Is(err, errSealBroken) && !(d.mayStall && err == nil) {
			t.Errorf("%s: read %q, %v; want errSealBroken", name, got, err)
		}
		if !bytes.Equal(got, d.prefix) {
			t.Errorf("%s: handed out %q, want %q", name, got, d.prefix)
		}
	}
}

// The handshake's keys: a sealed handshake gives the dialer's sending key
// to the acceptor as its receiving key and the other way round, distinct
// keys per direction and per connection; a plain one gives none; an
// acceptor that seals refuses a plain dialer; and a relay that turns the
// dialer's sealed hello into a plain one fails both proofs.
func TestSealedHandshake(t *testing.T) {
	run := func(dialSealed, acceptSeals bool, alter func([]byte)) (keys, keys, error, error) {
		a, b := net.Pipe()
		if alter != nil {
			// A relay between the two that alters the hello.
			near := b
			c, far := net.Pipe()
			go func() {
				hello := make([]byte, 48)
				io.ReadFull(near, hello)
				alter(hello)
				far.Write(hello)
				go func() { io.Copy(far, near); far.Close() }()
				io.Copy(near, far)
				near.Close()
			}()
			b = c
		}
		var wg sync.WaitGroup
		var ak keys
		var aerr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer b.Close()
			_, ak, aerr = acceptHandshake(b, 1, 2, acceptSeals, jobSecret(secret), func(uint32) error { return nil })
		}()
		dk, derr := dialHandshake(a, secret, nil, 0, 1, dialSealed)
		a.Close()
		wg.Wait()
		return dk, ak, derr, aerr
	}
	dk, ak, derr, aerr := run(true, false, nil)
	if derr != nil || aerr != nil || dk.send == nil || !bytes.Equal(dk.send, ak.recv) || !bytes.Equal(dk.recv, ak.send) || bytes.Equal(dk.send, dk.recv) {
		t.Fatalf("sealed handshake: dialer %x/%x (%v), acceptor %x/%x (%v)", dk.send, dk.recv, derr, ak.send, ak.recv, aerr)
	}
	dk2, _, _, _ := run(true, true, nil)
	if bytes.Equal(dk.send, dk2.send) {
		t.Error("two connections got the same key")
	}
	if dk, ak, derr, aerr := run(false, false, nil); derr != nil || aerr != nil || dk.send != nil || ak.send != nil {
		t.Errorf("plain handshake: %v, %v, keys %v %v", derr, aerr, dk, ak)
	}
	if _, _, derr, aerr := run(false, true, nil); derr == nil || !errors.Is(aerr, errPlainRefused) {
		t.Errorf("plain dialer, sealing acceptor: %v, %v; want refused", derr, aerr)
	}
	downgrade := func(h []byte) { h[7] = '1' }
	if _, _, derr, aerr := run(true, false, downgrade); derr == nil || aerr == nil {
		t.Errorf("a relay's downgrade to plain: dialer %v, acceptor %v; want both to fail", derr, aerr)
	}
	if k1, k2, err := dataKeysPair(0, 1), dataKeysPair(1, 0), error(nil); bytes.Equal(k1, k2) || err != nil {
		t.Error("the keys do not depend on the ranks")
	}
}

func dataKeysPair(from, to uint32) []byte {
	n := bytes.Repeat([]byte{1}, nonceLen)
	d, _, _ := dataKeys(secret, from, to, n, n)
	return d
}

// relay forwards one TCP connection at a time to target, recording what
// the dialer sends; with tamper, it flips a byte in each piece after the
// handshake's two.
type relay struct {
	ln     net.Listener
	tamper bool
	mu     sync.Mutex
	seen   bytes.Buffer
}

func startRelay(t *testing.T, target string, tamper bool) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, tamper: tamper}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				defer s.Close()
				buf := make([]byte, 64<<10)
				for n := 0; ; n++ {
					k, err := c.Read(buf)
					if k > 0 {
						r.mu.Lock()
						r.seen.Write(buf[:k])
						r.mu.Unlock()
						if r.tamper && n >= 2 {
							buf[k/2] ^= 0x20
						}
						s.Write(buf[:k])
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { defer c.Close(); io.Copy(c, s) }()
		}
	}()
	return r
}

// A relay between two ranks on another "host" (SealAll on loopback):
// without sealing (SealNone) it reads a put's bytes and writes its own
// into the target's memory; sealed, it sees neither the put's bytes nor
// can it change them: the target cuts the connection off at the first
// altered record, and its memory keeps what it held.
func TestSealedRelay(t *testing.T) {
	pattern := []byte("a put whose bytes a relay must never read or change!")
	for _, c := range []struct {
		seal   SealMode
		tamper bool
	}{{SealNone, false}, {SealNone, true}, {SealAll, false}, {SealAll, true}} {
		var logs logSink
		ts := make([]*Transport, 2)
		for r := range ts {
			tr, err := Listen(Config{Rank: ftrma.Rank(r), Size: 2, Secret: secret, Spin: -1, Logger: logs.Logger(), Seal: c.seal})
			if err != nil {
				t.Fatal(err)
			}
			ts[r] = tr
			defer tr.Close()
		}
		rl := startRelay(t, ts[1].Addr(), c.tamper)
		ctx := testCtx(t)
		errc := make(chan error, 2)
		go func() { errc <- ts[0].Connect(ctx, []string{ts[0].Addr(), rl.ln.Addr().String()}) }()
		go func() { errc <- ts[1].Connect(ctx, []string{ts[0].Addr(), ts[1].Addr()}) }()
		for range 2 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		mem := words(256)
		key, _ := ts[1].Register(mem)
		ts[0].Write(1, key, 64, pattern)
		flushErr := ts[0].Flush(ctx, 1)
		rl.mu.Lock()
		seen := bytes.Contains(rl.seen.Bytes(), pattern)
		rl.mu.Unlock()
		landed := bytes.Equal(mem[64:64+len(pattern)], pattern)
		altered := !landed && !bytes.Equal(mem[64:64+len(pattern)], make([]byte, len(pattern)))
		switch {
		case c.seal == SealNone && !c.tamper && (!seen || !landed):
			t.Errorf("plain: the relay saw the put %v, it landed %v: the test cannot tell", seen, landed)
		case c.seal == SealNone && c.tamper && !altered:
			t.Errorf("plain, altered: the target's memory %q: the test cannot tell", mem[64:64+len(pattern)])
		case c.seal == SealAll && seen:
			t.Errorf("sealed: the relay read the put's bytes")
		case c.seal == SealAll && !c.tamper && (!landed || flushErr != nil):
			t.Errorf("sealed: the put landed %v, flush %v", landed, flushErr)
		case c.seal == SealAll && c.tamper && (landed || altered || flushErr == nil):
			t.Errorf("sealed, altered: flush %v, memory %q: want the connection down and the memory untouched", flushErr, mem[64:64+len(pattern)])
		}
	}
}

// Junk on the ranks' listeners: 64 connections that stay silent and 1,000
// that send garbage, opened while the ranks connect, neither keep the
// ranks apart (a silent handshake is cut off by a new one once the gate is
// full) nor flood the log (one line per source a second); the data path
// works afterwards.
func TestListenerJunk(t *testing.T) {
	var logs logSink
	const n = 3
	ts := make([]*Transport, n)
	addrs := make([]string, n)
	for r := range ts {
		tr, err := Listen(Config{Rank: ftrma.Rank(r), Size: n, Secret: secret, Spin: -1, Logger: logs.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		ts[r], addrs[r] = tr, tr.Addr()
		defer tr.Close()
	}
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for _, a := range addrs {
		for range 64 / n {
			c, err := net.Dial("tcp", a)
			if err != nil {
				t.Fatal(err)
			}
			idle = append(idle, c)
		}
	}
	junk := make(chan struct{})
	go func() {
		defer close(junk)
		for i := range 1000 {
			c, err := net.Dial("tcp", addrs[i%n])
			if err != nil {
				continue
			}
			c.Write(bytes.Repeat([]byte{byte(i)}, 64))
			c.Close()
		}
	}()
	ctx := testCtx(t)
	errc := make(chan error, n)
	for _, tr := range ts {
		go func() { errc <- tr.Connect(ctx, addrs) }()
	}
	for range ts {
		if err := <-errc; err != nil {
			t.Fatalf("connect under junk: %v", err)
		}
	}
	<-junk
	mem := words(64)
	key, _ := ts[2].Register(mem)
	if _, err := ts[0].Write(2, key, 8, []byte("after the junk")); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Flush(ctx, 2); err != nil || string(mem[8:22]) != "after the junk" {
		t.Fatalf("write after the junk: %v, memory %q", err, mem[8:22])
	}
	if lines := strings.Count(logs.String(), "refused connection"); lines > 3*n {
		t.Errorf("%d log lines of refused connections for 1,000 junk ones:\n%s", lines, logs.String())
	}
}

// One poll drains what the opener took from the socket: two records that
// arrive in one piece (two control messages) are both served by the one
// poll that read them. A poller that stopped after the first (a waiter
// that got its own answer) stranded the second: the socket was empty, so
// no readiness event would wake the progress goroutine for it (the stall
// the store's workload between namespace hosts met, found by CI).
func TestSealedPollDrainsTheOpener(t *testing.T) {
	tr, err := Listen(Config{Rank: 0, Size: 2, Secret: secret, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	rec := newRecorder()
	tr.SetReceiver(rec)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	far, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	near, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer near.Close()
	// Rank 1's peer, with the connection's state set as attach would,
	// but no goroutine of its own: the test is the only poller.
	key := bytes.Repeat([]byte{9}, keyLen)
	rk, _ := newRecordKey(key)
	sk, _ := newRecordKey(key)
	p := tr.peers[1]
	rc, _ := near.(*net.TCPConn).SyscallConn()
	rc.Control(func(fd uintptr) { p.fd = int(fd) })
	p.conn, p.rc, p.open, p.rbuf = near.(*net.TCPConn), rc, newOpener(rk), make([]byte, 256<<10)
	s := &sealer{k: sk}
	wire := s.seal(nil, appendMsg(nil, []byte("first")))
	wire = s.seal(wire, appendMsg(nil, []byte("second")))
	if _, err := far.Write(wire); err != nil {
		t.Fatal(err)
	}
	for {
		p.rmu.Lock()
		n, err := p.pollLocked()
		p.rmu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.msgs) != 2 {
		t.Fatalf("the poll that read both records served %q", rec.msgs)
	}
}
