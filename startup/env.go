package startup

import (
	"encoding/base64"
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
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/tcp"
)

// InJob reports whether this process was started by ftrun (FTRMA_RANK is set).
func InJob() bool {
	_, ok := os.LookupEnv(jobwire.EnvRank)
	return ok
}

// InSpare reports whether this process is a spare that ftrun started later,
// for a Replace (it has FTRMA_SPAWN).
func InSpare() bool {
	_, ok := os.LookupEnv(jobwire.EnvSpawn)
	return ok
}

// jobEnv is what a rank learns from its environment.
type jobEnv struct {
	rank        ftrma.Rank
	size        int
	rendezvous  string
	secret      []byte // the secret of this rank's host (jobwire.HostSecret)
	host        int    // FTRMA_HOST_INDEX: the index of this rank's host; 0 when unset
	job         string
	localSize   int
	spin        time.Duration // 0 when FTRMA_SPIN is unset
	seal        tcp.SealMode  // FTRMA_SEAL: which TCP connections are sealed
	transport   string        // jobwire.TransportTCP, TransportSHM, TransportHybrid, TransportVerbs or TransportVerbsHybrid
	verbsDev    string        // FTRMA_VERBS_DEVICE
	verbsGID    int           // FTRMA_VERBS_GID_INDEX, -1 when unset
	hostAddr    string        // IP to listen on, "" for the transport's default
	lease       time.Duration // the lease term (jobwire.EnvLease)
	hostVerdict time.Duration // the arbiter's verdict bound on a silent host (jobwire.EnvHostVerdict); 0 when unset
	localRanks  []ftrma.Rank  // the ranks on this host (jobwire.PerHost)
	spares      int           // FTRMA_SPARES: ranks >= size-spares start absent; 0 when unset
	spawn       []byte        // FTRMA_SPAWN decoded: the payload of a spare started later
	spawned     bool          // this rank is a spare started later (FTRMA_SPAWN set)
	sparesLost  []ftrma.Rank  // FTRMA_SPARES_LOST: earlier spares that ended before they joined
	supervisor  string        // FTRMA_SUPERVISOR: the host agent's lease endpoint (ftrun --arbiter), or ""
	got         *joinInfo     // what the rendezvous taught beyond the addresses; set by join
}

