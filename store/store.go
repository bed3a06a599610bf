package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// Errors of the store. Test with errors.Is; the runtime's errors
// (ftrma.ErrProcFailed, ftrma.ErrRevoked, ...) come wrapped as they are.
var (
	// ErrNotFound: the key has no value (never put, or deleted).
	ErrNotFound = errors.New("key not found")
	// ErrDataLost: the key has no copy on a live rank, and at least Copies of
	// the ranks that held or could have held it have failed, so its copies
	// may all be gone. (The store cannot tell a lost key from one that was
	// never put there.)
	ErrDataLost = errors.New("every copy of the key may be lost")
	// ErrClosed: the store was closed.
	ErrClosed = fmt.Errorf("store closed: %w", ftrma.ErrClosed)
	// ErrConflict: a transaction read a key that another write changed
	// before the transaction committed; nothing of it was written.
	ErrConflict = errors.New("transaction conflict")
	// ErrFull: a replica of the key cannot take the value: its rank's key
	// slots or chunk table are full, or it cannot attach more heap memory
	// (out of memory, its transport's region table full). Nothing of the
	// value was written.
	ErrFull = errors.New("store full")
)

// Config configures a store. The zero value of a field means its default.
// Every rank must pass the same options to Open.
type Config struct {
	// Copies is the number of replicas of each key, on distinct ranks
	// (default 3, at most the communicator's size).
	Copies int
	// MaxValueSize bounds a value's length (default 64 MiB).
	MaxValueSize int
	// MaxKeySize bounds a key's length (default 1 KiB).
	MaxKeySize int
	// Slots is the number of key slots at each rank (default 16384). Each
	// rank holds about Copies/Size of all keys; a deletion frees the key's
	// slots, so Slots bounds the live keys (plus the transaction decision
	// keys, one per rank that committed a transaction).
	Slots int
	// ChunkSize is the size of the heap chunks a rank attaches for writers
	// (default 1 MiB); larger values get a chunk of their own.
	ChunkSize int
	// Chunks is the number of heap chunks a rank can attach (default 4096,
	// fewer when the transport can register fewer regions: each chunk is
	// one). Open refuses more chunks than the transport can register, less
	// regionHeadroom regions for the store's table and other windows.
	Chunks int
	// Reserve is the number of free chunks each rank keeps attached ahead of
	// demand (default 2).
	Reserve int
	// Host names this rank's host; replicas of a key go to distinct hosts
	// while there are enough (default: os.Hostname).
	Host string
}

// withDefaults fills in the defaults of the fields left zero and checks
// the configuration for a store over size ranks.
func (o *Config) withDefaults(size int) error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Copies, 3)
	def(&o.MaxValueSize, 64<<20)
	def(&o.MaxKeySize, 1024)
	def(&o.Slots, 16384)
	def(&o.ChunkSize, 1<<20)
	def(&o.Reserve, 2)
	switch {
	case o.Copies < 1 || o.Copies > size:
		return fmt.Errorf("%w: Copies %d with %d ranks", ftrma.ErrInvalid, o.Copies, size)
	case o.Copies > ownerMask || size >= ownerMask:
		return fmt.Errorf("%w: too many ranks", ftrma.ErrInvalid)
	case o.MaxValueSize < 0 || o.MaxKeySize < 1 || o.Slots < 8 || o.Chunks < 0 || o.Reserve < 0:
		return fmt.Errorf("%w: negative or too small limit in %+v", ftrma.ErrInvalid, *o)
	case o.ChunkSize < 4096 || o.ChunkSize%8 != 0:
		return fmt.Errorf("%w: ChunkSize %d (at least 4096, a multiple of 8)", ftrma.ErrInvalid, o.ChunkSize)
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	return nil
}

// regionHeadroom is how many of a rank's transport regions the store leaves
// to its table and to windows (its own control memory, the program's other
// windows) when it sizes its chunk table.
const regionHeadroom = 64

