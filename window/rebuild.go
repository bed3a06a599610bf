package window

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// ErrRebuilt reports use of a window that Rebuild replaced by a window over
// another communicator. It wraps ErrFreed (and so ftrma.ErrClosed).
var ErrRebuilt = fmt.Errorf("window rebuilt over another communicator: %w", ErrFreed)

// What a rank says of itself in Rebuild's first exchange.
const (
	rebuildNew     = 0 // it passed no window: new to the window
	rebuildKept    = 1 // it passed its old window, which is fit
	rebuildInvalid = 2 // it cannot take part; an error text follows
)

// The first exchange's fixed part: status, kind, memory key, memory size,
// new control key, window id proposal, old window's identity. Then a
// survivor lists (rank, size) for each rank whose process changed.
const (
	rebuildHead  = 1 + 1 + 4 + 8 + 4 + 8 + 8
	rebuildEntry = 4 + 8
)

// Rebuild returns a window over nc, a communicator of the same size as old's
// (typically from comm.Replace). Survivors pass their old window; ranks new to
// the window (spares) pass nil. Collective over nc.
//
// The new window has old's kind. A survivor keeps its window memory as it is:
// the same memory, with the same registration, not copied, and in a dynamic
// window the same attached regions at the same addresses (Attach and Detach
// work on the new window). A Create window whose memory is a copy of the
// caller's buffer (shared memory) still copies it back at Free of the new
// window. A new rank of an Allocate or Create window gets zeroed memory of the
// size the rank of the same number had in old (as the lowest survivor saw it
// at old's creation); init, when not nil, is then called on it, before the
// memory is published, so no rank can reach it before init returns. A new
// rank's memory is allocated as Allocate's, also for a Create window: Bytes
// is its window memory, and Free releases it. A new rank of a dynamic window
// has nothing attached; init is not called.
//
// Locks do not carry over. The new window has control words of its own, with
// no lock held and a revocation notice of its own (not revoked when old was).
// A lock this rank held on old is dropped when Rebuild succeeds: it no longer
// excludes anyone, and a rank that still needs it takes it again on the new
// window. This is safe because old cannot be used any more (see below) and
// Rebuild completes this rank's operations on old (their errors are dropped)
// before the exchange: when Rebuild returns, no operation of a survivor on
// old is still on its way, and a failed rank's are fenced by the runtime.
//
// When Rebuild succeeds, the new window owns old's memory, and old is
// unusable: its operations return ErrRebuilt and its Bytes is nil. Free of
// old is then local (not collective) and releases only its control words;
// call it to release them. Free of the new window releases everything else.
// When Rebuild fails, old is unchanged and stays usable (Rebuild may be
// called again, for instance over the communicator of the next Replace), and
// what Rebuild made is released.
//
// Errors: an error wrapping ftrma.ErrInvalid at every rank when a rank
// passes a window that does not fit: over another transport, of another
// number of ranks than nc (a window made by Shrink never fits), or in which
// its rank differs from its rank in nc; when survivors pass different
// windows; when a rank passes nil although the same process held that
// number in old; or when no rank passes a window. ErrFreed for a freed old
// window (the other ranks get ftrma.ErrInvalid). An error wrapping
// ftrma.ErrProcFailed when a rank fails during the exchanges: the ranks agree
// at the end, so all fail together. Should ctx end first, Rebuild returns its
// error, and the other ranks wait until their own contexts end. Rebuild
// ends with an agreement on nc: start no other agreement on nc while it
// runs, and call it where no other goroutine uses old.
func Rebuild(ctx context.Context, nc Comm, old *Window, init func(mem []byte)) (*Window, error) {
	if nc == nil {
		return nil, &ftrma.OpError{Op: "rebuild", Rank: -1, Err: fmt.Errorf("%w: nil communicator", ftrma.ErrInvalid)}
	}
	r := &rebuild{nc: nc, old: old, t: nc.Transport(), n: nc.Size(), me: nc.Rank()}
	w, err := r.run(ctx, init)
	// The ranks agree on the outcome, so that none keeps a window the
	// others dropped (ranks that failed are not waited for).
	flag := uint64(1)
	if err != nil {
		flag = 0
	}
	v, aerr := nc.Agree(ctx, flag)
	if err == nil && aerr != nil && !errors.Is(aerr, ftrma.ErrProcFailed) {
		err = wrap("rebuild", -1, aerr)
	}
	if err == nil && v&1 == 0 {
		err = &ftrma.OpError{Op: "rebuild", Rank: -1, Err: errors.New("window: another rank could not rebuild the window")}
		if aerr != nil {
			err = &ftrma.OpError{Op: "rebuild", Rank: -1, Err: fmt.Errorf("window: another rank could not rebuild the window: %w", aerr)}
		}
	}
	if err != nil {
		r.undo()
		return nil, err
	}
	r.commit(w)
	return w, nil
}

