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
	"github.com/ftrma/ftrma/internal/arbiter"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
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
	s.gone = append(s.gone, r)
	chans := make([]*supChan, 0, len(s.chans))
	for ch := range s.chans {
		chans = append(chans, ch)
	}
	s.mu.Unlock()
	for _, ch := range chans {
		ch.write(jobwire.MsgExit, jobwire.RankPayload(r), s.term/5)
	}
}

// maxSupervisorHandshakes bounds the handshakes under way at once.
const maxSupervisorHandshakes = 64

// startSupervisor listens on the loopback for the ranks of a launch under
// the arbiter's node a, and serves them until close. The job secret comes
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
		return nil, fmt.Errorf("the launch carries no job secret")
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
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		select {
		case <-s.quit:
			s.mu.Unlock()
			c.Close()
			return
		default:
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
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
	ch := &supChan{c: tc, replied: make(chan struct{}, 1)}
	ch.rank.Store(-1)
	s.mu.Lock()
	s.chans[ch] = true
	before := slices.Clone(s.gone)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.chans, ch)
		s.mu.Unlock()
	}()
	for _, r := range before {
		if ch.write(jobwire.MsgExit, jobwire.RankPayload(r), s.term/5) != nil {
			return
		}
	}
	asks := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			typ, p, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame)
			if err != nil {
				return
			}
			switch typ {
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
