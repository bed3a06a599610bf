package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/ftrma/ftrma/bench/internal/host"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

// binaries are the programs the driver built.
type binaries struct{ ftrun, rank string }

// build compiles cmd/ftrun and bench/ft/rank into dir, from the root of the
// module that holds the working directory.
func build(ctx context.Context, dir string) (binaries, error) {
	goBin, root, err := host.FindModule(ctx)
	if err != nil {
		return binaries{}, err
	}
	b := binaries{ftrun: filepath.Join(dir, "ftrun"), rank: filepath.Join(dir, "ft-rank")}
	for _, x := range []struct{ out, pkg string }{{b.ftrun, "./cmd/ftrun"}, {b.rank, "./bench/ft/rank"}} {
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", x.out, x.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("go build %s: %v\n%s", x.pkg, err, lastLines(out, 15))
		}
	}
	return b, nil
}

// measurement collects what the jobs produced.
type measurement struct {
	coll     result.Set                   // agree_lat, shrink_lat, revoke_lat: one sample per coll job
	detect   map[string]map[int][]float64 // system -> N -> everyone-knows of each good detect job, ms
	stop     map[string]map[int][]float64 // the same for the stop jobs
	replace  map[int][]float64            // N -> kill to full-size communicator of each good replace-first job, ms
	shrinkK  map[int][]float64            // N -> kill to Shrink returned of each good shrink-first job, ms
	grow     map[int][]growSample
	failures map[string]int    // "detect N=8" -> failed attempts
	firstErr map[string]string // "detect N=8" -> the first line of the first failure
	notes    []string
	attempt  int // of the job running now, from 1
}

// measure runs the jobs, each up to o.attempts times until it succeeds.
// Jobs repeat in rounds over the sizes (N=4, 8, 16, 32, N=4, ...) so that the
// machine's slow and fast phases are spread over all sizes instead of hitting
// one. The detect, stop and coll jobs run on every system (ftrma first, then its
// peer, in even rounds; the other way round in odd ones), the replace and
// grow jobs on ftrma only.
func measure(ctx context.Context, o options, bins binaries, systems []system) *measurement {
	m := &measurement{detect: make(map[string]map[int][]float64), stop: make(map[string]map[int][]float64), replace: make(map[int][]float64), shrinkK: make(map[int][]float64),
		grow:     make(map[int][]growSample),
		failures: make(map[string]int), firstErr: make(map[string]string)}
	rounds := max(o.collRuns, o.detectRuns, o.stopRuns, o.replaceRuns, o.growRuns)
	try := func(job func() bool) {
		for m.attempt = 1; m.attempt <= o.attempts && ctx.Err() == nil; m.attempt++ {
			if job() {
				return
			}
		}
	}
	// Progress on stderr, one line per job: a full run takes minutes.
	total := len(o.sizes) * (len(systems)*(o.collRuns+o.detectRuns+o.stopRuns) + o.replaceRuns + o.growRuns)
	done := 0
	progress := func(what string, n, round int) {
		done++
		fmt.Fprintf(os.Stderr, "bench/ft: job %d/%d: %s, N=%d, round %d/%d\n", done, total, what, n, round+1, rounds)
	}
	for round := range rounds {
		order := slices.Clone(systems)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range o.sizes {
			for _, sys := range order {
				if round < o.collRuns && ctx.Err() == nil {
					progress(sys.name+" agree/shrink/revoke", n, round)
					try(func() bool { return m.collJob(ctx, o, sys, n, round) })
				}
			}
			for _, sys := range order {
				if round < o.detectRuns && ctx.Err() == nil {
					progress(sys.name+" detect", n, round)
					try(func() bool { return m.detectJob(ctx, o, sys, n, round, syscall.SIGKILL) })
				}
			}
			for _, sys := range order {
				if round < o.stopRuns && ctx.Err() == nil {
					progress(sys.name+" stop", n, round)
					try(func() bool { return m.detectJob(ctx, o, sys, n, round, syscall.SIGSTOP) })
				}
			}
			if round < o.replaceRuns && ctx.Err() == nil {
				first := "replace"
				if round%2 == 1 {
					first = "shrink"
				}
				progress(first+" first", n, round)
				try(func() bool { return m.replaceJob(ctx, o, bins, n, round, first) })
			}
			if round < o.growRuns && ctx.Err() == nil {
				progress("grow", n, round)
				try(func() bool { return m.growJob(ctx, o, bins, n, round) })
			}
		}
	}
	return m
}

