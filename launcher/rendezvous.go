package launcher

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
)

// rvConfig configures the job side of the rendezvous.
type rvConfig struct {
	// Size is the number of ranks of the job (>= 1), spares included.
	Size int
	// Initial is the number of ranks that start at once, 0..Initial-1;
	// the rendezvous completes when they have published. Ranks Initial..
	// Size-1 are spares (ftrun --respawn): absent until the job starts one
	// (expect) and admits it (admit). 0 means Size: no spares.
	Initial int
	// Secret is the job's ranks secret: each rank proves the secret of its
	// host, jobwire.HostSecret of it.
	Secret []byte
	// HostOf is the host (an index among the job's hosts) of each of the
	// first ranks, 0..Initial-1, which a rank must prove the secret of; nil
	// means host 0 for every one. A spare's host comes with expect.
	HostOf []int
	// ListenAddr is where to listen. Default "127.0.0.1:0".
	ListenAddr string
	// HandshakeTimeout bounds how long a new connection may take to
	// authenticate and publish its address. Default 10 s. At most Size +
	// maxHandshakes handshakes run at once; a new connection beyond that
	// cuts off the oldest (seclink.Gate), so that silent connections
	// cannot keep the job's ranks out for this long.
	HandshakeTimeout time.Duration
	// Logger reports refused connections and ranks' errors (warnings);
	// nil means ftrma.Logger().
	Logger *slog.Logger
	// Suspect is called when rank by reports that its failure detector
	// declared rank r failed. It may be nil.
	Suspect func(r, by ftrma.Rank)
	// Spawn serves rank by's request for k spares (jobwire.MsgSpawn): it
	// returns the spares started and admitted, and an error if it
	// stopped short of k. It is called on a goroutine of its own and must
	// return within a bounded time. nil: every request is refused (a job
	// without spares).
	Spawn func(by ftrma.Rank, k int, payload []byte, near []ftrma.Rank) ([]ftrma.Rank, error)
	// Complete, if not nil, is called on a goroutine of its own with the
	// first ranks' addresses once the rendezvous completed.
	Complete func(addrs []jobwire.Addr)
	// logEvery is how often a source's refused connections are logged at
	// most (0: one line a second; negative: every one, for tests).
	logEvery time.Duration
	// maxAddrsFrame bounds the addrs frame, for tests. Default
	// jobwire.MaxAddrsFrame.
	maxAddrsFrame int
}

// rvServer is the launcher's rendezvous server: it authenticates each rank,
// collects the ranks' transport addresses, sends every rank its list of them
// once all have published (each address as that rank gets it: the common
// part and the part for it, see jobwire.Addr), and then holds each rank's
// connection open.
//
// The rendezvous either completes (every rank published) or fails (a rank
// exited first, see rankExited, or the address list would be too long, see
// publish); both are final, and ready is closed on either.
//
// With spares (rvConfig.Initial < Size) "every rank" is the first ranks;
// the spares' entries in their lists are empty. A spare joins later, one
// at a time: the job starts its process (expect), waits for its address
// (awaitSpare) and admits it (admit), which tells every live rank; the
// protocol is in internal/jobwire/spawn.go. Spawn requests from the ranks
// go to rvConfig.Spawn (serveSpawn).
type rvServer struct {
	cfg   rvConfig
	ln    net.Listener
	wg    sync.WaitGroup // the accept loop and one goroutine per connection
	quit  chan struct{}  // closed by close
	ready chan struct{}  // closed when the rendezvous completed or failed
	// refusals rate-limits the log lines of refused connections.
	refusals *seclink.Refusals
	gate     *seclink.Gate // the handshakes under way (Size + maxHandshakes)

	mu        sync.Mutex            // guards the fields below
	conns     map[net.Conn]struct{} // open connections; close closes them
	joined    []bool                // joined[r]: a connection authenticated as rank r and has not given up
	addrs     []jobwire.Addr        // addrs[r]: rank r's published address, zero (Common "") until published; its Parts are dropped once complete
	published int                   // number of ranks that published; == Size once complete
	commons   []byte                // once complete: the first half of every rank's addrs payload (jobwire.AppendCommons); nil before
	columns   [][]byte              // once complete: columns[r] the second half of rank r's (jobwire.Columns), nil once sent
	listLen   int                   // once complete: the length of every rank's addrs payload
	failure   string                // why the rendezvous cannot complete; "" unless failed
	closed    bool
	super     []net.Conn // super[r]: rank r's supervision channel once it has the list
	gone      []bool     // gone[r]: rank r's process exited
	revoked   []bool     // revoked[r]: rank r's lease is no longer renewed (revoke)
	// bound, once set (boundLeases, ftrun --arbiter), bounds every lease
	// grant by ftrun's host lease from the job's arbiter.
	bound     atomic.Pointer[leaseBound]
	revokedAt []time.Time     // when
	probes    []chan struct{} // probes[r]: closed when rank r answers the probe under way
	leaving   []bool          // leaving[r]: rank r said it leaves on purpose
	hungUp    []chan struct{} // hungUp[r]: closed when rank r's process closed its supervision channel
	connected []bool          // connected[r]: rank r's transport is connected (jobwire.MsgConnected)
	started   bool            // jobwire.MsgStart went out

	// Spares (see jobwire/spawn.go).
	present   []bool          // present[r]: r is one of the first ranks, or a spare admitted
	expecting []bool          // expecting[r]: spare r was started (expect) and may join
	hostOf    []int           // hostOf[r]: the host rank r must prove the secret of (rvConfig.HostOf, expect)
	spareDone []chan struct{} // spareDone[r]: made by expect, closed when spare r published or ended
	spareErr  []string        // spareErr[r]: why spare r will not be admitted; "" while it may be
	spareList [][]byte        // spareList[r]: once spare r published, its addrs payload (nil once sent)
	roster    [][]byte        // roster[r]: once spare r published, its roster payload
	partsFor  [][]string      // partsFor[r-Initial][q]: once complete, the part rank q published for spare r ("" for none)
	admits    []ftrma.Rank    // the spares admitted, in order; their addresses (whole) stay in addrs
	seen      []int           // seen[r]: how many of admits rank r's address list covers
	payloads  [][]byte        // payloads[r]: spare r's spawn payload, for its admissions

	wmu sync.Mutex // serializes writes on supervision channels
}

