package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
)

// This file holds Replace: failed ranks of a communicator are replaced by
// spares (world ranks held in reserve, Config.Spares) that a launcher
// starts on request (Spawner).
//
// The protocol, over communicator c with survivors S and failed ranks F:
//
//  1. Agreement A on c, as Shrink's: the failed set F and a new context
//     id, free at every survivor.
//  2. The leader (the lowest rank of S) asks the Spawner for one spare per
//     rank of F, one request at a time: request i carries the payload
//     (the new id, c's members, F, i, and the spares of requests 0..i-1),
//     and the spare it starts replaces F[i]. The launcher admits each
//     spare at every live rank, with that payload, before it answers.
//  3. Agreement B on c: the leader contributes how many spares started,
//     the others all ones, so every survivor learns the leader's count, or
//     that the leader failed. If fewer than |F| started, or a survivor
//     failed, Replace fails at every survivor with the same error, and
//     the survivors revoke the new id, so that the spares that did start
//     give up (their Init fails).
//  4. Every survivor waits for the admissions of the |F| spares (they
//     were sent before the launcher answered the leader) and builds the
//     new communicator: c's members, with F[i] replaced by spare i. Spare
//     i builds the same one: it knows spares 0..i-1 from its payload and
//     learns the later ones from their admissions.
//  5. Agreement C on the new communicator, by survivors and spares: when a
//     member is found failed, every member returns the same error.

// Spawner starts spare ranks for Replace: it starts k spares, each with
// payload, admits each at every live rank (the runtime hears of it with
// the payload) and returns their world ranks, once every live rank has
// been sent its admission. In a job, the Launcher is the Spawner
// (Session.Spawn); comm/commtest has one over memnet.
type Spawner interface {
	Spawn(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error)
}

// nearSpawner is a Spawner that takes a placement hint: spare i replaces
// world rank near[i], and the launcher starts it on that rank's host if it
// can (Launcher.SpawnNear).
type nearSpawner interface {
	SpawnNear(ctx context.Context, k int, payload []byte, near []ftrma.Rank) ([]ftrma.Rank, error)
}

// ErrReplace is wrapped by Replace's error when spares could not be
// started for every failed rank: none are left, the launcher could not
// start one, or the communicator's runtime has no Spawner.
var ErrReplace = errors.New("the failed ranks could not be replaced")

// replaceMagic starts a Replace's spawn payload.
const replaceMagic = "rpl1"

// replacePlan is what a spare of Replace learns from its payload.
type replacePlan struct {
	id      uint32       // the new communicator's context id
	members []ftrma.Rank // the old communicator's members (world ranks)
	failed  []int        // the communicator ranks replaced, in order
	index   int          // this spare replaces failed[index]
	prev    []ftrma.Rank // the spares of failed[0..index-1]
}

func (p replacePlan) encode() []byte {
	out := []byte(replaceMagic)
	out = be.AppendUint32(out, p.id)
	out = be.AppendUint32(out, uint32(p.index))
	out = be.AppendUint32(out, uint32(len(p.members)))
	for _, w := range p.members {
		out = be.AppendUint32(out, uint32(w))
	}
	out = be.AppendUint32(out, uint32(len(p.failed)))
	for _, f := range p.failed {
		out = be.AppendUint32(out, uint32(f))
	}
	out = be.AppendUint32(out, uint32(len(p.prev)))
	for _, s := range p.prev {
		out = be.AppendUint32(out, uint32(s))
	}
	return out
}

// parseReplace reads a Replace payload of a job of n world ranks; ok is
// false for anything else.
func parseReplace(b []byte, n int) (p replacePlan, ok bool) {
	if len(b) < len(replaceMagic)+8 || string(b[:len(replaceMagic)]) != replaceMagic {
		return p, false
	}
	b = b[len(replaceMagic):]
	word := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := be.Uint32(b)
		b = b[4:]
		return v, true
	}
	list := func(limit int) ([]uint32, bool) {
		k, ok := word()
		if !ok || int(k) > len(b)/4 {
			return nil, false
		}
		out := make([]uint32, k)
		for i := range out {
			out[i], _ = word()
			if int(out[i]) >= limit {
				return nil, false
			}
		}
		return out, true
	}
	id, _ := word()
	index, _ := word()
	members, ok := list(n)
	if !ok {
		return p, false
	}
	failed, ok := list(len(members))
	if !ok || int(index) >= len(failed) {
		return p, false
	}
	prev, ok := list(n)
	if !ok || len(prev) != int(index) || len(b) != 0 {
		return p, false
	}
	p = replacePlan{id: id, index: int(index)}
	for _, w := range members {
		p.members = append(p.members, ftrma.Rank(w))
	}
	for _, f := range failed {
		p.failed = append(p.failed, int(f))
	}
	for _, s := range prev {
		p.prev = append(p.prev, ftrma.Rank(s))
	}
	return p, true
}

