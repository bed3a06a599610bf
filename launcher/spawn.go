package launcher

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// spareJoinTimeout bounds how long a spare may take from its start to its
// published address (a variable for tests).
var spareJoinTimeout = 30 * time.Second

// spawn serves rank by's request for k spare ranks (--respawn; the
// rendezvous calls it, rvConfig.Spawn): one request at a time, it starts
// the next k spares one after the other, spare i on the host near[i] ran
// on if it can (spareplace.go; near is empty or k ranks), with
// FTRMA_SPAWN=payload, waits until it has joined the rendezvous, and
// admits it (every live rank is told). It returns the spares admitted,
// and why it stopped short of k, if it did. A request for more spares
// than are left starts none.
func (j *Job) spawn(by ftrma.Rank, k int, payload []byte, near []ftrma.Rank) ([]ftrma.Rank, error) {
	j.spawnMu.Lock()
	defer j.spawnMu.Unlock()
	j.mu.Lock()
	left := j.opts.N + j.spares - j.nextSpare
	var err error
	switch {
	case j.finished || !j.ranks[by].running:
		err = fmt.Errorf("rank %d asked for spare ranks, but it has ended", by)
	case k < 1 || k > left:
		err = fmt.Errorf("asked for %d spare ranks; %d of --respawn=%d left", k, left, j.spares)
	case len(near) != 0 && len(near) != k:
		err = fmt.Errorf("asked for %d spare ranks near %d ranks", k, len(near))
	}
	if err != nil {
		j.mu.Unlock()
		return nil, err
	}
	// The job does not finish while spares start: the asking rank runs,
	// so the count is not zero.
	j.wg.Add(1)
	j.mu.Unlock()
	defer j.wg.Done()
	var ranks []ftrma.Rank
	for i := range k {
		hint := ftrma.Rank(-1)
		if len(near) > 0 {
			hint = near[i]
		}
		s, err := j.startSpare(by, hint, payload)
		for errors.Is(err, errSpareHostLost) && j.sparesLeft() > 0 {
			// Its host was lost under it (a host dying takes a moment:
			// its agent may report a rank's death and take a spare
			// before it goes): the next placement leaves that host out.
			j.out.reportf("%v; trying another host", err)
			s, err = j.startSpare(by, hint, payload)
		}
		if err != nil {
			return ranks, err
		}
		ranks = append(ranks, s)
	}
	return ranks, nil
}

// startSpare starts the next spare, on the host placeSpareLocked picks for
// a replacement of rank near (-1: no hint), and admits it once it has
// joined. A spare that cannot start, ends before it joined, is lost with
// its host, or does not join within spareJoinTimeout (it is killed) is
// used up: it counts as a failed rank of the job's result, and no live
// rank hears of it.
func (j *Job) startSpare(by, near ftrma.Rank, payload []byte) (ftrma.Rank, error) {
	j.mu.Lock()
	h, err := j.placeSpareLocked(near)
	if err != nil {
		j.mu.Unlock()
		return -1, err
	}
	s := ftrma.Rank(j.nextSpare)
	j.nextSpare++
	var here []ftrma.Rank // the ranks of the spare's host, itself included
	if h.link == nil {
		j.local = append(slices.Clone(j.local), s)
		here = j.local
		j.ranks[s].host = j.hostName
	} else {
		h.ranks = append(slices.Clone(h.ranks), s)
		here = h.ranks
		j.ranks[s].host = h.label
	}
	j.mu.Unlock()

	host := 0 // the spare's host in the arbiter's numbering
	if h.link != nil {
		host = 1 + slices.Index(j.links, h.link)
	}
	if j.arb != nil {
		// In the log before the process starts: no spare number is
		// used twice, with or without ftrun (WIRING.md).
		if err := j.claimSpare(s, host, payload); err != nil {
			j.spareFailed(s, err)
			return -1, err
		}
	}
	size := j.opts.N + j.spares
	if err := j.rv.expect(s, payload, host); err != nil {
		j.spareFailed(s, err)
		return -1, err
	}
	spawn := []string{jobwire.EnvSpawn + "=" + base64.StdEncoding.EncodeToString(payload)}
	// The spares before s that ended before they joined: nobody admitted
	// them, and s must count them absent too (not wait for them).
	var lost []string
	for r := ftrma.Rank(j.opts.N); r < s; r++ {
		if !j.rv.isPresent(r) {
			lost = append(lost, strconv.Itoa(int(r)))
		}
	}
	if len(lost) > 0 {
		spawn = append(spawn, jobwire.EnvSparesLost+"="+strings.Join(lost, ","))
	}
	if h.link == nil {
		vars := append(rankVars(s, size, here, j.rv.addr(), j.hostSecret(host), host, j.id, j.hostAddr, &j.opts), spawn...)
		err = j.startRank(j.path, j.ranks[s], rankEnv(j.base, vars, len(here)), -1, nil)
	} else {
		// The agent adds FTRMA_HOST_ADDR, as for the launch's ranks.
		vars := append(rankVars(s, size, here, j.rv.addr(), j.hostSecret(host), host, j.id, "", &j.opts), spawn...)
		err = j.startRemoteSpare(h.link, j.ranks[s], vars)
	}
	if err != nil {
		err = fmt.Errorf("start spare rank %d on %s: %w", s, cmp.Or(h.label, "this host"), err)
		j.spareFailed(s, err)
		if h.link != nil && !h.link.alive() {
			err = fmt.Errorf("%w: %w", errSpareHostLost, err)
		}
		return -1, err
	}
	if err := j.rv.awaitSpare(s, spareJoinTimeout); err != nil {
		j.mu.Lock()
		j.signalLocked(j.ranks[s], syscall.SIGKILL) // nothing if it ended
		j.mu.Unlock()
		if h.link != nil && !h.link.alive() {
			err = fmt.Errorf("%w: %w", errSpareHostLost, err)
		}
		return -1, err
	}
	if j.arb != nil {
		// Joined in the log before any rank hears of it: a spare admitted
		// anywhere is one the log has running.
		if err := j.joinSpare(s); err != nil {
			j.mu.Lock()
			j.signalLocked(j.ranks[s], syscall.SIGKILL)
			j.mu.Unlock()
			return -1, err
		}
	}
	if err := j.rv.admit(s); err != nil {
		return -1, err
	}
	where := ""
	if h.link != nil {
		where = " on " + h.label
	}
	j.out.reportf("started spare rank %d%s at rank %d's request at %.3fs", s, where, by, time.Since(j.start).Seconds())
	return s, nil
}