// fitChunks sets Chunks, when zero, to its default within what the transport
// can register (limit regions, 0: no limit of its own), and refuses a Chunks
// beyond it: every chunk a rank attaches is one registered region, and a
// chunk the owner cannot attach would leave writers nowhere to write.
func (o *Config) fitChunks(limit int) error {
	room := 4096
	if limit > 0 {
		room = limit - regionHeadroom
		if room < 1 {
			return fmt.Errorf("%w: the transport registers only %d regions a rank, too few for a store", ftrma.ErrInvalid, limit)
		}
		if o.Chunks > room {
			return fmt.Errorf("%w: Config.Chunks %d, but the transport registers at most %d regions a rank (%d for chunks)", ftrma.ErrInvalid, o.Chunks, limit, room)
		}
	}
	if o.Chunks == 0 {
		o.Chunks = min(4096, room)
	}
	return nil
}

// Stats are counters of this rank's store handle.
type Stats struct {
	Puts, Gets, Deletes uint64        // completed calls
	FastGets            uint64        // gets answered by the primary replica alone
	Commits, Aborts     uint64        // transactions
	Retries             uint64        // operations started again (conflict, failure, torn read)
	Takeovers           uint64        // locks taken from failed holders
	Repairs             uint64        // keys whose replicas this rank made consistent again
	RecoveryChecks      uint64        // keys this rank's recovery looked at after failures
	GrowKeys            uint64        // keys this rank copied to new replicas during Grow
	GrowBytes           uint64        // bytes of records it wrote to them (one count per replica written)
	GrowTime            time.Duration // how long this rank's last Grow or Join that succeeded took
	KeysHeld            int           // key slots in use at this rank
	HeapAttached        uint64        // bytes of heap this rank has attached
	HeapLive            uint64        // bytes of live values in this rank's heap
}

// Store is one rank's handle on a replicated key-value store. Its methods may
// be called from any goroutine.
type Store struct {
	cur    atomic.Pointer[view] // the window, communicator and placement operations use (see grow.go)
	me     ftrma.Rank
	n      int
	opt    Config
	chunk0 uint64 // offset of the chunk table in a table region
	seen0  uint64 // offset of the failures-seen bitmap (see fastread.go)
	// verdict is how long an operation keeps waiting for a replica that
	// fails without a verdict (unreachable, not declared failed): the
	// runtime's verdict bound (see verdictBound).
	verdict time.Duration
	// holdFor, when set (tests), replaces holdBound's bound (see hold.go).
	holdFor time.Duration

	settled struct {
		sync.Mutex
		ranks map[ftrma.Rank]bool // failed ranks every live rank knows of
	}

	table    []uint64     // this rank's table region (nil once closed)
	tableMem []byte       // the same memory, as allocated
	memMu    sync.RWMutex // Close's release of the memory against Stats' reads
	heap     struct {
		sync.Mutex
		mem      [][]byte // attached chunks
		addrs    []uint64 // their window addresses, in the same order
		attached uint64
		entries  atomic.Int64 // chunk table entries in use: the first ones
	}

	keys     keyLocks
	ownArena arena      // the housekeeping's allocations at this rank (compaction)
	claiming []waitLock // held while this process claims a key slot at a rank

	sip sipKey // the keyed hash's key, agreed at Open

	cache struct {
		sync.Mutex
		slot  map[keyAt]slotID   // where a key's slot is at a rank
		lock  map[slotRef]uint64 // the free lock word last seen in a slot
		chunk map[regionRef]int  // chunk entry of a heap region at a rank
		desc  map[slotRef]desc   // a slot's record, as last seen
	}

	leases struct {
		sync.Mutex
		m         map[ident]*lease
		contended map[ident]time.Time
	}

	// decide is held while this process writes its rank's decision
	// record (a reservation of numbers, or a Commit's decision), and
	// guards tx: each write carries the whole record as it stands.
	decide waitLock
	tx     txNumbers

	growing atomic.Bool // a Grow is under way

	// gate is what Snapshot closes to take its cut: the public operations,
	// once each, and each unit of background work that writes hold its
	// read side; the passes that end leases do not (DESIGN.md §8.2).
	gate    sync.RWMutex
	lastCut atomic.Uint64 // the last snapshot cut this rank took or restored
	snapMu  sync.Mutex    // one Snapshot at a time
	// heapPins counts the snapshot copies that read this rank's heap after
	// their cut: while any does, no chunk is reclaimed (cutCopy).
	heapPins atomic.Int32
	lastSnap atomic.Pointer[knownSnapshot] // the last snapshot taken or restored here

	closed atomic.Bool
	// owned are the communicators Respawn and JoinRespawned made: Close
	// closes them after its windows.
	owned struct {
		sync.Mutex
		cs []interface{ Close() error }
	}
	stop chan struct{}
	done chan struct{}
	kick chan chan int // asks the housekeeping to compact now (compactNow)

	st struct {
		puts, gets, fast, deletes, commits, aborts, retries, takeovers, repairs, checks atomic.Uint64
		growKeys, growBytes                                                             atomic.Uint64
		growTime                                                                        atomic.Int64 // nanoseconds
	}
}

