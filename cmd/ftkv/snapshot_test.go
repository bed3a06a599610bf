package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// serving is a job of in-process ranks running serveOn.
type serving struct {
	o    serveOptions
	outs []lockedBuffer // each rank's output
	done chan []error
}

// lockedBuffer is a rank's output, read by the test while the rank writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServing starts n in-process ranks serving with o and waits until
// rank 0 says the job is ready.
func startServing(t *testing.T, ctx context.Context, n int, o serveOptions) *serving {
	t.Helper()
	w := commtest.New(t, n)
	sv := &serving{o: o, outs: make([]lockedBuffer, n), done: make(chan []error, 1)}
	go func() {
		sv.done <- w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
			return serveOn(ctx, c, o, &sv.outs[c.Rank()], &sv.outs[c.Rank()])
		})
	}()
	for !strings.Contains(sv.outs[0].String(), "ftkv serve: ready") {
		select {
		case errs := <-sv.done:
			t.Fatalf("the job ended before serving: %v", errs)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return sv
}

// ftkv runs a client command against rank r and wants exit code code.
func (sv *serving) ftkv(t *testing.T, r, code int, args ...string) string {
	t.Helper()
	got, stdout, stderr := runFtkv(append(args, "--socket", socketPath(sv.o.socket, r))...)
	if got != code {
		t.Fatalf("ftkv %q at rank %d: exit %d, want %d; stdout %q, stderr %q", args, r, got, code, stdout, stderr)
	}
	return stdout
}

// stop stops the job through rank r and checks that every rank ended well.
func (sv *serving) stop(t *testing.T, r int) {
	t.Helper()
	sv.ftkv(t, r, 0, "stop")
	select {
	case errs := <-sv.done:
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v\n%s", r, err, sv.outs[r].String())
			}
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the ranks did not stop")
	}
}

var snapshotLine = regexp.MustCompile(`^snapshot (\S+): cut (\d+), (\d+) keys\n$`)

// A job of 3 ranks with --snapshot-dir: "ftkv snapshot" through rank 2
// writes a snapshot holding every key acknowledged before; keys put after
// it are in the last snapshot, which stop writes before "ftkv stop"
// returns. A job of 2 ranks started with --restore serves the keys of the
// last snapshot; one of 4 ranks started from a directory whose newest
// snapshot is damaged serves those of the one before, and says why.
func TestServeSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	snaps := filepath.Join(dir, "snaps")
	o := serveOptions{socket: filepath.Join(dir, "kv"), maxValue: 1 << 20, reqTimeout: 10 * time.Second, snapshotDir: snaps}
	o.copies.n = 2
	o.copies.set = true
	sv := startServing(t, ctx, 3, o)
	for i := range 10 {
		sv.ftkv(t, i%3, 0, "put", fmt.Sprintf("key/%d", i), fmt.Sprintf("v%d", i))
	}
	m := snapshotLine.FindStringSubmatch(sv.ftkv(t, 2, 0, "snapshot"))
	if m == nil || m[3] != "10" || filepath.Dir(m[1]) != snaps {
		t.Fatalf("snapshot: %q, want one of 10 keys under %s", m, snaps)
	}
	sv.ftkv(t, 0, 0, "put", "key/0", "changed")
	sv.ftkv(t, 1, 0, "put", "late", "after the first snapshot")
	sv.ftkv(t, 1, 0, "del", "key/9")
	sv.stop(t, 1)
	entries, _ := os.ReadDir(snaps)
	if len(entries) != 2 {
		t.Fatalf("%d snapshots after stop, want the requested one and the last: %v", len(entries), entries)
	}

	o.restore, o.snapshotDir = snaps, ""
	o.validate(nil) // --restore DIR: snapshots there too
	sv = startServing(t, ctx, 2, o)
	if !strings.Contains(sv.outs[0].String(), "restored from "+filepath.Join(snaps, entries[1].Name())) {
		t.Errorf("rank 0 said %q, want the newest snapshot named", sv.outs[0].String())
	}
	want := map[string]string{"key/0": "changed", "late": "after the first snapshot", "key/5": "v5"}
	for k, v := range want {
		if got := sv.ftkv(t, 1, 0, "get", k); got != v {
			t.Errorf("restored %s = %q, want %q", k, got, v)
		}
	}
	sv.ftkv(t, 0, 1, "get", "key/9")
	if got := sv.ftkv(t, 0, 0, "len"); got != "10\n" {
		t.Errorf("restored len %q, want 10", got)
	}
	sv.stop(t, 0)

	// The newest snapshot damaged: the one before it is read.
	entries, _ = os.ReadDir(snaps)
	newest := filepath.Join(snaps, entries[len(entries)-1].Name())
	os.WriteFile(filepath.Join(newest, "rank-0"), []byte("torn"), 0o644)
	sv = startServing(t, ctx, 4, o)
	if out := sv.outs[0].String(); !strings.Contains(out, "skipped "+newest) {
		t.Errorf("rank 0 said %q, want the damaged snapshot named as skipped", out)
	}
	if got := sv.ftkv(t, 3, 0, "get", "key/0"); got != "changed" {
		t.Errorf("key/0 from the snapshot before the damaged one: %q", got)
	}
	sv.stop(t, 2)
}

// With --snapshot-every the job snapshots on its own: snapshots appear
// while no client asks, each of them complete, and with --snapshot-keep 2
// no more than two complete ones stay.
func TestServeSnapshotsPeriodic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	snaps := filepath.Join(dir, "snaps")
	o := serveOptions{socket: filepath.Join(dir, "kv"), maxValue: 1 << 20, reqTimeout: 10 * time.Second,
		snapshotDir: snaps, snapshotEvery: 30 * time.Millisecond, snapshotKeep: 2}
	o.copies.n = 2
	o.copies.set = true
	sv := startServing(t, ctx, 3, o)
	sv.ftkv(t, 0, 0, "put", "k", "v")
	seen := map[string]bool{}
	for len(seen) < 4 {
		entries, _ := os.ReadDir(snaps)
		complete := 0
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(snaps, e.Name(), "MANIFEST")); err == nil {
				seen[e.Name()] = true
				complete++
			}
		}
		if complete > 3 { // the two kept and a new one, until the old one is removed
			t.Fatalf("%d complete snapshots with --snapshot-keep 2: %v", complete, entries)
		}
		if ctx.Err() != nil {
			t.Fatalf("%d snapshots seen in a minute, want 4", len(seen))
		}
		time.Sleep(5 * time.Millisecond)
	}
	sv.stop(t, 0)
	entries, _ := os.ReadDir(snaps)
	if len(entries) != 2 {
		t.Errorf("after stop (the last snapshot, then removal): %v, want two", entries)
	}
}
