package startup

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/multi"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/tcp"
	"github.com/ftrma/ftrma/transport/verbs"
)

// Session is a rank's membership in an ftrun job: its rank, the job's size, the
// connected transport, and the connection to the launcher (the supervision
// channel), which stays open until Close.
type Session struct {
	rank ftrma.Rank
	size int
	job  string
	t    transport.Transport
	conn net.Conn      // the rendezvous connection, now the supervision channel
	exit *exitReceiver // the receiver Join installed; nil in tests without a transport

	wmu sync.Mutex // serializes writes on conn
	// local is the lease channel to this host's agent (ftrun --arbiter on
	// an agent's host: jobwire.EnvSupervisor), or nil: the lease comes
	// from ftrun over conn. With it, a broken conn does not stop the rank.
	local net.Conn
	smu   sync.Mutex // serializes writes on local
	// ftrunGone is set when the channel to ftrun broke while the lease
	// comes from the host's agent: suspicions go to the agent from then on.
	ftrunGone   atomic.Bool
	closeOnce   sync.Once
	closeErr    error
	watching    sync.WaitGroup // the goroutines reading conn and keeping the lease
	stop        chan struct{}  // closed by Close
	term        time.Duration  // the lease term
	hostVerdict time.Duration  // the arbiter's verdict bound on a silent host; 0 without the arbiter

	rescuing atomic.Pointer[chan struct{}] // while the lease is rescued: closed when the rescue ends

	lmu     sync.Mutex           // guards the fields below
	asked   map[uint64]time.Time // lease asks in flight, by seq: when sent
	seq     uint64
	expiry  time.Time // the lease runs until then
	leaving bool      // Leave was called: the lease no longer matters
	lost    bool      // the lease ran out (reported once)
	onLost  func()

	spares  int          // spare ranks of the job (jobwire.EnvSpares)
	spawn   []byte       // this spare's spawn payload; nil unless spawned
	spawned bool         // this rank is a spare started later
	failed  []ftrma.Rank // a spare: the ranks that had failed when it joined
	live    []ftrma.Rank // a spare: the other ranks live when it joined

	dmu            sync.Mutex                            // held while admissions are delivered (admitted, OnAdmit)
	amu            sync.Mutex                            // guards the fields below
	onAdmit        func(ftrma.Rank, string, []byte)      // OnAdmit's function, or nil
	backlog        []jobwire.Admission                   // admissions before OnAdmit was called
	spawnSeq       uint32                                // the id of the last spawn request
	spawnWait      map[uint32]chan<- jobwire.SpawnAnswer // spawn requests waiting for their answer, by id
	admittedSpares []ftrma.Rank                          // the spares admitted (admitted), guarded by amu
}

// ExitLostPrimary is the exit status of a rank that lost its lease from
// ftrun (see OnLeaseLost).
const ExitLostPrimary = jobwire.ExitLostPrimary

// OnLeaseLost sets what happens when this rank's lease from ftrun runs out
// (jobwire.LeaseTerm after the ask of the last grant it got: ftrun cannot
// be reached, so this rank may no longer be in the job's primary world) and
// one more ask brings no grant within a quarter term after that (see
// keepLease), or at once when the rank finds it later than that.
// f must stop the rank from acting at once; comm's default exits the
// process with jobwire.ExitLostPrimary. Without f the loss is only logged.
func (s *Session) OnLeaseLost(f func()) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	s.onLost = f
}

// The lease's arithmetic. A grant answers an ask, and the lease runs a
// term from when the ask was sent: expiry = ask + term. When ftrun gives a
// rank up without reaching it (its host cut off, or a suspect it cannot
// kill), it stops granting (launcher/rendezvous.go revoke, at time R) and
// tells the other ranks the rank failed 1.5 terms later (launcher/job.go
// waitRank: hostTiming.leaseWait). Every grant the rank got answered an ask
// it sent no later than R, so the others count it failed no earlier than
// ask + 1.5 terms = expiry + term/2, for the ask of the last grant it
// received (whatever the two clocks read: only durations count, and clock
// rates differ by parts per million).
//
// So a rank acts while its lease runs. When it finds the lease run out —
// perhaps only because it did not run for a while (a stall) and grants
// wait unread — it asks once more and may keep acting until rescueEnd =
// expiry + term/4, a quarter term before the others may take over; the
// rescue ends by then, with a grant or with the rank stopping. (Under the
// replicated arbiter a rank's lease ends no later than its host's, and the
// arbiter's leader declares a silent host 1.375 terms after its last ask:
// an eighth of a term to spare past the rescue, launcher.rankMargin.) A rank that
// finds its lease run out at rescueEnd or later (it woke from a longer
// stall) stops at once, without asking.
type leaseStep int

const (
	leaseHeld   leaseStep = iota // the lease runs: act
	leaseRescue                  // it ran out: ask once more, stop at rescueEnd unless granted
	leaseStop                    // stop at once
)

// rescueEnd is when the rescue of a lease that ran out at expiry ends.
func rescueEnd(expiry time.Time, term time.Duration) time.Time { return expiry.Add(term / 4) }