// listenRendezvous starts a rendezvous server.
// maxHostIndex bounds the host a rank names before TLS: above it, no key
// is derived.
const maxHostIndex = 1 << 20

func listenRendezvous(cfg rvConfig) (*rvServer, error) {
	if cfg.Size < 1 {
		return nil, fmt.Errorf("launcher: rendezvous for %d ranks: %w", cfg.Size, ftrma.ErrInvalid)
	}
	if cfg.Initial == 0 {
		cfg.Initial = cfg.Size
	}
	if cfg.Initial < 1 || cfg.Initial > cfg.Size {
		return nil, fmt.Errorf("launcher: rendezvous for %d ranks of %d: %w", cfg.Initial, cfg.Size, ftrma.ErrInvalid)
	}
	if len(cfg.Secret) < jobwire.MinSecret {
		return nil, fmt.Errorf("launcher: rendezvous secret of %d bytes, want >= %d: %w", len(cfg.Secret), jobwire.MinSecret, ftrma.ErrInvalid)
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = ftrma.Logger()
	}
	if cfg.maxAddrsFrame <= 0 {
		cfg.maxAddrsFrame = jobwire.MaxAddrsFrame
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: %w", err)
	}
	s := &rvServer{
		refusals:  seclink.NewRefusals(cmp.Or(max(cfg.logEvery, 0), time.Second)),
		cfg:       cfg,
		ln:        ln,
		quit:      make(chan struct{}),
		gate:      seclink.NewGate(cfg.Size + maxHandshakes),
		ready:     make(chan struct{}),
		conns:     make(map[net.Conn]struct{}),
		joined:    make([]bool, cfg.Size),
		addrs:     make([]jobwire.Addr, cfg.Size),
		super:     make([]net.Conn, cfg.Size),
		gone:      make([]bool, cfg.Size),
		revoked:   make([]bool, cfg.Size),
		revokedAt: make([]time.Time, cfg.Size),
		probes:    make([]chan struct{}, cfg.Size),
		leaving:   make([]bool, cfg.Size),
		hungUp:    make([]chan struct{}, cfg.Size),
		connected: make([]bool, cfg.Size),
		present:   make([]bool, cfg.Size),
		expecting: make([]bool, cfg.Size),
		hostOf:    make([]int, cfg.Size),
		spareDone: make([]chan struct{}, cfg.Size),
		spareErr:  make([]string, cfg.Size),
		spareList: make([][]byte, cfg.Size),
		roster:    make([][]byte, cfg.Size),
		seen:      make([]int, cfg.Size),
		payloads:  make([][]byte, cfg.Size),
	}
	if cfg.HostOf != nil {
		if len(cfg.HostOf) != cfg.Initial {
			ln.Close()
			return nil, fmt.Errorf("launcher: rendezvous: hosts of %d ranks for %d: %w", len(cfg.HostOf), cfg.Initial, ftrma.ErrInvalid)
		}
		copy(s.hostOf, cfg.HostOf)
	}
	for r := range cfg.Initial {
		s.present[r] = true
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// addr is the host:port ranks dial.
func (s *rvServer) addr() string { return s.ln.Addr().String() }

// rankExited tells the server that rank r's process is gone (why says how,
// e.g. "exited with status 1"; clean: it exited with status 0). Before the rendezvous completes that makes it
// fail: the ranks waiting for the address list, and any that connect later,
// get an error instead of waiting forever. After completion it changes
// nothing yet.
//
// After completion every other rank is told at once on its supervision
// channel, which beats any heartbeat timeout.
func (s *rvServer) rankExited(r ftrma.Rank, why string, clean bool) {
	s.mu.Lock()
	if clean && s.leaving[r] {
		// A rank that announced its departure and exited with status 0
		// finished; it did not fail, and the ranks connected to it saw it
		// leave. A spare that joined may not have: its address list may
		// name r live, and it would wait for r's connection for ever. It
		// hears of the exit (and counts r failed: no loss, r is gone).
		var tell []net.Conn
		for q := s.cfg.Initial; q < s.cfg.Size; q++ {
			if c := s.super[q]; c != nil && ftrma.Rank(q) != r && !s.gone[q] && s.roster[q] != nil {
				tell = append(tell, c)
			}
		}
		s.mu.Unlock()
		s.notify(tell, jobwire.AppendFrame(nil, jobwire.MsgExit, jobwire.RankPayload(r)))
		return
	}
	s.gone[r] = true
	if !s.present[r] {
		// A spare that ended before its admission: nobody knew of it,
		// and nobody is told. Its spawn fails.
		s.failSpareLocked(r, fmt.Sprintf("spare rank %d %s before it joined", r, why))
		s.mu.Unlock()
		return
	}
	if s.commons == nil && s.failure == "" {
		s.failure = fmt.Sprintf("rank %d %s before the rendezvous completed", r, why)
		close(s.ready)
	}
	var tell []net.Conn
	for q, c := range s.super {
		if c != nil && ftrma.Rank(q) != r {
			tell = append(tell, c)
		}
	}
	s.mu.Unlock()
	s.notify(tell, jobwire.AppendFrame(nil, jobwire.MsgExit, jobwire.RankPayload(r)))
	s.maybeStart()
}

// leaseBound is ftrun's host lease from the job's arbiter, which bounds
// the ranks' leases of ftrun's own host as an agent's supervisor bounds
// its host's (supervisorGrant): no grant while ftrun's node does not act,
// none past its host lease. The grant then carries its term
// (jobwire.GrantPayload).
type leaseBound struct {
	term  time.Duration
	lease func() (acting bool, end time.Time)
}

// boundLeases bounds every grant from now on by lease (leaseBound).
func (s *rvServer) boundLeases(term time.Duration, lease func() (bool, time.Time)) {
	s.bound.Store(&leaseBound{term: term, lease: lease})
}

// probe asks rank r whether it runs and reports whether it answered
// within d (on its supervision channel: a process that answers is slow,
// not failed).
func (s *rvServer) probe(r ftrma.Rank, d time.Duration) bool {
	s.mu.Lock()
	c := s.super[r]
	if c == nil || s.gone[r] {
		s.mu.Unlock()
		return false
	}
	ch := s.probes[r]
	if ch == nil {
		ch = make(chan struct{})
		s.probes[r] = ch
	}
	s.mu.Unlock()
	s.notify([]net.Conn{c}, jobwire.AppendFrame(nil, jobwire.MsgProbe, nil))
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	case <-s.quit:
		return false
	}
}

// hungUpChan returns a channel closed once rank r's process has closed its
// supervision channel without leaving (hangUp).
func (s *rvServer) hungUpChan(r ftrma.Rank) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hungUp[r] == nil {
		s.hungUp[r] = make(chan struct{})
	}
	return s.hungUp[r]
}