// desc is where a record lies: its block's address and length.
type desc struct{ addr, len uint64 }

// ident is a key as the store's operations carry it: the full key, which is
// its identity, and its keyed hash, which places it and starts its probes.
type ident struct {
	h   uint64
	key string
}

// keyAt names a key at a rank; slotRef a key slot (index) at a rank;
// regionRef a heap region (window address >> 40) at a rank. Each is of
// the processes of one epoch (view.epoch): what the caches hold of a rank
// is of the process that was that rank when it was learned, and means
// nothing to an operation of a later epoch, where the rank may be another
// process (F31).
type (
	keyAt struct {
		epoch uint64
		rank  ftrma.Rank
		key   string
	}
	slotRef struct {
		epoch uint64
		rank  ftrma.Rank
		slot  int
	}
	regionRef struct {
		epoch  uint64
		rank   ftrma.Rank
		region uint64
	}
)

// ident returns key's identity under this store's hash.
func (s *Store) ident(key []byte) ident { return ident{s.hash(key), string(key)} }

// hash is the key's keyed hash (SipHash-2-4 under the store's key), never 0.
func (s *Store) hash(key []byte) uint64 {
	var h uint64
	if hook := testHookHash.get(); hook != nil {
		h = hook(key)
	} else {
		h = sipHash24(s.sip, key)
	}
	if h == 0 {
		h = 1
	}
	return h
}

// Open creates a store over c. Collective: every rank of c calls it with the
// same options. The store uses the ranks of c as they are numbered now, for
// its whole life; failed ranks are left out of placement, no Shrink needed.
func Open(ctx context.Context, c window.Comm, opt Config) (*Store, error) {
	if err := opt.withDefaults(c.Size()); err != nil {
		return nil, &ftrma.OpError{Op: "store open", Rank: -1, Err: err}
	}
	w, err := window.CreateDynamic(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := opt.fitChunks(w.RegionLimit()); err != nil {
		w.Free(ctx)
		return nil, &ftrma.OpError{Op: "store open", Rank: -1, Err: err}
	}
	s := newStore(c, opt)
	s.tx.loaded = true // the rank's first process: no decision record yet
	v := &view{w: w, c: c, fast: w.WholeWords()}
	v.arenas, v.keyArenas = newArenas(s.n), newArenas(s.n)
	addr, err := s.makeTable(w)
	if err != nil {
		w.Free(ctx)
		return nil, err
	}
	// Every rank contributes 128 random bits to the hash's key; the key is
	// their sum (xor), so no rank alone chooses it.
	mine := make([]byte, 24, 24+len(opt.Host))
	binary.LittleEndian.PutUint64(mine, addr)
	if _, err := rand.Read(mine[8:24]); err != nil {
		w.Free(ctx)
		return nil, err
	}
	mine = append(mine, opt.Host...)
	all, err := c.Allgather(ctx, mine)
	if err != nil {
		w.Free(ctx)
		return nil, err
	}
	v.tables = make([]uint64, s.n)
	v.hosts = make([]string, s.n)
	for r, b := range all {
		if len(b) < 24 {
			continue // a failed rank
		}
		v.tables[r] = binary.LittleEndian.Uint64(b)
		s.sip.k0 ^= binary.LittleEndian.Uint64(b[8:])
		s.sip.k1 ^= binary.LittleEndian.Uint64(b[16:])
		v.hosts[r] = string(b[24:])
	}
	v.place = newPlacement(opt.Copies, v.hosts)
	s.setView(v)
	o := s.begin()
	for range opt.Reserve {
		o.attachChunk(opt.ChunkSize)
	}
	o.end()
	if err := c.Barrier(ctx); err != nil {
		w.Free(ctx)
		return nil, err
	}
	go s.housekeeping()
	return s, nil
}

// newStore returns a store handle of this rank of c, without memory or view.
func newStore(c window.Comm, opt Config) *Store {
	s := &Store{me: c.Rank(), n: c.Size(), opt: opt, verdict: verdictBound(c), stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan chan int)}
	s.keys.m = map[ident]*keyLock{}
	s.cache.slot = map[keyAt]slotID{}
	s.cache.lock = map[slotRef]uint64{}
	s.cache.chunk = map[regionRef]int{}
	s.cache.desc = map[slotRef]desc{}
	s.leases.m = map[ident]*lease{}
	s.leases.contended = map[ident]time.Time{}
	s.claiming = make([]waitLock, s.n)
	s.settled.ranks = map[ftrma.Rank]bool{}
	s.chunk0 = uint64(hdrWords+opt.Slots*slotWords) * 8
	s.seen0 = s.chunk0 + uint64(opt.Chunks*chunkBytes)
	return s
}

