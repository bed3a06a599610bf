package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

// kv is a peer store as the workload sees it. w is the writer (0..Writers-1)
// making the call, so that a client that needs one connection per writer can
// keep one. Put must return only once the store considers the value written
// with the configured number of copies. Get returns the value stored.
type kv interface {
	Put(ctx context.Context, w int, key string, value []byte) error
	Get(ctx context.Context, w int, key string) ([]byte, error)
}

// workload is the put workload every system runs: Writers concurrent
// writers, each owning KeysPerWriter keys that it overwrites in turn with
// values of Size bytes. A run is Warmup untimed puts per writer, then Puts
// timed puts per writer, then (once every writer is done putting) Gets timed
// gets per writer of its own keys, each checked against the value last put.
type workload struct {
	Writers       int
	KeysPerWriter int
	Size          int
	Warmup        int
	Puts          int
	Gets          int
	OpTimeout     time.Duration // bounds one put or get
}

func (wl workload) validate() error {
	switch {
	case wl.Writers < 1, wl.KeysPerWriter < 1, wl.Size < 1, wl.Puts < 1, wl.Gets < 0, wl.Warmup < 0:
		return fmt.Errorf("bad workload %+v", wl)
	case wl.Warmup+wl.Puts < wl.KeysPerWriter:
		return fmt.Errorf("workload: %d puts per writer do not reach all %d keys", wl.Warmup+wl.Puts, wl.KeysPerWriter)
	case wl.OpTimeout <= 0:
		return errors.New("workload: no operation timeout")
	}
	return nil
}

// keyName is the key of writer w's k-th key.
func keyName(w, k int) string { return fmt.Sprintf("bench-w%d-k%d", w, k) }

// seqLen is the part of a value that changes from put to put: the put's
// sequence number. The rest of a value is fixed per writer.
const seqLen = 8

// writerValue is one writer's value buffer; stamp writes a put's sequence
// number into it.
type writerValue struct {
	buf []byte
}

func newWriterValue(w, size int) *writerValue {
	buf := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(w)+1, uint64(size)))
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	return &writerValue{buf: buf}
}

// stamp sets the value to the one put number seq writes.
func (v *writerValue) stamp(seq uint64) []byte {
	var b [seqLen]byte
	binary.LittleEndian.PutUint64(b[:], seq)
	copy(v.buf, b[:]) // values shorter than seqLen keep a prefix of it
	return v.buf
}

// samples holds one run's latencies in microseconds.
type samples struct {
	put []float64
	get []float64
}

// runWorkload runs wl once against s and returns the latencies of the timed
// puts and gets. Any failed operation or wrong value read back fails the run.
func runWorkload(ctx context.Context, s kv, wl workload) (samples, error) {
	if err := wl.validate(); err != nil {
		return samples{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	putLat := make([][]float64, wl.Writers)
	getLat := make([][]float64, wl.Writers)
	lastSeq := make([][]uint64, wl.Writers)
	values := make([]*writerValue, wl.Writers)
	errs := make([]error, wl.Writers)
	for w := range wl.Writers {
		values[w] = newWriterValue(w, wl.Size)
	}
	keys := make([][]string, wl.Writers)
	for w := range keys {
		for k := range wl.KeysPerWriter {
			keys[w] = append(keys[w], keyName(w, k))
		}
	}

	phase := func(body func(w int) error) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range wl.Writers {
			wg.Go(func() {
				<-start
				if err := body(w); err != nil && errs[w] == nil {
					errs[w] = err
					cancel()
				}
			})
		}
		close(start)
		wg.Wait()
	}

	phase(func(w int) error {
		lat := make([]float64, 0, wl.Puts)
		last := make([]uint64, wl.KeysPerWriter)
		for i := range wl.Warmup + wl.Puts {
			k := i % wl.KeysPerWriter
			seq := uint64(i + 1)
			val := values[w].stamp(seq)
			octx, ocancel := context.WithTimeout(ctx, wl.OpTimeout)
			t0 := time.Now()
			err := s.Put(octx, w, keys[w][k], val)
			d := time.Since(t0)
			ocancel()
			if err != nil {
				return fmt.Errorf("writer %d: put %s (%d bytes): %w", w, keys[w][k], len(val), err)
			}
			last[k] = seq
			if i >= wl.Warmup {
				lat = append(lat, float64(d.Nanoseconds())/1e3)
			}
		}
		putLat[w], lastSeq[w] = lat, last
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return samples{}, err
	}

	phase(func(w int) error {
		lat := make([]float64, 0, wl.Gets)
		want := newWriterValue(w, wl.Size)
		for i := range wl.Gets {
			k := i % wl.KeysPerWriter
			octx, ocancel := context.WithTimeout(ctx, wl.OpTimeout)
			t0 := time.Now()
			got, err := s.Get(octx, w, keys[w][k])
			d := time.Since(t0)
			ocancel()
			if err != nil {
				return fmt.Errorf("writer %d: get %s: %w", w, keys[w][k], err)
			}
			if !bytes.Equal(got, want.stamp(lastSeq[w][k])) {
				return fmt.Errorf("writer %d: get %s returned %d bytes that are not the value last put (%d bytes, put #%d)",
					w, keys[w][k], len(got), wl.Size, lastSeq[w][k])
			}
			lat = append(lat, float64(d.Nanoseconds())/1e3)
		}
		getLat[w] = lat
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return samples{}, err
	}
	var out samples
	for w := range wl.Writers {
		out.put = append(out.put, putLat[w]...)
		out.get = append(out.get, getLat[w]...)
	}
	return out, nil
}

// warmUp keeps every writer putting values of size bytes until d has passed
// (untimed), so that JIT compilers, connection pools and caches are warm
// before the first measured run at a copy count.
func warmUp(ctx context.Context, s kv, writers, size int, d, opTimeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d+opTimeout)
	defer cancel()
	end := time.Now().Add(d)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			v := newWriterValue(w, size)
			for i := 0; time.Now().Before(end); i++ {
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				err := s.Put(octx, w, keyName(w, i%4), v.stamp(uint64(i)))
				ocancel()
				if err != nil {
					errs[w] = fmt.Errorf("warm-up put: %w", err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// The benchmarks every system reports, per (size, copies).
const (
	benchPutP50 = "put_p50"
	benchPutP99 = "put_p99"
	benchGetP50 = "get_p50"
)

var benchOrder = []string{benchPutP50, benchPutP99, benchGetP50}

// summarize turns one run's samples into its results: p50 and p99 of the
// put latencies and p50 of the get latencies (result.Percentile, linear
// interpolation), in microseconds.
func summarize(sm samples, system string, size, copies int) []result.Result {
	mk := func(bench string, v float64) result.Result {
		return result.Result{Bench: bench, Size: size, Copies: copies, System: system, Value: v, Unit: "us"}
	}
	out := []result.Result{
		mk(benchPutP50, result.Percentile(sm.put, 50)),
		mk(benchPutP99, result.Percentile(sm.put, 99)),
	}
	if len(sm.get) > 0 {
		out = append(out, mk(benchGetP50, result.Percentile(sm.get, 50)))
	}
	return out
}
