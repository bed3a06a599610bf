// Command store compares replicated key-value puts on ftrma's store with
// Hazelcast IMap, Redis (primary + replicas, SET then WAIT) and a 3-member
// etcd, side by side in one run, at copy counts 1..6. Run it from the module
// root:
//
//	go run ./bench/store -quick -json out.json
//
// It installs what is missing (Debian packages with apt-get, the Hazelcast
// member jar with Maven), starts every peer on 127.0.0.1 in a temporary
// directory, runs the same put workload on each, interleaving the systems
// round by round, and stops everything it started. It prints a table of the
// medians over rounds, writes them as JSON, and draws put latency against
// the copy count as SVG next to the JSON. The ftrma side runs the store's
// ftkv command under ftrun. See bench/README.md.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/ftrma/ftrma/bench/internal/host"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

const usage = `Usage: go run ./bench/store [flags]

Measures a replicated put workload on ftrma's store, Hazelcast IMap, Redis and
etcd, every server on 127.0.0.1, started and
stopped by this command. For each copy count K (the number of copies of
every value) and value size S, W writers in one client process (8 goroutines,
each with its own keys) put values of S bytes; the results per (system, K, S):

  put_p50   median put latency, microseconds
  put_p99   99th percentile put latency, microseconds
  get_p50   median get latency, microseconds (reading back the writer's keys)

each the median over rounds; systems are interleaved round by round.

  hazelcast  K members, IMap backup-count K-1 (synchronous), async-backup-count 0
  redis      a primary and K-1 replicas; a put is SET then WAIT K-1
  etcd       3 members, fixed: reported at K=3 only
  ftrma-tcp  ftrun -n N ftkv bench --copies K --size S --ops M -json --writers W ...
             (N ranks, default 8; the W writers spread over them)

With -snapshot it compares snapshots instead: a store of -snapshot-keys keys
of -snapshot-size bytes written to files while the writers put, ftrma's
store.Snapshot (ftkv bench --snapshot-dir, shared memory, --copies 1)
against Redis's BGSAVE (one server), to tmpfs and to disk: snap_ms,
snap_MBps and the writers' put p99 before and during, and their longest put
during (snapshot.go).

Missing servers are installed: redis-server, etcd-server, a Java runtime and
Maven with apt-get (as root), the Hazelcast jar from Maven Central with mvn.

Exit status: 0 when every requested peer gave results, 3 when some did not
(the others are still printed and written), 1 when none did, 2 on bad flags.

Flags:
`

// giveUpAfter is how many failed runs in a row make the driver stop running
// a system at the current copy count.
const giveUpAfter = 2

func main() { os.Exit(run()) }

