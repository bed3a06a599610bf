// Package commtest builds in-process worlds of ranks for tests: N communicators
// over a memnet network, one per goroutine rank, with the network's fault
// hooks at hand.
package commtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/internal/admission"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/memnet"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/verbs"
)

// World is n communicators over one memnet network.
type World struct {
	Net *memnet.Network // nil for NewSHM's worlds
	// Comms holds each rank's world communicator, indexed by world rank;
	// with spares (NewSpares), nil for a spare not started, and a started
	// spare's communicator of itself alone (StartSpare).
	Comms []*comm.Comm

	cfg comm.Config // the ranks' Config, for spares started later

	startMu sync.Mutex      // serializes spare starts
	joined  chan Joined     // spares started by a Replace, once their side of it ended
	ctx     context.Context // ends at Close: bounds the spares' side of Replace
	cancel  context.CancelFunc

	mu       sync.Mutex // guards the fields below, and the writes of Comms after the start
	declared map[ftrma.Rank]string
	crashed  map[ftrma.Rank]bool // by Crash
}

// Joined is the outcome of a spare started by a Replace (through the
// world's spawner): its rank, and what its Init would return, the
// communicator Replace made or an error.
type Joined struct {
	Rank ftrma.Rank
	Comm *comm.Comm
	Err  error
}

// New builds a world of n ranks with TestConfig. Close it when done
// (tb.Cleanup does when tb is not nil).
func New(tb testing.TB, n int) *World { return NewConfig(tb, n, TestConfig()) }

// TestConfig is the configuration of New's worlds: the failure detector's
// timeout is 2 s instead of 60 ms, because goroutine ranks share one
// process's CPUs (and, under the race detector, run many times slower), so a
// busy rank's heartbeats can be late without anything having failed. Crashes
// (memnet's Crash) are noticed at once regardless; tests of the detector
// itself pass their own Config to NewConfig.
func TestConfig() comm.Config {
	var c comm.Config
	c.Detector.Period = 50 * time.Millisecond
	c.Detector.Timeout = 2 * time.Second
	return c
}

// NewConfig builds a world of n ranks with cfg. A rank the world declares
// failed does not exit the test process: Declared reports it instead (unless
// cfg sets OnDeclaredFailed itself).
func NewConfig(tb testing.TB, n int, cfg comm.Config) *World {
	return NewSparesConfig(tb, n, 0, cfg)
}

// NewSpares builds a world of n ranks with TestConfig, with spares more
// ranks held in reserve: a memnet network of n+spares endpoints
// (memnet.NewSpares: the spares are absent until admitted), where
// ranks 0..n-1 start (their world communicator is those n ranks, and
// they count the spares absent: comm.Config.Spares) and ranks n.. are
// spares, not started until StartSpare.
func NewSpares(tb testing.TB, n, spares int) *World {
	return NewSparesConfig(tb, n, spares, TestConfig())
}

// NewSparesConfig is NewSpares with cfg (its Spares is set to spares).
func NewSparesConfig(tb testing.TB, n, spares int, cfg comm.Config) *World {
	cfg.Spares = spares
	w := &World{Net: memnet.NewSpares(n, spares), Comms: make([]*comm.Comm, n+spares), cfg: cfg,
		declared: make(map[ftrma.Rank]string), crashed: make(map[ftrma.Rank]bool), joined: make(chan Joined, spares)}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for r := range n {
		var err error
		if w.Comms[r], err = comm.New(w.Net.Endpoint(ftrma.Rank(r)), w.rankConfig(ftrma.Rank(r))); err != nil {
			panic(fmt.Sprintf("commtest: rank %d: %v", r, err))
		}
		if spares > 0 {
			admission.SetSpawner(w.Comms[r], w.spawn)
		}
	}
	if tb != nil {
		tb.Cleanup(w.Close)
	}
	return w
}

// rankConfig returns the Config of rank r: w.cfg, with a declared-failed
// handler that records instead of exiting, unless w.cfg has its own.
func (w *World) rankConfig(r ftrma.Rank) comm.Config {
	c := w.cfg
	if c.OnDeclaredFailed == nil {
		c.OnDeclaredFailed = func(by string) {
			w.mu.Lock()
			w.declared[r] = by
			w.mu.Unlock()
		}
	}
	return c
}

