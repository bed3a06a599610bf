// Command verbslat compares ftrma's verbs transport with perftest on the same
// RDMA device, in the same run, as ratios. It runs where the device is (the
// Soft-RoCE guest of scripts/verbs-test.sh bench), with ftrun and the
// bench/rma rank program beside it in bin/:
//
//	verbslat [-n ITERS] [-rounds R] [-device rxe0] [-gid 1] [-json out.json]
//
// Per round, interleaved: perftest's ib_write_lat, ib_read_lat and
// ib_atomic_lat (CMP_AND_SWAP, FETCH_AND_ADD), server and client on the one
// device (exchange over 127.0.0.1), and one ftrun job of two ranks over
// --transport verbs running the rank program (put+flush, get+flush, CAS and
// fetch-and-op + flush, and a put ping-pong). The table pairs like with like:
//
//	put_pingpong  ↔ ib_write_lat   (half a ping-pong round trip)
//	get_lat       ↔ ib_read_lat    (one round trip)
//	cas_lat       ↔ ib_atomic_lat -A CMP_AND_SWAP
//	fadd_lat      ↔ ib_atomic_lat -A FETCH_AND_ADD
//	put_lat       ↔ ib_write_lat × 2 (a put+flush is a write and its ACK)
//
// perftest's value is its t_avg; ftrma's is the mean over the timed
// iterations. The times shown are medians over the rounds; a row's ratio is
// the median of its per-round ratios (each round's ftrma time over the same
// round's perftest time), with their range beside it: measurements of one
// round are minutes closer in time than the rounds' medians, so the load of
// a shared host shifts both sides of a round's ratio alike. The ranks run with FTV_STATS=1, and the counters each
// rank's transport logs at its close (operations complete at their post,
// waits completed by spinning, parks, completion events) are printed per
// round: they say what the job's operations cost beyond the device. Each row is the median over the rounds. Under an emulator the
// times are not real times: only the ratios mean anything.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

func main() {
	n := flag.Int("n", 2000, "timed iterations per measurement")
	rounds := flag.Int("rounds", 3, "interleaved rounds; the table shows medians")
	device := flag.String("device", "rxe0", "RDMA device")
	gid := flag.Int("gid", 1, "GID index (1: the IPv4-mapped RoCE v2 GID on rxe)")
	jsonOut := flag.String("json", "", "write the medians as JSON to this file")
	ftrunArgs := flag.String("ftrun-args", "", "extra space-separated `ARGS` for ftrun, e.g. \"--spin 500us\"")
	flag.Parse()
	if err := run(*n, *rounds, *device, *gid, *jsonOut, strings.Fields(*ftrunArgs)); err != nil {
		fmt.Fprintln(os.Stderr, "verbslat:", err)
		os.Exit(1)
	}
}

// pair is one row: an ftrma bench and the perftest measurement it is set beside.
type pair struct {
	ftrma, perftest string
	factor          float64 // perftest value × factor is the comparable time
}

var pairs = []pair{
	{"put_pingpong", "ib_write_lat", 1},
	{"get_lat", "ib_read_lat", 1},
	{"cas_lat", "ib_atomic_lat CMP_AND_SWAP", 1},
	{"fadd_lat", "ib_atomic_lat FETCH_AND_ADD", 1},
	{"put_lat", "ib_write_lat", 2},
}

func run(n, rounds int, device string, gid int, jsonOut string, extra []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	bin := filepath.Dir(exe)
	var set result.Set
	for round := range rounds {
		for _, pt := range []struct{ tool, atomic string }{{"ib_write_lat", ""}, {"ib_read_lat", ""}, {"ib_atomic_lat", "CMP_AND_SWAP"}, {"ib_atomic_lat", "FETCH_AND_ADD"}} {
			v, err := perftest(pt.tool, pt.atomic, device, gid, n)
			if err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			name := strings.TrimSpace(pt.tool + " " + pt.atomic)
			if err := set.Add(result.Result{Bench: name, Size: 8, System: "perftest", Value: v, Unit: "us"}); err != nil {
				return err
			}
		}
		rs, stats, err := ftrmaJob(bin, device, gid, n, extra)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		for _, l := range stats {
			fmt.Printf("round %d: %s\n", round, l)
		}
		for _, r := range rs {
			r.System = "ftrma-verbs"
			if err := set.Add(r); err != nil {
				return err
			}
		}
	}
	med := map[string]float64{}
	var out []result.Result
	for _, r := range set.Medians() {
		med[r.Bench] = r.Value
		out = append(out, r)
	}
	fmt.Printf("\n%-14s %-30s %12s %12s %7s %13s\n", "ftrma", "perftest", "ftrma us", "perftest us", "ratio", "round ratios")
	for _, p := range pairs {
		f, ok1 := med[p.ftrma]
		pv, ok2 := med[p.perftest]
		if !ok1 || !ok2 {
			return fmt.Errorf("missing %s or %s in the results", p.ftrma, p.perftest)
		}
		label := p.perftest
		if p.factor != 1 {
			label = fmt.Sprintf("%s × %g", p.perftest, p.factor)
		}
		ratio, lo, hi, err := roundRatios(set.Samples(result.Key{Bench: p.ftrma, Size: 8}, "ftrma-verbs"),
			set.Samples(result.Key{Bench: p.perftest, Size: 8}, "perftest"), p.factor)
		if err != nil {
			return fmt.Errorf("%s / %s: %w", p.ftrma, p.perftest, err)
		}
		fmt.Printf("%-14s %-30s %12.2f %12.2f %7.2f %6.2f..%-5.2f\n", p.ftrma, label, f, pv*p.factor, ratio, lo, hi)
		out = append(out, result.Result{Bench: p.ftrma + "/" + strings.ReplaceAll(p.perftest, " ", "_"), Size: 8, System: "ratio", Value: ratio, Unit: "x"})
	}
	fmt.Printf("(%d rounds, %d iterations each; medians; ftrun %s; emulator times: only the ratios mean anything)\n", rounds, n, strings.Join(extra, " "))
	if jsonOut != "" {
		return result.WriteJSONFile(jsonOut, out)
	}
	return nil
}

