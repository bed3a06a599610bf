package comm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/agree"
	"github.com/ftrma/ftrma/transport"
)

// This file makes new communicators out of old ones: Dup, Split, and the
// context ids of every new communicator (Shrink's too).
//
// A context id is a 32-bit hash of where the communicator comes from. The
// ranks agree on it: every rank votes, in the flag of the agreement that
// makes the communicator, on a batch of candidate ids, setting a bit for
// each candidate that is free here. The agreed AND names the candidates free
// at every rank that took part, and all pick the lowest. An id is free when
// no communicator of this process has ever had it (closed ones count: their
// late messages may still arrive), no creation in progress here is voting
// for it, and no revocation notice (of a communicator or of a window) names
// it: notices go to every rank of the job and never go away, so a reused id
// would be born revoked. Should every candidate of the batch be taken, the
// ranks agree on the next batch.

// Undefined is the color of a rank that takes part in Split but joins no
// new communicator (MPI_UNDEFINED): its Split returns nil. Any negative
// color means the same.
const Undefined = -1

// The bits of the flag of an agreement that makes communicators. The two
// highest report how the call went here; the lowest vote on candidate ids.
// Collisions of 32-bit ids are rare, so a few candidates per agreement do,
// and voting on them costs little.
const (
	noFailureBit  = uint64(1) << 63 // no failure was seen before the agreement
	notRevokedBit = uint64(1) << 62 // the communicator was not revoked
	statusBits    = noFailureBit | notRevokedBit
	idCandidates  = 16 // candidates voted on in one agreement (at most 62)
	candidateBits = uint64(1)<<idCandidates - 1
)

// idHash returns candidate j of the context id of group (a color of Split,
// 0 otherwise) of the communicator made by agreement instance inst of
// communicator parent, by the call kind. Tests replace it to force
// collisions.
var idHash = func(parent uint32, kind string, inst uint64, group int64, j int) uint32 {
	// FNV-1a over parent, kind, inst, group and j, written out so that
	// voting on a batch allocates nothing.
	const prime = 16777619
	h := uint32(2166136261)
	word := func(v uint64, n int) {
		for i := n - 1; i >= 0; i-- {
			h = (h ^ uint32(byte(v>>(8*i)))) * prime
		}
	}
	word(uint64(parent), 4)
	for i := range len(kind) {
		h = (h ^ uint32(kind[i])) * prime
	}
	word(inst, 8)
	word(uint64(group), 8)
	word(uint64(j), 8)
	return h
}

// ctxIDs is the part of the runtime that keeps context ids from being
// reused, with rt.comms (the live communicators) and rt.closedC (the last
// closed ones): an id closed longer ago than that may name a new
// communicator again, so that what the runtime keeps does not grow with
// every communicator it ever made. The runtime's mu guards it.
type ctxIDs struct {
	reserved map[uint32]int // ids voted free by creations in progress, with their count
}

// idTakenLocked reports whether id may not name a new communicator here. noticed
// holds the ids named by revocation notices.
func (rt *runtime) idTakenLocked(id uint32, noticed map[uint32]bool) bool {
	_, closed := rt.closedC.has(id)
	return id <= worldContext || closed || rt.ids.reserved[id] > 0 ||
		rt.comms[id] != nil || noticed[id]
}

// noticedIDsLocked returns the context ids named by the revocation notices
// that arrived here, of communicators and of windows.
func (rt *runtime) noticedIDsLocked() map[uint32]bool {
	if len(rt.notices) == 0 {
		return nil
	}
	ids := make(map[uint32]bool)
	for id := range rt.notices {
		if n := parseNotice(id); n.kind == revokeNotice || n.kind == windowRevokeNotice {
			ids[n.ctx] = true
		}
	}
	return ids
}

// reserveLocked and releaseLocked count a creation's vote for ids.
func (rt *runtime) reserveLocked(ids []uint32) {
	if rt.ids.reserved == nil {
		rt.ids.reserved = make(map[uint32]int)
	}
	for _, id := range ids {
		rt.ids.reserved[id]++
	}
}

func (rt *runtime) release(ids []uint32) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, id := range ids {
		if rt.ids.reserved[id]--; rt.ids.reserved[id] <= 0 {
			delete(rt.ids.reserved, id)
		}
	}
}

// candidates fills ids (one per group) with candidate j of batch round and
// returns it.
func (c *Comm) candidates(ids []uint32, kind string, inst uint64, groups []int64, round, j int) []uint32 {
	for g, group := range groups {
		ids[g] = idHash(c.ctxID, kind, inst, group, round*idCandidates+j)
	}
	return ids
}

