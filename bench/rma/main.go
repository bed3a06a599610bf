// Command rma compares ftrma's one-sided operations with MPI's, side by side
// in one run: ftrma over TCP with Open MPI 4.1 over TCP (osc pt2pt over btl
// tcp), and ftrma over shared memory with Open MPI over shared memory (osc sm
// over btl vader) and with MPICH's defaults. Run it from the module root:
//
//	go run ./bench/rma -quick -json out.json
//
// It builds cmd/ftrun and bench/rma/rank (the ftrma side, run under ftrun
// --transport tcp and --transport shm) and compiles bench/rma/mpi/rma_bench.c
// with mpicc.openmpi and mpicc.mpich (installing Open MPI and MPICH with
// apt-get when they are missing), then runs the systems in turn, round after
// round, and reports per benchmark and size the median over the rounds. See
// bench/README.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/bench/internal/host"
	"github.com/ftrma/ftrma/internal/result"
)

const usage = `Usage: go run ./bench/rma [flags]

Measures one-sided (RMA) operations between two ranks on this machine and
reports the median over rounds; each round runs every system once, in this
order (A, B, C, ..., A, B, C, ...):
  ftrma-tcp    ftrma under ftrun --transport tcp
  ftrma-tcp-sealed
               the same with FTRMA_SEAL=all: its connection sealed (encrypted
               and authenticated) as between hosts, though on loopback
  openmpi-tcp  Open MPI 4.1, --mca pml ob1 --mca btl self,tcp --mca osc pt2pt, on lo
  ftrma-shm    ftrma under ftrun --transport shm
  ftrma-shm-slow
               the same with FTRMA_SHM_SLOWPATH=1: every operation on the
               slow path (as before the fast path), for the ratio between them
  openmpi-shm  Open MPI 4.1, --mca pml ob1 --mca btl self,vader --mca osc sm
               (not the default osc rdma: it segfaults on MPI_Compare_and_swap here)
  mpich        MPICH with its defaults (shared memory within a node)

Rank 0 is the origin, rank 1 the passive target that holds the window:
  put_lat   Put of SIZE bytes + Flush, microseconds per operation
  get_lat   Get of SIZE bytes + Flush, microseconds
  cas_lat   8-byte compare-and-swap + Flush, microseconds
  fadd_lat  8-byte fetch-and-add + Flush, microseconds
  lock_lat  exclusive Lock + Unlock with nothing inside, microseconds
  put_rate  64 Puts of 8 bytes then one Flush, operations per second

If mpicc.openmpi (or mpicc) is missing, openmpi-bin and libopenmpi-dev are
installed with apt-get; if mpicc.mpich or mpiexec.mpich is, mpich and
libmpich-dev are (needs root). A system that cannot be set up is reported
MISSING and the others are measured.

Exit status: 0 when every requested system gave results, 3 when some system
is missing (results of the others are still printed and written), 1 when
none gave results, 2 on bad flags.

Flags:
`

// giveUpAfter is how many failed runs in a row make the driver stop running
// a system, so that a hanging system cannot stretch -quick past its budget.
const giveUpAfter = 2

func main() {
	os.Exit(run())
}

