// Command ft measures ftrma's fault-tolerance operations: how fast the
// survivors learn of a killed rank, how long until a spare replaces it
// (Replace, ftrun --respawn), and the latency of Agree, Shrink and
// Revoke, for jobs of 4, 8, 16 and 32 processes on this machine. Run it from
// the module root:
//
//	go run ./bench/ft -quick -json out.json
//
// It builds cmd/ftrun and bench/ft/rank into a temporary directory, runs
// short jobs under ftrun and prints a table; with -json it writes the same
// values as a JSON array of {bench, size, system, value, unit}, size being
// the number of processes. See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/ftrma/ftrma/bench/internal/host"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/bench/internal/ulfm"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/result"
)

const usage = `Usage: go run ./bench/ft [flags]

Measures ftrma's fault tolerance (over TCP, or -transport shm) with N = 4, 8, 16, 32 processes on
this machine, each job started by ftrun:

  detect_p50, detect_p99  SIGKILL of one rank -> the last survivor knows
                          (c.ProcFailed), median and 99th percentile over jobs, ms
  stop_p50, stop_p99      SIGSTOP of one rank (a hung process) -> the last
                          survivor knows it failed: the failure detector's
                          declaration, median and 99th percentile over jobs, ms
  agree_lat               one Agree (fault-tolerant AND), median of K calls, ms
  shrink_lat              one Shrink (each on the previous result), median of K, ms
  revoke_lat              Revoke at rank 0 -> the last rank sees IsRevoked,
                          median over rounds, ms
  replace_lat             SIGKILL of one rank -> full-size communicator: Replace
                          returned at every survivor and the spare's Init
                          returned (ftrun --respawn=1), median over jobs, ms
  kill_shrink_lat         SIGKILL of one rank -> Shrink returned at every
                          survivor, same kind of job, median over jobs, ms

With -only grow (not run by default): a store (package store) of -grow-keys
keys, SIGKILL of one rank, Replace, then Grow at the survivors and Join at the
spare; medians over jobs:
  grow_lat                first Grow/Join call -> last return, ms
  grow_keys, grow_bytes   keys and bytes copied to new replicas, all ranks
  grow_new_keys           keys the new rank holds after Join

The detect, stop and coll jobs run on ULFM too, in the same run and interleaved
with ftrma's (the ulfm-tcp or ulfm-shm column, and a ratio column
ftrma/ULFM): Open MPI 5 with ULFM, found under -ulfm (at the default
prefix, installed there from PyPI when missing), running mpi/ulfm_ft.c,
which does what bench/ft/rank does the ULFM way (a blocking receive that
fails once a failure or a revocation is known; MPIX_Comm_agree,
MPIX_Comm_shrink, MPIX_Comm_revoke), over the same transport (btl
self,tcp or self,sm,tcp). Detection is also shown against ftrma's
configured failure detector timeout (the hb-timeout column); ULFM learns of
a SIGKILL from its runtime (PRRTE sees its child die), not from heartbeats,
and of a SIGSTOP from its heartbeat detector, which the stop jobs turn on
with ftrma's timeout for that N (and a quarter of it as the period).
The replace jobs' peer is bench/ulfm.

Exit status: 0 when every value was measured, 3 when some are missing (the
others are still printed and written), 1 when none were, 2 on bad flags.

Flags:
`

// sysFtrma is the system name in the table and the JSON: ftrma-tcp, or
// ftrma-shm with -transport shm.
var sysFtrma = "ftrma-tcp"

// colTimeout is the table's reference column: the detector timeout, shown in
// the detect rows so that the ratio column reads detection/timeout. It is
// not written to the JSON.
const colTimeout = "hb-timeout"

// benches is the order of the table's rows (then by N).
var benches = []string{"detect_p50", "detect_p99", "stop_p50", "stop_p99", "agree_lat", "shrink_lat", "revoke_lat", "replace_lat", "kill_shrink_lat",
	"grow_lat", "grow_keys", "grow_bytes", "grow_new_keys"}

// jobKinds are the kinds of job, -only's words, and the benches each gives.
var jobKinds = map[string][]string{
	"detect":  {"detect_p50", "detect_p99"},
	"stop":    {"stop_p50", "stop_p99"},
	"coll":    {"agree_lat", "shrink_lat", "revoke_lat"},
	"replace": {"replace_lat", "kill_shrink_lat"},
	"grow":    {"grow_lat", "grow_keys", "grow_bytes", "grow_new_keys"},
}