// rebuild is the state of one rank's Rebuild, so that it can be undone.
type rebuild struct {
	nc  Comm
	old *Window
	t   transport.Transport
	n   int
	me  ftrma.Rank

	ctlMem []byte        // the new control block
	ctlKey transport.Key // its registration
	mem    []byte        // a new rank's window memory
	memKey transport.Key // its registration
}

// check reports why old cannot be passed to Rebuild over nc: the reason,
// said of the rank ("its old window ..."), and the error it wraps; a nil
// error when it fits.
func (r *rebuild) check() (why string, err error) {
	o := r.old
	switch {
	case o.freed.Load() && o.rebuilt.Load():
		return "its old window was rebuilt already", ErrRebuilt
	case o.freed.Load():
		return "its old window was freed", ErrFreed
	case o.t != r.t:
		return "its old window is over another transport", ftrma.ErrInvalid
	case o.shared:
		return "its old window was made by Shrink; rebuild the window it came from", ftrma.ErrInvalid
	case len(o.peers) != r.n:
		return fmt.Sprintf("its old window has %d ranks, the communicator %d", len(o.peers), r.n), ftrma.ErrInvalid
	case o.rank != r.me:
		return fmt.Sprintf("it is rank %d in the old window, %d in the communicator", o.rank, r.me), ftrma.ErrInvalid
	}
	return "", nil
}

