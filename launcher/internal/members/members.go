package members

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ftrma/ftrma"
)

// KeySize is the length of Config.Key: gossip is sealed with AES-256-GCM.
const KeySize = 32

// MaxMetaSize is the largest Config.Meta: memberlist's MetaMaxSize less the
// byte the package prefixes (see nodeMeta).
const MaxMetaSize = memberlist.MetaMaxSize - 1

// Timing holds the SWIM/Lifeguard knobs the package sets. A zero field takes
// its value from DefaultTiming; the doc comment of DefaultTiming gives the
// detection bound they produce.
type Timing struct {
	// ProbeInterval is the period of a member's failure probes: each tick it
	// pings one other member (round robin over a shuffled list). A probe
	// that gets no ack lasts the whole interval, since indirect and TCP
	// acks are awaited until its end. Default 200 ms.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct UDP ping waits for its ack before
	// the member asks 3 others to ping the target and tries TCP. Must be
	// below ProbeInterval. Default 100 ms.
	ProbeTimeout time.Duration
	// SuspicionMult sets the nominal suspicion timeout
	//   S(n) = SuspicionMult · max(1, log10 n) · ProbeInterval
	// for a group of n members. A suspect that does not refute within its
	// timeout is declared dead. Lifeguard: the timer starts at
	// SuspicionMaxTimeoutMult·S(n) and shrinks to S(n) as k =
	// SuspicionMult-2 other members independently suspect the same member
	// (k = 0, timer S(n) from the start, when n-2 < k). At least 1;
	// default 3.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion timer when the
	// confirmations do not come (see SuspicionMult). At least 1; default 3.
	SuspicionMaxTimeoutMult int
	// GossipInterval is the period at which a member sends queued
	// notices (suspect, dead, alive) to GossipNodes random members,
	// besides piggybacking them on probes. Default 100 ms.
	GossipInterval time.Duration
	// GossipNodes is the fan-out of each gossip round. Default 3.
	GossipNodes int
	// RetransmitMult sets how often a member passes on each notice it
	// learns: RetransmitMult · ⌈log10(n+1)⌉ times, to random members. At
	// least 1; default 6.
	RetransmitMult int
	// PushPullInterval is the period of a full-state TCP exchange with one
	// random member (anti-entropy): it repairs whatever gossip missed.
	// Default 5 s.
	PushPullInterval time.Duration
	// StreamTimeout bounds one TCP exchange (join, push-pull, TCP fallback
	// ping): the dial and, separately, the exchange. Default 2 s.
	StreamTimeout time.Duration
}

