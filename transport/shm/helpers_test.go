//go:build linux

package shm

import (
	"context"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// The receiver and log of the tests (shared with the other transports').
type (
	recorder = transporttest.Recorder
	logSink  = transporttest.LogSink
)

var newRecorder = transporttest.NewRecorder

type clusterOpts struct {
	cfg          func(*Config) // adjusts every rank's Config
	noReceiver   bool          // do not install the recorders
	dir, job     string        // default t.TempDir() and "t"
	skipConnect  bool
	skipCleanups bool
}

// cluster opens n transports of one job in this process, each with a
// recorder, and connects them.
func cluster(t testing.TB, n int, o clusterOpts) ([]*Transport, []*recorder, *logSink) {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.job == "" {
		o.job = "t"
	}
	logs := &logSink{}
	ts := make([]*Transport, n)
	rs := make([]*recorder, n)
	for r := range ts {
		cfg := Config{Rank: ftrma.Rank(r), Size: n, Job: o.job, Dir: o.dir, Logger: logs.Logger()}
		if o.cfg != nil {
			o.cfg(&cfg)
		}
		tr, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts[r], rs[r] = tr, newRecorder()
		if !o.noReceiver {
			tr.SetReceiver(rs[r])
		}
		if !o.skipCleanups {
			t.Cleanup(func() { tr.Close() })
		}
	}
	if !o.skipConnect {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc := make(chan error, n)
		for _, tr := range ts {
			go func() { errc <- tr.Connect(ctx) }()
		}
		for range ts {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	}
	return ts, rs, logs
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must returns v, or panics (failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
