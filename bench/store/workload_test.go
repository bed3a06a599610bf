package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

// memKV is an in-memory kv; its knobs break it in the ways a real store
// could.
type memKV struct {
	mu    sync.Mutex
	m     map[string][]byte
	puts  int
	gets  int
	delay time.Duration

	keepFirst bool // ignore overwrites: reads return a stale value
	failPutAt int  // the n-th put (1-based) fails; 0: never
	flipByte  bool // return values with their last byte changed
}

func newMemKV() *memKV { return &memKV{m: make(map[string][]byte)} }

func (s *memKV) Put(ctx context.Context, w int, key string, value []byte) error {
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if s.failPutAt != 0 && s.puts == s.failPutAt {
		return errors.New("injected put failure")
	}
	if _, ok := s.m[key]; ok && s.keepFirst {
		return nil
	}
	s.m[key] = bytes.Clone(value) // the caller reuses its buffer
	return nil
}

func (s *memKV) Get(ctx context.Context, w int, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	v, ok := s.m[key]
	if !ok {
		return nil, errors.New("not found")
	}
	v = bytes.Clone(v)
	if s.flipByte {
		v[len(v)-1] ^= 1
	}
	return v, nil
}

func testWorkload() workload {
	return workload{Writers: 4, KeysPerWriter: 5, Size: 100, Warmup: 3, Puts: 20, Gets: 7, OpTimeout: time.Second}
}

func TestRunWorkload(t *testing.T) {
	s := newMemKV()
	s.delay = 20 * time.Microsecond
	wl := testWorkload()
	sm, err := runWorkload(context.Background(), s, wl)
	if err != nil {
		t.Fatal(err)
	}
	if len(sm.put) != wl.Writers*wl.Puts || len(sm.get) != wl.Writers*wl.Gets {
		t.Errorf("%d put and %d get samples, want %d and %d", len(sm.put), len(sm.get), wl.Writers*wl.Puts, wl.Writers*wl.Gets)
	}
	if s.puts != wl.Writers*(wl.Warmup+wl.Puts) || s.gets != wl.Writers*wl.Gets {
		t.Errorf("store saw %d puts, %d gets", s.puts, s.gets)
	}
	if len(s.m) != wl.Writers*wl.KeysPerWriter {
		t.Errorf("%d keys written, want %d (each writer its own)", len(s.m), wl.Writers*wl.KeysPerWriter)
	}
	for k, v := range s.m {
		if len(v) != wl.Size {
			t.Errorf("%s holds %d bytes, want %d", k, len(v), wl.Size)
		}
	}
	for _, x := range sm.put {
		if !(x >= 20) { // every put slept 20us
			t.Fatalf("put latency %v us, below the store's own delay", x)
		}
	}
}

func TestRunWorkloadCatchesBrokenStores(t *testing.T) {
	for name, s := range map[string]*memKV{
		"stale reads":  {m: map[string][]byte{}, keepFirst: true},
		"corrupt read": {m: map[string][]byte{}, flipByte: true},
		"failed put":   {m: map[string][]byte{}, failPutAt: 17},
	} {
		if _, err := runWorkload(context.Background(), s, testWorkload()); err == nil {
			t.Errorf("%s: the run succeeded", name)
		}
	}
}

func TestRunWorkloadValidates(t *testing.T) {
	for _, wl := range []workload{
		{Writers: 0, KeysPerWriter: 1, Size: 1, Puts: 1, OpTimeout: time.Second},
		{Writers: 1, KeysPerWriter: 10, Size: 1, Puts: 5, OpTimeout: time.Second}, // keys never written
		{Writers: 1, KeysPerWriter: 1, Size: 1, Puts: 1},                          // no timeout
	} {
		if _, err := runWorkload(context.Background(), newMemKV(), wl); err == nil {
			t.Errorf("workload %+v accepted", wl)
		}
	}
}

func TestValuesDiffer(t *testing.T) {
	a := bytes.Clone(newWriterValue(0, 64).stamp(1))
	b := bytes.Clone(newWriterValue(0, 64).stamp(2))
	c := bytes.Clone(newWriterValue(1, 64).stamp(1))
	if bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Error("values of different puts or writers are equal")
	}
	if !bytes.Equal(a, newWriterValue(0, 64).stamp(1)) {
		t.Error("the same put gives different values")
	}
	if v := newWriterValue(0, 3).stamp(7); len(v) != 3 {
		t.Errorf("3-byte value has %d bytes", len(v))
	}
}

