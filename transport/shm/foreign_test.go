//go:build linux

package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// heapWords returns n bytes of ordinary Go memory, 8-byte aligned.
func heapWords(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// loadBytes reads n bytes at off of mem, which the owner's progress
// goroutine writes with whole-word (under -race atomic) stores, a word at a
// time with atomic loads; off and n are multiples of 8.
func loadBytes(mem []byte, off, n int) []byte {
	out := make([]byte, 0, n)
	for i := off; i < off+n; i += 8 {
		out = binary.NativeEndian.AppendUint64(out, atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[i]))))
	}
	return out
}

func wordAt(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }

// Memory not from Alloc (the caller's own) registers as a target-executed
// region: peers' writes, reads and atomics land in it in place, the owner's
// own stores are what peers read, larger operations go in several requests,
// and the errors are those of mapped regions.
func TestTargetExecutedRegion(t *testing.T) {
	for _, ring := range []int{0, minRingBytes} { // the default, and rings of 4 KiB: answers of 2 KiB
		t.Run(fmt.Sprintf("ring %d", ring), func(t *testing.T) { testTargetExecutedRegion(t, ring) })
	}
}

func testTargetExecutedRegion(t *testing.T, ring int) {
	ts, _, _ := cluster(t, 2, clusterOpts{cfg: func(c *Config) { c.RingBytes = ring }})
	ctx := testCtx(t)
	mem := heapWords(100 << 10)
	key := must(ts[1].Register(mem))
	do := func(seq transport.Seq, err error) error {
		if err != nil {
			return err
		}
		return ts[0].Wait(ctx, 1, seq)
	}
	if err := do(ts[0].Write(1, key, 8, []byte("in place"))); err != nil || string(loadBytes(mem, 8, 8)) != "in place" {
		t.Fatalf("write: %v, memory %q", err, loadBytes(mem, 8, 8))
	}
	atomic.StoreUint64(wordAt(mem, 16), 41) // the owner's own store
	var old uint64
	if err := do(ts[0].FetchAndAdd64(1, key, 16, 1, &old)); err != nil || old != 41 || atomic.LoadUint64(wordAt(mem, 16)) != 42 {
		t.Fatalf("fetch-and-add: %v, old %d, now %d", err, old, atomic.LoadUint64(wordAt(mem, 16)))
	}
	if err := do(ts[0].CompareAndSwap64(1, key, 16, 42, 7, &old)); err != nil || old != 42 || atomic.LoadUint64(wordAt(mem, 16)) != 7 {
		t.Fatalf("compare-and-swap: %v, old %d, now %d", err, old, atomic.LoadUint64(wordAt(mem, 16)))
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (3*foreignChunk+96)/16)
	if err := do(ts[0].Write(1, key, 1000, big)); err != nil || !bytes.Equal(loadBytes(mem, 1000, len(big)), big) {
		t.Fatalf("write of %d bytes (several requests): %v", len(big), err)
	}
	back := make([]byte, len(big))
	if err := do(ts[0].Read(1, key, 1000, back)); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("read of %d bytes: %v", len(big), err)
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"out of bounds", do(ts[0].Write(1, key, uint64(len(mem)-4), make([]byte, 8))), ftrma.ErrOutOfBounds},
		{"misaligned", do(ts[0].FetchAndAdd64(1, key, 4, 1, nil)), ftrma.ErrMisaligned},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	// The owner reaches its own region too.
	if err := ts[1].Wait(ctx, 1, must(ts[1].FetchAndAdd64(1, key, 16, 1, &old))); err != nil || old != 7 {
		t.Fatalf("the owner's own fetch-and-add: %v, old %d", err, old)
	}
	if err := ts[1].Deregister(key); err != nil {
		t.Fatal(err)
	}
	if err := do(ts[0].Write(1, key, 0, []byte{1})); !errors.Is(err, ftrma.ErrUnknownRegion) {
		t.Fatalf("write after deregister: %v, want ErrUnknownRegion", err)
	}
}

