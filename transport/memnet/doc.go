// Package memnet is an in-process transport for tests: a Network of n ranks in
// one process, each with a Transport that implements transport.Transport, and
// hooks that crash ranks and cut, delay or thin out links while traffic flows.
// Simulations of hundreds of ranks run on it, under testing/synctest when they
// need time.
//
// # Model
//
// memnet emulates one-sided operations the way transport/tcp does: an
// operation posted toward a peer travels as a message over the (origin, peer)
// link, the peer's goroutine executes it against the peer's transport.Memory
// (which checks the region, bounds and alignment; its verdict becomes the
// operation's error at the origin), and a reply travels back over the
// reverse link and completes the operation in the origin's
// transport.Completion. Everything sent on one link, operations and control
// messages alike, is executed or delivered in sending order. Caps are
// CapOrdered|CapRemoteCompletion|CapLocalAtomics|CapWholeWords.
//
// Each endpoint runs one goroutine, which executes operations, applies
// replies and calls the Receiver; a Network of n ranks runs n goroutines. All
// waiting (the goroutines, Wait and Flush) parks on channels, never on
// timers except for messages a Delay holds back, so tests under
// testing/synctest can use synctest.Wait and fake time.
//
// Links queue without bound: posting never blocks.
//
// # Spares
//
// NewSpares(n, s) makes a network of n started ranks and s spares, as a job
// started with spares: the spares are absent at every endpoint until it
// admits them (transport.Admitter; Admit ignores its address). Operations
// toward an absent rank fail at once with transport.ErrAbsent; what a spare
// sends to an endpoint that has not admitted it waits there, in order,
// until Admit. A spare's endpoint sees ranks 0 to n-1 as started and
// admits the spares started before it.
//
// # Fault injection
//
//   - Network.Crash(r): r dies as if SIGKILLed. Its in-flight operations and
//     messages are dropped; every other rank's operations toward r fail with
//     an error wrapping ftrma.ErrProcFailed and its Receiver gets
//     HandlePeerDown(r) once.
//   - Network.Cut(a, b), Network.Isolate(r), Network.Heal(a, b): links silently
//     drop everything, with no peer-down event: operations across them hang
//     until the caller's context ends, as for a real partition that only a
//     failure detector can diagnose. Operations lost this way fail with
//     ErrLost once a later one completes after Heal.
//   - Network.Drop(from, to, p): drops control messages (only) with
//     probability p, from a per-link random stream seeded by
//     Network.SetSeed (seed 1 by default). One-sided operations model a
//     reliable connection and are never dropped by Drop.
//   - Network.Delay(from, to, d): delays every message on the link by d,
//     keeping FIFO order.
//
// Transport.Fence and Transport.Close behave as closing a TCP connection:
// the peer is told (unless the link is cut), gets HandlePeerDown and its
// operations toward the fencing rank fail.
//
// # Caller's duties
//
//  1. Create the network with New(n) and defer its Close, which stops every
//     goroutine (under synctest, create it inside the bubble).
//  2. For each rank, take its endpoint with Endpoint(r) and SetReceiver on it;
//     messages arriving earlier are held for the receiver.
//  3. Register the memory peers may touch, keep it alive until Deregister,
//     and hand the keys to the peers (in-process: pass them directly).
//  4. Post operations; treat a Read's dst and an atomic's result as the
//     transport's until Wait or Flush reports completion.
//  5. Wait or Flush with a context: across a cut link only the context ends
//     the wait.
//  6. Inject faults with the Network's hooks at any time, from any goroutine.
//  7. Never call Wait, Flush, Close or Network.Close from a Receiver method;
//     Send and Fence are fine.
//
// Example:
//
//	net := memnet.New(2)
//	defer net.Close()
//	a, b := net.Endpoint(0), net.Endpoint(1)
//	mem := make([]byte, 64)
//	key, _ := b.Register(mem)
//	seq, err := a.Write(1, key, 0, []byte("hello"))
//	if err == nil {
//		err = a.Wait(ctx, 1, seq) // mem[:5] now reads "hello"
//	}
//	net.Crash(1)
//	err = a.Flush(ctx, 1) // nil: nothing was pending
//	_, err = a.Write(1, key, 0, []byte("x")) // errors.Is(err, ftrma.ErrProcFailed)
package memnet
