package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/ftrma/ftrma/internal/result"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/store"
)

// benchOptions are the flags of ftkv bench.
type benchOptions struct {
	copies                                 copiesFlag
	size, ops, warmup, gets, keys, writers int
	json, verbose                          bool
	timeout                                time.Duration
	snapshotDir                            string
}

const benchSynopsis = `usage: ftrun -n N ftkv bench [--copies K] [--size S] [--ops M] [-json] [-v] [flags]

Every rank is a writer that owns --keys keys and overwrites them in turn with
values of S bytes: --warmup untimed puts, then M timed puts, then --gets timed
gets of its own keys, each checked against the value last put. Rank 0 prints
the latency percentiles of all ranks' operations pooled (put and get p50, p99,
p999, in microseconds) and the put throughput (all ranks' timed puts over the
slowest rank's timed phase); with -json, one line holding a JSON array of
{"bench","size","copies","system","value","unit"} records, the shape of
bench/rma's results. The copies reported are the store's. With -v, the
timed calls are traced (store.Trace) and rank 0 also prints, for puts and
for gets, the mean per call of each phase of the store's code: its time,
its round trips (waits for remote completion, a batch toward several ranks
counting once), its flushes (ranks waited for) and the flushes that had to
wait for their answers (with -json: records "put.PHASE" in us and
"put.PHASE.rtt" in round trips, and the same for get).

With --snapshot-dir DIR, a last phase: every writer puts without pause
while, after snapPause, the ranks take one snapshot under DIR
(store.Snapshot), and for snapPause after it. Rank 0 reports the snapshot's
time (snap_ms) and its files' bytes per second (snap_MBps), and of the
puts of that phase the p99 of those that ended before the snapshot began
(snap_put_p99_base), and the p99 and the longest of those under way while
it ran (snap_put_p99, snap_put_max), in microseconds. For the store's whole
contents in the snapshot, give --warmup at least --keys.`

func benchFlags(o *benchOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.copies.define(fs)
	fs.IntVar(&o.size, "size", 64, "value size in bytes `S`")
	fs.IntVar(&o.ops, "ops", 1000, "timed puts per rank `M`")
	fs.IntVar(&o.warmup, "warmup", 100, "untimed puts per rank before the timed ones")
	fs.IntVar(&o.gets, "gets", 200, "timed gets per rank after the puts")
	fs.IntVar(&o.keys, "keys", 16, "keys each writer owns")
	fs.IntVar(&o.writers, "writers", 0, "writers in all, spread over the ranks round robin (default: one per rank)")
	fs.BoolVar(&o.json, "json", false, "print the results as one line of JSON")
	fs.BoolVar(&o.verbose, "v", false, "trace the timed calls and print where their time goes: each phase's mean time and round trips")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.StringVar(&o.snapshotDir, "snapshot-dir", "", "end with a snapshot under `DIR` taken while the writers put, and report its time and the writers' pause")
	return fs
}

// validate rejects flag values that make no sense, before anything starts.
func (o *benchOptions) validate(args []string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected argument %q", args[0])
	case o.copies.n < 1:
		return fmt.Errorf("--copies must be at least 1 (got %d)", o.copies.n)
	case o.size < 1 || o.size > maxBenchSize:
		return fmt.Errorf("--size must be 1 to %d bytes (got %d)", maxBenchSize, o.size)
	case o.ops < 1:
		return fmt.Errorf("--ops must be at least 1 (got %d)", o.ops)
	case o.keys < 1:
		return fmt.Errorf("--keys must be at least 1 (got %d)", o.keys)
	case o.warmup < 0:
		return fmt.Errorf("--warmup must not be negative (got %d)", o.warmup)
	case o.gets < 0:
		return fmt.Errorf("--gets must not be negative (got %d)", o.gets)
	case o.writers < 0:
		return fmt.Errorf("--writers must not be negative (got %d)", o.writers)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout must be positive (got %v)", o.timeout)
	}
	return nil
}

// maxBenchSize bounds --size: every writer holds its keys' values.
const maxBenchSize = 1 << 30

