package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/agree"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/transport"
)

var be = binary.BigEndian

const collHeader = 1 + 4 + 8

// MaxCollectivePayload is the largest contribution of one rank to a collective.
const MaxCollectivePayload = transport.MaxControlMessage - collHeader

// worldContext is the context id of the world communicator.
const worldContext = 1

// Comm is a communicator: a group of ranks with a context id, over the
// process's transport. All methods may be called from any goroutine, but
// collectives on one communicator (Barrier, Bcast, Allgather, Agree, Shrink)
// are called one at a time, in the same order on every rank.
//
// Failure semantics (ULFM): no call blocks forever after a failure. Barrier,
// Bcast and Allgather return an error wrapping ftrma.ErrProcFailed when a rank
// they need has failed, and ftrma.ErrRevoked once the communicator is revoked.
// Agree and Shrink work across failures and revocation.
//
// Under ftrun, while this rank's lease is being rescued (it ran out, and
// one more ask is out: Launcher.Rescuing), Barrier, Bcast,
// Allgather, Agree and Shrink wait before they start, for at most a quarter
// lease term: a rank that may have been given up starts nothing new.
type Comm struct {
	rt      *runtime
	ctxID   uint32
	members []ftrma.Rank // world rank of each communicator rank
	index   []ftrma.Rank // communicator rank of each world rank, -1 if not a member
	rank    ftrma.Rank
	session Launcher // the launcher of Start, told of the departure and closed by Close; may be nil
	world   bool     // the world communicator owns the runtime and transport
	// replaces is, for a spare's communicator made by Replace, the world
	// rank of the failed process it took over; -1 otherwise.
	replaces ftrma.Rank

	mu        sync.Mutex                // guards the fields below
	seq       uint64                    // collectives started
	agreeSeq  uint64                    // agreements started
	decisions map[uint64]agree.Decision // decided agreements not yet collected
	nacked    int                       // failures acknowledged: the first nacked of GetFailed (AckFailed)
	abandoned bool                      // a collective returned early: contributions for it may still come
	closed    bool
}

// New builds the world communicator over a connected transport (tests use
// memnet endpoints) and installs its runtime as the transport's receiver:
// NewWorld with the transport alone.
func New(t transport.Transport, cfg Config) (*Comm, error) {
	return NewWorld(context.Background(), Start{Transport: t}, cfg)
}

// newWorld returns the world communicator: the ranks that start with the
// job, 0 .. n-Spares-1.
func newWorld(rt *runtime) *Comm {
	members := make([]ftrma.Rank, rt.n-rt.cfg.Spares)
	for r := range members {
		members[r] = ftrma.Rank(r)
	}
	return newWorldOf(rt, members)
}

// newWorldOf returns the communicator that owns the runtime and transport,
// over members.
func newWorldOf(rt *runtime, members []ftrma.Rank) *Comm {
	c := newComm(rt, worldContext, members)
	c.world = true
	return c
}

// newSpare builds the runtime of a spare started after the job began (see
// newSpareRuntime) over a connected transport, installs it as the
// transport's receiver, and returns the communicator that owns it: this
// rank alone, on the world's context id. The spare joins the others in a
// communicator made with it later (Replace); until then a
// revocation of the others' world communicator also revokes this one.
func newSpare(t transport.Transport, cfg Config, live, failed []ftrma.Rank) (*Comm, error) {
	rt, err := newSpareRuntime(t, cfg, live, failed)
	if err != nil {
		return nil, err
	}
	c := newWorldOf(rt, []ftrma.Rank{rt.self})
	t.SetReceiver(rt)
	rt.start()
	return c, nil
}

// newComm registers a communicator of the given members with the runtime.
func newComm(rt *runtime, ctxID uint32, members []ftrma.Rank) *Comm {
	c := &Comm{rt: rt, ctxID: ctxID, members: members, index: make([]ftrma.Rank, rt.n), rank: -1, replaces: -1,
		decisions: make(map[uint64]agree.Decision)}
	for i := range c.index {
		c.index[i] = -1
	}
	for i, w := range members {
		c.index[w] = ftrma.Rank(i)
		if w == rt.self {
			c.rank = ftrma.Rank(i)
		}
	}
	rt.mu.Lock()
	rt.comms[ctxID] = c
	rt.closedC.remove(ctxID) // live again
	rt.mu.Unlock()
	// The machine starts the communicator's agreement with the failures it
	// knows by then, and hands it the messages that came early.
	rt.do(func() { rt.m.addComm(time.Now(), ctxID, members) })
	return c
}

