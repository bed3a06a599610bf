package launcher

import (
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// The host supervisor (ftrun --arbiter, on an agent's host): the agent,
// once its arbiter node runs, grants its ranks their lease instead of
// ftrun (internal/jobwire/supervisor.go for the channel). It listens on
// the host's loopback before it starts the ranks and gives them the
// address in jobwire.EnvSupervisor. It answers a rank's ask only while its
// node acts, with a term of at most the lease term and at most what
// remains of the node's host lease (supervisorGrant): every rank lease
// ends no later than its host's. An ask that comes while the node does
// not act is held, and granted once it acts again (a leader's take-over
// may leave a host without a lease for a moment: the rank's rescue, a
// quarter term, covers it); a late grant only gives a shorter lease.
//
// It also passes on the arbiter's exit notices (jobwire/supervisor.go):
// every rank the applied log says is gone goes to every channel, and a
// channel that opens gets those gone before.
//
// Ranks on ftrun's own host keep their lease from ftrun's rendezvous.

// supervisorGrant is the grant rule: at now, with the node acting or not
// and its host lease ending at leaseEnd, an ask may be granted for the
// returned term (counted by the rank from when it sent the ask), or not
// at all.
func supervisorGrant(acting bool, leaseEnd, now time.Time, term time.Duration) (time.Duration, bool) {
	if !acting || term <= 0 {
		return 0, false
	}
	left := leaseEnd.Sub(now)
	if left <= 0 {
		return 0, false
	}
	return min(term, left), true
}

// hostSupervisor is an agent's lease endpoint for its host's ranks.
type hostSupervisor struct {
	ln    net.Listener
	key   []byte
	term  time.Duration
	lease func() (acting bool, end time.Time) // the node's host lease now
	logf  func(string, ...any)
	gate  *seclink.Gate

	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// conns are the ranks' channels, closed by close.
	conns map[net.Conn]bool
	// chans are the channels past their handshake, and gone the ranks
	// whose exit notice went (or goes) to each.
	chans map[*supChan]bool
	gone  []ftrma.Rank
	// suspect hands a rank's suspicion to the arbiter: r suspected by by.
	suspect func(r, by ftrma.Rank)
	// spawn serves a rank's spawn request (MsgSpawn) once ftrun is gone
	// (agentspare.go); nil: refused. size is the job's, for parsing.
	// Both are set once, under mu (setSpawn).
	spawn func(ch *supChan, by ftrma.Rank, q jobwire.SpawnRequest)
	size  int
}

// supMaxRank bounds the rank numbers a channel accepts in its frames (the
// arbiter ignores ranks its job does not have).
const supMaxRank = 1 << 24

// supChan is one rank's channel past its handshake; wmu orders the
// grants and the notices written to it.
type supChan struct {
	c   net.Conn
	wmu sync.Mutex
	// rank is the rank that named the channel (its MsgHello), -1 before.
	rank atomic.Int64
	// replied gets a token for each MsgProbeReply.
	replied chan struct{}

	// The outbox: exit notices, admissions and spawn answers go out in
	// the order they were queued (a spawn's answer after the admissions
	// of its spares), by one writer at a time; none while held (a spare's
	// channel before its address list went out).
	qmu     sync.Mutex
	queued  [][]byte
	writing bool
	held    bool
	term    time.Duration // a write's bound is a fifth of it
}

// queue sends frame (type and payload, jobwire.AppendFrame) after those
// queued before.
func (ch *supChan) queue(frame []byte) {
	ch.qmu.Lock()
	ch.queued = append(ch.queued, frame)
	start := !ch.writing && !ch.held
	ch.writing = ch.writing || start
	ch.qmu.Unlock()
	if start {
		go ch.drain()
	}
}

// release lets a held channel's outbox go out.
func (ch *supChan) release() {
	ch.qmu.Lock()
	ch.held = false
	start := !ch.writing && len(ch.queued) > 0
	ch.writing = ch.writing || start
	ch.qmu.Unlock()
	if start {
		go ch.drain()
	}
}

// drain writes the outbox until it is empty; a write that fails drops
// what is left (the channel is broken).
func (ch *supChan) drain() {
	for {
		ch.qmu.Lock()
		if len(ch.queued) == 0 {
			ch.writing = false
			ch.qmu.Unlock()
			return
		}
		f := ch.queued[0]
		ch.queued = ch.queued[1:]
		ch.qmu.Unlock()
		ch.wmu.Lock()
		ch.c.SetWriteDeadline(time.Now().Add(ch.term / 5))
		_, err := ch.c.Write(f)
		ch.wmu.Unlock()
		if err != nil {
			ch.qmu.Lock()
			ch.queued, ch.writing = nil, false
			ch.qmu.Unlock()
			return
		}
	}
}

// write sends one frame, bounded by a fifth of a term.
func (ch *supChan) write(typ byte, p []byte, d time.Duration) error {
	ch.wmu.Lock()
	defer ch.wmu.Unlock()
	ch.c.SetWriteDeadline(time.Now().Add(d))
	return jobwire.WriteFrame(ch.c, typ, p)
}

// probe asks rank r, on its channel, whether it runs, and waits at most d
// for the answer; false if it did not answer (or has no channel).
func (s *hostSupervisor) probe(r ftrma.Rank, d time.Duration) bool {
	s.mu.Lock()
	var ch *supChan
	for c := range s.chans {
		if c.rank.Load() == int64(r) {
			ch = c
		}
	}
	s.mu.Unlock()
	if ch == nil {
		return false
	}
	select { // an old reply does not answer this probe
	case <-ch.replied:
	default:
	}
	if ch.write(jobwire.MsgProbe, nil, d) != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch.replied:
		return true
	case <-t.C:
		return false
	case <-s.quit:
		return false
	}
}

