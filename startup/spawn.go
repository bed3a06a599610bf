package startup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// ErrNoSpares is returned by Spawn in a job without spare ranks (ftrun
// started it without --respawn).
var ErrNoSpares = errors.New("the job has no spare ranks (ftrun --respawn)")

// ErrSpawn is wrapped by Spawn's error when ftrun answered that it could
// not start every spare asked for: none are left, a spare ended before it
// joined or did not join in time, or no host can take it. The text says
// which.
var ErrSpawn = errors.New("ftrun could not start the spare ranks")

// joinInfo is what a rank learns at the rendezvous beyond the addresses.
type joinInfo struct {
	failed []ftrma.Rank        // a spare: the roster, the ranks that had failed
	live   []ftrma.Rank        // a spare: the other ranks live when it joined
	admits []jobwire.Admission // admissions that came while waiting for the start
}

// admitter is the part of a transport that admits a spare rank (the
// transports' transport.Admitter): addr is the address the spare published
// for this rank.
type admitter interface {
	Admit(peer ftrma.Rank, addr string) error
}

// Spares is the number of spare ranks of the job: world ranks
// Size()-Spares() and above start absent, and Spawn starts them.
func (s *Session) Spares() int { return s.spares }

// Spawned reports whether this rank is a spare that ftrun started later, at
// some rank's request (Spawn), and the payload of that request.
func (s *Session) Spawned() (payload []byte, ok bool) { return s.spawn, s.spawned }

// FailedAtJoin is, for a spare started later (Spawned), the ranks that had
// failed when it joined: ftrun saw them end. Together with the addresses
// the spare's transport was connected with, it gives every rank's state at
// that moment: live (it had an address), failed (listed here), or absent
// (a spare not started). Exit notices for the failed ranks reach the
// receiver too, as for any rank. Nil for the other ranks.
func (s *Session) FailedAtJoin() []ftrma.Rank { return s.failed }

// LiveAtJoin is, for a spare started later (Spawned), the other ranks that
// were live when it joined: those its transport got an address for. Every
// rank in neither LiveAtJoin nor FailedAtJoin, itself aside, was absent
// then. Nil for the other ranks.
func (s *Session) LiveAtJoin() []ftrma.Rank { return s.live }

// OnAdmit sets f to hear of every spare rank that joins the job from now
// on, and at once of those that joined before OnAdmit was called, in the
// order they joined: s is the spare's rank, addr its transport address as
// this rank gets it, payload the payload of the Spawn that started it.
// Before f hears of s, the transport has admitted it (if it implements
// Admit(ftrma.Rank, string) error; an error there is logged). f is called
// from the goroutine that reads the supervision channel, never
// concurrently; it must not block: lease grants wait behind it. A Spawn
// answer comes after the admissions of the spares it names, so when Spawn
// returns, f has heard of them.
func (s *Session) OnAdmit(f func(s ftrma.Rank, addr string, payload []byte)) {
	// The backlog goes out before any later admission, and never
	// alongside one: both are delivered under dmu.
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.amu.Lock()
	backlog := s.backlog
	s.backlog = nil
	s.onAdmit = f
	s.amu.Unlock()
	for _, a := range backlog {
		f(a.Rank, a.Addr, a.Payload)
	}
}

// admitted carries out an admission: the transport first, then OnAdmit's
// function, or the backlog until it is set. A spare admitted before is
// not admitted again (its admission may come from ftrun and from this
// host's agent).
func (s *Session) admitted(a jobwire.Admission) {
	s.amu.Lock()
	again := slices.Contains(s.admittedSpares, a.Rank)
	if !again {
		s.admittedSpares = append(s.admittedSpares, a.Rank)
	}
	s.amu.Unlock()
	if again {
		return
	}
	if t, ok := s.t.(admitter); ok {
		if err := t.Admit(a.Rank, a.Addr); err != nil {
			ftrma.Logger().Error(fmt.Sprintf("ftrma rank %d: admit spare rank %d: %v", s.rank, a.Rank, err),
				ftrma.LogRank, s.rank, ftrma.LogJob, s.job)
		}
	}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.amu.Lock()
	f := s.onAdmit
	if f == nil {
		s.backlog = append(s.backlog, a)
	}
	s.amu.Unlock()
	if f != nil {
		f(a.Rank, a.Addr, a.Payload)
	}
}

// answered hands ftrun's answer to the Spawn waiting for it.
func (s *Session) answered(a jobwire.SpawnAnswer) {
	s.amu.Lock()
	ch := s.spawnWait[a.ID]
	delete(s.spawnWait, a.ID)
	s.amu.Unlock()
	if ch != nil {
		ch <- a // buffered
	}
}