// ftrunArgs is the ftrun command line of a job of n ranks running the rank
// program with rankArgs.
func ftrunArgs(o options, bins binaries, n int, rankArgs ...string) []string {
	return ftrunArgsSpares(o, bins, n, 0, rankArgs...)
}

// ftrunArgsSpares is ftrunArgs for a job with spares (ftrun --respawn).
func ftrunArgsSpares(o options, bins binaries, n, spares int, rankArgs ...string) []string {
	// N goes beyond this host's CPUs on purpose (the timeout stretches).
	argv := []string{bins.ftrun, "--oversubscribe", "-n", strconv.Itoa(n), "--timeout", o.timeout.String(), "--transport", o.transport}
	if spares > 0 {
		argv = append(argv, "--respawn="+strconv.Itoa(spares))
	}
	if o.hbPeriod > 0 {
		argv = append(argv, "--hb-period", o.hbPeriod.String())
	}
	if o.hbTimeout > 0 {
		argv = append(argv, "--hb-timeout", o.hbTimeout.String())
	}
	argv = append(argv, bins.rank)
	argv = append(argv, rankArgs...)
	return append(argv, "-poll", o.poll.String(), "-deadline", o.timeout.String())
}

// fail records and prints a failed attempt at job round+1 of kind what.
func (m *measurement) fail(what string, n, round int, err error, verbose bool) {
	key := fmt.Sprintf("%s N=%d", what, n)
	m.failures[key]++
	if _, ok := m.firstErr[key]; !ok {
		m.firstErr[key], _, _ = strings.Cut(err.Error(), "\n")
	}
	msg := err.Error()
	if !verbose {
		msg = firstLines(msg, 12)
	}
	fmt.Fprintf(os.Stderr, "%s job %d FAILED (attempt %d): %s\n", key, round+1, m.attempt, msg)
}

// jobName is how failures and notes name a kind of job on system sys:
// ftrma's plainly, its peer's with the system's name.
func jobName(sys system, what string) string {
	if sys.name == sysFtrma {
		return what
	}
	return sys.name + " " + what
}

// collJob runs one failure-free job on sys that measures agree_lat,
// shrink_lat and revoke_lat, and reports whether it gave them.
func (m *measurement) collJob(ctx context.Context, o options, sys system, n, round int) bool {
	what := jobName(sys, "agree/shrink/revoke")
	var rs []result.Result
	var revokes []event
	t0 := time.Now()
	err := runJob(ctx, sys.argv(n, "coll", collArgs(o)...), sys.mpirun, o.timeout, func(_ *exec.Cmd, ev event) error {
		switch ev.kind {
		case kResult:
			ev.res.System = sys.name
			rs = append(rs, ev.res)
		case kRevokeT0, kRevokeSeen:
			revokes = append(revokes, ev)
		case kRankDown:
			return fmt.Errorf("a rank failed in a failure-free job: %s", ev.text)
		}
		if len(rs) == 2 && len(revokes) == o.revokeRounds*(n+1) {
			return errEnough
		}
		return nil
	})
	var lat []float64
	if err == nil {
		lat, err = revokeLatencies(revokes, n)
	}
	if err == nil && len(rs) != 2 {
		err = fmt.Errorf("%d RESULT lines, want agree_lat and shrink_lat", len(rs))
	}
	if err != nil {
		m.fail(what, n, round, err, o.verbose)
		return false
	}
	rs = append(rs, result.Result{Bench: "revoke_lat", Size: n, System: sys.name, Value: result.Median(lat), Unit: "ms"})
	var line []string
	for _, r := range rs {
		if r.Size != n {
			m.fail(what, n, round, fmt.Errorf("%s for size %d in a job of %d", r.Bench, r.Size, n), o.verbose)
			return false
		}
	}
	for _, r := range rs {
		if err := m.coll.Add(r); err != nil {
			m.fail(what, n, round, err, o.verbose)
			return false
		}
		line = append(line, fmt.Sprintf("%s %s ms", r.Bench, result.FormatValue(r.Value)))
	}
	fmt.Printf("N=%-2d %s job %d/%d (%.1fs): %s\n", n, what, round+1, o.collRuns,
		time.Since(t0).Seconds(), strings.Join(line, ", "))
	if o.verbose {
		fmt.Printf("      revoke rounds, ms: %s\n", formatFloats(lat))
	}
	return true
}