// stepAt is what to do at now with the lease running until expiry.
func stepAt(now, expiry time.Time, term time.Duration) leaseStep {
	switch {
	case !now.After(expiry):
		return leaseHeld
	case now.Before(rescueEnd(expiry, term)):
		return leaseRescue
	default:
		return leaseStop
	}
}

// keepLease asks ftrun for a lease every fifth of its term and checks its
// expiry every twentieth, until Close; a lease found run out is rescued or
// lost as stepAt says.
func (s *Session) keepLease() {
	defer s.watching.Done()
	ask := time.NewTicker(s.term / 5)
	defer ask.Stop()
	check := time.NewTicker(s.term / 20)
	defer check.Stop()
	s.askLease()
	for {
		select {
		case <-s.stop:
			return
		case <-ask.C:
			s.askLease()
		case <-check.C:
		}
		step, end := s.step()
		if step == leaseHeld {
			continue
		}
		// New work waits (Rescuing) until the lease is renewed or the
		// loss reported.
		done := make(chan struct{})
		s.rescuing.Store(&done)
		closed := false
		for step == leaseRescue && !closed {
			closed = !s.rescue(end, check.C)
			// Renewed, lost, or renewed by a late grant of an
			// earlier ask into a lease run out again: a new rescue
			// with that lease's end.
			step, end = s.step()
		}
		if step == leaseStop && !closed {
			s.lose(fmt.Sprintf("no lease from ftrun since %v ago", s.sinceAsk().Round(time.Millisecond)))
		}
		s.rescuing.Store(nil)
		close(done)
		if closed {
			return
		}
	}
}

// rescue asks for the lease once more and waits for the grant until end, a
// check finding the lease renewed or past its rescue, or Close (then it
// reports false). The ask is a small frame that the socket's buffer takes
// at once; should the write block, its deadline (a fifth of a term) bounds
// it, and the rescue ends as soon as it returns if end has passed.
func (s *Session) rescue(end time.Time, check <-chan time.Time) bool {
	timer := time.NewTimer(time.Until(end))
	defer timer.Stop()
	s.askLease()
	for {
		select {
		case <-s.stop:
			return false
		case <-timer.C:
			return true
		case <-check:
			if step, _ := s.step(); step != leaseRescue {
				return true
			}
		}
	}
}

// step is stepAt for this lease now, with the rescue's end; a lease that
// no longer matters (Leave was called, or it was lost) is held.
func (s *Session) step() (leaseStep, time.Time) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.leaving || s.lost {
		return leaseHeld, time.Time{}
	}
	return stepAt(time.Now(), s.expiry, s.term), rescueEnd(s.expiry, s.term)
}

// lose reports the loss of the lease, once, for why: this rank stops.
func (s *Session) lose(why string) {
	s.lmu.Lock()
	lost := !s.leaving && !s.lost
	f := s.onLost
	s.lost = s.lost || lost
	s.lmu.Unlock()
	if !lost {
		return
	}
	ftrma.Logger().Error(fmt.Sprintf("ftrma rank %d: %s: this rank may be cut off from the job's primary world, and stops", s.rank, why),
		ftrma.LogRank, s.rank, ftrma.LogJob, s.job)
	if f != nil {
		f()
	}
}

// sinceAsk is how long ago the ask of the last grant was sent.
func (s *Session) sinceAsk() time.Duration {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return time.Since(s.expiry.Add(-s.term))
}

// Rescuing returns nil while the lease runs, and while it is being rescued
// (it ran out: see keepLease) a channel closed when the rescue ends: the
// lease was renewed, or its loss was reported (OnLeaseLost's function has
// returned, if it returns at all). Callers hold new work back until then:
// a rank that may have been given up starts nothing. It is one atomic load,
// cheap enough for every collective.
func (s *Session) Rescuing() <-chan struct{} {
	if p := s.rescuing.Load(); p != nil {
		return *p
	}
	return nil
}

// LeaseTerm is the term of this rank's lease from ftrun (jobwire.EnvLease,
// as ftrun stretched it for the job's hosts).
func (s *Session) LeaseTerm() time.Duration { return s.term }

// HostVerdictBound is, when the job's replicated arbiter decides the fate
// of its hosts (ftrun --arbiter over several hosts), the longest it may
// take from a host falling silent to its verdict (jobwire.EnvHostVerdict,
// arbiter.VerdictBound); 0 without it.
func (s *Session) HostVerdictBound() time.Duration { return s.hostVerdict }

// askLease sends one lease ask, to the host's agent when the lease comes
// from it, else to ftrun.
func (s *Session) askLease() {
	s.lmu.Lock()
	s.seq++
	seq := s.seq
	s.asked[seq] = time.Now()
	for q := range s.asked {
		if q+64 < seq {
			delete(s.asked, q) // never granted: a late grant of it does not count
		}
	}
	s.lmu.Unlock()
	c, mu := s.conn, &s.wmu
	if s.local != nil {
		c, mu = s.local, &s.smu
	}
	mu.Lock()
	defer mu.Unlock()
	c.SetWriteDeadline(time.Now().Add(s.term / 5))
	defer c.SetWriteDeadline(time.Time{})
	jobwire.WriteFrame(c, jobwire.MsgLeaseAsk, jobwire.LeasePayload(seq))
}

