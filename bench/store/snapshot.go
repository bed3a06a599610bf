package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftrma/ftrma/bench/internal/host"
	"github.com/ftrma/ftrma/internal/result"
)

// The snapshot comparison (-snapshot): a store of snapKeys keys of snapSize
// bytes is written to files while writers go on putting, on ftrma (ftkv
// bench --snapshot-dir: store.Snapshot, every rank writing its keys) and on
// Redis (BGSAVE: the server forks and its child writes the RDB file), to
// tmpfs (/dev/shm) and to the disk under the temporary directory, the two
// systems and the two targets interleaved round by round. Each run: the
// keys are loaded, the writers put without pause for snapPause, the
// snapshot is taken, the writers go on for snapPause after it. The results
// per (target, system):
//
//	snap_ms            the snapshot's time: Snapshot's return; BGSAVE's reply
//	                   to the end of the child's save (INFO persistence,
//	                   polled every millisecond)
//	snap_MBps          the values' bytes (keys × size) per second of snap_ms
//	snap_put_p99_base  p99 of the puts that ended before the snapshot began
//	snap_put_p99       p99 of the puts under way while it ran
//	snap_put_max       the longest of those
//
// Both stores keep one copy of each key here (ftrma --copies 1, Redis
// without replicas), so that each snapshot writes the same data once.

// snapPlan is the snapshot comparison's workload.
type snapPlan struct {
	keys, size, writers, rounds, ranks int
}

// snapPause matches cmd/ftkv's snapPause: the writers' time before and after
// the snapshot.
const snapPause = 200 * time.Millisecond

// snapTargets are where the snapshots go: name and parent directory.
func snapTargets(tmp string) [][2]string {
	return [][2]string{{"tmpfs", "/dev/shm"}, {"disk", tmp}}
}

// runSnapshots is the -snapshot mode; it returns the exit status.
func runSnapshots(ctx context.Context, o options, dir string) int {
	p := snapPlan{keys: o.snapKeys, size: o.snapSize, writers: o.plan.writers, rounds: o.plan.rounds, ranks: o.ftkvRanks}
	goBin, root, err := host.FindModule(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
		return 1
	}
	ft, err := setupFtrma(ctx, sysFtrmaSHM, goBin, root, filepath.Join(dir, sysFtrmaSHM), o.ftkv, p.ranks, o.plan.workload(64), nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "store: ftrma:", err)
		return 1
	}
	rd, err := setupRedis(ctx, newInstaller(os.Stdout), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "store: redis:", err)
		return 1
	}
	fmt.Printf("snapshots of %d keys of %d bytes, %d writers, %d rounds; ftrma: %d ranks over shared memory, --copies 1; Redis %s (%s): one server, BGSAVE\n",
		p.keys, p.size, p.writers, p.rounds, p.ranks, rd.version, rd.how)
	var set result.Set
	failures := 0
	for round := range p.rounds {
		for _, tg := range snapTargets(dir) {
			for i, sys := range []string{sysFtrmaSHM, sysRedis} {
				if round%2 == 1 {
					sys = []string{sysRedis, sysFtrmaSHM}[i]
				}
				target, err := os.MkdirTemp(tg[1], "bench-snap-")
				if err != nil {
					fmt.Fprintln(os.Stderr, "store:", err)
					return 1
				}
				var rs []result.Result
				if sys == sysRedis {
					rs, err = redisSnapshotRun(ctx, rd, target, p)
				} else {
					rs, err = ftrmaSnapshotRun(ctx, ft, target, p)
				}
				os.RemoveAll(target)
				if err != nil {
					failures++
					fmt.Printf("round %d, %s, %s: %v\n", round+1, tg[0], sys, err)
					set.AddFailure(sys)
					continue
				}
				for _, r := range rs {
					r.Bench = tg[0] + " " + r.Bench
					r.System, r.Size, r.Copies = sys, p.size, 1
					set.Add(r)
					if o.verbose {
						fmt.Printf("round %d: %s %s %s = %.2f %s\n", round+1, tg[0], sys, r.Bench, r.Value, r.Unit)
					}
				}
			}
		}
	}
	medians := set.Medians()
	sortResults(medians)
	fmt.Printf("\nmedian over rounds (ratio column ftrma-shm/redis: below 1 means ftrma is faster or pauses less; for snap_MBps above 1 is faster):\n")
	if err := result.WriteTableRatios(os.Stdout, medians, []string{sysFtrmaSHM, sysRedis}, sysFtrmaSHM); err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
		return 1
	}
	if o.jsonPath != "" {
		if err := result.WriteJSONFile(o.jsonPath, medians); err != nil {
			fmt.Fprintln(os.Stderr, "store:", err)
			return 1
		}
		fmt.Printf("wrote %d results to %s\n", len(medians), o.jsonPath)
	}
	if failures > 0 {
		return 3
	}
	return 0
}