// Crash crashes rank r (memnet's Crash) and remembers it: StartSpare
// counts it failed.
func (w *World) Crash(r ftrma.Rank) {
	w.mu.Lock()
	w.crashed[r] = true
	w.mu.Unlock()
	w.Net.Crash(r)
}

// StartSpare starts spare s of a NewSpares world as a new goroutine rank,
// the way ftrun starts a spare: first every live rank admits it (its
// transport, when the transport admits ranks, then its runtime), then s
// starts knowing which ranks are live and which failed (its own endpoint
// admits the spares started before it). The failed ranks
// are those crashed with Crash and those a live rank counts failed or
// departed. It returns s's communicator of itself alone (w.Comms[s]), and
// an error if s is not a spare that has not started, or an admission
// fails.
func (w *World) StartSpare(s ftrma.Rank) (*comm.Comm, error) {
	return w.startSpare(s, nil)
}

// startSpare is StartSpare with the payload of the spawn that starts s.
func (w *World) startSpare(s ftrma.Rank, payload []byte) (*comm.Comm, error) {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	return w.startSpareLocked(s, payload)
}

// startSpareLocked is startSpare with w.startMu held: one start at a
// time, as ftrun does. w.mu is held only while reading or writing the
// world's state, never while a runtime is waited for.
func (w *World) startSpareLocked(s ftrma.Rank, payload []byte) (*comm.Comm, error) {
	w.mu.Lock()
	comms := slices.Clone(w.Comms)
	down := maps.Clone(w.crashed)
	w.mu.Unlock()
	if w.Net == nil || s < 0 || int(s) >= len(comms) || int(s) < len(comms)-w.cfg.Spares || comms[s] != nil {
		return nil, fmt.Errorf("commtest: rank %d is not a spare waiting to start: %w", s, ftrma.ErrInvalid)
	}
	var started []ftrma.Rank
	for r, c := range comms {
		if c != nil {
			started = append(started, ftrma.Rank(r))
		}
	}
	for _, r := range started {
		if down[r] {
			continue
		}
		for _, q := range started {
			if admission.Gone(comms[r], q) {
				down[q] = true
			}
		}
	}
	var live, failed []ftrma.Rank
	for _, r := range started {
		if down[r] {
			failed = append(failed, r)
		} else {
			live = append(live, r)
		}
	}
	for _, r := range live {
		if a, ok := transport.Transport(w.Net.Endpoint(r)).(interface {
			Admit(ftrma.Rank, string) error
		}); ok {
			if err := a.Admit(s, ""); err != nil {
				return nil, fmt.Errorf("commtest: rank %d's transport admits %d: %w", r, s, err)
			}
		}
		if err := admission.AdmitPayload(comms[r], s, payload); err != nil {
			return nil, fmt.Errorf("commtest: rank %d admits %d: %w", r, s, err)
		}
	}
	// The spare's own endpoint counts the other spares absent: it admits
	// those started before it.
	for _, r := range live {
		if int(r) >= len(comms)-w.cfg.Spares {
			if a, ok := transport.Transport(w.Net.Endpoint(s)).(interface {
				Admit(ftrma.Rank, string) error
			}); ok {
				if err := a.Admit(r, ""); err != nil {
					return nil, fmt.Errorf("commtest: spare %d's transport admits %d: %w", s, r, err)
				}
			}
		}
	}
	c, err := admission.NewSpare(w.Net.Endpoint(s), w.rankConfig(s), live, failed)
	if err != nil {
		return nil, fmt.Errorf("commtest: spare %d: %w", s, err)
	}
	admission.SetSpawner(c, w.spawn)
	w.mu.Lock()
	w.Comms[s] = c.(*comm.Comm)
	w.mu.Unlock()
	return c.(*comm.Comm), nil
}