// admitWith admits spare s (see admit) and records its payload, if it is a
// Replace's, for the Replace waiting for it. wait says whether to wait for
// the run goroutine: an admission notice from the launcher must not.
func (rt *runtime) admitWith(s ftrma.Rank, payload []byte, wait bool) error {
	if s < 0 || int(s) >= rt.n {
		return fmt.Errorf("comm: admit rank %d in a job of %d: %w", s, rt.n, ftrma.ErrRankOutOfRange)
	}
	plan, isReplace := parseReplace(payload, rt.n)
	done := make(chan bool, 1)
	rt.do(func() {
		ok := rt.m.admit(time.Now(), s)
		if isReplace && ok {
			rt.mu.Lock()
			if rt.replacing == nil {
				rt.replacing = make(map[uint32]map[int]ftrma.Rank)
			}
			if rt.replacing[plan.id] == nil {
				rt.replacing[plan.id] = make(map[int]ftrma.Rank)
			}
			rt.replacing[plan.id][plan.index] = s
			rt.seeReplaceLocked(plan)
			rt.signalLocked()
			rt.mu.Unlock()
		}
		done <- ok
	})
	if !wait {
		return nil
	}
	select {
	case ok := <-done:
		if !ok {
			return fmt.Errorf("comm: admit rank %d: it is not absent here (started, failed, or self): %w", s, ftrma.ErrInvalid)
		}
		return nil
	case <-rt.done:
		return fmt.Errorf("comm: admit rank %d: %w", s, ftrma.ErrClosed)
	}
}

