package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// Growing back after Replace. comm.Replace gives a communicator of the same
// size in which each failed rank's number is held by a new, empty process.
// Grow (at the survivors) and Join (at the new ranks) extend the store to it:
// the replaced numbers count as live again in placement, so exactly the keys
// whose first Copies live ranks now include a new rank move, nothing else.
//
// Views (op.go). Every operation works in one view of the store, from its
// start to its end or its restart (errNewView) in the next; Grow installs
// each view and drains the one before. Views only move forward, old →
// transition → dropping → new, and each one's replica sets contain the
// ones before:
//
//   - old: the store's communicator; replaced ranks are failed.
//   - transition: the new communicator and window; a key's replicas are the
//     union of its old placement (replaced ranks still counted failed) and
//     its new placement (replaced ranks live). Writes lock and write all of
//     them; reads read all of them, so an empty new replica reads as
//     "replicas differ" and is repaired, as after a failure. No fast reads.
//   - dropping: the new placement, while ranks drop the copies it no longer
//     places; a deletion deletes such leftover copies too (see below).
//   - new: the new placement alone.
//
// Grow at a survivor:
//
//  1. Rebuild the window over nc; exchange options, hash key, table
//     addresses and hosts (two Allgathers, done by every rank whatever
//     happened), and agree whether every rank got them all. If not, Grow
//     fails at every rank alike and the store stays in the old view.
//  2. Clear what the replaced processes left in this rank's own table
//     (locks, a claim, chunks being filled): the numbers are about to name
//     live processes that know nothing of it. A key locked by a dead writer
//     is repaired first, in the old view.
//  3. Install the transition view and drain the old one; agree (every rank
//     is in transition, so no write misses a new replica any more).
//  4. Move: scan this rank's own slots (local memory) and check every key
//     whose new placement differs from its old one, as recovery does (the
//     key's holders in placement order, the later ones after a delay, so
//     that usually the first repairs and the others find the key whole).
//     Agree (every key is whole at its new replicas).
//  5. Install the dropping view and drain the transition; agree.
//  6. Drop: delete, under the key's lock at this rank, the copies of keys
//     this rank no longer places, so that a later failure cannot bring a
//     stale copy back (a deleted key's stale copy would be read as its
//     value). Until every rank has, a failure can make a rank that still
//     holds such a copy place its key again, and a deletion made meanwhile
//     in the new placement alone would leave that copy the only one: so
//     deletions in the dropping view delete the leftover copies at the old
//     placement's ranks too (TestGrowDeleteThenFailureNoResurrection).
//     Agree; install the new view; drain the dropping one.
//
// Join at a new rank does the same steps with nothing to clear, move or
// drop. The agreements are the runtime's fault-tolerant agreement used as a
// barrier: ranks failing meanwhile are left out, and the ordinary recovery
// works in whatever view is current, so Grow completes despite them. Only
// ctx ending can leave a rank in the transition view; its operations stay
// correct there.

// deletion is tombstone for the deletion of a key's value: in the dropping
// view it deletes the leftover copies too (withLeftovers). (A rank dropping
// its own copy, or an operation giving back slots it claimed for nothing,
// tombstones only its replicas: holding its own lock while it waited for a
// leftover's, one dropping rank could wait for another for ever.)
func (o *op) deletion(ctx context.Context, id ident, reps []*replica, v uint64) error {
	reps, err := o.withLeftovers(ctx, id, reps)
	if err != nil {
		return err
	}
	return o.tombstone(ctx, id, reps, v)
}

