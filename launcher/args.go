package launcher

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/shm"
	"github.com/ftrma/ftrma/transport/verbs"
)

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

	// With --no-ft ftrun exits with the status of the rank whose failure
	// aborted the job, as mpirun does: its exit status, 128 + the signal's
	// number when a signal killed it, ExitFailed when it was lost.

	exitSignaled = 128 // + the signal's number
)

// Config describes a job, as ftrun's command line does.
type Config struct {
	// N is the number of ranks, >= 1.
	N int
	// TagOutput prefixes every line a rank writes with "[rank] ".
	TagOutput bool
	// OutputFilename (ftrun --output-filename DIR), when not empty, also
	// writes each rank's output to DIR/1/rank.N/stdout and stderr on the
	// rank's host, as Open MPI's mpirun does, and the job's report to
	// DIR/report on ftrun's host at the end (see outfiles.go, report.go).
	// A relative DIR is relative to ftrun's working directory.
	OutputFilename string
	// Kills, Pauses, KillHosts and Cuts are failures to inject (--kill,
	// --pause, --kill-host, --cut; see inject.go).
	Kills     []KillSpec
	Pauses    []PauseSpec
	KillHosts []KillHostSpec
	Cuts      []CutSpec
	// Timeout kills the whole job after this long; 0 means never.
	Timeout time.Duration
	// HBPeriod and HBTimeout set the ranks' failure detector: the heartbeat
	// period and the silence after which a rank is declared failed (0: the
	// defaults, 20ms and 60ms).
	HBPeriod, HBTimeout time.Duration
	// Export (ftrun -x) holds NAME=VALUE entries every rank gets in its
	// environment, on every host, over what its host's environment says.
	Export []string
	// NoFT aborts the whole job at the first rank failure, like classic MPI.
	// By default a failed rank does not end the job (ULFM's rule).
	NoFT bool
	// Spin is how long a rank's transport busy-polls before parking (passed
	// as FTRMA_SPIN); 0 leaves the transport's default, negative disables
	// busy-polling.
	Spin time.Duration
	// Transport is the transport between the ranks: "auto" (or ""), "tcp",
	// "shm" or "verbs". auto chooses shared memory when every rank runs on
	// this host and TCP when Hosts names remote hosts (see chooseTransport);
	// shm with remote hosts is an error.
	Transport string
	// Hosts spreads the ranks over hosts (ftrun --hosts): ranks 0.. go to
	// the first host, the next block to the second, and so on. Empty means
	// every rank on this host.
	Hosts []HostSpec
	// Hostfile and HostList (-H) name the hosts to place ranks on, with
	// their slots (Open MPI's formats: ParseHostfile, ParseHostList); ftrun
	// starts an agent on each host it places ranks on (by ssh, or by srun
	// inside a Slurm allocation). Without them, Hosts or -n alone, ftrun
	// inside a Slurm allocation uses the allocation's nodes (SlurmHosts).
	Hostfile, HostList string
	// MapBy is "slot" (default: fill each host's slots in order) or "node"
	// (round-robin over the hosts).
	MapBy string
	// Spares is the number of spare ranks (ftrun --respawn[=S]): the job
	// has world ranks 0..N+Spares-1, of which N..N+Spares-1 start absent
	// and are started, one each, when ranks ask for replacements
	// (startup.Session.Spawn): at most Spares spawns per job. 0: none;
	// -1 (--respawn without a value): as many as N, so that every rank
	// can be replaced once.
	Spares int
	// SpareHosts (ftrun --spare-hosts) names hosts for spares only, in
	// -H's format (host1:2,host2), or in --hosts' format (running agents)
	// when Hosts is given. Their agents start with the job, with no ranks;
	// a spare goes there when the host of the rank it replaces cannot take
	// it (see spareplace.go). Needs Spares.
	SpareHosts string
	// Stdin is --stdin: the rank that gets ftrun's standard input ("0",
	// ftrun's default, as mpirun's), StdinAll, or StdinNone (or "", the
	// default of a Job started without ParseArgs).
	Stdin string
	// BindTo is --bind-to: BindNone (or "") leaves the ranks where the
	// kernel puts them, BindCore runs each rank started at launch on a CPU
	// of its own (bind.go). ReportBindings (--report-bindings) says where
	// each rank runs.
	BindTo         string
	ReportBindings bool
	// Oversubscribe allows more ranks than slots. Without Hostfile,
	// HostList, Hosts or a Slurm allocation, this host has one slot per CPU
	// (runtime.NumCPU), as mpirun counts them.
	Oversubscribe bool
	// LaunchAgent is the ftrun binary to run on the other hosts; "" means
	// this ftrun's own path (the hosts then need it at the same place).
	LaunchAgent string
	// SSH is the command that starts agents on hosts outside Slurm, split
	// on spaces ("" means $FTRMA_SSH, else "ssh"); ftrun adds -o
	// BatchMode=yes -T HOST COMMAND.
	SSH string
	// NoSlurm ignores a Slurm allocation ftrun runs in.
	NoSlurm bool
	// NoArbiter (ftrun --no-arbiter) keeps ftrun the job's single
	// authority over several hosts, as before the replicated arbiter: by
	// default ftrun and the agents of a job over several hosts run it
	// (launcher/internal/arbiter, arbiterjob.go), and the job and its data survive
	// the loss of ftrun or of its host.
	NoArbiter bool
	// DataPlain (ftrun --data-plain) leaves the ranks' TCP connections
	// between hosts unsealed: their frames cross the network in clear,
	// authenticated only when the connection is made. By default they are
	// sealed (encrypted and authenticated, record by record: transport/tcp),
	// as FTRMA_SEAL in ftrun's environment may also say (remote, the
	// default; all, loopback too, to measure the cost on one host; none).
	DataPlain bool
	// Arbiter (ftrun --arbiter) asks for the replicated arbiter, the
	// default over several hosts; on one host, where ftrun alone decides,
	// ftrun says that no arbiter runs.
	Arbiter bool
	// AgentSecret is the secret shared with the agents of Hosts; empty
	// means the value of FTRMA_AGENT_SECRET. Only a job with remote hosts
	// needs it.
	AgentSecret string
	// VerbsDevice and VerbsGID choose the RDMA device and GID table index
	// (decimal) of the verbs transport; "" means the first device with an
	// active port, and the RoCE v2 GID of its interface's IPv4 address.
	VerbsDevice, VerbsGID string
	// Verbose makes ftrun report its choices (the transport) before starting,
	// and the ranks log at debug level (see logVars).
	Verbose bool
	// Prog and Args are the program every rank runs and its arguments.
	Prog string
	Args []string

	// Stdout and Stderr receive the ranks' output and ftrun's reports.
	// nil means os.Stdout and os.Stderr. They are written one whole line at
	// a time, never concurrently.
	Stdout, Stderr io.Writer

	// Help and Version are set when --help or --version was given, Cleanup
	// when --cleanup was; the other fields are then not validated.
	Help, Version, Cleanup bool

	// cpuStretch is the ranks per CPU of ftrun's own host
	// (failure.RanksPerCPU; 0 or 1 when there are no more ranks than CPUs):
	// Start sets it, and the host layer's timing (the ranks' lease)
	// stretches by it as the ranks' detector timeout does.
	cpuStretch int
	// arbitrated is set by Start when the replicated arbiter runs the job
	// (--arbiter over several hosts): the lease then does not stretch
	// (timingFor).
	arbitrated bool
	// hostVerdict is, when arbitrated, the arbiter's verdict bound on a
	// silent host (arbiter.VerdictBound), which Start passes to the ranks
	// for their chain of bounds (jobwire.EnvHostVerdict).
	hostVerdict time.Duration
}

