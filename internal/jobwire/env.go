package jobwire

import (
	"runtime"

	"github.com/ftrma/ftrma/failure"
)

// The environment ftrun (or its agent) gives every rank, and the rank reads.
const (
	EnvRank        = "FTRMA_RANK"            // this rank, 0 <= rank < size
	EnvSize        = "FTRMA_SIZE"            // number of ranks in the job
	EnvRendezvous  = "FTRMA_RENDEZVOUS"      // host:port of the launcher's rendezvous server
	EnvSecret      = "FTRMA_SECRET"          // the secret of the rank's host (HostSecret), hex; the rank removes it from its environment
	EnvHostIndex   = "FTRMA_HOST_INDEX"      // the index of the rank's host among the job's (whose secret EnvSecret is); 0 when unset
	EnvJob         = "FTRMA_JOB"             // the job id, for logs
	EnvLocalSize   = "FTRMA_LOCAL_SIZE"      // ranks of this job on this host
	EnvSpin        = "FTRMA_SPIN"            // busy-poll duration (ftrun --spin), optional
	EnvHBPeriod    = "FTRMA_HB_PERIOD"       // failure detector heartbeat period (ftrun --hb-period), optional
	EnvHBTimeout   = "FTRMA_HB_TIMEOUT"      // failure detector timeout (ftrun --hb-timeout), optional
	EnvTransport   = "FTRMA_TRANSPORT"       // tcp, shm, shm+tcp, verbs or shm+verbs (ftrun --transport, resolved); tcp when unset
	EnvVerbsDevice = "FTRMA_VERBS_DEVICE"    // RDMA device (ftrun --verbs-device), optional
	EnvVerbsGID    = "FTRMA_VERBS_GID_INDEX" // GID table index (ftrun --verbs-gid-index), optional
	EnvHostAddr    = "FTRMA_HOST_ADDR"       // IP the rank's transport listens on (multi-host jobs); 127.0.0.1 when unset
	EnvLocalRanks  = "FTRMA_LOCAL_RANKS"     // with transport shm+tcp: the ranks on this host, comma-separated
	EnvLease       = "FTRMA_LEASE"           // the term of the rank's lease from ftrun (a duration; LeaseTerm when unset)
	EnvSpares      = "FTRMA_SPARES"          // spare world ranks (ftrun --respawn): ranks >= size-spares start absent; 0 when unset
	EnvSpawn       = "FTRMA_SPAWN"           // a spare started later: the spawn payload (standard base64), opaque to ftrun
	EnvSparesLost  = "FTRMA_SPARES_LOST"     // a spare started later: the earlier spares that ended before they joined (absent at every rank for good), comma-separated; empty when unset
	EnvSupervisor  = "FTRMA_SUPERVISOR"      // ftrun --arbiter, on an agent's host: host:port of the agent's lease endpoint (supervisor.go); the lease comes from ftrun when unset
	EnvHostVerdict = "FTRMA_HOST_VERDICT"    // ftrun --arbiter over several hosts: the replicated arbiter's verdict bound on a silent host (arbiter.VerdictBound, a duration); unset without it
	EnvSeal        = "FTRMA_SEAL"            // which TCP connections between ranks are sealed (encrypted and authenticated): SealRemote (the default when unset), SealAll or SealNone (ftrun --data-plain)
)

// The values of EnvSeal.
const (
	SealRemote = "remote" // every connection but those between two loopback addresses
	SealAll    = "all"    // every connection, loopback too (to measure the cost on one host)
	SealNone   = "none"   // none: frames in clear, authenticated at connect only
)

// MinSecret is the shortest job secret, in bytes, that a rank accepts and the
// rendezvous serves.
const MinSecret = 16

// Transports ftrun can give its ranks (the values of EnvTransport).
const (
	TransportTCP   = "tcp"
	TransportSHM   = "shm"
	TransportVerbs = "verbs"
	// TransportHybrid picks per peer: shared memory to the ranks on the
	// same host (EnvLocalRanks), TCP to the others (transport/multi).
	TransportHybrid = "shm+tcp"
	// TransportVerbsHybrid is TransportHybrid with RDMA verbs between
	// hosts (and for every atomic where the device's atomics are not the
	// CPU's).
	TransportVerbsHybrid = "shm+verbs"
)

// PerHost reports whether the ranks of transport tr are told the ranks of
// their host (EnvLocalRanks): those of shared memory beside a network.
func PerHost(tr string) bool { return tr == TransportHybrid || tr == TransportVerbsHybrid }

// SharesMemory reports whether the ranks of transport tr on one host share
// memory segments.
func SharesMemory(tr string) bool { return tr == TransportSHM || PerHost(tr) }

// CPUShare is the one rule by which the ranks of a job share a host's CPUs
// (ftrun's help states it too): localSize ranks of the job run on this host.
// It returns whether the host is full, at least as many ranks as CPUs, and
// how many ranks share each CPU, rounded up (1 when fewer ranks than CPUs:
// failure.RanksPerCPU, the rule every timeout stretches by).
//   - On a full host each rank runs with GOMAXPROCS=1 (the launcher's
//     rankEnv; unless GOMAXPROCS is set): a rank has at most one CPU's worth
//     to use, and more threads per rank only hand goroutines to each other
//     across CPUs that the other ranks need.
//   - On a full host the failure detector's default timeout is multiplied
//     by the ranks per CPU (startup.DetectorSettings; unless ftrun
//     --hb-timeout): a runnable rank waits for a CPU for about that many
//     time slices. With exactly one rank per CPU that is 1: no rank waits
//     for a CPU, and with GOMAXPROCS=1 a rank's heartbeat waits for its own
//     goroutines no longer than a piece of a copy (transport.CopyChunk).
//   - Where a CPU is shared (more than one rank per CPU) no rank busy-polls
//     (startup's transportSpin; unless ftrun --spin): a spinning rank would
//     take the CPU of a rank that has work. With one rank per CPU a spinning
//     waiter takes only its own: two ranks on two CPUs answer a TCP round
//     trip in 11-18 us spinning, 25-60 us not.
func CPUShare(localSize int) (full bool, perCPU int) {
	cpus := runtime.NumCPU()
	return localSize >= cpus, failure.RanksPerCPU(localSize, cpus)
}