// Rank returns this process's rank in the communicator.
func (c *Comm) Rank() ftrma.Rank { return c.rank }

// Size returns the number of ranks in the communicator.
func (c *Comm) Size() int { return len(c.members) }

// Transport returns the process's transport (shared by all communicators).
func (c *Comm) Transport() transport.Transport { return c.rt.t }

// TransportRank returns the transport (world) rank of communicator rank r.
func (c *Comm) TransportRank(r ftrma.Rank) ftrma.Rank { return c.members[r] }

// ProcFailed reports whether communicator rank r is known to be gone: it
// failed, or it left cleanly (Close, Finalize). Either way it takes part in
// nothing any more, and windows, stores and agreements route around it as
// they do around a failure. Failed and GetFailed list the failures only,
// Departed the departures. It reads local knowledge only.
func (c *Comm) ProcFailed(r ftrma.Rank) bool {
	if r < 0 || int(r) >= len(c.members) {
		return false
	}
	return c.rt.isGone(c.members[r])
}

// FailuresChanged returns a channel closed when this process next learns
// of a failure or a departure (of any rank of the job: ProcFailed, Failed
// and Departed may have changed), so that a caller reacts at once instead
// of polling. Ask again after it closes.
func (c *Comm) FailuresChanged() <-chan struct{} {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	return c.rt.failedCh
}

// Failed returns the communicator ranks known to have failed, in rank order.
// Local: no communication. Ranks that left cleanly (Close, Finalize) are not
// failures: they are listed by Departed. GetFailed gives the same ranks in
// the order they were learned, as MPI_Comm_get_failed does.
func (c *Comm) Failed() []ftrma.Rank {
	return c.membersIn(func(rt *runtime) []bool { return rt.failed })
}

// membersIn returns, in rank order, the communicator ranks whose world rank
// is set in the runtime's per-world-rank flags that set picks (read under
// rt.mu).
func (c *Comm) membersIn(set func(rt *runtime) []bool) []ftrma.Rank {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	flags := set(c.rt)
	var out []ftrma.Rank
	for i, w := range c.members {
		if flags[w] {
			out = append(out, ftrma.Rank(i))
		}
	}
	return out
}

// FailureAck acknowledges the failures known now (MPI_Comm_failure_ack):
// Agree no longer reports them with ErrProcFailed.
//
// Deprecated: use AckFailed(c.Size()), MPI 5's MPI_Comm_ack_failed.
func (c *Comm) FailureAck() { c.AckFailed(c.Size()) }

// FailureGetAcked returns the communicator ranks whose failure is
// acknowledged (by FailureAck or AckFailed), in rank order.
//
// Deprecated: the acknowledged ranks are the first AckFailed(0) ranks of
// GetFailed, as in MPI 5.
func (c *Comm) FailureGetAcked() []ftrma.Rank {
	failed := c.GetFailed()
	out := failed[:min(c.AckFailed(0), len(failed))]
	slices.Sort(out)
	return out
}

func (c *Comm) revokeID() string { return revokeNoticeID(c.ctxID) }

// Revoke revokes the communicator at every rank (MPI_Comm_revoke): a notice is
// reliably broadcast, and once it arrives every rank's non-fault-tolerant
// operations on the communicator return ftrma.ErrRevoked. Agree and Shrink
// still work.
func (c *Comm) Revoke() { c.Notify(c.revokeID()) }

// RevokeGroup revokes the communicator at the listed ranks only (and here):
// failure propagation to a subset, for ranks that share work with a failed
// one while the others carry on undisturbed. The listed ranks' IsRevoked turns
// true and their non-fault-tolerant operations on the communicator return
// ftrma.ErrRevoked; the other ranks see nothing. Ranks known failed are
// skipped.
func (c *Comm) RevokeGroup(ranks []ftrma.Rank) error {
	for _, r := range ranks {
		if r < 0 || int(r) >= len(c.members) {
			return &ftrma.OpError{Op: "revoke group", Rank: r, Err: ftrma.ErrRankOutOfRange}
		}
	}
	id := c.revokeID()
	c.rt.notice(id)
	for _, r := range ranks {
		if r == c.rank || c.ProcFailed(r) {
			continue
		}
		c.rt.t.Send(c.members[r], append([]byte{kindNotice}, id...))
	}
	return nil
}

