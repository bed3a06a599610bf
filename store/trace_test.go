package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The round trips a traced call reports are the ones the protocol makes
// today, counted on memnet and shared memory: a put to a settled key
// without a lease takes the locks (one round trip to the three replicas)
// and publishes (one more); with the lease the first put left, it only
// publishes; a get of a settled key reads the primary alone, in one round
// trip when this rank knows where the record is, in two more (the probe of
// the slot's chain and the key block's check) when it has never looked.
// A delete takes the locks, writes the tombstones, raises the version
// floor at each replica's rank one after another, and releases the locks.
// A put with one copy marks its version done in its publish batch, and has
// no publish.done phase; with three (here) the phase only posts the done
// word. A call without a trace records nothing; nor do calls other than
// Put, Get and Delete. (When the protocol gets faster, these numbers go down:
// update them.)
func TestTraceCountsRoundTrips(t *testing.T) { bothWorlds(t, testTraceCountsRoundTrips) }

func testTraceCountsRoundTrips(t *testing.T, newWorld worldFunc) {
	ctx := testCtx(t, time.Minute)
	_, st := openAllOn(t, newWorld, 4, smallOptions(3))
	key, value := []byte("traced"), []byte("a value of some bytes")
	var tr Trace
	tctx := WithTrace(ctx, &tr)
	type want struct{ rt, flushes int }
	check := func(what, op string, w want, phases map[string]want) {
		t.Helper()
		if tr.Op != op || tr.on {
			t.Errorf("%s: trace of %q, still on %v; want %q, ended", what, tr.Op, tr.on, op)
		}
		if got := tr.Total(); got.RoundTrips != w.rt || got.Flushes != w.flushes || got.Waited > got.Flushes || got.Sending > got.Time {
			t.Errorf("%s: %d round trips, %d flushes (%d waited); want %d, %d\n%s", what, got.RoundTrips, got.Flushes, got.Waited, w.rt, w.flushes, traceString(&tr))
		}
		for name, w := range phases {
			found := false
			for _, p := range tr.Phases {
				if p.Name == name {
					found = true
					if p.RoundTrips != w.rt || p.Flushes != w.flushes {
						t.Errorf("%s: phase %s: %d round trips, %d flushes; want %d, %d\n%s", what, name, p.RoundTrips, p.Flushes, w.rt, w.flushes, traceString(&tr))
					}
				}
			}
			if !found {
				t.Errorf("%s: no phase %s\n%s", what, name, traceString(&tr))
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	// The first put claims the key's slots; its round trips depend on the
	// heap's chunks, and are not counted here.
	if err := st[0].Put(tctx, key, value); err != nil {
		t.Fatal(err)
	}
	if tr.Op != "put" || tr.Total().RoundTrips < 3 {
		t.Fatalf("first put: want at least 3 round trips (lock, publish, a claim)\n%s", traceString(&tr))
	}
	endLease := func(s *Store) {
		id := s.ident(key)
		if err := s.keys.lock(ctx, id); err != nil {
			t.Fatal(err)
		}
		s.endLease(id)
		s.keys.unlock(id)
	}

	endLease(st[0])
	if err := st[0].Put(tctx, key, value); err != nil {
		t.Fatal(err)
	}
	check("put, settled key", "put", want{2, 6}, map[string]want{"find": {}, "lock": {1, 3}, "publish.wait": {1, 3}})

	for attempt := 0; ; attempt++ {
		if err := st[0].Put(tctx, key, value); err != nil {
			t.Fatal(err)
		}
		if !hasPhase(&tr, "lock") || attempt == 3 {
			break
		}
		// The lease expired (leaseIdle) before this put: the test was
		// held up; the put took a new one.
	}
	check("put under the lease", "put", want{1, 3}, map[string]want{"publish.wait": {1, 3}})
	// The writer marked the version done at the primary with a write it
	// neither sent nor waited for (it goes with the writer's next
	// operation toward the primary, or when the transport sends what it
	// holds: at once here, on tcp within its nudge): complete it, so that
	// other ranks read fast. It is no round trip, and no send, of the put.
	if err := st[0].current().w.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}

	get := func(s *Store) {
		t.Helper()
		if _, err := s.Get(tctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if st[0].current().fast {
		get(st[0])
		check("get by the writer", "get", want{1, 1}, map[string]want{"fast.read": {1, 1}})
		get(st[1])
		check("first get at another rank", "get", want{4, 4}, map[string]want{"fast.find": {2, 2}, "fast.read": {1, 1}, "fast.record": {1, 1}})
		get(st[1])
		check("get at another rank", "get", want{1, 1}, map[string]want{"fast.read": {1, 1}})
	} else {
		// No fast reads (reads may tear words): every replica is read.
		get(st[0])
		check("get by the writer", "get", want{1, 3}, map[string]want{"read": {1, 3}})
		get(st[1])
		check("first get at another rank", "get", want{8, 12}, map[string]want{"find": {6, 6}, "read": {2, 6}})
		get(st[1])
		check("get at another rank", "get", want{1, 3}, map[string]want{"read": {1, 3}})
	}

	endLease(st[0])
	if err := st[0].Delete(tctx, key); err != nil {
		t.Fatal(err)
	}
	check("delete", "delete", want{6, 12}, map[string]want{"lock": {1, 3}, "floors": {3, 3}, "tombstone.wait": {1, 3}, "release": {1, 3}})

	// Off: a call without the trace, and calls that are not traced, leave
	// it as it was.
	before := traceString(&tr)
	if err := st[0].Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	if _, err := st[2].Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if after := traceString(&tr); after != before {
		t.Errorf("calls without the trace changed it:\n%s\nwas\n%s", after, before)
	}
	var quiet Trace
	qctx := WithTrace(ctx, &quiet)
	if _, err := st[1].CompareAndSwap(qctx, key, value, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st[1].GetVersion(qctx, key); err != nil {
		t.Fatal(err)
	}
	if quiet.Op != "" || len(quiet.Phases) != 0 {
		t.Errorf("untraced calls recorded:\n%s", traceString(&quiet))
	}
	// Off costs nothing but the look-up: a nil trace's methods do nothing.
	var none *Trace
	none.begin("put")
	none.phase("lock")
	none.batch()
	none.flushed(none.now())
	none.end()
}

func hasPhase(t *Trace, name string) bool {
	for _, p := range t.Phases {
		if p.Name == name {
			return true
		}
	}
	return false
}

func traceString(t *Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", t.Op)
	for _, p := range t.Phases {
		fmt.Fprintf(&b, " %s %v %d/%d/%d;", p.Name, p.Time.Round(time.Microsecond), p.RoundTrips, p.Flushes, p.Waited)
	}
	return b.String()
}

// A trace rides in the context: a call reads it from there.
func TestWithTrace(t *testing.T) {
	var tr Trace
	if traceOf(context.Background()) != nil || traceOf(WithTrace(context.Background(), &tr)) != &tr {
		t.Fatal("traceOf does not find what WithTrace put")
	}
}
