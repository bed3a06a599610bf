package launcher

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
)

// The environment ftrun gives every rank.
const (
	EnvRank        = "FTRMA_RANK"            // this rank, 0 <= rank < size
	EnvSize        = "FTRMA_SIZE"            // number of ranks in the job
	EnvRendezvous  = "FTRMA_RENDEZVOUS"      // host:port of the launcher's rendezvous server
	EnvSecret      = "FTRMA_SECRET"          // the job secret, hex; Join removes it from the environment
	EnvJob         = "FTRMA_JOB"             // the job id, for logs
	EnvLocalSize   = "FTRMA_LOCAL_SIZE"      // ranks of this job on this host
	EnvSpin        = "FTRMA_SPIN"            // busy-poll duration (ftrun --spin), optional
	EnvHBPeriod    = "FTRMA_HB_PERIOD"       // failure detector heartbeat period (ftrun --hb-period), optional
	EnvHBTimeout   = "FTRMA_HB_TIMEOUT"      // failure detector timeout (ftrun --hb-timeout), optional
	EnvTransport   = "FTRMA_TRANSPORT"       // tcp, shm, shm+tcp or verbs (ftrun --transport, resolved); tcp when unset
	EnvVerbsDevice = "FTRMA_VERBS_DEVICE"    // RDMA device (ftrun --verbs-device), optional
	EnvVerbsGID    = "FTRMA_VERBS_GID_INDEX" // GID table index (ftrun --verbs-gid-index), optional
	EnvHostAddr    = "FTRMA_HOST_ADDR"       // IP the rank's transport listens on (multi-host jobs); 127.0.0.1 when unset
	EnvLocalRanks  = "FTRMA_LOCAL_RANKS"     // with transport shm+tcp: the ranks on this host, comma-separated

	// EnvAgentSecret is the agent secret that ftrun (with --hosts naming
	// running agents) and those agents share: what "ftrun agent --gen-secret"
	// prints (or a file holding it, named by EnvAgentSecretFile). Ranks never
	// see it.
	EnvAgentSecret     = "FTRMA_AGENT_SECRET"
	EnvAgentSecretFile = "FTRMA_AGENT_SECRET_FILE"

	// EnvSSH is the command ftrun starts agents with outside Slurm (default
	// "ssh"; --ssh overrides it), e.g. "ssh -F /path/ssh_config".
	EnvSSH = "FTRMA_SSH"
)

// minSecret is the shortest job secret a rank accepts, in bytes. ftrun
// generates secretSize bytes.
const (
	minSecret  = 16
	secretSize = 32
)

// InJob reports whether this process was started by ftrun (FTRMA_RANK is set).
func InJob() bool {
	_, ok := os.LookupEnv(EnvRank)
	return ok
}

// jobEnv is what a rank learns from its environment.
type jobEnv struct {
	rank       ftrma.Rank
	size       int
	rendezvous string
	secret     []byte
	job        string
	localSize  int
	spin       time.Duration // 0 when FTRMA_SPIN is unset
	transport  string        // TransportTCP, TransportSHM or TransportVerbs
	verbsDev   string        // FTRMA_VERBS_DEVICE
	verbsGID   int           // FTRMA_VERBS_GID_INDEX, -1 when unset
	hostAddr   string        // IP to listen on, "" for the transport's default
	localRanks []ftrma.Rank  // the ranks on this host (TransportHybrid)
}