type options struct {
	plan          plan
	jsonPath      string
	svgPath       string
	only          []string
	timeout       time.Duration
	hzBackup      time.Duration
	ftkv          string
	ftkvRanks     int
	ftrunArgs     string
	ftkvArgs      string
	verbose       bool
	keepTemporary bool
	snapshot      bool // the snapshot comparison instead (snapshot.go)
	snapKeys      int
	snapSize      int
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "copies 1,2,3,6, sizes 64 and 4096, fewer operations and rounds (about 3 minutes, plus installs);\nwithout it copies 1..6 and sizes 64 B .. 1 MiB")
	fs.StringVar(&o.jsonPath, "json", "", "write the medians to `FILE` as a JSON array of {bench,size,copies,system,value,unit}")
	fs.StringVar(&o.svgPath, "svg", "", "write the put_p50-against-copies plot to `FILE` (default: the -json file with .svg)")
	only := fs.String("only", "", "measure only these `SYSTEMS` (comma-separated): "+strings.Join(allSystems, ", "))
	rounds := fs.Int("rounds", 0, "rounds `N` per copy count (default 5 with -quick, 7 without)")
	copies := fs.String("copies", "", "copy counts to measure, e.g. `1,2,3` (default per -quick)")
	sizes := fs.String("sizes", "", "value sizes in bytes, e.g. `64,4K,64K` (default per -quick)")
	writers := fs.Int("writers", 0, "concurrent writers `W` (default 8)")
	puts := fs.Int("puts", 0, "timed puts per writer per run at small sizes `M` (default 400 with -quick, 1000 without)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up on the whole benchmark after this long")
	fs.DurationVar(&o.hzBackup, "hz-backup-timeout", hazelcastDefaultBackupTimeout, "Hazelcast's hazelcast.operation.backup.timeout.millis: how long a member waits\nfor synchronous backup acks before it reports a put successful anyway")
	fs.StringVar(&o.ftkv, "ftkv", "./cmd/ftkv", "the ftkv command of ftrma's store, a binary or a package directory to build;\n\"\" leaves ftrma-tcp out")
	fs.IntVar(&o.ftkvRanks, "ftkv-n", 8, "ranks `N` of each ftkv job")
	fs.StringVar(&o.ftrunArgs, "ftrun-args", "", "extra space-separated `ARGS` for ftrun, placed before -n")
	fs.StringVar(&o.ftkvArgs, "ftkv-args", "", "extra space-separated `ARGS` for ftkv bench, placed after -json")
	fs.BoolVar(&o.verbose, "v", false, "print every run's values")
	fs.BoolVar(&o.snapshot, "snapshot", false, "compare snapshots instead: ftrma's store.Snapshot against Redis's BGSAVE of the same data\nunder writers, to tmpfs and to disk (snapshot.go)")
	fs.IntVar(&o.snapKeys, "snapshot-keys", 100000, "keys in the store for -snapshot")
	fs.IntVar(&o.snapSize, "snapshot-size", 1024, "value size in bytes for -snapshot")
	fs.BoolVar(&o.keepTemporary, "keep", false, "keep the temporary directory (configurations, server logs) and print its path")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	p := newPlan(*quick)
	var err error
	if *copies != "" {
		if p.copies, err = parseInts(*copies); err != nil {
			return o, fmt.Errorf("-copies: %v", err)
		}
	}
	if *sizes != "" {
		if p.sizes, err = parseInts(*sizes); err != nil {
			return o, fmt.Errorf("-sizes: %v", err)
		}
		if p.sizes[len(p.sizes)-1] > 64<<20 {
			return o, errors.New("-sizes: at most 64M")
		}
	}
	if *rounds < 0 || *writers < 0 || *puts < 0 {
		return o, errors.New("-rounds, -writers and -puts must be positive")
	}
	if *rounds > 0 {
		p.rounds = *rounds
	}
	if *writers > 0 {
		p.writers = *writers
	}
	if *puts > 0 {
		p.puts = *puts
		p.warmup = min(p.warmup, *puts)
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(allSystems, s) {
				return o, fmt.Errorf("-only %q: want some of %s", s, strings.Join(allSystems, ", "))
			}
			if !slices.Contains(o.only, s) {
				o.only = append(o.only, s)
			}
		}
		if !slices.ContainsFunc(o.only, func(s string) bool { return !isFtrma(s) }) && o.ftkv == "" {
			return o, errors.New("-only " + strings.Join(o.only, ",") + " with -ftkv \"\" leaves nothing to measure")
		}
	}
	if o.hzBackup < time.Millisecond {
		return o, errors.New("-hz-backup-timeout must be at least 1ms")
	}
	if o.ftkvRanks < 1 {
		return o, errors.New("-ftkv-n must be positive")
	}
	if o.snapshot && (o.snapKeys < 1 || o.snapSize < 1 || o.ftkv == "") {
		return o, errors.New("-snapshot needs -snapshot-keys and -snapshot-size positive, and -ftkv")
	}
	if o.svgPath == "" && o.jsonPath != "" {
		o.svgPath = strings.TrimSuffix(o.jsonPath, filepath.Ext(o.jsonPath)) + ".svg"
	}
	o.plan = p
	return o, nil
}

// wanted reports whether system name is to be measured.
func (o options) wanted(name string) bool {
	return len(o.only) == 0 || slices.Contains(o.only, name)
}

