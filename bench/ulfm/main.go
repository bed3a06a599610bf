// Command ulfm measures ULFM's spawn-and-merge recovery in Open MPI 5, the
// peer of bench/ft's replace_lat and kill_shrink_lat: N ranks under
// `mpirun --with-ft ulfm`, the driver SIGKILLs the last rank, the survivors
// revoke, MPIX_Comm_shrink, MPI_Comm_spawn one process, MPI_Intercomm_merge
// and MPI_Comm_split so that the new process takes the dead rank's number.
// Run it from the module root:
//
//	go run ./bench/ulfm -prefix DIR -json out.json
//
// DIR holds an Open MPI 5 built with ULFM (DIR/bin/mpicc, mpirun, ompi_info).
// It compiles mpi/ulfm_replace.c with DIR/bin/mpicc, runs the jobs and
// prints a table; with -json it writes the values as a JSON array of {bench,
// size, system, value, unit}, size being N. See bench/README.md.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/bench/internal/host"
	"github.com/ftrma/ftrma/bench/internal/ulfm"
	"github.com/ftrma/ftrma/internal/result"
)

//go:embed mpi/ulfm_replace.c
var source []byte

const usage = `Usage: go run ./bench/ulfm [flags]

Measures Open MPI's ULFM recovery of a killed rank, N = 4, 8, 16 processes on
this machine (oversubscribed), over shared memory (btl self,sm,tcp: the
spawned process reaches the survivors over tcp) and TCP on loopback (btl
self,tcp), the same quantities as bench/ft's:

  replace_lat      SIGKILL of the last rank -> the full-size communicator
                   exists at every process: each survivor's MPI_Comm_split
                   and the new process's returned (detect, revoke, shrink,
                   spawn, merge, split), median over jobs, ms
  kill_shrink_lat  SIGKILL -> MPIX_Comm_shrink returned at every survivor,
                   the same jobs, median, ms

Every job is bounded by -timeout; one that hangs is killed and the steps each
process reached are printed.

Exit status: 0 when every value was measured, 3 when some are missing, 1 when
none were (or no ULFM Open MPI was found), 2 on bad flags.

Flags:
`

type options struct {
	prefix     string
	sizes      []int
	transports []string
	runs       int
	attempts   int
	settle     time.Duration
	timeout    time.Duration
	mapBy      string
	jsonPath   string
	verbose    bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("ulfm", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.prefix, "prefix", "", "the Open MPI 5 installation `DIR` (DIR/bin/mpicc, mpirun, ompi_info); default: the directory above ompi_info in PATH")
	sizes := fs.String("n", "4,8,16", "process counts `N,...`")
	transports := fs.String("transport", "shm,tcp", "`T,...` of shm (btl self,sm,tcp) and tcp (btl self,tcp), tcp on lo")
	fs.IntVar(&o.runs, "runs", 3, "jobs per N and transport; the median is reported")
	fs.IntVar(&o.attempts, "attempts", 2, "tries of a job that fails before it counts as missing")
	fs.DurationVar(&o.settle, "settle", 50*time.Millisecond, "wait between the last ready line and the kill")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "bound of one job, start to end; mpirun's process group is killed then")
	fs.StringVar(&o.mapBy, "map-by", "", "MPI_Comm_spawn info key map_by (e.g. :OVERSUBSCRIBE), if spawn needs it")
	fs.StringVar(&o.jsonPath, "json", "", "write the results to `FILE` as a JSON array of {bench,size,system,value,unit}")
	fs.BoolVar(&o.verbose, "v", false, "print every job's output")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return o, fmt.Errorf("-n %q: want a comma-separated list of process counts >= 2", *sizes)
		}
		if !slices.Contains(o.sizes, n) {
			o.sizes = append(o.sizes, n)
		}
	}
	for _, t := range strings.Split(*transports, ",") {
		t = strings.TrimSpace(t)
		if t != "shm" && t != "tcp" {
			return o, fmt.Errorf("-transport %q: want shm, tcp or both", *transports)
		}
		if !slices.Contains(o.transports, t) {
			o.transports = append(o.transports, t)
		}
	}
	if o.runs < 1 || o.attempts < 1 || o.settle < 0 || o.timeout <= 0 {
		return o, errors.New("-runs and -attempts must be at least 1, -settle not negative, -timeout positive")
	}
	return o, nil
}

func main() { os.Exit(run()) }

