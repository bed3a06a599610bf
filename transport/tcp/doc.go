// Package tcp is ftrma's fallback transport: one authenticated TCP connection
// per pair of ranks, length-prefixed frames, and one-sided operations emulated
// at the target.
//
// The target's progress goroutine for each connection executes Write, Read,
// CompareAndSwap64 and FetchAndAdd64 against the regions registered in its
// transport.Memory (bounds-checked, atomics with sync/atomic) and answers; the
// origin completes its operations in order from the answers. Caps says so: the
// transport is ordered and remotely complete, but not one-sided.
//
// Latency: a Go goroutine woken by the netpoller costs several microseconds, so
// the transport busy-polls its sockets for a short while (Config.Spin): a rank
// waiting in Wait or Flush reads its connection itself, and a target keeps
// reading for Spin after each request it served. Ranks that outnumber the host's
// cores should not spin (package startup sets Spin negative then).
//
// Batching: posting goroutines write frames straight to the socket, and frames
// posted while another goroutine is writing are gathered and written together
// by it; a target answers everything it read in one batch with one write
// (one more per large read answer, below).
//
// Large operations: writes and reads go in frames of at most 1 MiB. A
// write's frames go straight from the caller's buffer to the socket, so its
// Write returns once the socket took them (padded, as large read answers
// are, see gather.go). A read keeps at most 4 MiB of
// frames in flight and posts the rest as the answers come in: the target
// executes a connection's frames in order, and a control message (a
// heartbeat) posted meanwhile then waits at the target for at most 4 MiB of
// answers instead of the whole read. From 64 KiB on, a read's answer goes
// from the target's registered memory to the socket with writev (its region
// pinned only for the non-blocking system call; what the socket does not
// take at once is copied and written by the connection's writer goroutine;
// padded so that the kernel's copy keeps the memory's alignment, see
// gather.go), and lands in the origin's destination straight from the
// socket, as a large write's payload lands in the target's memory; such an
// answer is sent before the target executes or delivers any later frame of
// the connection. Other copies go in pieces that let the process's other
// goroutines run (transport.Copy, transport.Memory).
//
// Security: every connection proves its secret in both directions with an
// HMAC-SHA256 challenge–response before any frame is accepted; a connection that
// fails is closed and logged. The secret is the job secret (Config.Secret)
// or, as ftrun runs its ranks, the key the two ranks' hosts share
// (Config.HostKey, hostkey.go: each host's ranks hold their host's secret
// only, and publish the host's X25519 public key in their address), so that
// a host that is broken into can pose as none of another host's ranks. A
// connection to another host is then sealed
// (Config.Seal, seal.go): each direction's frames go in records of at most
// 16 KiB encrypted and authenticated with AES-128-GCM, under a key of that
// direction derived by HKDF-SHA256 from that secret, both handshake
// nonces and both ranks, with the record's number as its nonce (not sent):
// a relay reads nothing, and a record altered, dropped, repeated or moved
// fails to open and takes the connection down, before any frame after the
// damage is executed. Keys are replaced every 2^24 records. The dialer
// chooses sealed or plain in its hello, which both proofs cover; an
// acceptor that seals refuses a plain connection. Connections between two
// loopback addresses stay plain by default: the kernel keeps them to the
// host, as it keeps shared memory. Why records of our own rather than TLS
// on the connection: the transport's engine writes with non-blocking
// system calls from whichever goroutine owns the socket and reads with the
// read token from any polling goroutine, and a record layer at that
// boundary keeps both (the seal happens where a write begins, the opening
// where a read returns); tls.Conn would serialize reads and writes behind
// its own locks and buffers. What sealing costs: large writes and read
// answers are copied once through the sealer instead of going straight
// from memory to the socket (gather.go, postDirect); the receiving side
// still opens a record straight into its destination when it fits.
//
// Use:
//
//  1. Listen(cfg) on every rank and publish Addr() (the launcher's rendezvous).
//  2. Connect(ctx, addrs) with every rank's address; it returns when the
//     connections to all peers are up. Rank i dials every rank above it. An
//     empty address leaves a rank out (another transport reaches it, such as
//     shared memory on its host): it is neither dialed nor accepted, and
//     operations toward it fail with ftrma.ErrInvalid.
//  3. SetReceiver, Register, post operations, Flush, as for any transport.
//     A transport combined with others (transport/multi) registers with
//     RegisterKey instead, under the key the combination chose, which the
//     target translates to its own.
//  4. Close.
//
// Spares (transport.Admitter): in a job started with spare ranks, the
// started ranks list the spares in Config.Absent. A spare starts later
// with Config.Late, the spares not started yet in its Config.Absent, and
// the ranks that failed before it reported with PeerDown before Connect;
// its Connect gets the live ranks' addresses and dials every one of them
// (the later rank dials, whatever the numbers). A rank refuses a spare's
// connection, as "not admitted yet" (the spare retries), until Admit, after
// which the same handshake admits it as at start. Operations posted toward
// an admitted spare before its connection is up wait for it.
package tcp