// makeTable allocates this rank's table in w and attaches it; it returns
// the table's address.
func (s *Store) makeTable(w *window.Window) (uint64, error) {
	tbl, err := w.Alloc((hdrWords + s.opt.Slots*slotWords + s.opt.Chunks*chunkWords + seenWords(s.n)) * 8)
	if err != nil {
		return 0, err
	}
	table := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(tbl))), len(tbl)/8)
	table[hdrMagic] = tableMagic
	for i := range s.opt.Chunks {
		table[int(s.chunk0/8)+i*chunkWords+chunkOwner] = chunkNotReady
	}
	addr, err := w.Attach(tbl)
	if err != nil {
		w.Release(tbl)
		return 0, err
	}
	s.tableMem, s.table = tbl, table
	return addr, nil
}

// Close stops this rank's handle: its housekeeping ends and every later call
// returns ErrClosed. Collective when the ranks are alive (it frees the
// window, which synchronizes with the other live ranks); it returns after
// failures too. Then it closes the communicators Respawn and
// JoinRespawned made.
func (s *Store) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	close(s.stop)
	<-s.done
	s.leases.Lock()
	var held []ident
	for h := range s.leases.m {
		held = append(held, h)
	}
	s.leases.Unlock()
	for _, h := range held {
		s.endLease(h)
	}
	s.current().w.FlushAll(ctx)
	err := s.current().w.Free(ctx)
	// The memory may be a shared mapping (shm): once released, nothing may
	// read it, so Stats waits for this and then stops reading the table.
	s.memMu.Lock()
	s.heap.Lock()
	for _, m := range s.heap.mem {
		s.current().w.Release(m)
	}
	s.heap.mem, s.heap.addrs = nil, nil
	s.heap.Unlock()
	s.current().w.Release(s.tableMem)
	s.table, s.tableMem = nil, nil
	s.memMu.Unlock()
	s.closeOwned()
	return err
}

// Stats returns this rank's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Puts: s.st.puts.Load(), Gets: s.st.gets.Load(), FastGets: s.st.fast.Load(), Deletes: s.st.deletes.Load(),
		Commits: s.st.commits.Load(), Aborts: s.st.aborts.Load(), Retries: s.st.retries.Load(),
		Takeovers: s.st.takeovers.Load(), Repairs: s.st.repairs.Load(), RecoveryChecks: s.st.checks.Load(),
		GrowKeys: s.st.growKeys.Load(), GrowBytes: s.st.growBytes.Load(), GrowTime: time.Duration(s.st.growTime.Load()),
	}
	s.memMu.RLock()
	defer s.memMu.RUnlock()
	if s.table == nil {
		return st // closed: the table is gone
	}
	for i := range s.opt.Slots {
		if k := atomic.LoadUint64(&s.table[hdrWords+i*slotWords+slotKey]); k != 0 && k != slotTomb {
			st.KeysHeld++
		}
	}
	s.heap.Lock()
	st.HeapAttached = s.heap.attached
	s.heap.Unlock()
	st.HeapLive = s.heapLive()
	return st
}

