package launcher

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/shm"
)

// The environment of ftrun and its agents (the ranks' own is in
// internal/jobwire, read by package startup).
const (
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

var errAgentSecret = errors.New(EnvAgentSecret + " unset or empty: the launcher and every agent need the same agent secret")

// secretSize is the size of the job's root secret ftrun generates, in bytes
// (the ranks accept jobwire.MinSecret and more).
const secretSize = 32

// rankVars returns the FTRMA_ variables of rank r of a job of size ranks
// (spares included, o.Spares of them), of which local run on r's host. hostAddr, if not empty, is the IP r's
// transport listens on.
func rankVars(r ftrma.Rank, size int, local []ftrma.Rank, rendezvous string, secret []byte, host int, job, hostAddr string, o *Config) []string {
	env := []string{jobwire.EnvLease + "=" + timingFor(o).lease.String()}
	if o.hostVerdict > 0 {
		env = append(env, jobwire.EnvHostVerdict+"="+o.hostVerdict.String())
	}
	localSize := len(local)
	if o.Spin != 0 {
		env = append(env, jobwire.EnvSpin+"="+o.Spin.String())
	}
	if o.HBPeriod != 0 {
		env = append(env, jobwire.EnvHBPeriod+"="+o.HBPeriod.String())
	}
	if o.HBTimeout != 0 {
		env = append(env, jobwire.EnvHBTimeout+"="+o.HBTimeout.String())
	}
	if tr, err := ResolveTransport(o.Transport); err == nil {
		env = append(env, jobwire.EnvTransport+"="+tr)
		if jobwire.PerHost(tr) {
			rs := make([]string, len(local))
			for i, l := range local {
				rs[i] = strconv.Itoa(int(l))
			}
			env = append(env, jobwire.EnvLocalRanks+"="+strings.Join(rs, ","))
		}
	}
	if o.VerbsDevice != "" {
		env = append(env, jobwire.EnvVerbsDevice+"="+o.VerbsDevice)
	}
	if o.VerbsGID != "" {
		env = append(env, jobwire.EnvVerbsGID+"="+o.VerbsGID)
	}
	if hostAddr != "" {
		env = append(env, jobwire.EnvHostAddr+"="+hostAddr)
	}
	if o.Spares > 0 {
		env = append(env, jobwire.EnvSpares+"="+strconv.Itoa(o.Spares))
	}
	if v, _ := sealOf(o, os.Getenv); v != "" {
		env = append(env, jobwire.EnvSeal+"="+v)
	}
	env = append(env, logVars(o, os.Getenv)...)
	return append(env,
		jobwire.EnvRank+"="+strconv.Itoa(int(r)),
		jobwire.EnvSize+"="+strconv.Itoa(size),
		jobwire.EnvRendezvous+"="+rendezvous,
		jobwire.EnvSecret+"="+hex.EncodeToString(secret),
		jobwire.EnvHostIndex+"="+strconv.Itoa(host),
		jobwire.EnvJob+"="+job,
		jobwire.EnvLocalSize+"="+strconv.Itoa(localSize),
	)
}

// spareEnv is, in a job with spares, the FTRMA_ variables every rank of
// host (the arbiter's numbering: 0 for ftrun's, 1+i for j.links[i]) gets
// alike (rankVars without the rank's own), which that host's agent starts a
// spare with once ftrun is gone (agentspare.go); nil without spares. The
// secret in it is that host's.
func (j *Job) spareEnv(host int) []string {
	if j.spares == 0 {
		return nil
	}
	vars := rankVars(0, j.opts.N+j.spares, nil, "", j.hostSecret(host), host, j.id, "", &j.opts)
	own := []string{jobwire.EnvRank, jobwire.EnvRendezvous, jobwire.EnvLocalSize, jobwire.EnvLocalRanks, jobwire.EnvHostAddr}
	return slices.DeleteFunc(vars, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(own, k)
	})
}

// sealOf is the ranks' FTRMA_SEAL: none with --data-plain, else what
// ftrun's own environment says (read through getenv), "" for the default
// (remote).
func sealOf(o *Config, getenv func(string) string) (string, error) {
	v := getenv(jobwire.EnvSeal)
	if o.DataPlain {
		v = jobwire.SealNone
	}
	switch v {
	case "", jobwire.SealRemote, jobwire.SealAll, jobwire.SealNone:
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q in ftrun's environment: want %s, %s or %s", jobwire.EnvSeal, v, jobwire.SealRemote, jobwire.SealAll, jobwire.SealNone)
	}
}

// logVars returns the log settings of the ranks (ftrma.EnvLog and
// ftrma.EnvLogFormat): ftrun's own, read through getenv, passed on (the
// ranks' base environment has no FTRMA_ variable), and with -v (Verbose)
// debug level when ftrun's environment sets none; and shm.EnvSlowPath, a
// switch for measurement, passed on the same way.
func logVars(o *Config, getenv func(string) string) []string {
	var env []string
	if v := getenv(shm.EnvSlowPath); v != "" {
		env = append(env, shm.EnvSlowPath+"="+v)
	}
	if v := getenv(ftrma.EnvLog); v != "" {
		env = append(env, ftrma.EnvLog+"="+v)
	} else if o.Verbose {
		env = append(env, ftrma.EnvLog+"=debug")
	}
	if v := getenv(ftrma.EnvLogFormat); v != "" {
		env = append(env, ftrma.EnvLogFormat+"="+v)
	}
	return env
}

// rankEnv returns the environment of a rank that is one of localSize ranks
// of its job on this host: base without any FTRMA_ variable, then GOMAXPROCS=1
// if this host is full (jobwire.CPUShare) and base does not set GOMAXPROCS,
// then vars (the rank's FTRMA_ variables, see rankVars). ftrun uses it for the
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
	if full, _ := jobwire.CPUShare(localSize); full && !userProcs {
		env = append(env, "GOMAXPROCS=1") // the user's GOMAXPROCS wins
	}
	return append(env, vars...)
}

// hostIndex is the index of the host of link among the job's (the
// arbiter's numbering): 0 for ftrun's own host (nil), 1+i for j.links[i].
func (j *Job) hostIndex(link *agentLink) int {
	if link == nil {
		return 0
	}
	return 1 + slices.Index(j.links, link)
}

// hostSecret is the secret of the ranks of host (hostIndex): each host's
// ranks get their own, so those of one host cannot speak for another's
// (jobwire.HostSecret, transport/tcp's host keys).
func (j *Job) hostSecret(host int) []byte { return jobwire.HostSecret(j.secret, host) }
