// Command rank is the ftrma side of bench/rma. Start it with two ranks:
//
//	ftrun -n 2 rank -lat 8:2000:200,1024:2000:200 -atomic 2000:200 -lock 1000:100 -rate 8:64:1000:100
//
// Rank 1 is the passive target: it allocates the window memory and waits in a
// barrier. Rank 0, the origin, measures in the window's implicit lock-all epoch
// (lock_lat uses explicit exclusive locks afterwards) and prints one line per
// result:
//
//	RESULT <bench> <size> <value> <unit>
//
// The flags are those of bench/rma/mpi/rma_bench.c, the Open MPI side, so the
// driver hands both programs the same plan:
//
//	-lat SIZE:ITERS:WARMUP[,...]       put_lat and get_lat (Put or Get + Flush) per size
//	-atomic ITERS:WARMUP               cas_lat and fadd_lat (8-byte int64, + Flush)
//	-lock ITERS:WARMUP                 lock_lat (Lock exclusive + Unlock, no ops)
//	-rate SIZE:WINDOW:BATCHES:WARMUP   put_rate (WINDOW Puts, then one Flush, per batch)
//	-pingpong ITERS:WARMUP             put_pingpong: both ranks take part; each Puts an
//	                                   8-byte counter into the other's window and polls
//	                                   its own for the reply; half the round trip, the
//	                                   measure of perftest's ib_write_lat (for one-sided
//	                                   transports, shm and verbs: over TCP the poller
//	                                   starves Go's network poller)
//
// Latencies are the mean over the timed iterations in microseconds; the rate is
// operations per second.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
)

const (
	origin ftrma.Rank = 0
	target ftrma.Rank = 1
)

// step is one size of a latency benchmark.
type step struct {
	size, iters, warmup int
}

// plan is what to measure, as given on the command line.
type plan struct {
	lat                                           []step
	atomic, lock, pingpong                        *step // size unused
	rateSize, rateWindow, rateBatches, rateWarmup int
	rate                                          bool
}

func parseInts(s string, n int) ([]int, error) {
	f := strings.Split(s, ":")
	if len(f) != n {
		return nil, fmt.Errorf("%q: want %d numbers separated by ':'", s, n)
	}
	out := make([]int, n)
	for i, x := range f {
		v, err := strconv.Atoi(x)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q: bad number %q", s, x)
		}
		out[i] = v
	}
	return out, nil
}

func parsePlan(args []string) (plan, error) {
	var p plan
	fs := flag.NewFlagSet("rank", flag.ContinueOnError)
	lat := fs.String("lat", "", "put_lat/get_lat steps SIZE:ITERS:WARMUP[,...]")
	atomic := fs.String("atomic", "", "cas_lat/fadd_lat ITERS:WARMUP")
	lock := fs.String("lock", "", "lock_lat ITERS:WARMUP")
	rate := fs.String("rate", "", "put_rate SIZE:WINDOW:BATCHES:WARMUP")
	pingpong := fs.String("pingpong", "", "put_pingpong ITERS:WARMUP")
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	if fs.NArg() != 0 {
		return p, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *lat != "" {
		for _, e := range strings.Split(*lat, ",") {
			v, err := parseInts(e, 3)
			if err != nil {
				return p, fmt.Errorf("-lat: %w", err)
			}
			if v[0] == 0 || v[1] == 0 {
				return p, fmt.Errorf("-lat %q: size and iterations must be positive", e)
			}
			p.lat = append(p.lat, step{size: v[0], iters: v[1], warmup: v[2]})
		}
	}
	for _, x := range []struct {
		name string
		val  string
		dst  **step
	}{{"atomic", *atomic, &p.atomic}, {"lock", *lock, &p.lock}, {"pingpong", *pingpong, &p.pingpong}} {
		if x.val == "" {
			continue
		}
		v, err := parseInts(x.val, 2)
		if err != nil {
			return p, fmt.Errorf("-%s: %w", x.name, err)
		}
		if v[0] == 0 {
			return p, fmt.Errorf("-%s: iterations must be positive", x.name)
		}
		*x.dst = &step{size: 8, iters: v[0], warmup: v[1]}
	}
	if *rate != "" {
		v, err := parseInts(*rate, 4)
		if err != nil {
			return p, fmt.Errorf("-rate: %w", err)
		}
		if v[0] == 0 || v[1] == 0 || v[2] == 0 {
			return p, errors.New("-rate: size, window and batches must be positive")
		}
		p.rate = true
		p.rateSize, p.rateWindow, p.rateBatches, p.rateWarmup = v[0], v[1], v[2], v[3]
	}
	return p, nil
}

// windowBytes is how much memory the target exposes for p.
func (p plan) windowBytes() int {
	n := 8
	for _, s := range p.lat {
		n = max(n, s.size)
	}
	if p.rate {
		n = max(n, p.rateSize*p.rateWindow)
	}
	return n
}

func report(bench string, size int, value float64, unit string) {
	if unit == "us" {
		fmt.Printf("RESULT %s %d %.3f %s\n", bench, size, value, unit)
	} else {
		fmt.Printf("RESULT %s %d %.1f %s\n", bench, size, value, unit)
	}
}

func micros(d time.Duration, n int) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(n)
}