// ftrmaSnapshotRun runs one ftkv bench job with a snapshot phase.
func ftrmaSnapshotRun(ctx context.Context, s *ftrmaSystem, target string, p snapPlan) ([]result.Result, error) {
	per := (p.keys + p.writers - 1) / p.writers
	argv := []string{s.ftrun, "--timeout", "5m", "--transport", "shm", "--oversubscribe", "-n", strconv.Itoa(p.ranks),
		s.ftkv, "bench", "--copies", "1", "--size", strconv.Itoa(p.size), "--writers", strconv.Itoa(p.writers),
		"--keys", strconv.Itoa(per), "--warmup", strconv.Itoa(per), "--ops", "100", "--gets", "0", "-json",
		"--snapshot-dir", target}
	stdout, err := runJob(ctx, 5*time.Minute, argv)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(stdout), "\n") {
		i := strings.Index(line, "[{")
		if i < 0 {
			continue
		}
		rs, err := result.ReadJSON(strings.NewReader(line[i:]))
		if err != nil {
			return nil, err
		}
		var out []result.Result
		for _, r := range rs {
			switch {
			case r.Bench == "snap_ms":
				out = append(out, result.Result{Bench: r.Bench, Value: r.Value, Unit: r.Unit},
					result.Result{Bench: "snap_MBps", Value: float64(p.keys*p.size) / 1e6 / (r.Value / 1e3), Unit: "MB/s"})
			case strings.HasPrefix(r.Bench, "snap_put_"):
				out = append(out, result.Result{Bench: r.Bench, Value: r.Value, Unit: r.Unit})
			}
		}
		if len(out) != 5 {
			return nil, fmt.Errorf("ftkv bench reported %d snapshot results, want 5:\n%s", len(out), line)
		}
		return out, nil
	}
	return nil, fmt.Errorf("no results from ftkv bench:\n%s", tailString(stdout, 10))
}

// redisSnapshotRun starts a Redis server saving into target, loads it,
// and measures a BGSAVE under the writers.
func redisSnapshotRun(ctx context.Context, rd *redisPeer, target string, p snapPlan) ([]result.Result, error) {
	srv := &redisPeer{bin: rd.bin, dir: target}
	proc, port, err := srv.startServer(ctx, 0)
	if err != nil {
		return nil, err
	}
	defer procs.stop(proc, 2*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	admin, err := dialRESP(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	per := (p.keys + p.writers - 1) / p.writers
	key := func(w, k int) []byte { return fmt.Appendf(nil, "bench/%d/%d", w, k) }
	// Random bytes: Redis compresses each value it saves (LZF), ftrma
	// does not; incompressible values make both write the same bytes.
	value := make([]byte, p.size)
	rand.Read(value)
	// Load every key, a thousand SETs per write.
	for w := range p.writers {
		for k := 0; k < per; k += 1000 {
			var cmds [][][]byte
			for j := k; j < min(k+1000, per); j++ {
				cmds = append(cmds, [][]byte{[]byte("SET"), key(w, j), value})
			}
			reps, err := admin.pipeline(ctx, cmds...)
			if err != nil {
				return nil, err
			}
			for _, r := range reps {
				if err := r.err(); err != nil {
					return nil, err
				}
			}
		}
	}
	var stop atomic.Bool
	spans := make([][]result.Span, p.writers)
	errs := make([]error, p.writers)
	var wg sync.WaitGroup
	for w := range p.writers {
		c, err := dialRESP(ctx, addr)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				t := time.Now()
				reps, err := c.pipeline(ctx, [][]byte{[]byte("SET"), key(w, i%per), value})
				if err == nil {
					err = reps[0].err()
				}
				if err != nil {
					errs[w] = err
					return
				}
				spans[w] = append(spans[w], result.Span{Start: t, End: time.Now()})
			}
		})
	}
	time.Sleep(snapPause)
	t0 := time.Now()
	t1, serr := bgsave(ctx, admin)
	if serr == nil {
		time.Sleep(snapPause)
	}
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(append(errs, serr)...); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Join(target, fmt.Sprintf("dump-%d.rdb", port))); err != nil || fi.Size() < int64(p.keys*p.size) {
		return nil, fmt.Errorf("the RDB file is not the store's %d bytes of values: %v, %v", p.keys*p.size, fi, err)
	}
	base, during := result.SplitAround(slices.Concat(spans...), t0, t1)
	if len(during) == 0 {
		return nil, errors.New("no put was under way during the BGSAVE")
	}
	took := t1.Sub(t0)
	return append([]result.Result{
		{Bench: "snap_ms", Value: float64(took.Microseconds()) / 1e3, Unit: "ms"},
		{Bench: "snap_MBps", Value: float64(p.keys*p.size) / 1e6 / took.Seconds(), Unit: "MB/s"},
	}, result.PauseResults("snap_put", base, during)...), nil
}

// bgsave starts a BGSAVE and returns when INFO persistence says it ended,
// polled every millisecond; an error when it failed.
func bgsave(ctx context.Context, c *respConn) (time.Time, error) {
	rep, err := c.do(ctx, "BGSAVE")
	if err == nil {
		err = rep.err()
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("BGSAVE: %w", err)
	}
	for {
		rep, err := c.do(ctx, "INFO", "persistence")
		if err != nil {
			return time.Time{}, err
		}
		info := string(rep.bulk)
		if strings.Contains(info, "rdb_bgsave_in_progress:0") {
			if !strings.Contains(info, "rdb_last_bgsave_status:ok") {
				return time.Time{}, errors.New("BGSAVE failed (rdb_last_bgsave_status)")
			}
			return time.Now(), nil
		}
		time.Sleep(time.Millisecond)
	}
}
