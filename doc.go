// Package ftrma holds the values shared by every layer of the ftrma runtime: the
// rank type, the error values that callers test with errors.Is, and the log.
//
// ftrma is a fault-tolerant one-sided communication runtime: MPI-style
// passive-target RMA windows and the ULFM failure API, over TCP, shared memory
// and RDMA verbs, started by the ftrun launcher, with a replicated in-memory
// key-value store on top. The layers, lowest first (layering_test.go holds
// the exact rules):
//
//	transport/          the one-sided + control-message interface; shm/, tcp/, verbs/
//	                    and memnet/ implement it, multi/ combines them per peer
//	failure/, revoke/,  the pure state machines: the heartbeat failure detector,
//	agree/              the reliable broadcast, the fault-tolerant agreement
//	comm/               communicator: ranks, collectives, ULFM, the per-process runtime,
//	                    built on a world it is handed (comm.NewWorld)
//	startup/            a rank's start-up, above comm: environment, rendezvous client,
//	                    transport choice, Init (the world it hands comm)
//	window/             RMA windows: put/get/atomics, flush, locks
//	store/              the replicated key-value store for checkpoints
//	launcher/           ftrun's side: starting ranks, rendezvous server, supervision,
//	                    agents, the arbiter (cmd/ftrun is its front end); ranks do not
//	                    link it
//	internal/           what several of the above share and no user should import:
//	                    the launcher's and start-up's wire contract (jobwire), the
//	                    links' TLS (seclink), the broadcast overlay, test checkers
//
// The root package also holds the runtime's log (Logger, SetLogger): log/slog,
// with its level and format from the environment (EnvLog, EnvLogFormat), and
// the field names its lines use (LogRank, LogPeer, LogJob). Library code
// never writes to standard error itself.
//
// Every configurable piece takes a Config whose zero fields mean their
// defaults (comm.Config, store.Config, each transport's, ftrun's
// launcher.Config); its withDefaults (or exported WithDefaults) checks it
// and fills the defaults in.
//
// Lower packages never import higher ones.
package ftrma
