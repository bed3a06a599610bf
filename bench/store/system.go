package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

// The system names, as they appear in the table, the JSON and -only.
const (
	sysFtrma     = "ftrma-tcp"
	sysFtrmaSHM  = "ftrma-shm"
	sysHazelcast = "hazelcast"
	sysRedis     = "redis"
	sysEtcd      = "etcd"
)

// allSystems is the column order of the table.
var allSystems = []string{sysFtrma, sysFtrmaSHM, sysHazelcast, sysRedis, sysEtcd}

// isFtrma reports whether system s is ftrma's store (on some transport).
func isFtrma(s string) bool { return s == sysFtrma || s == sysFtrmaSHM }

// ftrmaTransport is the ftrun --transport of an ftrma system.
func ftrmaTransport(s string) string {
	if s == sysFtrmaSHM {
		return "shm"
	}
	return "tcp"
}

// system is one column of the comparison.
type system interface {
	Name() string
	// Supports returns "" when the system can run with copies copies, else
	// why not.
	Supports(copies int) string
	// Prepare makes the system keep exactly copies copies of every value:
	// it starts or grows (or shrinks) the cluster.
	Prepare(ctx context.Context, copies int, p plan) error
	// Warm runs untimed load after Prepare.
	Warm(ctx context.Context, copies int, p plan) error
	// Run measures one run at one value size and returns its results.
	Run(ctx context.Context, copies, size int, p plan) ([]result.Result, error)
	// Done is called when the driver has finished with a copy count.
	Done(copies int)
	// Notes are facts to print with the results (versions, settings).
	Notes() []string
	// Close stops everything the system started.
	Close()
}

// peer is a store started and driven by this program: Hazelcast, Redis or
// etcd.
type peer interface {
	supports(copies int) string
	// prepare starts or resizes the cluster for copies copies and returns
	// the store to run the workload on.
	prepare(ctx context.Context, copies int, writers int) (kv, error)
	done(copies int)
	notes() []string
	close()
}

// peerSystem runs the shared workload (workload.go) on a peer.
type peerSystem struct {
	name string
	p    peer
	// warmScale multiplies the plan's warm-up time: JVM members need more
	// operations before their JIT compiler has caught up.
	warmScale int
	kv        kv
	at        int // copies kv was prepared for
}

func (s *peerSystem) Name() string               { return s.name }
func (s *peerSystem) Supports(copies int) string { return s.p.supports(copies) }
func (s *peerSystem) Notes() []string            { return s.p.notes() }
func (s *peerSystem) Done(copies int)            { s.kv = nil; s.p.done(copies) }
func (s *peerSystem) Close()                     { s.p.close() }

func (s *peerSystem) Prepare(ctx context.Context, copies int, p plan) error {
	s.kv = nil
	kv, err := s.p.prepare(ctx, copies, p.writers)
	if err != nil {
		return err
	}
	s.kv, s.at = kv, copies
	return nil
}

func (s *peerSystem) store(copies int) (kv, error) {
	if s.kv == nil || s.at != copies {
		return nil, fmt.Errorf("%s: not prepared for %d copies", s.name, copies)
	}
	return s.kv, nil
}

func (s *peerSystem) Warm(ctx context.Context, copies int, p plan) error {
	st, err := s.store(copies)
	if err != nil {
		return err
	}
	return warmUp(ctx, st, p.writers, p.sizes[0], time.Duration(max(1, s.warmScale))*p.stageWarm, p.opTimeout)
}

func (s *peerSystem) Run(ctx context.Context, copies, size int, p plan) ([]result.Result, error) {
	st, err := s.store(copies)
	if err != nil {
		return nil, err
	}
	sm, err := runWorkload(ctx, st, p.workload(size))
	if err != nil {
		return nil, err
	}
	return summarize(sm, s.name, size, copies), nil
}

// moduleVersion returns the version of a Go module linked into this
// program, from its build information.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version)"
	}
	for _, m := range bi.Deps {
		if m.Path == path {
			if m.Replace != nil {
				return m.Replace.Version + " (replaced)"
			}
			return m.Version
		}
	}
	return "(unknown version)"
}