const noPeerNote = `No ULFM peer in this run (-ulfm off, or Open MPI 5 with ULFM could not be found
or installed): detection is reported against ftrma's configured failure
detector timeout only (the hb-timeout column; ftrun --hb-period/--hb-timeout).`

type options struct {
	quick        bool
	jsonPath     string
	sizes        []int
	detectRuns   int // detect jobs per N
	stopRuns     int // stop jobs per N
	collRuns     int
	replaceRuns  int // replace jobs per N: Replace first in even rounds, Shrink first in odd ones
	growRuns     int // store grow jobs per N
	growKeys     int
	growValue    int
	growCopies   int
	iters        int
	warmup       int
	revokeRounds int
	hbPeriod     time.Duration
	hbTimeout    time.Duration
	poll         time.Duration
	timeout      time.Duration
	transport    string // ftrun --transport
	attempts     int
	verbose      bool
	ulfm         string // Open MPI 5 with ULFM: its prefix, or "off"
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("-n %q: want a comma-separated list of process counts >= 2", s)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("ft", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	sizes := fs.String("n", "4,8,16,32", "process counts `N,...`")
	fs.BoolVar(&o.quick, "quick", false, "fewer jobs and iterations: under 5 minutes")
	fs.StringVar(&o.jsonPath, "json", "", "write the results to `FILE` as a JSON array of {bench,size,system,value,unit}")
	fs.IntVar(&o.detectRuns, "detect-runs", 0, "detect jobs per N (default 10 with -quick, 30 without)")
	fs.IntVar(&o.stopRuns, "stop-runs", 0, "stop jobs per N (default 5 with -quick, 15 without)")
	fs.IntVar(&o.collRuns, "coll-runs", 0, "agree/shrink/revoke jobs per N, median over them (default 3 with -quick, 5 without)")
	fs.IntVar(&o.replaceRuns, "replace-runs", 0, "replace jobs per N, half with Replace first, half with Shrink first (default 4 with -quick, 6 without)")
	fs.IntVar(&o.growRuns, "grow-runs", 3, "store grow jobs per N (with -only grow)")
	fs.IntVar(&o.growKeys, "grow-keys", 10000, "grow: keys in the store")
	fs.IntVar(&o.growValue, "grow-value", 64, "grow: bytes per value")
	fs.IntVar(&o.growCopies, "grow-copies", 3, "grow: replicas per key")
	only := fs.String("only", "detect,stop,coll,replace", "the kinds of job to run: `KIND,...` of detect, stop, coll, replace, grow")
	fs.IntVar(&o.iters, "iters", 0, "timed Agree and Shrink calls per job (default 50 with -quick, 200 without)")
	fs.IntVar(&o.warmup, "warmup", 5, "untimed Agree and Shrink calls before timing")
	fs.IntVar(&o.revokeRounds, "revoke-rounds", 0, "revoke rounds per job (default 10 with -quick, 30 without)")
	fs.DurationVar(&o.hbPeriod, "hb-period", 0, "ftrun --hb-period: failure detector heartbeat period (default: ftrun's, 20ms)")
	fs.DurationVar(&o.hbTimeout, "hb-timeout", 0, "ftrun --hb-timeout: failure detector timeout (default: ftrun's, 60ms)")
	fs.DurationVar(&o.poll, "poll", 50*time.Microsecond, "detect: sleep of the ranks between two looks at ProcFailed; 0: they wait on Comm.FailuresChanged instead")
	fs.DurationVar(&o.timeout, "timeout", 90*time.Second, "ftrun --timeout of every job; the driver kills ftrun 15s later")
	fs.StringVar(&o.transport, "transport", "tcp", "ftrun --transport of every job: tcp or shm")
	fs.IntVar(&o.attempts, "attempts", 5, "tries of a job that fails (a rank lost at start-up, a false suspicion) before it counts as missing")
	fs.BoolVar(&o.verbose, "v", false, "print every job's values and the ranks' stderr of failed jobs in full")
	fs.StringVar(&o.ulfm, "ulfm", ulfm.DefaultPrefix, "the ULFM peer: the prefix `DIR` of an Open MPI 5 built with ULFM (at the default, installed from PyPI when missing), or off")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.sizes, err = parseSizes(*sizes); err != nil {
		return o, err
	}
	if o.growRuns < 0 || o.growKeys < 1 || o.growValue < 1 || o.growCopies < 1 {
		return o, errors.New("-grow-runs must not be negative, -grow-keys, -grow-value and -grow-copies must be positive")
	}
	if o.detectRuns < 0 || o.stopRuns < 0 || o.collRuns < 0 || o.replaceRuns < 0 || o.iters < 0 || o.warmup < 0 || o.revokeRounds < 0 || o.attempts < 1 {
		return o, errors.New("counts must not be negative, -attempts at least 1")
	}
	if o.hbPeriod < 0 || o.hbTimeout < 0 || o.poll < 0 || o.timeout <= 0 {
		return o, errors.New("durations must not be negative, -timeout must be positive")
	}
	if o.transport != "tcp" && o.transport != "shm" {
		return o, fmt.Errorf("-transport %q: want tcp or shm", o.transport)
	}
	def := func(v *int, quick, full int) {
		if *v == 0 {
			*v = full
			if o.quick {
				*v = quick
			}
		}
	}
	def(&o.detectRuns, 10, 30)
	def(&o.stopRuns, 5, 15)
	def(&o.collRuns, 3, 5)
	def(&o.iters, 50, 200)
	def(&o.revokeRounds, 10, 30)
	def(&o.replaceRuns, 4, 6)
	kinds := make(map[string]bool)
	for _, k := range strings.Split(*only, ",") {
		k = strings.TrimSpace(k)
		if jobKinds[k] == nil {
			return o, fmt.Errorf("-only %q: want a comma-separated list of detect, stop, coll, replace, grow", *only)
		}
		kinds[k] = true
	}
	if !kinds["detect"] {
		o.detectRuns = 0
	}
	if !kinds["stop"] {
		o.stopRuns = 0
	}
	if !kinds["coll"] {
		o.collRuns = 0
	}
	if !kinds["replace"] {
		o.replaceRuns = 0
	}
	if !kinds["grow"] {
		o.growRuns = 0
	}
	return o, nil
}

// runs reports whether the jobs that give bench b are to run.
func (o options) runs(b string) bool {
	for k, bs := range jobKinds {
		if slices.Contains(bs, b) {
			switch k {
			case "detect":
				return o.detectRuns > 0
			case "stop":
				return o.stopRuns > 0
			case "coll":
				return o.collRuns > 0
			case "replace":
				return o.replaceRuns > 0
			case "grow":
				return o.growRuns > 0
			}
		}
	}
	return false
}

// detectorSettings returns the effective heartbeat period and timeout (the
// detector's own defaults, failure.Config.WithDefaults, where the flags
// leave them unset) and whether they are ftrun's defaults.
func (o options) detectorSettings() (period, timeout time.Duration, defaults bool) {
	c := o.detector().WithDefaults()
	return c.Period, c.Timeout, o.hbPeriod == 0 && o.hbTimeout == 0
}

// detector is the detector setting the flags ask for (zeros: defaults).
func (o options) detector() failure.Config {
	return failure.Config{Period: o.hbPeriod, Timeout: o.hbTimeout}
}

// timeoutFor is the detector timeout the ranks of an n-process job on this
// host use, as the ranks compute it themselves (failure.Config.ForHost, in
// startup.DetectorSettings): an explicit -hb-timeout, or 60 ms (three
// periods when only -hb-period is set) times the ranks per CPU.
func (o options) timeoutFor(n int) time.Duration {
	return o.detector().ForHost(n, runtime.NumCPU()).Timeout
}

func main() { os.Exit(run()) }

func run() int {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ft:", err)
		return 2
	}
	sysFtrma = "ftrma-" + o.transport
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "bench-ft-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ft:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	fmt.Printf("bench/ft: building cmd/ftrun and bench/ft/rank in %s\n", dir)
	bins, err := build(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ft:", err)
		return 1
	}
	systems := []system{ftrmaSystem(o, bins)}
	var peers []string
	peerMissing := ""
	if o.ulfm != "off" && (o.detectRuns > 0 || o.stopRuns > 0 || o.collRuns > 0) {
		peer, about, err := ulfmSystem(ctx, o, dir)
		if err != nil {
			peerMissing = "ulfm-" + o.transport + ": " + err.Error()
		} else {
			systems = append(systems, peer)
			peers = append(peers, peer.name)
			fmt.Printf("peer: %s: %s\n", peer.name, about)
		}
	}

	period, hbTimeout, defaults := o.detectorSettings()
	src := "ftrun's defaults"
	if !defaults {
		src = "set by -hb-period/-hb-timeout"
	}
	mode := "full"
	if o.quick {
		mode = "quick"
	}
	fmt.Printf("plan (%s): N = %s; per N %d detect jobs, %d agree/shrink/revoke jobs (%d Agree and %d Shrink calls after %d warm-up, %d revoke rounds), %d replace jobs (ftrun --respawn=1) and %d store grow jobs (%d keys of %d B, %d copies); a failed job is tried up to %d times\n",
		mode, joinInts(o.sizes), o.detectRuns, o.collRuns, o.iters, o.iters, o.warmup, o.revokeRounds, o.replaceRuns,
		o.growRuns, o.growKeys, o.growValue, o.growCopies, o.attempts)
	if o.poll > 0 {
		fmt.Printf("failure detector: heartbeat period %v, timeout %v (%s); ranks poll every %v\n", period, hbTimeout, src, o.poll)
	} else {
		fmt.Printf("failure detector: heartbeat period %v, timeout %v (%s); ranks wait on FailuresChanged\n", period, hbTimeout, src)
	}
	fmt.Printf("machine: %d CPUs%s\n", runtime.NumCPU(), loadNote())
	if b, ok := host.CPUBusy(time.Second); ok && b > 0.25 {
		fmt.Printf("WARNING: the CPUs were %.0f%% busy in the second before measuring: other processes compete with the %d-process jobs, inflating latencies and provoking false failure suspicions\n", 100*b, slices.Max(o.sizes))
	}

	start := time.Now()
	m := measure(ctx, o, bins, systems)
	fmt.Printf("measured in %.0fs\n\n", time.Since(start).Seconds())

	rs := m.results(o, peers...)
	fmt.Printf("ftrma over %s, one host, N processes; failure detector timeout %v (heartbeat %v, %s), stretched by ranks per CPU where N exceeds the %d CPUs (hb-timeout column)\n", o.transport, hbTimeout, period, src, runtime.NumCPU())
	fmt.Printf("detect_*, stop_*: SIGKILL, SIGSTOP -> last survivor knows, p50/p99 over jobs; replace_lat, kill_shrink_lat: SIGKILL -> full-size / shrunk communicator everywhere, median over jobs; the others: median of calls\n")
	columns := append(append([]string{sysFtrma}, peers...), colTimeout)
	if err := result.WriteTableRatios(os.Stdout, withTimeoutColumn(rs, o.timeoutFor), columns, sysFtrma); err != nil {
		fmt.Fprintln(os.Stderr, "ft:", err)
		return 1
	}
	fmt.Println()
	if len(peers) == 0 {
		fmt.Println(noPeerNote)
		fmt.Println()
	}

	missing := m.missing(o, rs, peers...)
	if peerMissing != "" {
		missing = append(missing, peerMissing)
	}
	for _, s := range missing {
		fmt.Println("MISSING:", s)
	}
	for _, s := range m.notes {
		fmt.Println("NOTE:", s)
	}
	if n := lingeredJobs.Load(); n > 0 {
		fmt.Printf("NOTE: in %d job(s) mpirun had not ended %v after the ULFM program printed everything the job measures; its process group was killed (the values do not include that time)\n", n, lingerGrace)
	}
	return result.Finish(ctx, "ft", o.jsonPath, rs, len(missing))
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// loadNote returns ", load average X" from /proc/loadavg, or "".
func loadNote() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return ", 1-minute load average " + f[0] + " before the run"
}

// withTimeoutColumn adds, for every detect row, the detector timeout of its
// job size as the value of the reference column colTimeout (table only).
func withTimeoutColumn(rs []result.Result, timeoutFor func(n int) time.Duration) []result.Result {
	out := slices.Clone(rs)
	for _, r := range rs {
		if strings.HasPrefix(r.Bench, "detect_") || strings.HasPrefix(r.Bench, "stop_") {
			out = append(out, result.Result{Bench: r.Bench, Size: r.Size, System: colTimeout,
				Value: float64(timeoutFor(r.Size)) / float64(time.Millisecond), Unit: "ms"})
		}
	}
	return out
}
