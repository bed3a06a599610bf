package launcher

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// Spares while ftrun is gone (launcher/internal/arbiter/WIRING.md has the protocol).
// Two roles, both an agent's:
//
//   - The asking rank's agent serves its spawn request (MsgSpawn on the
//     lease channel, sent once the rank's channel to ftrun broke): once the
//     log has declared ftrun's host failed, it claims each spare in the log
//     (the lowest spare number still absent, on the host of the rank it
//     replaces if the log has that host live, else on its own), waits for
//     the spare's join or loss, and answers MsgSpawned after the
//     admissions it names (the channel's outbox keeps the order).
//   - The spare's host's agent, on applying a claim by another agent of a
//     spare on its host, starts the process with the job's common
//     variables (from ftrun's arbiter config), and serves its rendezvous on
//     the loopback: the host's secret, its publish, the address list from the
//     log's book and the roster of the ranks ended, then the join proposed.
//     The connection stays the spare's channel, served by the supervisor.
//
// Every agent's supervisor sends the admission of a spare an agent started
// to its ranks as the join applies (hostSupervisor.admit).

// agentSpares is an agent's part in spares without ftrun.
type agentSpares struct {
	j      *agentJob
	d      *arbDriver
	sup    *hostSupervisor
	env    []string // the job's common FTRMA_ variables
	secret []byte
	self   int // this host's index
	first  int // the ranks started at launch are 0..first-1
	size   int
	ln     net.Listener // the spares' rendezvous, on the loopback
	gate   *seclink.Gate

	mu      sync.Mutex
	pending map[ftrma.Rank]*pendingSpare // spares started here, until they joined or ended
	closed  bool
	wg      sync.WaitGroup
}

// pendingSpare is a spare started here that has not joined yet.
type pendingSpare struct {
	taken  bool          // its rendezvous connection authenticated
	joined chan struct{} // closed once its join was proposed
}