// DefaultTiming returns the LAN timing. A host that vanishes from an idle
// LAN is declared dead by every survivor after about
//
//	D(n) = W + PI + S(n) + G(n)
//	     ≈ PI + PI + SuspicionMult·max(1, log10 n)·PI + ⌈log_GossipNodes n⌉·GossipInterval
//
// (PI is ProbeInterval, n counts the members including the failed one):
//   - W is the wait until some survivor's round-robin probe picks the host.
//     The lone survivor of a pair probes it every tick (W ≤ PI); with more
//     survivors, each picks it at a random slot of its round, so W is
//     roughly exponential with mean ≤ PI (P(W > m·PI) ≈ e^-m).
//   - PI again for the failed probe itself: the prober waits for indirect
//     and TCP acks until the end of its tick.
//   - S(n) is the suspicion timeout. From 3 members on, Lifeguard reaches
//     it only once a second survivor has also failed to reach the host,
//     which healthy survivors do within S(n); otherwise it is up to
//     SuspicionMaxTimeoutMult·S(n).
//   - G(n) spreads the first "dead" notice to the other survivors (in
//     practice every survivor's own timer expires at about the same time).
//
// With the defaults (PI 200 ms, SuspicionMult 3, GossipInterval 100 ms,
// fan-out 3) D(n) is 1.1 s for 2 or 3 members, 1.2 s for 4..9, 1.3 s for
// 10 and 1.7 s for 32 (Timing.Detection computes it). Measured on
// loopback, 2 cores, 40 crashes per size, from Shutdown to the last
// survivor's OnDead: 3 members p50 0.9 s, max 1.35 s; 8 members p50 1.0 s,
// max 1.5 s; 32 members p50 1.35 s, max 1.9 s. Without the confirmation
// the bound is W + PI + SuspicionMaxTimeoutMult·S(n) + G(n), 2.5 s for 10
// members.
//
// The price is the tolerance for a member that is alive but stalled (a
// frozen or starved process): it survives a stall shorter than about
// PI + S(n) minus a gossip round (0.7 s for up to 10 members, 1 s for 32),
// because it refutes the suspicion once it runs again; a longer stall gets
// it declared dead. Scheduling delays of a loaded host are far below that:
// on 2 cores with 8 other processes spinning, 8 members saw no false death
// in 15 s, nor did a member whose own process also ran 8 spinning
// goroutines. (What does produce false deaths is many members in one
// process that starves them itself: 8 members beside 4 spinning
// goroutines, under the same external load, declared each other dead 20-30
// times in 15 s with SuspicionMult 3 or 4, never with 6.) A prober that is
// itself starved does not kill a healthy host alone (its suspicion needs a
// confirmation) and probes less often (Lifeguard's self-awareness stretches
// its ProbeInterval up to 8×). Where stalls of a second are expected, raise
// SuspicionMult: 6 doubles the tolerance for about 0.6 s more detection
// time.
func DefaultTiming() Timing {
	return Timing{
		// memberlist's LAN preset probes every 1 s and suspects for
		// 4·PI: 5-6 s to detect. A job wants about one second, and
		// probing a few dozen hosts 5 times a second costs little
		// (4 idle members use 1.3% of one core).
		ProbeInterval: 200 * time.Millisecond,
		// LAN round trips are well under 1 ms; 100 ms leaves room for a
		// loaded host's scheduler, and a miss still has indirect and
		// TCP pings until the end of the tick.
		ProbeTimeout: 100 * time.Millisecond,
		// memberlist's LAN value is 4 (k = 2 confirmations). 3 keeps
		// one confirmation, so one starved prober still cannot kill a
		// host, and brings 32 members within 2 s (with 4: p50 1.7 s,
		// max 2.0-2.5 s over 20 crashes).
		SuspicionMult: 3,
		// memberlist uses 6 (for 10 000 nodes); 3 bounds the time a
		// host can linger when the confirmation is slow.
		SuspicionMaxTimeoutMult: 3,
		// Half memberlist's LAN value: the dead notice reaches 32
		// members in about 4 rounds.
		GossipInterval: 100 * time.Millisecond,
		GossipNodes:    3,
		// memberlist's 4 left a new member unknown to one of 8 others
		// in 4 of 100 trials here, until a push-pull (a member cannot
		// report the death of a member it does not know); 6 left none
		// in 100 groups of 8 and 20 of 32.
		RetransmitMult: 6,
		// memberlist's LAN value is 30 s; 5 s bounds how long a missed
		// notice stays missed, for one small TCP exchange per member
		// every 5 s.
		PushPullInterval: 5 * time.Second,
		// memberlist's 10 s TCPTimeout is for WANs.
		StreamTimeout: 2 * time.Second,
	}
}

// withDefaults returns t with every zero field taken from DefaultTiming.
func (t Timing) withDefaults() Timing {
	d := DefaultTiming()
	if t.ProbeInterval == 0 {
		t.ProbeInterval = d.ProbeInterval
	}
	if t.ProbeTimeout == 0 {
		t.ProbeTimeout = d.ProbeTimeout
	}
	if t.SuspicionMult == 0 {
		t.SuspicionMult = d.SuspicionMult
	}
	if t.SuspicionMaxTimeoutMult == 0 {
		t.SuspicionMaxTimeoutMult = d.SuspicionMaxTimeoutMult
	}
	if t.GossipInterval == 0 {
		t.GossipInterval = d.GossipInterval
	}
	if t.GossipNodes == 0 {
		t.GossipNodes = d.GossipNodes
	}
	if t.RetransmitMult == 0 {
		t.RetransmitMult = d.RetransmitMult
	}
	if t.PushPullInterval == 0 {
		t.PushPullInterval = d.PushPullInterval
	}
	if t.StreamTimeout == 0 {
		t.StreamTimeout = d.StreamTimeout
	}
	return t
}