// withLeftovers adds to a deletion's replicas, in the dropping view, the
// copies left at the ranks of the key's old placement (leftovers), locked:
// until every rank has dropped them, a failure could make such a rank
// place the key again, and its copy would then bring the deleted value
// back. A leftover rank failing meanwhile takes its copy with it. On an
// error the locks of reps are given back.
func (o *op) withLeftovers(ctx context.Context, id ident, reps []*replica) ([]*replica, error) {
	var extra []*replica
	for _, r := range o.v().leftovers(id.h, o.failed) {
		if slices.ContainsFunc(reps, func(p *replica) bool { return p.r == r }) {
			continue
		}
		sl, err := o.findSlot(ctx, r, id, false)
		if err != nil || sl.idx < 0 {
			continue // none there, or its rank failed
		}
		p := &replica{r: r, id: id, slot: sl.idx, ref: slotRef{o.v().epoch, r, sl.idx}, keyAddr: sl.key, gen: sl.gen, addr: o.slotAddr(r, sl.idx)}
		o.cache.Lock()
		p.expect = o.cache.lock[p.ref]
		o.cache.Unlock()
		extra = append(extra, p)
	}
	if len(extra) == 0 {
		return reps, nil
	}
	if err := o.lockAll(ctx, id, extra); err != nil {
		// No leftover is left out: a leftover rank that failed takes its
		// copy with it, but the deletion starts again once the failure is
		// known (the rank is no leftover then), and a slot that changed is
		// looked up again (errStale). lockAll gave back what it took.
		o.unlockAll(ctx, reps)
		return nil, err
	}
	for _, p := range extra {
		if p.held {
			reps = append(reps, p)
		}
	}
	return reps, nil
}

func newArenas(n int) []*arena {
	a := make([]*arena, n)
	for i := range a {
		a[i] = &arena{}
	}
	return a
}

// testHookMove is called before a survivor's move checks its i-th key.
var testHookMove testHook[func(s *Store, i int)]

// testHookDrop is called before a survivor's Grow drops the copies it no
// longer places (in the dropping view, installed just before).
var testHookDrop testHook[func(s *Store)]

// testHookGrow is called at two points of a survivor's Grow: "exchange",
// before its exchange (its window rebuilt), and "transition", before it
// installs its transition view.
var testHookGrow testHook[func(s *Store, at string)]

// replacer is what Join needs to know of a communicator: whether this
// process is new to the store (comm.Comm offers it).
type replacer interface {
	Replaces() (ftrma.Rank, bool)
	Spawned() bool
}

// rebuild is the window over nc for the store: the old window's memory
// (this rank's table and chunks) keeps its addresses; nil old for a new
// rank.
// failedJoins holds, by transport (one per process), the window of a Join
// whose exchange failed after its window was rebuilt: the survivors' store
// window counts this process a member from then on (see Join).
var failedJoins sync.Map

func rebuild(ctx context.Context, nc window.Comm, old *window.Window) (*window.Window, error) {
	return window.Rebuild(ctx, nc, old, nil)
}