// hangUp records that rank r's end of its supervision channel closed (its
// kernel sent FIN or RST) while the rank had not said it leaves. A rank
// holds that connection for its whole life and never closes it early, and
// a rank whose channel breaks stops at once (startup: it can no longer
// renew its lease), so the process is gone, or stopping: nothing of it
// acts any more. Silence (a cut link) is not a hang-up.
func (s *rvServer) hangUp(r ftrma.Rank) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaving[r] {
		return
	}
	if s.hungUp[r] == nil {
		s.hungUp[r] = make(chan struct{})
	}
	select {
	case <-s.hungUp[r]:
	default:
		close(s.hungUp[r])
	}
}

// revoke stops renewing rank r's lease (jobwire.LeaseTerm) and returns
// when it did: from then on r cannot hold a lease past the returned time
// plus LeaseTerm, by its own clock, and 1.5 terms after it r has
// stopped acting or exited.
func (s *rvServer) revoke(r ftrma.Rank) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked[r] {
		return s.revokedAt[r]
	}
	s.revoked[r], s.revokedAt[r] = true, time.Now()
	return s.revokedAt[r]
}

// maybeStart sends start to every rank once every rank that has not exited
// said its transport is connected. Transports that do not wait for start
// never send connected; then start never goes out, which costs nothing.
func (s *rvServer) maybeStart() {
	s.mu.Lock()
	if s.started || s.commons == nil {
		s.mu.Unlock()
		return
	}
	any := false
	for r := range s.connected {
		if !s.connected[r] && !s.gone[r] && s.present[r] {
			s.mu.Unlock()
			return
		}
		any = any || s.connected[r]
	}
	if !any {
		s.mu.Unlock()
		return
	}
	s.started = true
	var tell []net.Conn
	for q, c := range s.super {
		if c != nil && !s.gone[q] {
			tell = append(tell, c)
		}
	}
	s.mu.Unlock()
	s.notify(tell, jobwire.AppendFrame(nil, jobwire.MsgStart, nil))
}

