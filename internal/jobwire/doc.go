// Package jobwire is the contract between ftrun's side of a job (package
// launcher: ftrun and its agents) and the rank side (package startup, inside
// every rank): what each side must agree on, and nothing more.
//
// It holds:
//
//   - the environment ftrun gives every rank (EnvRank, EnvSize, ...), the
//     transport names it may ask for (TransportTCP, ...) and the shortest job
//     secret (MinSecret);
//   - the rule by which the ranks of a job share a host's CPUs (CPUShare):
//     ftrun sets GOMAXPROCS by it, a rank its detector timeout and
//     busy-polling;
//   - the rendezvous wire format (wire.go): TLS keyed by RendezvousKey,
//     frames (AppendFrame, WriteFrame, ReadFrame), the message types, whose
//     append-only numbering the agent protocol shares, and the encoding of
//     the hello and auth messages; the transport addresses the ranks publish,
//     each a common part and a part per rank, and the address list each rank
//     gets, its column of them (addr.go);
//   - the spare ranks of ftrun --respawn: the spawn request a rank sends,
//     ftrun's answer, the admission every live rank gets when a spare
//     joins, and what a spare learns when it joins (spawn.go);
//   - the mutual HMAC challenge/response that opens a rendezvous connection
//     (ServerHandshake on ftrun's side, ClientHandshake on the rank's), which
//     other protocols may reuse with a HandshakeKind of their own.
//
// The rendezvous server is in launcher, the rendezvous client in startup.
// Parsers never panic on bytes from the network: a malformed message is an
// error wrapping ErrMalformed. A size over a limit is a *LimitError (or, for
// a whole frame, a *FrameTooLongError), both wrapping ErrTooLarge.
package jobwire