// validate reports the first field of t (after withDefaults) that is out of
// range or contradicts another.
func (t Timing) validate() error {
	switch {
	case t.ProbeInterval < 0, t.ProbeTimeout < 0, t.GossipInterval < 0,
		t.PushPullInterval < 0, t.StreamTimeout < 0:
		return fmt.Errorf("members: negative duration in Timing %+v: %w", t, ftrma.ErrInvalid)
	case t.SuspicionMult < 1, t.SuspicionMaxTimeoutMult < 1, t.GossipNodes < 1, t.RetransmitMult < 1:
		return fmt.Errorf("members: Timing multipliers and GossipNodes must be at least 1 (got %+v): %w", t, ftrma.ErrInvalid)
	case t.ProbeTimeout >= t.ProbeInterval:
		return fmt.Errorf("members: ProbeTimeout %v must be below ProbeInterval %v: %w",
			t.ProbeTimeout, t.ProbeInterval, ftrma.ErrInvalid)
	}
	return nil
}

// Detection returns D(n) of DefaultTiming's formula for these settings
// (zero fields taking their defaults): the nominal time, on an idle LAN,
// from a host's disappearance to the moment every survivor of a group of n
// members (counting that host) has declared it dead, with the first-probe
// wait W taken as one ProbeInterval. It is an estimate to print and to size
// time-outs with, not a guarantee.
func (t Timing) Detection(n int) time.Duration {
	t = t.withDefaults()
	n = max(n, 2)
	scale := max(1, math.Log10(float64(n)))
	s := time.Duration(float64(t.SuspicionMult) * scale * float64(t.ProbeInterval))
	// ⌈log_fanout n⌉, in integers to be exact at powers.
	rounds, reach := 0, 1
	for reach < n {
		reach *= max(t.GossipNodes, 2)
		rounds++
	}
	return 2*t.ProbeInterval + s + time.Duration(rounds)*t.GossipInterval
}

// Config describes one member. Name and Key are required, BindAddr too; the
// rest has defaults.
type Config struct {
	// Name identifies the member; it must be unique in the group, e.g.
	// "ftrun" or "host h2". Required.
	Name string
	// BindAddr is the IP address to bind, for UDP and TCP, and the one
	// others reach this member at, e.g. "198.18.60.11" or "127.0.0.1".
	// Required: a literal, specified IP (no host names, no 0.0.0.0), so
	// that the address others learn is the one chosen here.
	BindAddr string
	// BindPort is the UDP and TCP port; 0 picks a free one (see
	// Group.Addr).
	BindPort int
	// Key seals all gossip (AES-256-GCM); members without it can neither
	// read nor join the group. Required, exactly KeySize bytes; DeriveKey
	// makes one from a job secret. Start copies it.
	Key []byte
	// Meta is small node metadata others receive with OnJoin (e.g. the
	// host's ranks), at most MaxMetaSize bytes; optional. Start copies it.
	Meta []byte
	// Timing tunes failure detection; zero fields take DefaultTiming's.
	Timing Timing

	// OnJoin, OnLeave and OnDead report other members (never this one),
	// each with the member's Meta. OnLeave reports a graceful Leave,
	// OnDead a failure: memberlist declared the member dead. Each is
	// optional. All three are called from one goroutine of the Group, in
	// the order memberlist reported the events, never concurrently; they
	// may call the Group's methods except Leave and Shutdown (which wait
	// for that goroutine). A slow callback delays later ones, not the
	// failure detector. The meta slice is the callback's own.
	//
	// A member declared dead that was alive after all (a stalled process
	// that runs again) refutes and is reported by OnJoin again; a job that
	// fails the member's ranks on OnDead must treat OnDead as final and
	// fence the member.
	OnJoin, OnLeave, OnDead func(name string, meta []byte)

	// Logger receives memberlist's log lines, one record per line without
	// memberlist's level tag, at the matching slog level: DEBUG (per-probe
	// and per-connection noise) as debug, INFO as info, WARN as warn, ERR
	// as error, except that INFO lines about a suspected or failed member
	// come as warnings. Nil means ftrma.Logger(). Calls are serialized
	// but may come from any goroutine.
	Logger *slog.Logger
}