// Grow extends the store to nc, the communicator Replace returned for the
// store's communicator (or for one Replace returned before: a rank whose
// process differs from the store's is a replaced one). The replaced ranks
// join placement again: keys whose placement now includes one of them get
// a copy there, copies lost in earlier failures are re-created, and this
// rank drops the copies it no longer places. Operations of this and other
// goroutines go on during Grow, linearizably. Collective over nc with Join
// at the new ranks. A failure during Grow is recovered from as any other;
// Grow returns an error wrapping ftrma.ErrProcFailed when the ranks could
// not start it together (the store then stays on its communicator), and
// ctx's error if ctx ends (the store may then stay in its transition view,
// slower but correct).
func (s *Store) Grow(ctx context.Context, nc window.Comm) error {
	start := time.Now()
	fail := func(err error) error { return &ftrma.OpError{Op: "store grow", Rank: -1, Err: err} }
	if s.closed.Load() {
		return fail(ErrClosed)
	}
	if !s.growing.CompareAndSwap(false, true) {
		return fail(fmt.Errorf("%w: a Grow is under way", ftrma.ErrInvalid))
	}
	defer s.growing.Store(false)
	v := s.current()
	switch {
	case v.old != nil:
		return fail(fmt.Errorf("%w: an earlier Grow was cut short", ftrma.ErrInvalid))
	case nc == nil || nc.Size() != s.n:
		return fail(fmt.Errorf("%w: Grow needs a communicator of the store's %d ranks", ftrma.ErrInvalid, s.n))
	case nc.Rank() != s.me:
		return fail(fmt.Errorf("%w: this rank is %d in the new communicator, %d in the store", ftrma.ErrInvalid, nc.Rank(), s.me))
	case nc == v.c || nc.ContextID() == v.c.ContextID():
		return fail(fmt.Errorf("%w: the store is already over this communicator", ftrma.ErrInvalid))
	}
	world := make([]ftrma.Rank, s.n)
	for r := range world {
		world[r] = v.c.TransportRank(ftrma.Rank(r))
	}
	nw, werr := rebuild(ctx, nc, v.w)
	if werr == nil {
		// The old window is unusable now: the old view goes on with the
		// new one (its ranks are the same processes, its memory the same
		// addresses; the replaced ranks stay failed in it).
		ov := &view{w: nw, c: v.c, tables: v.tables, hosts: v.hosts, place: v.place, fast: nw.WholeWords(),
			epoch: v.epoch, arenas: v.arenas, keyArenas: v.keyArenas}
		ov.interim.Store(true)
		s.setView(ov)
		// A Grow that stops before its transition view leaves the store
		// in this one, no longer interim.
		defer func() {
			if s.current() == ov {
				ov.interim.Store(false)
			}
		}()
		if err := drain(ctx, v); err != nil {
			return fail(err)
		}
		v.w.Free(ctx) // local: its control words
		v = ov
	}
	if hook := testHookGrow.get(); hook != nil {
		hook(s, "exchange")
	}
	g, err := exchange(ctx, nc, werr, s.survivorInfo(v, world), func([][]byte) ([]byte, error) { return []byte{'S'}, nil })
	if err != nil {
		return fail(err)
	}
	for r := range s.n {
		if !g.replaced[r] && g.tables[r] != v.tables[r] {
			return fail(fmt.Errorf("%w: rank %d's table moved", ftrma.ErrInvalid, r))
		}
	}
	// 2. What the replaced processes left here.
	o := s.begin()
	err = o.clearReplaced(ctx, g.replaced)
	o.end()
	if err != nil {
		return fail(err)
	}
	// 3. The transition view.
	tv := &view{w: nw, c: nc, tables: g.tables, hosts: g.hosts, place: newPlacement(s.opt.Copies, g.hosts),
		fast: nw.WholeWords(), old: v.place, replaced: g.replaced, epoch: v.epoch + 1,
		arenas: slices.Clone(v.arenas), keyArenas: slices.Clone(v.keyArenas)}
	for r, gone := range g.replaced {
		if gone {
			tv.arenas[r], tv.keyArenas[r] = &arena{}, &arena{}
		}
	}
	if hook := testHookGrow.get(); hook != nil {
		hook(s, "transition")
	}
	s.install(tv)
	if err := s.finishGrow(ctx, v, tv, true); err != nil {
		return err
	}
	s.st.growTime.Store(int64(time.Since(start)))
	return nil
}