// granted extends the lease by the grant of ask seq, for term from the
// ask (at most the lease's own term).
func (s *Session) granted(seq uint64, term time.Duration) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if at, ok := s.asked[seq]; ok {
		delete(s.asked, seq)
		if e := at.Add(min(term, s.term)); e.After(s.expiry) {
			s.expiry = e
		}
	}
}

// Rank is this process's rank, 0 <= Rank < Size.
func (s *Session) Rank() ftrma.Rank { return s.rank }

// Size is the number of ranks in the job.
func (s *Session) Size() int { return s.size }

// JobID is the job's id as ftrun chose it (for logs).
func (s *Session) JobID() string { return s.job }

// Transport is this rank's transport, connected to every peer. It belongs to
// the caller, who closes it; Session.Close does not.
func (s *Session) Transport() transport.Transport { return s.t }

// Close closes the connection to the launcher. It does not close the transport.
// It may be called more than once and from any goroutine.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.closeErr = s.conn.Close()
		if s.local != nil {
			s.local.Close()
		}
	})
	s.watching.Wait()
	return s.closeErr
}

// Suspect tells the launcher that this rank's failure detector declared rank r
// failed, so that the launcher kills r should it still run (a false
// suspicion). It does not block for long: the write is bounded in time.
//
// Once the channel to ftrun has broken under an agent's lease (ftrun is
// gone, the job goes on under the arbiter), the suspicion goes to this
// host's agent instead, which hands it to the job's arbiter.
func (s *Session) Suspect(r ftrma.Rank) error {
	c, mu := s.conn, &s.wmu
	if s.local != nil && s.ftrunGone.Load() {
		c, mu = s.local, &s.smu
	}
	mu.Lock()
	defer mu.Unlock()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	defer c.SetWriteDeadline(time.Time{})
	return jobwire.WriteFrame(c, jobwire.MsgSuspect, jobwire.RankPayload(r))
}

// Leave tells the launcher that this rank is leaving the job on purpose (it
// finalized): if the process then exits with status 0, the other ranks are not
// told of a failure. Call it before closing the transport.
func (s *Session) Leave() error {
	s.lmu.Lock()
	s.leaving = true
	s.lmu.Unlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	defer s.conn.SetWriteDeadline(time.Time{})
	return jobwire.WriteFrame(s.conn, jobwire.MsgLeaving, nil)
}

// watch reads the supervision channel until it closes and hands every exit
// notice to the transport and the receiver as a peer-down event whose error
// wraps ErrExitReported: the launcher saw the process go.
func (s *Session) watch() {
	defer s.watching.Done()
	for {
		typ, p, err := jobwire.ReadFrame(s.conn, jobwire.MaxSuperFrame)
		if err != nil {
			select {
			case <-s.stop: // Close
			default:
				if s.local != nil {
					// The lease comes from this host's agent,
					// whose arbiter node outlives ftrun: the
					// rank goes on while it is granted.
					ftrma.Logger().Warn(fmt.Sprintf("ftrma rank %d: its connection to ftrun broke (%v): it goes on under its host's lease", s.rank, err),
						ftrma.LogRank, s.rank, ftrma.LogJob, s.job)
					s.ftrunGone.Store(true)
					return
				}
				// ftrun is gone, or the connection broke: no lease
				// can be renewed, and ftrun, seeing the connection
				// close, counts this rank gone at once
				// (launcher: rvServer.hangUp). Stop now.
				s.lose(fmt.Sprintf("its connection to ftrun broke (%v)", err))
			}
			return
		}
		if typ == jobwire.MsgProbe {
			// Suspected by another rank's detector: this process runs,
			// so it is slow, not failed.
			s.wmu.Lock()
			s.conn.SetWriteDeadline(time.Now().Add(time.Second))
			jobwire.WriteFrame(s.conn, jobwire.MsgProbeReply, nil)
			s.conn.SetWriteDeadline(time.Time{})
			s.wmu.Unlock()
			continue
		}
		if typ == jobwire.MsgLeaseGrant {
			// ftrun's grant: the ask's seq, and under --arbiter the term
			// too (bounded by ftrun's host lease: jobwire.GrantPayload).
			if s.local != nil {
				continue
			}
			if seq, err := jobwire.ParseLease(p); err == nil {
				s.granted(seq, s.term)
			} else if seq, term, err := jobwire.ParseGrant(p); err == nil {
				s.granted(seq, term)
			}
			continue
		}
		if typ == jobwire.MsgAdmit {
			if a, err := jobwire.ParseAdmit(p, s.size); err == nil && a.Rank != s.rank {
				s.admitted(a)
			}
			continue
		}
		if typ == jobwire.MsgSpawned {
			if a, err := jobwire.ParseSpawned(p, s.size); err == nil {
				s.answered(a)
			}
			continue
		}
		if typ == jobwire.MsgExit {
			s.exitNotice(p)
		}
	}
}

