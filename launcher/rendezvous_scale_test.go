package launcher

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/verbs"
)

// scaleRanks is the size of the job of TestRendezvousScale: the issue's
// aim. Version 1 of the rendezvous could not start a verbs job of more than
// about 570 ranks (a publish frame was at most jobwire.MaxSmallFrame).
//
// Under the race detector the test runs raceScaleRanks, still beyond version
// 1's reach: the detector slows the O(size²) work it would add nothing to
// (making, moving and checking 4,096 columns) by 10 to 20 times.
const (
	scaleRanks     = 4096
	raceScaleRanks = 640
)

// verbsJob makes the verbs addresses of a job of n ranks, the layout of
// verbs.Address without a device: rank q's common part (port, PSN, MTU, key
// table) and the number of its queue pair for rank r, unique per pair.
type verbsJob struct {
	n       int
	commons []string // commons[q]: rank q's common part, by verbs.Address.Common
}

func newVerbsJob(n int) *verbsJob {
	j := &verbsJob{n: n, commons: make([]string, n)}
	for q := range n {
		j.commons[q] = j.address(q, false).Common()
	}
	return j
}

// address is rank q's verbs address, with its queue pair numbers if qpns.
func (j *verbsJob) address(q int, qpns bool) verbs.Address {
	a := verbs.Address{LID: uint16(q/16 + 1), PSN: uint32(q*7919) & 0xffffff, MTU: 5,
		Table: 0x7f00_0000_0000 + uint64(q)<<24, TableKey: uint32(q*31 + 0x1000)}
	copy(a.GID[:], net.ParseIP(fmt.Sprintf("fd00::%x:%x", q/16, q%16)))
	if qpns {
		a.QPN = make([]uint32, j.n)
		for r := range a.QPN {
			a.QPN[r] = j.qpn(q, r)
		}
	}
	return a
}

// qpn is the number of rank q's queue pair for rank r: distinct for every
// pair (n*n <= 2^24), and of 1 to 6 hexadecimal digits.
func (j *verbsJob) qpn(q, r int) uint32 { return (uint32(q*j.n+r) ^ 0x5a5a5a) & 0xffffff }

// part is rank q's part for rank r, as verbs.SplitAddress makes it.
func (j *verbsJob) part(b []byte, q, r int) []byte {
	v := j.qpn(q, r)
	for i := verbs.PartWidth - 1; i >= 0; i-- {
		b[i] = "0123456789abcdef"[v&0xf]
		v >>= 4
	}
	return b[:verbs.PartWidth]
}

// published is rank q's address as it publishes it.
func (j *verbsJob) published(q int) jobwire.Addr {
	parts := make([]byte, j.n*verbs.PartWidth)
	for r := range j.n {
		j.part(parts[r*verbs.PartWidth:], q, r)
	}
	return jobwire.Addr{Common: j.commons[q], Width: verbs.PartWidth, Parts: string(parts)}
}

// wholeLen is the length of rank q's whole address (verbs.Address.String),
// what version 1 published and sent every rank.
func (j *verbsJob) wholeLen(q int) int {
	l := len(j.commons[q]) + j.n - 1 // the commas
	for r := range j.n {
		l += len(strconv.FormatUint(uint64(j.qpn(q, r)), 16))
	}
	return l
}

// check checks rank r's list: every peer's address as r needs it.
func (j *verbsJob) check(r int, list []string) error {
	if len(list) != j.n {
		return fmt.Errorf("%d addresses for %d ranks", len(list), j.n)
	}
	var buf [verbs.PartWidth]byte
	for q, got := range list {
		c := j.commons[q]
		if len(got) != len(c)+verbs.PartWidth || got[:len(c)] != c || got[len(c):] != string(j.part(buf[:], q, r)) {
			return fmt.Errorf("rank %d's address %q, want %q + %q", q, got, c, j.part(buf[:], q, r))
		}
	}
	// The verbs decoder reads one peer's as the address of r's queue pair.
	q := (r + 1) % j.n
	a, err := verbs.ParseAddress(list[q])
	if err != nil || len(a.QPN) != 1 || a.QPN[0] != j.qpn(q, r) || a.Common() != j.commons[q] {
		return fmt.Errorf("rank %d's address %q decodes as %+v, %v; want the queue pair %x", q, list[q], a, err, j.qpn(q, r))
	}
	return nil
}