func main() {
	p, err := parsePlan(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), p); err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, p plan) error {
	c, err := startup.Init(ctx)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if c.Size() != 2 {
		return fmt.Errorf("needs exactly 2 ranks, have %d", c.Size())
	}
	me := c.Rank()

	// Only the target's memory is used; the origin exposes a token 8 bytes
	// (the ping-pong's reply word).
	size := 8
	if me == target {
		size = p.windowBytes()
	}
	w, err := window.Allocate(ctx, c, size)
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	clear(w.Bytes())
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}

	// Phase 1: the window's implicit lock-all epoch.
	if me == origin {
		if err := epochBenches(ctx, w, p); err != nil {
			return err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}

	// Phase 2: explicit exclusive locks.
	if me == origin && p.lock != nil {
		if err := benchLock(ctx, w, *p.lock); err != nil {
			return err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}

	// Phase 3: both ranks.
	if p.pingpong != nil {
		if err := benchPingPong(ctx, c, w, *p.pingpong); err != nil {
			return err
		}
	}

	if err := w.Free(ctx); err != nil {
		return fmt.Errorf("free: %w", err)
	}
	if err := c.Finalize(ctx); err != nil {
		return fmt.Errorf("finalize: %w", err)
	}
	return nil
}

func epochBenches(ctx context.Context, w *window.Window, p plan) error {
	bufSize := p.windowBytes()
	buf := bytes.Repeat([]byte{'a'}, bufSize)
	if err := checkPutGet(ctx, w); err != nil {
		return err
	}
	for _, s := range p.lat {
		var t0 time.Time
		for i := range s.warmup + s.iters {
			if i == s.warmup {
				t0 = time.Now()
			}
			if err := w.Put(target, 0, buf[:s.size]); err != nil {
				return fmt.Errorf("put: %w", err)
			}
			if err := w.Flush(ctx, target); err != nil {
				return fmt.Errorf("flush after put: %w", err)
			}
		}
		report("put_lat", s.size, micros(time.Since(t0), s.iters), "us")
	}
	for _, s := range p.lat {
		var t0 time.Time
		for i := range s.warmup + s.iters {
			if i == s.warmup {
				t0 = time.Now()
			}
			if err := w.Get(target, 0, buf[:s.size]); err != nil {
				return fmt.Errorf("get: %w", err)
			}
			if err := w.Flush(ctx, target); err != nil {
				return fmt.Errorf("flush after get: %w", err)
			}
		}
		report("get_lat", s.size, micros(time.Since(t0), s.iters), "us")
	}
	if p.atomic != nil {
		if err := benchAtomics(ctx, w, *p.atomic); err != nil {
			return err
		}
	}
	if p.rate {
		if err := benchRate(ctx, w, p, buf); err != nil {
			return err
		}
	}
	return nil
}

// checkPutGet makes sure that data really moves before anything is timed.
func checkPutGet(ctx context.Context, w *window.Window) error {
	want := []byte("ftrma-ok")
	got := make([]byte, len(want))
	if err := w.Put(target, 0, want); err != nil {
		return fmt.Errorf("check put: %w", err)
	}
	if err := w.Flush(ctx, target); err != nil {
		return fmt.Errorf("check flush: %w", err)
	}
	if err := w.Get(target, 0, got); err != nil {
		return fmt.Errorf("check get: %w", err)
	}
	if err := w.Flush(ctx, target); err != nil {
		return fmt.Errorf("check flush: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("check: put %q, got back %q", want, got)
	}
	return nil
}

func benchAtomics(ctx context.Context, w *window.Window, s step) error {
	// Read the word (earlier puts wrote it); each CAS then expects the value
	// the previous one stored, so every CAS succeeds and changes memory.
	var start, res int64
	if err := w.FetchAndOp(target, 0, 0, &start, window.Sum); err != nil {
		return fmt.Errorf("fetch-and-op: %w", err)
	}
	if err := w.Flush(ctx, target); err != nil {
		return fmt.Errorf("flush after fetch-and-op: %w", err)
	}
	var t0 time.Time
	n := int64(s.warmup + s.iters)
	for i := range n {
		if i == int64(s.warmup) {
			t0 = time.Now()
		}
		if err := w.CompareAndSwap(target, 0, start+i, start+i+1, &res); err != nil {
			return fmt.Errorf("compare-and-swap: %w", err)
		}
		if err := w.Flush(ctx, target); err != nil {
			return fmt.Errorf("flush after compare-and-swap: %w", err)
		}
	}
	d := time.Since(t0)
	if res != start+n-1 {
		return fmt.Errorf("check: last compare-and-swap found %d, want %d", res, start+n-1)
	}
	report("cas_lat", 8, micros(d, s.iters), "us")

	start += n
	for i := range n {
		if i == int64(s.warmup) {
			t0 = time.Now()
		}
		if err := w.FetchAndOp(target, 0, 1, &res, window.Sum); err != nil {
			return fmt.Errorf("fetch-and-op: %w", err)
		}
		if err := w.Flush(ctx, target); err != nil {
			return fmt.Errorf("flush after fetch-and-op: %w", err)
		}
	}
	d = time.Since(t0)
	if res != start+n-1 {
		return fmt.Errorf("check: last fetch-and-add found %d, want %d", res, start+n-1)
	}
	report("fadd_lat", 8, micros(d, s.iters), "us")
	return nil
}

func benchRate(ctx context.Context, w *window.Window, p plan, buf []byte) error {
	var t0 time.Time
	for b := range p.rateWarmup + p.rateBatches {
		if b == p.rateWarmup {
			t0 = time.Now()
		}
		for j := range p.rateWindow {
			off := j * p.rateSize
			if err := w.Put(target, uint64(off), buf[off:off+p.rateSize]); err != nil {
				return fmt.Errorf("put: %w", err)
			}
		}
		if err := w.Flush(ctx, target); err != nil {
			return fmt.Errorf("flush after puts: %w", err)
		}
	}
	d := time.Since(t0)
	report("put_rate", p.rateSize, float64(p.rateBatches*p.rateWindow)/d.Seconds(), "ops/s")
	return nil
}

func benchLock(ctx context.Context, w *window.Window, s step) error {
	var t0 time.Time
	for i := range s.warmup + s.iters {
		if i == s.warmup {
			t0 = time.Now()
		}
		if err := w.Lock(ctx, target, window.Exclusive); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if err := w.Unlock(ctx, target); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
	}
	report("lock_lat", 8, micros(time.Since(t0), s.iters), "us")
	return nil
}

// benchPingPong bounces a counter between the ranks: each Puts i into the
// other's word 0 and polls its own word 0 until it reads the other's i.
func benchPingPong(ctx context.Context, c *comm.Comm, w *window.Window, s step) error {
	me, other := c.Rank(), 1-c.Rank()
	word := (*uint64)(unsafe.Pointer(&w.Bytes()[0]))
	atomic.StoreUint64(word, 0)
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	var msg [8]byte
	put := func(v uint64) error {
		binary.LittleEndian.PutUint64(msg[:], v)
		if err := w.Put(other, 0, msg[:]); err != nil {
			return fmt.Errorf("put: %w", err)
		}
		w.Push(other)
		return nil
	}
	await := func(v uint64) error {
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; atomic.LoadUint64(word) != v; i++ {
			runtime.Gosched() // a transport whose progress goroutine writes the word needs the CPU
			if i&1023 == 1023 && time.Now().After(deadline) {
				return fmt.Errorf("ping-pong: no %d from rank %d after 10 s (word %d)", v, other, atomic.LoadUint64(word))
			}
		}
		return nil
	}
	var t0 time.Time
	for i := uint64(1); i <= uint64(s.warmup+s.iters); i++ {
		if i == uint64(s.warmup)+1 {
			t0 = time.Now()
		}
		if me == origin {
			if err := put(i); err != nil {
				return err
			}
			if err := await(i); err != nil {
				return err
			}
		} else {
			if err := await(i); err != nil {
				return err
			}
			if err := put(i); err != nil {
				return err
			}
		}
		if i%64 == 0 {
			if err := w.Flush(ctx, other); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
		}
	}
	d := time.Since(t0)
	if err := w.Flush(ctx, other); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if me == origin {
		report("put_pingpong", 8, micros(d, 2*s.iters), "us")
	}
	return c.Barrier(ctx)
}