// withDefaults checks c and returns a copy with defaults applied and the
// byte slices copied.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		return c, fmt.Errorf("members: empty Name: %w", ftrma.ErrInvalid)
	}
	if c.Logger == nil {
		c.Logger = ftrma.Logger()
	}
	if len(c.Key) != KeySize {
		return c, fmt.Errorf("members: Key has %d bytes, want %d (see DeriveKey): %w", len(c.Key), KeySize, ftrma.ErrInvalid)
	}
	ip := net.ParseIP(c.BindAddr)
	if ip == nil || ip.IsUnspecified() {
		return c, fmt.Errorf("members: BindAddr %q is not a specified IP address: %w", c.BindAddr, ftrma.ErrInvalid)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return c, fmt.Errorf("members: BindPort %d out of range: %w", c.BindPort, ftrma.ErrInvalid)
	}
	if len(c.Meta) > MaxMetaSize {
		return c, fmt.Errorf("members: Meta has %d bytes, at most %d allowed: %w", len(c.Meta), MaxMetaSize, ftrma.ErrInvalid)
	}
	c.Timing = c.Timing.withDefaults()
	if err := c.Timing.validate(); err != nil {
		return c, err
	}
	c.Key = slices.Clone(c.Key)
	c.Meta = slices.Clone(c.Meta)
	return c, nil
}

// DeriveKey derives a Key from a job secret with HKDF-SHA256, using label
// (e.g. "ftrma members v1") as the context, so that the gossip key differs
// from other keys drawn from the same secret. The secret must already be
// high-entropy (a random job token): HKDF does not stretch passwords.
func DeriveKey(secret []byte, label string) []byte {
	k, err := hkdf.Key(sha256.New, secret, nil, label, KeySize)
	if err != nil {
		// Only an over-long output fails, and KeySize is fixed.
		panic("members: hkdf: " + err.Error())
	}
	return k
}

// Group is this process's membership in one job's group. Its methods may be
// called from any goroutine.
type Group struct {
	ml   *memberlist.Memberlist
	name string
	cfg  Config // validated; read-only after Start
	meta *nodeMeta

	// evMu guards the fields below. The event delegate appends under it
	// (memberlist calls the delegate with its node lock held, so it must
	// not block); the dispatch goroutine takes the queue.
	evMu    sync.Mutex
	evQueue []event
	evDone  bool          // set at shutdown: drop further events
	evWake  chan struct{} // buffer 1: the queue became non-empty
	evStop  chan struct{} // closed at shutdown
	evExit  chan struct{} // closed when the dispatch goroutine returns

	// logMu guards logOff. The log writer holds it for reading while it
	// calls the Logger, so once shutdown has set logOff no call is in progress
	// and none follows.
	logMu  sync.RWMutex
	logOff bool

	// stopMu guards stopped and serializes Leave and Shutdown.
	stopMu  sync.Mutex
	stopped bool
}

type eventKind int

const (
	evJoin eventKind = iota
	evLeave
	evDead
)

type event struct {
	kind eventKind
	name string
	meta []byte
}