// countConn counts the bytes through a connection.
type countConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// A job of 4,096 ranks whose addresses are verbs addresses (one queue pair
// number per peer) completes its rendezvous, and every rank gets every
// peer's common part and the number of the queue pair that peer made for
// it, and nothing more: O(size) bytes. Version 1 sent every rank every whole
// address, O(size²) bytes: at this size over jobwire.MaxAddrsFrame, each
// address over jobwire.MaxAddr. The ranks are goroutines, each on its own
// TLS connection over loopback as real ranks are. The test logs the bytes
// per rank and in all, of version 1 (computed) and of this one (measured).
func TestRendezvousScale(t *testing.T) {
	n := scaleRanks
	if raceEnabled {
		n = raceScaleRanks
	}
	j := newVerbsJob(n)
	// The synthetic layout is the encoder's: SplitAddress of the whole.
	for _, q := range []int{0, n - 1} {
		common, parts, err := verbs.SplitAddress(j.address(q, true).String())
		a, err2 := jobwire.SplitAddr(common, parts)
		if err != nil || err2 != nil || a != j.published(q) {
			t.Fatalf("rank %d's address, split by verbs: %v, %v; differs from the test's", q, err, err2)
		}
	}

	s, logs := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sc := &scaleRun{j: j, server: s.addr(),
		// The ranks dial a few at a time, as the ranks of a real job
		// start spread over its hosts: 4,096 connects at once overflow
		// loopback's accept queue, which costs a retransmission a second
		// later.
		dialing: make(chan struct{}, 128),
		// They read and check their lists a few at a time, so that the
		// test holds a few lists, not 4,096; the server's writes to the
		// others wait meanwhile.
		checking: make(chan struct{}, 4*runtime.GOMAXPROCS(0)),
	}
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = sc.rank(ctx, r) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	failed := 0
	for r, err := range errs {
		if err != nil {
			if failed++; failed <= 5 {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d ranks failed; server log:\n%s", failed, n, logs)
	}
	if logs.String() != "" {
		t.Errorf("server log:\n%s", logs)
	}

	// Linear: a rank's list is every common part and one part of each
	// address, the same length for every rank.
	list := 4
	for q := range n {
		list += 2 + len(j.commons[q]) + 1 + verbs.PartWidth
	}
	if got := sc.listBytes.Load(); got != int64(n)*int64(list) {
		t.Errorf("the lists took %d bytes, want %d × %d", got, n, list)
	}
	// What version 1 moved: every whole address to every rank.
	v1Addr, v1List := 0, 4
	for q := range n {
		l := j.wholeLen(q)
		v1Addr += l
		v1List += 2 + l
	}
	v1Addr /= n
	if v1Addr <= jobwire.MaxSmallFrame {
		t.Errorf("addresses of %d bytes, which version 1 took: the test is not at the scale it claims", v1Addr)
	}
	if n == scaleRanks && (v1List <= jobwire.MaxAddrsFrame || v1Addr <= jobwire.MaxAddr) {
		t.Errorf("a list of %d bytes, addresses of %d: version 1's limits held", v1List, v1Addr)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	t.Logf("%d ranks with verbs addresses: rendezvous in %v (GOMAXPROCS %d)", n, elapsed.Round(time.Millisecond), runtime.GOMAXPROCS(0))
	t.Logf("version 1: published %d B per rank (over MaxSmallFrame %d, its limit), list %d B per rank, %.0f MiB to all ranks",
		v1Addr, jobwire.MaxSmallFrame, v1List, mib(int64(v1List)*int64(n)))
	t.Logf("version 2: published %d B per rank (MaxPublish(%d) %d), list %d B per rank, %.0f MiB to all ranks",
		sc.publishBytes.Load()/int64(n), n, jobwire.MaxPublish(n), list, mib(sc.listBytes.Load()))
	t.Logf("version 2 on the wire (TLS, handshakes included): %d B to each rank, %d B from each, %.0f MiB in all",
		sc.in.Load()/int64(n), sc.out.Load()/int64(n), mib(sc.in.Load()+sc.out.Load()))
}

// scaleRun is the ranks of TestRendezvousScale.
type scaleRun struct {
	j                 *verbsJob
	server            string
	dialing, checking chan struct{} // tokens of the ranks dialing, checking
	in, out           atomic.Int64  // bytes on the wire, as the ranks count them
	listBytes         atomic.Int64  // bytes of the addrs payloads
	publishBytes      atomic.Int64  // bytes of the publish payloads
}

// rank runs rank r's rendezvous and checks its list.
func (sc *scaleRun) rank(ctx context.Context, r int) error {
	sc.dialing <- struct{}{}
	dialing := true
	defer func() {
		if dialing {
			<-sc.dialing
		}
	}()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", sc.server)
	if err != nil {
		return err
	}
	defer raw.Close()
	deadline, _ := ctx.Deadline()
	c, err := jobwire.DialRendezvous(countConn{raw, &sc.in, &sc.out}, hostSecret0, 0, deadline)
	if err != nil {
		return err
	}
	c.SetDeadline(deadline)
	if err := jobwire.ClientHandshake(c, hostSecret0, jobwire.RendezvousHandshake, uint32(r)); err != nil {
		return err
	}
	pub := sc.j.published(r).Append(nil)
	sc.publishBytes.Add(int64(len(pub)))
	if err := jobwire.WriteFrame(c, jobwire.MsgPublish, pub); err != nil {
		return err
	}
	<-sc.dialing
	dialing = false

	sc.checking <- struct{}{}
	defer func() { <-sc.checking }()
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxAddrsFrame)
	if err != nil {
		return err
	}
	if err := jobwire.ExpectFrom(typ, p, jobwire.MsgAddrs, "addresses", "launcher"); err != nil {
		return err
	}
	sc.listBytes.Add(int64(len(p)))
	list, err := jobwire.ParseAddrs(p)
	if err != nil {
		return err
	}
	return sc.j.check(r, list)
}