// readEnv reads the job environment and removes FTRMA_SECRET from it, whether
// or not the rest is valid, so the secret does not leak to the rank's own
// children.
func readEnv() (jobEnv, error) {
	secret, hasSecret := os.LookupEnv(jobwire.EnvSecret)
	os.Unsetenv(jobwire.EnvSecret)
	var e jobEnv
	rank, ok := os.LookupEnv(jobwire.EnvRank)
	if !ok {
		return e, fmt.Errorf("launcher: not started by ftrun (%s unset)", jobwire.EnvRank)
	}
	size, err := envInt(jobwire.EnvSize, 1)
	if err != nil {
		return e, err
	}
	e.size = size
	r, err := strconv.Atoi(rank)
	if err != nil || r < 0 || r >= size {
		return e, fmt.Errorf("launcher: %s=%q: not a rank in [0, %d)", jobwire.EnvRank, rank, size)
	}
	e.rank = ftrma.Rank(r)
	e.rendezvous = os.Getenv(jobwire.EnvRendezvous)
	if e.rendezvous == "" {
		return e, fmt.Errorf("launcher: %s unset", jobwire.EnvRendezvous)
	}
	if !hasSecret {
		return e, fmt.Errorf("launcher: %s unset (it is removed from the environment when read: call Join once)", jobwire.EnvSecret)
	}
	e.secret, err = hex.DecodeString(strings.TrimSpace(secret))
	if err != nil || len(e.secret) < jobwire.MinSecret {
		return e, fmt.Errorf("launcher: %s: want at least %d hex-encoded bytes", jobwire.EnvSecret, jobwire.MinSecret)
	}
	if _, ok := os.LookupEnv(jobwire.EnvHostIndex); ok {
		if e.host, err = envInt(jobwire.EnvHostIndex, 0); err != nil {
			return e, err
		}
	}
	e.job = os.Getenv(jobwire.EnvJob)
	switch v := os.Getenv(jobwire.EnvSeal); v {
	case "", jobwire.SealRemote:
		e.seal = tcp.SealRemote
	case jobwire.SealAll:
		e.seal = tcp.SealAll
	case jobwire.SealNone:
		e.seal = tcp.SealNone
	default:
		return e, fmt.Errorf("launcher: %s=%q: want %s, %s or %s", jobwire.EnvSeal, v, jobwire.SealRemote, jobwire.SealAll, jobwire.SealNone)
	}
	if v, ok := os.LookupEnv(jobwire.EnvSpin); ok {
		if e.spin, err = time.ParseDuration(v); err != nil || e.spin == 0 {
			return e, fmt.Errorf("launcher: %s=%q: want a non-zero duration", jobwire.EnvSpin, v)
		}
	}
	switch e.transport = os.Getenv(jobwire.EnvTransport); e.transport {
	case "":
		e.transport = jobwire.TransportTCP
	case jobwire.TransportTCP:
	case jobwire.TransportSHM, jobwire.TransportHybrid, jobwire.TransportVerbsHybrid:
		if e.job == "" || strings.Trim(e.job, "0123456789abcdef") != "" {
			return e, fmt.Errorf("launcher: %s=%q: shared memory needs a hex job id", jobwire.EnvJob, e.job)
		}
	case jobwire.TransportVerbs:
	default:
		return e, fmt.Errorf("launcher: %s=%q: want %s, %s, %s, %s or %s", jobwire.EnvTransport, e.transport, jobwire.TransportTCP, jobwire.TransportSHM, jobwire.TransportHybrid, jobwire.TransportVerbs, jobwire.TransportVerbsHybrid)
	}
	e.verbsDev, e.verbsGID = os.Getenv(jobwire.EnvVerbsDevice), -1
	if v, ok := os.LookupEnv(jobwire.EnvVerbsGID); ok {
		if e.verbsGID, err = strconv.Atoi(v); err != nil || e.verbsGID < 0 {
			return e, fmt.Errorf("launcher: %s=%q: want a GID table index", jobwire.EnvVerbsGID, v)
		}
	}
	e.lease = jobwire.LeaseTerm
	if v, ok := os.LookupEnv(jobwire.EnvLease); ok {
		if e.lease, err = time.ParseDuration(v); err != nil || e.lease <= 0 {
			return e, fmt.Errorf("launcher: %s=%q: want a positive duration", jobwire.EnvLease, v)
		}
	}
	if v, ok := os.LookupEnv(jobwire.EnvHostVerdict); ok {
		if e.hostVerdict, err = time.ParseDuration(v); err != nil || e.hostVerdict <= 0 {
			return e, fmt.Errorf("launcher: %s=%q: want a positive duration", jobwire.EnvHostVerdict, v)
		}
	}
	if e.hostAddr = os.Getenv(jobwire.EnvHostAddr); e.hostAddr != "" && net.ParseIP(e.hostAddr) == nil {
		return e, fmt.Errorf("launcher: %s=%q: not an IP address", jobwire.EnvHostAddr, e.hostAddr)
	}
	if _, ok := os.LookupEnv(jobwire.EnvSpares); ok {
		if e.spares, err = envInt(jobwire.EnvSpares, 0); err != nil {
			return e, err
		}
		if e.spares >= size {
			return e, fmt.Errorf("launcher: %s=%d: want fewer spares than the %d ranks of the job", jobwire.EnvSpares, e.spares, size)
		}
	}
	v, spawned := os.LookupEnv(jobwire.EnvSpawn)
	switch spare := int(e.rank) >= size-e.spares; {
	case spare && !spawned:
		return e, fmt.Errorf("launcher: rank %d is a spare (%s=%d of %d ranks) but %s is unset", e.rank, jobwire.EnvSpares, e.spares, size, jobwire.EnvSpawn)
	case !spare && spawned:
		return e, fmt.Errorf("launcher: %s is set, but rank %d is not a spare (%s=%d of %d ranks)", jobwire.EnvSpawn, e.rank, jobwire.EnvSpares, e.spares, size)
	case spawned:
		if e.spawn, err = base64.StdEncoding.DecodeString(v); err != nil || len(e.spawn) > jobwire.MaxSpawnPayload {
			return e, fmt.Errorf("launcher: %s: want at most %d bytes in standard base64", jobwire.EnvSpawn, jobwire.MaxSpawnPayload)
		}
		e.spawned = true
		if v := os.Getenv(jobwire.EnvSparesLost); v != "" {
			for _, f := range strings.Split(v, ",") {
				r, err := strconv.Atoi(f)
				if err != nil || r < size-e.spares || r >= int(e.rank) || slices.Contains(e.sparesLost, ftrma.Rank(r)) {
					return e, fmt.Errorf("launcher: %s=%q: want distinct spares before rank %d, comma-separated", jobwire.EnvSparesLost, v, e.rank)
				}
				e.sparesLost = append(e.sparesLost, ftrma.Rank(r))
			}
		}
	}
	if e.supervisor = os.Getenv(jobwire.EnvSupervisor); e.supervisor != "" {
		if _, _, err := net.SplitHostPort(e.supervisor); err != nil {
			return e, fmt.Errorf("launcher: %s=%q: want host:port", jobwire.EnvSupervisor, e.supervisor)
		}
	}
	e.localSize = size
	if _, ok := os.LookupEnv(jobwire.EnvLocalSize); ok {
		if e.localSize, err = envInt(jobwire.EnvLocalSize, 1); err != nil {
			return e, err
		}
	}
	if jobwire.PerHost(e.transport) {
		bad := fmt.Errorf("launcher: %s=%q: want the ranks on this host, this one among them", jobwire.EnvLocalRanks, os.Getenv(jobwire.EnvLocalRanks))
		for _, f := range strings.Split(os.Getenv(jobwire.EnvLocalRanks), ",") {
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

// DetectorSettings returns the failure detector's heartbeat period and timeout
// for this rank: what ftrun passed (--hb-period, --hb-timeout; something
// unreadable counts as not passed), filled and stretched by the detector's
// own rule (failure.Config.ForHost): a default period of 20 ms; a default
// timeout of 60 ms, or three periods where only the period was passed,
// multiplied by the ranks per CPU of this host (failure.RanksPerCPU of
// FTRMA_LOCAL_SIZE): where ranks outnumber CPUs a busy rank waits for a CPU
// for tens of milliseconds at a time, and 60 ms of silence is no sign of
// failure. A timeout ftrun passed is kept as it is.
func DetectorSettings() (period, timeout time.Duration) {
	cfg := detectorConfig()
	return cfg.Period, cfg.Timeout
}

// detectorConfig is DetectorSettings as a filled failure.Config.
func detectorConfig() failure.Config {
	period, _ := time.ParseDuration(os.Getenv(jobwire.EnvHBPeriod))
	timeout, _ := time.ParseDuration(os.Getenv(jobwire.EnvHBTimeout))
	local, _ := strconv.Atoi(os.Getenv(jobwire.EnvLocalSize))
	cfg := failure.Config{Period: max(period, 0), Timeout: max(timeout, 0)}
	return cfg.ForHost(local, runtime.NumCPU())
}