// Join is a new rank's side of Grow: the rank is a spare whose startup.Init
// returned nc (c.Replaces() true), or a later communicator of a Replace
// over it (c.Spawned() true: a rank failed during an earlier Join, and the
// members replaced it too). Of opt only what is the rank's own
// is used (Host); the options the ranks share, and the hash's key, come
// from the survivors. It returns the rank's handle once the store is grown.
// If ctx ends after the ranks started the Grow, the rank's memory stays in
// the store (its housekeeping goes on) though Join returns an error.
func Join(ctx context.Context, nc window.Comm, opt Config) (*Store, error) {
	start := time.Now()
	fail := func(err error) error { return &ftrma.OpError{Op: "store join", Rank: -1, Err: err} }
	rp, ok := nc.(replacer)
	if nc == nil || !ok {
		return nil, fail(fmt.Errorf("%w: Join needs the communicator startup.Init gave a replacement", ftrma.ErrInvalid))
	}
	if _, ok := rp.Replaces(); !ok && !rp.Spawned() {
		return nil, fail(fmt.Errorf("%w: rank %d is not a replacement (a process started with the job): survivors call Grow", ftrma.ErrInvalid, nc.Rank()))
	}
	if opt.Host == "" {
		opt.Host, _ = os.Hostname()
	}
	// A Join that failed after the window was rebuilt left this process a
	// member of the survivors' window: it takes part in the next rebuild
	// with that window, as they do.
	var prev *window.Window
	if w, ok := failedJoins.LoadAndDelete(nc.Transport()); ok {
		prev = w.(*window.Window)
	}
	nw, werr := rebuild(ctx, nc, prev)
	if werr != nil && prev != nil {
		failedJoins.Store(nc.Transport(), prev) // Rebuild leaves it as it was
	}
	var s *Store
	second := func(first [][]byte) ([]byte, error) {
		shared, err := sharedConfig(first)
		if err != nil {
			return []byte{'J'}, err
		}
		shared.Host = opt.Host
		s = newStore(nc, shared)
		addr, err := s.makeTable(nw)
		if err != nil {
			s = nil
			return []byte{'J'}, err
		}
		return binary.LittleEndian.AppendUint64([]byte{'J'}, addr), nil
	}
	first := append([]byte{'J'}, opt.Host...)
	if werr != nil {
		second = func([][]byte) ([]byte, error) { return []byte{'J'}, werr }
	}
	g, err := exchange(ctx, nc, werr, first, second)
	if err != nil {
		if s != nil {
			nw.Release(s.tableMem)
		}
		if werr == nil {
			failedJoins.Store(nc.Transport(), nw)
		}
		return nil, fail(err)
	}
	s.sip = g.sip
	tv := &view{w: nw, c: nc, tables: g.tables, hosts: g.hosts, place: newPlacement(s.opt.Copies, g.hosts),
		fast: nw.WholeWords(), old: newPlacement(s.opt.Copies, g.oldHosts), replaced: g.replaced,
		epoch: 1, arenas: newArenas(s.n), keyArenas: newArenas(s.n)}
	s.setView(tv)
	o := s.begin()
	for range s.opt.Reserve {
		o.attachChunk(s.opt.ChunkSize)
	}
	o.end()
	go s.housekeeping()
	if err := s.finishGrow(ctx, nil, tv, false); err != nil {
		return nil, err
	}
	s.st.growTime.Store(int64(time.Since(start)))
	return s, nil
}

// install makes v, a transition view, the current view and forgets what
// this rank learned under the epochs before. Operations of the view before
// may still add to the caches; what they add is of their epoch, which no
// operation of v looks up (F31), and goes at the next install.
func (s *Store) install(v *view) {
	s.cache.Lock()
	maps.DeleteFunc(s.cache.slot, func(k keyAt, _ slotID) bool { return k.epoch != v.epoch })
	maps.DeleteFunc(s.cache.lock, func(k slotRef, _ uint64) bool { return k.epoch != v.epoch })
	maps.DeleteFunc(s.cache.desc, func(k slotRef, _ desc) bool { return k.epoch != v.epoch })
	maps.DeleteFunc(s.cache.chunk, func(k regionRef, _ int) bool { return k.epoch != v.epoch })
	s.cache.Unlock()
	s.settled.Lock()
	for r := range s.settled.ranks {
		if v.replaced[r] {
			delete(s.settled.ranks, r)
		}
	}
	s.settled.Unlock()
	s.setView(v)
}

