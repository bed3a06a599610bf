// Package commtest builds in-process worlds of ranks for tests: N communicators
// over a memnet network, one per goroutine rank, with the network's fault
// hooks at hand.
package commtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/memnet"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/verbs"
)

// World is n communicators over one memnet network.
type World struct {
	Net   *memnet.Network // nil for NewSHM's worlds
	Comms []*comm.Comm

	mu       sync.Mutex // guards declared
	declared map[ftrma.Rank]string
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
	w := &World{Net: memnet.New(n), Comms: make([]*comm.Comm, n), declared: make(map[ftrma.Rank]string)}
	for r := range n {
		c := cfg
		if c.OnDeclaredFailed == nil {
			c.OnDeclaredFailed = func(by string) {
				w.mu.Lock()
				w.declared[ftrma.Rank(r)] = by
				w.mu.Unlock()
			}
		}
		var err error
		if w.Comms[r], err = comm.New(w.Net.Endpoint(ftrma.Rank(r)), c); err != nil {
			panic(fmt.Sprintf("commtest: rank %d: %v", r, err))
		}
	}
	if tb != nil {
		tb.Cleanup(w.Close)
	}
	return w
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

// Run calls f for every rank in its own goroutine and returns the ranks'
// errors, indexed by rank.
func (w *World) Run(ctx context.Context, f func(ctx context.Context, c *comm.Comm) error) []error {
	return w.RunRanks(ctx, nil, f)
}

// RunRanks is Run for the ranks listed (all ranks when ranks is nil); the
// others' errors are nil.
func (w *World) RunRanks(ctx context.Context, ranks []ftrma.Rank, f func(ctx context.Context, c *comm.Comm) error) []error {
	errs := make([]error, len(w.Comms))
	var wg sync.WaitGroup
	for r, c := range w.Comms {
		if ranks != nil && !slices.Contains(ranks, ftrma.Rank(r)) {
			continue
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
	for _, c := range w.Comms {
		c.Close()
	}
	if w.Net != nil {
		w.Net.Close()
	}
}
