package result

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1, 10, 1}, 10},
		{[]float64{-1, 7}, 3},
		{[]float64{100, 1, 2, 3, 4, 5, 6}, 4}, // one outlier moves it little
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := Median(in); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !reflect.DeepEqual(in, tt.in) {
			t.Errorf("Median(%v) reordered its input to %v", tt.in, in)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestPercentile(t *testing.T) {
	five := []float64{50, 10, 40, 20, 30}
	tests := []struct {
		in   []float64
		p    float64
		want float64
	}{
		{five, 0, 10},
		{five, 100, 50},
		{five, 50, 30},
		{five, 25, 20},
		{five, 99, 49.6}, // 40 + 0.96*(50-40)
		{five, 90, 46},
		{[]float64{7}, 99, 7},
		{[]float64{1, 2}, 50, 1.5},
		{[]float64{1, 3, 2, 4}, 75, 3.25},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := Percentile(in, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.in, tt.p, got, tt.want)
		}
		if !reflect.DeepEqual(in, tt.in) {
			t.Errorf("Percentile(%v, %v) reordered its input to %v", tt.in, tt.p, in)
		}
	}
	// p50 agrees with Median for odd and even counts.
	for _, xs := range [][]float64{five, {4, 1, 3, 2}, {9, 9, 1}} {
		if a, b := Percentile(xs, 50), Median(xs); a != b {
			t.Errorf("Percentile(%v, 50) = %v, Median = %v", xs, a, b)
		}
	}
	for _, p := range []float64{-1, 101, math.NaN()} {
		if got := Percentile(five, p); !math.IsNaN(got) {
			t.Errorf("Percentile(five, %v) = %v, want NaN", p, got)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil, 50) = %v, want NaN", got)
	}
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		line string
		want Result
		ok   bool
		err  bool
	}{
		{line: "RESULT put_lat 8 3.91 us", want: Result{Bench: "put_lat", Size: 8, Value: 3.91, Unit: "us"}, ok: true},
		{line: "[rank 0] RESULT put_rate 8 1.5e6 ops/s", want: Result{Bench: "put_rate", Size: 8, Value: 1.5e6, Unit: "ops/s"}, ok: true},
		{line: "RESULT store_put 64 38 us copies=3", want: Result{Bench: "store_put", Size: 64, Copies: 3, Value: 38, Unit: "us"}, ok: true},
		{line: "warming up", ok: false},
		{line: "", ok: false},
		{line: "RESULTS are in", ok: false},
		{line: "RESULT put_lat 8 us", err: true},
		{line: "RESULT put_lat x 3.9 us", err: true},
		{line: "RESULT put_lat -8 3.9 us", err: true},
		{line: "RESULT put_lat 8 NaN us", err: true},
		{line: "RESULT put_lat 8 3.9 us extra=1", err: true},
		{line: "RESULT put_lat 8 3.9 us copies=0", err: true},
	}
	for _, tt := range tests {
		got, ok, err := ParseLine(tt.line)
		if (err != nil) != tt.err {
			t.Errorf("ParseLine(%q) err = %v, want error %v", tt.line, err, tt.err)
			continue
		}
		if ok != tt.ok {
			t.Errorf("ParseLine(%q) ok = %v, want %v", tt.line, ok, tt.ok)
		}
		if ok && got != tt.want {
			t.Errorf("ParseLine(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
}

func TestFormatLineRoundTrip(t *testing.T) {
	for _, r := range []Result{
		{Bench: "get_lat", Size: 1048576, Value: 362.578, Unit: "us"},
		{Bench: "store_put", Size: 64, Copies: 2, Value: 0.125, Unit: "us"},
	} {
		line := FormatLine(r)
		got, ok, err := ParseLine(line)
		if err != nil || !ok || got != r {
			t.Errorf("ParseLine(FormatLine(%+v)) = %+v, %v, %v (line %q)", r, got, ok, err, line)
		}
	}
}

func TestSetMediansInterleaved(t *testing.T) {
	var s Set
	// Three rounds, systems interleaved as a driver does.
	rounds := [][2]float64{{4, 20}, {12, 60}, {5, 25}}
	for _, rd := range rounds {
		for i, sys := range []string{"a", "b"} {
			if err := s.Add(Result{Bench: "put_lat", Size: 8, System: sys, Value: rd[i], Unit: "us"}); err != nil {
				t.Fatal(err)
			}
			if err := s.Add(Result{Bench: "put_rate", Size: 8, System: sys, Value: 1000 * rd[i], Unit: "ops/s"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := s.Medians()
	want := []Result{
		{Bench: "put_lat", Size: 8, System: "a", Value: 5, Unit: "us"},
		{Bench: "put_rate", Size: 8, System: "a", Value: 5000, Unit: "ops/s"},
		{Bench: "put_lat", Size: 8, System: "b", Value: 25, Unit: "us"},
		{Bench: "put_rate", Size: 8, System: "b", Value: 25000, Unit: "ops/s"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Medians() =\n%+v\nwant\n%+v", got, want)
	}
	if n := len(s.Samples(Key{Bench: "put_lat", Size: 8}, "b")); n != 3 {
		t.Errorf("Samples: %d values, want 3", n)
	}
}

func TestSetRejects(t *testing.T) {
	var s Set
	if err := s.Add(Result{Bench: "put_lat", Size: 8, System: "a", Value: 1, Unit: "us"}); err != nil {
		t.Fatal(err)
	}
	bad := []Result{
		{Bench: "put_lat", Size: 8, System: "a", Value: 1, Unit: "ms"}, // unit changed
		{Bench: "", Size: 8, System: "a", Value: 1, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: "", Value: 1, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: "a", Value: 1, Unit: ""},
		{Bench: "put_lat", Size: 8, System: "a", Value: math.Inf(1), Unit: "us"},
	}
	for _, r := range bad {
		if err := s.Add(r); err == nil {
			t.Errorf("Add(%+v) accepted", r)
		}
	}
	if n := len(s.Medians()); n != 1 {
		t.Errorf("after rejected adds, %d series, want 1", n)
	}
	s.AddFailure("b")
	s.AddFailure("b")
	if s.Failures("b") != 2 || s.Failures("a") != 0 {
		t.Errorf("Failures = %d, %d; want 2, 0", s.Failures("b"), s.Failures("a"))
	}
}

// TestJSONShape pins the field names that other tools read.
func TestJSONShape(t *testing.T) {
	var buf bytes.Buffer
	rs := []Result{
		{Bench: "put_lat", Size: 8, System: "ftrma-tcp", Value: 3.91, Unit: "us"},
		{Bench: "store_put", Size: 64, Copies: 3, System: "redis", Value: 38, Unit: "us"},
	}
	if err := WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatalf("output is not a JSON array of objects: %v\n%s", err, buf.String())
	}
	want := []map[string]any{
		{"bench": "put_lat", "size": 8.0, "system": "ftrma-tcp", "value": 3.91, "unit": "us"},
		{"bench": "store_put", "size": 64.0, "copies": 3.0, "system": "redis", "value": 38.0, "unit": "us"},
	}
	if !reflect.DeepEqual(raw, want) {
		t.Errorf("JSON =\n%v\nwant\n%v", raw, want)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	rs := []Result{
		{Bench: "put_lat", Size: 1048576, System: "openmpi-tcp", Value: 354.702, Unit: "us"},
		{Bench: "put_rate", Size: 8, System: "ftrma-tcp", Value: 1644260.2, Unit: "ops/s"},
		{Bench: "ft_detect", Size: 0, Copies: 2, System: "ftrma-tcp", Value: 0.0015, Unit: "s"},
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := WriteJSONFile(path, rs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rs) {
		t.Errorf("round trip =\n%+v\nwant\n%+v", got, rs)
	}
}

func TestJSONEmptyIsArray(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(buf.String()); got != "[]" {
		t.Errorf("WriteJSON(nil) = %q, want []", got)
	}
}

func TestReadJSONRejects(t *testing.T) {
	for _, in := range []string{
		`{"bench":"put_lat"}`, // not an array
		`null`,
		`[{"bench":"put_lat","size":8,"system":"a","value":1}]`,                       // no unit
		`[{"bench":"put_lat","size":8,"system":"a","value":1,"unit":"us","iters":9}]`, // unknown field
		`[{"bench":"put_lat","size":"8","system":"a","value":1,"unit":"us"}]`,         // wrong type
	} {
		if _, err := ReadJSON(strings.NewReader(in)); err == nil {
			t.Errorf("ReadJSON(%s) accepted", in)
		}
	}
}

func TestWriteJSONRejectsInvalid(t *testing.T) {
	var buf bytes.Buffer
	err := WriteJSON(&buf, []Result{{Bench: "put_lat", Size: 8, System: "a", Value: math.NaN(), Unit: "us"}})
	if err == nil {
		t.Error("WriteJSON accepted NaN")
	}
}

func TestWriteTable(t *testing.T) {
	rs := []Result{
		{Bench: "put_lat", Size: 8, System: "ftrma-tcp", Value: 5, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: "openmpi-tcp", Value: 20, Unit: "us"},
		{Bench: "put_rate", Size: 8, System: "openmpi-tcp", Value: 1644260.2, Unit: "ops/s"},
		{Bench: "get_lat", Size: 1024, System: "ftrma-tcp", Value: 123.456, Unit: "us"},
		{Bench: "get_lat", Size: 1024, System: "other", Value: 1, Unit: "us"},
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rs, []string{"ftrma-tcp", "openmpi-tcp"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	want := [][]string{
		{"bench", "size", "unit", "ftrma-tcp", "openmpi-tcp", "ratio", "ftrma-tcp/openmpi-tcp"},
		{"put_lat", "8", "us", "5.00", "20.00", "0.25"},
		{"put_rate", "8", "ops/s", "-", "1644260", "-"},
		{"get_lat", "1024", "us", "123.5", "-", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
	// Columns line up: every row's value column starts where the header's does.
	col := strings.Index(lines[0], "ftrma-tcp")
	for _, l := range lines[1:] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row %q not aligned at column %d", l, col)
		}
	}
}

func TestWriteTableCopiesColumn(t *testing.T) {
	rs := []Result{
		{Bench: "store_put", Size: 64, Copies: 3, System: "ftrma-tcp", Value: 40, Unit: "us"},
		{Bench: "store_put", Size: 64, Copies: 3, System: "redis", Value: 38, Unit: "us"},
		{Bench: "store_put", Size: 64, Copies: 2, System: "redis", Value: 30, Unit: "us"},
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rs, []string{"ftrma-tcp", "redis"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	want := [][]string{
		{"bench", "size", "copies", "unit", "ftrma-tcp", "redis", "ratio", "ftrma-tcp/redis"},
		{"store_put", "64", "3", "us", "40.00", "38.00", "1.05"},
		{"store_put", "64", "2", "us", "-", "30.00", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
}

func TestWriteTableRatios(t *testing.T) {
	rs := []Result{
		{Bench: "put_p50", Size: 64, Copies: 3, System: "ftrma-tcp", Value: 20, Unit: "us"},
		{Bench: "put_p50", Size: 64, Copies: 3, System: "hazelcast", Value: 400, Unit: "us"},
		{Bench: "put_p50", Size: 64, Copies: 3, System: "redis", Value: 40, Unit: "us"},
		{Bench: "put_p50", Size: 64, Copies: 2, System: "redis", Value: 30, Unit: "us"},
	}
	systems := []string{"ftrma-tcp", "hazelcast", "redis"}
	var buf bytes.Buffer
	if err := WriteTableRatios(&buf, rs, systems, "ftrma-tcp"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	want := [][]string{
		{"bench", "size", "copies", "unit", "ftrma-tcp", "hazelcast", "redis", "ftrma-tcp/hazelcast", "ftrma-tcp/redis"},
		{"put_p50", "64", "3", "us", "20.00", "400.0", "40.00", "0.05", "0.50"},
		{"put_p50", "64", "2", "us", "-", "-", "30.00", "-", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}

	// Without a base: no ratio columns, even for two systems.
	buf.Reset()
	if err := WriteTableRatios(&buf, rs, systems[1:], ""); err != nil {
		t.Fatal(err)
	}
	head := strings.Fields(strings.SplitN(buf.String(), "\n", 2)[0])
	if !reflect.DeepEqual(head, []string{"bench", "size", "copies", "unit", "hazelcast", "redis"}) {
		t.Errorf("header without base = %q", head)
	}
}

// Finish writes the results and maps the outcome to the exit status.
func TestFinish(t *testing.T) {
	rs := []Result{{Bench: "replace_lat", Size: 4, System: "ftrma-shm", Value: 12.75, Unit: "ms"}}
	path := filepath.Join(t.TempDir(), "out.json")
	if got := Finish(context.Background(), "test", path, rs, 0); got != 0 {
		t.Errorf("all results: status %d, want 0", got)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(f)
	f.Close()
	if err != nil || len(back) != 1 || back[0] != rs[0] {
		t.Errorf("written %v, %v; want %v", back, err, rs)
	}
	if got := Finish(context.Background(), "test", "", rs, 2); got != 3 {
		t.Errorf("missing results: status %d, want 3", got)
	}
	if got := Finish(context.Background(), "test", "", nil, 0); got != 1 {
		t.Errorf("no result: status %d, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := Finish(ctx, "test", "", rs, 0); got != 1 {
		t.Errorf("interrupted: status %d, want 1", got)
	}
	if got := Finish(context.Background(), "test", filepath.Join(t.TempDir(), "no", "such", "dir.json"), rs, 0); got != 1 {
		t.Errorf("unwritable file: status %d, want 1", got)
	}
}