func TestWarmUp(t *testing.T) {
	s := newMemKV()
	if err := warmUp(context.Background(), s, 3, 64, 30*time.Millisecond, time.Second); err != nil {
		t.Fatal(err)
	}
	if s.puts < 3 {
		t.Errorf("warm-up made %d puts", s.puts)
	}
	s = newMemKV()
	s.failPutAt = 1
	if err := warmUp(context.Background(), s, 2, 64, 30*time.Millisecond, time.Second); err == nil {
		t.Error("a failed warm-up put went unreported")
	}
}

func TestSummarize(t *testing.T) {
	var sm samples
	for i := 1; i <= 100; i++ {
		sm.put = append(sm.put, float64(i))
	}
	sm.get = []float64{5, 1, 3}
	rs := summarize(sm, sysRedis, 4096, 3)
	want := map[string]float64{
		benchPutP50: result.Percentile(sm.put, 50), // 50.5
		benchPutP99: result.Percentile(sm.put, 99), // 99.01
		benchGetP50: 3,
	}
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3", len(rs))
	}
	for _, r := range rs {
		if math.Abs(r.Value-want[r.Bench]) > 1e-9 {
			t.Errorf("%s = %v, want %v", r.Bench, r.Value, want[r.Bench])
		}
		if r.System != sysRedis || r.Size != 4096 || r.Copies != 3 || r.Unit != "us" {
			t.Errorf("result %+v", r)
		}
	}
	if math.Abs(want[benchPutP50]-50.5) > 1e-9 || math.Abs(want[benchPutP99]-99.01) > 1e-9 {
		t.Errorf("percentiles %v %v", want[benchPutP50], want[benchPutP99])
	}
	if rs := summarize(samples{put: []float64{1}}, sysEtcd, 64, 3); len(rs) != 2 {
		t.Errorf("no gets: %d results, want put_p50 and put_p99 only", len(rs))
	}
}

// TestPeerSystemRun runs a whole measurement through peerSystem with an
// in-memory peer: prepare, warm, run, results shaped for the table.
func TestPeerSystemRun(t *testing.T) {
	p := newPlan(true)
	p.stageWarm = 10 * time.Millisecond
	p.puts, p.warmup, p.gets = 20, 2, 5
	fp := &fakePeer{kv: newMemKV()}
	s := &peerSystem{name: sysRedis, p: fp}
	if _, err := s.Run(context.Background(), 2, 64, p); err == nil {
		t.Error("Run before Prepare succeeded")
	}
	if err := s.Prepare(context.Background(), 2, p); err != nil {
		t.Fatal(err)
	}
	if fp.writers != p.writers || fp.copies != 2 {
		t.Errorf("prepared with %d writers, %d copies", fp.writers, fp.copies)
	}
	if err := s.Warm(context.Background(), 2, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), 3, 64, p); err == nil {
		t.Error("Run at another copy count succeeded")
	}
	rs, err := s.Run(context.Background(), 2, 4096, p)
	if err != nil {
		t.Fatal(err)
	}
	var benches []string
	for _, r := range rs {
		benches = append(benches, r.Bench)
		if r.Copies != 2 || r.Size != 4096 || r.System != sysRedis {
			t.Errorf("result %+v", r)
		}
	}
	if !slices.Equal(benches, benchOrder) {
		t.Errorf("benches %q, want %q", benches, benchOrder)
	}
	s.Done(2)
	if !fp.doneCalled {
		t.Error("Done did not reach the peer")
	}
}

type fakePeer struct {
	kv              kv
	writers, copies int
	doneCalled      bool
}

func (f *fakePeer) supports(copies int) string { return "" }
func (f *fakePeer) prepare(ctx context.Context, copies, writers int) (kv, error) {
	f.copies, f.writers = copies, writers
	return f.kv, nil
}
func (f *fakePeer) done(copies int) { f.doneCalled = true }
func (f *fakePeer) notes() []string { return nil }
func (f *fakePeer) close()          {}