// detector is the failure detector setting the job asks for (--hb-period,
// --hb-timeout), zeros meaning the defaults (failure.Config).
func (o *Config) detector() failure.Config {
	return failure.Config{Period: o.HBPeriod, Timeout: o.HBTimeout}
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

// PauseSpec asks the launcher to stop Rank's process group with SIGSTOP At
// after the job started, and to let it go on with SIGCONT For later (a hung
// rank). The SIGCONT is scheduled on the rank's own host.
type PauseSpec struct {
	Rank    ftrma.Rank
	At, For time.Duration
}

// String formats p as on the command line, e.g. "2@500ms:3s".
func (p PauseSpec) String() string { return fmt.Sprintf("%d@%v:%v", p.Rank, p.At, p.For) }

// ParsePauseSpec parses RANK@T:D, e.g. "2@500ms:3s": T >= 0, D > 0; the
// rank's range is not checked.
func ParsePauseSpec(s string) (PauseSpec, error) {
	p, err := parsePause(s)
	if err != nil {
		return PauseSpec{}, fmt.Errorf("--pause %q: %w", s, err)
	}
	return p, nil
}

func parsePause(s string) (PauseSpec, error) {
	rs, rest, ok := strings.Cut(s, "@")
	ts, ds, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return PauseSpec{}, errors.New("want RANK@T:D, e.g. 2@1s:3s (stop rank 2 1s after the start, for 3s)")
	}
	r, err := strconv.Atoi(rs)
	if err != nil || r < 0 {
		return PauseSpec{}, fmt.Errorf("rank %q is not a non-negative integer", rs)
	}
	at, err := parseInjectDuration(ts)
	if err != nil {
		return PauseSpec{}, err
	}
	d, err := parseInjectDuration(ds)
	if err != nil {
		return PauseSpec{}, err
	}
	if d == 0 {
		return PauseSpec{}, errors.New("a pause of 0 stops nothing: want D > 0")
	}
	return PauseSpec{Rank: ftrma.Rank(r), At: at, For: d}, nil
}

// parseInjectDuration parses a non-negative duration of an injection.
func parseInjectDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a non-negative duration such as 500ms or 2s", s)
	}
	return d, nil
}

// KillHostSpec asks the launcher to kill host Host At after the job
// started: its agent SIGKILLs every rank of the job there, then itself, as
// if the machine died. Host is named as in the hostfile, -H, the Slurm node
// list or --hosts.
type KillHostSpec struct {
	Host string
	At   time.Duration
}

// String formats k as on the command line, e.g. "h2@1s".
func (k KillHostSpec) String() string { return fmt.Sprintf("%s@%v", k.Host, k.At) }

// ParseKillHostSpec parses HOST@T, e.g. "h2@1s"; whether the job has the
// host is not checked.
func ParseKillHostSpec(s string) (KillHostSpec, error) {
	k, err := parseKillHost(s)
	if err != nil {
		return KillHostSpec{}, fmt.Errorf("--kill-host %q: %w", s, err)
	}
	return k, nil
}

func parseKillHost(s string) (KillHostSpec, error) {
	h, at, err := parseHostAt(s, "HOST@T, e.g. h2@1s")
	if err != nil {
		return KillHostSpec{}, err
	}
	d, err := parseInjectDuration(at)
	if err != nil {
		return KillHostSpec{}, err
	}
	return KillHostSpec{Host: h, At: d}, nil
}

// CutSpec asks the launcher to cut host Host's links to every other host of
// the job, ftrun's included, both ways, At after the job started, and to
// restore them Heal later (0: when the job ends).
type CutSpec struct {
	Host     string
	At, Heal time.Duration
}

// String formats c as on the command line, e.g. "h3@1s:2s" or "h3@1s".
func (c CutSpec) String() string {
	if c.Heal == 0 {
		return fmt.Sprintf("%s@%v", c.Host, c.At)
	}
	return fmt.Sprintf("%s@%v:%v", c.Host, c.At, c.Heal)
}

// ParseCutSpec parses HOST@T[:HEAL], e.g. "h3@1s" or "h3@1s:2s": T >= 0,
// HEAL > 0 when given; whether the job has the host is not checked.
func ParseCutSpec(s string) (CutSpec, error) {
	c, err := parseCut(s)
	if err != nil {
		return CutSpec{}, fmt.Errorf("--cut %q: %w", s, err)
	}
	return c, nil
}