// Start creates the member and starts its failure detector. It binds
// BindAddr:BindPort but contacts no one: call Join next (or let others
// join this member). Errors wrap ftrma.ErrInvalid for a bad Config.
func Start(cfg Config) (*Group, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{
		name:   cfg.Name,
		cfg:    cfg,
		evWake: make(chan struct{}, 1),
		evStop: make(chan struct{}),
		evExit: make(chan struct{}),
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	mc.SecretKey = cfg.Key
	// Both true in the preset already; they are what makes the key an
	// admission check, so say so here.
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	t := cfg.Timing
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.SuspicionMult = t.SuspicionMult
	mc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	mc.GossipInterval = t.GossipInterval
	mc.GossipNodes = t.GossipNodes
	mc.RetransmitMult = t.RetransmitMult
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.StreamTimeout
	g.meta = &nodeMeta{user: cfg.Meta}
	mc.Delegate = g.meta
	mc.Events = eventDelegate{g}
	mc.Logger = log.New(logWriter{g}, "", 0)

	go g.dispatch()
	ml, err := memberlist.Create(mc)
	if err != nil {
		g.stopEvents()
		return nil, fmt.Errorf("members: start %q on %s:%d: %w", cfg.Name, cfg.BindAddr, cfg.BindPort, err)
	}
	g.ml = ml
	return g, nil
}

// Addr returns the "ip:port" other members join at.
func (g *Group) Addr() string {
	return g.ml.LocalNode().Address()
}

// Name returns the member's name.
func (g *Group) Name() string { return g.name }

// JoinError reports the addresses Join could not reach. The member is in
// the group all the same if Joined > 0: gossip spreads it from any member
// it reached.
type JoinError struct {
	Joined int      // how many addresses were reached
	Addrs  []string // the unreachable addresses, in the order given to Join
	Errs   []error  // Errs[i] says why Addrs[i] failed
}

func (e *JoinError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "members: join: %d of %d addresses unreachable:", len(e.Addrs), len(e.Addrs)+e.Joined)
	for i, a := range e.Addrs {
		fmt.Fprintf(&b, " %s (%v)", a, e.Errs[i])
		if i < len(e.Addrs)-1 {
			b.WriteByte(';')
		}
	}
	return b.String()
}

// Unwrap returns the per-address causes.
func (e *JoinError) Unwrap() []error { return e.Errs }

// errJoinTimeout is the cause recorded for an address still unanswered when
// Join's timeout ran out.
var errJoinTimeout = errors.New("no answer within the join timeout")

// Join contacts each of addrs ("ip:port" of existing members) at once, does
// a full state exchange with each it reaches, and returns within timeout
// (which must be positive). It returns nil when every address answered,
// otherwise a *JoinError naming the others and why: refused, timed out, or
// closed by the peer, which is what a member holding a different Key does.
// An exchange still running at the timeout goes on in the background for at
// most 2·Timing.StreamTimeout and may still join.
//
// Errors wrap ftrma.ErrInvalid for no addresses or a non-positive timeout,
// and ftrma.ErrClosed after Leave or Shutdown.
func (g *Group) Join(addrs []string, timeout time.Duration) error {
	if len(addrs) == 0 || timeout <= 0 {
		return fmt.Errorf("members: join %q within %v: %w", addrs, timeout, ftrma.ErrInvalid)
	}
	if g.isStopped() {
		return fmt.Errorf("members: join: %w", ftrma.ErrClosed)
	}
	type result struct {
		i   int
		err error
	}
	// Buffered for all, so that the exchanges that outlive the timeout
	// can still deliver and exit.
	results := make(chan result, len(addrs))
	for i, a := range addrs {
		go func() {
			_, err := g.ml.Join([]string{a})
			results <- result{i, firstError(err)}
		}()
	}
	errs := make([]error, len(addrs))
	answered := make([]bool, len(addrs))
	timer := time.NewTimer(timeout)
	defer timer.Stop()
wait:
	for range addrs {
		select {
		case r := <-results:
			errs[r.i], answered[r.i] = r.err, true
		case <-timer.C:
			break wait
		}
	}
	je := &JoinError{}
	for i, a := range addrs {
		switch {
		case !answered[i]:
			je.Addrs = append(je.Addrs, a)
			je.Errs = append(je.Errs, fmt.Errorf("%w (%v)", errJoinTimeout, timeout))
		case errs[i] != nil:
			je.Addrs = append(je.Addrs, a)
			je.Errs = append(je.Errs, errs[i])
		default:
			je.Joined++
		}
	}
	if len(je.Addrs) == 0 {
		return nil
	}
	return je
}