// exitNotice hands the exit notice p (MsgExit, from ftrun or from this
// host's agent) to the transport and the receiver.
func (s *Session) exitNotice(p []byte) {
	r, err := jobwire.ParseRank(p, s.size)
	if err != nil || r == s.rank {
		return
	}
	if s.exit != nil {
		s.exit.exited(s.t, r)
	}
}

// watchLocal reads the lease channel to this host's agent until it
// closes: grants extend the lease, exit notices go where ftrun's do,
// probes are answered; a channel that breaks stops the rank,
// as a broken channel to ftrun does without the agent (its supervisor is
// gone: no lease can be renewed).
func (s *Session) watchLocal() {
	defer s.watching.Done()
	for {
		typ, p, err := jobwire.ReadFrame(s.local, jobwire.MaxSuperFrame)
		if err != nil {
			select {
			case <-s.stop:
			default:
				s.lose(fmt.Sprintf("its connection to its host's agent broke (%v)", err))
			}
			return
		}
		switch typ {
		case jobwire.MsgLeaseGrant:
			if seq, term, err := jobwire.ParseGrant(p); err == nil {
				s.granted(seq, term)
			}
		case jobwire.MsgExit:
			s.exitNotice(p)
		case jobwire.MsgAdmit:
			// A spare an agent started once ftrun was gone.
			if a, err := jobwire.ParseAdmit(p, s.size); err == nil && a.Rank != s.rank {
				a.Payload = slices.Clone(a.Payload)
				s.admitted(a)
			}
		case jobwire.MsgSpawned:
			if a, err := jobwire.ParseSpawned(p, s.size); err == nil {
				s.answered(a)
			}
		case jobwire.MsgProbe:
			// The arbiter asks whether this rank still runs (another
			// rank suspects it): it does.
			s.smu.Lock()
			s.local.SetWriteDeadline(time.Now().Add(time.Second))
			jobwire.WriteFrame(s.local, jobwire.MsgProbeReply, nil)
			s.local.SetWriteDeadline(time.Time{})
			s.smu.Unlock()
		}
	}
}