// readEnv reads the job environment and removes FTRMA_SECRET from it, whether
// or not the rest is valid, so the secret does not leak to the rank's own
// children.
func readEnv() (jobEnv, error) {
	secret, hasSecret := os.LookupEnv(EnvSecret)
	os.Unsetenv(EnvSecret)
	var e jobEnv
	rank, ok := os.LookupEnv(EnvRank)
	if !ok {
		return e, fmt.Errorf("launcher: not started by ftrun (%s unset)", EnvRank)
	}
	size, err := envInt(EnvSize, 1)
	if err != nil {
		return e, err
	}
	e.size = size
	r, err := strconv.Atoi(rank)
	if err != nil || r < 0 || r >= size {
		return e, fmt.Errorf("launcher: %s=%q: not a rank in [0, %d)", EnvRank, rank, size)
	}
	e.rank = ftrma.Rank(r)
	e.rendezvous = os.Getenv(EnvRendezvous)
	if e.rendezvous == "" {
		return e, fmt.Errorf("launcher: %s unset", EnvRendezvous)
	}
	if !hasSecret {
		return e, fmt.Errorf("launcher: %s unset (it is removed from the environment when read: call Join once)", EnvSecret)
	}
	e.secret, err = hex.DecodeString(strings.TrimSpace(secret))
	if err != nil || len(e.secret) < minSecret {
		return e, fmt.Errorf("launcher: %s: want at least %d hex-encoded bytes", EnvSecret, minSecret)
	}
	e.job = os.Getenv(EnvJob)
	if v, ok := os.LookupEnv(EnvSpin); ok {
		if e.spin, err = time.ParseDuration(v); err != nil || e.spin == 0 {
			return e, fmt.Errorf("launcher: %s=%q: want a non-zero duration", EnvSpin, v)
		}
	}
	switch e.transport = os.Getenv(EnvTransport); e.transport {
	case "":
		e.transport = TransportTCP
	case TransportTCP:
	case TransportSHM, TransportHybrid:
		if e.job == "" || strings.Trim(e.job, "0123456789abcdef") != "" {
			return e, fmt.Errorf("launcher: %s=%q: shared memory needs a hex job id", EnvJob, e.job)
		}
	case TransportVerbs:
	default:
		return e, fmt.Errorf("launcher: %s=%q: want %s, %s, %s or %s", EnvTransport, e.transport, TransportTCP, TransportSHM, TransportHybrid, TransportVerbs)
	}
	e.verbsDev, e.verbsGID = os.Getenv(EnvVerbsDevice), -1
	if v, ok := os.LookupEnv(EnvVerbsGID); ok {
		if e.verbsGID, err = strconv.Atoi(v); err != nil || e.verbsGID < 0 {
			return e, fmt.Errorf("launcher: %s=%q: want a GID table index", EnvVerbsGID, v)
		}
	}
	if e.hostAddr = os.Getenv(EnvHostAddr); e.hostAddr != "" && net.ParseIP(e.hostAddr) == nil {
		return e, fmt.Errorf("launcher: %s=%q: not an IP address", EnvHostAddr, e.hostAddr)
	}
	e.localSize = size
	if _, ok := os.LookupEnv(EnvLocalSize); ok {
		if e.localSize, err = envInt(EnvLocalSize, 1); err != nil {
			return e, err
		}
	}
	if e.transport == TransportHybrid {
		bad := fmt.Errorf("launcher: %s=%q: want the ranks on this host, this one among them", EnvLocalRanks, os.Getenv(EnvLocalRanks))
		for _, f := range strings.Split(os.Getenv(EnvLocalRanks), ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 || n >= size {
				return e, bad
			}
			e.localRanks = append(e.localRanks, ftrma.Rank(n))
		}
		if !slices.Contains(e.localRanks, e.rank) {
			return e, bad
		}
	}
	return e, nil
}