// notify writes frame to every connection, bounded in time: a rank too slow to
// take it is not worth stalling the launcher for.
func (s *rvServer) notify(conns []net.Conn, frame []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, c := range conns {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(frame)
		c.SetWriteDeadline(time.Time{})
	}
}

// close stops accepting, closes every connection and waits for the server's
// goroutines.
func (s *rvServer) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *rvServer) acceptLoop() {
	defer s.wg.Done()
	warn := func(format string, a ...any) { s.cfg.Logger.Warn(fmt.Sprintf(format, a...)) }
	acceptEach(s.ln, s.quit, "rendezvous", warn, func(c net.Conn) bool {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return false
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
		return true
	})
}

// serve runs one rank's conversation and then holds the connection until the
// rank closes it or the server closes: the handshake, the address list,
// then the connection as the rank's supervision channel.
func (s *rvServer) serve(raw net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, raw)
		s.mu.Unlock()
		raw.Close()
	}()
	c, rank, ok := s.admitRank(raw)
	if !ok {
		return
	}
	select {
	case <-s.ready:
	case <-s.quit:
		return
	}
	c.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	if err := s.sendList(c, rank); err != nil {
		return // the rank is gone; its exit is reported by whoever watches it
	}
	if err := s.superviseFrom(c, rank); err != nil {
		return
	}
	c.SetWriteDeadline(time.Time{})
	defer func() {
		s.mu.Lock()
		s.super[rank] = nil
		s.mu.Unlock()
	}()
	// The connection is now rank's supervision channel: the launcher sends
	// exit notices, the rank sends its detector's suspicions.
	for {
		typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSuperFrame)
		if err != nil {
			if jobwire.ClosedByPeer(err) {
				s.hangUp(rank)
			}
			return
		}
		if err := s.superFrame(c, rank, typ, p); err != nil {
			s.cfg.Logger.Warn(fmt.Sprintf("rendezvous: rank %d: %v", rank, err), ftrma.LogRank, rank)
			return
		}
	}
}

// admitRank runs the handshake of a new connection within
// HandshakeTimeout: the host's proof (jobwire.AcceptRendezvous) and the
// rank's (handshake). It reports a refusal, unless the server is closing.
func (s *rvServer) admitRank(raw net.Conn) (net.Conn, ftrma.Rank, bool) {
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	// A slot of the gate for the whole handshake: when all are taken, the
	// oldest handshake under way is cut off (see seclink.Gate).
	release := s.gate.Admit(raw)
	defer release()
	refuse := func(addr net.Addr, err error) {
		select {
		case <-s.quit: // closing: not worth a report
		default:
			s.refused(addr, err.Error())
		}
	}
	c, host, secret, err := jobwire.AcceptRendezvous(raw, func(h int) ([]byte, error) {
		if h < 0 || h > maxHostIndex {
			return nil, fmt.Errorf("no host %d in this job", h)
		}
		return jobwire.HostSecret(s.cfg.Secret, h), nil
	}, deadline)
	if err != nil {
		refuse(raw.RemoteAddr(), err)
		return nil, 0, false
	}
	c.SetDeadline(deadline)
	rank, err := s.handshake(c, secret, host)
	if err != nil {
		refuse(c.RemoteAddr(), err)
		return nil, 0, false
	}
	c.SetDeadline(time.Time{})
	return c, rank, true
}