// settle is how long the driver waits, once every survivor watches and the
// victim has given its pid, before it kills the victim.
const settle = 50 * time.Millisecond

// detectJob runs one job on sys in which the driver kills (sig SIGKILL:
// a detect job) or stops (SIGSTOP: a stop job) the last rank and measures
// how long until every survivor knows; it reports whether it got the
// value.
func (m *measurement) detectJob(ctx context.Context, o options, sys system, n, round int, sig syscall.Signal) bool {
	victim := n - 1
	kind, into, runs := "detect", m.detect, o.detectRuns
	if sig == syscall.SIGSTOP {
		kind, into, runs = "stop", m.stop, o.stopRuns
	}
	what := jobName(sys, kind)
	others := make(map[int]bool)
	t0 := time.Now()
	kill, knew, _, err := killJob(ctx, o, sys.argv(n, kind, "-victim", strconv.Itoa(victim)), sys.mpirun, sig, n, victim, kNone, others)
	var ms float64
	if err == nil {
		ms, err = everyoneKnows(knew, n, victim, kill)
	}
	if len(others) > 0 {
		var rs []int
		for r := range others {
			rs = append(rs, r)
		}
		m.notes = append(m.notes, fmt.Sprintf("%s N=%d job %d: survivors also believed ranks %v failed (false suspicion under load)", what, n, round+1, rs))
	}
	if err != nil {
		m.fail(what, n, round, err, o.verbose)
		return false
	}
	if into[sys.name] == nil {
		into[sys.name] = make(map[int][]float64)
	}
	into[sys.name][n] = append(into[sys.name][n], ms)
	fmt.Printf("N=%-2d %s job %d/%d (%.1fs): every survivor knew %s ms after %s\n", n, what, round+1, runs,
		time.Since(t0).Seconds(), result.FormatValue(ms), signalName(sig))
	return true
}