// vote returns this rank's vote on batch round of candidates (bit j set when
// candidate j is free here: all its ids free and different from each other)
// and reserves the ids of the candidates it votes for.
func (c *Comm) vote(kind string, inst uint64, groups []int64, round int) (uint64, []uint32) {
	rt := c.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	noticed := rt.noticedIDsLocked()
	var mask uint64
	var reserved []uint32
	ids := make([]uint32, len(groups))
	for j := range idCandidates {
		c.candidates(ids, kind, inst, groups, round, j)
		free := true
		for i, id := range ids {
			if rt.idTakenLocked(id, noticed) || slices.Contains(ids[:i], id) {
				free = false
				break
			}
		}
		if free {
			mask |= 1 << j
			reserved = append(reserved, ids...)
		}
	}
	rt.reserveLocked(reserved)
	return mask, reserved
}

// agreeChild runs the agreement that makes new communicators out of c, one
// per group: the ranks agree on status (this rank's statusBits) and on the
// failed ranks, and, when every rank that took part reported both status
// bits, on one context id per group. It returns the decision of the first
// agreement, the ids (nil when a status bit was cleared somewhere) and
// the reservations to release once the communicators are registered.
func (c *Comm) agreeChild(ctx context.Context, op, kind string, groups []int64, status uint64) (agree.Decision, []uint32, []uint32, error) {
	inst, reserved, err := c.startChild(ctx, op, kind, groups, status)
	if err != nil {
		return agree.Decision{}, nil, nil, err
	}
	return c.finishChild(ctx, op, kind, groups, inst, reserved)
}

// startChild votes and starts agreeChild's first agreement (Ishrink
// starts it at call time, so that it is ordered among the communicator's
// agreements as the call is); finishChild waits for it and settles the id.
func (c *Comm) startChild(ctx context.Context, op, kind string, groups []int64, status uint64) (uint64, []uint32, error) {
	c.mu.Lock()
	inst := c.agreeSeq + 1 // the instance startAgree is about to start
	c.mu.Unlock()
	mask, reserved := c.vote(kind, inst, groups, 0)
	started, err := c.startAgree(ctx, status&statusBits|mask)
	if err != nil {
		c.rt.release(reserved)
		err.(*ftrma.OpError).Op = op
		return 0, nil, err
	}
	if started != inst {
		// The agreement runs (every rank must take part in it), but the
		// vote was for another instance: call this one off after it.
		go c.awaitDecision(context.Background(), started)
		c.rt.release(reserved)
		return 0, nil, &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: another collective ran on the communicator at the same time", ftrma.ErrInvalid)}
	}
	return inst, reserved, nil
}

func (c *Comm) finishChild(ctx context.Context, op, kind string, groups []int64, inst uint64, reserved []uint32) (agree.Decision, []uint32, []uint32, error) {
	d, err := c.awaitDecision(ctx, inst)
	if err != nil {
		c.rt.release(reserved)
		err.(*ftrma.OpError).Op = op
		return d, nil, nil, err
	}
	if d.Inst != inst {
		c.rt.release(reserved)
		return d, nil, nil, &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: another collective ran on the communicator at the same time", ftrma.ErrInvalid)}
	}
	if d.Value&statusBits != statusBits {
		c.rt.release(reserved)
		return d, nil, nil, nil
	}
	agreed := d.Value & candidateBits
	round := 0
	for agreed == 0 {
		// Every candidate of the batch is taken at some rank: every rank
		// saw the same agreed value, so all of them vote on the next batch.
		c.rt.release(reserved)
		round++
		var mask uint64
		mask, reserved = c.vote(kind, inst, groups, round)
		v, err := c.agree(ctx, statusBits|mask)
		if err != nil {
			c.rt.release(reserved)
			err.(*ftrma.OpError).Op = op
			return d, nil, nil, err
		}
		agreed = v.Value & candidateBits
	}
	ids := c.candidates(make([]uint32, len(groups)), kind, inst, groups, round, bits.TrailingZeros64(agreed))
	return d, ids, reserved, nil
}

// makeChild registers a communicator made out of c (newComm: its id is
// taken while it lives, and among the closed ids once it is closed).
func (c *Comm) makeChild(id uint32, members []ftrma.Rank) *Comm {
	return newComm(c.rt, id, members)
}

// failedMember returns a member of c in the agreed failed set, or -1.
func failedMember(d agree.Decision) ftrma.Rank {
	if len(d.Failed) > 0 {
		return ftrma.Rank(d.Failed[0])
	}
	return -1
}

// childErr is the error of a Dup or Split that the agreement called off: the
// same at every rank, because it follows from the agreed decision.
func childErr(op string, d agree.Decision) error {
	if r := failedMember(d); r >= 0 || d.Value&noFailureBit == 0 {
		return &ftrma.OpError{Op: op, Rank: r, Err: ftrma.ErrProcFailed}
	}
	return &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrRevoked}
}