func (r *rebuild) run(ctx context.Context, init func([]byte)) (*Window, error) {
	var local error
	var why string
	if r.old != nil {
		why, local = r.check()
	}
	ctlMem, err := allocMem(r.t, ctlWords(r.n)*8)
	if err != nil {
		return nil, &ftrma.OpError{Op: "rebuild", Rank: -1, Err: err}
	}
	r.ctlMem = ctlMem
	ctl := wordSlice(ctlMem, ctlWords(r.n))
	if r.ctlKey, err = r.t.Register(ctlMem); err != nil {
		return nil, &ftrma.OpError{Op: "rebuild", Rank: -1, Err: err}
	}

	// First exchange: who keeps what, the new control words.
	mine := make([]byte, rebuildHead, rebuildHead+4)
	binary.BigEndian.PutUint32(mine[14:], uint32(r.ctlKey))
	binary.BigEndian.PutUint64(mine[18:], windowIDs.Load())
	switch {
	case local != nil:
		mine[0] = rebuildInvalid
		mine = append(mine, why...)
	case r.old != nil:
		o := r.old
		// Complete this rank's operations on old: none is on its way when
		// the others pass the exchange (errors dropped: see Rebuild).
		for _, p := range o.peers {
			if !o.c.ProcFailed(p.cr) {
				r.t.Flush(ctx, p.tr)
			}
		}
		self := o.peers[o.rank]
		mine[0] = rebuildKept
		mine[1] = byte(o.kind)
		binary.BigEndian.PutUint32(mine[2:], uint32(self.key))
		binary.BigEndian.PutUint64(mine[6:], self.size)
		binary.BigEndian.PutUint64(mine[26:], o.identity())
		for q, p := range o.peers {
			if p.tr != r.nc.TransportRank(ftrma.Rank(q)) {
				mine = binary.BigEndian.AppendUint32(mine, uint32(q))
				mine = binary.BigEndian.AppendUint64(mine, p.size)
			}
		}
	default:
		mine[0] = rebuildNew
	}
	all, err := r.nc.Allgather(ctx, mine)
	if err != nil {
		return nil, wrap("rebuild", -1, err)
	}
	if local != nil {
		return nil, &ftrma.OpError{Op: "rebuild", Rank: r.me, Err: fmt.Errorf("%w: %s", local, why)}
	}
	plan, err := r.plan(all)
	if err != nil {
		return nil, err
	}

	w := &Window{c: r.nc, t: r.t, rank: r.me, kind: plan.kind, ctl: ctl, notices: noticeCounter(r.nc),
		owned: [][]byte{ctlMem}, ordered: r.t.Caps().Has(transport.CapOrdered),
		attached: make(map[transport.Key]struct{})}
	peers := make([]peerInfo, r.n)
	for q := range peers {
		peers[q] = peerInfo{tr: r.nc.TransportRank(ftrma.Rank(q)), cr: ftrma.Rank(q),
			key: plan.key[q], size: plan.size[q], ctl: plan.ctl[q]}
	}

	// Second exchange: new ranks publish their memory, once init ran.
	if plan.kind != dynamic && plan.fresh > 0 {
		var mine []byte
		if r.old == nil {
			size := int(plan.size[r.me])
			if r.mem, err = allocMem(r.t, size); err != nil {
				err = &ftrma.OpError{Op: "rebuild", Rank: -1, Err: err}
			} else {
				clear(r.mem)
				if init != nil {
					init(r.mem)
				}
				r.memKey, err = r.t.Register(r.mem)
				if err != nil {
					err = &ftrma.OpError{Op: "rebuild", Rank: -1, Err: err}
				}
			}
			if err == nil {
				mine = binary.BigEndian.AppendUint32(nil, uint32(r.memKey))
			}
		}
		// A rank that failed to set up its memory still takes part, so
		// that nobody waits for it; the agreement after fails everyone.
		all, aerr := r.nc.Allgather(ctx, mine)
		if err != nil {
			return nil, err
		}
		if aerr != nil {
			return nil, wrap("rebuild", -1, aerr)
		}
		for q, b := range all {
			if plan.isNew[q] {
				if len(b) != 4 {
					return nil, &ftrma.OpError{Op: "rebuild", Rank: ftrma.Rank(q), Err: fmt.Errorf("%w: it published no window memory", ftrma.ErrInvalid)}
				}
				peers[q].key = transport.Key(binary.BigEndian.Uint32(b))
			}
		}
	}
	w.setPeers(peers)
	adoptWindowID(plan.id)
	w.windowID = plan.id
	w.revokeID = r.nc.WindowRevokeNotice(plan.id, 0)
	return w, nil
}

// rebuildPlan is what the first exchange settles, the same at every rank.
type rebuildPlan struct {
	kind  kind
	id    uint64 // the new window's id
	fresh int    // how many ranks are new
	isNew []bool
	key   []transport.Key // survivors' memory (new ranks': from the second exchange)
	size  []uint64
	ctl   []transport.Key
}

