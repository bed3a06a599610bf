package memnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// ErrLost is reported, wrapped together with ftrma.ErrProcFailed, for an
// operation that was dropped on a cut link, or whose reply was. The loss is
// noticed, and the error reported, when a later operation toward the same peer
// completes (after Heal); until then Wait and Flush covering it block until
// their context ends. The operation may or may not have taken effect.
var ErrLost = errors.New("memnet: operation lost on a cut link")

// Causes given to transport.ErrPeerDown.
var (
	errCrashed = errors.New("memnet: peer crashed")
	errFenced  = errors.New("memnet: peer fenced")
	errReset   = errors.New("memnet: connection closed by peer")
	// errSelfCrashed is why a crashed rank's own calls fail.
	errSelfCrashed = fmt.Errorf("memnet: rank crashed: %w", ftrma.ErrClosed)
)

// lostError is the error of an operation toward peer lost on a cut link.
func lostError(peer ftrma.Rank) error {
	return &ftrma.OpError{Op: "transport", Rank: peer, Err: fmt.Errorf("%w: %w", ftrma.ErrProcFailed, ErrLost)}
}

// Network is a set of ranks in one process, connected by in-memory links, with
// hooks that inject faults. Create it with New; all its methods are safe for
// concurrent use, also while traffic flows.
//
// Every endpoint has one goroutine, so a Network of n ranks runs n goroutines
// until Close.
type Network struct {
	ends []*Transport          // ends[r] is rank r's endpoint; fixed after New
	drop atomic.Uint32         // capabilities the endpoints do not report (DropCaps)
	seed atomic.Pointer[int64] // seed of the links' drop RNGs; replaced, never changed, by SetSeed
}

// New creates a network of n ranks, n >= 1, and starts one goroutine per rank.
// The drop RNG seed is 1. Call Close when done.
func New(n int) *Network {
	if n < 1 {
		panic(fmt.Sprintf("memnet: New(%d): need at least one rank", n))
	}
	return newNetwork(n, 0)
}

// newNetwork makes n+spares endpoints, the spares absent, and starts them.
func newNetwork(n, spares int) *Network {
	size := n + spares
	net := &Network{ends: make([]*Transport, size)}
	net.SetSeed(1)
	for r := range net.ends {
		t := &Transport{
			net:   net,
			rank:  ftrma.Rank(r),
			links: make([]atomic.Pointer[link], size),
			down:  make([]error, size),
			quit:  make(chan struct{}),
			done:  make(chan struct{}),
		}
		if spares > 0 {
			t.absent = make([]atomic.Bool, size)
			t.early = make([][]msg, size)
			t.unadmitted = make([]bool, size)
			for s := n; s < size; s++ {
				if s != r {
					t.absent[s].Store(true)
					t.unadmitted[s] = true
				}
			}
		}
		t.in.init()
		net.ends[r] = t
	}
	for _, t := range net.ends {
		go t.run()
	}
	return net
}

// NewSpares creates a network of n started ranks and spares spare ranks,
// n >= 1, spares >= 0, as a job started with spares (ftrun --respawn):
// ranks n to n+spares-1 are absent at every endpoint (see
// transport.Admitter) until that endpoint admits them with Admit. A spare's
// own endpoint sees ranks 0 to n-1 as started, as a spare started while
// they are live does (a rank that crashed before is down for it, as for
// every endpoint), and the other spares as absent: it admits those that
// started before it. What a spare sends to an endpoint that has not
// admitted it is held there, in order, until Admit.
func NewSpares(n, spares int) *Network {
	if n < 1 || spares < 0 {
		panic(fmt.Sprintf("memnet: NewSpares(%d, %d): need at least one rank and no negative spares", n, spares))
	}
	return newNetwork(n, spares)
}

// Size returns the number of ranks.
func (n *Network) Size() int { return len(n.ends) }

// Endpoint returns rank r's transport; every call returns the same one. It
// panics if r is out of range.
func (n *Network) Endpoint(r ftrma.Rank) *Transport { return n.end(r) }

func (n *Network) end(r ftrma.Rank) *Transport {
	if r < 0 || int(r) >= len(n.ends) {
		panic(fmt.Sprintf("memnet: rank %d out of range [0, %d)", r, len(n.ends)))
	}
	return n.ends[r]
}

// Close closes every endpoint, without telling the ranks about each other, and
// waits for all the network's goroutines to return. It is idempotent. It must
// not be called from a Receiver method.
func (n *Network) Close() {
	for _, t := range n.ends {
		t.shutdown(ftrma.ErrClosed, false)
	}
	for _, t := range n.ends {
		<-t.done
	}
}

// Crash kills rank r the way SIGKILL kills a process: when Crash returns,
//   - r executes and delivers nothing more, and r's Transport fails every
//     later call, and its pending Waits, with an error wrapping
//     ftrma.ErrClosed (Close returns nil and waits for r's goroutine);
//   - operations and messages r posted that are still in flight are dropped;
//     none is executed or delivered after Crash returns;
//   - on every other live rank, pending and later operations toward r fail
//     with an error from transport.ErrPeerDown (wrapping ftrma.ErrProcFailed),
//     and Receiver.HandlePeerDown(r, err) is queued, to be called once by that
//     rank's goroutine, as when the kernel resets the connections of a killed
//     process. This happens even across cut links.
//
// A Receiver call already under way at r when Crash is called may still be
// running. Crashing a rank that is already closed or crashed does nothing.
// Crash does not wait for r's goroutine; Close does.
func (n *Network) Crash(r ftrma.Rank) {
	t := n.end(r)
	if !t.shutdown(errSelfCrashed, false) {
		return
	}
	err := transport.ErrPeerDown(r, errCrashed)
	for _, o := range n.ends {
		if o != t {
			o.peerLost(r, err)
		}
	}
}