func run() int {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
		return 2
	}
	// A closed standard output (| head) must not kill the driver before it
	// has stopped its servers: writes then fail with EPIPE instead.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()

	dir, err := os.MkdirTemp("", "bench-store-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
		return 1
	}
	if o.keepTemporary {
		fmt.Printf("keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	defer func() {
		procs.stopAll(3 * time.Second)
	}()
	if o.snapshot {
		return runSnapshots(ctx, o, dir)
	}

	systems, missing := setup(ctx, o, dir)
	if len(systems) == 0 {
		fmt.Println("store: no system could be set up; nothing measured")
		printMissing(missing)
		return 1
	}
	defer func() {
		for _, s := range systems {
			s.Close()
		}
	}()
	p := o.plan
	fmt.Println(p.describe())
	for _, s := range systems {
		for _, n := range s.Notes() {
			fmt.Printf("%s: %s\n", s.Name(), n)
		}
	}
	if b, ok := host.CPUBusy(time.Second); ok && b > 0.25 {
		fmt.Printf("WARNING: the CPUs were %.0f%% busy before measuring: other processes compete with the benchmark and inflate every column\n", 100*b)
	}
	idle := host.IdleWake()
	if idle != "" {
		fmt.Printf("machine: %s\n", idle)
	}

	set, failures := measure(ctx, o, systems)
	if ctx.Err() != nil {
		fmt.Printf("stopped early: %v\n", context.Cause(ctx))
	}

	medians := set.Medians()
	sortResults(medians)
	var columns []string
	for _, s := range allSystems {
		if o.wanted(s) {
			columns = append(columns, s)
		}
	}
	var bases []string
	for _, b := range []string{sysFtrma, sysFtrmaSHM} {
		if slices.ContainsFunc(medians, func(r result.Result) bool { return r.System == b }) {
			bases = append(bases, b)
		}
	}
	if len(bases) == 0 {
		bases = []string{""}
	}
	for _, base := range bases {
		fmt.Printf("\nmedian over rounds, microseconds (%d writers; the notes say what each system's put waits for)", p.writers)
		if base != "" {
			fmt.Printf("; ratio columns %s/other: below 1 means ftrma is faster", base)
		}
		fmt.Println(":")
		if err := result.WriteTableRatios(os.Stdout, medians, columns, base); err != nil {
			fmt.Fprintln(os.Stderr, "store:", err)
			return 1
		}
	}
	fmt.Println()
	if (o.wanted(sysFtrma) || o.wanted(sysFtrmaSHM)) && o.ftkv == "" {
		fmt.Println(ftrmaNotBuilt)
	}
	fmt.Println("notes:")
	for _, s := range systems {
		for _, n := range s.Notes() {
			fmt.Printf("  %s: %s\n", s.Name(), n)
		}
	}
	if idle != "" {
		fmt.Printf("  machine: %s\n", idle)
	}

	status := 0
	measured := make(map[string]bool)
	for _, m := range medians {
		measured[m.System] = true
	}
	for _, s := range systems {
		switch {
		case !measured[s.Name()]:
			missing = append(missing, fmt.Sprintf("%s: every run failed%s", s.Name(), firstFailure(failures[s.Name()])))
		case len(failures[s.Name()]) > 0:
			fmt.Printf("NOTE: %d %s runs failed; medians use the runs that gave values. First: %s\n",
				len(failures[s.Name()]), s.Name(), firstLine(failures[s.Name()][0]))
		}
	}
	if len(missing) > 0 {
		printMissing(missing)
		status = 3
	}
	if len(medians) == 0 {
		status = 1
	}
	if o.jsonPath != "" {
		if err := result.WriteJSONFile(o.jsonPath, medians); err != nil {
			fmt.Fprintln(os.Stderr, "store:", err)
			return 1
		}
		fmt.Printf("wrote %d results to %s\n", len(medians), o.jsonPath)
	}
	if o.svgPath != "" {
		if err := writePlotFile(o.svgPath, medians, p); err != nil {
			fmt.Fprintln(os.Stderr, "store:", err)
			return 1
		}
		fmt.Printf("wrote the plot to %s\n", o.svgPath)
	}
	fmt.Printf("took %.0fs\n", time.Since(start).Seconds())
	return status
}