// IsRevoked reports whether a revocation of the communicator has arrived. It
// reads local state only: no communication at call time.
func (c *Comm) IsRevoked() bool { return c.Noticed(c.revokeID()) }

// Revoked returns a channel closed once a revocation of the communicator
// has arrived here (IsRevoked turns true), so that a rank can wait for it
// without polling: a poll loop that sleeps between looks sees it late, by
// up to the sleep's real length (a Go sleep shorter than a millisecond
// lasts about a millisecond in an otherwise idle process). A revocation
// may never come: wait for it together with a context. Local: no
// communication.
func (c *Comm) Revoked() <-chan struct{} { return c.rt.noticeChan(c.revokeID()) }

// ContextID identifies the communicator among the process's communicators.
func (c *Comm) ContextID() uint32 { return c.ctxID }

// Notify reliably broadcasts notice id to every rank of the job (windows use
// it for their revocation). It is noticed here at once.
func (c *Comm) Notify(id string) {
	c.rt.notice(id)
	c.rt.do(func() { c.rt.originate(id, nil) })
}

// Noticed reports whether notice id has arrived (local, no communication).
// Windows ask before every operation, so the common case — no notice at
// all — takes no lock.
func (c *Comm) Noticed(id string) bool {
	if c.rt.noticed.Load() == 0 {
		return false
	}
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	return c.rt.notices[id]
}

// NoticeGeneration is a counter of the notices this process has recorded,
// which only grows: while it has not changed since Noticed(id) said false,
// Noticed(id) still says false. A window reads it on every operation
// instead of asking Noticed (window.NoticeCounter).
func (c *Comm) NoticeGeneration() *atomic.Uint64 { return &c.rt.noticeGen }

// VerdictBound is the longest the runtime may take from a peer falling
// silent (its host cut off, its process hung) to this rank knowing the
// peer's fate: declared failed, or heard from again. It is the job's chain
// of failure bounds (failure.Chain: the detector, ftrun's probe, the host
// layer, the lease ftrun waits out, or the replicated arbiter's verdict)
// with this rank's detector timeout, lease term and arbiter bound; a rank outside ftrun (no lease: its detector decides alone)
// gets a few detector timeouts. An operation that waits for an unreachable
// peer should not give up on it before this has passed: the store keeps
// retrying toward a replica for as long.
func (c *Comm) VerdictBound() time.Duration {
	ch := failure.Chain{Detector: c.rt.cfg.Detector.WithDefaults().Timeout}
	if c.rt.lease != nil {
		ch.Lease = c.rt.lease.LeaseTerm()
		if a, ok := c.rt.lease.(interface{ HostVerdictBound() time.Duration }); ok {
			ch.Arbiter = a.HostVerdictBound() // a Launcher's lease has one
		}
	}
	return ch.Verdict()
}

// awaitLease holds a new collective or agreement back while this rank's
// lease from ftrun is being rescued (Launcher.Rescuing): a rank that
// may have been given up starts nothing new until its lease is renewed, or
// it stops. The rescue ends within a quarter lease term. It returns ctx's
// error should ctx end first.
func (c *Comm) awaitLease(ctx context.Context, op string) error {
	if c.rt.lease == nil {
		return nil
	}
	held := c.rt.lease.Rescuing()
	if held == nil {
		return nil
	}
	select {
	case <-held:
		return nil
	case <-ctx.Done():
		return &ftrma.OpError{Op: op, Rank: -1, Err: ctx.Err()}
	}
}

// begin starts the next collective and returns its sequence number.
func (c *Comm) begin(op string) (uint64, error) {
	revoked := c.IsRevoked() // rt.mu is taken before c.mu, never inside it
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrClosed}
	}
	if revoked {
		c.mu.Unlock()
		return 0, &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrRevoked}
	}
	c.seq++
	seq, prune := c.seq, c.abandoned
	c.abandoned = false
	c.mu.Unlock()
	if prune {
		// Contributions to the collective that returned early are of no
		// use now: drop them (later ones are dropped on arrival).
		c.rt.mu.Lock()
		c.rt.pruneInboxLocked(c.ctxID, seq)
		c.rt.mu.Unlock()
	}
	return seq, nil
}