// spawn is the Spawner of a NewSpares world's ranks (comm.Spawner), the
// way ftrun serves Session.Spawn: it starts the next k spares in rank
// order (StartSpare, so that every live rank admits each, with payload,
// before it returns), or fails when fewer than k are left. A spare started
// for a Replace runs its side of it, as its Init would, in a goroutine of
// its own; its outcome comes on Joined, and on success the communicator
// Replace made takes its place in Comms.
func (w *World) spawn(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error) {
	var ranks []ftrma.Rank
	for range k {
		w.startMu.Lock() // the choice and the start of s are one step
		w.mu.Lock()
		s := ftrma.Rank(-1)
		for r := len(w.Comms) - w.cfg.Spares; r < len(w.Comms); r++ {
			if w.Comms[r] == nil && !w.crashed[ftrma.Rank(r)] {
				s = ftrma.Rank(r)
				break
			}
		}
		w.mu.Unlock()
		if s < 0 {
			w.startMu.Unlock()
			return ranks, fmt.Errorf("commtest: no spare rank left of %d", w.cfg.Spares)
		}
		c, err := w.startSpareLocked(s, payload)
		w.startMu.Unlock()
		if err != nil {
			return ranks, err
		}
		ranks = append(ranks, s)
		go func() {
			nc, ok, err := admission.JoinReplace(w.ctx, c, payload)
			if !ok {
				return
			}
			j := Joined{Rank: s, Err: err}
			if err == nil {
				j.Comm = nc.(*comm.Comm)
				w.mu.Lock()
				w.Comms[s] = j.Comm
				w.mu.Unlock()
			}
			w.joined <- j
		}()
	}
	return ranks, nil
}

// Spawn is the spawner the world sets at every rank (see spawn). A test
// that injects a fault around a Replace's spawn wraps it and sets the
// wrapper at the leader with the admission package's SetSpawner.
func (w *World) Spawn(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error) {
	return w.spawn(ctx, k, payload)
}

// Joined delivers the outcome of every spare a Replace started, once its
// side of the Replace ended.
func (w *World) Joined() <-chan Joined { return w.joined }

// Settle tells every started rank not crashed that every live rank has
// admitted every spare started (see revoke.Broadcast.Settle).
func (w *World) Settle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for r, c := range w.Comms {
		if c != nil && !w.crashed[ftrma.Rank(r)] {
			admission.Settle(c)
		}
	}
}

// Gone reports whether rank at counts world rank r failed or departed (its
// runtime's knowledge, whatever communicators r is in).
func (w *World) Gone(at, r ftrma.Rank) bool {
	return admission.Gone(w.Comms[at], r)
}

// NewSHM builds a world of n ranks with TestConfig over the shared-memory
// transport, every rank a goroutine of this process with its own transport
// and segments in a temporary directory: the same tests then run over real
// shared mappings. It has no Net: crashes cannot be injected.
func NewSHM(tb testing.TB, n int) *World { return NewSHMConfig(tb, n, shm.Config{Spin: -1}) }

