// Package ftrma holds the values shared by every layer of the ftrma runtime: the
// rank type, the error values that callers test with errors.Is, and the log.
//
// ftrma is a fault-tolerant one-sided communication runtime: MPI-style
// passive-target RMA windows and the ULFM failure API, over TCP, shared memory
// and RDMA verbs, started by the ftrun launcher. The layers, lowest first:
//
//	transport/          the one-sided + control-message interface; tcp/, memnet/ implement it
//	startup/            a rank's start-up: environment, rendezvous client, transport choice
//	comm/               communicator: ranks, collectives, the per-process runtime
//	window/             RMA windows: put/get/atomics, flush, locks
//	launcher/           ftrun's side: starting ranks, rendezvous server, supervision,
//	                    agents (cmd/ftrun is its front end); ranks do not link it
//
// The root package also holds the runtime's log (Logger, SetLogger): log/slog,
// with its level and format from the environment (EnvLog, EnvLogFormat), and
// the field names its lines use (LogRank, LogPeer, LogJob). Library code
// never writes to standard error itself.
//
// Lower packages never import higher ones.
package ftrma