// replaceJob runs one job of n ranks and one spare in which the driver
// kills the last rank; the survivors then call Replace and Shrink, the one
// first names first. It records the time from the kill until that first
// operation returned everywhere: for Replace at the n-1 survivors and in the
// spare's Init, for Shrink at the survivors. It reports whether it got the
// value.
func (m *measurement) replaceJob(ctx context.Context, o options, bins binaries, n, round int, first string) bool {
	victim := n - 1
	argv := ftrunArgsSpares(o, bins, n, 1, "-mode", "replace", "-first", first, "-victim", strconv.Itoa(victim), "-wait", o.timeout.String())
	what := first + " first"
	t0 := time.Now()
	kill, knew, ops, err := killJob(ctx, o, argv, false, syscall.SIGKILL, n, victim, kOp, nil)
	survivors := make([]int, 0, n-1)
	for r := range n - 1 {
		survivors = append(survivors, r)
	}
	var detect, rep, shr, spare float64
	if err == nil {
		detect, err = everyoneKnows(knew, n, victim, kill)
	}
	if err == nil {
		rep, err = lastReturn(ops, "replace", survivors, kill)
	}
	if err == nil {
		shr, err = lastReturn(ops, "shrink", survivors, kill)
	}
	if err == nil {
		spare, err = lastReturn(ops, "spareinit", []int{victim}, kill)
	}
	if err != nil {
		m.fail(what, n, round, err, o.verbose)
		return false
	}
	full := max(rep, spare)
	var began float64 // the spare's main began, ms after the kill
	for _, e := range ops {
		if e.op == "spareinit" {
			began = float64(e.start-kill) / 1e6
		}
	}
	if first == "replace" {
		m.replace[n] = append(m.replace[n], full)
		fmt.Printf("N=%-2d replace job %d/%d (%.1fs): every survivor knew %s ms after SIGKILL; full-size communicator at %s ms (the spare's main began at %s ms, its Init returned at %s ms); then Shrink at %s ms\n",
			n, round+1, o.replaceRuns, time.Since(t0).Seconds(), result.FormatValue(detect), result.FormatValue(full), result.FormatValue(began), result.FormatValue(spare), result.FormatValue(shr))
	} else {
		m.shrinkK[n] = append(m.shrinkK[n], shr)
		fmt.Printf("N=%-2d replace job %d/%d (%.1fs): every survivor knew %s ms after SIGKILL; Shrink returned at %s ms; then full-size communicator at %s ms\n",
			n, round+1, o.replaceRuns, time.Since(t0).Seconds(), result.FormatValue(detect), result.FormatValue(shr), result.FormatValue(full))
	}
	return true
}

// killJob runs a job of n ranks (argv; plus a spare for Replace) in which
// the driver kills rank victim once the others are ready, and returns the driver's
// clock at the kill, the survivors' knew events and the events of kind
// keep. The failure of a rank other than the victim ends the job with an
// error: it would measure two failures. So does a false suspicion
// (alsofailed), unless others is not nil: the ranks suspected are then
// recorded there (detection still measures the victim's).
func killJob(ctx context.Context, o options, argv []string, mpirun bool, sig syscall.Signal, n, victim int, keep kind, others map[int]bool) (kill int64, knew, kept []event, err error) {
	var (
		ready = make(map[int]bool)
		pid   int
	)
	err = runJob(ctx, argv, mpirun, o.timeout, func(cmd *exec.Cmd, ev event) error {
		switch ev.kind {
		case kReady:
			ready[ev.rank] = true
		case kPid:
			if ev.rank != victim {
				return fmt.Errorf("rank %d, not the victim %d, gave its pid", ev.rank, victim)
			}
			pid = ev.pid
		case kKnew:
			if kill == 0 {
				return fmt.Errorf("rank %d saw rank %d fail before the driver killed it (false detection)", ev.rank, victim)
			}
			knew = append(knew, ev)
		case keep:
			kept = append(kept, ev)
		case kAlsoFailed:
			if others == nil {
				return fmt.Errorf("rank %d also believed ranks %v failed (false suspicion): the job would measure two failures", ev.rank, ev.others)
			}
			for _, r := range ev.others {
				others[r] = true
			}
		case kRankDown:
			// ftrun numbers the spare n (world rank); the victim is n-1.
			if kill == 0 || ev.rank != victim {
				return fmt.Errorf("a rank other than the victim failed: %s", ev.text)
			}
		}
		if kill != 0 && len(knew) == n-1 && keep == kNone {
			if sig == syscall.SIGSTOP {
				// Measured: the stopped victim goes, so that the
				// launcher can end (ftrun kills a rank its detector
				// declared itself; mpirun waits for it).
				host.KillDescendant(cmd.Process.Pid, pid)
			}
			return errEnough // a detect or stop job: what is left is leaving
		}
		if kill == 0 && pid != 0 && len(ready) == n-1 {
			time.Sleep(settle)
			now, err := host.SignalDescendant(cmd.Process.Pid, pid, sig)
			if err != nil {
				return fmt.Errorf("%s victim rank %d (pid %d): %w", signalName(sig), victim, pid, err)
			}
			kill = now
		}
		return nil
	})
	if err == nil && kill == 0 {
		err = fmt.Errorf("the job ended before the victim could be killed (%d of %d survivors ready, victim pid %d)", len(ready), n-1, pid)
	}
	return kill, knew, kept, err
}

