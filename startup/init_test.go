package startup_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Init outside ftrun (no job environment) gives a singleton world: one
// rank, whose collectives, Agree and Shrink return, and a window on which
// put, get and compare-and-swap reach this rank's own memory.
func TestInitSingleton(t *testing.T) {
	t.Setenv(jobwire.EnvRank, "") // restored after the test
	os.Unsetenv(jobwire.EnvRank)
	ctx := testCtx(t, 30*time.Second)
	c, err := startup.Init(ctx)
	if err != nil {
		t.Fatalf("Init outside ftrun: %v", err)
	}
	if c.Size() != 1 || c.Rank() != 0 {
		t.Fatalf("singleton: rank %d of %d, want 0 of 1", c.Rank(), c.Size())
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	got, err := c.Allgather(ctx, []byte("me"))
	if err != nil || len(got) != 1 || string(got[0]) != "me" {
		t.Fatalf("allgather = %q, %v", got, err)
	}
	if v, err := c.Agree(ctx, 6); err != nil || v != 6 {
		t.Fatalf("agree = %d, %v; want 6", v, err)
	}
	s, err := c.Shrink(ctx)
	if err != nil || s.Size() != 1 {
		t.Fatalf("shrink: %v", err)
	}
	w, err := window.Allocate(ctx, s, 64)
	if err != nil {
		t.Fatalf("window: %v", err)
	}
	if err := w.PutSync(ctx, 0, 8, []byte("singleton")); err != nil {
		t.Fatalf("put: %v", err)
	}
	buf := make([]byte, 9)
	if err := w.Get(0, 8, buf); err != nil {
		t.Fatalf("get: %v", err)
	}
	if err := w.Flush(ctx, 0); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if !bytes.Equal(buf, []byte("singleton")) {
		t.Fatalf("get = %q, want %q", buf, "singleton")
	}
	var old int64
	if err := w.CompareAndSwap(0, 0, 0, 42, &old); err != nil {
		t.Fatalf("cas: %v", err)
	}
	if err := w.Flush(ctx, 0); err != nil || old != 0 {
		t.Fatalf("cas: old %d, %v", old, err)
	}
	if err := w.Free(ctx); err != nil {
		t.Fatalf("free: %v", err)
	}
	s.Close()
	if err := c.Finalize(ctx); err != nil {
		t.Fatalf("finalize: %v", err)
	}
}

// A job environment that is there but broken is still an error: only its
// absence makes a singleton.
func TestInitBrokenJobEnv(t *testing.T) {
	t.Setenv(jobwire.EnvRank, "0")
	t.Setenv(jobwire.EnvSize, "")
	os.Unsetenv(jobwire.EnvSize)
	ctx := testCtx(t, 10*time.Second)
	if c, err := startup.Init(ctx); err == nil {
		c.Close()
		t.Fatal("Init with FTRMA_RANK set but no FTRMA_SIZE succeeded")
	}
}

func TestInitOutsideFtrun(t *testing.T) {
	t.Setenv("FTRMA_RANK", "")
	ctx := testCtx(t, 10*time.Second)
	if _, err := startup.Init(ctx); err == nil {
		t.Fatal("Init outside ftrun succeeded")
	}
}