// sendList sends rank its address list (or the job's failure): the half
// every rank gets, encoded once, and its column; a spare its own list and
// its roster. The ranks get theirs in parallel: nothing else is written on
// the connection before it is a supervision channel (superviseFrom).
func (s *rvServer) sendList(c net.Conn, rank ftrma.Rank) error {
	s.mu.Lock()
	commons, n, failure := s.commons, s.listLen, s.failure
	var column, spareList, roster []byte
	switch {
	case failure != "":
	case int(rank) >= s.cfg.Initial:
		spareList, roster = s.spareList[rank], s.roster[rank]
		s.spareList[rank] = nil
		if s.spareErr[rank] != "" {
			failure = s.spareErr[rank]
		}
	default:
		column = s.columns[rank]
		s.columns[rank] = nil // it goes out once (a rank joins once)
	}
	s.mu.Unlock()
	if failure != "" {
		jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText(failure))
		return errors.New(failure)
	}
	if spareList != nil {
		if err := jobwire.WriteFrame(c, jobwire.MsgAddrs, spareList); err != nil {
			return err
		}
		return jobwire.WriteFrame(c, jobwire.MsgRoster, roster)
	}
	for _, b := range [][]byte{jobwire.AppendFrameHeader(nil, jobwire.MsgAddrs, n), commons, column} {
		if _, err := c.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// superviseFrom makes c rank's supervision channel and sends it the exits
// and admissions that happened before, under wmu, so that no exit notice
// is missed or written alongside them.
func (s *rvServer) superviseFrom(c net.Conn, rank ftrma.Rank) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	s.super[rank] = c
	var early []byte
	for q, gone := range s.gone {
		if gone && s.present[q] && ftrma.Rank(q) != rank {
			early = jobwire.AppendFrame(early, jobwire.MsgExit, jobwire.RankPayload(ftrma.Rank(q)))
		}
	}
	// The admissions its address list did not cover.
	for _, a := range s.admits[s.seen[rank]:] {
		if a != rank {
			early = jobwire.AppendFrame(early, jobwire.MsgAdmit, s.admission(a, rank))
		}
	}
	s.mu.Unlock()
	if len(early) > 0 {
		_, err := c.Write(early)
		return err
	}
	return nil
}

// superFrame handles one frame rank sent on its supervision channel c. An
// error (a malformed frame) ends the channel.
func (s *rvServer) superFrame(c net.Conn, rank ftrma.Rank, typ byte, p []byte) error {
	switch typ {
	case jobwire.MsgLeaving:
		s.mu.Lock()
		s.leaving[rank] = true
		s.mu.Unlock()
	case jobwire.MsgConnected:
		s.mu.Lock()
		s.connected[rank] = true
		late := s.started // a spare, connected after the start
		s.mu.Unlock()
		if late {
			s.notify([]net.Conn{c}, jobwire.AppendFrame(nil, jobwire.MsgStart, nil))
		}
		s.maybeStart()
	case jobwire.MsgSpawn:
		q, err := jobwire.ParseSpawn(p, s.cfg.Size)
		if err != nil {
			return err
		}
		q.Payload = append([]byte(nil), q.Payload...)
		s.wg.Add(1)
		go s.serveSpawn(c, rank, q)
	case jobwire.MsgProbeReply:
		s.mu.Lock()
		if ch := s.probes[rank]; ch != nil {
			close(ch)
			s.probes[rank] = nil
		}
		s.mu.Unlock()
	case jobwire.MsgLeaseAsk:
		seq, err := jobwire.ParseLease(p)
		if err != nil {
			return err
		}
		s.grantLease(c, rank, seq)
	case jobwire.MsgSuspect:
		r, err := jobwire.ParseRank(p, s.cfg.Size)
		if err != nil {
			return err
		}
		if s.cfg.Suspect != nil {
			s.cfg.Suspect(r, rank)
		}
	default:
		s.cfg.Logger.Warn(fmt.Sprintf("rendezvous: rank %d sent unexpected message type %d; ignored", rank, typ), ftrma.LogRank, rank)
	}
	return nil
}