// firstError unwraps memberlist's multierror for a one-address Join to the
// error of that address.
func firstError(err error) error {
	if me, ok := err.(interface{ WrappedErrors() []error }); ok {
		if es := me.WrappedErrors(); len(es) == 1 {
			return es[0]
		}
	}
	return err
}

// Members returns the names of the members this one believes alive
// (memberlist's alive and suspect states), itself included, sorted.
func (g *Group) Members() []string {
	var names []string
	for _, n := range g.ml.Members() {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}

// Leave announces a graceful departure, waits up to timeout (which must be
// positive) for the announcement to go out, and shuts the member down;
// others then report OnLeave, not OnDead.
//
// It takes two gossip steps, because memberlist's own leave notice does not
// reach the others' event callbacks as different from a death (its
// NotifyLeave passes a Node whose State is always StateAlive: memberlist
// issue #293). First the member re-advertises its metadata with a leaving
// mark and waits for that broadcast; then it sends memberlist's leave notice
// and waits for that. A member that gets the leave notice without the mark
// (it missed the first broadcast and has no push-pull since) reports OnDead:
// a leave can be misreported as a death, while a death is reported as a
// leave only if the member crashes in the middle of its own Leave.
//
// Leave returns an error if a step timed out (others may then report OnDead
// instead); the member is shut down either way. When Leave returns, no
// callback or Logf call is running and none follows. Errors wrap
// ftrma.ErrInvalid for a non-positive timeout (and the member stays up),
// ftrma.ErrClosed after Leave or Shutdown.
func (g *Group) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("members: leave within %v: %w", timeout, ftrma.ErrInvalid)
	}
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	if g.stopped {
		return fmt.Errorf("members: leave: %w", ftrma.ErrClosed)
	}
	deadline := time.Now().Add(timeout)
	g.meta.leaving.Store(true)
	err := g.ml.UpdateNode(timeout)
	// Send the leave notice even if the mark may not have gone out: it
	// spares the others the detection time. memberlist waits forever on
	// a zero timeout; 1 ns makes it give up at once instead.
	err = errors.Join(err, g.ml.Leave(max(time.Until(deadline), 1)))
	g.shutdownLocked()
	if err != nil {
		return fmt.Errorf("members: leave %q: %w", g.name, err)
	}
	return nil
}

// Shutdown stops the member at once without telling anyone: to the others
// it looks like a crash, and they report OnDead after the detection time.
// Pending events are dropped; when Shutdown returns, no callback or Logf
// call is running and none follows. A probe in flight ends within one
// ProbeInterval (a Join's exchange within 2·StreamTimeout) after Shutdown
// returns; nothing outlives that. Shutdown is idempotent and always returns
// nil; it must not be called from a callback.
func (g *Group) Shutdown() error {
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	if !g.stopped {
		g.shutdownLocked()
	}
	return nil
}

func (g *Group) isStopped() bool {
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	return g.stopped
}

// shutdownLocked stops memberlist, the dispatcher and the log. stopMu is
// held.
func (g *Group) shutdownLocked() {
	g.stopped = true
	// memberlist's Shutdown closes the sockets and waits for the
	// listeners, then stops the tickers; it never fails (errors are
	// logged).
	_ = g.ml.Shutdown()
	g.stopEvents()
	g.logMu.Lock()
	g.logOff = true
	g.logMu.Unlock()
}

// stopEvents ends the dispatch goroutine, dropping pending events, and waits
// for it.
func (g *Group) stopEvents() {
	g.evMu.Lock()
	g.evDone = true
	g.evQueue = nil
	g.evMu.Unlock()
	close(g.evStop)
	<-g.evExit
}

// push queues an event for the dispatcher. It never blocks.
func (g *Group) push(ev event) {
	g.evMu.Lock()
	defer g.evMu.Unlock()
	if g.evDone {
		return
	}
	g.evQueue = append(g.evQueue, ev)
	select {
	case g.evWake <- struct{}{}:
	default:
	}
}