// Once the owner fences an origin, nothing the origin sends lands in a
// target-executed region after Fence returns: a request the owner is
// executing when Fence is called (past its fence check) holds Fence until it
// is done, and every later one is dropped.
func TestTargetExecutedFence(t *testing.T) {
	ts, _, _ := cluster(t, 2, clusterOpts{})
	ctx := testCtx(t)
	mem := heapWords(64)
	key := must(ts[1].Register(mem))
	entered, release := make(chan struct{}), make(chan struct{})
	hook := func() {
		testHookServe.Store(nil) // the first request only
		close(entered)
		<-release
	}
	testHookServe.Store(&hook)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failure below must not leave the owner's progress goroutine held
	defer testHookServe.Store(nil)
	done := make(chan error, 1)
	go func() {
		seq, err := ts[0].Write(1, key, 0, binary.NativeEndian.AppendUint64(nil, 9))
		if err == nil {
			err = ts[0].Wait(ctx, 1, seq)
		}
		done <- err
	}()
	<-entered // the owner checked the flag and executes the write
	fenced := make(chan error, 1)
	go func() { fenced <- ts[1].Fence(0) }()
	select {
	case err := <-fenced:
		t.Fatalf("Fence returned (%v) while a request of the fenced rank was still executing", err)
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	if err := <-fenced; err != nil {
		t.Fatal(err)
	}
	if v := atomic.LoadUint64(wordAt(mem, 0)); v != 9 {
		t.Fatalf("the write under way when Fence was called did not land before it returned: %d", v)
	}
	// Its origin, fenced, hears no answer: it fails as fenced, or succeeds
	// if the answer went out first.
	if err := <-done; err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		t.Fatalf("the write under way: %v", err)
	}
	for i := range 20 {
		ts[0].Write(1, key, 0, binary.NativeEndian.AppendUint64(nil, uint64(10+i)))
	}
	time.Sleep(20 * time.Millisecond) // what the owner's progress goroutine still had would land by now
	if v := atomic.LoadUint64(wordAt(mem, 0)); v != 9 {
		t.Fatalf("a write of the fenced rank landed after Fence returned: %d", v)
	}
}

// An operation waiting for the owner's answer fails when the owner is
// reported down, and when this rank closes: it never waits for ever.
func TestTargetExecutedOwnerLost(t *testing.T) {
	ts, _, _ := cluster(t, 3, clusterOpts{})
	ctx := testCtx(t)
	mem := heapWords(64)
	key := must(ts[1].Register(mem))
	hold := func(origin int) func() {
		serve := &ts[1].peers[origin].foreign.serveMu
		serve.Lock()
		return serve.Unlock
	}
	post := func(origin int) chan error {
		done := make(chan error, 1)
		go func() {
			seq, err := ts[origin].Write(1, key, 0, []byte{1})
			if err == nil {
				err = ts[origin].Wait(ctx, 1, seq)
			}
			done <- err
		}()
		return done
	}
	release := hold(0)
	defer release()
	done := post(0)
	waitAsked(t, ts[0].peers[1])
	ts[0].PeerDown(1, nil)
	select {
	case err := <-done:
		if !errors.Is(err, ftrma.ErrProcFailed) {
			t.Fatalf("after the owner was reported down: %v, want ErrProcFailed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an operation waiting for a lost owner never ended")
	}
	release2 := hold(2)
	defer release2()
	done = post(2)
	waitAsked(t, ts[2].peers[1])
	ts[2].Close()
	select {
	case err := <-done:
		if !errors.Is(err, ftrma.ErrClosed) {
			t.Fatalf("after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an operation waiting through Close never ended")
	}
}

// waitAsked waits until an operation of this rank waits for p's answer.
func waitAsked(t *testing.T, p *peer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.foreign.mu.Lock()
		n := len(p.foreign.waiting)
		p.foreign.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no operation waits for an answer")
		}
		time.Sleep(time.Millisecond)
	}
}