// exited sends rank r's exit notice to every channel, and to those that
// open later. Writes to a stuck rank take their deadline: call it off the
// arbiter's goroutine.
func (s *hostSupervisor) exited(r ftrma.Rank) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = append(s.gone, r)
	for ch := range s.chans {
		ch.queue(jobwire.AppendFrame(nil, jobwire.MsgExit, jobwire.RankPayload(r)))
	}
}

// admit sends spare a's admission to every channel but the spare's own.
// Called on the arbiter's goroutine as the join applies, so that a
// channel adopted there (adopt) gets exactly the admissions its address
// list does not hold.
func (s *hostSupervisor) admit(a jobwire.Admission) {
	frame := jobwire.AppendFrame(nil, jobwire.MsgAdmit, a.Append(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.chans {
		if ch.rank.Load() != int64(a.Rank) {
			ch.queue(frame)
		}
	}
}

// maxSupervisorHandshakes bounds the handshakes under way at once.
const maxSupervisorHandshakes = 64

// startSupervisor listens on the loopback for the ranks of a launch under
// the arbiter's node a, and serves them until close. The host's secret comes
// from the ranks' environment (FTRMA_SECRET).
func startSupervisor(spec *launchSpec, a *agentArbiter, logf func(string, ...any)) (*hostSupervisor, error) {
	var secret []byte
	for _, r := range spec.ranks {
		for _, kv := range r.env {
			if v, ok := strings.CutPrefix(kv, jobwire.EnvSecret+"="); ok {
				secret, _ = hex.DecodeString(v)
			}
		}
		break
	}
	if len(secret) < jobwire.MinSecret {
		return nil, fmt.Errorf("the launch carries no host secret")
	}
	sup, err := listenSupervisor(secret, a.d.cfg.LeaseTerm, a.d.hostLease, logf)
	if err != nil {
		return nil, err
	}
	sup.suspect = a.d.reportSuspect
	ended := a.d.onRankEnd(func(e arbiter.Event) {
		if gone(e) {
			go sup.exited(e.Rank)
		}
	})
	sup.mu.Lock()
	for _, e := range ended {
		if gone(e) {
			sup.gone = append(sup.gone, e.Rank)
		}
	}
	sup.mu.Unlock()
	return sup, nil
}

// listenSupervisor serves lease asks on the loopback for the job of
// secret, with term and the node's host lease now (lease).
func listenSupervisor(secret []byte, term time.Duration, lease func() (bool, time.Time), logf func(string, ...any)) (*hostSupervisor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &hostSupervisor{ln: ln, key: jobwire.SupervisorKey(secret), term: term, lease: lease,
		logf: logf, gate: seclink.NewGate(maxSupervisorHandshakes), quit: make(chan struct{}), conns: make(map[net.Conn]bool), chans: make(map[*supChan]bool)}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// addr is the endpoint the ranks get (jobwire.EnvSupervisor).
func (s *hostSupervisor) addr() string { return s.ln.Addr().String() }

// close stops serving and closes the ranks' channels.
func (s *hostSupervisor) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *hostSupervisor) accept() {
	defer s.wg.Done()
	acceptEach(s.ln, s.quit, "lease endpoint", s.logf, func(c net.Conn) bool {
		s.mu.Lock()
		select {
		case <-s.quit:
			s.mu.Unlock()
			c.Close()
			return false
		default:
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
		return true
	})
}

// serve answers one rank's asks: a reader keeps the latest ask, and the
// granter answers it as soon as the rule allows.
func (s *hostSupervisor) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	tc, err := s.gate.Serve(c, s.key, agentTimeout)
	if err != nil {
		s.logf("lease endpoint: refused %s: %v", c.RemoteAddr(), err)
		return
	}
	s.mu.Lock()
	ch := s.addChanLocked(tc, -1, false)
	s.mu.Unlock()
	s.serveChan(ch)
}

// addChanLocked makes and registers the channel of rank (-1: named later
// by its MsgHello) on c, held or not, with the exit notices of the ranks
// gone before queued. s.mu is held.
func (s *hostSupervisor) addChanLocked(c net.Conn, rank ftrma.Rank, held bool) *supChan {
	ch := &supChan{c: c, replied: make(chan struct{}, 1), held: held, term: s.term}
	ch.rank.Store(int64(rank))
	s.chans[ch] = true
	for _, r := range s.gone {
		ch.queue(jobwire.AppendFrame(nil, jobwire.MsgExit, jobwire.RankPayload(r)))
	}
	return ch
}

// setSpawn has spawn serve the spawn requests of the ranks of a job of
// size ranks.
func (s *hostSupervisor) setSpawn(spawn func(ch *supChan, by ftrma.Rank, q jobwire.SpawnRequest), size int) {
	s.mu.Lock()
	s.spawn, s.size = spawn, size
	s.mu.Unlock()
}

// adopt makes c, a spare's rendezvous connection past its handshake
// (agentspare.go), rank's channel, held until release, and serves it; it
// returns false if the supervisor closed. Call it on the arbiter's
// goroutine (see admit).
func (s *hostSupervisor) adopt(c net.Conn, rank ftrma.Rank) (*supChan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.quit:
		return nil, false
	default:
	}
	s.conns[c] = true
	ch := s.addChanLocked(c, rank, true)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
		s.serveChan(ch)
	}()
	return ch, true
}