func parseCut(s string) (CutSpec, error) {
	h, rest, err := parseHostAt(s, "HOST@T[:HEAL], e.g. h3@1s or h3@1s:2s")
	if err != nil {
		return CutSpec{}, err
	}
	ts, hs, healed := strings.Cut(rest, ":")
	c := CutSpec{Host: h}
	if c.At, err = parseInjectDuration(ts); err != nil {
		return CutSpec{}, err
	}
	if healed {
		if c.Heal, err = parseInjectDuration(hs); err != nil {
			return CutSpec{}, err
		}
		if c.Heal == 0 {
			return CutSpec{}, errors.New("a heal after 0 cuts nothing: want HEAL > 0, or leave it out to cut until the job ends")
		}
	}
	return c, nil
}

// parseHostAt splits HOST@REST at the last @; HOST must be a plain word.
func parseHostAt(s, want string) (host, rest string, err error) {
	i := strings.LastIndexByte(s, '@')
	if i < 0 {
		return "", "", errors.New("want " + want)
	}
	host, rest = s[:i], s[i+1:]
	if host == "" || strings.IndexFunc(host, func(c rune) bool { return c <= ' ' || c == '@' || c >= 0x7f }) >= 0 {
		return "", "", fmt.Errorf("%q is not a host name (want %s)", host, want)
	}
	return host, rest, nil
}

// listFlag is a repeatable flag whose values parse into a list.
// exportFlag is ftrun's -x VAR[=VALUE], repeatable, as mpirun's: VAR alone
// takes ftrun's own value, which must be set.
type exportFlag struct{ list *[]string }

func (f exportFlag) String() string {
	if f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f exportFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if err := checkExport(name); err != nil {
		return err
	}
	if !ok {
		if value, ok = os.LookupEnv(name); !ok {
			return fmt.Errorf("%s is not set in ftrun's environment (give -x %s=VALUE)", name, name)
		}
	}
	*f.list = append(*f.list, name+"="+value)
	return nil
}

// checkExport checks the name of an exported variable: a shell name, and
// not one of the FTRMA_ variables, which ftrun sets for each rank itself.
func checkExport(name string) error {
	if name == "" || strings.IndexFunc(name, func(c rune) bool {
		return c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9')
	}) >= 0 || name[0] >= '0' && name[0] <= '9' {
		return fmt.Errorf("%q is not a variable name", name)
	}
	if strings.HasPrefix(name, "FTRMA_") {
		return fmt.Errorf("%s: ftrun sets the FTRMA_ variables of the ranks itself (FTRMA_LOG and the like pass through from its environment)", name)
	}
	return nil
}

type listFlag[T fmt.Stringer] struct {
	list  *[]T
	parse func(string) (T, error)
}

func (f listFlag[T]) String() string {
	if f.list == nil {
		return ""
	}
	s := make([]string, len(*f.list))
	for i, v := range *f.list {
		s[i] = v.String()
	}
	return strings.Join(s, ",")
}

func (f listFlag[T]) Set(s string) error {
	v, err := f.parse(s)
	if err != nil {
		return err
	}
	*f.list = append(*f.list, v)
	return nil
}

// respawnFlag is --respawn[=S]: alone it means as many spares as ranks
// (-1 until N is known).
type respawnFlag struct{ spares *int }

func (f respawnFlag) String() string {
	if f.spares == nil {
		return "0"
	}
	return strconv.Itoa(*f.spares)
}

func (f respawnFlag) IsBoolFlag() bool { return true }