// finishGrow runs steps 3–6 (see above) from the installed transition view
// tv; prev is the view before it at a survivor (nil at a new rank).
func (s *Store) finishGrow(ctx context.Context, prev, tv *view, survivor bool) error {
	fail := func(err error) error { return &ftrma.OpError{Op: "store grow", Rank: -1, Err: err} }
	if prev != nil {
		if err := drain(ctx, prev); err != nil {
			return fail(err)
		}
	}
	if err := barrier(ctx, tv.c); err != nil {
		return fail(err)
	}
	if survivor {
		o := s.begin()
		o.moving = true
		err := o.moveKeys(ctx)
		o.end()
		if err != nil {
			return fail(err)
		}
	}
	if err := barrier(ctx, tv.c); err != nil {
		return fail(err)
	}
	// The new placement, deleting leftover copies too until every rank
	// has dropped its own.
	dv := &view{w: tv.w, c: tv.c, tables: tv.tables, hosts: tv.hosts, place: tv.place, fast: tv.fast, epoch: tv.epoch,
		arenas: tv.arenas, keyArenas: tv.keyArenas, old: tv.old, replaced: tv.replaced, dropping: true}
	s.setView(dv)
	if err := drain(ctx, tv); err != nil {
		return fail(err)
	}
	if err := barrier(ctx, tv.c); err != nil {
		return fail(err)
	}
	if hook := testHookDrop.get(); hook != nil && survivor {
		hook(s)
	}
	o := s.begin()
	err := o.dropKeys(ctx)
	o.end()
	if err != nil {
		return fail(err)
	}
	if err := barrier(ctx, tv.c); err != nil {
		return fail(err)
	}
	nv := &view{w: tv.w, c: tv.c, tables: tv.tables, hosts: tv.hosts, place: tv.place, fast: tv.fast, epoch: tv.epoch,
		arenas: tv.arenas, keyArenas: tv.keyArenas}
	s.setView(nv)
	if err := drain(ctx, dv); err != nil {
		return fail(err)
	}
	return nil
}

// barrier is the fault-tolerant agreement used as a barrier: ranks failing
// during it are left out.
func barrier(ctx context.Context, c window.Comm) error {
	if _, err := c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return err
	}
	return ctx.Err()
}

// grown is what the exchange of Grow and Join tells every rank.
type grown struct {
	opt      Config
	sip      sipKey
	oldHosts []string // the hosts of the old placement
	replaced []bool
	tables   []uint64
	hosts    []string
}

const growMagic = "grw1"

// survivorInfo is a survivor's part of the exchange: 'S', the shared
// options, the hash's key, the store's world ranks and old hosts, this
// rank's table address.
func (s *Store) survivorInfo(v *view, world []ftrma.Rank) []byte {
	b := []byte{'S'}
	b = append(b, growMagic...)
	for _, x := range []int{s.opt.Copies, s.opt.MaxValueSize, s.opt.MaxKeySize, s.opt.Slots, s.opt.ChunkSize, s.opt.Chunks, s.opt.Reserve} {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	b = binary.LittleEndian.AppendUint64(b, s.sip.k0)
	b = binary.LittleEndian.AppendUint64(b, s.sip.k1)
	b = binary.LittleEndian.AppendUint64(b, v.tables[s.me])
	for r := range s.n {
		b = binary.LittleEndian.AppendUint32(b, uint32(world[r]))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v.hosts[r])))
		b = append(b, v.hosts[r]...)
	}
	return b
}

// sharedConfig reads the options the ranks share from the first
// survivor's part of the exchange's first round.
func sharedConfig(first [][]byte) (Config, error) {
	for _, b := range first {
		if len(b) > 0 && b[0] == 'S' {
			in, err := parseSurvivor(b, len(first))
			return in.opt, err
		}
	}
	return Config{}, fmt.Errorf("%w: no survivor of the store took part in the Grow", ftrma.ErrInvalid)
}

// survivorPart is what a survivor's part of the first round says.
type survivorPart struct {
	opt      Config
	sip      sipKey
	table    uint64
	world    []ftrma.Rank
	oldHosts []string
}