// roundRatios pairs the rounds' samples of an ftrma bench and of the
// perftest measurement beside it (times factor) and returns the median of
// the per-round ratios and their range.
func roundRatios(ftrma, perftest []float64, factor float64) (median, lo, hi float64, err error) {
	if len(ftrma) == 0 || len(ftrma) != len(perftest) {
		return 0, 0, 0, fmt.Errorf("%d ftrma samples and %d perftest samples: not one of each per round", len(ftrma), len(perftest))
	}
	rs := make([]float64, len(ftrma))
	for i := range rs {
		rs[i] = ftrma[i] / (perftest[i] * factor)
	}
	return result.Median(rs), slices.Min(rs), slices.Max(rs), nil
}

// perftestTries is how many times a perftest measurement is run before the
// round fails: a run whose clock calibration failed is run again.
const perftestTries = 3

// perftest runs a perftest latency tool's server and client on one device and
// returns the client's t_avg in microseconds. perftest converts cycles to
// microseconds with a CPU frequency it measures at start-up against
// gettimeofday; when that measurement is disturbed (a loaded host: the
// regression's r² falls below 0.9) it takes the frequency as 0 and prints
// every time as inf. Such a run, or one without a usable t_avg, is run again
// up to perftestTries times in all, and the error then carries each run's
// reason.
func perftest(tool, atomic, device string, gid, n int) (float64, error) {
	var reasons []string
	for try := 1; try <= perftestTries; try++ {
		out, err := perftestOnce(tool, atomic, device, gid, n)
		if err != nil {
			return 0, err // the tool did not run: no point in trying again
		}
		v, err := parsePerftest(out)
		if err == nil {
			for _, w := range clockWarnings(out) {
				fmt.Printf("%s %s: %s\n", tool, atomic, w)
			}
			return v, nil
		}
		reasons = append(reasons, fmt.Sprintf("try %d: %v", try, err))
	}
	return 0, fmt.Errorf("%s %s: no usable measurement in %d runs:\n%s", tool, atomic, perftestTries, strings.Join(reasons, "\n"))
}

// perftestOnce runs the server and the client once; the client's output.
func perftestOnce(tool, atomic, device string, gid, n int) ([]byte, error) {
	args := []string{"-d", device, "-x", strconv.Itoa(gid), "-n", strconv.Itoa(n), "-s", "8"}
	if atomic != "" {
		args = []string{"-d", device, "-x", strconv.Itoa(gid), "-n", strconv.Itoa(n), "-A", atomic}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, tool, args...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	defer srv.Wait()
	var out []byte
	var err error
	for try := 0; try < 40; try++ { // the client retries until the server listens
		time.Sleep(250 * time.Millisecond)
		out, err = exec.CommandContext(ctx, tool, append(args, "127.0.0.1")...).CombinedOutput()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		srv.Process.Kill()
		return nil, fmt.Errorf("%s %s: %v\n%s\nserver:\n%s", tool, atomic, err, out, srvOut.String())
	}
	return out, nil
}

// clockWarnings returns perftest's warnings about its clock: when the CPU
// frequency it measured differs from /proc/cpuinfo's it uses the measured
// one, and a measurement disturbed by load scales every time it reports.
func clockWarnings(out []byte) []string {
	var ws []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "frequency") || strings.Contains(l, "Correlation") {
			ws = append(ws, strings.TrimSpace(l))
		}
	}
	return ws
}

// parsePerftest finds t_avg in a perftest latency report: the number under
// the "t_avg[usec]" heading. A value that is not a positive finite number
// (perftest prints inf when its clock calibration failed) is an error that
// quotes the report, whose stderr lines say why.
func parsePerftest(out []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	col := -1
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if col < 0 {
			for i, h := range f {
				if strings.HasPrefix(h, "t_avg") {
					col = i
				}
			}
			continue
		}
		if len(f) > col {
			if v, err := strconv.ParseFloat(f[col], 64); err == nil {
				if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
					return 0, fmt.Errorf("t_avg is %s (perftest's clock calibration failed?):\n%s", f[col], out)
				}
				return v, nil
			}
		}
	}
	return 0, errors.New("no t_avg in perftest's output:\n" + string(out))
}

// ftrmaJob runs the rank program under ftrun over verbs and returns its
// results and the transports' counter lines.
func ftrmaJob(bin, device string, gid, n int, extra []string) ([]result.Result, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	it := fmt.Sprintf("%d:%d", n, n/10)
	args := append([]string{"-n", "2", "--transport", "verbs", "--verbs-device", device,
		"--verbs-gid-index", strconv.Itoa(gid), "--hb-timeout", "2s"}, extra...)
	args = append(args, filepath.Join(bin, "rank"), "-lat", "8:"+it, "-atomic", it, "-pingpong", it)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ftrun"), args...)
	cmd.Env = append(os.Environ(), "FTV_STATS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, nil, fmt.Errorf("ftrun: %v\n%s", err, out)
	}
	var rs []result.Result
	var stats []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if i := strings.Index(sc.Text(), "verbs stats: "); i >= 0 {
			stats = append(stats, sc.Text()[i+len("verbs stats: "):])
			continue
		}
		r, ok, err := result.ParseLine(sc.Text())
		if err != nil {
			return nil, nil, err
		}
		if ok {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil, nil, fmt.Errorf("no results from the ftrma job:\n%s", out)
	}
	return rs, stats, nil
}