func firstFailure(errs []string) string {
	if len(errs) == 0 {
		return ""
	}
	return ": " + firstLine(errs[0])
}

func printMissing(missing []string) {
	for _, m := range missing {
		fmt.Printf("MISSING: %s\n", m)
	}
}

func writePlotFile(path string, medians []result.Result, p plan) error {
	var b bytes.Buffer
	title := fmt.Sprintf("put latency p50 vs copies (%d writers; median over rounds)", p.writers)
	if err := writePlot(&b, title, "copies of every value", "put_p50 (microseconds, log scale)", plotSeries(medians)); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// setup installs, fetches and builds what every wanted system needs, all at
// once, and returns the systems that are ready and, for the others, why not.
func setup(ctx context.Context, o options, dir string) ([]system, []string) {
	goBin, root, goErr := host.FindModule(ctx)
	in := newInstaller(io.Discard)
	var names []string
	for _, s := range allSystems {
		if o.wanted(s) && (!isFtrma(s) || o.ftkv != "") {
			names = append(names, s)
		}
	}
	fmt.Printf("bench/store: setting up %s in %s\n", strings.Join(names, ", "), dir)
	out := make([]system, len(names))
	errs := make([]error, len(names))
	var logMu sync.Mutex
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			t0 := time.Now()
			w := &lockedWriter{mu: &logMu, w: os.Stdout}
			switch name {
			case sysFtrma, sysFtrmaSHM:
				if goErr != nil {
					errs[i] = goErr
					return
				}
				s, err := setupFtrma(ctx, name, goBin, root, filepath.Join(dir, name), o.ftkv, o.ftkvRanks, o.plan.workload(64),
					strings.Fields(o.ftrunArgs), strings.Fields(o.ftkvArgs))
				if err == nil {
					out[i] = s
				}
				errs[i] = err
			case sysHazelcast:
				h, err := setupHazelcast(ctx, in.with(w), dir, o.hzBackup)
				if err == nil {
					out[i] = &peerSystem{name: name, p: h, warmScale: 3}
				}
				errs[i] = err
			case sysRedis:
				r, err := setupRedis(ctx, in.with(w), dir)
				if err == nil {
					out[i] = &peerSystem{name: name, p: r}
				}
				errs[i] = err
			case sysEtcd:
				e, err := setupEtcd(ctx, in.with(w), dir, goBin)
				if err == nil {
					out[i] = &peerSystem{name: name, p: e}
				}
				errs[i] = err
			}
			fmt.Fprintf(w, "%s: set up in %.1fs\n", name, time.Since(t0).Seconds())
		})
	}
	wg.Wait()
	var ready []system
	var missing []string
	for i, name := range names {
		if errs[i] != nil {
			missing = append(missing, fmt.Sprintf("%s will not be measured: %v", name, errs[i]))
			continue
		}
		ready = append(ready, out[i])
	}
	return ready, missing
}