// claimSpare has the job's arbiter record that spare s starts on host
// (the arbiter's numbering) with payload, and waits until it has.
func (j *Job) claimSpare(s ftrma.Rank, host int, payload []byte) error {
	w := j.arb.watchSpare(s)
	defer w.drop()
	j.arb.claimSpare(s, host, payload)
	e, err := w.next(j.arb.spareClaimWait(), arbiter.EventSpareClaimed)
	if err == nil && (e.By != 0 || e.Host != host) {
		err = fmt.Errorf("node %d claimed it on host %d", e.By+1, e.Host)
	}
	if err != nil {
		return fmt.Errorf("spare rank %d: the job's arbiter did not record ftrun's claim: %w", s, err)
	}
	return nil
}

// joinSpare has the job's arbiter record that spare s published its
// address, and waits until it has.
func (j *Job) joinSpare(s ftrma.Rank) error {
	w := j.arb.watchSpare(s)
	defer w.drop()
	j.arb.joinSpare(s, j.rv.spareAddr(s))
	e, err := w.next(j.arb.spareClaimWait(), arbiter.EventSpareJoined, arbiter.EventSpareLost)
	if err == nil && e.Kind == arbiter.EventSpareLost {
		err = errors.New("it was lost first")
	}
	if err != nil {
		return fmt.Errorf("spare rank %d: the job's arbiter did not record its join: %w", s, err)
	}
	return nil
}

// publishBook gives the job's arbiter the first ranks' addresses, the
// book an agent starts a spare with once ftrun is gone, when each is
// whole (a transport whose addresses have per-peer parts, verbs, needs
// ftrun's rendezvous for its spares).
func (j *Job) publishBook(addrs []jobwire.Addr) {
	if j.arb == nil {
		return
	}
	book := make([]string, len(addrs))
	for i, a := range addrs {
		if a.Width > 0 {
			return
		}
		book[i] = a.Common
	}
	j.arb.publishAddresses(0, book)
}

// errSpareHostLost: a spare was lost before it joined because its host was
// lost; spawn tries another host.
var errSpareHostLost = errors.New("the spare's host was lost")

// sparesLeft is how many spare world ranks are still unused.
func (j *Job) sparesLeft() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.opts.N + j.spares - j.nextSpare
}

// startRemoteSpare has the agent of link l start spare p with vars, and
// then follows it as the launch's ranks (launchRemote). It fails if the
// agent cannot start it, is lost meanwhile, or does not answer within
// agentTimeout: the spare then does not run.
func (j *Job) startRemoteSpare(l *agentLink, p *rankProc, vars []string) error {
	// What the link delivers for p, ready before the agent may send it.
	j.mu.Lock()
	p.link, p.exit = l, make(chan exitedMsg, 1)
	j.mu.Unlock()
	p.fwd.Add(2)
	if _, err := l.spawnRank(p.rank, vars, agentTimeout); err != nil {
		return err
	}
	j.mu.Lock()
	p.running = true
	j.wg.Add(1)
	j.mu.Unlock()
	go j.waitRank(p)
	return nil
}

// spareFailed records that spare s could not be started for err.
func (j *Job) spareFailed(s ftrma.Rank, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ranks[s].status = RankStatus{Rank: s, Code: -1, Failed: true, err: err, At: time.Since(j.start)}
}