// grantLease answers rank's lease ask seq on c, unless the rank's lease is
// revoked or it is gone; with a supervisor bound (the arbiter), the grant
// is what the acting supervisor's own lease allows.
func (s *rvServer) grantLease(c net.Conn, rank ftrma.Rank, seq uint64) {
	s.mu.Lock()
	grant := !s.revoked[rank] && !s.gone[rank]
	s.mu.Unlock()
	payload := jobwire.LeasePayload(seq)
	if b := s.bound.Load(); grant && b != nil {
		acting, end := b.lease()
		var g time.Duration
		g, grant = supervisorGrant(acting, end, time.Now(), b.term)
		payload = jobwire.GrantPayload(seq, g)
	}
	if grant {
		s.notify([]net.Conn{c}, jobwire.AppendFrame(nil, jobwire.MsgLeaseGrant, payload))
	}
}

// refused logs a refused connection from addr for why, at most one line
// per source a second.
func (s *rvServer) refused(addr net.Addr, why string) {
	if ok, skipped := s.refusals.Note(addr, time.Now()); ok || s.cfg.logEvery < 0 {
		s.cfg.Logger.Warn(fmt.Sprintf("rendezvous: refused connection from %s: %s%s", addr, why, seclink.Suffix(skipped)))
	}
}

// handshake authenticates a connection and takes its published address. It
// returns the connection's rank, or an error after telling the peer why (when
// that is safe).
func (s *rvServer) handshake(c net.Conn, secret []byte, host int) (ftrma.Rank, error) {
	refuse := func(err error) (ftrma.Rank, error) {
		jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText(err.Error()))
		return -1, err
	}

	admitted, joinedID := false, uint32(0)
	id, err := jobwire.ServerHandshake(c, secret, jobwire.RendezvousHandshake, func(id uint32) error {
		if uint64(id) >= uint64(s.cfg.Size) {
			return fmt.Errorf("rank %d out of range [0, %d)", id, s.cfg.Size)
		}
		s.mu.Lock()
		placed := s.hostOf[id]
		s.mu.Unlock()
		if placed != host {
			return fmt.Errorf("rank %d runs on another host than the one whose secret it proves (host %d)", id, host)
		}
		s.mu.Lock()
		expected := int(id) < s.cfg.Initial || s.expecting[id] && s.spareErr[id] == ""
		taken := s.joined[id]
		s.joined[id] = taken || expected
		s.mu.Unlock()
		if !expected {
			return fmt.Errorf("rank %d is a spare that ftrun has not started", id)
		}
		if taken {
			return fmt.Errorf("rank %d already joined", id)
		}
		admitted, joinedID = true, id
		return nil
	})
	published := false
	if admitted {
		defer func() {
			if !published {
				s.mu.Lock()
				s.joined[joinedID] = false
				s.mu.Unlock()
			}
		}()
	}
	if err != nil {
		return -1, err
	}
	rank := ftrma.Rank(id)
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxPublish(s.cfg.Size))
	if tl, ok := errors.AsType[*jobwire.FrameTooLongError](err); ok {
		// Answer, then read the frame away: closed with it unread, the
		// connection would be reset before the rank reads why.
		err := &jobwire.LimitError{Rank: int(rank), What: "published address", Size: tl.Len,
			Limit: fmt.Sprintf("MaxPublish(%d)", s.cfg.Size), Max: tl.Max, Note: "MaxAddr plus MaxAddrPart per rank"}
		refuse(err)
		io.CopyN(io.Discard, c, int64(tl.Len))
		return -1, err
	}
	if err != nil {
		return -1, fmt.Errorf("rank %d published no address: %w", rank, err)
	}
	switch typ {
	case jobwire.MsgPublish:
	case jobwire.MsgError:
		return -1, fmt.Errorf("rank %d gave up: %s", rank, jobwire.Printable(p))
	default:
		return refuse(fmt.Errorf("rank %d: unexpected message type %d, want publish", rank, typ))
	}
	addr, err := jobwire.ParsePublish(p, int(rank), s.cfg.Size)
	if err != nil {
		return refuse(err) // it names the rank, and the limit if over one
	}
	s.publish(rank, addr)
	published = true
	return rank, nil
}

