package launcher

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// spareJoinTimeout bounds how long a spare may take from its start to its
// published address (a variable for tests).
var spareJoinTimeout = 30 * time.Second

// spawn serves rank by's request for k spare ranks (--respawn; the
// rendezvous calls it, rvConfig.Spawn): one request at a time, it starts
// the next k spares one after the other, each on this host with
// FTRMA_SPAWN=payload, waits until it has joined the rendezvous, and
// admits it (every live rank is told). It returns the spares admitted,
// and why it stopped short of k, if it did. A request for more spares
// than are left starts none.
func (j *Job) spawn(by ftrma.Rank, k int, payload []byte) ([]ftrma.Rank, error) {
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
	case j.path == "":
		err = errors.New("spare ranks start on ftrun's own host, which runs no rank of this job (spares on agents' hosts are not supported yet)")
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
	for range k {
		s, err := j.startSpare(by, payload)
		if err != nil {
			return ranks, err
		}
		ranks = append(ranks, s)
	}
	return ranks, nil
}

// startSpare starts the next spare on this host and admits it once it has
// joined. A spare that cannot start, ends before it joined, or does not
// join within spareJoinTimeout (it is killed) is used up: it counts as a
// failed rank of the job's result, and no live rank hears of it.
func (j *Job) startSpare(by ftrma.Rank, payload []byte) (ftrma.Rank, error) {
	j.mu.Lock()
	running := 0
	for _, p := range j.ranks {
		if p.running && p.link == nil {
			running++
		}
	}
	if !j.opts.Oversubscribe && running >= j.localCap {
		j.mu.Unlock()
		return -1, fmt.Errorf("no free slot on this host for a spare rank: %d ranks run here, on %d slots (--oversubscribe allows more)", running, j.localCap)
	}
	s := ftrma.Rank(j.nextSpare)
	j.nextSpare++
	j.local = append(slices.Clone(j.local), s)
	local := j.local
	j.mu.Unlock()

	size := j.opts.N + j.spares
	if err := j.rv.expect(s, payload); err != nil {
		j.spareFailed(s, err)
		return -1, err
	}
	vars := append(rankVars(s, size, local, j.rv.addr(), j.secret, j.id, j.hostAddr, &j.opts),
		jobwire.EnvSpawn+"="+base64.StdEncoding.EncodeToString(payload))
	if err := j.startRank(j.path, j.ranks[s], rankEnv(j.base, vars, len(local))); err != nil {
		err = fmt.Errorf("start spare rank %d: %w", s, err)
		j.spareFailed(s, err)
		return -1, err
	}
	if err := j.rv.awaitSpare(s, spareJoinTimeout); err != nil {
		j.mu.Lock()
		j.signalLocked(j.ranks[s], syscall.SIGKILL) // nothing if it ended
		j.mu.Unlock()
		return -1, err
	}
	if err := j.rv.admit(s); err != nil {
		return -1, err
	}
	j.out.reportf("started spare rank %d at rank %d's request at %.3fs", s, by, time.Since(j.start).Seconds())
	return s, nil
}

// spareFailed records that spare s could not be started for err.
func (j *Job) spareFailed(s ftrma.Rank, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ranks[s].status = RankStatus{Rank: s, Code: -1, Failed: true, err: err, At: time.Since(j.start)}
}