func parseSurvivor(b []byte, n int) (p survivorPart, err error) {
	bad := fmt.Errorf("%w: bad Grow exchange (ranks of different versions?)", ftrma.ErrInvalid)
	if len(b) < 1+len(growMagic)+10*8 || string(b[1:1+len(growMagic)]) != growMagic {
		return p, bad
	}
	b = b[1+len(growMagic):]
	u := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	p.opt = Config{Copies: int(u()), MaxValueSize: int(u()), MaxKeySize: int(u()), Slots: int(u()), ChunkSize: int(u()), Chunks: int(u()), Reserve: int(u())}
	p.sip.k0, p.sip.k1, p.table = u(), u(), u()
	for range n {
		if len(b) < 8 {
			return p, bad
		}
		w, l := binary.LittleEndian.Uint32(b), int(binary.LittleEndian.Uint32(b[4:]))
		b = b[8:]
		if len(b) < l {
			return p, bad
		}
		p.world = append(p.world, ftrma.Rank(w))
		p.oldHosts = append(p.oldHosts, string(b[:l]))
		b = b[l:]
	}
	if len(b) != 0 {
		return p, bad
	}
	return p, nil
}

// exchange runs the exchange of Grow and Join over nc: two Allgathers, the
// first of first, the second of what second makes of the first's result
// (nil if it failed), then an agreement on whether every rank has it all.
// Every rank runs all three whatever fails, so that none waits for one that
// gave up. werr is an error of this rank's before the exchange.
func exchange(ctx context.Context, nc window.Comm, werr error, first []byte, second func([][]byte) ([]byte, error)) (*grown, error) {
	r1, err := nc.Allgather(ctx, first)
	if err != nil {
		r1 = nil
	}
	mine2, err2 := second(r1)
	r2, err3 := nc.Allgather(ctx, mine2)
	var g *grown
	var perr error
	if err == nil && err3 == nil {
		g, perr = parseGrow(nc, r1, r2)
	}
	ok := uint64(0)
	if werr == nil && err == nil && err2 == nil && err3 == nil && perr == nil {
		ok = 1
	}
	agreed, aerr := nc.Agree(ctx, ok)
	if aerr != nil && !errors.Is(aerr, ftrma.ErrProcFailed) {
		return nil, aerr
	}
	if agreed == 1 {
		return g, nil
	}
	// A rank failing during the exchange also breaks what the others read
	// of it (a new rank's round without its table): whatever this rank
	// saw, the cause is a failure, and every member must say so alike, so
	// that all of them replace it and try again (Respawn, JoinRespawned).
	someFailed := errors.Is(aerr, ftrma.ErrProcFailed)
	for r := range nc.Size() {
		someFailed = someFailed || nc.ProcFailed(ftrma.Rank(r))
	}
	for _, e := range []error{werr, err, err2, err3, perr} {
		if e != nil {
			if someFailed && !errors.Is(e, ftrma.ErrProcFailed) {
				return nil, fmt.Errorf("%w: a rank failed during the exchange (here: %v)", ftrma.ErrProcFailed, e)
			}
			return nil, e
		}
	}
	return nil, fmt.Errorf("%w: another rank could not start the Grow", ftrma.ErrProcFailed)
}

