package launcher

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport/shm"
)

// defaultHBPeriod is the failure detector's default heartbeat period, for
// checking --hb-timeout against it.
const defaultHBPeriod = 20 * time.Millisecond

// Version is what ftrun --version prints.
const Version = "ftrun 0.1.0"

// ftrun's exit status. An ftrun interrupted by SIGINT or SIGTERM exits with
// 128 + the signal's number (130, 143) after forwarding the signal to the ranks.
const (
	ExitOK      = 0 // every rank exited with status 0
	ExitFailed  = 1 // some rank exited non-zero or was killed by a signal (--kill included)
	ExitUsage   = 2 // bad command line
	ExitLaunch  = 3 // the launcher could not start the job
	ExitTimeout = 4 // --timeout expired and the job was killed
	ExitAborted = 5 // --no-ft: a rank failed and the job was aborted

	exitSignaled = 128 // + the signal's number
)

// Options describes a job, as ftrun's command line does.
type Options struct {
	// N is the number of ranks, >= 1.
	N int
	// TagOutput prefixes every line a rank writes with "[rank] ".
	TagOutput bool
	// Kills are failures to inject.
	Kills []KillSpec
	// Timeout kills the whole job after this long; 0 means never.
	Timeout time.Duration
	// HBPeriod and HBTimeout set the ranks' failure detector: the heartbeat
	// period and the silence after which a rank is declared failed (0: the
	// defaults, 20ms and 60ms).
	HBPeriod, HBTimeout time.Duration
	// NoFT aborts the whole job at the first rank failure, like classic MPI.
	// By default a failed rank does not end the job (ULFM's rule).
	NoFT bool
	// Spin is how long a rank's transport busy-polls before parking (passed
	// as FTRMA_SPIN); 0 leaves the transport's default, negative disables
	// busy-polling.
	Spin time.Duration
	// Transport is the transport between the ranks: "auto" (or ""), "tcp",
	// "shm" or "verbs". auto chooses shared memory between ranks of one host
	// (every rank of an ftrun job is on this host). Resolve it with
	// ResolveTransport.
	Transport string
	// Verbose makes ftrun report its choices (the transport) before starting.
	Verbose bool
	// Prog and Args are the program every rank runs and its arguments.
	Prog string
	Args []string

	// Stdout and Stderr receive the ranks' output and ftrun's reports.
	// nil means os.Stdout and os.Stderr. They are written one whole line at
	// a time, never concurrently.
	Stdout, Stderr io.Writer

	// Help and Version are set when --help or --version was given; the other
	// fields are then not validated.
	Help, Version bool
}

// KillSpec asks the launcher to send SIGKILL to Rank After the job started.
type KillSpec struct {
	Rank  ftrma.Rank
	After time.Duration
}

// String formats k as on the command line, e.g. "3@1s".
func (k KillSpec) String() string { return fmt.Sprintf("%d@%v", k.Rank, k.After) }

// ParseKillSpec parses RANK@DURATION, e.g. "3@1s"; the rank's range is not
// checked.
func ParseKillSpec(s string) (KillSpec, error) {
	k, err := parseKill(s)
	if err != nil {
		return KillSpec{}, fmt.Errorf("--kill %q: %w", s, err)
	}
	return k, nil
}

