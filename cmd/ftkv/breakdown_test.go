package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/store"
)

// Breakdowns sum traces by phase, travel through the samples and print as
// means per call; without -v the samples are what they were.
func TestBreakdown(t *testing.T) {
	var a, b breakdown
	a.add(&store.Trace{Op: "put", Phases: []store.Phase{{Name: "start", Time: time.Microsecond}, {Name: "publish.wait", Time: 9 * time.Microsecond, RoundTrips: 1, Flushes: 3, Waited: 2, Sending: 2 * time.Microsecond}}})
	a.add(&store.Trace{Op: "put", Phases: []store.Phase{{Name: "start", Time: time.Microsecond}, {Name: "lock", Time: 10 * time.Microsecond, RoundTrips: 1, Flushes: 3, Waited: 1}, {Name: "publish.wait", Time: 11 * time.Microsecond, RoundTrips: 1, Flushes: 3, Waited: 3}}})
	b.add(&store.Trace{Op: "get", Phases: []store.Phase{{Name: "fast.read", Time: 4 * time.Microsecond, RoundTrips: 1, Flushes: 1, Waited: 1}}})
	samples := encodeSamples(time.Second, []float64{1, 2}, []float64{3})
	_, p, g, rest, err := decodeSamples(samples)
	if err != nil || len(p) != 2 || len(g) != 1 || len(rest) != 0 {
		t.Fatalf("samples without breakdowns: %v %v %v %q", p, g, err, rest)
	}
	_, _, _, rest, err = decodeSamples(b.append(a.append(samples)))
	if err != nil {
		t.Fatal(err)
	}
	a2, rest, err := decodeBreakdown(rest)
	if err != nil {
		t.Fatal(err)
	}
	b2, rest, err := decodeBreakdown(rest)
	if err != nil || len(rest) != 0 {
		t.Fatal(err, rest)
	}
	if !reflect.DeepEqual(*a2, a) || !reflect.DeepEqual(*b2, b) {
		t.Fatalf("decoded %+v %+v, want %+v %+v", *a2, *b2, a, b)
	}
	if _, _, err := decodeBreakdown(a.append(nil)[:20]); err == nil {
		t.Error("a cut breakdown decodes")
	}
	a.merge(&a) // a's calls twice: the means stay
	if tot := a.total(); a.calls != 4 || tot.RoundTrips != 6 || tot.Time != 64*time.Microsecond {
		t.Errorf("merged: %d calls, total %+v", a.calls, tot)
	}
	var out bytes.Buffer
	a.print(&out, "put")
	for _, want := range []string{
		"put, mean per call over 4 calls",
		"    lock               50.0      5.00     0.00    0.50     1.50    0.50\n",
		"    publish.wait      100.0     10.00     1.00    1.00     3.00    2.50\n",
		"    total             100.0     16.00     1.00    1.50     4.50    3.00\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("print lacks %q:\n%s", want, out.String())
		}
	}
	names, values, _ := b.results("get")
	if !reflect.DeepEqual(names, []string{"get.fast.read", "get.fast.read.rtt", "get.total", "get.total.rtt"}) || values[0] != 4 || values[3] != 1 {
		t.Errorf("results: %v %v", names, values)
	}
}