// publish records rank's address and completes the rendezvous with the
// last of the first ranks; a spare's makes its list (publishSpare).
func (s *rvServer) publish(rank ftrma.Rank, addr jobwire.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(rank) >= s.cfg.Initial {
		s.publishSpareLocked(rank, addr)
		return
	}
	s.addrs[rank] = addr
	s.published++
	if s.published < s.cfg.Initial || s.failure != "" {
		return
	}
	// The parts the first ranks published for the spares, kept until
	// each spare joins.
	for sp := s.cfg.Initial; sp < s.cfg.Size; sp++ {
		parts := make([]string, s.cfg.Size)
		for q := range s.cfg.Initial {
			parts[q] = s.addrs[q].Part(sp)
		}
		s.partsFor = append(s.partsFor, parts)
	}
	if n := jobwire.AddrsLen(s.addrs); 1+n > s.cfg.maxAddrsFrame {
		s.failure = s.listTooLong(1 + n).Error()
		s.cfg.Logger.Error(fmt.Sprintf("rendezvous: %s", s.failure))
	} else {
		s.commons = jobwire.AppendCommons(make([]byte, 0, n), s.addrs)
		s.columns = jobwire.Columns(s.addrs)
		clear(s.columns[s.cfg.Initial:]) // the spares' are in partsFor
		s.listLen = n
		if s.cfg.Complete != nil {
			go s.cfg.Complete(slices.Clone(s.addrs[:s.cfg.Initial]))
		}
		for q := range s.addrs {
			s.addrs[q].Parts = "" // in the columns now
		}
	}
	close(s.ready)
}

// listTooLong is the error of an addrs frame of n bytes over its bound; it
// names the rank whose address takes the most of it. s.mu is held.
func (s *rvServer) listTooLong(n int) error {
	big := 0
	for q, a := range s.addrs {
		if len(a.Common)+a.Width > len(s.addrs[big].Common)+s.addrs[big].Width {
			big = q
		}
	}
	a := s.addrs[big]
	return &jobwire.LimitError{Rank: -1, What: fmt.Sprintf("address list of %d ranks", s.cfg.Size), Size: n,
		Limit: "MaxAddrsFrame", Max: s.cfg.maxAddrsFrame,
		Note: fmt.Sprintf("the largest address is rank %d's: %d bytes and %d per rank", big, len(a.Common), a.Width)}
}

// publishSpareLocked records spare rank's address and makes its address
// list and roster (jobwire/spawn.go): every live rank's address as the
// spare gets it, an empty entry for the others, and the ranks that failed.
// The spare's spawn then goes on (spareDone). s.mu is held.
func (s *rvServer) publishSpareLocked(rank ftrma.Rank, addr jobwire.Addr) {
	if s.spareErr[rank] != "" || s.roster[rank] != nil {
		return // given up (it ended, or its spawn timed out)
	}
	s.addrs[rank] = addr // whole: each admission sends its part for one rank
	for sp := s.cfg.Initial; sp < s.cfg.Size; sp++ {
		if s.roster[sp] == nil && ftrma.Rank(sp) != rank { // a spare yet to join
			s.partsFor[sp-s.cfg.Initial][rank] = addr.Part(sp)
		}
	}
	list := make([]jobwire.Addr, s.cfg.Size)
	parts := make([]string, s.cfg.Size)
	var failed []ftrma.Rank
	for q := range list {
		switch {
		case ftrma.Rank(q) == rank:
			list[q], parts[q] = jobwire.WholeAddr(addr.Common), addr.Part(q)
		case s.present[q] && (s.gone[q] || s.leaving[q]):
			// Failed, or left on purpose: either way nobody the spare can
			// connect to.
			failed = append(failed, ftrma.Rank(q))
		case s.present[q]:
			list[q], parts[q] = jobwire.WholeAddr(s.addrs[q].Common), s.partsFor[rank-ftrma.Rank(s.cfg.Initial)][q]
		}
	}
	s.spareList[rank] = jobwire.AppendPartColumn(jobwire.AppendCommons(nil, list), parts)
	s.roster[rank] = jobwire.AppendRanks(nil, failed)
	s.seen[rank] = len(s.admits)
	close(s.spareDone[rank])
}

// isPresent reports whether rank r is one of the first ranks or a spare
// admitted.
func (s *rvServer) isPresent(r ftrma.Rank) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.present[r]
}

// giveUpSpare gives spare r up for why if it has not been admitted: its
// host was lost while it started. Nobody knew of it, so nobody waits for
// its lease to run out; it can no longer be admitted, and its spawn
// fails. It reports whether r was given up.
func (s *rvServer) giveUpSpare(r ftrma.Rank, why string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(r) < s.cfg.Initial || int(r) >= s.cfg.Size || s.present[r] || !s.expecting[r] {
		return false
	}
	s.gone[r] = true
	s.failSpareLocked(r, fmt.Sprintf("spare rank %d was lost before it joined: %s", r, why))
	return true
}