func (c *Comm) send(op string, to ftrma.Rank, seq uint64, payload []byte) error {
	msg := make([]byte, collHeader, collHeader+len(payload))
	msg[0] = kindColl
	be.PutUint32(msg[1:], c.ctxID)
	be.PutUint64(msg[5:], seq)
	msg = append(msg, payload...)
	if err := c.rt.t.Send(c.members[to], msg); err != nil {
		if errors.Is(err, ftrma.ErrProcFailed) {
			c.rt.lost(c.members[to], err)
		}
		return &ftrma.OpError{Op: op, Rank: to, Err: err}
	}
	return nil
}

// sendAll sends payload to every rank of to, also after a send failed, and
// returns the first error. A rank that stopped at a failed send would leave
// the live ranks after it waiting for a contribution that never comes, with
// nothing gone to tell them so (the ranks it reached before may already hold
// the dead rank's contribution). After an error, contributions of seq from
// others may still arrive: the next collective drops them, as after await.
func (c *Comm) sendAll(op string, to []ftrma.Rank, seq uint64, payload []byte) error {
	var first error
	for _, r := range to {
		if err := c.send(op, r, seq, payload); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.mu.Lock()
		c.abandoned = true
		c.mu.Unlock()
	}
	return first
}

// await waits for the contributions of seq from every communicator rank in
// from, and returns them indexed like from. When it fails, contributions
// for seq may still come: the next collective drops them (begin).
func (c *Comm) await(ctx context.Context, op string, seq uint64, from []ftrma.Rank) ([][]byte, error) {
	out, err := c.awaitAll(ctx, op, seq, from)
	if err != nil {
		c.mu.Lock()
		c.abandoned = true
		c.mu.Unlock()
	}
	return out, err
}

func (c *Comm) awaitAll(ctx context.Context, op string, seq uint64, from []ftrma.Rank) ([][]byte, error) {
	out := make([][]byte, len(from))
	got := 0
	rt := c.rt
	for {
		rt.mu.Lock()
		for i, r := range from {
			k := collKey{c.ctxID, seq, c.members[r]}
			if p, ok := rt.inbox[k]; ok && out[i] == nil {
				out[i] = p
				delete(rt.inbox, k)
				got++
			}
		}
		if got == len(from) {
			rt.mu.Unlock()
			return out, nil
		}
		if rt.closed {
			rt.mu.Unlock()
			return nil, &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrClosed}
		}
		if rt.notices[c.revokeID()] {
			rt.mu.Unlock()
			return nil, &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrRevoked}
		}
		for i, r := range from {
			if w := c.members[r]; out[i] == nil && rt.gone[w] {
				err := rt.goneErrLocked(w)
				rt.mu.Unlock()
				return nil, &ftrma.OpError{Op: op, Rank: r, Err: err}
			}
		}
		wake := rt.changed
		rt.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, &ftrma.OpError{Op: op, Rank: -1, Err: ctx.Err()}
		}
	}
}

// others returns every communicator rank but this one.
func (c *Comm) others() []ftrma.Rank {
	out := make([]ftrma.Rank, 0, len(c.members)-1)
	for r := range c.members {
		if ftrma.Rank(r) != c.rank {
			out = append(out, ftrma.Rank(r))
		}
	}
	return out
}

// Allgather gives every rank's contribution to every rank: the result is
// indexed by rank and holds mine at this rank's index. mine may be at most
// MaxCollectivePayload bytes. It fails with an error wrapping
// ftrma.ErrProcFailed if a rank is lost before its contribution arrives, with
// ftrma.ErrRevoked once the communicator is revoked, or with ctx's error.
func (c *Comm) Allgather(ctx context.Context, mine []byte) ([][]byte, error) {
	if len(mine) > MaxCollectivePayload {
		return nil, &ftrma.OpError{Op: "allgather", Rank: -1, Err: fmt.Errorf("%w: contribution of %d bytes exceeds %d", ftrma.ErrInvalid, len(mine), MaxCollectivePayload)}
	}
	if err := c.awaitLease(ctx, "allgather"); err != nil {
		return nil, err
	}
	seq, err := c.begin("allgather")
	if err != nil {
		return nil, err
	}
	others := c.others()
	if err := c.sendAll("allgather", others, seq, mine); err != nil {
		return nil, err
	}
	got, err := c.await(ctx, "allgather", seq, others)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(c.members))
	out[c.rank] = append([]byte{}, mine...)
	for i, r := range others {
		out[r] = got[i]
	}
	return out, nil
}

// Barrier returns when every rank has entered it, or with the errors of
// Allgather.
func (c *Comm) Barrier(ctx context.Context) error {
	_, err := c.Allgather(ctx, nil)
	if err != nil {
		err.(*ftrma.OpError).Op = "barrier"
	}
	return err
}