// parseGrow reads both rounds of the exchange.
func parseGrow(nc window.Comm, r1, r2 [][]byte) (*grown, error) {
	n := nc.Size()
	if len(r1) != n || len(r2) != n {
		return nil, fmt.Errorf("%w: a Grow exchange of %d and %d parts among %d ranks", ftrma.ErrInvalid, len(r1), len(r2), n)
	}
	var ref *survivorPart
	g := &grown{replaced: make([]bool, n), tables: make([]uint64, n), hosts: make([]string, n)}
	for r, b := range r1 {
		if len(b) > 0 && b[0] == 'S' {
			p, err := parseSurvivor(b, n)
			if err != nil {
				return nil, err
			}
			if ref == nil {
				ref = &p
			} else if p.opt != ref.opt || p.sip != ref.sip || !slices.Equal(p.world, ref.world) || !slices.Equal(p.oldHosts, ref.oldHosts) {
				return nil, fmt.Errorf("%w: ranks %d and others differ on the store's options", ftrma.ErrInvalid, r)
			}
			g.tables[r] = p.table
		}
	}
	if ref == nil {
		return nil, fmt.Errorf("%w: no survivor of the store took part in the Grow", ftrma.ErrInvalid)
	}
	g.opt, g.sip, g.oldHosts = ref.opt, ref.sip, ref.oldHosts
	for r := range n {
		b1, b2 := r1[r], r2[r]
		g.replaced[r] = ref.world[r] != nc.TransportRank(ftrma.Rank(r))
		switch {
		case len(b1) > 0 && b1[0] == 'S' && !g.replaced[r]:
			g.hosts[r] = ref.oldHosts[r]
		case len(b1) > 0 && b1[0] == 'J' && g.replaced[r] && len(b2) == 9:
			g.hosts[r] = string(b1[1:])
			g.tables[r] = binary.LittleEndian.Uint64(b2[1:])
		case g.replaced[r]:
			return nil, fmt.Errorf("%w: rank %d holds a new process but did not Join", ftrma.ErrInvalid, r)
		default:
			return nil, fmt.Errorf("%w: rank %d is the store's process but did not Grow", ftrma.ErrInvalid, r)
		}
	}
	return g, nil
}