// Dup returns a new communicator of the same ranks, in the same order, with
// a new context id (MPI_Comm_dup): its collectives, agreements and
// revocation are its own. It is collective, and every surviving rank of c
// returns the same outcome: a communicator, or an error wrapping
// ftrma.ErrProcFailed when a rank of c is known failed at the agreement
// (Shrink first), or wrapping ftrma.ErrRevoked when c was revoked at some
// rank. It fails with ctx's error should ctx end first (the other ranks
// then wait for this one until their own contexts end).
//
// The ranks agree on the new context id: it is free at each of them (no
// communicator of theirs, live or closed, ever had it, and no revocation
// notice they received names it). Ranks outside c are not asked: a
// communicator of theirs shares the id only by a 32-bit hash collision,
// and would then share its revocations.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	status := statusBits
	if c.IsRevoked() {
		status &^= notRevokedBit
	}
	d, ids, reserved, err := c.agreeChild(ctx, "dup", "dup", []int64{0}, status)
	if err != nil {
		return nil, err
	}
	defer c.rt.release(reserved)
	if ids == nil || failedMember(d) >= 0 {
		return nil, childErr("dup", d)
	}
	return c.makeChild(ids[0], slices.Clone(c.members)), nil
}

// splitEntry is one rank's contribution to Split.
type splitEntry struct {
	rank       ftrma.Rank
	color, key int64
}

// Split partitions c (MPI_Comm_split): the ranks that give the same
// non-negative color form a new communicator, numbered by key, ties broken
// by rank in c. A rank that gives a negative color (Undefined) joins none
// and gets nil. Each new communicator gets its own context id.
//
// It is collective and fault-aware: the ranks exchange colors and keys, then
// agree, so that every surviving rank of c returns the same outcome. It
// fails at every survivor with an error wrapping ftrma.ErrProcFailed when a
// rank of c failed before the exchange completed everywhere or is known
// failed at the agreement (Shrink first), and with one wrapping
// ftrma.ErrRevoked when c was revoked. It fails with ctx's error should ctx
// end first (the other ranks then wait for this one until their own
// contexts end).
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if color < 0 {
		color = Undefined
	}
	mine := make([]byte, 16)
	be.PutUint64(mine, uint64(int64(color)))
	be.PutUint64(mine[8:], uint64(int64(key)))
	status := statusBits
	all, err := c.exchange(ctx, "split", mine)
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case errors.Is(err, ftrma.ErrRevoked):
		status &^= notRevokedBit
	default:
		status &^= noFailureBit
	}
	var entries []splitEntry
	var colors []int64
	if err == nil {
		for r, b := range all {
			if len(b) != 16 {
				status &^= noFailureBit // not a Split contribution: out of step
				break
			}
			e := splitEntry{ftrma.Rank(r), int64(be.Uint64(b)), int64(be.Uint64(b[8:]))}
			entries = append(entries, e)
			if e.color >= 0 && !slices.Contains(colors, e.color) {
				colors = append(colors, e.color)
			}
		}
		slices.Sort(colors)
	}
	d, ids, reserved, err := c.agreeChild(ctx, "split", "split", colors, status)
	if err != nil {
		return nil, err
	}
	defer c.rt.release(reserved)
	if ids == nil || failedMember(d) >= 0 {
		return nil, childErr("split", d)
	}
	if color < 0 {
		return nil, nil
	}
	var group []splitEntry
	for _, e := range entries {
		if e.color == int64(color) {
			group = append(group, e)
		}
	}
	slices.SortStableFunc(group, func(a, b splitEntry) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank))
	})
	members := make([]ftrma.Rank, len(group))
	for i, e := range group {
		members[i] = c.members[e.rank]
	}
	return c.makeChild(ids[slices.Index(colors, int64(color))], members), nil
}

// exchange gives every rank's contribution to every rank, like Allgather,
// but sends to every rank even after a send failed: a rank that stopped
// sending at the first dead peer would leave a survivor waiting for its
// contribution.
func (c *Comm) exchange(ctx context.Context, op string, mine []byte) ([][]byte, error) {
	if err := c.awaitLease(ctx, op); err != nil {
		return nil, err
	}
	seq, err := c.begin(op)
	if err != nil {
		return nil, err
	}
	others := c.others()
	var sendErr error
	for _, r := range others {
		// A dead peer: await reports it. Anything else is this rank's own
		// trouble, reported once every other rank has had its share.
		if err := c.send(op, r, seq, mine); err != nil && !errors.Is(err, ftrma.ErrProcFailed) && sendErr == nil {
			sendErr = err
		}
	}
	if sendErr != nil {
		return nil, sendErr
	}
	got, err := c.await(ctx, op, seq, others)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(c.members))
	out[c.rank] = mine
	for i, r := range others {
		out[r] = got[i]
	}
	return out, nil
}

// SplitShared splits c into one communicator per host: the ranks whose
// memory each can map (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), the
// communicator window.AllocateShared needs. Ranks keep their order of c.
// Over a transport that maps no memory (transport.Sharer) each rank is
// alone in its communicator. Collective, with Split's failure semantics.
func (c *Comm) SplitShared(ctx context.Context) (*Comm, error) {
	color := int(c.rank)
	if s, ok := c.rt.t.(transport.Sharer); ok {
		// The host's lowest rank names it: every rank of the host finds
		// the same one.
		for r, tr := range c.members {
			if s.Shares(tr) {
				color = r
				break
			}
		}
	}
	return c.Split(ctx, color, int(c.rank))
}
