// Package shm is ftrma's transport between the processes of one host: each
// rank's registered memory lives in shared-memory segments that the other
// ranks map, so Write and Read are memory copies and CompareAndSwap64 and
// FetchAndAdd64 are hardware atomics on the mapping, all done by the origin
// while the target takes no part. Control messages travel through
// single-producer single-consumer rings in shared memory, and a "bell" (a
// named pipe) wakes the receiver. It implements transport.Transport and
// transport.Allocator, and needs Linux (elsewhere Open fails).
//
// # Segments and names
//
// Every file of a job is in Config.Dir, by default the job's own directory
// JobDir("", job) = /dev/shm/ftrma-<job>, mode 0600, and named after the job
// and the owning rank:
//
//	ftrma-<job>-<rank>-ctl        control segment, made by Open, removed by Close
//	ftrma-<job>-<rank>-ctl.tmp    the same while Open fills it in
//	ftrma-<job>-<rank>-bell       its bell, a named pipe, made by Open before the control segment, removed by Close
//	ftrma-<job>-<rank>-seg-<id>   a data segment, made by Alloc, removed by Release or Close
//
// A rank derives every peer's names from (Dir, Job, rank, segment id): there
// is no rendezvous. RemoveJob removes every file of a job, including those of
// ranks that were killed; the launcher calls it when the job ends.
//
// # A private place
//
// The directory is the job's private place: PrepareDir (which Open calls,
// and the launcher before any rank starts, so that the job's id is never
// visible outside it) makes it mode 0700 if it is missing, and Open refuses
// a directory that is a symbolic link, belongs to another user, or lets
// anyone else make files in it (mode bits 022). Another local user
// therefore can neither see (in the default directory) nor take the names
// a job will use next, nor open its files. (On the
// shared /dev/shm, whose sticky bit keeps others from removing what is
// ours, a directory another user made first under a job's name is refused
// with an error naming it and its owner; job ids are random, so that user
// would have had to guess one.) The default directory is removed by the
// last Close that leaves it empty, and by the launcher.
//
// Every open rank holds a shared lock (an open-file-description lock,
// F_OFD_SETLK, F_RDLCK, over the whole file) on its control segment until
// Close or its death, when the kernel drops it. OpenRanks tests those
// locks: it tells a live job from a dead one without seeing its processes,
// so a sweep from another PID namespace that shares /dev/shm (containers of
// one pod) never mistakes a running job for a stale one.
//
// Within it too (a directory given as Config.Dir is checked, not trusted), a
// rank makes each of its files only if the name is free (O_EXCL,
// mode 0600; a file already there is an error naming it, wrapping
// fs.ErrExist), and it maps or opens a file, its own or a peer's, only if it
// is of the right kind (a regular file, or a named pipe for a bell), owned
// by the rank's own effective user, and not a symbolic link (O_NOFOLLOW,
// then fstat). A file that fails this check is refused with an error naming
// it (ftrma.ErrInvalid for a peer's segment).
//
// A control segment (sizes for m served ranks, R = Config.RingBytes, K =
// Config.Regions; every word accessed atomically, words written by different
// processes on different 64-byte lines):
//
//	header   512 B      magic, version, job size, rank, R, K, pid, file size;
//	                    state (open, closed), m and a fingerprint of the
//	                    served ranks; the sleeping flag, epoch, release
//	                    count, barrier flag
//	readers  64 × 64 B  per processor of the owner's Go runtime: the rank
//	                    whose memory an operation running there accesses,
//	                    and a count of those operations (the fast path)
//	active   m × 64 B   per served origin rank: operations under way here
//	                    (two counters, by epoch) and the fence flag for that
//	                    origin
//	keys     K × 32 B   key table: state (key<<8|1, or 0), segment id, offset,
//	                    length
//	rings    m × 256 B  the header of the incoming ring from each served
//	                    rank: head (consumer), tail (producer), closed flag,
//	                    space count and waiting flag
//	data     m × R      page aligned, R rounded up to whole pages: each
//	                    ring's messages
//
// The served ranks are Config.Ranks, by default all Size ranks of the job;
// a job spread over hosts gives each host's ranks the list of that host's
// ranks, and reaches the other hosts through another transport
// (transport/multi combines them). A served rank's active line and ring
// are found by its slot, its position in the sorted list, so every served
// rank must be given the same list: a peer whose header names another count
// or fingerprint is refused with ftrma.ErrInvalid. Ranks not served are
// never mapped; operations, Send, Flush and Fence toward them fail with
// ftrma.ErrInvalid.
//
// # Memory and one-sided operations
//
// Alloc makes a data segment of its own (a file of whole pages, reserved with
// fallocate so that a full file system fails Alloc rather than a later
// access) and maps it. Register accepts any part of Alloc's memory, and
// other memory as a target-executed region (below); it publishes the region
// in the key table and returns a key
// whose low bits pick the table slot and whose high bits count the slot's
// uses, so keys are not reused. An origin resolves (rank, key) itself: it
// reads the target's key table, maps the named segment on first use (and
// keeps the mapping), checks bounds and, for atomics, alignment, and does the
// operation. Writes and reads of up to transport.WordAtomicWrite bytes move
// every aligned 8-byte word whole; those larger than half of transport.CopyChunk go
// in pieces of that size, each such an access, with the other goroutines of
// the rank let run in between (a copy cannot be preempted). An operation is complete when its call
// returns (Wait and Flush never block), and its
// errors are reported by the next Wait or Flush, as with every transport.
//
// While it accesses a target, an origin is announced, and only then reads
// the target's state, its fence flag and the key table: Deregister clears
// the key's entry, and Fence raises the flag, and then each waits for the
// origins announced before, so that no access that found the key (or no
// flag) runs on after it returns (see Config.DrainTimeout). Release removes
// the file and counts the release; an origin that sees the count change
// unmaps the segments whose files are gone. An origin announces itself in
// one of two ways.
//
// # Target-executed regions
//
// Memory not from Alloc (a caller's own buffer: window.Create's) cannot be
// mapped by peers. Register still publishes it, marked in its key-table
// entry as executed by its owner, and an origin that finds the mark sends
// its operation as a request in its ring to the owner, tagged as the
// transport's own in the message header, and waits for the answer; the
// owner's progress goroutine executes it (bounds, alignment, whole words,
// sync/atomic: transport.Memory) unless it fenced the origin, and answers
// without ever waiting for room in the origin's ring. So the operation is
// still complete when its call returns, and operations toward a peer stay in
// order. Fence waits for a request being executed; Deregister for the
// requests executing on the region; an operation waiting for an answer fails
// when the owner goes down or this rank closes. Who writes what is listed in
// foreign.go.
//
// # The fast path
//
// Where the kernel has membarrier(2)'s global expedited command (Open
// registers for it, and says so in the header's barrier flag), an operation
// between two ranks that both registered costs no read-modify-write and
// takes no lock. The origin pins its goroutine to its Go processor P (the
// runtime's procPin, as sync.Pool does), stores a new count and then the
// target's slot into its own reader line for P with plain stores, reads the
// target's state, fence flag and key entry, finds the region in a cache of
// resolved keys, does the operation, stores 0 into the line and unpins. The
// target's Deregister and Fence, having stored their change, issue the
// barrier, which runs a full memory barrier on every CPU running a thread of
// a registered process, and then wait until every reader line of every
// local rank that named the target has changed (its target or its count).
// Why no access can land late:
//
//   - One writer per line. A pinned goroutine cannot be preempted, so no
//     other goroutine runs on P until it unpins: P's line has one writer,
//     and the stores need no atomicity beyond that of an aligned word. The
//     thread under P may still be descheduled by the kernel, which is a
//     full barrier of its own and leaves the line announced.
//   - Announcement before the reads. If the target's wait did not see the
//     origin's announcement, that store was not visible when the barrier
//     had run on the origin's CPU; it came after that CPU's barrier, and so
//     did the origin's later reads, which therefore see the cleared entry
//     or the raised flag, stored before the barrier was issued. If the wait
//     did see it, it waits for that access to end (the count changes with
//     each access, so a stream of later accesses, which do see the change,
//     does not hold it up).
//   - Mappings stay valid. An origin unmaps a peer's memory (the peer is
//     down, released a segment, or this rank closes) only after making it
//     unreachable (the peer's fast-path pointer cleared, the key cache
//     emptied, closed set) and waiting a grace period in which every pinned
//     goroutine of the process has unpinned: the runtime stops the world
//     (runtime.ReadMemStats), which waits for every P to reach a safe point,
//     which a pinned goroutine is not.
//   - Nothing that can block runs pinned, and no error is made there: a key
//     not in the cache, a peer not yet mapped, released segments to sweep, a
//     processor numbered 64 or more, a peer that did not register, and
//     anything that fails (a peer that left or fenced this rank, a key not
//     registered, bytes out of bounds, a misaligned atomic) send the
//     operation down the slow path, which finds the same and says so. The
//     slow path maps what it needs under the peer's mapping lock and counts
//     itself in the target's active table with read-modify-writes
//     (the counter the target's epoch selects; Deregister flips the epoch
//     and waits for the other's count to reach zero). The waits check
//     both. Config.SlowPath (or FTRMA_SHM_SLOWPATH=1) sends every operation
//     this way.
//
// A pinned goroutine holds up the runtime's stop-the-world pauses for as long
// as its copy takes: at most half of transport.CopyChunk (about 20 µs).
// On x86-64 the announcements are plain stores; elsewhere they are atomic
// stores (store-release), as the memory model there is weaker. With no
// read-modify-write at the end of an operation, Flush runs a full barrier
// itself. TestNoLateWriteAcrossProcesses, with the waits
// left out on purpose, sees late writes in most rounds; with them, none.
//
// # Control messages
//
// A message is copied into the receiver's ring for the sender, behind an
// 8-byte length (whose top bits say that another piece of the message
// follows, and that the message is the transport's own: a request or
// answer of a target-executed region, never handed to the receiver), after which the sender publishes the new tail and, if the
// receiver said it sleeps, rings its bell (writes a byte to its named pipe).
// A full ring makes Send wait: it spins, then parks until the receiver,
// which rings the sender's bell when it frees room for a waiting sender,
// wakes it, or a pause (50 µs, doubling up to 10 ms) passes. Each
// rank's progress goroutine polls its rings, delivers in order per sender,
// spins for Config.Spin after the last message (by default only on hosts with
// two CPUs per rank), then parks on its bell for at most 10 ms. It parks by
// reading the pipe through Go's network poller, so a parked progress
// goroutine holds no processor: a rank limited to one (GOMAXPROCS=1, as
// ftrun sets when ranks outnumber CPUs) goes on with its other goroutines at
// once, among them the one that hears from the launcher that a peer died. (A
// futex wait is a blocking system call that keeps the processor until the
// runtime's monitor takes it back, which took 15-25 ms per failure notice.)
//
// # Failures and fencing
//
// Peer death is not detected here: the launcher learns that a process exited
// and calls PeerDown. The launcher also marks a reaped rank's control segment
// exited (MarkExited) and rings the bells of the host's ranks: their
// progress goroutines and their operations toward it see the mark and report
// it down with transport.ErrPeerExited at once. Operations and Send toward a down peer fail with an
// error wrapping ftrma.ErrProcFailed, its messages are no longer delivered,
// its mappings are dropped, and the receiver gets HandlePeerDown once.
//
// Fence raises this rank's fence flag for the peer, which the peer's
// operations check after announcing themselves (see "The fast path"), and
// waits for the ones under way, then cuts the peer off as PeerDown does. A
// peer that sees the flag treats the fencing rank as down. But shared memory a process has
// mapped cannot be revoked: a fenced peer that ignores the flag (a bug, a
// process stopped in the middle of an operation) can still write. A rank
// declared failed must therefore be killed by the launcher, as ftrun does.
//
// Close flags its ring into each peer closed after its last message and
// marks its control segment closed: peers' operations toward it fail with
// transport.ErrPeerLeft (and ftrma.ErrProcFailed), and their progress
// goroutines deliver what it sent, then report it down with ErrPeerLeft.
//
// # Limits
//
//   - One host; Linux; the ranks of a host must agree on Size, Ranks, Job
//     and Dir.
//   - Each rank's control segment has a ring per served rank. Open reserves
//     all of it but the rings' data; a sender reserves its ring's R bytes
//     (fallocate) before its first message into it, and a ring that never
//     carried a message is never touched, so its pages are never allocated.
//     m ranks on a host therefore use m·(512 + 320·m + 32·K) bytes, plus R
//     per ordered pair of ranks that exchanged a message: with ftrma's
//     runtime (a heartbeat ring, binomial trees) about 2·log2(m)+2 pairs per
//     rank, not m. A sender that cannot reserve its ring (the file system is
//     full) gets an error from Send.
//   - At most Config.Regions regions registered at once per rank, and about
//     16 million registrations over a transport's life.
//   - Every Alloc is a file and a mapping of whole pages.
//   - Send waits while the peer's ring is full; a Receiver that sends can
//     therefore wait for a peer's receiver.
//   - A rank cannot rejoin: its name is taken until Close or RemoveJob. A
//     failed rank is replaced by a spare, a rank of another number (below).
//
// # Spares
//
// A job started with spare ranks (transport.Admitter) lists the spares in
// Ranks from the start, on every host a spare may start on, so that every
// control segment has their slots (m counts them, and so must the
// launcher's sizing, ControlBytes(m)), and in Config.Absent. An absent rank
// is not waited for by Connect, operations toward it fail with
// transport.ErrAbsent, and what it sends waits in its ring. A spare opens
// its transport when it starts (its segments exist before it publishes its
// address), with the spares not started yet in its own Config.Absent, and
// reports the ranks that failed before it with PeerDown before Connect.
// Admit(spare, addr) makes it a peer: its control segment is mapped on
// first use, and its ring is read from then on. PeerDown or Fence toward an
// absent rank makes it failed for good.
//
// # Use
//
//  1. Open(cfg) on every rank of the host (cfg.Ranks lists them when the job
//     spans hosts): it creates the rank's control segment, so peers can
//     reach the rank as soon as Open returns.
//  2. SetReceiver, before peers send (their messages wait in the ring until
//     then).
//  3. Connect(ctx): it maps every served peer's control segment, waiting for
//     ranks that have not opened yet.
//  4. Alloc memory, Register it, publish the keys; post operations; Send.
//  5. Call PeerDown when the launcher reports a rank's exit; Fence ranks
//     declared failed (and have the launcher kill them).
//  6. Close; the launcher calls RemoveJob when the job is over.
//
// Example:
//
//	t, err := shm.Open(shm.Config{Rank: rank, Size: n, Job: job})
//	if err != nil {
//		return err
//	}
//	defer t.Close()
//	t.SetReceiver(recv)
//	if err := t.Connect(ctx); err != nil {
//		return err
//	}
//	mem, _ := t.Alloc(4096)
//	key, _ := t.Register(mem) // publish key to the peers
//	var old uint64
//	seq, err := t.CompareAndSwap64(peer, peerKey, 0, 0, 1, &old) // done on return
//	if err == nil {
//		err = t.Wait(ctx, peer, seq) // reports a bounds or region error
//	}
package shm