// Bcast returns root's data on every rank (data is ignored elsewhere). data may
// be at most MaxCollectivePayload bytes.
func (c *Comm) Bcast(ctx context.Context, root ftrma.Rank, data []byte) ([]byte, error) {
	if root < 0 || int(root) >= len(c.members) {
		return nil, &ftrma.OpError{Op: "bcast", Rank: root, Err: ftrma.ErrRankOutOfRange}
	}
	if c.rank == root && len(data) > MaxCollectivePayload {
		return nil, &ftrma.OpError{Op: "bcast", Rank: root, Err: fmt.Errorf("%w: %d bytes exceeds %d", ftrma.ErrInvalid, len(data), MaxCollectivePayload)}
	}
	if err := c.awaitLease(ctx, "bcast"); err != nil {
		return nil, err
	}
	seq, err := c.begin("bcast")
	if err != nil {
		return nil, err
	}
	if c.rank == root {
		if err := c.sendAll("bcast", c.others(), seq, data); err != nil {
			return nil, err
		}
		return append([]byte{}, data...), nil
	}
	got, err := c.await(ctx, "bcast", seq, []ftrma.Rank{root})
	if err != nil {
		return nil, err
	}
	return got[0], nil
}

// Agree is the fault-tolerant agreement of ULFM (MPI_Comm_agree): it returns
// the bitwise AND of the flags of the ranks that took part, and every surviving
// rank returns the same value, even when ranks fail during the call. The
// failed ranks it agrees on become known at every survivor (Failed). It works
// on a revoked communicator. It returns the value together with an error
// wrapping ftrma.ErrProcFailed when the agreed failed set holds a failed
// rank not acknowledged with AckFailed, and ctx's error if ctx ends first.
// Ranks that left cleanly (Departed) take no part and raise no error.
// Iagree is the non-blocking form.
func (c *Comm) Agree(ctx context.Context, flag uint64) (uint64, error) {
	return c.agreed(c.agree(ctx, flag))
}

// agreed is Agree's result for decision d (or the error err): the value,
// and ErrProcFailed for an agreed failure not acknowledged.
func (c *Comm) agreed(d agree.Decision, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	failed := c.GetFailed()
	acked := failed[:min(c.AckFailed(0), len(failed))] // another goroutine may ack a failure learned since
	for _, r := range d.Failed {
		if !slices.Contains(acked, ftrma.Rank(r)) && !c.hasDeparted(ftrma.Rank(r)) {
			return d.Value, &ftrma.OpError{Op: "agree", Rank: ftrma.Rank(r), Err: ftrma.ErrProcFailed}
		}
	}
	return d.Value, nil
}

// agree runs one agreement instance and returns its decision.
func (c *Comm) agree(ctx context.Context, flag uint64) (agree.Decision, error) {
	inst, err := c.startAgree(ctx, flag)
	if err != nil {
		return agree.Decision{}, err
	}
	return c.awaitDecision(ctx, inst)
}

// startAgree starts the next agreement instance with this rank's flag and
// returns its number. It waits only while the lease is being rescued.
func (c *Comm) startAgree(ctx context.Context, flag uint64) (uint64, error) {
	if err := c.awaitLease(ctx, "agree"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, &ftrma.OpError{Op: "agree", Rank: -1, Err: ftrma.ErrClosed}
	}
	c.agreeSeq++
	inst := c.agreeSeq
	c.mu.Unlock()
	c.rt.do(func() { c.rt.m.startAgree(time.Now(), c.ctxID, inst, flag) })
	return inst, nil
}

// awaitDecision waits for the decision of agreement instance inst. It
// fails with ErrClosed once the communicator or the runtime is closed.
func (c *Comm) awaitDecision(ctx context.Context, inst uint64) (agree.Decision, error) {
	for {
		c.rt.mu.Lock()
		c.mu.Lock()
		d, ok := c.decisions[inst]
		delete(c.decisions, inst)
		closed := c.closed
		c.mu.Unlock()
		wake := c.rt.changed
		closed = closed || c.rt.closed
		c.rt.mu.Unlock()
		if ok {
			return d, nil
		}
		if closed {
			return agree.Decision{}, &ftrma.OpError{Op: "agree", Rank: -1, Err: ftrma.ErrClosed}
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return agree.Decision{}, &ftrma.OpError{Op: "agree", Rank: -1, Err: ctx.Err()}
		}
	}
}