func runBench(args []string, stdout, stderr io.Writer) int {
	var o benchOptions
	fs := benchFlags(&o)
	rest, code, done := parseFlags(fs, args, benchSynopsis, stdout, stderr)
	if done {
		return code
	}
	if err := o.validate(rest); err != nil {
		return usageError(stderr, "bench", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := bench(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "ftkv bench:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func bench(ctx context.Context, o benchOptions, stdout io.Writer) error {
	c, err := startup.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	copies, err := o.copies.resolve(c.Size())
	if err != nil {
		return err
	}
	writers := o.writers
	if writers == 0 {
		writers = c.Size()
	}
	// Each rank holds about copies/size of the keys: slots for twice that.
	slots := max(16384, 2*o.keys*writers*copies/c.Size())
	s, err := store.Open(ctx, c, store.Config{Copies: copies, MaxValueSize: max(o.size, 64<<20), Slots: slots})
	if err != nil {
		return err
	}
	me := int(c.Rank())
	var mine []*writer
	for w := me; w < writers; w += c.Size() {
		wr := newWriter(w, o)
		if o.verbose {
			wr.trace = new(store.Trace)
		}
		mine = append(mine, wr)
	}
	// Each phase runs every writer of this rank at once, then all ranks meet.
	phase := func(f func(*writer) error) error {
		errs := make(chan error, len(mine))
		for _, w := range mine {
			go func() { errs <- f(w) }()
		}
		var first error
		for range mine {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
		return c.Barrier(ctx)
	}
	if err := phase(func(w *writer) error {
		for i := range o.warmup {
			if _, err := w.put(ctx, s, i); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	start := time.Now()
	if err := phase(func(w *writer) error {
		for i := range o.ops {
			d, err := w.put(ctx, s, o.warmup+i)
			if err != nil {
				return err
			}
			w.putLat = append(w.putLat, us(d))
			if w.trace != nil {
				w.puts.add(w.trace)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := phase(func(w *writer) error { return w.getAll(ctx, s, o.gets) }); err != nil {
		return err
	}
	var snap *snapshotRun
	if o.snapshotDir != "" {
		if snap, err = snapshotPhase(ctx, c, s, mine, o.warmup+o.ops, o.snapshotDir); err != nil {
			return err
		}
	}
	var putLat, getLat []float64
	var puts, gets breakdown
	for _, w := range mine {
		putLat, getLat = append(putLat, w.putLat...), append(getLat, w.getLat...)
		puts.merge(&w.puts)
		gets.merge(&w.gets)
	}
	// Pool the samples at rank 0, through the store itself.
	samples := encodeSamples(elapsed, putLat, getLat)
	if snap != nil {
		samples = snap.append(samples)
	}
	if o.verbose {
		samples = gets.append(puts.append(samples))
	}
	if err := s.Put(ctx, fmt.Appendf(nil, "bench/samples/%d", me), samples); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		var puts, gets []float64
		var putTrace, getTrace breakdown
		var slowest time.Duration
		var allSnap snapshotRun
		for r := range c.Size() {
			b, err := s.Get(ctx, fmt.Appendf(nil, "bench/samples/%d", r))
			if err != nil {
				return err
			}
			ph, p, g, rest, err := decodeSamples(b)
			if err == nil && snap != nil {
				rest, err = allSnap.decode(rest)
			}
			if err != nil {
				return fmt.Errorf("samples of rank %d: %w", r, err)
			}
			puts, gets = append(puts, p...), append(gets, g...)
			slowest = max(slowest, ph)
			if o.verbose {
				pt, rest, err := decodeBreakdown(rest)
				if err != nil {
					return fmt.Errorf("samples of rank %d: %w", r, err)
				}
				gt, _, err := decodeBreakdown(rest)
				if err != nil {
					return fmt.Errorf("samples of rank %d: %w", r, err)
				}
				putTrace.merge(pt)
				getTrace.merge(gt)
			}
		}
		var extra []result.Result
		if snap != nil {
			allSnap.took, allSnap.bytes = snap.took, snap.bytes
			extra = allSnap.results()
		}
		report(stdout, o, s.Copies(), c.Size(), writers, puts, gets, float64(len(puts))/slowest.Seconds(), &putTrace, &getTrace, extra)
		if !o.json {
			fmt.Fprintf(stdout, "  rank 0's store: %+v\n", s.Stats())
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return s.Close(ctx)
}

// writer is one writer: it owns its keys and remembers what it put last.
type writer struct {
	keys           [][]byte
	value          []byte
	last           [][]byte
	putLat, getLat []float64
	trace          *store.Trace // with -v: the last call's
	puts, gets     breakdown    // with -v: the timed calls' traces
}

func newWriter(w int, o benchOptions) *writer {
	wr := &writer{keys: make([][]byte, o.keys), value: make([]byte, o.size), last: make([][]byte, o.keys)}
	for k := range wr.keys {
		wr.keys[k] = fmt.Appendf(nil, "bench/%d/%d", w, k)
	}
	for i := range wr.value {
		wr.value[i] = byte(w*31 + i)
	}
	return wr
}

// put writes the writer's i-th put: key i mod keys, the value stamped with i.
func (w *writer) put(ctx context.Context, s *store.Store, i int) (time.Duration, error) {
	k := i % len(w.keys)
	var stamp [8]byte
	binary.LittleEndian.PutUint64(stamp[:], uint64(i))
	copy(w.value, stamp[:])
	if w.trace != nil {
		ctx = store.WithTrace(ctx, w.trace)
	}
	t := time.Now()
	err := s.Put(ctx, w.keys[k], w.value)
	d := time.Since(t)
	w.last[k] = slices.Clone(w.value)
	return d, err
}

// getAll reads back the writer's keys n times in all, checking each value.
func (w *writer) getAll(ctx context.Context, s *store.Store, n int) error {
	if w.trace != nil {
		ctx = store.WithTrace(ctx, w.trace)
	}
	for i := range n {
		k := i % len(w.keys)
		if w.last[k] == nil {
			continue
		}
		t := time.Now()
		v, err := s.Get(ctx, w.keys[k])
		d := time.Since(t)
		if err != nil {
			return err
		}
		if !slices.Equal(v, w.last[k]) {
			return fmt.Errorf("get %s: read back %d bytes that differ from the last put", w.keys[k], len(v))
		}
		w.getLat = append(w.getLat, us(d))
		if w.trace != nil {
			w.gets.add(w.trace)
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func encodeSamples(phase time.Duration, puts, gets []float64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(phase))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(puts)))
	for _, v := range puts {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(gets)))
	for _, v := range gets {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// decodeSamples reads what encodeSamples wrote at the start of b; rest is
// what follows (with -v, the breakdowns).
func decodeSamples(b []byte) (phase time.Duration, puts, gets []float64, rest []byte, err error) {
	bad := errors.New("malformed")
	if len(b) < 12 {
		return 0, nil, nil, nil, bad
	}
	phase = time.Duration(binary.LittleEndian.Uint64(b))
	b = b[8:]
	list := func() ([]float64, error) {
		if len(b) < 4 {
			return nil, bad
		}
		n := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if len(b) < 8*n {
			return nil, bad
		}
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		b = b[8*n:]
		return out, nil
	}
	if puts, err = list(); err != nil {
		return 0, nil, nil, nil, err
	}
	gets, err = list()
	return phase, puts, gets, b, err
}

// report prints the results; copies is what the store uses; with -v, the
// breakdowns of the puts and gets too.
func report(w io.Writer, o benchOptions, copies, ranks, writers int, puts, gets []float64, rate float64, putTrace, getTrace *breakdown, extra []result.Result) {
	var rs []result.Result
	add := func(bench string, v float64, unit string) {
		rs = append(rs, result.Result{Bench: bench, Size: o.size, Copies: copies, System: system(), Value: math.Round(v*100) / 100, Unit: unit})
	}
	for _, p := range []struct {
		name string
		p    float64
	}{{"p50", 50}, {"p99", 99}, {"p999", 99.9}} {
		add("put_"+p.name, result.Percentile(puts, p.p), "us")
	}
	if len(gets) > 0 {
		for _, p := range []struct {
			name string
			p    float64
		}{{"p50", 50}, {"p99", 99}, {"p999", 99.9}} {
			add("get_"+p.name, result.Percentile(gets, p.p), "us")
		}
	}
	add("put_rate", rate, "ops/s")
	for _, r := range extra {
		add(r.Bench, r.Value, r.Unit)
	}
	if o.verbose && o.json {
		for i, b := range []*breakdown{putTrace, getTrace} {
			names, values, units := b.results([]string{"put", "get"}[i])
			for j := range names {
				add(names[j], values[j], units[j])
			}
		}
	}
	if o.json {
		b, _ := json.Marshal(rs)
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "ftkv bench: %d writers on %d ranks, %d copies, %d-byte values, %d puts and %d gets in all\n", writers, ranks, copies, o.size, len(puts), len(gets))
	for _, r := range rs {
		fmt.Fprintf(w, "  %-9s %12.2f %s\n", r.Bench, r.Value, r.Unit)
	}
	if o.verbose {
		putTrace.print(w, "put")
		getTrace.print(w, "get")
	}
}

// system names the measured system after the transport ftrun gave the job.
func system() string { // FTRMA_TRANSPORT: set by ftrun (internal/jobwire.EnvTransport)
	if os.Getenv("FTRMA_TRANSPORT") == "shm" {
		return "ftrma-shm"
	}
	return "ftrma-tcp"
}