// growSample is one grow job's values.
type growSample struct {
	ms          float64 // first Grow or Join call to the last return
	keys, bytes int64   // copied to new replicas, summed over ranks
	spareHeld   int64   // keys the new rank holds after Join
}

// growJob runs one job of n ranks and one spare over a store: the driver
// kills the last rank, the survivors Replace and Grow the store, the spare
// Joins it. It records how long the Grow took and how much it moved, and
// reports whether it got the values.
func (m *measurement) growJob(ctx context.Context, o options, bins binaries, n, round int) bool {
	victim := n - 1
	argv := ftrunArgsSpares(o, bins, n, 1, "-mode", "grow", "-keys", strconv.Itoa(o.growKeys), "-value", strconv.Itoa(o.growValue),
		"-copies", strconv.Itoa(o.growCopies), "-victim", strconv.Itoa(victim), "-wait", o.timeout.String())
	t0 := time.Now()
	kill, knew, grows, err := killJob(ctx, o, argv, false, syscall.SIGKILL, n, victim, kGrow, nil)
	var g growSample
	if err == nil {
		_, err = everyoneKnows(knew, n, victim, kill)
	}
	if err == nil {
		g.ms, g.keys, g.bytes, err = growTotals(grows, n)
	}
	if err != nil {
		m.fail("grow", n, round, err, o.verbose)
		return false
	}
	perRank := make([]string, n)
	for _, e := range grows {
		perRank[e.rank] = fmt.Sprintf("%d/%d", e.counts[0], e.counts[1])
		if e.rank == victim {
			g.spareHeld = e.counts[2]
		}
	}
	m.grow[n] = append(m.grow[n], g)
	fmt.Printf("N=%-2d grow job %d/%d (%.1fs): Grow/Join took %s ms; keys/bytes copied by rank: %s; the new rank holds %d keys\n",
		n, round+1, o.growRuns, time.Since(t0).Seconds(), result.FormatValue(g.ms), strings.Join(perRank, " "), g.spareHeld)
	return true
}

// errEnough, returned by a job's handler, says that an mpirun job gave
// everything it measures: the driver gives mpirun lingerGrace to end by
// itself (the ULFM program finalizes), then kills its process group, and
// the job counts as good whatever mpirun's exit status (after a killed
// rank it need not be 0, and mpirun does not always end: bench/ulfm saw it
// linger in 4 or 5 of 24 jobs).
var errEnough = errors.New("everything measured")

// lingerGrace is how long an mpirun job that gave everything it measures
// may take to end by itself; lingeredJobs counts those killed after it.
var lingerGrace = 5 * time.Second

var lingeredJobs atomic.Int64