func run() int {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ulfm:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mpi, err := ulfm.Find(ctx, o.prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ulfm:", err, "(see bench/README.md)")
		return 1
	}
	dir, err := os.MkdirTemp("", "bench-ulfm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ulfm:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ulfm_replace")
	if err := mpi.Compile(ctx, source, bin); err != nil {
		fmt.Fprintln(os.Stderr, "ulfm:", err)
		return 1
	}
	version := mpi.Version
	fmt.Printf("bench/ulfm: Open MPI %s (%s), ulfm_replace built in %s\n", version, mpi.Prefix, dir)
	fmt.Printf("plan: N = %v, transports %v, %d jobs each (a failed job tried up to %d times), job bound %v\n",
		o.sizes, o.transports, o.runs, o.attempts, o.timeout)
	fmt.Printf("machine: %d CPUs\n", runtime.NumCPU())
	if b, ok := host.CPUBusy(time.Second); ok && b > 0.25 {
		fmt.Printf("WARNING: the CPUs were %.0f%% busy in the second before measuring\n", 100*b)
	}
	fmt.Printf("command: %s\n\n", strings.Join(mpirunArgv(mpi, bin, o.transports[0], o.sizes[0], o.mapBy), " "))

	samples := map[[2]string]map[int][]float64{} // (bench, system) -> N -> values
	add := func(bench, sys string, n int, v float64) {
		k := [2]string{bench, sys}
		if samples[k] == nil {
			samples[k] = map[int][]float64{}
		}
		samples[k][n] = append(samples[k][n], v)
	}
	var notes []string
	lingered, good := 0, 0
	for round := range o.runs {
		for _, n := range o.sizes {
			for _, tr := range o.transports {
				sys := "ulfm-" + tr
				argv := mpirunArgv(mpi, bin, tr, n, o.mapBy)
				for a := 1; a <= o.attempts && ctx.Err() == nil; a++ {
					t0 := time.Now()
					oc := runJob(ctx, argv, n, o.settle, o.timeout)
					if o.verbose || oc.err != nil {
						fmt.Print(indent(oc.output))
					}
					if oc.err != nil {
						msg := fmt.Sprintf("N=%d %s job %d attempt %d failed after %.1fs: %v", n, sys, round+1, a, time.Since(t0).Seconds(), oc.err)
						fmt.Println(msg)
						notes = append(notes, msg)
						continue
					}
					t := oc.times
					end := ""
					if oc.lingered {
						end = "; mpirun had not ended 10 s after the last check and was killed"
						lingered++
					}
					fmt.Printf("N=%-2d %s job %d/%d (%.1fs): after SIGKILL, every survivor knew at %s ms, shrink %s, spawn %s, merge %s; the new process's main began at %s, its MPI_Init returned at %s; full-size communicator at %s ms%s\n",
						n, sys, round+1, o.runs, time.Since(t0).Seconds(), f(t.knew), f(t.shrink), f(t.spawn), f(t.merge), f(t.newMain), f(t.newInit), f(t.full), end)
					add("replace_lat", sys, n, t.full)
					add("kill_shrink_lat", sys, n, t.shrink)
					good++
					break
				}
			}
		}
	}
	fmt.Println()

	var rs []result.Result
	var systems []string
	var missing []string
	for _, bench := range []string{"replace_lat", "kill_shrink_lat"} {
		for _, n := range o.sizes {
			for _, tr := range o.transports {
				sys := "ulfm-" + tr
				if !slices.Contains(systems, sys) {
					systems = append(systems, sys)
				}
				xs := samples[[2]string{bench, sys}][n]
				if len(xs) == 0 {
					missing = append(missing, fmt.Sprintf("%s N=%d %s", bench, n, sys))
					continue
				}
				rs = append(rs, result.Result{Bench: bench, Size: n, System: sys, Value: result.Median(xs), Unit: "ms"})
			}
		}
	}
	fmt.Printf("ULFM (Open MPI %s, mpirun --with-ft ulfm), one host, N processes, %d CPUs; median over jobs, ms after SIGKILL\n", version, runtime.NumCPU())
	if err := result.WriteTable(os.Stdout, rs, systems); err != nil {
		fmt.Fprintln(os.Stderr, "ulfm:", err)
		return 1
	}
	for _, s := range missing {
		fmt.Println("MISSING:", s)
	}
	for _, s := range notes {
		fmt.Println("NOTE:", s)
	}
	if lingered > 0 {
		fmt.Printf("NOTE: in %d of %d good jobs mpirun had not ended 10 s after every process printed its check (MPI_Finalize or the runtime's shutdown after the failure); the values do not include that time\n", lingered, good)
	}
	return result.Finish(ctx, "ulfm", o.jsonPath, rs, len(missing))
}

func f(v float64) string { return result.FormatValue(v) }

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    | " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    | ") + "\n"
}