// lockedWriter serializes writes of several goroutines to one writer.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// measure runs every copy count in turn: it prepares (starts or grows) every
// system that supports the count, warms each up, then runs rounds, each
// running every system at every size, in an order that rotates from round
// to round. It returns the samples and, per system, the failed runs.
func measure(ctx context.Context, o options, systems []system) (*result.Set, map[string][]string) {
	p := o.plan
	set := &result.Set{}
	failures := make(map[string][]string)
	broken := make(map[string]error)
	skipped := make(map[string][]int)
	fail := func(name, msg string) {
		failures[name] = append(failures[name], msg)
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, msg)
	}
	for stage, k := range p.copies {
		if ctx.Err() != nil {
			break
		}
		var active []system
		for _, s := range systems {
			if broken[s.Name()] != nil {
				continue
			}
			if why := s.Supports(k); why != "" {
				skipped[s.Name()] = append(skipped[s.Name()], k)
				continue
			}
			active = append(active, s)
		}
		if len(active) == 0 {
			continue
		}
		t0 := time.Now()
		prepErr := make([]error, len(active))
		var wg sync.WaitGroup
		for i, s := range active {
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
				defer cancel()
				prepErr[i] = s.Prepare(pctx, k, p)
			})
		}
		wg.Wait()
		var ready []system
		for i, s := range active {
			if prepErr[i] != nil {
				broken[s.Name()] = prepErr[i]
				fail(s.Name(), fmt.Sprintf("could not start it for copies=%d: %v", k, prepErr[i]))
				s.Done(k)
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, p.stageWarm+2*p.opTimeout)
			err := s.Warm(wctx, k, p)
			cancel()
			if err != nil {
				fail(s.Name(), fmt.Sprintf("warm-up at copies=%d failed: %v", k, err))
				s.Done(k)
				continue
			}
			ready = append(ready, s)
		}
		var names []string
		for _, s := range ready {
			names = append(names, s.Name())
		}
		fmt.Printf("copies=%d: %s ready and warm after %.1fs\n", k, strings.Join(names, ", "), time.Since(t0).Seconds())

		streak := make(map[string]int)
		for r := range p.rounds {
			var line []string
			for i := range ready {
				s := ready[(i+r+stage)%len(ready)]
				if ctx.Err() != nil {
					break
				}
				if streak[s.Name()] >= giveUpAfter {
					line = append(line, s.Name()+" skipped")
					continue
				}
				rt := time.Now()
				ok := true
				for j, size := range p.sizes {
					// Progress on stderr: a full run takes many minutes.
					fmt.Fprintf(os.Stderr, "bench/store: copies=%d (%d/%d), round %d/%d, system %d/%d: %s, size %d (%d/%d)\n",
						k, stage+1, len(p.copies), r+1, p.rounds, i+1, len(ready), s.Name(), size, j+1, len(p.sizes))
					rctx, cancel := context.WithTimeout(ctx, p.runTimeout)
					rs, err := s.Run(rctx, k, size, p)
					cancel()
					for _, x := range rs {
						if aerr := set.Add(x); aerr != nil && err == nil {
							err = aerr
						}
					}
					if err != nil {
						ok = false
						fail(s.Name(), fmt.Sprintf("copies=%d size=%d round %d: %v", k, size, r+1, err))
					}
					if o.verbose {
						for _, x := range rs {
							fmt.Printf("  copies=%d round %d %s %s %d %s %s\n", k, r+1, x.System, x.Bench, x.Size, result.FormatValue(x.Value), x.Unit)
						}
					}
				}
				status := fmt.Sprintf("%s %.1fs", s.Name(), time.Since(rt).Seconds())
				if ok {
					streak[s.Name()] = 0
				} else {
					streak[s.Name()]++
					status += " FAILED"
					if streak[s.Name()] == giveUpAfter {
						fmt.Fprintf(os.Stderr, "giving up on %s at copies=%d after %d failed rounds in a row\n", s.Name(), k, giveUpAfter)
					}
				}
				line = append(line, status)
			}
			fmt.Printf("copies=%d round %d/%d: %s\n", k, r+1, p.rounds, strings.Join(line, ", "))
		}
		for _, s := range ready {
			s.Done(k)
		}
	}
	for _, s := range systems {
		if ks := skipped[s.Name()]; len(ks) > 0 && broken[s.Name()] == nil {
			fmt.Printf("%s: not run at copies %s: %s\n", s.Name(), joinInts(ks, ","), s.Supports(ks[0]))
		}
	}
	return set, failures
}

// sortResults orders rs as the table shows them: by bench (put_p50,
// put_p99, get_p50, then others), size, copies, system.
func sortResults(rs []result.Result) {
	rank := func(b string) int {
		if i := slices.Index(benchOrder, b); i >= 0 {
			return i
		}
		return len(benchOrder)
	}
	slices.SortStableFunc(rs, func(a, b result.Result) int {
		return cmp.Or(
			cmp.Compare(rank(a.Bench), rank(b.Bench)),
			cmp.Compare(a.Bench, b.Bench),
			cmp.Compare(a.Size, b.Size),
			cmp.Compare(a.Copies, b.Copies),
			cmp.Compare(slices.Index(allSystems, a.System), slices.Index(allSystems, b.System)),
		)
	})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