// dispatch runs the callbacks, one event at a time in queue order, until
// stopEvents.
func (g *Group) dispatch() {
	defer close(g.evExit)
	for {
		g.evMu.Lock()
		batch := g.evQueue
		g.evQueue = nil
		g.evMu.Unlock()
		for _, ev := range batch {
			select {
			case <-g.evStop:
				return
			default:
			}
			g.deliver(ev)
		}
		select {
		case <-g.evStop:
			return
		case <-g.evWake:
		}
	}
}

func (g *Group) deliver(ev event) {
	var f func(string, []byte)
	switch ev.kind {
	case evJoin:
		f = g.cfg.OnJoin
	case evLeave:
		f = g.cfg.OnLeave
	case evDead:
		f = g.cfg.OnDead
	}
	if f != nil {
		f(ev.name, ev.meta)
	}
}

// eventDelegate turns memberlist's node events into queued events.
// memberlist calls it with its node lock held, never concurrently.
type eventDelegate struct{ g *Group }

func (d eventDelegate) NotifyJoin(n *memberlist.Node) {
	if n.Name == d.g.name {
		return
	}
	_, user := parseMeta(n.Meta)
	d.g.push(event{evJoin, n.Name, user})
}

// NotifyLeave fires both for a member that left (it announced its own
// death) and for one declared dead. n.State cannot tell them apart (it is
// always StateAlive here, memberlist issue #293), so Leave marks the
// member's metadata first.
func (d eventDelegate) NotifyLeave(n *memberlist.Node) {
	if n.Name == d.g.name {
		return
	}
	leaving, user := parseMeta(n.Meta)
	kind := evDead
	if leaving {
		kind = evLeave
	}
	d.g.push(event{kind, n.Name, user})
}

// NotifyUpdate is ignored: the user's Meta is fixed at Start, and the only
// update is Leave's mark.
func (d eventDelegate) NotifyUpdate(*memberlist.Node) {}

// nodeMeta is the metadata a member advertises: one flag byte, then the
// user's Meta. It is memberlist's Delegate, carrying no user messages or
// state.
type nodeMeta struct {
	user    []byte      // Config.Meta; read-only
	leaving atomic.Bool // set by Leave before it re-advertises
}

// metaLeaving marks, in the flag byte, a member that has begun Leave.
const metaLeaving = 1 << 0

// parseMeta splits advertised metadata into the leaving mark and a copy of
// the user's part. Empty metadata (which a foreign member could send) has no
// flags.
func parseMeta(b []byte) (leaving bool, user []byte) {
	if len(b) == 0 {
		return false, nil
	}
	return b[0]&metaLeaving != 0, slices.Clone(b[1:])
}

func (d *nodeMeta) NodeMeta(limit int) []byte {
	var flags byte
	if d.leaving.Load() {
		flags |= metaLeaving
	}
	b := append([]byte{flags}, d.user...)
	if len(b) > limit {
		return nil // validate keeps Meta within MaxMetaSize
	}
	return b
}

func (*nodeMeta) NotifyMsg([]byte)                           {}
func (*nodeMeta) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (*nodeMeta) LocalState(join bool) []byte                { return nil }
func (*nodeMeta) MergeRemoteState(buf []byte, join bool)     {}

// logWriter passes memberlist's log lines to Config.Logger.
type logWriter struct{ g *Group }

func (w logWriter) Write(p []byte) (int, error) {
	level, msg := memberlistLevel(strings.TrimRight(string(p), "\n"))
	l := w.g.cfg.Logger
	if l == nil || !l.Enabled(context.Background(), level) {
		return len(p), nil
	}
	w.g.logMu.RLock()
	defer w.g.logMu.RUnlock()
	if !w.g.logOff {
		l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// memberlistLevel splits one of memberlist's log lines into its level and
// the message after the level tag (see Config.Logger).
func memberlistLevel(line string) (slog.Level, string) {
	for _, c := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}} {
		if msg, ok := strings.CutPrefix(line, c.tag); ok {
			msg = strings.TrimSpace(msg)
			if c.level == slog.LevelInfo && (strings.Contains(msg, "Suspect") || strings.Contains(msg, "failed")) {
				return slog.LevelWarn, msg
			}
			return c.level, msg
		}
	}
	return slog.LevelInfo, line
}

var _ io.Writer = logWriter{}