// clearReplaced clears what the replaced processes left in this rank's own
// table, in the old view: keys they held locked, and keys with a pending
// record nobody live holds (orphanPending), are repaired (the repair takes
// their locks, as after any failure), the locks they held on keys
// this rank does not place are freed, their claim is let go and the chunks
// they were filling are sealed (the housekeeping reclaims them once empty).
func (o *op) clearReplaced(ctx context.Context, replaced []bool) error {
	v := o.v()
	of := func(owner int) bool { return owner >= 0 && owner < o.n && replaced[owner] }
	for i := range o.opt.Slots {
		base := hdrWords + i*slotWords
		lw := atomic.LoadUint64(&o.table[base+slotLock])
		orphan := orphanPending(atomic.LoadUint64(&o.table[base+slotPAddr]), lockOwner(lw), o.failed)
		if !of(lockOwner(lw)) && !orphan {
			continue
		}
		ka, h := o.ownSlot(ctx, i)
		if ka != 0 && ka != slotTomb && h != 0 && slices.Contains(v.replicas(h, o.failed), o.me) {
			id, err := o.ownKey(ctx, h, ka)
			if err == nil {
				_, err = o.repair(ctx, id)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		addr := v.tables[o.me] + uint64(base+slotLock)*8
		for lw := atomic.LoadUint64(&o.table[base+slotLock]); of(lockOwner(lw)); lw = atomic.LoadUint64(&o.table[base+slotLock]) {
			o.casOwn(localWord{&o.table[base+slotLock]}, addr, lw, lockWord(lockVersion(lw), -1))
		}
	}
	claim := localWord{&o.table[hdrClaim]}
	if c := claim.Load(); c != 0 && of(int(c)-1) {
		o.casOwn(claim, v.tables[o.me]+hdrClaim*8, c, 0)
	}
	for e := range int(o.heap.entries.Load()) {
		ow := o.entry(e, chunkOwner)
		if owner := ow.Load(); owner != 0 && owner != chunkNotReady && owner&sealed == 0 && of(int(owner)-1) {
			o.casOwn(ow, o.entryAddr(o.me, e, chunkOwner), owner, owner|sealed)
		}
	}
	return nil
}

// moveKeys is Grow's move (step 4): every key this rank holds whose new
// placement differs from its old one is checked like recovery checks a key
// (getAll: when the replicas differ, the repair writes the newest copy to
// the new replicas), by its holders in placement order.
func (o *op) moveKeys(ctx context.Context) error {
	v := o.v()
	type job struct {
		h, key uint64
		pos    int
	}
	var jobs []job
	oldFailed := func(r ftrma.Rank) bool { return v.replaced[r] || o.failed(r) }
	for i := range o.opt.Slots {
		ka, h := o.ownSlot(ctx, i)
		if ka == 0 || ka == slotTomb || h == 0 {
			continue
		}
		pos := slices.Index(v.replicas(h, o.failed), o.me)
		if pos < 0 {
			continue
		}
		was, now := v.old.replicas(h, oldFailed), v.place.replicas(h, o.failed)
		slices.Sort(was)
		slices.Sort(now)
		if !slices.Equal(was, now) {
			jobs = append(jobs, job{h, ka, pos})
		}
	}
	slices.SortFunc(jobs, func(a, b job) int { return a.pos - b.pos })
	start := time.Now()
	for i, j := range jobs {
		if hook := testHookMove.get(); hook != nil {
			hook(o.Store, i)
		}
		if d := time.Duration(j.pos)*staggerStep - time.Since(start); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		id, err := o.ownKey(ctx, j.h, j.key)
		if err == nil {
			_, _, err = o.getAll(ctx, id)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDataLost) {
			o.st.retries.Add(1) // a failure: recovery in this view takes over
		}
	}
	return nil
}

// dropKeys is Grow's drop (step 6): the copies of keys this rank no longer
// places are deleted here.
func (o *op) dropKeys(ctx context.Context) error {
	v := o.v()
	for i := range o.opt.Slots {
		ka, h := o.ownSlot(ctx, i)
		if ka == 0 || ka == slotTomb || h == 0 || slices.Contains(v.replicas(h, o.failed), o.me) {
			continue
		}
		id, err := o.ownKey(ctx, h, ka)
		if err == nil {
			err = o.dropKey(ctx, id)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// dropKey deletes this rank's copy of id, under the key's lock here, unless
// this rank places the key again by then (a failure meanwhile). A writer
// that knows of a failure writes only once every live rank knows of it
// (awaitSettled), so the check under the lock sees every failure that made
// a writer write here.
func (o *op) dropKey(ctx context.Context, id ident) error {
	if err := o.keys.lock(ctx, id); err != nil {
		return err
	}
	defer o.keys.unlock(id)
	o.endLease(id) // a lease's other locks must not outlive it
	for attempt := 0; ; attempt++ {
		o.forget(o.me, id)
		sl, err := o.findSlot(ctx, o.me, id, false)
		if err != nil || sl.idx < 0 {
			return err
		}
		p := &replica{r: o.me, id: id, slot: sl.idx, ref: slotRef{o.v().epoch, o.me, sl.idx}, keyAddr: sl.key, gen: sl.gen, addr: o.slotAddr(o.me, sl.idx)}
		p.expect = lockWord(lockVersion(atomic.LoadUint64(&o.table[hdrWords+sl.idx*slotWords+slotLock])), -1)
		reps := []*replica{p}
		err = o.lockAll(ctx, id, reps)
		if errors.Is(err, errRetry) {
			if err := backoff(ctx, min(attempt, 5)); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if slices.Contains(o.v().replicas(id.h, o.failed), o.me) {
			o.unlockAll(ctx, reps)
			return nil
		}
		return o.tombstone(ctx, id, reps, newest(reps))
	}
}

// countGrow counts a move's writes (publish by Grow's repairs): the key
// once, if any replica was written, and the record's bytes per replica.
func (o *op) countGrow(reps []*replica, n int) {
	k := 0
	for _, p := range reps {
		if p.written && !p.failed && !p.same {
			k++
		}
	}
	if k > 0 {
		o.st.growKeys.Add(1)
		o.st.growBytes.Add(uint64(k * n))
	}
}