// envInt parses the integer variable name, which must be set and >= min.
func envInt(name string, min int) (int, error) {
	s, ok := os.LookupEnv(name)
	if !ok {
		return 0, fmt.Errorf("launcher: %s unset", name)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min {
		return 0, fmt.Errorf("launcher: %s=%q: want an integer >= %d", name, s, min)
	}
	return n, nil
}

// rankVars returns the FTRMA_ variables of rank r of a job of size ranks, of
// which localSize run on r's host. hostAddr, if not empty, is the IP r's
// transport listens on.
func rankVars(r ftrma.Rank, size int, local []ftrma.Rank, rendezvous string, secret []byte, job, hostAddr string, o *Options) []string {
	var env []string
	localSize := len(local)
	if o.Spin != 0 {
		env = append(env, EnvSpin+"="+o.Spin.String())
	}
	if o.HBPeriod != 0 {
		env = append(env, EnvHBPeriod+"="+o.HBPeriod.String())
	}
	if o.HBTimeout != 0 {
		env = append(env, EnvHBTimeout+"="+o.HBTimeout.String())
	}
	if tr, err := ResolveTransport(o.Transport); err == nil {
		env = append(env, EnvTransport+"="+tr)
		if tr == TransportHybrid {
			rs := make([]string, len(local))
			for i, l := range local {
				rs[i] = strconv.Itoa(int(l))
			}
			env = append(env, EnvLocalRanks+"="+strings.Join(rs, ","))
		}
	}
	if o.VerbsDevice != "" {
		env = append(env, EnvVerbsDevice+"="+o.VerbsDevice)
	}
	if o.VerbsGID != "" {
		env = append(env, EnvVerbsGID+"="+o.VerbsGID)
	}
	if hostAddr != "" {
		env = append(env, EnvHostAddr+"="+hostAddr)
	}
	return append(env,
		EnvRank+"="+strconv.Itoa(int(r)),
		EnvSize+"="+strconv.Itoa(size),
		EnvRendezvous+"="+rendezvous,
		EnvSecret+"="+hex.EncodeToString(secret),
		EnvJob+"="+job,
		EnvLocalSize+"="+strconv.Itoa(localSize),
	)
}

// cpuShare is the one rule by which the ranks of a job share a host's CPUs
// (ftrun's help states it too): localSize ranks of the job run on this host.
// It returns whether the host is full, at least as many ranks as CPUs, and
// how many ranks share each CPU, rounded up (1 when fewer ranks than CPUs).
//   - On a full host each rank runs with GOMAXPROCS=1 (rankEnv; unless
//     GOMAXPROCS is set): a rank has at most one CPU's worth to use, and
//     more threads per rank only hand goroutines to each other across CPUs
//     that the other ranks need.
//   - On a full host the failure detector's default timeout is multiplied
//     by the ranks per CPU (DetectorSettings; unless ftrun --hb-timeout):
//     a runnable rank waits for a CPU for about that many time slices. With
//     exactly one rank per CPU that is 1: no rank waits for a CPU, and with
//     GOMAXPROCS=1 a rank's heartbeat waits for its own goroutines no longer
//     than a piece of a copy (transport.CopyChunk).
//   - Where a CPU is shared (more than one rank per CPU) no rank busy-polls
//     (transportSpin; unless ftrun --spin): a spinning rank would take the
//     CPU of a rank that has work. With one rank per CPU a spinning waiter
//     takes only its own: two ranks on two CPUs answer a TCP round trip in
//     11-18 us spinning, 25-60 us not.
func cpuShare(localSize int) (full bool, perCPU int) {
	cpus := runtime.NumCPU()
	return localSize >= cpus, max(1, (localSize+cpus-1)/cpus)
}

// rankEnv returns the environment of a rank that is one of localSize ranks
// of its job on this host: base without any FTRMA_ variable, then GOMAXPROCS=1
// if this host is full (cpuShare) and base does not set GOMAXPROCS, then
// vars (the rank's FTRMA_ variables, see rankVars). ftrun uses it for the
// ranks it starts, an agent for the ranks it starts on its host.
func rankEnv(base []string, vars []string, localSize int) []string {
	env := make([]string, 0, len(base)+len(vars)+1)
	userProcs := false
	for _, kv := range base {
		if !strings.HasPrefix(kv, "FTRMA_") {
			env = append(env, kv)
		}
		userProcs = userProcs || strings.HasPrefix(kv, "GOMAXPROCS=")
	}
	if full, _ := cpuShare(localSize); full && !userProcs {
		env = append(env, "GOMAXPROCS=1") // the user's GOMAXPROCS wins
	}
	return append(env, vars...)
}

// DetectorSettings returns the failure detector's heartbeat period and timeout
// for this rank: what ftrun passed (--hb-period, --hb-timeout), or zeros (the
// detector's defaults, 20 ms and 60 ms) where it passed none or something
// unreadable — except that a period given without a timeout gets a timeout of
// three periods (at least 60 ms), and that on a full host (cpuShare: at least
// as many ranks of the job as CPUs) the default timeout is multiplied by the
// ranks per CPU, rounded up: where ranks outnumber CPUs a busy rank waits for
// a CPU for tens of milliseconds at a time, and 60 ms of silence is no sign
// of failure.
func DetectorSettings() (period, timeout time.Duration) {
	period, _ = time.ParseDuration(os.Getenv(EnvHBPeriod))
	timeout, _ = time.ParseDuration(os.Getenv(EnvHBTimeout))
	period, timeout = max(period, 0), max(timeout, 0)
	if timeout != 0 {
		return period, timeout
	}
	base := defaultHBTimeout // three periods: a lost heartbeat or two is no failure
	if period > 0 {
		timeout = max(base, 3*period)
		base = timeout
	}
	if local, err := strconv.Atoi(os.Getenv(EnvLocalSize)); err == nil {
		if full, perCPU := cpuShare(local); full {
			timeout = time.Duration(perCPU) * base
		}
	}
	return period, timeout
}

// defaultHBTimeout is the failure detector's default timeout (failure's
// DefaultTimeout, which this package may not import).
const defaultHBTimeout = 60 * time.Millisecond