// startAgentSpares starts the spare service of job j on this host: its
// rendezvous listener, and its part in the log's spare events.
func startAgentSpares(j *agentJob, a *agentArbiter, sup *hostSupervisor) (*agentSpares, error) {
	var secret []byte
	for _, kv := range a.spareEnv {
		if v, ok := strings.CutPrefix(kv, jobwire.EnvSecret+"="); ok {
			secret, _ = hex.DecodeString(v)
		}
	}
	if len(secret) < jobwire.MinSecret {
		return nil, errors.New("the spares' environment carries no host secret")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sp := &agentSpares{j: j, d: a.d, sup: sup, env: a.spareEnv, secret: secret, self: int(a.d.cfg.ID - 1),
		first: len(a.d.cfg.RankHost), size: j.spec.size, ln: ln, gate: seclink.NewGate(maxSupervisorHandshakes),
		pending: make(map[ftrma.Rank]*pendingSpare)}
	sp.wg.Add(1)
	go sp.accept()
	a.d.onSpare(sp.event)
	sup.setSpawn(sp.serveSpawn, j.spec.size)
	return sp, nil
}

// close stops the rendezvous; a claim applied later on this host is
// reported lost at once.
func (sp *agentSpares) close() {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	sp.closed = true
	sp.mu.Unlock()
	sp.ln.Close()
	sp.wg.Wait()
}

// event is the node's spare events (on the arbiter's goroutine).
func (sp *agentSpares) event(e arbiter.Event) {
	switch e.Kind {
	case arbiter.EventSpareClaimed:
		if e.Host == sp.self && e.By != 0 {
			go sp.start(e.Rank, []byte(e.Payload))
		}
	case arbiter.EventSpareJoined:
		if e.By != 0 { // ftrun admitted its own
			sp.sup.admit(jobwire.Admission{Rank: e.Rank, Addr: e.Addr, Payload: []byte(e.Payload)})
		}
	case arbiter.EventSpareLost:
		if e.Host == sp.self {
			// Ended already, or one ftrun claimed and its rendezvous
			// was ftrun's: it must not run on.
			go sp.j.signal(e.Rank, syscall.SIGKILL)
		}
	}
}

// start starts spare r, claimed on this host by another agent, with the
// spawn's payload, and kills it if it has not joined within
// spareJoinTimeout. A spare that cannot start is reported ended (the log
// then has it lost).
func (sp *agentSpares) start(r ftrma.Rank, payload []byte) {
	job := jobwire.Printable([]byte(sp.j.spec.job))
	fail := func(err error) {
		sp.j.logf("job %s: spare rank %d: %v", job, r, err)
		sp.d.reportExit(r, -1)
	}
	var here, lost []string
	sp.d.withState(func(st *arbiter.State, _ bool) {
		for q := range ftrma.Rank(st.NumRanks()) {
			ri := st.Rank(q)
			if ri.Host == sp.self && ri.Status != arbiter.RankAbsent && ri.Status != arbiter.RankLost {
				here = append(here, strconv.Itoa(int(q)))
			}
			if int(q) >= sp.first && q < r && ri.Status != arbiter.RankRunning && ri.Status != arbiter.RankExited && ri.Status != arbiter.RankFailed {
				lost = append(lost, strconv.Itoa(int(q)))
			}
		}
	})
	ps := &pendingSpare{joined: make(chan struct{})}
	sp.mu.Lock()
	closed := sp.closed
	if !closed {
		sp.pending[r] = ps
	}
	sp.mu.Unlock()
	if closed {
		fail(errors.New("this host's part of the job has ended"))
		return
	}
	defer func() {
		sp.mu.Lock()
		delete(sp.pending, r)
		sp.mu.Unlock()
	}()
	vars := append(slices.Clone(sp.env),
		jobwire.EnvRank+"="+strconv.Itoa(int(r)),
		jobwire.EnvRendezvous+"="+sp.ln.Addr().String(),
		jobwire.EnvLocalSize+"="+strconv.Itoa(len(here)),
		jobwire.EnvSpawn+"="+base64.StdEncoding.EncodeToString(payload))
	if slices.Contains(sp.env, jobwire.EnvTransport+"="+jobwire.TransportHybrid) || slices.Contains(sp.env, jobwire.EnvTransport+"="+jobwire.TransportVerbsHybrid) {
		vars = append(vars, jobwire.EnvLocalRanks+"="+strings.Join(here, ","))
	}
	if len(lost) > 0 {
		vars = append(vars, jobwire.EnvSparesLost+"="+strings.Join(lost, ","))
	}
	p, err := sp.j.startSpareProc(r, vars, nil)
	if err != nil {
		fail(err)
		return
	}
	sp.j.logf("job %s: started spare rank %d (ftrun is gone)", job, r)
	t := time.NewTimer(spareJoinTimeout)
	defer t.Stop()
	select {
	case <-ps.joined:
	case <-p.reaped:
	case <-t.C:
		sp.j.logf("job %s: spare rank %d did not join within %v: killing it", job, r, spareJoinTimeout)
		sp.j.signal(r, syscall.SIGKILL)
	}
}

func (sp *agentSpares) accept() {
	defer sp.wg.Done()
	acceptEach(sp.ln, nil, "spares' rendezvous", sp.j.logf, func(c net.Conn) bool {
		sp.wg.Add(1)
		go func() {
			defer sp.wg.Done()
			if !sp.rendezvous(c) {
				c.Close()
			}
		}()
		return true
	})
}

// rendezvous serves one spare's rendezvous on c (the rank's side is
// startup's, as with ftrun); it reports whether c became the spare's
// channel (the supervisor's from then on).
func (sp *agentSpares) rendezvous(c net.Conn) bool {
	job := jobwire.Printable([]byte(sp.j.spec.job))
	release := sp.gate.Admit(c)
	tc, _, _, err := jobwire.AcceptRendezvous(c, func(h int) ([]byte, error) {
		if h != sp.self {
			return nil, fmt.Errorf("a rank of host %d at the spares' rendezvous of host %d", h, sp.self)
		}
		return sp.secret, nil
	}, time.Now().Add(agentTimeout))
	release()
	if err != nil {
		sp.j.logf("job %s: spares' rendezvous: refused %s: %v", job, c.RemoteAddr(), err)
		return false
	}
	tc.SetDeadline(time.Now().Add(agentTimeout))
	var ps *pendingSpare
	id, err := jobwire.ServerHandshake(tc, sp.secret, jobwire.RendezvousHandshake, func(id uint32) error {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		ps = sp.pending[ftrma.Rank(id)]
		switch {
		case ps == nil:
			return fmt.Errorf("rank %d is not a spare this agent started", id)
		case ps.taken:
			return fmt.Errorf("rank %d already joined", id)
		}
		ps.taken = true
		return nil
	})
	if err != nil {
		sp.j.logf("job %s: spares' rendezvous: refused %s: %v", job, c.RemoteAddr(), err)
		return false
	}
	r := ftrma.Rank(id)
	refuse := func(err error) bool {
		sp.j.logf("job %s: spare rank %d: %v", job, r, err)
		jobwire.WriteFrame(tc, jobwire.MsgError, jobwire.ErrorText(err.Error()))
		return false
	}
	typ, p, err := jobwire.ReadFrame(tc, jobwire.MaxPublish(sp.size))
	if err == nil && typ != jobwire.MsgPublish {
		err = fmt.Errorf("message type %d, want publish", typ)
	}
	if err != nil {
		return refuse(fmt.Errorf("published no address: %w", err))
	}
	addr, err := jobwire.ParsePublish(p, int(r), sp.size)
	if err != nil {
		return refuse(err)
	}
	if addr.Width > 0 {
		return refuse(errors.New("its transport publishes per-peer addresses (verbs), which only ftrun's rendezvous can hand out: spares of such a job need ftrun"))
	}
	// The list and the roster from the log, and the channel adopted, in
	// one step of the arbiter's goroutine: every admission applied before
	// is in the list, every one after goes to the channel.
	list := make([]jobwire.Addr, sp.size)
	var failed []ftrma.Rank
	var ch *supChan
	why := ""
	tc.SetDeadline(time.Time{})
	sp.d.withState(func(st *arbiter.State, _ bool) {
		if st.Rank(r).Status != arbiter.RankStarting {
			why = fmt.Sprintf("the job's arbiter has it %v, not starting", st.Rank(r).Status)
			return
		}
		for q := range ftrma.Rank(min(st.NumRanks(), sp.size)) {
			switch ri := st.Rank(q); {
			case q == r:
				list[q] = jobwire.WholeAddr(addr.Common)
			case ri.Status == arbiter.RankRunning && ri.Addr == "":
				why = fmt.Sprintf("the job's arbiter holds no address for rank %d", q)
				return
			case ri.Status == arbiter.RankRunning:
				list[q] = jobwire.WholeAddr(ri.Addr)
			case ri.Status == arbiter.RankExited || ri.Status == arbiter.RankFailed:
				failed = append(failed, q)
			}
		}
		var ok bool
		if ch, ok = sp.sup.adopt(tc, r); !ok {
			why = "this host's supervisor has stopped"
		}
	})
	if ch == nil {
		if why == "" {
			why = "this host's arbiter node has stopped"
		}
		return refuse(errors.New(why))
	}
	ch.wmu.Lock()
	tc.SetWriteDeadline(time.Now().Add(agentTimeout))
	err = jobwire.WriteFrame(tc, jobwire.MsgAddrs, jobwire.AppendPartColumn(jobwire.AppendCommons(nil, list), make([]string, sp.size)))
	if err == nil {
		err = jobwire.WriteFrame(tc, jobwire.MsgRoster, jobwire.AppendRanks(nil, failed))
	}
	tc.SetWriteDeadline(time.Time{})
	ch.wmu.Unlock()
	ch.release()
	if err != nil {
		sp.j.logf("job %s: spare rank %d: sending its address list: %v", job, r, err)
		return true // the supervisor closes the channel
	}
	sp.d.joinSpare(r, addr.Common)
	close(ps.joined)
	return true
}

// serveSpawn answers rank by's spawn request q on its channel ch, once
// the spares are admitted or the spawn failed.
func (sp *agentSpares) serveSpawn(ch *supChan, by ftrma.Rank, q jobwire.SpawnRequest) {
	a := jobwire.SpawnAnswer{ID: q.ID}
	var err error
	a.Ranks, err = sp.spawn(by, q)
	if err != nil {
		a.Err = err.Error()
		sp.j.logf("job %s: rank %d asked for %d spare ranks: %v", jobwire.Printable([]byte(sp.j.spec.job)), by, q.K, err)
	}
	ch.queue(jobwire.AppendFrame(nil, jobwire.MsgSpawned, a.Append(nil)))
}

// spawn serves a request for q.K spares: it waits until the log has
// ftrun's host out of the job (while ftrun is in, only ftrun starts
// spares), at most the host-verdict bound, then claims and awaits each.
func (sp *agentSpares) spawn(by ftrma.Rank, q jobwire.SpawnRequest) ([]ftrma.Rank, error) {
	if q.K < 1 || len(q.Near) != 0 && len(q.Near) != int(q.K) {
		return nil, fmt.Errorf("asked for %d spare ranks near %d ranks", q.K, len(q.Near))
	}
	deadline := time.Now().Add(arbiter.VerdictBound(sp.d.cfg) + sp.d.cfg.ElectionTimeout())
	for {
		var out, acting bool
		if !sp.d.withState(func(st *arbiter.State, a bool) { out, acting = st.Host(0).Failed, a }) {
			return nil, errors.New("this host's arbiter node has stopped")
		}
		if out && acting {
			break
		}
		if time.Now().After(deadline) {
			if !acting {
				return nil, errors.New("this host does not hold its lease from the job's arbiter")
			}
			return nil, errors.New("ftrun is still in the job (this rank lost its channel to it): only ftrun starts spares then")
		}
		time.Sleep(sp.d.cfg.Tick)
	}
	var ranks []ftrma.Rank
	for i := range int(q.K) {
		near := ftrma.Rank(-1)
		if len(q.Near) > 0 {
			near = q.Near[i]
		}
		s, err := sp.claimOne(near, q.Payload)
		if err != nil {
			return ranks, err
		}
		ranks = append(ranks, s)
	}
	return ranks, nil
}

// claimOne claims the lowest spare number still absent, near rank near's
// host if the log has it live (-1: no hint), else on this host, and waits
// until the spare joined; a number another agent claimed first is
// skipped.
func (sp *agentSpares) claimOne(near ftrma.Rank, payload []byte) (ftrma.Rank, error) {
	for range sp.size {
		s, host, why := ftrma.Rank(-1), sp.self, ""
		sp.d.withState(func(st *arbiter.State, _ bool) {
			for q := range ftrma.Rank(st.NumRanks()) {
				if st.Rank(q).Status == arbiter.RankRunning && st.Rank(q).Addr == "" {
					why = fmt.Sprintf("the job's arbiter holds no address for rank %d: its transport exchanges per-peer addresses (verbs), or ftrun was gone before it published them; spares of such a job need ftrun", q)
					return
				}
			}
			for r := ftrma.Rank(sp.first); int(r) < sp.size; r++ {
				if st.Rank(r).Status == arbiter.RankAbsent {
					s = r
					break
				}
			}
			if ri := st.Rank(near); near >= 0 && ri.Status != arbiter.RankAbsent && !st.Host(ri.Host).Failed {
				host = ri.Host
			}
		})
		switch {
		case why != "":
			return -1, errors.New(why)
		case s < 0:
			return -1, fmt.Errorf("no spare rank left of the job's %d", sp.size-sp.first)
		}
		w := sp.d.watchSpare(s)
		sp.d.claimSpare(s, host, payload)
		e, err := w.next(sp.d.spareClaimWait(), arbiter.EventSpareClaimed)
		if err != nil {
			w.drop()
			return -1, fmt.Errorf("spare rank %d: the job's arbiter did not record the claim: %w", s, err)
		}
		if e.By != sp.self || e.Host != host {
			w.drop()
			continue // another agent's: the next number
		}
		e, err = w.next(spareJoinTimeout+sp.d.spareClaimWait(), arbiter.EventSpareJoined, arbiter.EventSpareLost)
		w.drop()
		switch {
		case err != nil:
			return -1, fmt.Errorf("spare rank %d on host %d did not join: %w", s, host, err)
		case e.Kind == arbiter.EventSpareLost:
			return -1, fmt.Errorf("spare rank %d on host %d ended before it joined", s, host)
		}
		return s, nil
	}
	return -1, errors.New("every spare number was claimed by other agents first")
}
