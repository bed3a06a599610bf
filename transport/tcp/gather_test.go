package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// A large read's answer leaves the target's memory only when the batch is
// answered; it must still hold the memory as it was when the read was
// served: whatever the connection carries after the read (a write, a large
// write landing straight from the socket, an atomic, a control message
// whose receiver changes the memory) acts after the answer has its bytes.
func TestLargeReadAnswerPrecedesLaterFrames(t *testing.T) {
	const size = 1 << 20
	ts, _ := cluster(t, 2, 0)
	ctx := testCtx(t)
	mem := words(2 * size)
	key, err := ts[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	target := unsafeWords(mem)
	// The receiver of rank 1 changes the memory when told to.
	rec := newRecorder()
	rec.onMsg = func(ftrma.Rank, []byte) { atomic.StoreUint64(&target[0], ^atomic.LoadUint64(&target[0])) }
	ts[1].SetReceiver(rec)
	var res uint64
	later := []struct {
		name string
		post func() error
	}{
		{"write", func() error { _, err := ts[0].Write(1, key, 0, make([]byte, 8)); return err }},
		{"large write", func() error { _, err := ts[0].Write(1, key, 0, make([]byte, 2*directBytes)); return err }},
		{"compare-and-swap", func() error {
			old := atomic.LoadUint64(&target[0])
			_, err := ts[0].CompareAndSwap64(1, key, 0, old, ^old, &res)
			return err
		}},
		{"fetch-and-add", func() error { _, err := ts[0].FetchAndAdd64(1, key, 0, 1, &res); return err }},
		{"control message", func() error { return ts[0].Send(1, []byte("flip")) }},
	}
	for i, c := range later {
		// Atomics: in race builds the target's goroutines load and
		// store these words atomically.
		want := make([]uint64, size/8)
		for j := range target {
			atomic.StoreUint64(&target[j], uint64(i+1)<<32|uint64(j))
			if j < len(want) {
				want[j] = atomic.LoadUint64(&target[j])
			}
		}
		dst := make([]byte, size)
		// Both go out in one batch: the read is held until the flush.
		if _, err := ts[0].Read(1, key, 0, dst); err != nil {
			t.Fatal(err)
		}
		if err := c.post(); err != nil {
			t.Fatal(err)
		}
		if err := ts[0].Flush(ctx, 1); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.name == "control message" {
			waitFor(t, func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return len(rec.msgs) > 0
			}, "the control message")
		}
		if atomic.LoadUint64(&target[0]) == want[0] {
			t.Fatalf("%s: the memory did not change", c.name)
		}
		if !bytes.Equal(dst, unsafeBytes(want)) {
			t.Errorf("%s after a read in the same batch: the read saw the memory after it", c.name)
		}
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	c.(*net.TCPConn).SetNoDelay(true)
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// gatherPeer returns a peer writing to c, with no goroutines, whose
// transport's memory holds one region of n pattern bytes, and the
// region's key.
func gatherPeer(t *testing.T, c *net.TCPConn, n int) (*peer, transport.Key, []byte) {
	t.Helper()
	tr := &Transport{cfg: Config{Rank: 0, Size: 2}}
	p := newPeer(tr, 1)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	p.conn, p.rc = c, rc
	mem := words(n)
	for i := range mem {
		mem[i] = byte(i*13 + i>>11)
	}
	key, err := tr.mem.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	return p, key, mem
}

// appendReadAnswer notes a read answer of n bytes at off of key that goes
// at the end of reply, as serve does.
func appendReadAnswer(reply []byte, seq uint64, key transport.Key, off uint64, n int) ([]byte, seg) {
	return reply, seg{at: len(reply), seq: seq, key: key, off: off, n: n}
}

// TestGather sends queued frames and read answers whose payloads come from
// memory, with the socket taking everything at once or only part (the rest
// is returned, copied), and a region gone or too small since the read was
// served (its answer reports the error, without payload).
func TestGather(t *testing.T) {
	for _, full := range []bool{false, true} {
		c, s := tcpPair(t)
		const n = 1 << 20
		p, key, mem := gatherPeer(t, c, 2*n)
		gone, err := p.t.mem.Register(make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.t.mem.Deregister(gone); err != nil {
			t.Fatal(err)
		}
		if !full {
			// A socket that takes far less than the answers.
			c.SetWriteBuffer(64 << 10)
			s.SetReadBuffer(64 << 10)
		}
		pre := appendMsg(nil, []byte("before"))
		var reply []byte
		var segs []seg
		add := func(seq uint64, key transport.Key, off uint64, n int) {
			var sg seg
			reply, sg = appendReadAnswer(reply, seq, key, off, n)
			segs = append(segs, sg)
		}
		add(1, key, 3, n)
		reply = appendReply(reply, frameAtomicReply, 2, transport.StatusOK, 42, nil)
		add(3, gone, 0, directBytes)
		add(4, key, n, n+8) // past the end
		add(5, key, 8, directBytes)
		reply = appendDone(reply, 5)

		got := make(chan []byte, 1)
		read := func() {
			b, _ := io.ReadAll(s)
			got <- b
		}
		if full {
			go read()
		}
		rest, err := p.gather(pre, reply, segs)
		if err != nil {
			t.Fatal(err)
		}
		if !full {
			if len(rest) == 0 {
				t.Fatal("the socket took everything: the partial path is not tested")
			}
			go read()
		}
		if _, err := c.Write(rest); err != nil {
			t.Fatal(err)
		}
		c.CloseWrite()
		stream := <-got

		type want struct {
			typ    byte
			seq    uint64
			status uint8
			data   []byte
		}
		wants := []want{
			{frameMsg, 0, 0, []byte("before")},
			{frameReadReply, 1, transport.StatusOK, mem[3 : 3+n]},
			{frameAtomicReply, 2, transport.StatusOK, nil},
			{frameReadReply, 3, transport.StatusUnknownRegion, nil},
			{frameReadReply, 4, transport.StatusOutOfBounds, nil},
			{frameReadReply, 5, transport.StatusOK, mem[8 : 8+directBytes]},
			{frameDone, 5, 0, nil},
		}
		// The first answer, written from memory, is padded so that its
		// payload has the same offset modulo 64 in the stream as in memory.
		if f, m, err := parseFrame(stream[len(pre):]); err != nil || m == 0 || stream[len(pre)+4] != frameReadReplyPad {
			t.Fatalf("full %v: the first answer is not padded (type %d, %v)", full, stream[len(pre)+4], err)
		} else if off, addr := len(pre)+m-len(f.data), uintptr(unsafe.Pointer(&mem[3])); uintptr(off)%64 != addr%64 {
			t.Fatalf("full %v: the payload is at %d in the stream, %d modulo 64 in memory", full, off, addr%64)
		}
		for i, w := range wants {
			f, m, err := parseFrame(stream)
			if err != nil || m == 0 {
				t.Fatalf("full %v: frame %d: %v (%d bytes left)", full, i, err, len(stream))
			}
			if f.typ != w.typ || f.seq != w.seq || f.status != w.status || !bytes.Equal(f.data, w.data) {
				t.Fatalf("full %v: frame %d: type %d seq %d status %d, %d bytes; want type %d seq %d status %d, %d bytes",
					full, i, f.typ, f.seq, f.status, len(f.data), w.typ, w.seq, w.status, len(w.data))
			}
			stream = stream[m:]
		}
		if len(stream) != 0 {
			t.Fatalf("full %v: %d bytes after the last frame", full, len(stream))
		}
		// No pin is left: Deregister does not wait.
		if err := p.t.mem.Deregister(key); err != nil {
			t.Fatal(err)
		}
	}
}

// appendAnswers, the copying path (another goroutine owns the socket),
// gives the same bytes as the direct one.
func TestAppendAnswers(t *testing.T) {
	c, _ := tcpPair(t)
	p, key, mem := gatherPeer(t, c, 1<<20)
	reply := appendReply(nil, frameAtomicReply, 6, transport.StatusOK, 42, nil)
	reply, s1 := appendReadAnswer(reply, 7, key, 16, directBytes)
	reply, s2 := appendReadAnswer(reply, 8, key+1, 0, directBytes)
	reply = appendDone(reply, 8)
	b := p.appendAnswers([]byte("x"), reply, 0, []seg{s1, s2})
	if b[0] != 'x' {
		t.Fatal("appendAnswers lost what it appends to")
	}
	b = b[1:]
	f, m, err := parseFrame(b)
	if err != nil || f.typ != frameAtomicReply || f.seq != 6 || f.a != 42 {
		t.Fatalf("the answer before: type %d seq %d, %v", f.typ, f.seq, err)
	}
	b = b[m:]
	f, m, err = parseFrame(b)
	if err != nil || f.typ != frameReadReply || f.seq != 7 || f.status != transport.StatusOK || !bytes.Equal(f.data, mem[16:16+directBytes]) {
		t.Fatalf("first answer: %+v, %v", f.typ, err)
	}
	f, n, err := parseFrame(b[m:])
	if err != nil || f.typ != frameReadReply || f.seq != 8 || !errors.Is(transport.ErrOfStatus(f.status), ftrma.ErrUnknownRegion) || len(f.data) != 0 {
		t.Fatalf("second answer: type %d seq %d status %d, %v", f.typ, f.seq, f.status, err)
	}
	f, _, err = parseFrame(b[m+n:])
	if err != nil || f.typ != frameDone || f.seq != 8 {
		t.Fatalf("completion: type %d seq %d, %v", f.typ, f.seq, err)
	}
}