// runJob runs the launcher argv (ftrun, or mpirun when mpirun is set),
// bounded by ftrun's --timeout and, 15 seconds after timeout, by the driver
// killing the launcher (ftrun's ranks die with it: ftrun starts them with a
// parent-death signal; mpirun runs in a process group of its own, which the
// driver kills whole). Every line of the launcher's stdout is parsed as it
// arrives and handed to handle, with the running command, and so is every
// report of ftrun on stderr that a rank is down (kRankDown). The first error
// of parsing or of handle, or an error line of the program (kError), ends
// the job at once (the driver kills the launcher) and is returned. A job
// whose launcher exits non-zero fails too; the error then holds the
// informative end of its stderr.
func runJob(ctx context.Context, argv []string, mpirun bool, timeout time.Duration, handle func(*exec.Cmd, event) error) error {
	limit := timeout + 15*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	launcher := "ftrun"
	if mpirun {
		launcher = "mpirun"
	}
	job, err := host.StartJob(ctx, argv, mpirun, 5*time.Second)
	if err != nil {
		return err
	}
	defer job.KillGroup() // what is left of mpirun's group
	cmd := job.Cmd

	var first error
	var errLines []string // the launcher's stderr and stray stdout, for the error
	var enough atomic.Bool
	for l := range job.Lines {
		var ev event
		var ok bool
		var err error
		if l.Stderr {
			errLines = append(errLines, l.Text)
			ev, ok = parseFtrunReport(l.Text)
		} else if ev, ok, err = parseEvent(l.Text); !ok && err == nil {
			errLines = append(errLines, l.Text)
		}
		if ok && err == nil && ev.kind == kError {
			err = fmt.Errorf("the program failed: %s", ev.text)
		}
		if ok && err == nil && first == nil {
			err = handle(cmd, ev)
		}
		if errors.Is(err, errEnough) {
			err = nil
			if mpirun && !enough.Swap(true) {
				t := time.AfterFunc(lingerGrace, func() { lingeredJobs.Add(1); cancel() })
				defer t.Stop()
			}
		}
		if err != nil && first == nil {
			first = err
			cancel() // no use waiting for the rest: kill the launcher and, with it, the ranks
		}
	}
	waitErr := cmd.Wait()
	if err := job.ScanErr(); err != nil && first == nil {
		first = fmt.Errorf("reading %s's output: %w", launcher, err)
	}
	detail := lastLines([]byte(strings.Join(informative(errLines), "\n")), 12)
	switch {
	case first != nil:
		return fmt.Errorf("%w\n%s", first, detail)
	case enough.Load():
		return nil
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("killed %s %v after the job's start\n%s", launcher, limit, detail)
	case waitErr != nil:
		return fmt.Errorf("%s: %v\n%s", launcher, waitErr, detail)
	}
	return nil
}