// Spawn asks ftrun to start k spare ranks (once the channel to ftrun has
// broken under an agent's lease, this host's agent, which starts them
// once the job's arbiter has ftrun's host out of the job), each with
// payload (at most jobwire.MaxSpawnPayload bytes, opaque to ftrun: the
// spare reads it with Spawned, and every live rank gets it with the
// admission, see OnAdmit).
// ftrun serves one request at a time: it starts the spares one by one,
// waits until each has joined, tells every live rank (OnAdmit), and then
// answers.
//
// It returns the world ranks of the spares admitted, in order. When ftrun
// started fewer than k, the error wraps ErrSpawn and says why, and the
// ranks are those admitted before the failure (they are live ranks: the
// others heard of them too). A request for more spares than are left
// starts none. In a job without spares the error is ErrNoSpares. If ctx
// ends first Spawn returns ctx's error, and ftrun may still start and
// admit the spares: OnAdmit hears of them.
//
// ftrun places the spares as SpawnNear says for spares without a hint.
func (s *Session) Spawn(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error) {
	return s.SpawnNear(ctx, k, payload, nil)
}

// SpawnNear is Spawn with a placement hint: near is empty, or k ranks of
// the job, and spare i replaces rank near[i] (a failed rank). ftrun starts
// spare i on near[i]'s host if that host is alive (its agent reachable)
// and has a free slot; else on a host with a free slot (ftrun
// --spare-hosts, or a host of the hostfile or allocation with slots beyond
// -n); else on ftrun's own host if it runs ranks of the job; else the
// spawn fails (ErrSpawn) and says why. Without a hint a spare goes to the
// first host with a free slot, in the same order.
func (s *Session) SpawnNear(ctx context.Context, k int, payload []byte, near []ftrma.Rank) ([]ftrma.Rank, error) {
	switch {
	case s.spares == 0:
		return nil, fmt.Errorf("startup: spawn: %w", ErrNoSpares)
	case k < 1 || k > s.spares:
		return nil, fmt.Errorf("startup: spawn of %d ranks in a job of %d spares: %w", k, s.spares, ftrma.ErrInvalid)
	case len(payload) > jobwire.MaxSpawnPayload:
		return nil, fmt.Errorf("startup: spawn payload of %d bytes, over %d: %w", len(payload), jobwire.MaxSpawnPayload, ftrma.ErrInvalid)
	case len(near) != 0 && len(near) != k:
		return nil, fmt.Errorf("startup: spawn of %d ranks near %d: %w", k, len(near), ftrma.ErrInvalid)
	}
	for _, r := range near {
		if r < 0 || int(r) >= s.size {
			return nil, fmt.Errorf("startup: spawn near rank %d of a job of %d: %w", r, s.size, ftrma.ErrInvalid)
		}
	}
	req := jobwire.SpawnRequest{K: uint32(k), Payload: payload, Near: near}
	if n := 1 + len(req.Append(nil)); n > jobwire.MaxSuperFrame {
		return nil, fmt.Errorf("startup: spawn request of %d bytes, over %d: %w", n, jobwire.MaxSuperFrame, ftrma.ErrInvalid)
	}
	ch := make(chan jobwire.SpawnAnswer, 1)
	s.amu.Lock()
	s.spawnSeq++
	id := s.spawnSeq
	s.spawnWait[id] = ch
	s.amu.Unlock()
	forget := func() {
		s.amu.Lock()
		delete(s.spawnWait, id)
		s.amu.Unlock()
	}
	// Once the channel to ftrun has broken under an agent's lease, the
	// request goes to this host's agent, which serves it once the job's
	// arbiter has ftrun's host out of the job.
	c, mu := s.conn, &s.wmu
	if s.local != nil && s.ftrunGone.Load() {
		c, mu = s.local, &s.smu
	}
	mu.Lock()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	req.ID = id
	err := jobwire.WriteFrame(c, jobwire.MsgSpawn, req.Append(nil))
	c.SetWriteDeadline(time.Time{})
	mu.Unlock()
	if err != nil {
		forget()
		return nil, fmt.Errorf("startup: spawn: %w", err)
	}
	select {
	case a := <-ch:
		if a.Err != "" {
			return a.Ranks, fmt.Errorf("startup: spawn of %d ranks: %w: %s", k, ErrSpawn, a.Err)
		}
		return a.Ranks, nil
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("startup: spawn: %w", ctx.Err())
	case <-s.stop:
		forget()
		return nil, fmt.Errorf("startup: spawn: %w", ftrma.ErrClosed)
	}
}
