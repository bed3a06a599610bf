package comm

// Pruning. A long-running job makes and closes communicators without end
// (every recovery is a Revoke and a Shrink), so what the runtime keeps per
// communicator must go when the communicator is closed here:
//
//  1. Its revocation notice ("revoke/<ctx>"): the machine's and the
//     runtime's record of it and the reliable broadcast's memory of the ID.
//     This rank forwarded the notice when it first saw it, so forgetting it
//     costs no other rank its copy.
//  2. Late copies of that notice, which neighbours may still send: the
//     closed context id is remembered (closedRing) and its revocation is
//     dropped on arrival, neither delivered nor forwarded again. One never
//     seen before the close is forwarded once (other ranks may need it)
//     and not delivered.
//  3. Agreement messages for it (a slower rank's Shrink): its agreement
//     lingers and answers them until keepLingering more communicators are
//     closed here (a slower rank may need this one's answers to decide
//     what this one decided: machine.dropComm), then they are dropped, not
//     kept as early messages of a communicator to come.
//  4. Collective contributions for it: those received are dropped at Close,
//     later ones on arrival. Contributions for a collective this rank has
//     finished or abandoned on a live communicator (it returned an error
//     while the others' contributions were still on the way) are dropped
//     when the next collective starts, or on arrival once it has.
//
// The closed ids remembered are the last keepClosed: a copy that comes
// later than keepClosed closes after its communicator's is taken as new
// (a notice kept for a communicator not made yet). Notices of windows
// (window revocations) are not pruned.

// keepClosed is how many closed context ids a runtime remembers.
const keepClosed = 1024

// closedRing remembers the last keep context ids closed here, each with a
// flag (for the machine: this rank has seen, and so forwarded, the
// communicator's revocation). The oldest goes first.
type closedRing struct {
	keep int
	ids  []uint32        // in the order closed, oldest first; len(ids) <= keep
	set  map[uint32]bool // the ids, with their flags
}

func newClosedRing(keep int) closedRing {
	return closedRing{keep: keep, set: make(map[uint32]bool)}
}

// add remembers ctx with flag, dropping the oldest id beyond keep.
func (r *closedRing) add(ctx uint32, flag bool) {
	if _, ok := r.set[ctx]; ok {
		r.set[ctx] = flag
		return
	}
	r.set[ctx] = flag
	r.ids = append(r.ids, ctx)
	if len(r.ids) > r.keep {
		delete(r.set, r.ids[0])
		r.ids = append(r.ids[:0], r.ids[1:]...)
	}
}

// has reports whether ctx is remembered, and its flag.
func (r *closedRing) has(ctx uint32) (flag, ok bool) {
	flag, ok = r.set[ctx]
	return flag, ok
}

// remove forgets ctx (the id is live again).
func (r *closedRing) remove(ctx uint32) {
	if _, ok := r.set[ctx]; !ok {
		return
	}
	delete(r.set, ctx)
	for i, id := range r.ids {
		if id == ctx {
			r.ids = append(r.ids[:i], r.ids[i+1:]...)
			break
		}
	}
}

// revokedCtx returns the communicator a revocation notice id names, and
// false for any other notice.
func revokedCtx(id string) (uint32, bool) {
	n := parseNotice(id)
	return n.ctx, n.kind == revokeNotice
}

// closedRevocation reports whether notice id revokes a communicator closed
// here, and whether this rank has forwarded it already (machine).
func (m *machine) closedRevocation(id string) (forwarded, closed bool) {
	ctx, ok := revokedCtx(id)
	if !ok {
		return false, false
	}
	return m.closed.has(ctx)
}

// pruneComm forgets what the machine keeps for communicator ctx, closed
// here: its early agreement messages and its revocation (reported in
// machineReady.Pruned for the runtime to forget too).
func (m *machine) pruneComm(ctx uint32) {
	delete(m.early, ctx)
	id := revokeNoticeID(ctx)
	forwarded := m.bc.Seen(id)
	m.bc.Forget(id)
	if m.notices[id] {
		delete(m.notices, id)
		m.rd.Pruned = append(m.rd.Pruned, id)
	}
	m.closed.add(ctx, forwarded)
}

// pruneInboxLocked drops the contributions of communicator ctx received
// for collectives before seq (all of them when seq is 0). rt.mu is held.
func (rt *runtime) pruneInboxLocked(ctx uint32, seq uint64) {
	for k := range rt.inbox {
		if k.ctx == ctx && (seq == 0 || k.seq < seq) {
			delete(rt.inbox, k)
		}
	}
}

// forgetNoticesLocked forgets notices the machine pruned. rt.mu is held.
func (rt *runtime) forgetNoticesLocked(ids []string) {
	for _, id := range ids {
		delete(rt.notices, id)
	}
	rt.noticed.Store(int64(len(rt.notices)))
}