// NewSHMConfig is NewSHM with the transport's settings from cfg (its Rank,
// Size, Job and Dir are filled in per rank).
func NewSHMConfig(tb testing.TB, n int, cfg shm.Config) *World {
	w := &World{Comms: make([]*comm.Comm, n), declared: make(map[ftrma.Rank]string)}
	var id [6]byte
	rand.Read(id[:])
	dir, job := tb.TempDir(), hex.EncodeToString(id[:])
	ts := make([]*shm.Transport, n)
	for r := range n {
		cfg.Rank, cfg.Size, cfg.Job, cfg.Dir = ftrma.Rank(r), n, job, dir
		t, err := shm.Open(cfg)
		if err != nil {
			tb.Fatalf("commtest: rank %d: %v", r, err)
		}
		ts[r] = t
		c := TestConfig()
		c.OnDeclaredFailed = func(by string) {
			w.mu.Lock()
			w.declared[ftrma.Rank(r)] = by
			w.mu.Unlock()
		}
		if w.Comms[r], err = comm.New(t, c); err != nil {
			tb.Fatalf("commtest: rank %d: %v", r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r, t := range ts {
		if err := t.Connect(ctx); err != nil {
			tb.Fatalf("commtest: rank %d: connect: %v", r, err)
		}
	}
	tb.Cleanup(w.Close)
	return w
}

// NewVerbs builds a world of n ranks with TestConfig over the verbs
// transport, every rank a goroutine of this process with its own device
// context and queue pairs (on Soft-RoCE in the test guest). It has no Net.
// It fails the test when the binary lacks verbs or no device is usable.
func NewVerbs(tb testing.TB, n int) *World {
	w := &World{Comms: make([]*comm.Comm, n), declared: make(map[ftrma.Rank]string)}
	ts := make([]*verbs.Transport, n)
	addrs := make([]string, n)
	for r := range n {
		bound, _ := time.ParseDuration(os.Getenv("FTRMA_VERBS_BOUND"))
		t, err := verbs.Open(verbs.Config{Rank: ftrma.Rank(r), Size: n, GIDIndex: -1, Spin: -1, Bound: max(bound, 2*time.Second)})
		if err != nil {
			tb.Fatalf("commtest: rank %d: %v", r, err)
		}
		ts[r] = t
		addrs[r] = t.Addr()
		c := TestConfig()
		if bound > c.Detector.Timeout {
			c.Detector.Timeout = bound
		}
		c.OnDeclaredFailed = func(by string) {
			w.mu.Lock()
			w.declared[ftrma.Rank(r)] = by
			w.mu.Unlock()
		}
		if w.Comms[r], err = comm.New(t, c); err != nil {
			tb.Fatalf("commtest: rank %d: %v", r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, t := range ts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = t.Connect(ctx, addrs) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("commtest: rank %d: connect: %v", r, err)
		}
	}
	tb.Cleanup(w.Close)
	return w
}

// NewWeak is New over a network whose endpoints report neither
// CapWholeWords nor CapLocalAtomics: the layers above then take the paths
// an RDMA device makes them take (element atomics through the transport's
// atomics, the owner's atomics on its own memory through the transport).
func NewWeak(tb testing.TB, n int) *World {
	w := New(tb, n)
	w.Net.DropCaps(transport.CapWholeWords | transport.CapLocalAtomics)
	return w
}

// A Maker builds a world of n ranks.
type Maker struct {
	Name string
	New  func(tb testing.TB, n int) *World
}

// Worlds lists the worlds suites run over: those FTRMA_TEST_WORLDS names
// (comma-separated from memnet, weak, shm, verbs), by default memnet, weak
// and shm. The
// verbs world needs a binary built with -tags verbs and an RDMA device (the
// guest of scripts/rxe-vm.sh sets FTRMA_TEST_WORLDS=verbs).
func Worlds() []Maker {
	all := []Maker{{"memnet", New}, {"weak", NewWeak}, {"shm", NewSHM}, {"verbs", NewVerbs}}
	names := os.Getenv("FTRMA_TEST_WORLDS")
	if names == "" {
		names = "memnet,weak,shm"
	}
	var out []Maker
	for _, m := range all {
		if slices.Contains(strings.Split(names, ","), m.Name) {
			out = append(out, m)
		}
	}
	return out
}

// Declared reports whether rank r learned that the world declared it failed,
// and why.
func (w *World) Declared(r ftrma.Rank) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	why, ok := w.declared[r]
	return why, ok
}

// Run calls f for every rank started in its own goroutine and returns the
// ranks' errors, indexed by rank.
func (w *World) Run(ctx context.Context, f func(ctx context.Context, c *comm.Comm) error) []error {
	return w.RunRanks(ctx, nil, f)
}

// RunRanks is Run for the ranks listed (all ranks when ranks is nil); the
// others' errors are nil.
func (w *World) RunRanks(ctx context.Context, ranks []ftrma.Rank, f func(ctx context.Context, c *comm.Comm) error) []error {
	w.mu.Lock()
	comms := slices.Clone(w.Comms)
	w.mu.Unlock()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		if c == nil || ranks != nil && !slices.Contains(ranks, ftrma.Rank(r)) {
			continue // not started (a spare)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(ctx, c)
		}()
	}
	wg.Wait()
	return errs
}

// Close closes every communicator and the network.
func (w *World) Close() {
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Lock()
	comms := slices.Clone(w.Comms)
	w.mu.Unlock()
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
	if w.Net != nil {
		w.Net.Close()
	}
}

// AwaitGone waits until c counts every communicator rank of ranks failed or
// departed (ProcFailed), woken by c.FailuresChanged rather than polling; it
// fails, saying what c knows, when ctx ends first.
func AwaitGone(ctx context.Context, c *comm.Comm, ranks ...ftrma.Rank) error {
	for {
		changed := c.FailuresChanged()
		gone := true
		for _, r := range ranks {
			gone = gone && c.ProcFailed(r)
		}
		if gone {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("rank %d: failed %v, departed %v; waiting for %v: %w", c.Rank(), c.Failed(), c.Departed(), ranks, ctx.Err())
		}
	}
}
