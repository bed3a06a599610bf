package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ftrma/ftrma"
)

// Memory is the table of regions one rank has registered, and the target side of
// emulated one-sided operations: transports whose target CPU executes Write,
// Read and the atomics (tcp, memnet) run them through Memory, which checks every
// access against the registered regions and their bounds.
//
// Accesses whose target memory is 8-byte aligned at both ends are done a word at
// a time with whole-word loads and stores, so a reader never sees a torn aligned
// word (Go's memory model guarantees that a word-sized access is never torn;
// race-detector builds use sync/atomic so the detector sees the
// synchronization), and the atomics are sync/atomic operations, atomic with
// respect to the owner's own.
// The zero Memory is ready to use.
type Memory struct {
	mu      sync.RWMutex // guards regions and last; readers are executing operations
	regions map[Key][]byte
	last    Key
}

// Register adds mem as a new region and returns its key.
func (m *Memory) Register(mem []byte) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == MaxKey {
		return 0, fmt.Errorf("transport: register: out of region keys: %w", ftrma.ErrInvalid)
	}
	if m.regions == nil {
		m.regions = make(map[Key][]byte)
	}
	m.last++
	m.regions[m.last] = mem
	return m.last, nil
}

// Deregister removes a region, waiting for operations executing on it.
func (m *Memory) Deregister(key Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.regions[key]; !ok {
		return fmt.Errorf("transport: deregister key %d: %w", key, ftrma.ErrUnknownRegion)
	}
	delete(m.regions, key)
	return nil
}

// span returns the n bytes at off of region key. The caller holds m.mu for reading.
func (m *Memory) span(key Key, off uint64, n int) ([]byte, error) {
	mem, ok := m.regions[key]
	if !ok {
		return nil, ftrma.ErrUnknownRegion
	}
	if n < 0 || off > uint64(len(mem)) || uint64(n) > uint64(len(mem))-off {
		return nil, ftrma.ErrOutOfBounds
	}
	return mem[off : off+uint64(n)], nil
}

// word returns the aligned 8-byte word at off of region key.
func (m *Memory) word(key Key, off uint64) (*uint64, error) {
	b, err := m.span(key, off, 8)
	if err != nil {
		return nil, err
	}
	p := unsafe.Pointer(&b[0])
	if uintptr(p)%8 != 0 {
		return nil, ftrma.ErrMisaligned
	}
	return (*uint64)(p), nil
}

// Write copies src into region key at off.
func (m *Memory) Write(key Key, off uint64, src []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	dst, err := m.span(key, off, len(src))
	if err != nil {
		return err
	}
	if d := words(dst); d != nil {
		storeWords(d, src)
		return nil
	}
	copy(dst, src)
	return nil
}

// Pin returns the n bytes at off of region key for the caller to fill directly
// (a transport reading a large payload straight from its socket), holding the
// region against Deregister until Unpin. Every successful Pin must be followed
// by exactly one Unpin.
func (m *Memory) Pin(key Key, off uint64, n int) ([]byte, error) {
	m.mu.RLock()
	b, err := m.span(key, off, n)
	if err != nil {
		m.mu.RUnlock()
		return nil, err
	}
	return b, nil
}

// Unpin releases the hold of a successful Pin.
func (m *Memory) Unpin() { m.mu.RUnlock() }

// Read copies len(dst) bytes of region key at off into dst.
func (m *Memory) Read(key Key, off uint64, dst []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	src, err := m.span(key, off, len(dst))
	if err != nil {
		return err
	}
	if s := words(src); s != nil {
		loadWords(dst, s)
		return nil
	}
	copy(dst, src)
	return nil
}

// CompareAndSwap64 atomically replaces the word at off with new if it equals
// old, and returns the prior value.
func (m *Memory) CompareAndSwap64(key Key, off uint64, old, new uint64) (uint64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	w, err := m.word(key, off)
	if err != nil {
		return 0, err
	}
	for {
		cur := atomic.LoadUint64(w)
		if cur != old {
			return cur, nil
		}
		if atomic.CompareAndSwapUint64(w, old, new) {
			return old, nil
		}
	}
}

// FetchAndAdd64 atomically adds delta to the word at off and returns the prior
// value.
func (m *Memory) FetchAndAdd64(key Key, off uint64, delta uint64) (uint64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	w, err := m.word(key, off)
	if err != nil {
		return 0, err
	}
	return atomic.AddUint64(w, delta) - delta, nil
}

// words views registered memory b as 8-byte words when it starts on an 8-byte
// boundary and its length is a multiple of 8, and returns nil otherwise.
func words(b []byte) []uint64 {
	if len(b) == 0 || len(b)%8 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// Status codes carry the target's verdict on an operation over a wire. They are
// append-only.
const (
	StatusOK            uint8 = 0
	StatusUnknownRegion uint8 = 1
	StatusOutOfBounds   uint8 = 2
	StatusMisaligned    uint8 = 3
	StatusInvalid       uint8 = 4
)

// StatusOf maps an error of Memory to its status code.
func StatusOf(err error) uint8 {
	switch err {
	case nil:
		return StatusOK
	case ftrma.ErrUnknownRegion:
		return StatusUnknownRegion
	case ftrma.ErrOutOfBounds:
		return StatusOutOfBounds
	case ftrma.ErrMisaligned:
		return StatusMisaligned
	}
	return StatusInvalid
}

// ErrOfStatus maps a status code back to its error value (nil for StatusOK).
func ErrOfStatus(s uint8) error {
	switch s {
	case StatusOK:
		return nil
	case StatusUnknownRegion:
		return ftrma.ErrUnknownRegion
	case StatusOutOfBounds:
		return ftrma.ErrOutOfBounds
	case StatusMisaligned:
		return ftrma.ErrMisaligned
	}
	return ftrma.ErrInvalid
}