// dialSupervisor opens the lease channel to this host's agent at addr,
// proving its host's secret (jobwire.SupervisorKey).
func dialSupervisor(ctx context.Context, env jobEnv) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", env.supervisor)
	if err != nil {
		return nil, fmt.Errorf("launcher: rank %d: its host's agent: %w", env.rank, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	tc, err := seclink.Client(c, jobwire.SupervisorKey(env.secret), deadline)
	if err == nil {
		tc.SetWriteDeadline(deadline)
		err = jobwire.WriteFrame(tc, jobwire.MsgHello, jobwire.RankPayload(env.rank))
		tc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("launcher: rank %d: its host's agent at %s: %w", env.rank, env.supervisor, err)
	}
	return tc, nil
}

// Join makes this process a rank of the ftrun job that started it: it reads
// the job's environment (and removes FTRMA_SECRET from it), builds the
// transport ftrun chose and installs recv as its receiver, exchanges
// addresses with every other rank through the launcher's rendezvous (proving
// its host's secret both ways), and connects the transport to every peer.
//
// recv must not be nil: it is installed before any peer can send, as the
// transport requires, because peers may send as soon as their own Join returns.
// recv hears of a lost peer at most twice: when the transport loses its
// connection (the peer may still run: see ErrExitReported), and when ftrun
// reports that its process exited (the error wraps ErrExitReported), in
// either order.
//
// Join blocks until every rank of the job has joined, so ctx should carry a
// deadline. It returns an error if the process was not started by ftrun, if
// the launcher or a peer cannot be reached or authenticated, if a rank exits
// before all have joined, or ctx's error. Call Join once per process.
func Join(ctx context.Context, recv transport.Receiver) (*Session, error) {
	env, err := readEnv()
	if err != nil {
		return nil, err
	}
	return join(ctx, env, recv)
}

func join(ctx context.Context, env jobEnv, recv transport.Receiver) (*Session, error) {
	if recv == nil {
		return nil, fmt.Errorf("launcher: Join: nil receiver: %w", ftrma.ErrInvalid)
	}
	x := newExitReceiver(recv, env.size)
	env.got = new(joinInfo)
	sess := &Session{rank: env.rank, size: env.size, job: env.job, exit: x,
		term: env.lease, hostVerdict: env.hostVerdict, stop: make(chan struct{}), asked: make(map[uint64]time.Time),
		spares: env.spares, spawn: env.spawn, spawned: env.spawned, spawnWait: make(map[uint32]chan<- jobwire.SpawnAnswer)}
	// The transports add the rank to their lines.
	logger := ftrma.Logger().With(ftrma.LogJob, env.job)
	var t transport.Transport
	var conn net.Conn
	var err error
	if env.supervisor != "" {
		// Before the rendezvous: a spare's early watch sees it set.
		if sess.local, err = dialSupervisor(ctx, env); err != nil {
			return nil, err
		}
	}
	switch env.transport {
	case jobwire.TransportSHM:
		t, conn, err = joinSHM(ctx, env, x, sess, logger)
	case jobwire.TransportVerbs, jobwire.TransportVerbsHybrid:
		t, conn, err = joinVerbs(ctx, env, x, logger)
	case jobwire.TransportHybrid:
		t, conn, err = joinHybrid(ctx, env, x, sess, logger)
	default:
		t, conn, err = joinTCP(ctx, env, x, sess, logger)
	}
	if err != nil {
		if sess.local != nil {
			sess.local.Close()
		}
		return nil, err
	}
	// The rendezvous just completed with ftrun: the lease starts now.
	sess.lmu.Lock()
	sess.expiry = time.Now().Add(env.lease)
	sess.lmu.Unlock()
	sess.failed, sess.live = env.got.failed, env.got.live
	if sess.conn == nil { // not watching yet (see watchEarly)
		sess.t, sess.conn = t, conn
		sess.watching.Add(1)
		go sess.watch()
	}
	logger.Debug("ftrma: joined the job", ftrma.LogRank, env.rank, "size", env.size, "spares", env.spares, "spawned", env.spawned, "transport", env.transport, "lease", env.lease)
	for _, a := range env.got.admits { // arrived while waiting for the start
		sess.admitted(a)
	}
	if sess.local != nil {
		sess.watching.Add(1)
		go sess.watchLocal()
	}
	sess.watching.Add(1)
	go sess.keepLease()
	return sess, nil
}

// watchEarly starts sess watching the supervision channel conn before its
// transport t connects, for a spare started later: a rank may exit while
// the spare connects to it (after ftrun made the spare's address list),
// and only ftrun's exit notice, passed to t (PeerDown), ends the spare's
// attempts to reach it; an admission of a later spare may come too. It
// does nothing for the ranks started at launch, whose watch starts after
// Join connected. stop undoes it when the connection fails: conn closes.
func watchEarly(env jobEnv, sess *Session, t transport.Transport, conn net.Conn) (stop func()) {
	if !env.spawned || sess == nil {
		return func() {}
	}
	sess.t, sess.conn = t, conn
	sess.watching.Add(1)
	go sess.watch()
	return func() { sess.Close() }
}

// joinTCP builds the TCP transport, exchanges addresses through the
// rendezvous and connects to every peer.
func joinTCP(ctx context.Context, env jobEnv, recv *exitReceiver, sess *Session, logger *slog.Logger) (transport.Transport, net.Conn, error) {
	cfg := tcp.Config{Rank: env.rank, Size: env.size, HostKey: env.secret, Logger: logger, Spin: env.transportSpin(),
		Absent: env.absent(), Late: env.spawned, Seal: env.seal}
	if env.hostAddr != "" {
		cfg.ListenAddr = net.JoinHostPort(env.hostAddr, "0") // FTRMA_HOST_ADDR: where the other hosts reach this one
	}
	t, err := tcp.Listen(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	return rendezvousThen(ctx, env, t, recv, sess, jobwire.WholeAddr(t.Addr()), "connect to peers", func(conn net.Conn, addrs []string) error {
		env.downFailed(t, recv)
		return t.Connect(ctx, addrs)
	})
}

// absent is the ranks this rank's transport starts with as not started:
// at launch every spare; for a spare started later, the spares after it
// and the earlier ones that ended before they joined (env.sparesLost:
// nobody ever admitted them). ftrun starts spares in rank order, so the
// other spares before it are live, with an address, or failed, in its
// roster.
func (env jobEnv) absent() []ftrma.Rank {
	var out []ftrma.Rank
	for r := ftrma.Rank(env.size - env.spares); int(r) < env.size; r++ {
		if !env.spawned || r > env.rank || slices.Contains(env.sparesLost, r) {
			out = append(out, r)
		}
	}
	return out
}

// downFailed reports, for a spare started later, the ranks that had
// failed when it joined (its roster) as exited, before its transport
// connects: they are neither dialed nor waited for.
func (env jobEnv) downFailed(t peerDowner, x *exitReceiver) {
	if env.got == nil {
		return
	}
	for _, r := range env.got.failed {
		if r != env.rank {
			x.exited(t, r)
		}
	}
}

// joinSHM builds the shared-memory transport (its segments exist before
// this rank publishes itself), joins the rendezvous, whose end means every
// rank's segments exist, and maps the peers.
func joinSHM(ctx context.Context, env jobEnv, recv *exitReceiver, sess *Session, logger *slog.Logger) (transport.Transport, net.Conn, error) {
	t, err := shm.Open(shm.Config{Rank: env.rank, Size: env.size, Job: env.job, Logger: logger, Spin: env.transportSpin(), Absent: env.absent()})
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	return rendezvousThen(ctx, env, t, recv, sess, jobwire.WholeAddr("shm"), "map peers", func(net.Conn, []string) error {
		env.downFailed(t, recv)
		return t.Connect(ctx)
	})
}

// joinHybrid builds shared memory toward the ranks on this host and TCP
// toward the others, one transport per peer (transport/multi): the shm
// segments exist before this rank publishes its TCP address. In a job with
// spares both start with the spares absent as env.hybridPlan says, the
// multi transport admits them by the host they start on (NewAdmitting),
// and a spare publishes multi.AdmitAddr(host, its TCP address), the
// address the live ranks admit it with.
func joinHybrid(ctx context.Context, env jobEnv, recv *exitReceiver, sess *Session, logger *slog.Logger) (transport.Transport, net.Conn, error) {
	plan := env.hybridPlan()
	st, err := shm.Open(shm.Config{Rank: env.rank, Size: env.size, Job: env.job, Ranks: plan.shmRanks, Absent: plan.shmAbsent,
		Logger: logger, Spin: env.transportSpin()})
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	cfg := tcp.Config{Rank: env.rank, Size: env.size, HostKey: env.secret, Logger: logger, Spin: env.transportSpin(),
		Absent: env.absent(), Late: env.spawned, Seal: env.seal}
	if env.hostAddr != "" {
		cfg.ListenAddr = net.JoinHostPort(env.hostAddr, "0")
	}
	tt, err := tcp.Listen(cfg)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	// Each peer through the first transport that reaches it: shm those
	// of this host it serves (Config.Ranks, less Config.Absent), tcp the
	// others.
	route, err := multi.AskRoute(env.size, env.absent(), st, tt)
	subs := []multi.Sub{{Name: "shm", T: st}, {Name: "tcp", T: tt}}
	var t *multi.Transport
	switch {
	case err != nil:
	case env.spares > 0:
		t, err = multi.NewAdmitting(subs, route, multi.Admission{Host: plan.host, Local: 0, Remote: 1})
	default:
		t, err = multi.New(subs, route)
	}
	if err != nil {
		st.Close()
		tt.Close()
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	addr := t.Addr()
	if env.spawned {
		addr = multi.AdmitAddr(plan.host, addr)
	}
	return rendezvousThen(ctx, env, t, recv, sess, jobwire.WholeAddr(addr), "connect to peers", func(conn net.Conn, addrs []string) error {
		// Spares started before this one published their host too:
		// TCP wants only the network address.
		addrs = slices.Clone(addrs)
		for r, a := range addrs {
			if _, na, ok := strings.Cut(a, "/"); ok {
				addrs[r] = na
			}
		}
		env.downFailed(t, recv)
		return t.Connect(ctx, addrs)
	})
}

// hybridPlan is how a rank of a shm+tcp job builds its transports.
type hybridPlan struct {
	host      string       // this rank's host for admissions (multi.Admission.Host)
	shmRanks  []ftrma.Rank // shm's Config.Ranks
	shmAbsent []ftrma.Rank // shm's Config.Absent
}

// hybridPlan plans this rank's transports from FTRMA_LOCAL_RANKS (the
// ranks on this host; for a spare, the first ranks there and the spares
// started there so far, itself included) and the spares.
//
// Without spares, shm serves the host's ranks and tcp the others. With
// spares, shm also serves every spare (any spare may start on this host),
// and the ranks absent from the start (env.absent) are multi.Absent in the
// route and absent in both transports; shm counts absent too the spares it
// serves that started on another host. Admit later routes a spare by the
// host it names. A spare routes the ranks before it by whether they run on
// its host.
//
// The host's name must be the same at every rank of the host and differ
// between hosts, while ranks on one machine may stand for several hosts
// (ftrun's agents in tests): FTRMA_LOCAL_RANKS is what defines a host, so
// the name is its lowest first rank (not a spare), which no other host
// lists, or, on a host of spares only, its lowest spare.
func (env jobEnv) hybridPlan() hybridPlan {
	first := env.size - env.spares // ranks below it started at launch
	var p hybridPlan
	var hostRanks []ftrma.Rank
	for _, r := range env.localRanks {
		if int(r) < first {
			hostRanks = append(hostRanks, r)
		}
	}
	name := slices.Min(env.localRanks) // env.localRanks holds this rank at least
	if len(hostRanks) > 0 {
		name = slices.Min(hostRanks)
	}
	p.host = fmt.Sprintf("host-of-rank-%d", name)
	absent := env.absent()
	p.shmRanks = hostRanks
	for r := ftrma.Rank(first); int(r) < env.size; r++ {
		p.shmRanks = append(p.shmRanks, r)
	}
	for _, r := range p.shmRanks {
		if r != env.rank && (slices.Contains(absent, r) || !slices.Contains(env.localRanks, r)) {
			p.shmAbsent = append(p.shmAbsent, r)
		}
	}
	if env.spares == 0 {
		p.shmRanks, p.shmAbsent = env.localRanks, nil
	}
	return p
}

// joinVerbs opens the verbs transport (its queue pairs exist before this
// rank publishes their numbers), exchanges addresses through the rendezvous
// and brings every queue pair to ready-to-send. The queue pairs' retry
// timeout is chosen within the failure detector's bound. The address goes
// out split (verbs.SplitAddress): each peer gets the number of the queue pair
// for it only, which keeps the exchange O(size) bytes per rank. Spares are
// absent (verbs.Config.Absent) until admitted; a spare started later
// (verbs.Config.Late) reports the ranks that had failed before it connects.
//
// With jobwire.TransportVerbsHybrid (never with spares: ftrun refuses
// them) and other ranks on this host, the ranks of the host reach each
// other through shared memory (shm with Config.Ranks) and every rank
// through verbs, which executes every atomic when the device's atomics are
// not the CPU's (transport/multi, Sub.Reach); the shm segments exist
// before the address goes out too.
func joinVerbs(ctx context.Context, env jobEnv, recv *exitReceiver, logger *slog.Logger) (transport.Transport, net.Conn, error) {
	_, bound := DetectorSettings()
	vt, err := verbs.Open(verbs.Config{Rank: env.rank, Size: env.size, Device: env.verbsDev, GIDIndex: env.verbsGID,
		Bound: bound, Logger: logger, Spin: env.transportSpin(), Absent: env.absent(), Late: env.spawned})
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	var t interface {
		transport.Transport
		Connect(context.Context, []string) error
	} = vt
	if env.transport == jobwire.TransportVerbsHybrid && len(env.localRanks) > 1 && env.spares == 0 {
		st, err := shm.Open(shm.Config{Rank: env.rank, Size: env.size, Job: env.job, Ranks: env.localRanks,
			Logger: logger, Spin: env.transportSpin()})
		if err != nil {
			vt.Close()
			return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
		}
		route, err := multi.AskRoute(env.size, nil, st, vt) // shm to the host's ranks, verbs to the others
		var mt *multi.Transport
		if err == nil {
			mt, err = multi.New([]multi.Sub{{Name: "shm", T: st}, {Name: "verbs", T: vt, Reach: true}}, route)
		}
		if err != nil {
			st.Close()
			vt.Close()
			return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
		}
		t = mt
	}
	common, parts, err := verbs.SplitAddress(vt.Addr())
	var addr jobwire.Addr
	if err == nil {
		addr, err = jobwire.SplitAddr(common, parts)
	}
	if err != nil {
		t.Close()
		return nil, nil, fmt.Errorf("launcher: rank %d: %w", env.rank, err)
	}
	return rendezvousThen(ctx, env, t, recv, nil, addr, "connect queue pairs", func(conn net.Conn, addrs []string) error {
		env.downFailed(t, recv)
		if err := t.Connect(ctx, addrs); err != nil {
			return err
		}
		// A queue pair drops what arrives before it is ready, and the
		// device retries only within the detector's bound: wait until every
		// rank's queue pairs are ready before anyone sends.
		return awaitStart(ctx, conn, env, func(r ftrma.Rank) { recv.exited(t, r) })
	})
}

// transportSpin is the busy-poll setting of this rank's transport: ftrun's
// --spin when given, none where ranks share a CPU (jobwire.CPUShare: a
// spinning rank steals a peer's CPU), else the transport's default.
func (env jobEnv) transportSpin() time.Duration {
	if env.spin != 0 {
		return env.spin
	}
	if _, perCPU := jobwire.CPUShare(env.localSize); perCPU > 1 {
		return -1
	}
	return 0
}

// rendezvousThen installs recv on the opened transport t, publishes addr
// through the rendezvous and hands the connection and every rank's address
// (as this rank gets it: jobwire.Addr.For) to connect. A spare's sess
// watches the connection meanwhile (watchEarly); sess may be nil when the
// connection is read by connect itself (verbs: awaitStart). On any failure
// it closes what it opened.
func rendezvousThen(ctx context.Context, env jobEnv, t transport.Transport, recv transport.Receiver, sess *Session, addr jobwire.Addr, what string,
	connect func(conn net.Conn, addrs []string) error) (transport.Transport, net.Conn, error) {
	t.SetReceiver(recv)
	conn, addrs, err := rendezvous(ctx, env, addr)
	if err != nil {
		t.Close()
		return nil, nil, err
	}
	stop := watchEarly(env, sess, t, conn)
	if err := connect(conn, addrs); err != nil {
		stop()
		conn.Close()
		t.Close()
		return nil, nil, fmt.Errorf("launcher: rank %d: %s: %w", env.rank, what, err)
	}
	return t, conn, nil
}

// awaitStart tells the launcher this rank is connected and waits for its
// start. Exit notices that come first are passed on to exited (they would
// otherwise be lost: the watcher starts after Join).
func awaitStart(ctx context.Context, conn net.Conn, env jobEnv, exited func(ftrma.Rank)) error {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := jobwire.WriteFrame(conn, jobwire.MsgConnected, nil); err != nil {
		return err
	}
	for {
		typ, p, err := jobwire.ReadFrame(conn, jobwire.MaxSuperFrame)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return err
		}
		switch typ {
		case jobwire.MsgStart:
			return nil
		case jobwire.MsgAdmit:
			if a, err := jobwire.ParseAdmit(p, env.size); err == nil && a.Rank != env.rank && env.got != nil {
				a.Payload = append([]byte(nil), a.Payload...)
				env.got.admits = append(env.got.admits, a)
			}
		case jobwire.MsgExit:
			if r, err := jobwire.ParseRank(p, env.size); err == nil && r != env.rank {
				exited(r)
			}
		case jobwire.MsgError:
			return fmt.Errorf("launcher says: %s", jobwire.Printable(p))
		}
	}
}

// rendezvous dials the launcher, runs the rank's side of the protocol and
// returns the open connection with every rank's address as this rank gets it.
func rendezvous(ctx context.Context, env jobEnv, addr jobwire.Addr) (net.Conn, []string, error) {
	// The launcher may cut a handshake off (jobwire.HandshakeTries): dial
	// again, a few times, after a pause.
	for try := 1; ; try++ {
		conn, addrs, err := rendezvousOnce(ctx, env, addr)
		if err == nil || !errors.Is(err, errCutOff) || try == jobwire.HandshakeTries || ctx.Err() != nil {
			return conn, addrs, err
		}
		t := time.NewTimer(time.Duration(try) * 20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// errCutOff: the launcher closed the connection before the rendezvous's
// handshake was through.
var errCutOff = errors.New("cut off during the handshake")

func rendezvousOnce(ctx context.Context, env jobEnv, addr jobwire.Addr) (net.Conn, []string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", env.rendezvous)
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: rank %d: rendezvous: %w", env.rank, err)
	}
	// Cancelling ctx unblocks the exchange by expiring the connection.
	raw := conn
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	var addrs []string
	tc, err := jobwire.DialRendezvous(conn, env.secret, env.host, deadline)
	if err == nil {
		err = jobwire.ClientHandshake(tc, env.secret, jobwire.RendezvousHandshake, uint32(env.rank))
	}
	if err != nil && jobwire.ClosedByPeer(err) {
		err = fmt.Errorf("%w: %w", errCutOff, err)
	}
	if err == nil {
		conn = tc
		// Client clears the deadline: a cancellation meanwhile is seen here.
		if err = ctx.Err(); err == nil {
			addrs, err = exchange(conn, env, addr)
		}
	}
	if !stop() && err == nil {
		err = ctx.Err() // too late to trust the connection's deadline
	}
	if err != nil {
		conn.Close()
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return nil, nil, fmt.Errorf("launcher: rank %d: rendezvous with %s: %w", env.rank, env.rendezvous, err)
	}
	return conn, addrs, nil
}

// exchange is the rank's side of the rendezvous conversation after the
// handshake (see internal/jobwire): publish and addrs. An address over
// a limit of the wire is not published: the error, which names the limit,
// goes to the launcher too, so that ftrun says why this rank gave up.
func exchange(conn net.Conn, env jobEnv, addr jobwire.Addr) ([]string, error) {
	if err := addr.Check(int(env.rank), env.size); err != nil {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		jobwire.WriteFrame(conn, jobwire.MsgError, jobwire.ErrorText(err.Error()))
		return nil, err
	}
	if err := jobwire.WriteFrame(conn, jobwire.MsgPublish, addr.Append(nil)); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	typ, p, err := jobwire.ReadFrame(conn, jobwire.MaxAddrsFrame)
	if tl, ok := errors.AsType[*jobwire.FrameTooLongError](err); ok {
		err = &jobwire.LimitError{Rank: int(env.rank), What: "address list from the launcher", Size: tl.Len, Limit: "MaxAddrsFrame", Max: tl.Max}
	}
	if err != nil {
		return nil, fmt.Errorf("read addresses: %w", err)
	}
	if err := jobwire.ExpectFrom(typ, p, jobwire.MsgAddrs, "addresses", "launcher"); err != nil {
		return nil, err
	}
	addrs, err := jobwire.ParseAddrs(p)
	if err != nil {
		return nil, err
	}
	if len(addrs) != env.size {
		return nil, fmt.Errorf("launcher sent %d addresses for a job of %d ranks", len(addrs), env.size)
	}
	if own := addr.For(int(env.rank)); addrs[env.rank] != own {
		return nil, fmt.Errorf("launcher lists %q for this rank, which published %q", addrs[env.rank], own)
	}
	if env.spawned {
		// A spare: the ranks that had failed come next (jobwire/spawn.go).
		typ, p, err := jobwire.ReadFrame(conn, jobwire.MaxSmallFrame+4*env.size)
		if err != nil {
			return nil, fmt.Errorf("read roster: %w", err)
		}
		if err := jobwire.ExpectFrom(typ, p, jobwire.MsgRoster, "roster", "launcher"); err != nil {
			return nil, err
		}
		failed, err := jobwire.ParseRanks(p, env.size)
		if err != nil {
			return nil, err
		}
		if env.got != nil {
			env.got.failed = failed
			for r, a := range addrs {
				if a != "" && ftrma.Rank(r) != env.rank {
					env.got.live = append(env.got.live, ftrma.Rank(r))
				}
			}
		}
	}
	return addrs, nil
}