// Shrink returns a new communicator of the surviving ranks (MPI_Comm_shrink):
// the ranks agree on the failed set and every survivor gets the same group,
// ranks numbered in the old order, with a new context id that is free at
// every survivor (see Dup). It works on a revoked communicator and across
// failures during the call. Ranks that left cleanly (Departed) are left out
// as failed ones are: they can take part in nothing any more. Ishrink is the
// non-blocking form.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	d, ids, reserved, err := c.agreeChild(ctx, "shrink", "shrink", []int64{0}, statusBits)
	if err != nil {
		return nil, err
	}
	return c.shrunk(d, ids, reserved)
}

// shrunk makes the communicator of the ranks not in decision d's failed
// set, with the agreed id, and releases the ids reserved for the vote.
func (c *Comm) shrunk(d agree.Decision, ids, reserved []uint32) (*Comm, error) {
	defer c.rt.release(reserved)
	if len(ids) == 0 { // a rank took part with its status bits cleared: not a Shrink
		return nil, &ftrma.OpError{Op: "shrink", Rank: -1, Err: fmt.Errorf("%w: another collective ran on the communicator at the same time", ftrma.ErrInvalid)}
	}
	var members []ftrma.Rank
	for i, w := range c.members {
		if !slices.Contains(d.Failed, i) {
			members = append(members, w)
		}
	}
	return c.makeChild(ids[0], members), nil
}

// SetSignalHandler installs the handler of Signal for every communicator of
// this process: h(from, payload) runs on the runtime's goroutine, with from a
// rank of the communicator the signal was sent on; it must not block.
func (c *Comm) SetSignalHandler(h func(from ftrma.Rank, payload []byte)) {
	c.rt.mu.Lock()
	c.rt.signals = h
	c.rt.mu.Unlock()
}

// Signal interrupts rank to: its signal handler is called with payload (at
// most MaxCollectivePayload bytes). Asynchronous: it returns once the signal
// is queued.
func (c *Comm) Signal(to ftrma.Rank, payload []byte) error {
	if to < 0 || int(to) >= len(c.members) {
		return &ftrma.OpError{Op: "signal", Rank: to, Err: ftrma.ErrRankOutOfRange}
	}
	if len(payload) > MaxCollectivePayload {
		return &ftrma.OpError{Op: "signal", Rank: to, Err: fmt.Errorf("%w: %d bytes exceeds %d", ftrma.ErrInvalid, len(payload), MaxCollectivePayload)}
	}
	c.rt.mu.Lock()
	w := c.members[to]
	gone, err := c.rt.gone[w], c.rt.goneErrLocked(w)
	c.rt.mu.Unlock()
	if gone {
		return &ftrma.OpError{Op: "signal", Rank: to, Err: err}
	}
	msg := be.AppendUint32([]byte{kindSignal}, c.ctxID)
	if err := c.rt.t.Send(c.members[to], append(msg, payload...)); err != nil {
		return &ftrma.OpError{Op: "signal", Rank: to, Err: err}
	}
	return nil
}

// Finalize waits for every rank in a barrier, then closes the communicator
// (for the world communicator: the runtime, the transport and the
// Launcher). If the barrier fails everything is closed all the same and the
// error returned.
func (c *Comm) Finalize(ctx context.Context) error {
	err := c.Barrier(ctx)
	return joinErr(err, c.Close())
}

// Close closes the communicator without waiting for other ranks. What the
// runtime kept for it goes (its revocation, contributions and agreement
// messages that come late are dropped): close a communicator once it is
// not needed, the old one after a Shrink. Closing the world communicator
// stops the runtime and closes the transport and the Launcher; the
// other ranks count this rank departed (Departed), not failed.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.rt.mu.Lock()
	delete(c.rt.comms, c.ctxID)
	c.rt.closedC.add(c.ctxID, false)
	c.rt.pruneInboxLocked(c.ctxID, 0)
	delete(c.rt.awaited, c.revokeID())
	c.rt.mu.Unlock()
	c.rt.do(func() { c.rt.m.dropComm(c.ctxID) })
	if !c.world {
		return nil
	}
	if c.session != nil {
		c.session.Leave() // a clean departure: not reported to the others as a failure
	}
	c.rt.close()
	err := c.rt.t.Close()
	if c.session != nil {
		err = joinErr(err, c.session.Close())
	}
	return err
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