// informative drops, from many lines of ftrun's stderr, ftrun's one-line
// reports of ranks that exited non-zero, which crowd out the reason.
func informative(lines []string) []string {
	if len(lines) <= 12 {
		return lines
	}
	var out []string
	for _, l := range lines {
		if ev, ok := parseFtrunReport(l); ok && strings.Contains(ev.text, "exited with status") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// peerBench reports whether the peer systems measure bench b too (the
// detect, stop and coll jobs; replace has its own driver, bench/ulfm, and grow is
// ftrma's store).
func peerBench(b string) bool {
	return slices.Contains(jobKinds["detect"], b) || slices.Contains(jobKinds["stop"], b) || slices.Contains(jobKinds["coll"], b)
}

// results returns the table's rows in order: for each bench, each N,
// ftrma's row and then each peer's.
func (m *measurement) results(o options, peers ...string) []result.Result {
	byKey := make(map[result.Key]result.Result) // ftrma's rows
	type sysKey struct {
		result.Key
		system string
	}
	bySys := make(map[sysKey]result.Result) // rows of the systems but ftrma, by key
	for kind, bySysN := range map[string]map[string]map[int][]float64{"detect": m.detect, "stop": m.stop} {
		for sys, byN := range bySysN {
			for n, xs := range byN {
				for _, p := range []struct {
					bench string
					pct   float64
				}{{kind + "_p50", 50}, {kind + "_p99", 99}} {
					r := result.Result{Bench: p.bench, Size: n, System: sys, Value: result.Percentile(xs, p.pct), Unit: "ms"}
					bySys[sysKey{r.Key(), sys}] = r
				}
			}
		}
	}
	for _, r := range m.coll.Medians() {
		bySys[sysKey{r.Key(), r.System}] = r
	}
	for _, x := range []struct {
		bench string
		by    map[int][]float64
	}{{"replace_lat", m.replace}, {"kill_shrink_lat", m.shrinkK}} {
		for n, xs := range x.by {
			r := result.Result{Bench: x.bench, Size: n, System: sysFtrma, Value: result.Median(xs), Unit: "ms"}
			byKey[r.Key()] = r
		}
	}
	for n, gs := range m.grow {
		col := func(f func(growSample) float64) float64 {
			xs := make([]float64, len(gs))
			for i, g := range gs {
				xs[i] = f(g)
			}
			return result.Median(xs)
		}
		for _, r := range []result.Result{
			{Bench: "grow_lat", Value: col(func(g growSample) float64 { return g.ms }), Unit: "ms"},
			{Bench: "grow_keys", Value: col(func(g growSample) float64 { return float64(g.keys) }), Unit: "keys"},
			{Bench: "grow_bytes", Value: col(func(g growSample) float64 { return float64(g.bytes) }), Unit: "B"},
			{Bench: "grow_new_keys", Value: col(func(g growSample) float64 { return float64(g.spareHeld) }), Unit: "keys"},
		} {
			r.Size, r.System = n, sysFtrma
			byKey[r.Key()] = r
		}
	}
	for k, r := range bySys {
		if k.system == sysFtrma {
			byKey[k.Key] = r
		}
	}
	var out []result.Result
	for _, b := range benches {
		for _, n := range o.sizes {
			k := result.Key{Bench: b, Size: n}
			if r, ok := byKey[k]; ok {
				out = append(out, r)
			}
			for _, sys := range peers {
				if r, ok := bySys[sysKey{k, sys}]; ok {
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// missing lists, in words, the values that were not measured and the jobs
// that failed.
func (m *measurement) missing(o options, rs []result.Result, peers ...string) []string {
	type sysKey struct {
		result.Key
		system string
	}
	have := make(map[sysKey]bool)
	for _, r := range rs {
		have[sysKey{r.Key(), r.System}] = true
	}
	var out []string
	for _, sys := range append([]string{sysFtrma}, peers...) {
		for _, b := range benches {
			if !o.runs(b) || sys != sysFtrma && !peerBench(b) {
				continue
			}
			var ns []int
			for _, n := range o.sizes {
				if !have[sysKey{result.Key{Bench: b, Size: n}, sys}] {
					ns = append(ns, n)
				}
			}
			if len(ns) > 0 {
				name := b
				if sys != sysFtrma {
					name = sys + " " + b
				}
				out = append(out, fmt.Sprintf("%s for N = %s (every job failed)", name, joinInts(ns)))
			}
		}
	}
	for _, n := range o.sizes {
		for _, sys := range append([]string{sysFtrma}, peers...) {
			for _, what := range []string{"detect", "stop", "agree/shrink/revoke", "replace first", "shrink first", "grow"} {
				name := what
				if sys != sysFtrma {
					name = sys + " " + what
				}
				key := fmt.Sprintf("%s N=%d", name, n)
				f := m.failures[key]
				if f == 0 {
					continue
				}
				planned, got := o.collRuns, len(m.coll.Samples(result.Key{Bench: "agree_lat", Size: n}, sys))
				switch what {
				case "detect":
					planned, got = o.detectRuns, len(m.detect[sys][n])
				case "stop":
					planned, got = o.stopRuns, len(m.stop[sys][n])
				case "replace first":
					planned, got = (o.replaceRuns+1)/2, len(m.replace[n])
				case "shrink first":
					planned, got = o.replaceRuns/2, len(m.shrinkK[n])
				case "grow":
					planned, got = o.growRuns, len(m.grow[n])
				}
				m.notes = append(m.notes, fmt.Sprintf("%s: %d failed attempt(s) (a job gets up to %d); %d of %d planned jobs gave values. First failure: %s",
					key, f, o.attempts, got, planned, m.firstErr[key]))
			}
		}
	}
	return out
}

func formatFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = result.FormatValue(x)
	}
	return strings.Join(s, " ")
}

// lastLines returns the last n lines of b, indented.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// firstLines cuts s after n lines.
func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("    ... (%d more lines; -v shows all)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

// signalName names what the driver did to the victim.
func signalName(sig syscall.Signal) string {
	if sig == syscall.SIGSTOP {
		return "SIGSTOP"
	}
	return "SIGKILL"
}
