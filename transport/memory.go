package transport

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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

// Write copies src into region key at off. A src larger than CopyChunk is
// copied in pieces of CopyChunk bytes, paced by a Pacer (see Copy); the
// region stays registered (Deregister waits) until the last piece is done.
func (m *Memory) Write(key Key, off uint64, src []byte) error {
	if len(src) > CopyChunk {
		return m.writeInPieces(key, off, src)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	dst, err := m.span(key, off, len(src))
	if err != nil {
		return err
	}
	store(dst, src)
	return nil
}

func (m *Memory) writeInPieces(key Key, off uint64, src []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	dst, err := m.span(key, off, len(src))
	if err != nil {
		return err
	}
	var pace Pacer
	for len(src) > CopyChunk {
		store(dst[:CopyChunk], src[:CopyChunk])
		dst, src = dst[CopyChunk:], src[CopyChunk:]
		pace.Pause()
	}
	store(dst, src)
	return nil
}

// store copies src into registered memory dst (as long), aligned words whole.
func store(dst, src []byte) {
	if d := words(dst); d != nil {
		storeWords(d, src)
		return
	}
	copy(dst, src)
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

// Read copies len(dst) bytes of region key at off into dst, a dst larger
// than CopyChunk in pieces as Write.
func (m *Memory) Read(key Key, off uint64, dst []byte) error {
	if len(dst) > CopyChunk {
		return m.readInPieces(key, off, dst)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	src, err := m.span(key, off, len(dst))
	if err != nil {
		return err
	}
	load(dst, src)
	return nil
}

func (m *Memory) readInPieces(key Key, off uint64, dst []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	src, err := m.span(key, off, len(dst))
	if err != nil {
		return err
	}
	var pace Pacer
	for len(dst) > CopyChunk {
		load(dst[:CopyChunk], src[:CopyChunk])
		dst, src = dst[CopyChunk:], src[CopyChunk:]
		pace.Pause()
	}
	load(dst, src)
	return nil
}

// load copies registered memory src into dst (as long), aligned words whole.
func load(dst, src []byte) {
	if s := words(src); s != nil {
		loadWords(dst, s)
		return
	}
	copy(dst, src)
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

// CopyChunk is the most a transport copies in one piece. A copy of any
// size holds the processor: Go cannot preempt a goroutine inside
// runtime.memmove (nor inside assembly such as a CRC), so a 100 MB copy in a
// rank with GOMAXPROCS=1 would keep its failure detector's heartbeat from
// running for tens of milliseconds, longer than the detector's timeout on a
// busy host. Copies of caller-sized data therefore go through Copy (or
// Memory, or InPieces), which move CopyChunk bytes at a time, a fraction of
// a millisecond, and between pieces let other goroutines run (see Pacer).
// Pieces of 1 MiB keep runtime.memmove on its path for large copies
// (non-temporal stores from 1 MiB on amd64): smaller pieces made 16 MiB
// copies into shared memory two to three times slower.
const CopyChunk = 1 << 20

// YieldEvery is how long a pass over memory in pieces runs before it lets
// other goroutines run: far below the failure detector's heartbeat period
// (20 ms), and long enough that the yields cost next to nothing (with idle
// processors a yield wakes another thread: microseconds).
const YieldEvery = time.Millisecond

// yieldEvery is YieldEvery, but for tests that make every Pause yield, so
// that whether a pass yields does not depend on how fast the machine copies.
var yieldEvery = YieldEvery

// A Pacer paces a long pass over memory done in pieces of at most CopyChunk
// bytes (a copy, a checksum, a comparison): call Pause between pieces, and
// it lets other goroutines run (runtime.Gosched) once YieldEvery has passed
// since the first Pause or the last yield. The zero Pacer is ready to use.
type Pacer struct {
	since time.Time // the first Pause or the last yield; zero before the first Pause
}

// Pause is called between two pieces of a pass; it yields the processor
// when the pass has run for YieldEvery since it last did.
func (p *Pacer) Pause() {
	now := time.Now()
	switch {
	case p.since.IsZero():
		p.since = now
	case now.Sub(p.since) >= yieldEvery:
		runtime.Gosched()
		p.since = time.Now()
	}
}

// Copy copies min(len(dst), len(src)) bytes from src to dst, like the
// builtin copy, and returns their number. Up to CopyChunk bytes it is the
// builtin; larger copies go in pieces of CopyChunk bytes, front to back,
// paced by a Pacer, so that other goroutines (the failure detector's above
// all) run on time even with GOMAXPROCS=1. The pieces of an 8-byte aligned
// dst stay aligned. Unlike the builtin, a large Copy between overlapping
// slices is correct only when dst starts at or before src.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n <= CopyChunk {
		return copy(dst, src)
	}
	dst, src = dst[:n], src[:n]
	var pace Pacer
	for len(src) > CopyChunk {
		copy(dst[:CopyChunk], src[:CopyChunk])
		dst, src = dst[CopyChunk:], src[CopyChunk:]
		pace.Pause()
	}
	copy(dst, src)
	return n
}

// InPieces calls f(lo, hi) for consecutive ranges [lo, hi) that cover
// [0, n), each at most CopyChunk long, in order, paced by a Pacer: the way
// to run any long pass over memory that Go cannot preempt (a copy, a
// checksum, a comparison) without holding the processor (see CopyChunk). It
// does nothing for n <= 0.
func InPieces(n int, f func(lo, hi int)) {
	var pace Pacer
	for lo := 0; lo < n; lo += CopyChunk {
		if lo > 0 {
			pace.Pause()
		}
		f(lo, min(lo+CopyChunk, n))
	}
}

// Grow returns b with room for at least n more bytes, as slices.Grow. When b
// holds more than CopyChunk bytes and must move to a larger array, its bytes
// move with Copy, in pieces, instead of in one runtime copy: buffers that
// collect frames grow without holding the processor.
func Grow(b []byte, n int) []byte {
	if n <= cap(b)-len(b) {
		return b
	}
	return grow(b, n)
}

func grow(b []byte, n int) []byte {
	if len(b) <= CopyChunk {
		return slices.Grow(b, n)
	}
	nb := make([]byte, len(b), max(len(b)+n, 2*cap(b))) // the runtime zeroes a large array preemptibly
	Copy(nb, b)
	return nb
}

// Append appends data to b, as the builtin append, growing b with Grow and
// copying data with Copy.
func Append(b, data []byte) []byte {
	b = Grow(b, len(data))
	n := len(b)
	b = b[:n+len(data)]
	Copy(b[n:], data)
	return b
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
