// Package verbs is the RDMA transport: one-sided operations over
// reliable-connected queue pairs of libibverbs, loaded with dlopen at run
// time (a binary built with -tags verbs still starts, and says why, on a
// host without the library or a device; without the tag or cgo, Open fails
// at once). It is tested on Soft-RoCE (rdma_rxe) in qemu guests:
// scripts/verbs-test.sh.
//
// A rank:
//
//  1. Opens its transport (Open): the device Select chooses, a send and a
//     receive completion queue, one queue pair per rank (a loopback pair for
//     itself, so that its own atomics go through the device too), staging
//     memory and a key table peers read (registered read-only for them:
//     peers resolve keys by reading it and can never write it).
//  2. Publishes Addr through the rendezvous and calls Connect with every
//     rank's address; the progress goroutine starts.
//  3. Registers memory (Register) and posts operations: Write, Read,
//     CompareAndSwap64, FetchAndAdd64 become RDMA WRITE, READ and atomic
//     work requests; a peer's key is resolved by reading its key table once.
//  4. Waits (Wait, Flush), sends control messages (Send), fences (Fence),
//     and closes (Close).
//
// Completions. Work requests toward one peer complete in posting order. The
// send completion queue is polled by whoever holds Transport.pollMu:
//
//   - the post of an operation polls it once in the same C call (on
//     Soft-RoCE the whole exchange of a write or an atomic often runs inside
//     the post, so its completion is already there);
//   - a waiter (Wait, Flush) busy-polls it in C for up to Config.Spin, one
//     call returning as soon as completions come;
//   - a waiter still waiting after that arms the queue (an event at its next
//     completion) and parks; the progress goroutine, asleep on the
//     completion channel through Go's poller, takes the event, polls and
//     completes.
//
// The send queue is armed only when someone needs the event: by a waiter
// that parks, by Send, by Push, and by the progress goroutine before it
// sleeps while work requests are in flight. An operation that nobody waits
// for and that did not complete within its post is therefore completed by
// the next operation, Wait, Flush or Push, or when the progress goroutine
// next wakes (any message or event), not at once; its memory (staging,
// ring entries) stays taken until then. The receive queue is always armed
// while the progress goroutine sleeps.
//
// Failures. A peer is down when a completion toward it fails (the device
// gave up after the retries of ackTimeout, chosen so that this happens
// within Config.Bound), when its queue pair is flushed, when it is fenced
// (Fence: its queue pair goes to the error state and is destroyed, so the
// device refuses what it still sends), when the launcher reports it gone
// (PeerDown), or when it said goodbye. Its pending and later operations
// then fail with ftrma.ErrProcFailed, and the Receiver hears of it once.
// Fence first sends the peer a fenced notice, if its queue pair still
// works, and waits briefly for the device to deliver it: a fenced rank that
// still runs then counts the fencer down without having to send anything.
//
// Spares (transport.Admitter). In a job started with spares, every rank
// makes queue pairs for all ranks at Open, spares included, with receive
// buffers posted; those toward the spares (Config.Absent) stay in INIT,
// where the device drops what arrives, and operations toward them fail
// with transport.ErrAbsent. A spare starts later with Config.Late, the
// spares not started yet absent, and the ranks that failed before it
// reported with PeerDown before Connect; it publishes its address like any
// rank, and its Connect gets each live rank's address as the spare needs
// it. A live rank's Admit brings its queue pair for the spare to
// ready-to-send toward the spare's, keeps where the spare's key table is,
// and sends the spare a hello. The spare posts nothing toward a rank
// before that rank's hello (its operations wait, its messages are
// queued), so nothing it sends meets a queue pair still in INIT and runs
// out of retries. Fencing is unchanged: a spare is a fresh rank, so no
// late packet of the rank it replaces can reach its queue pairs.
//
// Messages. A control message goes as fragments of one receive buffer each,
// put back together by the receiver (reassembly, a pure type). A message
// under way holds at most transport.MaxControlMessage bytes per peer; a
// longer one breaks the peer's stream and takes it down. When a peer goes
// down its message under way is dropped, and so are later fragments of
// messages in pieces from it: nothing it sent in part stays held.
package verbs