// awaitSpares waits until the spares of slots [from, k) of the Replace
// making context id are admitted here, and returns them by slot. It
// fails when stop closes (the Replace was called off), ctx ends or the
// runtime closes.
func (rt *runtime) awaitSpares(ctx context.Context, id uint32, from, k int, stop <-chan struct{}) (map[int]ftrma.Rank, error) {
	for {
		rt.mu.Lock()
		got := rt.replacing[id]
		all := true
		for i := from; i < k; i++ {
			if _, ok := got[i]; !ok {
				all = false
			}
		}
		wake := rt.changed
		closed := rt.closed
		rt.mu.Unlock()
		if all {
			return got, nil
		}
		if closed {
			return nil, ftrma.ErrClosed
		}
		select {
		case <-wake:
		case <-stop:
			return nil, fmt.Errorf("%w: the replace was called off", ErrReplace)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// replaceSeen is a Replace whose spare was admitted here: its new context
// id and the members of the communicator it replaces ranks of.
type replaceSeen struct {
	id      uint32
	members []ftrma.Rank
	failed  []int
}

// maxReplaceSeen bounds runtime.replaced.
const maxReplaceSeen = 64

// seeReplaceLocked records that a spare of plan's Replace was admitted.
// rt.mu is held.
func (rt *runtime) seeReplaceLocked(plan replacePlan) {
	if len(rt.replaced) >= maxReplaceSeen {
		rt.replaced = slices.Delete(rt.replaced, 0, 1)
	}
	rt.replaced = append(rt.replaced, replaceSeen{plan.id, plan.members, plan.failed})
}

// supersededLocked reports whether a spare of another Replace of the same
// communicator (same members; another new id, or the same id with other
// failed ranks) was admitted here: the survivors have given plan's
// Replace up, whether or not they revoked its id. (After plan's leader
// failed, the others may have agreed on another id, or on the same one
// with the leader among the failed ranks.) Spares are started only after
// a Replace's first agreement, in which every survivor took part, so no
// survivor is still in plan's Replace then. rt.mu is held.
func (rt *runtime) supersededLocked(plan replacePlan) bool {
	for _, r := range rt.replaced {
		if slices.Equal(r.members, plan.members) && (r.id != plan.id || !slices.Equal(r.failed, plan.failed)) {
			return true
		}
	}
	return false
}

// abandoned watches, for a spare of plan, whether it should give its
// Replace up although nobody revoked the new id: the returned channel
// closes when the Replace was superseded (supersededLocked), or, until
// joined is called, when the leader that started it is known failed. A
// failed leader dooms the Replace (the survivors either call it off or
// fail its last agreement, in which the leader is a member), but once
// this spare takes part in the last agreement it must stay for its
// decision, which the survivors share: the spare calls joined before it
// does, and joined reports whether the channel had closed already (then
// it must not take part). The watch ends with ctx.
func (rt *runtime) abandoned(ctx context.Context, plan replacePlan) (gave <-chan struct{}, joined func() bool) {
	leader := ftrma.Rank(-1)
	for r, w := range plan.members {
		if !slices.Contains(plan.failed, r) {
			leader = w
			break
		}
	}
	out := make(chan struct{})
	var mu sync.Mutex // orders the leader check against joined
	waiting, closed := true, false
	give := func() {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			closed = true
			close(out)
		}
	}
	go func() {
		for {
			rt.mu.Lock()
			superseded := rt.supersededLocked(plan)
			leaderGone := leader >= 0 && rt.gone[leader]
			wake, failures, done := rt.changed, rt.failedCh, rt.done
			rt.mu.Unlock()
			if superseded {
				give()
				return
			}
			if leaderGone {
				mu.Lock()
				gaveUp := waiting && !closed
				if gaveUp {
					closed = true
					close(out)
				}
				mu.Unlock()
				if gaveUp {
					return
				}
				// Too late for the leader's failure: the spare takes part
				// in the last agreement. Go on watching for a supersession.
			}
			select {
			case <-wake:
			case <-failures:
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, func() bool {
		mu.Lock()
		defer mu.Unlock()
		waiting = false
		return closed
	}
}

// anyClosed returns a channel closed when a or b is.
func anyClosed(ctx context.Context, a, b <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		select {
		case <-a:
		case <-b:
		case <-ctx.Done():
			return
		}
		close(out)
	}()
	return out
}

// forgetReplace drops what the runtime keeps for the Replace of id.
func (rt *runtime) forgetReplace(id uint32) {
	rt.mu.Lock()
	delete(rt.replacing, id)
	rt.mu.Unlock()
}

// Replace replaces the failed ranks of c by spares and returns the new
// communicator: of the same size, each rank keeping its number, a failed
// rank's number now held by the spare started for it, with a new context
// id. It is collective over the survivors of c; each spare's Init
// returns the same communicator, and its Replaces says which rank it took
// over. Ranks that left cleanly (Departed) are replaced as failed ones are.
// With no failed rank it is Dup without the error.
//
// Every member of the new communicator returns the same outcome. Replace
// fails at every survivor with an error wrapping ErrReplace when not every
// failed rank got a spare (none left, the launcher could not start one,
// no Spawner), with one wrapping ftrma.ErrProcFailed when a survivor or a
// spare failed during the call, and with ctx's error should ctx end first
// (the others then wait until their own contexts end). When it fails, the
// spares that did start are told (the new context id is revoked) and
// their Init fails; they stay live ranks of the job, in no communicator.
// Like Shrink, it works on a revoked communicator; start no other
// agreement on c while it runs.
func (c *Comm) Replace(ctx context.Context) (*Comm, error) {
	d, ids, reserved, err := c.agreeChild(ctx, "replace", "replace", []int64{0}, statusBits)
	if err != nil {
		return nil, err
	}
	defer c.rt.release(reserved)
	if len(ids) == 0 {
		return nil, &ftrma.OpError{Op: "replace", Rank: -1, Err: fmt.Errorf("%w: another collective ran on the communicator at the same time", ftrma.ErrInvalid)}
	}
	id := ids[0]
	failed := slices.Sorted(slices.Values(d.Failed))
	if len(failed) == 0 {
		return c.makeChild(id, slices.Clone(c.members)), nil
	}
	k := len(failed)
	leader := ftrma.Rank(-1)
	for r := range ftrma.Rank(len(c.members)) {
		if !slices.Contains(failed, int(r)) {
			leader = r
			break
		}
	}
	flag := ^uint64(0)
	var spawnErr error
	if c.rank == leader {
		var started []ftrma.Rank
		started, spawnErr = c.spawnFor(ctx, id, failed)
		flag = 0xffffffff00000000 | uint64(len(started))
	}
	d2, err := c.agree(ctx, flag)
	if err != nil {
		err.(*ftrma.OpError).Op = "replace"
		return nil, err
	}
	callOff := func(err error) (*Comm, error) {
		c.Notify(revokeNoticeID(id)) // the spares that started give up
		c.rt.forgetReplace(id)
		return nil, err
	}
	for _, r := range d2.Failed {
		if !slices.Contains(failed, r) {
			return callOff(&ftrma.OpError{Op: "replace", Rank: ftrma.Rank(r), Err: ftrma.ErrProcFailed})
		}
	}
	if n := int(d2.Value & 0xffffffff); n < k {
		err := fmt.Errorf("%w: %d of %d spares started", ErrReplace, n, k)
		if spawnErr != nil {
			err = fmt.Errorf("%w: %w", err, spawnErr)
		}
		return callOff(&ftrma.OpError{Op: "replace", Rank: ftrma.Rank(failed[n]), Err: err})
	}
	spares, err := c.rt.awaitSpares(ctx, id, 0, k, nil)
	if err != nil {
		return callOff(&ftrma.OpError{Op: "replace", Rank: -1, Err: err})
	}
	members := slices.Clone(c.members)
	for i, f := range failed {
		members[f] = spares[i]
	}
	c.rt.forgetReplace(id)
	nc, err := finishReplace(ctx, c.makeChild(id, members), nil)
	if err == nil {
		// Every member has admitted every spare of this Replace (each
		// waited for their admissions before the last agreement): the
		// broadcast may drop the graphs of its earlier present sets.
		c.rt.settle()
	}
	return nc, err
}

// spawnFor asks the Spawner for a spare for each of c's failed ranks, with
// the failed rank's world rank as the placement hint if it takes one, one
// at a time, and returns those started, in order.
func (c *Comm) spawnFor(ctx context.Context, id uint32, failed []int) ([]ftrma.Rank, error) {
	c.rt.mu.Lock()
	sp := c.rt.spawner
	c.rt.mu.Unlock()
	if sp == nil {
		return nil, errors.New("no Spawner: the job has no launcher that starts spares")
	}
	var started []ftrma.Rank
	for i := range failed {
		plan := replacePlan{id: id, members: c.members, failed: failed, index: i, prev: started}
		var ranks []ftrma.Rank
		var err error
		if ns, ok := sp.(nearSpawner); ok {
			ranks, err = ns.SpawnNear(ctx, 1, plan.encode(), []ftrma.Rank{c.members[failed[i]]})
		} else {
			ranks, err = sp.Spawn(ctx, 1, plan.encode())
		}
		if err != nil {
			return started, err
		}
		if len(ranks) != 1 {
			return started, fmt.Errorf("the launcher started %d spares for 1", len(ranks))
		}
		started = append(started, ranks[0])
	}
	return started, nil
}

// finishReplace runs the last agreement of Replace on the new communicator
// nc, survivors and spares alike. A spare passes stop, closed when the
// survivors call the Replace off. On failure nc is closed.
func finishReplace(ctx context.Context, nc *Comm, stop <-chan struct{}) (*Comm, error) {
	if stop != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	d, err := nc.agree(ctx, ^uint64(0))
	if err == nil {
		if r := failedMember(d); r >= 0 {
			err = &ftrma.OpError{Op: "replace", Rank: r, Err: ftrma.ErrProcFailed}
		}
	} else {
		err.(*ftrma.OpError).Op = "replace"
		if stop != nil && chanClosed(stop) {
			err = &ftrma.OpError{Op: "replace", Rank: -1, Err: fmt.Errorf("%w: the replace was called off", ErrReplace)}
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

func chanClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// joinReplace is a spare's side of Replace: started with plan, on the
// runtime of its communicator of itself (self), it waits for the later
// spares of the same Replace, builds the new communicator and takes part
// in its last agreement. The returned communicator owns the runtime (as a
// world communicator does), and Replaces reports the rank taken over.
func joinReplace(ctx context.Context, self *Comm, plan replacePlan) (*Comm, error) {
	rt := self.rt
	k := len(plan.failed)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gave, joined := rt.abandoned(ctx, plan)
	stop := anyClosed(ctx, rt.noticeChan(revokeNoticeID(plan.id)), gave)
	later, err := rt.awaitSpares(ctx, plan.id, plan.index+1, k, stop)
	if joined() && err == nil {
		err = fmt.Errorf("%w: the replace was given up (its leader failed, or the survivors started another)", ErrReplace)
	}
	if err != nil {
		return nil, &ftrma.OpError{Op: "replace", Rank: -1, Err: err}
	}
	members := slices.Clone(plan.members)
	for i, f := range plan.failed {
		switch {
		case i < plan.index:
			members[f] = plan.prev[i]
		case i == plan.index:
			members[f] = rt.self
		default:
			members[f] = later[i]
		}
	}
	rt.forgetReplace(plan.id)
	nc := newComm(rt, plan.id, members)
	nc.replaces = plan.members[plan.failed[plan.index]]
	nc, err = finishReplace(ctx, nc, stop)
	if err != nil {
		return nil, err
	}
	nc.world = true
	nc.session = self.session
	rt.settle()
	return nc, nil
}

// Spawned reports whether this process is a spare started after the job
// began (by a Replace), whatever the communicator: it is new to what the
// job built before it started, and joins it (store.Join) rather than
// growing it, also on a later communicator than the one Init returned
// (when a rank failed meanwhile and the members Replaced again).
func (c *Comm) Spawned() bool { return c.rt.spawned }

// Replaces reports, for a spare started by Replace, the world rank of the
// failed process whose communicator rank it took over (its own Rank in
// the communicator Init returned); false for every other communicator.
func (c *Comm) Replaces() (ftrma.Rank, bool) {
	if c.replaces < 0 {
		return -1, false
	}
	return c.replaces, true
}
