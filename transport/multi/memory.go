package multi

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Register registers mem with every transport in use under one key, which
// every peer names it by whichever transport reaches this rank: the
// transport that chooses its own keys (shm) registers it first, and the
// others (KeyRegisterer) take its key; when every one takes keys, this
// transport counts them. mem must be acceptable to all of them: from Alloc
// when one is a transport.Allocator (shm). If one fails, the others'
// registrations are withdrawn and its error returned.
func (m *Transport) Register(mem []byte) (transport.Key, error) {
	if m.closed.Load() {
		return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: ftrma.ErrClosed}
	}
	var key transport.Key
	if m.keyer != nil {
		k, err := m.keyer.t.Register(mem)
		if err != nil {
			return 0, err
		}
		key = k
	} else {
		m.mu.Lock()
		if m.lastKey == transport.MaxKey {
			m.mu.Unlock()
			return 0, &ftrma.OpError{Op: "register", Rank: -1, Err: fmt.Errorf("%w: multi transport: out of region keys", ftrma.ErrInvalid)}
		}
		m.lastKey++
		key = m.lastKey
		m.mu.Unlock()
	}
	for i, s := range m.subs {
		if !s.inUse || s == m.keyer {
			continue
		}
		if err := s.keyed.RegisterKey(key, mem); err != nil {
			m.withdraw(key, i)
			return 0, err
		}
	}
	m.mu.Lock()
	m.regs[key] = struct{}{}
	m.mu.Unlock()
	return key, nil
}

// withdraw undoes a Register that failed at subs[failed]: the key is
// deregistered from the keyer and from the transports before failed.
func (m *Transport) withdraw(key transport.Key, failed int) {
	for _, s := range m.subs[:failed] {
		if s.inUse && s != m.keyer {
			s.t.Deregister(key)
		}
	}
	if m.keyer != nil {
		m.keyer.t.Deregister(key)
	}
}

// RegistersForeign reports whether Register takes memory that Alloc did
// not return (transport.ForeignRegistrar): when the transport that
// allocates (shm) does, as every other one registers any memory.
func (m *Transport) RegistersForeign() bool {
	if m.alloc == nil {
		return true
	}
	f, ok := m.alloc.(transport.ForeignRegistrar)
	return ok && f.RegistersForeign()
}

// Deregister withdraws key from every transport in use, each waiting for
// the operations executing on the region (shm: its peers' accesses; tcp:
// the target's progress goroutines), and returns their errors. The
// transport that chose the key goes last: until then no new key can take
// the slot (shm's) that the others' tables (verbs') still hold for it. An
// unknown key fails with ftrma.ErrUnknownRegion.
func (m *Transport) Deregister(key transport.Key) error {
	if m.closed.Load() {
		return &ftrma.OpError{Op: "deregister", Rank: -1, Err: ftrma.ErrClosed}
	}
	m.mu.Lock()
	_, ok := m.regs[key]
	delete(m.regs, key)
	m.mu.Unlock()
	if !ok {
		return &ftrma.OpError{Op: "deregister", Rank: -1, Err: fmt.Errorf("multi transport: deregister key %d: %w", key, ftrma.ErrUnknownRegion)}
	}
	var errs []error
	deregister := func(s *sub) {
		if err := s.t.Deregister(key); err != nil {
			errs = append(errs, fmt.Errorf("multi transport: %s: %w", s.name, err))
		}
	}
	for _, s := range m.subs {
		if s.inUse && s != m.keyer {
			deregister(s)
		}
	}
	if m.keyer != nil {
		deregister(m.keyer)
	}
	return errors.Join(errs...)
}

// Alloc returns size bytes of zeroed, 8-byte aligned memory that every
// transport in use can register: from the one that is a
// transport.Allocator (shm), else from the Go heap.
func (m *Transport) Alloc(size int) ([]byte, error) {
	if m.alloc != nil {
		return m.alloc.Alloc(size)
	}
	if size < 0 {
		return nil, &ftrma.OpError{Op: "alloc", Rank: -1, Err: fmt.Errorf("%w: negative size %d", ftrma.ErrInvalid, size)}
	}
	w := make([]uint64, (max(size, 1)+7)/8)
	base := (*byte)(unsafe.Pointer(unsafe.SliceData(w)))
	m.mu.Lock()
	m.heap[base] = struct{}{} // also keeps it alive until Release
	m.mu.Unlock()
	return unsafe.Slice(base, 8*len(w))[:size:size], nil
}

// Release gives back memory from Alloc (buf starting where it started),
// through the transport it came from. Other memory fails with
// ftrma.ErrInvalid.
func (m *Transport) Release(buf []byte) error {
	if m.alloc != nil {
		return m.alloc.Release(buf)
	}
	p := (*byte)(unsafe.Pointer(unsafe.SliceData(buf)))
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.heap[p]; !ok || p == nil {
		return &ftrma.OpError{Op: "release", Rank: -1, Err: fmt.Errorf("%w: multi transport: release memory from Alloc", ftrma.ErrInvalid)}
	}
	delete(m.heap, p)
	return nil
}

// RegionLimit is the smallest RegionLimit of the transports in use (shm's
// key table), or 0 when none sets a limit.
func (m *Transport) RegionLimit() int { return m.limit }

// Shares reports whether the transport that reaches peer can map its
// memory into this process (transport.Sharer): shm, toward the ranks of
// this host.
func (m *Transport) Shares(peer ftrma.Rank) bool {
	t, err := m.to("map shared", peer)
	if err != nil {
		return false
	}
	s, ok := t.(transport.Sharer)
	return ok && s.Shares(peer)
}

// MapShared maps peer's region key through the transport that reaches peer
// (transport.Sharer); the key is the sharing transport's own, since it is
// the one that chooses keys. A peer reached otherwise fails with
// transport.ErrNotShared.
func (m *Transport) MapShared(peer ftrma.Rank, key transport.Key) ([]byte, func(), error) {
	const op = "map shared"
	t, err := m.to(op, peer)
	if err != nil {
		return nil, nil, err
	}
	s, ok := t.(transport.Sharer)
	if !ok || !s.Shares(peer) {
		return nil, nil, &ftrma.OpError{Op: op, Rank: peer, Err: fmt.Errorf("%w: multi transport: rank %d is reached through %s, which cannot map its memory", transport.ErrNotShared, peer, m.Route(peer))}
	}
	return s.MapShared(peer, key)
}