// Cut makes both directions of the link between a and b silently stop
// delivering: messages in flight and sent later are dropped, operations and
// replies included, and nobody is told (no peer-down event). Operations across
// the link therefore hang until the caller's context ends; finding that out is
// the failure detector's job. Cut(a, a) cuts a's loopback.
//
// Operations lost this way fail with ErrLost when a later operation toward the
// same peer completes after Heal.
func (n *Network) Cut(a, b ftrma.Rank) {
	n.end(a).link(b).setCut(true)
	n.end(b).link(a).setCut(true)
}

// Heal restores delivery on both directions of the link between a and b for
// messages sent from now on; messages lost while it was cut stay lost.
func (n *Network) Heal(a, b ftrma.Rank) {
	n.end(a).link(b).setCut(false)
	n.end(b).link(a).setCut(false)
}

// Isolate cuts every link between r and the other ranks (a network
// partition of one rank). Undo it with Heal(r, x) for every other x.
func (n *Network) Isolate(r ftrma.Rank) {
	n.end(r)
	for x := range n.ends {
		if ftrma.Rank(x) != r {
			n.Cut(r, ftrma.Rank(x))
		}
	}
}

// Drop makes the link from->to drop each control message (Send) with
// probability p, 0 <= p <= 1, from now on; p = 0 turns dropping off. Only
// control messages are dropped: one-sided operations, their replies and
// connection events model a reliable connection and are never dropped by Drop
// (use Cut to lose them). The decisions come from a per-link random stream
// seeded by the Network's seed and the link, so they depend only on the seed
// and the sequence of Sends on that link. Drop panics if p is out of range.
func (n *Network) Drop(from, to ftrma.Rank, p float64) {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("memnet: Drop probability %v not in [0, 1]", p))
	}
	l := n.end(from).link(to)
	l.mu.Lock()
	l.dropP = p
	l.mu.Unlock()
}

// Delay makes every message sent on the link from->to from now on, of any
// kind, wait at least d before delivery; d = 0 removes the delay. FIFO order
// on the link is kept: a message is never delivered before one sent earlier on
// the same link, even when the delay shrinks. Other links are not held up.
// Time is read with the time package, so under testing/synctest delays pass
// in fake time. Delay panics if d < 0.
func (n *Network) Delay(from, to ftrma.Rank, d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("memnet: negative delay %v", d))
	}
	l := n.end(from).link(to)
	l.mu.Lock()
	l.delay = d
	l.mu.Unlock()
}

// SetSeed replaces the seed of the drop decisions and restarts every link's
// random stream from it. New uses seed 1.
func (n *Network) SetSeed(seed int64) { n.seed.Store(&seed) }

// link is one direction between two ranks, owned by the sending endpoint. It
// orders everything sent on it and holds the sender's completion tracking for
// operations toward the receiver.
type link struct {
	net      *Network
	from, to ftrma.Rank
	dst      *inbox // the receiver's inbox

	// comp tracks the operations from posted toward to. Sequence numbers are
	// handed out under mu, so their order is the order of the link; replies
	// complete them in order on from's goroutine.
	comp transport.Completion

	// cut is gen<<1, plus 1 while the link is cut. gen counts the cuts, so a
	// receiver drops a message sent under an older generation. Written under
	// mu, read by the receiver without it.
	cut atomic.Uint64

	mu      sync.Mutex    // orders sending on the link; guards the fields below
	delay   time.Duration // added to each message's send time
	lastAt  time.Time     // delivery time of the last delayed message; zero while none was ever delayed
	dropP   float64       // probability of dropping a control message
	rng     *rand.Rand    // drop decisions; made from rngSeed
	rngSeed *int64        // the Network seed rng was made from
}

// sendLocked stamps m and queues it at the receiver, or drops it if the link
// is cut. The caller holds l.mu.
func (l *link) sendLocked(m msg) {
	st := l.cut.Load()
	if st&1 != 0 {
		return
	}
	m.gen = st >> 1
	m.from = l.from
	if l.delay > 0 || !l.lastAt.IsZero() {
		at := time.Now().Add(l.delay)
		if at.Before(l.lastAt) {
			at = l.lastAt
		}
		l.lastAt = at
		m.at = at
	}
	l.dst.push(m)
}

// send is sendLocked with the lock taken.
func (l *link) send(m msg) {
	l.mu.Lock()
	l.sendLocked(m)
	l.mu.Unlock()
}

// dropLocked decides whether to drop the next control message. The caller
// holds l.mu.
func (l *link) dropLocked() bool {
	if l.dropP <= 0 {
		return false
	}
	if seed := l.net.seed.Load(); l.rng == nil || l.rngSeed != seed {
		l.rng = rand.New(rand.NewPCG(uint64(*seed), uint64(l.from)<<32|uint64(l.to)))
		l.rngSeed = seed
	}
	return l.rng.Float64() < l.dropP
}

// setCut cuts or heals the link.
func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.cut.Load()
	gen := st >> 1
	if cut {
		if st&1 == 0 {
			gen++
		}
		l.cut.Store(gen<<1 | 1)
		return
	}
	l.cut.Store(gen << 1)
}

// DropCaps makes every endpoint stop reporting the capabilities c, so that
// the layers above take the paths they take on a weaker transport (one
// without CapWholeWords or CapLocalAtomics, like an RDMA device). The
// operations themselves are unchanged. Call it before the endpoints are used.
func (net *Network) DropCaps(c transport.Caps) { net.drop.Store(uint32(c)) }