// plan reads the first exchange. Every rank that completed it reads the
// same contributions, so every one reaches the same verdict.
func (r *rebuild) plan(all [][]byte) (rebuildPlan, error) {
	bad := func(q int, format string, a ...any) (rebuildPlan, error) {
		return rebuildPlan{}, &ftrma.OpError{Op: "rebuild", Rank: ftrma.Rank(q), Err: fmt.Errorf("%w: "+format, append([]any{ftrma.ErrInvalid}, a...)...)}
	}
	p := rebuildPlan{isNew: make([]bool, r.n), key: make([]transport.Key, r.n),
		size: make([]uint64, r.n), ctl: make([]transport.Key, r.n)}
	lowest := -1
	var ident uint64
	for q, b := range all {
		if len(b) < rebuildHead {
			return bad(q, "it sent a bad window description")
		}
		switch b[0] {
		case rebuildInvalid:
			return bad(q, "%s", b[rebuildHead:])
		case rebuildNew:
			p.isNew[q] = true
			p.fresh++
		case rebuildKept:
			if (len(b)-rebuildHead)%rebuildEntry != 0 {
				return bad(q, "it sent a bad window description")
			}
			k, id := kind(b[1]), binary.BigEndian.Uint64(b[26:])
			if lowest < 0 {
				lowest, p.kind, ident = q, k, id
			} else if k != p.kind || id != ident {
				return bad(q, "it passed another old window than rank %d", lowest)
			}
			p.key[q] = transport.Key(binary.BigEndian.Uint32(b[2:]))
			p.size[q] = binary.BigEndian.Uint64(b[6:])
		default:
			return bad(q, "it sent a bad window description")
		}
		p.ctl[q] = transport.Key(binary.BigEndian.Uint32(b[14:]))
		p.id = max(p.id, binary.BigEndian.Uint64(b[18:]))
	}
	if lowest < 0 {
		return bad(-1, "no rank passed its old window")
	}
	// New ranks get the sizes their numbers had in old, as the lowest
	// survivor lists them: the ranks whose process changed.
	listed := make(map[int]uint64)
	for e := all[lowest][rebuildHead:]; len(e) >= rebuildEntry; e = e[rebuildEntry:] {
		listed[int(binary.BigEndian.Uint32(e))] = binary.BigEndian.Uint64(e[4:])
	}
	for q, isNew := range p.isNew {
		if !isNew {
			continue
		}
		size, ok := listed[q]
		if !ok {
			return bad(q, "it passed no old window, but its process held that number in the old window")
		}
		p.size[q] = size
	}
	return p, nil
}

// undo releases what a failed Rebuild made; old is untouched.
func (r *rebuild) undo() {
	if r.memKey != 0 {
		r.t.Deregister(r.memKey)
	}
	if r.mem != nil {
		releaseMem(r.t, r.mem)
	}
	if r.ctlKey != 0 {
		r.t.Deregister(r.ctlKey)
	}
	if r.ctlMem != nil {
		releaseMem(r.t, r.ctlMem)
	}
}

// commit hands old's memory to w (or gives w the new rank's memory) and makes
// old unusable.
func (r *rebuild) commit(w *Window) {
	if r.mem != nil {
		w.mem = r.mem
		w.owned = append(w.owned, r.mem)
		return
	}
	o := r.old
	if o == nil {
		return // a new rank of a dynamic window
	}
	w.mem, w.user = o.mem, o.user
	w.owned = append(w.owned, o.owned[1:]...) // owned[0] is old's control block
	o.mu.Lock()
	w.attached, o.attached = o.attached, make(map[transport.Key]struct{})
	o.mu.Unlock()
	o.rebuilt.Store(true)
	o.freed.Store(true)
	o.mem, o.user, o.owned = nil, nil, o.owned[:1:1]
	for i := range o.locks {
		o.locks[i].Store(0) // dropped: see Rebuild
	}
}

// freeRebuilt is Free of a window that Rebuild replaced: it releases the
// control words, the only thing the window still owns, once.
func (w *Window) freeRebuilt() error {
	if w.ctlReleased.Swap(true) {
		return &ftrma.OpError{Op: "free", Rank: -1, Err: ErrRebuilt}
	}
	w.deregister(w.peers[w.rank].ctl)
	w.unmapShared()
	for _, b := range w.owned {
		releaseMem(w.t, b)
	}
	w.owned = nil
	return nil
}

// identity names the window the same way at every rank: its revocation
// notice is made of the communicator's id and the window's id.
func (w *Window) identity() uint64 {
	h := fnv.New64a()
	h.Write([]byte(w.revokeID))
	return h.Sum64()
}