func parseKill(s string) (KillSpec, error) {
	rs, ds, ok := strings.Cut(s, "@")
	if !ok {
		return KillSpec{}, errors.New("want RANK@DURATION, e.g. 3@1s")
	}
	r, err := strconv.Atoi(rs)
	if err != nil || r < 0 {
		return KillSpec{}, fmt.Errorf("rank %q is not a non-negative integer", rs)
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d < 0 {
		return KillSpec{}, fmt.Errorf("%q is not a non-negative duration such as 500ms or 2s", ds)
	}
	return KillSpec{Rank: ftrma.Rank(r), After: d}, nil
}

type killFlag struct{ kills *[]KillSpec }

func (f killFlag) String() string {
	if f.kills == nil {
		return ""
	}
	s := make([]string, len(*f.kills))
	for i, k := range *f.kills {
		s[i] = k.String()
	}
	return strings.Join(s, ",")
}

func (f killFlag) Set(s string) error {
	k, err := parseKill(s)
	if err != nil {
		return err
	}
	*f.kills = append(*f.kills, k)
	return nil
}

// Usage is ftrun's help text.
const Usage = `usage: ftrun -n N [flags] prog [args...]

ftrun starts N ranks of prog on this host as one ftrma job, connects them
through its rendezvous, forwards their output, and exits when every rank has
exited. A rank's death does not stop the others.

Flags (-flag and --flag are the same; flags stop at prog):
  -n N                    number of ranks (required, >= 1)
  --tag-output            prefix every output line with "[rank] "
  --no-ft                 abort the job when a rank fails (default: carry on)
  --hb-period DURATION    failure detector heartbeat period (default 20ms)
  --hb-timeout DURATION   silence after which a rank is declared failed
                          (default 60ms, times the ranks per CPU when the job
                          has more ranks than this host has CPUs); must
                          exceed the period
  --kill RANK@DURATION    send SIGKILL to RANK DURATION after the job starts,
                          e.g. --kill 3@1s; may be repeated
  --timeout DURATION      kill the whole job after DURATION (default: never)
  --transport NAME        auto, tcp, shm or verbs (default auto: shared memory
                          between ranks of one host, which every rank of an
                          ftrun job is; verbs is not built into this ftrun)
  -v                      report the choices made (the transport) on stderr
  --spin DURATION         how long ranks busy-poll for a reply before parking
                          (default: the transport's, 50us, or none when ranks
                          outnumber cores); negative disables busy-polling
  --version               print the version and exit
  -h, --help              print this help and exit

Each rank's environment:
  FTRMA_RANK              its rank, 0..N-1
  FTRMA_SIZE              N
  FTRMA_RENDEZVOUS        host:port of ftrun's rendezvous server
  FTRMA_SECRET            the job secret (hex); every connection proves it
  FTRMA_JOB               the job id
  FTRMA_LOCAL_SIZE        ranks of the job on this host
  FTRMA_SPIN              the --spin duration, when given
  FTRMA_HB_PERIOD         the --hb-period duration, when given
  FTRMA_HB_TIMEOUT        the --hb-timeout duration, when given
  GOMAXPROCS=1            when the job has at least as many ranks as this host
                          has CPUs and GOMAXPROCS is not set already

SIGINT and SIGTERM are forwarded to every rank; a second one kills them all.

Failures: a rank that dies (killed by a signal, or declared failed by the
other ranks' failure detector, which ftrun then kills) does not end the job:
the survivors are told at once and carry on (ULFM's rule). ftrun reports which
ranks failed and when. With --no-ft the first failure aborts the whole job,
like classic MPI.

Exit status:
  0                       every surviving rank exited with status 0 (ranks may
                          have failed)
  1                       a surviving rank exited non-zero, or no rank survived
  2                       usage error
  3                       the job could not be started
  4                       --timeout expired; the job was killed
  5                       --no-ft: a rank failed and the job was aborted
  128+SIG                 ftrun was interrupted by signal SIG (130 SIGINT,
                          143 SIGTERM) and forwarded it to the ranks
`

// newFlagSet defines ftrun's flags over o.
func newFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("ftrun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.IntVar(&o.N, "n", 0, "number of ranks")
	fs.BoolVar(&o.TagOutput, "tag-output", false, "prefix output lines with [rank]")
	fs.Var(killFlag{&o.Kills}, "kill", "RANK@DURATION: SIGKILL RANK after DURATION")
	fs.DurationVar(&o.Timeout, "timeout", 0, "kill the job after this long")
	fs.Func("spin", "busy-poll duration of the ranks' transport (negative: none)", func(v string) error {
		if n, err := strconv.Atoi(v); err == nil && n <= 0 {
			o.Spin = time.Duration(n) // -1 (no unit needed) disables, 0 is the default
			return nil
		}
		d, err := time.ParseDuration(v)
		o.Spin = d
		return err
	})
	fs.BoolVar(&o.NoFT, "no-ft", false, "abort the job at the first rank failure")
	fs.StringVar(&o.Transport, "transport", "", "transport: auto (default), tcp, shm or verbs")
	fs.BoolVar(&o.Verbose, "v", false, "report the choices made")
	fs.DurationVar(&o.HBPeriod, "hb-period", 0, "failure detector heartbeat period")
	fs.DurationVar(&o.HBTimeout, "hb-timeout", 0, "failure detector timeout")
	fs.BoolVar(&o.Version, "version", false, "print the version")
	fs.BoolVar(&o.Help, "help", false, "print help")
	fs.BoolVar(&o.Help, "h", false, "print help")
	return fs
}

// ParseArgs parses ftrun's command line, without the command name. Parsing
// stops at the first argument that is not a flag (the program) or after "--".
// An error describes a usage mistake.
func ParseArgs(args []string) (*Options, error) {
	o := new(Options)
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.Help || o.Version {
		return o, nil
	}
	n := false
	fs.Visit(func(f *flag.Flag) { n = n || f.Name == "n" })
	switch {
	case !n:
		return nil, errors.New("-n N is required")
	case o.N < 1:
		return nil, fmt.Errorf("-n %d: need at least 1 rank", o.N)
	case o.Timeout < 0:
		return nil, fmt.Errorf("--timeout %v: must not be negative", o.Timeout)
	case o.HBPeriod < 0 || o.HBTimeout < 0:
		return nil, fmt.Errorf("--hb-period and --hb-timeout must not be negative")
	case o.HBTimeout != 0 && o.HBTimeout <= cmp.Or(o.HBPeriod, defaultHBPeriod):
		return nil, fmt.Errorf("--hb-timeout %v must exceed the heartbeat period", o.HBTimeout)
	case fs.NArg() == 0:
		return nil, errors.New("no program to run")
	}
	if _, err := ResolveTransport(o.Transport); err != nil {
		return nil, err
	}
	for _, k := range o.Kills {
		if int(k.Rank) >= o.N {
			return nil, fmt.Errorf("--kill %v: no rank %d in a job of %d", k, k.Rank, o.N)
		}
	}
	o.Prog, o.Args = fs.Arg(0), fs.Args()[1:]
	return o, nil
}

// Transports ftrun can give its ranks.
const (
	TransportTCP = "tcp"
	TransportSHM = "shm"
)

// ResolveTransport turns a --transport value into the transport the ranks
// use. Every rank of an ftrun job runs on this host, so auto means shared
// memory. verbs is refused: this ftrun is built without it.
func ResolveTransport(name string) (string, error) {
	switch name {
	case "", "auto", TransportSHM:
		return TransportSHM, nil
	case TransportTCP:
		return TransportTCP, nil
	case "verbs":
		return "", errors.New("--transport verbs: this ftrun is built without RDMA verbs support")
	}
	return "", fmt.Errorf("--transport %q: want auto, tcp, shm or verbs", name)
}

// chooseTransport resolves a --transport value for a job of n ranks and
// says why. auto picks shared memory unless its directory lacks the room a
// job of n ranks needs at least (the message rings grow with n²), and then
// falls back to TCP.
func chooseTransport(name string, n int) (string, string, error) {
	tr, err := ResolveTransport(name)
	if err != nil {
		return "", "", err
	}
	if name != "" && name != "auto" {
		return tr, "as asked", nil
	}
	need := shmNeed(n)
	if free, ok := shmFree(); ok && free < need {
		return TransportTCP, fmt.Sprintf("auto: %s has %d MiB free, a job of %d ranks needs about %d MiB", shm.DefaultDir, free>>20, n, need>>20), nil
	}
	return TransportSHM, "auto: every rank runs on this host", nil
}

// shmNeed estimates the shared memory a job of n ranks needs before its
// windows: n control segments, each with an incoming ring per rank.
func shmNeed(n int) uint64 {
	return uint64(n)*uint64(n)*(160<<10) + uint64(n)*(4<<20)
}