// serveChan answers one rank's channel until it closes: a reader keeps
// the latest lease ask, and the granter answers it as soon as the rule
// allows.
func (s *hostSupervisor) serveChan(ch *supChan) {
	tc := ch.c
	defer func() {
		s.mu.Lock()
		delete(s.chans, ch)
		s.mu.Unlock()
	}()
	asks := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			typ, p, err := jobwire.ReadFrame(tc, jobwire.MaxSuperFrame)
			if err != nil {
				return
			}
			switch typ {
			case jobwire.MsgSpawn:
				by := ch.rank.Load()
				s.mu.Lock()
				spawn, size := s.spawn, s.size
				s.mu.Unlock()
				q, err := jobwire.ParseSpawn(p, max(size, 1))
				if err != nil || by < 0 {
					s.logf("lease endpoint: rank %d: a spawn request: %v", by, err)
					continue
				}
				q.Payload = slices.Clone(q.Payload)
				if spawn == nil {
					a := jobwire.SpawnAnswer{ID: q.ID, Err: "this host serves no spawn requests (a job without spares, or ftrun's own host)"}
					ch.queue(jobwire.AppendFrame(nil, jobwire.MsgSpawned, a.Append(nil)))
					continue
				}
				go spawn(ch, ftrma.Rank(by), q)
				continue
			case jobwire.MsgHello:
				if r, err := jobwire.ParseRank(p, supMaxRank); err == nil {
					ch.rank.CompareAndSwap(-1, int64(r))
				}
				continue
			case jobwire.MsgSuspect:
				r, err := jobwire.ParseRank(p, supMaxRank)
				if by := ch.rank.Load(); err == nil && by >= 0 && s.suspect != nil {
					s.suspect(r, ftrma.Rank(by))
				}
				continue
			case jobwire.MsgProbeReply:
				select {
				case ch.replied <- struct{}{}:
				default:
				}
				continue
			}
			seq, err := jobwire.ParseLease(p)
			if typ != jobwire.MsgLeaseAsk || err != nil {
				continue
			}
			select { // only the latest ask matters
			case <-asks:
			default:
			}
			asks <- seq
		}
	}()
	tick := time.NewTicker(s.term / 20)
	defer tick.Stop()
	for {
		var seq uint64
		select {
		case <-done:
			return
		case <-s.quit:
			return
		case seq = <-asks:
		}
		for {
			acting, end := s.lease()
			if g, ok := supervisorGrant(acting, end, time.Now(), s.term); ok {
				if ch.write(jobwire.MsgLeaseGrant, jobwire.GrantPayload(seq, g), s.term/5) != nil {
					return
				}
				break
			}
			select {
			case <-done:
				return
			case <-s.quit:
				return
			case seq = <-asks: // a newer ask replaces the held one
			case <-tick.C:
			}
		}
	}
}