// Rank is this rank.
func (s *Store) Rank() ftrma.Rank { return s.me }

// Copies is the number of replicas each key has.
func (s *Store) Copies() int { return s.opt.Copies }

func (s *Store) check(op string, key []byte, value []byte) error {
	switch {
	case s.closed.Load():
		return &ftrma.OpError{Op: op, Rank: -1, Err: ErrClosed}
	case len(key) == 0:
		return &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: empty key", ftrma.ErrInvalid)}
	case len(key) > s.opt.MaxKeySize:
		return &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: key of %d bytes, limit %d", ftrma.ErrInvalid, len(key), s.opt.MaxKeySize)}
	case len(value) > s.opt.MaxValueSize:
		return &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: value of %d bytes, limit %d (Config.MaxValueSize)", ftrma.ErrInvalid, len(value), s.opt.MaxValueSize)}
	case len(key) >= len(reservedPrefix) && string(key[:len(reservedPrefix)]) == reservedPrefix:
		return &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: keys starting with %q are the store's own", ftrma.ErrInvalid, reservedPrefix)}
	}
	return nil
}

// reservedPrefix starts the store's own keys (transaction decisions).
const reservedPrefix = "\x00ftkv."

// waitLock is a mutex for what this process holds while it waits for peers
// (a claim at a rank, an arena's chunk, a transaction's decision): a waiter
// gives up when its context ends, where a sync.Mutex would keep it until
// the holder's remote wait ended. The zero value is unlocked.
type waitLock struct {
	once sync.Once
	ch   chan struct{} // holds a token while locked
}

func (l *waitLock) c() chan struct{} {
	l.once.Do(func() { l.ch = make(chan struct{}, 1) })
	return l.ch
}

// lock takes l, or returns ctx's error once ctx ends first.
func (l *waitLock) lock(ctx context.Context) error {
	select {
	case l.c() <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *waitLock) unlock() { <-l.c() }

// keyLocks serializes this process's operations on one key: the lock word
// names a rank, not a goroutine.
type keyLocks struct {
	mu sync.Mutex // guards m
	m  map[ident]*keyLock
}

type keyLock struct {
	ch   chan struct{}
	refs int
}

// ref returns the key's lock, counting one more user of it.
func (k *keyLocks) ref(h ident) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.m[h]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[h] = l
	}
	l.refs++
	return l
}

func (k *keyLocks) lock(ctx context.Context, h ident) error {
	l := k.ref(h)
	select {
	case l.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		k.release(h, l)
		return ctx.Err()
	}
}

// tryLock takes the key's process lock if it is free.
func (k *keyLocks) tryLock(h ident) bool {
	l := k.ref(h)
	select {
	case l.ch <- struct{}{}:
		return true
	default:
		k.release(h, l)
		return false
	}
}

func (k *keyLocks) unlock(h ident) {
	k.mu.Lock()
	l := k.m[h]
	k.mu.Unlock()
	<-l.ch
	k.release(h, l)
}

func (k *keyLocks) release(h ident, l *keyLock) {
	k.mu.Lock()
	l.refs--
	if l.refs == 0 {
		delete(k.m, h)
	}
	k.mu.Unlock()
}

// verdictBound is how long the store waits for the fate of a replica that
// fails without being declared failed (a connection broken or cut, the
// peer not yet judged): the communicator's VerdictBound (comm.Comm: the
// job's chain of failure bounds, failure.Chain), so that no operation gives
// up on a replica before the runtime could have decided that replica's
// fate. A communicator that does not say gets defaultVerdictBound.
func verdictBound(c window.Comm) time.Duration {
	if v, ok := c.(interface{ VerdictBound() time.Duration }); ok {
		if d := v.VerdictBound(); d > 0 {
			return d
		}
	}
	return defaultVerdictBound
}

// defaultVerdictBound is verdictBound for a communicator that does not say
// how long its verdicts take.
const defaultVerdictBound = 10 * time.Second

// localBound bounds waits that involve no peer: a flush toward this rank's
// own memory, the moment between a window's rebuild and the install of the
// view that holds the new one. Only a broken process exceeds it.
const localBound = 10 * time.Second