type options struct {
	quick     bool
	jsonPath  string
	rounds    int
	only      []string // systems to measure, in allSystems order
	timeout   time.Duration
	ftrunArgs []string
	verbose   bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("rma", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.BoolVar(&o.quick, "quick", false, "measure sizes 8, 64, 1K, 16K, 64K, 1M with fewer iterations and rounds (under 5 minutes);\nwithout it every power of two from 8 B to 1 MiB")
	fs.StringVar(&o.jsonPath, "json", "", "write the medians to `FILE` as a JSON array of {bench,size,system,value,unit}")
	fs.IntVar(&o.rounds, "rounds", 0, "number of rounds `N`, each running every system once (default 7 with -quick, 11 without)")
	only := fs.String("only", "", "measure only `SYSTEMS`, a comma-separated list of "+strings.Join(allSystems, ", "))
	fs.DurationVar(&o.timeout, "timeout", 0, "kill a run of one system after this long (default 1m with -quick, 10m without);\na system that fails twice in a row is not run again")
	ftrunArgs := fs.String("ftrun-args", "", "extra space-separated `ARGS` for ftrun (both ftrma systems), placed before -n 2;\nnot --transport, which each system sets")
	fs.BoolVar(&o.verbose, "v", false, "print every round's values, not just the medians")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.only, err = parseOnly(*only); err != nil {
		return o, err
	}
	o.ftrunArgs = strings.Fields(*ftrunArgs)
	if err := checkFtrunArgs(o.ftrunArgs); err != nil {
		return o, err
	}
	if o.rounds < 0 {
		return o, errors.New("-rounds must be positive")
	}
	if o.rounds == 0 {
		o.rounds = 11
		if o.quick {
			o.rounds = 7
		}
	}
	if o.timeout <= 0 {
		o.timeout = 10 * time.Minute
		if o.quick {
			o.timeout = time.Minute
		}
	}
	return o, nil
}

func run() int {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rma:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	goBin, root, err := host.FindModule(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rma:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "bench-rma-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rma:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	fmt.Printf("bench/rma: setting up %s in %s\n", strings.Join(o.only, ", "), dir)
	systems := setup(ctx, goBin, root, dir, o)
	var ready []*system
	for _, s := range systems {
		if s.missing != "" {
			fmt.Printf("MISSING: %s will not be measured: %s\n", s.name, s.missing)
			continue
		}
		ready = append(ready, s)
	}
	if len(ready) == 0 {
		fmt.Println("rma: no system could be set up; nothing measured")
		return 1
	}

	p := newPlan(o.quick)
	args, shmArgs := p.args(), p.scaled(sharedMemoryScale).args()
	mode := "full"
	if o.quick {
		mode = "quick"
	}
	fmt.Printf("plan (%s, %d rounds): %s\n", mode, o.rounds, strings.Join(args, " "))
	fmt.Printf("plan for shared memory (%d times the iterations): %s\n", sharedMemoryScale, strings.Join(shmArgs, " "))

	if b, ok := host.CPUBusy(time.Second); ok && b > 0.25 {
		fmt.Printf("WARNING: the CPUs were %.0f%% busy before measuring: other processes compete with the benchmark, so both systems' latencies will be inflated\n", 100*b)
	}
	if idle := host.IdleWake(); idle != "" {
		fmt.Printf("machine: %s\n", idle)
	}

	var set result.Set
	start := time.Now()
	streak := make(map[string]int) // consecutive failed runs, by system
	for r := range o.rounds {
		var line []string
		for i, s := range ready {
			if ctx.Err() != nil {
				break
			}
			if streak[s.name] >= giveUpAfter {
				line = append(line, s.name+" skipped")
				continue
			}
			// Progress on stderr: a round of every system takes minutes.
			fmt.Fprintf(os.Stderr, "bench/rma: round %d/%d, system %d/%d: %s\n", r+1, o.rounds, i+1, len(ready), s.name)
			t0 := time.Now()
			a := args
			if sharedMemory(s.name) {
				a = shmArgs
			}
			rs, err := runOnce(ctx, s, a, o.timeout)
			for _, x := range rs {
				if aerr := set.Add(x); aerr != nil && err == nil {
					err = aerr
				}
			}
			if err != nil || len(rs) < p.expected() {
				set.AddFailure(s.name)
				streak[s.name]++
				if streak[s.name] == giveUpAfter {
					fmt.Fprintf(os.Stderr, "giving up on %s after %d failed runs in a row\n", s.name, giveUpAfter)
				}
			} else {
				streak[s.name] = 0
			}
			status := fmt.Sprintf("%s %.1fs %d/%d results", s.name, time.Since(t0).Seconds(), len(rs), p.expected())
			if err != nil {
				status += " FAILED"
				fmt.Fprintf(os.Stderr, "round %d: %s failed: %v\n", r+1, s.name, err)
			}
			if o.verbose {
				for _, x := range rs {
					fmt.Printf("  round %d %s %s %d %s %s\n", r+1, x.System, x.Bench, x.Size, result.FormatValue(x.Value), x.Unit)
				}
			}
			line = append(line, status)
		}
		fmt.Printf("round %d/%d: %s\n", r+1, o.rounds, strings.Join(line, ", "))
		if ctx.Err() != nil {
			fmt.Println("interrupted")
			break
		}
	}
	fmt.Printf("measured in %.0fs\n\n", time.Since(start).Seconds())

	medians := set.Medians()
	fmt.Printf("median over rounds (a ratio column is ftrma/MPI: below 1 means ftrma is faster for latencies, slower for put_rate):\n")
	if err := writeTable(os.Stdout, medians, o.only); err != nil {
		fmt.Fprintln(os.Stderr, "rma:", err)
		return 1
	}

	status := 0
	for _, s := range systems {
		n := 0
		for _, m := range medians {
			if m.System == s.name {
				n++
			}
		}
		switch {
		case s.missing != "":
			fmt.Printf("NOTE: the %s side is MISSING (%s); its column is empty.\n", s.name, firstLine(s.missing))
			status = 3
		case n == 0:
			fmt.Printf("NOTE: the %s side is MISSING: every run failed; its column is empty.\n", s.name)
			status = 3
		case set.Failures(s.name) > 0:
			fmt.Printf("NOTE: %d of %d %s runs failed or were incomplete; medians use the runs that gave values.\n",
				set.Failures(s.name), o.rounds, s.name)
		}
		if s.missing == "" {
			for _, n := range s.notes {
				fmt.Printf("NOTE: %s: %s\n", s.name, n)
			}
		}
	}
	if len(medians) == 0 {
		status = 1
	}
	if o.jsonPath != "" {
		if err := result.WriteJSONFile(o.jsonPath, medians); err != nil {
			fmt.Fprintln(os.Stderr, "rma:", err)
			return 1
		}
		fmt.Printf("wrote %d results to %s\n", len(medians), o.jsonPath)
	}
	return status
}

// setup builds and installs what the systems in o.only need, the three
// families at once (go build, apt-get and the compilers overlap), and returns
// them in o.only's order, each ready or with the reason it is missing.
// Progress of the installs is printed once all are done.
func setup(ctx context.Context, goBin, root, dir string, o options) []*system {
	var (
		ftrmaNames, ompiNames []string
		wantMPICH             bool
	)
	for _, n := range o.only {
		switch n {
		case sysFtrmaTCP, sysFtrmaTCPSealed, sysFtrmaSHM, sysFtrmaSHMSlow:
			ftrmaNames = append(ftrmaNames, n)
		case sysOpenMPITCP, sysOpenMPISHM:
			ompiNames = append(ompiNames, n)
		case sysMPICH:
			wantMPICH = true
		}
	}
	var (
		a                 apt
		wg                sync.WaitGroup
		ftrmaSys, ompiSys []*system
		mpichSys          *system
		ompiLog, mpichLog bytes.Buffer
	)
	if len(ftrmaNames) > 0 {
		wg.Go(func() { ftrmaSys = setupFtrma(ctx, goBin, root, dir, o.ftrunArgs, ftrmaNames) })
	}
	if len(ompiNames) > 0 {
		wg.Go(func() { ompiSys = setupOpenMPI(ctx, dir, &a, &ompiLog, ompiNames) })
	}
	if wantMPICH {
		wg.Go(func() { mpichSys = setupMPICH(ctx, dir, &a, &mpichLog) })
	}
	wg.Wait()
	io.Copy(os.Stdout, &ompiLog)
	io.Copy(os.Stdout, &mpichLog)

	byName := make(map[string]*system)
	for _, s := range append(append(ftrmaSys, ompiSys...), mpichSys) {
		if s != nil {
			byName[s.name] = s
		}
	}
	var out []*system
	for _, n := range o.only {
		s := byName[n]
		if s == nil { // a setup that forgot one of its names
			s = &system{name: n, missing: "not set up (driver bug)"}
		}
		out = append(out, s)
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