func (f respawnFlag) Set(s string) error {
	switch s {
	case "true":
		*f.spares = -1
		return nil
	case "false":
		*f.spares = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of spare ranks >= 0, not %q", s)
	}
	*f.spares = n
	return nil
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
       ftrun agent --listen HOST[:PORT] [--once]   (see 'ftrun agent --help')
       ftrun --cleanup

ftrun starts N ranks of prog as one ftrma job, on this host or over several
hosts (--hosts), connects them through its rendezvous, forwards their output,
and exits when every rank has exited. A rank's death does not stop the others.

Flags (-flag and --flag are the same; flags stop at prog):
  -n N                    number of ranks (required, >= 1; at most one per
                          CPU of this host without --oversubscribe)
  --tag-output            prefix every output line with "[rank] "
  --output-filename DIR   also write each rank's output to
                          DIR/1/rank.N/stdout and stderr, on the rank's own
                          host (by ftrun, or by the host's agent; N padded
                          with zeros to the digits of the job's size; a
                          relative DIR is relative to ftrun's working
                          directory), and the job's report to DIR/report
                          on ftrun's host at the end (see README)
  -x VAR[=VALUE]          export VAR to every rank, on every host: ftrun's
                          own value, or VALUE; may be repeated (FTRMA_
                          variables are ftrun's own and refused)
  --bind-to core|none     core: each rank started at launch runs on a CPU of
                          its own, the i-th rank of a host on the i-th CPU its
                          launcher may use (more ranks than CPUs is an error);
                          spares start unbound. Default none
  --report-bindings       say on stderr where each rank runs
  --stdin RANK|all|none   forward ftrun's standard input to rank RANK (default
                          0, as mpirun), to every rank, or to none; the others
                          read /dev/null. Not read while ftrun is in the
                          background of its terminal
  --no-ft                 abort the job when a rank fails (default: carry on),
                          exiting with that rank's status (128+SIG if killed)
  --hb-period DURATION    failure detector heartbeat period (default 20ms)
  --hb-timeout DURATION   silence after which a rank is declared failed
                          (default 60ms, times the ranks per CPU on a full
                          host: see "CPUs" below); must exceed the period
  --kill RANK@DURATION    send SIGKILL to RANK DURATION after the job starts,
                          e.g. --kill 3@1s; may be repeated
  --pause RANK@T:D        stop RANK (SIGSTOP to its process group) T after
                          the job starts and let it go on (SIGCONT) D later,
                          e.g. --pause 2@1s:3s: a hung rank, which the
                          detector and ftrun declare failed if D is long
                          enough; the rank's host keeps the SIGCONT's timer;
                          may be repeated
  --kill-host HOST@T      T after the job starts, SIGKILL every rank on HOST
                          and HOST's agent, as if the machine died; HOST as
                          in the hostfile, -H, the Slurm node list or
                          --hosts (not ftrun's own host); may be repeated
  --cut HOST@T[:HEAL]     T after the job starts, cut HOST's links to every
                          other host of the job (ftrun's too), both ways, by
                          blackhole routes on every side; restore them HEAL
                          later (default: when the job ends). Needs a job on
                          several hosts, and CAP_NET_ADMIN for ftrun and the
                          agents; may be repeated. With --no-ft a failure
                          these cause aborts the job, as --kill's does
  --timeout DURATION      kill the whole job after DURATION (default: never)
  --respawn, --respawn=S  reserve S spare ranks (world ranks N..N+S-1) that
                          the ranks may start to replace failed ones
                          (default S: N); see "Spares" below
  --spare-hosts LIST      hosts for spare ranks only, in -H's format
                          (host1:2,host2), or with --hosts in its format
                          (running agents); their agents start with the job
                          (see "Spares" below). Needs --respawn
  --np N                  the same as -n (Open MPI's -np)
  --hostfile FILE         place the ranks on the hosts of FILE (Open MPI's
                          format: "HOST slots=N [max_slots=M]" lines, #
                          comments); ftrun starts an agent on each host that
                          gets ranks (see "Hosts" below). -n defaults to the
                          total of the slots
  -H, --host LIST         the same from a list: host1:4,host2:4 (a host named
                          N times without a count has N slots)
  --map-by slot|node      slot (default): fill each host's slots in turn;
                          node: one rank per host in turn
  --oversubscribe         allow more ranks than slots (without a hostfile,
                          -H or allocation this host has one slot per CPU)
  --launch-agent PATH     the ftrun binary on the other hosts (default: this
                          ftrun's own path)
  --ssh CMD               command that starts the agents outside Slurm
                          (default $FTRMA_SSH, else ssh); ftrun adds
                          -o BatchMode=yes -T HOST "PATH agent --boot"
  --no-slurm              ignore the Slurm allocation ftrun runs in
  --arbiter               the default over several hosts: ftrun and its
                          agents run the job's replicated arbiter (leases,
                          verdicts, exits), so that the job goes on without
                          ftrun or its host; each node logs its decisions
                          (with --output-filename DIR also to
                          DIR/1/arbiter.N on each host). A no-op on one host
  --no-arbiter            over several hosts, ftrun alone is the job's
                          authority (as before the arbiter): the job ends
                          with ftrun
  --data-plain            the ranks' TCP connections between hosts carry
                          their data in clear (authenticated when they
                          connect only): by default every frame is
                          encrypted and authenticated. For trusted fabrics,
                          after measuring the cost (said at start)
  --hosts H[:N],...       spread the ranks over hosts in contiguous blocks, in
                          order: H is "local" (this host; ftrun starts these
                          ranks itself) or HOST[:PORT], the ftrun agent there
                          (port 7770 by default; write it to give a count:
                          HOST:7770:N; IPv6 as [ADDR]:PORT:N). N ranks on that
                          host; hosts without N share the rest evenly, earlier
                          ones getting one more. Needs FTRMA_AGENT_SECRET, the
                          agents' secret. Default: every rank on this host
  --transport NAME        auto, tcp, shm, shm+tcp, verbs or shm+verbs
                          (default auto: shared memory when every rank runs
                          on this host; over several hosts, where shm is
                          refused, shm+verbs when this ftrun has verbs and a
                          device is usable here (verbs alone with spares),
                          else shm+tcp: shared memory between ranks on the
                          same host and verbs or TCP between hosts, chosen
                          per peer; -v says why)
  --verbs-device NAME     RDMA device of the verbs transport (default: the
                          first with an active port)
  --verbs-gid-index N     GID table index (default: the RoCE v2 GID of the
                          device's interface's IPv4 address)
  -v                      report the choices made (the transport) on stderr,
                          and log at debug level in the ranks (FTRMA_LOG=debug
                          unless ftrun's environment sets FTRMA_LOG)
  --spin DURATION         how long ranks busy-poll for a reply before parking
                          (default: the transport's, 50us, or none when ranks
                          outnumber CPUs: see "CPUs" below); negative
                          disables busy-polling
  --cleanup               remove the shared memory (/dev/shm) of this user's
                          stale jobs, those whose ftrun or agent is gone
                          (killed by SIGKILL), print what was removed and
                          exit; ftrun does the same quietly (-v: not
                          quietly) each time it starts
  --version               print the version and exit
  -h, --help              print this help and exit

Hosts: where the ranks go, by precedence: --hosts (agents started by hand,
"ftrun agent --listen"); --hostfile or -H; inside a Slurm allocation
(SLURM_JOB_ID set), the allocation's nodes with SLURM_TASKS_PER_NODE slots
each; else this host. For --hostfile, -H and Slurm, ftrun starts "ftrun
agent --boot" on every other host that gets ranks: with one srun step
(srun --overlap, one task per node) inside Slurm, else with ssh in batch
mode (keys, no passwords); the ranks on ftrun's own host (named localhost,
its host name or one of its addresses) it starts itself. The agents dial
back to ftrun over mutual TLS 1.3 keyed by a per-host key derived from the
job's secret, which never leaves ftrun; the key reaches the agent in the
ssh channel, or sealed with munge through srun's input. If an agent cannot
be started or does not connect within 10 s, the job fails before any rank
starts, naming the host and what ssh or srun said. ftrun and the agents
ping each other every 250 ms: a host silent for 2 s (cut off, or gone) has
its ranks counted as failed, and its agent, cut off from ftrun, kills them.

Each rank's environment:
  FTRMA_RANK              its rank, 0..N-1
  FTRMA_SIZE              N (N+S with --respawn=S)
  FTRMA_SPARES            S, with --respawn=S: ranks N.. start absent
  FTRMA_SPAWN             in a spare: what the rank that asked for it
                          passed (opaque, base64)
  FTRMA_SPARES_LOST       in a spare: the earlier spares that ended before
                          they joined (absent for good), comma-separated
  FTRMA_RENDEZVOUS        host:port of ftrun's rendezvous server (127.0.0.1,
                          or with remote --hosts this host's IP toward the
                          first agent)
  FTRMA_SECRET            the secret of the rank's host (hex); every connection proves it
  FTRMA_JOB               the job id
  FTRMA_LOCAL_SIZE        ranks of the job on the rank's host
  FTRMA_HOST_ADDR         with remote --hosts: the IP the rank's transport
                          listens on (its host's address toward ftrun)
  FTRMA_SPIN              the --spin duration, when given
  FTRMA_HB_PERIOD         the --hb-period duration, when given
  FTRMA_HB_TIMEOUT        the --hb-timeout duration, when given
  FTRMA_VERBS_DEVICE      the --verbs-device, when given
  FTRMA_VERBS_GID_INDEX   the --verbs-gid-index, when given
  FTRMA_LOG               ftrun's FTRMA_LOG (log level: debug, info, warn,
                          error), or debug with -v, when either is given
  FTRMA_LOG_FORMAT        ftrun's FTRMA_LOG_FORMAT (text or json), when set
  GOMAXPROCS=1            on a full host (see "CPUs" below), unless
                          GOMAXPROCS is set already
Ranks started by an agent get the agent's environment, not ftrun's, as base.

CPUs: one rule fits the job to each host's CPUs. A host is full when it runs
at least as many ranks of the job as it has CPUs; its ranks per CPU are its
ranks divided by its CPUs, rounded up. On a full host every rank runs with
GOMAXPROCS=1 (a rank cannot use more than one CPU) and the failure
detector's default timeout is 60ms times the ranks per CPU (a rank waits
that many time slices for a CPU). Where ranks outnumber CPUs (more than one
rank per CPU) ranks do not busy-poll by default: a spinning rank would take
another's CPU; with one rank per CPU it takes only its own.

SIGINT and SIGTERM are forwarded to every rank; a second one kills them all.
The agents do the same for their ranks, and kill them if ftrun's connection
to them breaks; a rank lost that way counts as failed.

Failures: a rank that dies (killed by a signal, or declared failed by the
other ranks' failure detector, which ftrun then kills) does not end the job:
the survivors are told at once and carry on (ULFM's rule). ftrun reports which
ranks failed and when. With --no-ft the first failure aborts the whole job,
like classic MPI.

One world: ranks hold a lease from ftrun (1 s, times the detector timeout
asked for over 60ms, or the ranks per CPU of ftrun's host, whichever is
larger) and a rank that cannot renew it (its host cut off) exits with
status 76; ftrun tells the others of such a rank's failure only 1.5 lease
terms after it stopped renewing it, when it has surely stopped.

Spares: with --respawn=S every rank sees FTRMA_SIZE=N+S and FTRMA_SPARES=S;
ranks N..N+S-1 start absent. When a rank asks (comm's Replace), ftrun starts
the next spare, with FTRMA_SPAWN set, waits until it has joined, tells
every live rank, then answers. The spare goes to the host of the rank it
replaces if that host is alive and has a free slot (a failed rank frees
its slot); else to a host of --spare-hosts with a free slot; else to
another host with slots beyond -n (a hostfile or allocation host: with
--respawn, hosts that get no rank start an agent too, as many as the spares
need); else to this host if it runs ranks and has a free slot (one per CPU
on a job of this host alone); --oversubscribe lifts the slot limit on the
replaced rank's host and this one. A spare that dies before it joined, or
whose host is lost while it starts, is reported to the asking rank, not to
the others.

Exit status:
  0                       every surviving rank exited with status 0 (ranks may
                          have failed)
  1                       a surviving rank exited non-zero, or no rank survived
  2                       usage error
  3                       the job could not be started
  4                       --timeout expired; the job was killed
  N                       --no-ft: the exit status of the rank whose failure
                          aborted the job (128+SIG when a signal killed it,
                          1 when it was lost), as mpirun
  128+SIG                 ftrun was interrupted by signal SIG (130 SIGINT,
                          143 SIGTERM) and forwarded it to the ranks
`

// newFlagSet defines ftrun's flags over o.
func newFlagSet(o *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("ftrun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.IntVar(&o.N, "n", 0, "number of ranks")
	fs.IntVar(&o.N, "np", 0, "number of ranks")
	fs.StringVar(&o.Hostfile, "hostfile", "", "file of hosts and slots")
	fs.StringVar(&o.HostList, "H", "", "hosts and slots: host1:4,host2:4")
	fs.StringVar(&o.HostList, "host", "", "hosts and slots: host1:4,host2:4")
	fs.StringVar(&o.MapBy, "map-by", "", "slot (default) or node")
	fs.BoolVar(&o.Oversubscribe, "oversubscribe", false, "allow more ranks than slots")
	fs.StringVar(&o.BindTo, "bind-to", "", "core: each rank on a CPU of its own; none (default)")
	fs.StringVar(&o.Stdin, "stdin", "0", "RANK, all or none: who gets ftrun's standard input")
	fs.BoolVar(&o.ReportBindings, "report-bindings", false, "say which CPU each rank is bound to")
	fs.StringVar(&o.LaunchAgent, "launch-agent", "", "the ftrun binary on the other hosts")
	fs.StringVar(&o.SSH, "ssh", "", "command that starts agents on other hosts")
	fs.BoolVar(&o.NoSlurm, "no-slurm", false, "ignore the Slurm allocation")
	fs.BoolVar(&o.Arbiter, "arbiter", false, "run the replicated arbiter (the default over several hosts)")
	fs.BoolVar(&o.NoArbiter, "no-arbiter", false, "ftrun alone is the job's authority")
	fs.BoolVar(&o.DataPlain, "data-plain", false, "the ranks' TCP data between hosts in clear")
	fs.BoolVar(&o.TagOutput, "tag-output", false, "prefix output lines with [rank]")
	fs.StringVar(&o.OutputFilename, "output-filename", "", "also write the ranks' output under DIR")
	fs.Var(exportFlag{&o.Export}, "x", "VAR[=VALUE]: export VAR (ftrun's value, or VALUE) to every rank")
	fs.Var(killFlag{&o.Kills}, "kill", "RANK@DURATION: SIGKILL RANK after DURATION")
	fs.Var(listFlag[PauseSpec]{&o.Pauses, parsePause}, "pause", "RANK@T:D: SIGSTOP RANK at T, SIGCONT D later")
	fs.Var(listFlag[KillHostSpec]{&o.KillHosts, parseKillHost}, "kill-host", "HOST@T: kill HOST's ranks and agent at T")
	fs.Var(listFlag[CutSpec]{&o.Cuts, parseCut}, "cut", "HOST@T[:HEAL]: cut HOST's links at T, heal HEAL later")
	fs.DurationVar(&o.Timeout, "timeout", 0, "kill the job after this long")
	fs.Var(respawnFlag{&o.Spares}, "respawn", "S: reserve S spare ranks (default N)")
	fs.StringVar(&o.SpareHosts, "spare-hosts", "", "hosts for spare ranks only: host1:2,host2")
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
	fs.StringVar(&o.Transport, "transport", "", "transport: auto (default), tcp, shm, shm+tcp, verbs or shm+verbs")
	fs.StringVar(&o.VerbsDevice, "verbs-device", "", "RDMA device of the verbs transport")
	fs.Func("verbs-gid-index", "GID table index of the verbs transport", func(v string) error {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return fmt.Errorf("want a GID table index, not %q", v)
		}
		o.VerbsGID = v
		return nil
	})
	fs.Func("hosts", "H[:N],...: spread the ranks over hosts", func(v string) error {
		h, err := ParseHosts(v)
		o.Hosts = h
		return err
	})
	fs.BoolVar(&o.Verbose, "v", false, "report the choices made")
	fs.DurationVar(&o.HBPeriod, "hb-period", 0, "failure detector heartbeat period")
	fs.DurationVar(&o.HBTimeout, "hb-timeout", 0, "failure detector timeout")
	fs.BoolVar(&o.Version, "version", false, "print the version")
	fs.BoolVar(&o.Cleanup, "cleanup", false, "remove the shared memory of stale jobs")
	fs.BoolVar(&o.Help, "help", false, "print help")
	fs.BoolVar(&o.Help, "h", false, "print help")
	return fs
}

// ParseArgs parses ftrun's command line, without the command name. Parsing
// stops at the first argument that is not a flag (the program) or after "--".
// An error describes a usage mistake.
func ParseArgs(args []string) (*Config, error) {
	o := new(Config)
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.Help || o.Version || o.Cleanup {
		return o, nil
	}
	n := false
	fs.Visit(func(f *flag.Flag) { n = n || f.Name == "n" || f.Name == "np" })
	placed := o.Hostfile != "" || o.HostList != "" || !o.NoSlurm && inSlurm(os.Getenv)
	switch {
	case !n && !placed:
		return nil, errors.New("-n N is required (without a hostfile, -H or a Slurm allocation, which give one rank per slot)")
	case n && o.N < 1:
		return nil, fmt.Errorf("-n %d: need at least 1 rank", o.N)
	case o.N > maxPlacedRanks || o.Spares > maxPlacedRanks:
		return nil, fmt.Errorf("-n %d, --respawn %d: a job has at most %d ranks and as many spares", o.N, o.Spares, maxPlacedRanks)
	case o.Timeout < 0:
		return nil, fmt.Errorf("--timeout %v: must not be negative", o.Timeout)
	case o.HBPeriod < 0 || o.HBTimeout < 0:
		return nil, fmt.Errorf("--hb-period and --hb-timeout must not be negative")
	case o.detector().Validate() != nil:
		d := o.detector().WithDefaults()
		return nil, fmt.Errorf("--hb-timeout %v must exceed the heartbeat period %v", d.Timeout, d.Period)
	case fs.NArg() == 0:
		return nil, errors.New("no program to run")
	}
	if _, err := ResolveTransport(o.Transport); err != nil {
		return nil, err
	}
	switch {
	case o.MapBy != "" && o.MapBy != "slot" && o.MapBy != "node":
		return nil, fmt.Errorf("--map-by %q: want slot or node", o.MapBy)
	case len(o.Hosts) > 0 && (o.Hostfile != "" || o.HostList != ""):
		return nil, errors.New("--hosts (running agents) and --hostfile or -H exclude each other")
	case o.Hostfile != "" && o.HostList != "":
		return nil, errors.New("--hostfile and -H exclude each other")
	case o.SpareHosts != "" && o.Spares == 0:
		return nil, errors.New("--spare-hosts needs --respawn: the hosts are for spare ranks only")
	}
	if o.Arbiter && o.NoArbiter {
		return nil, errors.New("--arbiter and --no-arbiter: give one")
	}
	if _, err := sealOf(o, os.Getenv); err != nil {
		return nil, err
	}
	outFiles := false
	fs.Visit(func(f *flag.Flag) { outFiles = outFiles || f.Name == "output-filename" })
	if outFiles {
		if err := checkOutputFilename(o.OutputFilename); err != nil {
			return nil, err
		}
	}
	if o.SpareHosts != "" {
		var err error
		if len(o.Hosts) > 0 {
			_, err = spareAgents(o.SpareHosts)
		} else {
			_, err = ParseHostList(o.SpareHosts)
		}
		if err != nil {
			return nil, fmt.Errorf("--spare-hosts: %w", err)
		}
	}
	if len(o.Hosts) > 0 {
		blocks, err := assignRanks(o.Hosts, o.N)
		if err != nil {
			return nil, err
		}
		if tr, _ := ResolveTransport(o.Transport); multiHost(blocks) && tr == TransportSHM && o.Transport == TransportSHM {
			return nil, fmt.Errorf("--transport %s: ranks on several hosts cannot share memory", o.Transport)
		}
	}
	for _, k := range o.Kills {
		if o.N > 0 && int(k.Rank) >= o.N { // else checked once the hosts give N
			return nil, fmt.Errorf("--kill %v: no rank %d in a job of %d", k, k.Rank, o.N)
		}
	}
	for _, p := range o.Pauses {
		if o.N > 0 && int(p.Rank) >= o.N { // else checked once the hosts give N
			return nil, fmt.Errorf("--pause %v: no rank %d in a job of %d", p, p.Rank, o.N)
		}
	}
	switch o.BindTo {
	case "", BindNone, BindCore:
	default:
		return nil, fmt.Errorf("--bind-to %q: want core or none", o.BindTo)
	}
	if err := checkStdin(o.Stdin, o.N); err != nil {
		return nil, err
	}
	o.Prog, o.Args = fs.Arg(0), fs.Args()[1:]
	return o, nil
}

// Transports ftrun can give its ranks (Config.Transport, Job.Transport):
// the names of internal/jobwire, which the ranks read.
const (
	TransportTCP   = jobwire.TransportTCP
	TransportSHM   = jobwire.TransportSHM
	TransportVerbs = jobwire.TransportVerbs
	// TransportHybrid picks per peer: shared memory to the ranks on the
	// same host, TCP to the others (transport/multi).
	TransportHybrid = jobwire.TransportHybrid
	// TransportVerbsHybrid is TransportHybrid with RDMA verbs between
	// hosts, and for every atomic where the device's atomics are not the
	// CPU's (transport/multi, "Atomics through one transport").
	TransportVerbsHybrid = jobwire.TransportVerbsHybrid
)

// ResolveTransport turns a --transport value into the transport the ranks
// of a one-host job use: auto means shared memory. verbs is refused when
// this ftrun is built without it.
func ResolveTransport(name string) (string, error) {
	switch name {
	case "", "auto", TransportSHM:
		return TransportSHM, nil
	case TransportTCP:
		return TransportTCP, nil
	case TransportHybrid:
		return TransportHybrid, nil
	case TransportVerbs, TransportVerbsHybrid:
		if !verbs.Built {
			return "", fmt.Errorf("--transport %s: this ftrun is built without RDMA verbs support (build it with CGO_ENABLED=1 -tags verbs)", name)
		}
		return name, nil
	}
	return "", fmt.Errorf("--transport %q: want auto, tcp, shm, shm+tcp, verbs or shm+verbs", name)
}

// probeVerbs reports whether the verbs transport is usable on this host
// (a variable for tests).
var probeVerbs = func(device string, gidIndex int) (verbs.Choice, error) { return verbs.Probe(device, gidIndex) }

// chooseTransport resolves a --transport value for a job of n ranks with
// spares spares, on several hosts if multi, and says why. Over several
// hosts auto is shared memory on each host and verbs between them when this
// ftrun has verbs and a device is usable here (verbs alone in a job with
// spares, which transport/multi cannot admit beside verbs), else shared
// memory and TCP, and why; shm is an error. On one host auto picks shared memory unless its
// directory lacks the room a job of n ranks needs at least (the message
// rings grow with n²), and then falls back to TCP. verbs asked for is
// probed: a clear error when no device is usable.
func chooseTransport(name string, n, spares int, multi bool, device, gid string) (string, string, error) {
	gidIndex := -1
	if gid != "" {
		gidIndex, _ = strconv.Atoi(gid)
	}
	tr, err := ResolveTransport(name)
	if err != nil {
		return "", "", err
	}
	auto := name == "" || name == "auto"
	switch {
	case multi && auto:
		c, err := probeVerbs(device, gidIndex)
		if err != nil {
			return TransportHybrid, fmt.Sprintf("auto: the ranks run on several hosts; RDMA verbs unusable here (%v): shared memory between ranks on the same host, TCP between hosts", err), nil
		}
		if spares > 0 {
			return TransportVerbs, "auto: the ranks run on several hosts; RDMA verbs on " + c.Why + ", between the ranks of a host too (a job with spares cannot use shared memory beside verbs)", nil
		}
		return TransportVerbsHybrid, "auto: the ranks run on several hosts; shared memory between ranks on the same host, RDMA verbs between hosts on " + c.Why, nil
	case tr == TransportVerbsHybrid && spares > 0:
		return "", "", fmt.Errorf("--transport %s: a job with spares cannot use shared memory beside verbs (use verbs)", name)
	case tr == TransportVerbs || tr == TransportVerbsHybrid:
		c, err := probeVerbs(device, gidIndex)
		if err != nil {
			return "", "", fmt.Errorf("--transport %s: %w", name, err)
		}
		return tr, "as asked, on " + c.Why, nil
	case multi && tr == TransportSHM:
		return "", "", fmt.Errorf("--transport %s: ranks on several hosts cannot share memory", name)
	case !auto:
		return tr, "as asked", nil
	}
	need := shmNeed(n)
	if free, ok := shmFree(); ok && free < need {
		return TransportTCP, fmt.Sprintf("auto: %s has %d MiB free, a job of %d ranks needs about %d MiB", shm.DefaultDir, free>>20, n, need>>20), nil
	}
	return TransportSHM, "auto: every rank runs on this host", nil
}

// shmNeed estimates the shared memory a job of n ranks needs before its
// windows: n control segments, each with its rings all in use (they take
// memory only once used), and 4 MiB per rank of headroom.
func shmNeed(n int) uint64 {
	return shm.ControlBytes(n) + uint64(n)*(4<<20)
}

// DefaultAgentPort is the port of an ftrun agent when --hosts or
// "ftrun agent --listen" names none.
const DefaultAgentPort = 7770

// LocalHost is the --hosts name of the host ftrun runs on: its ranks are
// started by ftrun itself, without an agent.
const LocalHost = "local"

// HostSpec is one entry of --hosts.
type HostSpec struct {
	// Addr is the host's agent, host:port; "" for LocalHost.
	Addr string
	// N is the number of ranks to run there; 0 if not given.
	N int
}

// String formats h as in --hosts.
func (h HostSpec) String() string {
	s := cmp.Or(h.Addr, LocalHost)
	if h.N > 0 {
		s += ":" + strconv.Itoa(h.N)
	}
	return s
}

// ParseHosts parses a --hosts value: a comma-separated list of
//
//	local[:N]            this host: ftrun starts these ranks itself
//	HOST[:PORT[:N]]      the ftrun agent at HOST:PORT (PORT defaults to
//	                     DefaultAgentPort; a rank count needs the port
//	                     written); IPv6 addresses go in brackets: [::1]:7770:2
//
// N, the number of ranks there, is at least 1. local may appear once.
func ParseHosts(s string) ([]HostSpec, error) {
	var hosts []HostSpec
	local := false
	for _, e := range strings.Split(s, ",") {
		h, err := parseHost(e)
		if err != nil {
			return nil, fmt.Errorf("--hosts %q: %w", s, err)
		}
		if h.Addr == "" {
			if local {
				return nil, fmt.Errorf("--hosts %q: %s given twice", s, LocalHost)
			}
			local = true
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

func parseHost(e string) (HostSpec, error) {
	var host string
	var rest []string // port, count
	if strings.HasPrefix(e, "[") {
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return HostSpec{}, fmt.Errorf("%q: no ']' after the IPv6 address", e)
		}
		host = e[1:end]
		if tail := e[end+1:]; tail != "" {
			if tail[0] != ':' {
				return HostSpec{}, fmt.Errorf("%q: want [ADDRESS]:PORT[:N]", e)
			}
			rest = strings.Split(tail[1:], ":")
		}
	} else {
		f := strings.Split(e, ":")
		host, rest = f[0], f[1:]
	}
	if host == "" {
		return HostSpec{}, fmt.Errorf("empty host in %q", e)
	}
	count := func(c string) (int, error) {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 || n > maxPlacedRanks {
			return 0, fmt.Errorf("%q: rank count %q is not an integer in 1..%d", e, c, maxPlacedRanks)
		}
		return n, nil
	}
	if host == LocalHost {
		switch len(rest) {
		case 0:
			return HostSpec{}, nil
		case 1:
			n, err := count(rest[0])
			return HostSpec{N: n}, err
		}
		return HostSpec{}, fmt.Errorf("%q: want %s or %s:N", e, LocalHost, LocalHost)
	}
	if len(rest) > 2 {
		return HostSpec{}, fmt.Errorf("%q: want HOST[:PORT[:N]] (IPv6 addresses in brackets)", e)
	}
	port := strconv.Itoa(DefaultAgentPort)
	if len(rest) > 0 {
		if p, err := strconv.Atoi(rest[0]); err != nil || p < 1 || p > 65535 {
			return HostSpec{}, fmt.Errorf("%q: port %q is not a number in 1..65535", e, rest[0])
		}
		port = rest[0]
	}
	h := HostSpec{Addr: net.JoinHostPort(host, port)}
	if len(rest) > 1 {
		var err error
		if h.N, err = count(rest[1]); err != nil {
			return HostSpec{}, err
		}
	}
	return h, nil
}

// hostBlock is the ranks a job runs on one host, and how they get there.
type hostBlock struct {
	name  string       // the host's name in reports; "" for this host
	addr  string       // a running agent's host:port (--hosts); ""
	start string       // how ftrun starts the host's agent: "" (this host, or a running agent), startSSH or startSrun
	ranks []ftrma.Rank // in increasing order; none on a host for spares only
	slots int          // ranks the host runs at once without --oversubscribe; 0: len(ranks)
	spare bool         // a host of --spare-hosts
	link  *agentLink   // the connection to the agent, once made
}

// capacity is how many ranks b's host runs at once without
// --oversubscribe.
func (b *hostBlock) capacity() int { return max(b.slots, len(b.ranks)) }

// remote reports whether an agent runs b's ranks.
func (b *hostBlock) remote() bool { return b.addr != "" || b.start != "" }

// label names b's host in reports.
func (b *hostBlock) label() string { return cmp.Or(b.name, b.addr, "this host") }

// rankRange returns the n ranks from first on.
func rankRange(first, n int) []ftrma.Rank {
	r := make([]ftrma.Rank, n)
	for i := range r {
		r[i] = ftrma.Rank(first + i)
	}
	return r
}

// assignRanks splits the n ranks of a job over hosts in contiguous blocks, in
// the order given. Hosts with a count get that many; the ranks left are split
// as evenly as possible over the others, earlier hosts getting one more.
// Counts that leave no room, or that all given do not sum to n, are an error.
// A host left with no rank is dropped.
func assignRanks(hosts []HostSpec, n int) ([]hostBlock, error) {
	given, open := 0, 0
	for _, h := range hosts {
		given += h.N
		if h.N == 0 {
			open++
		}
	}
	switch {
	case open == 0 && given != n:
		return nil, fmt.Errorf("--hosts: the rank counts sum to %d, but -n is %d", given, n)
	case given > n:
		return nil, fmt.Errorf("--hosts: the rank counts sum to %d, more than -n %d", given, n)
	}
	var blocks []hostBlock
	first, k := 0, 0
	for _, h := range hosts {
		c := h.N
		if c == 0 {
			c = (n - given) / open
			if k < (n-given)%open {
				c++
			}
			k++
		}
		if c > 0 {
			blocks = append(blocks, hostBlock{addr: h.Addr, name: h.Addr, ranks: rankRange(first, c)})
		}
		first += c
	}
	return blocks, nil
}

// multiHost reports whether blocks put ranks on a host other than this one.
func multiHost(blocks []hostBlock) bool {
	for _, b := range blocks {
		if b.remote() {
			return true
		}
	}
	return false
}