// failSpareLocked gives spare r up for why, unless it published or was
// given up already. s.mu is held.
func (s *rvServer) failSpareLocked(r ftrma.Rank, why string) {
	if s.spareDone[r] == nil || s.roster[r] != nil || s.spareErr[r] != "" {
		return
	}
	s.spareErr[r] = why
	close(s.spareDone[r])
}

// admission is the admit payload of spare a for rank to. s.mu is held.
func (s *rvServer) admission(a, to ftrma.Rank) []byte {
	return jobwire.Admission{Rank: a, Addr: s.addrs[a].For(int(to)), Payload: s.payloads[a]}.Append(nil)
}

// expect lets spare r join: ftrun is starting its process on host (whose
// secret the spare must prove). payload is what its admission will carry.
func (s *rvServer) expect(r ftrma.Rank, payload []byte, host int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(r) < s.cfg.Initial || int(r) >= s.cfg.Size || s.expecting[r] {
		return fmt.Errorf("launcher: rank %d is not a spare left to start: %w", r, ftrma.ErrInvalid)
	}
	s.hostOf[r] = host
	if s.commons == nil {
		return errors.New("launcher: the job's rendezvous has not completed")
	}
	s.expecting[r] = true
	s.spareDone[r] = make(chan struct{})
	s.payloads[r] = payload
	return nil
}

// spareAddr is the address spare r published (its common part), or "".
func (s *rvServer) spareAddr(r ftrma.Rank) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[r].Common
}

// awaitSpare waits until spare r (expect) has published its address, and
// returns nil, or an error: it ended first, d passed (it is then given up:
// a late publish is refused), or the server closed.
func (s *rvServer) awaitSpare(r ftrma.Rank, d time.Duration) error {
	s.mu.Lock()
	done := s.spareDone[r]
	s.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.mu.Lock()
		s.failSpareLocked(r, fmt.Sprintf("spare rank %d did not join within %v", r, d))
		s.mu.Unlock()
	case <-s.quit:
		return errors.New("launcher: the job is ending")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.spareErr[r]; why != "" {
		return errors.New(why)
	}
	return nil
}

// admit makes spare r, which published its address (awaitSpare), a live
// rank: every other live rank is sent its admission, now on its
// supervision channel or, if it has none yet, when it takes it (serve). It
// fails if r ended meanwhile: then nobody hears of r.
func (s *rvServer) admit(r ftrma.Rank) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.gone[r] || s.roster[r] == nil {
		why := s.spareErr[r]
		s.mu.Unlock()
		if why == "" {
			why = fmt.Sprintf("spare rank %d ended before its admission", r)
		}
		return errors.New(why)
	}
	s.present[r] = true
	s.admits = append(s.admits, r)
	type send struct {
		c     net.Conn
		frame []byte
	}
	var sends []send
	for q, c := range s.super {
		if c != nil && !s.gone[q] && ftrma.Rank(q) != r {
			sends = append(sends, send{c, jobwire.AppendFrame(nil, jobwire.MsgAdmit, s.admission(r, ftrma.Rank(q)))})
		}
	}
	s.mu.Unlock()
	for _, x := range sends {
		x.c.SetWriteDeadline(time.Now().Add(time.Second))
		x.c.Write(x.frame)
		x.c.SetWriteDeadline(time.Time{})
	}
	return nil
}

// serveSpawn serves rank by's spawn request on its supervision channel c
// and answers it there.
func (s *rvServer) serveSpawn(c net.Conn, by ftrma.Rank, q jobwire.SpawnRequest) {
	defer s.wg.Done()
	var ranks []ftrma.Rank
	err := errors.New("this job has no spare ranks (ftrun --respawn)")
	if s.cfg.Spawn != nil {
		ranks, err = s.cfg.Spawn(by, int(q.K), q.Payload, q.Near)
	}
	a := jobwire.SpawnAnswer{ID: q.ID, Ranks: ranks}
	if err != nil {
		a.Err = strings.TrimPrefix(err.Error(), "launcher: ")
		s.cfg.Logger.Warn(fmt.Sprintf("rank %d asked for %d spare ranks: %s", by, q.K, a.Err), ftrma.LogRank, by)
	}
	s.notify([]net.Conn{c}, jobwire.AppendFrame(nil, jobwire.MsgSpawned, a.Append(nil)))
}
