package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/ftrma/ftrma/bench/internal/host"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	coll     result.Set        // agree_lat, shrink_lat, revoke_lat: one sample per coll job
	detect   map[int][]float64 // N -> everyone-knows of each good detect job, ms
	replace  map[int][]float64 // N -> kill to full-size communicator of each good replace-first job, ms
	shrinkK  map[int][]float64 // N -> kill to Shrink returned of each good shrink-first job, ms
	grow     map[int][]growSample
	failures map[string]int    // "detect N=8" -> failed attempts
	firstErr map[string]string // "detect N=8" -> the first line of the first failure
	notes    []string
	attempt  int // of the job running now, from 1
}

// measure runs the jobs, each up to o.attempts times until it succeeds.
// Jobs repeat in rounds over the sizes (N=4, 8, 16, 32, N=4, ...) so that the
// machine's slow and fast phases are spread over all sizes instead of hitting
// one.
func measure(ctx context.Context, o options, bins binaries) *measurement {
	m := &measurement{detect: make(map[int][]float64), replace: make(map[int][]float64), shrinkK: make(map[int][]float64),
		grow:     make(map[int][]growSample),
		failures: make(map[string]int), firstErr: make(map[string]string)}
	rounds := max(o.collRuns, o.detectRuns, o.replaceRuns, o.growRuns)
	try := func(job func() bool) {
		for m.attempt = 1; m.attempt <= o.attempts && ctx.Err() == nil; m.attempt++ {
			if job() {
				return
			}
		}
	}
	// Progress on stderr, one line per job: a full run takes minutes.
	total := len(o.sizes) * (o.collRuns + o.detectRuns + o.replaceRuns + o.growRuns)
	done := 0
	progress := func(what string, n, round int) {
		done++
		fmt.Fprintf(os.Stderr, "bench/ft: job %d/%d: %s, N=%d, round %d/%d\n", done, total, what, n, round+1, rounds)
	}
	for round := range rounds {
		for _, n := range o.sizes {
			if round < o.collRuns && ctx.Err() == nil {
				progress("agree/shrink/revoke", n, round)
				try(func() bool { return m.collJob(ctx, o, bins, n, round) })
			}
			if round < o.detectRuns && ctx.Err() == nil {
				progress("detect", n, round)
				try(func() bool { return m.detectJob(ctx, o, bins, n, round) })
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

// collJob runs one failure-free job that measures agree_lat, shrink_lat and
// revoke_lat, and reports whether it gave them.
func (m *measurement) collJob(ctx context.Context, o options, bins binaries, n, round int) bool {
	argv := ftrunArgs(o, bins, n, "-mode", "coll",
		"-iters", strconv.Itoa(o.iters), "-warmup", strconv.Itoa(o.warmup), "-rounds", strconv.Itoa(o.revokeRounds))
	var rs []result.Result
	var revokes []event
	t0 := time.Now()
	err := runJob(ctx, argv, o.timeout, func(_ *exec.Cmd, ev event) error {
		switch ev.kind {
		case kResult:
			ev.res.System = sysFtrma
			rs = append(rs, ev.res)
		case kRevokeT0, kRevokeSeen:
			revokes = append(revokes, ev)
		case kRankDown:
			return fmt.Errorf("a rank failed in a failure-free job: %s", ev.text)
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
		m.fail("agree/shrink/revoke", n, round, err, o.verbose)
		return false
	}
	rs = append(rs, result.Result{Bench: "revoke_lat", Size: n, System: sysFtrma, Value: result.Median(lat), Unit: "ms"})
	var line []string
	for _, r := range rs {
		if r.Size != n {
			m.fail("agree/shrink/revoke", n, round, fmt.Errorf("%s for size %d in a job of %d", r.Bench, r.Size, n), o.verbose)
			return false
		}
	}
	for _, r := range rs {
		if err := m.coll.Add(r); err != nil {
			m.fail("agree/shrink/revoke", n, round, err, o.verbose)
			return false
		}
		line = append(line, fmt.Sprintf("%s %s ms", r.Bench, result.FormatValue(r.Value)))
	}
	fmt.Printf("N=%-2d agree/shrink/revoke job %d/%d (%.1fs): %s\n", n, round+1, o.collRuns,
		time.Since(t0).Seconds(), strings.Join(line, ", "))
	if o.verbose {
		fmt.Printf("      revoke rounds, ms: %s\n", formatFloats(lat))
	}
	return true
}

// settle is how long the driver waits, once every survivor watches and the
// victim has given its pid, before it kills the victim.
const settle = 50 * time.Millisecond

// detectJob runs one job in which the driver kills the last rank and
// measures how long until every survivor knows; it reports whether it got
// the value.
func (m *measurement) detectJob(ctx context.Context, o options, bins binaries, n, round int) bool {
	victim := n - 1
	argv := ftrunArgs(o, bins, n, "-mode", "detect", "-victim", strconv.Itoa(victim), "-wait", o.timeout.String())
	others := make(map[int]bool)
	t0 := time.Now()
	kill, knew, _, err := killJob(ctx, o, argv, n, victim, kNone, others)
	var ms float64
	if err == nil {
		ms, err = everyoneKnows(knew, n, victim, kill)
	}
	if len(others) > 0 {
		var rs []int
		for r := range others {
			rs = append(rs, r)
		}
		m.notes = append(m.notes, fmt.Sprintf("detect N=%d job %d: survivors also believed ranks %v failed (false suspicion under load)", n, round+1, rs))
	}
	if err != nil {
		m.fail("detect", n, round, err, o.verbose)
		return false
	}
	m.detect[n] = append(m.detect[n], ms)
	fmt.Printf("N=%-2d detect job %d/%d (%.1fs): every survivor knew %s ms after SIGKILL\n", n, round+1, o.detectRuns,
		time.Since(t0).Seconds(), result.FormatValue(ms))
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
	kill, knew, ops, err := killJob(ctx, o, argv, n, victim, kOp, nil)
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
func killJob(ctx context.Context, o options, argv []string, n, victim int, keep kind, others map[int]bool) (kill int64, knew, kept []event, err error) {
	var (
		ready = make(map[int]bool)
		pid   int
	)
	err = runJob(ctx, argv, o.timeout, func(cmd *exec.Cmd, ev event) error {
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
		if kill == 0 && pid != 0 && len(ready) == n-1 {
			time.Sleep(settle)
			now, err := killChild(cmd.Process.Pid, pid)
			if err != nil {
				return fmt.Errorf("kill victim rank %d (pid %d): %w", victim, pid, err)
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
	kill, knew, grows, err := killJob(ctx, o, argv, n, victim, kGrow, nil)
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

// runJob runs ftrun with argv, bounded by ftrun's --timeout and, 15 seconds
// later, by the driver killing ftrun (its ranks die with it: ftrun starts
// them with a parent-death signal). Every line of ftrun's stdout is parsed as
// it arrives and handed to handle, with the running command, and so is every
// report of ftrun on stderr that a rank is down (kRankDown). The first error
// of parsing or of handle ends the job at once (the driver kills ftrun) and
// is returned. A job whose ftrun exits non-zero fails too; the error then
// holds the informative end of ftrun's stderr.
func runJob(ctx context.Context, argv []string, timeout time.Duration, handle func(*exec.Cmd, event) error) error {
	limit := timeout + 15*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}

	type line struct {
		text     string
		isStderr bool
	}
	lines := make(chan line)
	scanErr := make(chan error, 2)
	var wg sync.WaitGroup
	for _, src := range []struct {
		r        io.Reader
		isStderr bool
	}{{stdout, false}, {stderr, true}} {
		wg.Go(func() {
			sc := bufio.NewScanner(src.r)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				lines <- line{sc.Text(), src.isStderr}
			}
			if err := sc.Err(); err != nil {
				scanErr <- err
				io.Copy(io.Discard, src.r) // keep ftrun from blocking on a full pipe
			}
		})
	}
	go func() { wg.Wait(); close(lines) }()

	var first error
	var errLines []string // ftrun's stderr and stray stdout, for the error
	for l := range lines {
		var ev event
		var ok bool
		var err error
		if l.isStderr {
			errLines = append(errLines, l.text)
			ev, ok = parseFtrunReport(l.text)
		} else if ev, ok, err = parseEvent(l.text); !ok && err == nil {
			errLines = append(errLines, l.text)
		}
		if ok && err == nil && first == nil {
			err = handle(cmd, ev)
		}
		if err != nil && first == nil {
			first = err
			cancel() // no use waiting for the rest: kill ftrun and, with it, the ranks
		}
	}
	waitErr := cmd.Wait()
	select {
	case err := <-scanErr:
		if first == nil {
			first = fmt.Errorf("reading ftrun's output: %w", err)
		}
	default:
	}
	detail := lastLines([]byte(strings.Join(informative(errLines), "\n")), 12)
	switch {
	case first != nil:
		return fmt.Errorf("%w\n%s", first, detail)
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("killed ftrun %v after the job's start\n%s", limit, detail)
	case waitErr != nil:
		return fmt.Errorf("ftrun: %v\n%s", waitErr, detail)
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

// results returns the table's rows in order: for each bench, each N.
func (m *measurement) results(o options) []result.Result {
	byKey := make(map[result.Key]result.Result)
	for _, r := range m.coll.Medians() {
		byKey[r.Key()] = r
	}
	for n, xs := range m.detect {
		for _, p := range []struct {
			bench string
			pct   float64
		}{{"detect_p50", 50}, {"detect_p99", 99}} {
			r := result.Result{Bench: p.bench, Size: n, System: sysFtrma, Value: result.Percentile(xs, p.pct), Unit: "ms"}
			byKey[r.Key()] = r
		}
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
	var out []result.Result
	for _, b := range benches {
		for _, n := range o.sizes {
			if r, ok := byKey[result.Key{Bench: b, Size: n}]; ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// missing lists, in words, the values that were not measured and the jobs
// that failed.
func (m *measurement) missing(o options, rs []result.Result) []string {
	have := make(map[result.Key]bool)
	for _, r := range rs {
		have[r.Key()] = true
	}
	var out []string
	for _, b := range benches {
		if !o.runs(b) {
			continue
		}
		var ns []int
		for _, n := range o.sizes {
			if !have[result.Key{Bench: b, Size: n}] {
				ns = append(ns, n)
			}
		}
		if len(ns) > 0 {
			out = append(out, fmt.Sprintf("%s for N = %s (every job failed)", b, joinInts(ns)))
		}
	}
	for _, n := range o.sizes {
		for _, what := range []string{"detect", "agree/shrink/revoke", "replace first", "shrink first", "grow"} {
			key := fmt.Sprintf("%s N=%d", what, n)
			if f := m.failures[key]; f > 0 {
				planned, got := o.collRuns, len(m.coll.Samples(result.Key{Bench: "agree_lat", Size: n}, sysFtrma))
				switch what {
				case "detect":
					planned, got = o.detectRuns, len(m.detect[n])
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
