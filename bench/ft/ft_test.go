package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/result"
)

func TestParseEvent(t *testing.T) {
	tests := []struct {
		line string
		want event
		ok   bool
		err  bool
	}{
		{line: "RESULT agree_lat 8 0.123 ms", ok: true,
			want: event{kind: kResult, res: result.Result{Bench: "agree_lat", Size: 8, Value: 0.123, Unit: "ms"}}},
		{line: "pid 7 4242", ok: true, want: event{kind: kPid, rank: 7, pid: 4242}},
		{line: "[7] pid 7 4242", ok: true, want: event{kind: kPid, rank: 7, pid: 4242}},
		{line: "ready 3", ok: true, want: event{kind: kReady, rank: 3}},
		{line: "knew 2 1700000000123456789", ok: true, want: event{kind: kKnew, rank: 2, nanos: 1700000000123456789}},
		{line: "alsofailed 1 4,6", ok: true, want: event{kind: kAlsoFailed, rank: 1, others: []int{4, 6}}},
		{line: "revoke 3 t0 1700000000000000001", ok: true, want: event{kind: kRevokeT0, round: 3, nanos: 1700000000000000001}},
		{line: "revoke 3 seen 5 1700000000000000002", ok: true, want: event{kind: kRevokeSeen, round: 3, rank: 5, nanos: 1700000000000000002}},
		{line: "op replace 2 100 250", ok: true, want: event{kind: kOp, op: "replace", rank: 2, start: 100, nanos: 250}},
		{line: "op spareinit 3 100 100", ok: true, want: event{kind: kOp, op: "spareinit", rank: 3, start: 100, nanos: 100}},
		{line: "grow 7 100 300 0 0 3750", ok: true, want: event{kind: kGrow, rank: 7, start: 100, nanos: 300, counts: [3]int64{0, 0, 3750}}},
		{line: "error 2 agree MPI_ERR_PROC_FAILED: Process Failure", ok: true, want: event{kind: kError, text: "error 2 agree MPI_ERR_PROC_FAILED: Process Failure"}},

		// not the rank program's: ignored
		{line: "ftrun: rank 3 (pid 99) killed by signal 9", ok: false},
		{line: "", ok: false},
		{line: "pidfile written", ok: false},
		{line: "[2]", ok: false},

		// the rank program's keywords, malformed
		{line: "pid 7", err: true},
		{line: "pid 7 0", err: true},
		{line: "pid x 42", err: true},
		{line: "ready", err: true},
		{line: "ready 1 2", err: true},
		{line: "knew 2", err: true},
		{line: "knew 2 -5", err: true},
		{line: "knew 2 12.5", err: true},
		{line: "alsofailed 1 4,,6", err: true},
		{line: "revoke 3 t0", err: true},
		{line: "revoke 3 t1 100", err: true},
		{line: "revoke 3 seen 100", err: true},
		{line: "revoke x seen 1 100", err: true},
		{line: "revoke 3 seen 1 0", err: true},
		{line: "RESULT agree_lat 8 ms", err: true},
		{line: "op replace 2 100", err: true},
		{line: "op dup 2 100 200", err: true},
		{line: "op shrink 2 200 100", err: true},
		{line: "op shrink 2 0 100", err: true},
		{line: "grow 7 100 300 0 0", err: true},
		{line: "grow 7 300 100 0 0 1", err: true},
		{line: "grow 7 100 300 -1 0 1", err: true},
		{line: "error 2 agree", err: true},
		{line: "error x agree failed", err: true},
	}
	for _, tt := range tests {
		got, ok, err := parseEvent(tt.line)
		if (err != nil) != tt.err {
			t.Errorf("parseEvent(%q) err = %v, want error %v", tt.line, err, tt.err)
			continue
		}
		if ok != tt.ok {
			t.Errorf("parseEvent(%q) ok = %v, want %v", tt.line, ok, tt.ok)
			continue
		}
		if ok && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseEvent(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
}

func TestParseFtrunReport(t *testing.T) {
	tests := []struct {
		line string
		rank int
		ok   bool
	}{
		{"ftrun: rank 31 failed at 0.412s: was killed by signal 9 (killed)", 31, true},
		{"ftrun: rank 12 was declared failed by rank 13's detector at 0.521s: killing it", 12, true},
		{"ftrun: rank 0 exited with status 1", 0, true},
		{"ftrun: 1 rank(s) failed: 12 (at 0.541s); 31 survived", 0, false},
		{"ftrun: timeout (1m30s) expired: killing the job", 0, false},
		{"rank 3: barrier: ftrma: process failed", 0, false}, // a rank's own stderr
		{"  ftrun: rank 3 failed at 1s: killed", 0, false},   // not at the start of the line
		{"ftrun: rank x failed at 1s", 0, false},
	}
	for _, tt := range tests {
		ev, ok := parseFtrunReport(tt.line)
		if ok != tt.ok || (ok && (ev.kind != kRankDown || ev.rank != tt.rank || ev.text != tt.line)) {
			t.Errorf("parseFtrunReport(%q) = %+v, %v; want rank %d, %v", tt.line, ev, ok, tt.rank, tt.ok)
		}
	}
}

func knewAt(pairs ...int64) []event {
	var evs []event
	for i := 0; i < len(pairs); i += 2 {
		evs = append(evs, event{kind: kKnew, rank: int(pairs[i]), nanos: pairs[i+1]})
	}
	return evs
}

func TestEveryoneKnows(t *testing.T) {
	const kill = 1_000_000_000
	// 4 ranks, victim 3: the last survivor knew 2.5 ms after the kill.
	got, err := everyoneKnows(knewAt(0, kill+1_000_000, 2, kill+2_500_000, 1, kill+400_000), 4, 3, kill)
	if err != nil || math.Abs(got-2.5) > 1e-9 {
		t.Errorf("everyoneKnows = %v, %v; want 2.5 ms", got, err)
	}
	// The victim need not be the last rank.
	got, err = everyoneKnows(knewAt(1, kill+3_000_000, 2, kill), 3, 0, kill)
	if err != nil || math.Abs(got-3) > 1e-9 {
		t.Errorf("victim 0: everyoneKnows = %v, %v; want 3 ms", got, err)
	}

	bad := []struct {
		name string
		knew []event
	}{
		{"a survivor missing", knewAt(0, kill+1, 1, kill+2)},
		{"the victim reported", knewAt(0, kill+1, 1, kill+2, 2, kill+3, 3, kill+4)},
		{"a survivor twice", knewAt(0, kill+1, 1, kill+2, 1, kill+3)},
		{"knew before the kill", knewAt(0, kill+1, 1, kill-1, 2, kill+3)},
		{"rank out of range", knewAt(0, kill+1, 1, kill+2, 2, kill+3, 9, kill+4)},
		{"nobody", nil},
	}
	for _, b := range bad {
		if v, err := everyoneKnows(b.knew, 4, 3, kill); err == nil {
			t.Errorf("%s: everyoneKnows = %v, want an error", b.name, v)
		}
	}
}

func TestLastReturn(t *testing.T) {
	const kill = 1_000_000_000
	op := func(name string, rank int, start, end int64) event {
		return event{kind: kOp, op: name, rank: rank, start: start, nanos: end}
	}
	evs := []event{
		op("replace", 0, kill+1e6, kill+5e6),
		op("shrink", 1, kill+1e6, kill+9e6), // another operation: not counted
		op("replace", 1, kill+2e6, kill+7e6),
		op("replace", 2, kill+2e6, kill+6e6),
	}
	got, err := lastReturn(evs, "replace", []int{0, 1, 2}, kill)
	if err != nil || math.Abs(got-7) > 1e-9 {
		t.Errorf("lastReturn = %v, %v; want 7 ms", got, err)
	}
	bad := []struct {
		name string
		evs  []event
		want []int
	}{
		{"a rank missing", evs, []int{0, 1, 2, 3}},
		{"a rank that should not call it", evs, []int{0, 1}},
		{"a rank twice", append(slices.Clone(evs), op("replace", 2, kill+1, kill+2)), []int{0, 1, 2}},
		{"begun before the kill", append(evs[:3:3], op("replace", 2, kill-1, kill+2)), []int{0, 1, 2}},
		{"nobody", nil, []int{0}},
	}
	for _, b := range bad {
		if v, err := lastReturn(b.evs, "replace", b.want, kill); err == nil {
			t.Errorf("%s: lastReturn = %v, want an error", b.name, v)
		}
	}
}

func TestGrowTotals(t *testing.T) {
	g := func(rank int, start, end, keys, bytes int64) event {
		return event{kind: kGrow, rank: rank, start: start, nanos: end, counts: [3]int64{keys, bytes, 0}}
	}
	evs := []event{g(0, 2e6, 5e6, 10, 1200), g(1, 1e6, 9e6, 20, 2400), g(2, 3e6, 4e6, 0, 0)}
	ms, keys, bytes, err := growTotals(evs, 3)
	if err != nil || math.Abs(ms-8) > 1e-9 || keys != 30 || bytes != 3600 {
		t.Errorf("growTotals = %v ms, %d keys, %d bytes, %v; want 8 ms, 30, 3600", ms, keys, bytes, err)
	}
	for name, bad := range map[string][]event{
		"a rank missing":    evs[:2],
		"a rank twice":      append(slices.Clone(evs), g(2, 3e6, 4e6, 0, 0)),
		"rank out of range": append(evs[:2:2], g(5, 3e6, 4e6, 0, 0)),
	} {
		if _, _, _, err := growTotals(bad, 3); err == nil {
			t.Errorf("%s: growTotals gave no error", name)
		}
	}
}

func TestRevokeLatencies(t *testing.T) {
	evs := []event{
		{kind: kRevokeT0, round: 1, nanos: 5_000_000},
		{kind: kRevokeSeen, round: 0, rank: 0, nanos: 1_000_100},
		{kind: kRevokeT0, round: 0, nanos: 1_000_000},
		{kind: kRevokeSeen, round: 0, rank: 2, nanos: 1_300_000},
		{kind: kRevokeSeen, round: 0, rank: 1, nanos: 1_200_000},
		{kind: kRevokeSeen, round: 1, rank: 1, nanos: 5_050_000},
		{kind: kRevokeSeen, round: 1, rank: 0, nanos: 5_000_000},
		{kind: kRevokeSeen, round: 1, rank: 2, nanos: 5_900_000},
		{kind: kKnew, rank: 1, nanos: 1}, // other events are ignored
	}
	got, err := revokeLatencies(evs, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.3, 0.9}
	if len(got) != len(want) {
		t.Fatalf("revokeLatencies = %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("round %d: %v ms, want %v", i, got[i], want[i])
		}
	}

	withOut := func(drop int) []event {
		var out []event
		for i, e := range evs {
			if i != drop {
				out = append(out, e)
			}
		}
		return out
	}
	bad := map[string][]event{
		"a rank missing":    withOut(4),
		"no t0":             withOut(2),
		"seen before t0":    append(withOut(1), event{kind: kRevokeSeen, round: 0, rank: 0, nanos: 999_999}),
		"duplicate seen":    append(evs[:len(evs):len(evs)], event{kind: kRevokeSeen, round: 1, rank: 2, nanos: 5_900_001}),
		"duplicate t0":      append(evs[:len(evs):len(evs)], event{kind: kRevokeT0, round: 1, nanos: 5_000_000}),
		"rank out of range": append(evs[:len(evs):len(evs)], event{kind: kRevokeSeen, round: 1, rank: 3, nanos: 5_900_001}),
		"no rounds":         nil,
	}
	for name, evs := range bad {
		if v, err := revokeLatencies(evs, 3); err == nil {
			t.Errorf("%s: revokeLatencies = %v, want an error", name, v)
		}
	}
}

func TestResultsOrderAndPercentiles(t *testing.T) {
	o := options{sizes: []int{4, 8}, quick: true, detectRuns: 10, collRuns: 3, replaceRuns: 4, growRuns: 3}
	m := &measurement{detect: map[string]map[int][]float64{sysFtrma: {
		8: {1, 2, 3, 4, 10},
		4: {2},
	}}, replace: map[int][]float64{4: {50, 10, 30}}, shrinkK: map[int][]float64{}, failures: map[string]int{},
		grow: map[int][]growSample{8: {{ms: 200, keys: 3700, bytes: 444000, spareHeld: 3700}, {ms: 100, keys: 3600, bytes: 432000, spareHeld: 3600}, {ms: 300, keys: 3800, bytes: 456000, spareHeld: 3800}}}}
	for _, r := range []result.Result{
		{Bench: "revoke_lat", Size: 8, Value: 0.5},
		{Bench: "agree_lat", Size: 8, Value: 0.2},
		{Bench: "agree_lat", Size: 8, Value: 0.4},
		{Bench: "agree_lat", Size: 8, Value: 0.3},
		{Bench: "agree_lat", Size: 4, Value: 0.1},
	} {
		r.System, r.Unit = sysFtrma, "ms"
		if err := m.coll.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	got := m.results(o)
	want := []result.Result{
		{Bench: "detect_p50", Size: 4, Value: 2},
		{Bench: "detect_p50", Size: 8, Value: 3},
		{Bench: "detect_p99", Size: 4, Value: 2},
		{Bench: "detect_p99", Size: 8, Value: 4 + 0.96*6},
		{Bench: "agree_lat", Size: 4, Value: 0.1},
		{Bench: "agree_lat", Size: 8, Value: 0.3},
		{Bench: "revoke_lat", Size: 8, Value: 0.5},
		{Bench: "replace_lat", Size: 4, Value: 30},
		{Bench: "grow_lat", Size: 8, Value: 200},
		{Bench: "grow_keys", Size: 8, Value: 3700, Unit: "keys"},
		{Bench: "grow_bytes", Size: 8, Value: 444000, Unit: "B"},
		{Bench: "grow_new_keys", Size: 8, Value: 3700, Unit: "keys"},
	}
	if len(got) != len(want) {
		t.Fatalf("results = %+v\nwant %+v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.Bench != w.Bench || g.Size != w.Size || math.Abs(g.Value-w.Value) > 1e-9 || g.System != sysFtrma || g.Unit != cmp.Or(w.Unit, "ms") {
			t.Errorf("row %d = %+v, want %s %d %v ms ftrma-tcp", i, g, w.Bench, w.Size, w.Value)
		}
	}
	missing := m.missing(o, got)
	wantMissing := []string{"shrink_lat for N = 4, 8 (every job failed)", "revoke_lat for N = 4 (every job failed)",
		"replace_lat for N = 8 (every job failed)", "kill_shrink_lat for N = 4, 8 (every job failed)",
		"grow_lat for N = 4 (every job failed)", "grow_keys for N = 4 (every job failed)",
		"grow_bytes for N = 4 (every job failed)", "grow_new_keys for N = 4 (every job failed)"}
	if !reflect.DeepEqual(missing, wantMissing) {
		t.Errorf("missing = %q, want %q", missing, wantMissing)
	}
	// Kinds of job not run are not missing.
	o.replaceRuns, o.growRuns = 0, 0
	if missing := m.missing(o, got); !reflect.DeepEqual(missing, wantMissing[:2]) {
		t.Errorf("without replace and grow jobs: missing = %q, want %q", missing, wantMissing[:2])
	}

	// The JSON holds only ftrma-tcp rows, in the required shape.
	var buf bytes.Buffer
	if err := result.WriteJSON(&buf, got); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), colTimeout) || !strings.Contains(buf.String(), `"system": "ftrma-tcp"`) {
		t.Errorf("JSON:\n%s", buf.String())
	}
}

func TestTimeoutColumn(t *testing.T) {
	rs := []result.Result{
		{Bench: "detect_p50", Size: 4, System: sysFtrma, Value: 3, Unit: "ms"},
		{Bench: "agree_lat", Size: 4, System: sysFtrma, Value: 0.1, Unit: "ms"},
	}
	all := withTimeoutColumn(rs, func(int) time.Duration { return 60 * time.Millisecond })
	var buf bytes.Buffer
	if err := result.WriteTable(&buf, all, []string{sysFtrma, colTimeout}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := [][]string{
		{"bench", "size", "unit", sysFtrma, colTimeout, "ratio", sysFtrma + "/" + colTimeout},
		{"detect_p50", "4", "ms", "3.00", "60.00", "0.05"},
		{"agree_lat", "4", "ms", "0.10", "-", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s", buf.String())
	}
	for i, w := range want {
		if f := strings.Fields(lines[i]); !reflect.DeepEqual(f, w) {
			t.Errorf("line %d = %q, want %q", i, f, w)
		}
	}
	if len(rs) != 2 {
		t.Errorf("withTimeoutColumn changed its input")
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.sizes, []int{4, 8, 16, 32}) || o.iters != 50 || o.collRuns != 3 || o.revokeRounds != 10 ||
		o.detectRuns != 10 || o.attempts != 5 {
		t.Errorf("quick defaults: %+v", o)
	}
	if p, to, def := o.detectorSettings(); p != 20*time.Millisecond || to != 60*time.Millisecond || !def {
		t.Errorf("detectorSettings = %v, %v, %v; want ftrun's defaults", p, to, def)
	}
	o, err = parseFlags([]string{"-n", "2,6,6", "-hb-timeout", "200ms", "-detect-runs", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.sizes, []int{2, 6}) || o.iters != 200 || o.detectRuns != 2 {
		t.Errorf("parsed %+v", o)
	}
	if p, to, def := o.detectorSettings(); p != 20*time.Millisecond || to != 200*time.Millisecond || def {
		t.Errorf("detectorSettings = %v, %v, %v", p, to, def)
	}
	args := ftrunArgs(o, binaries{ftrun: "F", rank: "R"}, 6, "-mode", "coll")
	line := strings.Join(args, " ")
	if !strings.HasPrefix(line, "F --oversubscribe -n 6 --timeout 1m30s --transport tcp --hb-timeout 200ms R -mode coll") || strings.Contains(line, "--hb-period") {
		t.Errorf("ftrun command line %q", line)
	}
	if o.replaceRuns != 6 || !o.runs("replace_lat") {
		t.Errorf("replace runs %d (runs: %v), want 6", o.replaceRuns, o.runs("replace_lat"))
	}
	o, err = parseFlags([]string{"-quick", "-only", "replace"})
	if err != nil || o.replaceRuns != 4 || o.detectRuns != 0 || o.collRuns != 0 || o.runs("agree_lat") || !o.runs("kill_shrink_lat") {
		t.Errorf("-only replace: %+v, %v", o, err)
	}
	args = ftrunArgsSpares(o, binaries{ftrun: "F", rank: "R"}, 4, 1, "-mode", "replace")
	if line := strings.Join(args, " "); !strings.HasPrefix(line, "F --oversubscribe -n 4 --timeout 1m30s --transport tcp --respawn=1 R -mode replace") {
		t.Errorf("ftrun command line %q", line)
	}
	for _, bad := range [][]string{{"-only", "detect,x"}, {"-replace-runs", "-1"}, {"-n", "1"}, {"-n", "4,x"}, {"-transport", "udp"}, {"-iters", "-1"}, {"-timeout", "0s"}, {"-attempts", "0"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestTimeoutForStretchesWithRanksPerCPU(t *testing.T) {
	cpus := runtime.NumCPU()
	cases := []struct {
		o    options
		n    int
		want time.Duration
	}{
		{options{}, cpus, 60 * time.Millisecond},
		{options{}, 2*cpus + 1, 3 * 60 * time.Millisecond},
		{options{hbTimeout: 200 * time.Millisecond}, 4 * cpus, 200 * time.Millisecond},
		{options{hbPeriod: 100 * time.Millisecond}, cpus, 300 * time.Millisecond},
	}
	for _, c := range cases {
		if got := c.o.timeoutFor(c.n); got != c.want {
			t.Errorf("%+v, n=%d: %v, want %v", c.o, c.n, got, c.want)
		}
	}
	// The column shows the numbers of the ranks' own rule, not a copy.
	for _, n := range []int{1, cpus, cpus + 1, 5 * cpus} {
		if got, want := (options{}).timeoutFor(n), failure.DefaultLocalConfig(n, cpus).Timeout; got != want {
			t.Errorf("n=%d: %v, the detector's preset says %v", n, got, want)
		}
	}
	if _, to, def := (options{hbPeriod: 100 * time.Millisecond}).detectorSettings(); to != 300*time.Millisecond || def {
		t.Errorf("-hb-period 100ms alone: timeout %v (defaults %v), want 300ms as the ranks use", to, def)
	}
}

// With a peer, each bench's rows are ftrma's and then the peer's for each
// N; the peer's values never stand in for ftrma's, and what the peer
// missed is listed under its name (only for the benches it runs).
func TestResultsWithPeer(t *testing.T) {
	const peer = "ulfm-tcp"
	o := options{sizes: []int{4, 8}, quick: true, detectRuns: 2, collRuns: 1}
	m := &measurement{detect: map[string]map[int][]float64{
		sysFtrma: {4: {1, 3}},
		peer:     {4: {2}, 8: {5}},
	}, failures: map[string]int{"ulfm-tcp agree/shrink/revoke N=8": 2}, firstErr: map[string]string{"ulfm-tcp agree/shrink/revoke N=8": "the program failed: error 0 agree x"}}
	for _, r := range []result.Result{
		{Bench: "agree_lat", Size: 4, System: sysFtrma, Value: 0.1},
		{Bench: "agree_lat", Size: 4, System: peer, Value: 0.03},
		{Bench: "agree_lat", Size: 8, System: sysFtrma, Value: 0.2},
	} {
		r.Unit = "ms"
		if err := m.coll.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	got := m.results(o, peer)
	var rows []string
	for _, r := range got {
		rows = append(rows, fmt.Sprintf("%s %d %s %v", r.Bench, r.Size, r.System, r.Value))
	}
	want := []string{
		"detect_p50 4 ftrma-tcp 2", "detect_p50 4 ulfm-tcp 2", "detect_p50 8 ulfm-tcp 5",
		"detect_p99 4 ftrma-tcp 2.98", "detect_p99 4 ulfm-tcp 2", "detect_p99 8 ulfm-tcp 5",
		"agree_lat 4 ftrma-tcp 0.1", "agree_lat 4 ulfm-tcp 0.03", "agree_lat 8 ftrma-tcp 0.2",
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	missing := m.missing(o, got, peer)
	wantMissing := []string{
		"detect_p50 for N = 8 (every job failed)", "detect_p99 for N = 8 (every job failed)",
		"shrink_lat for N = 4, 8 (every job failed)", "revoke_lat for N = 4, 8 (every job failed)",
		"ulfm-tcp agree_lat for N = 8 (every job failed)", "ulfm-tcp shrink_lat for N = 4, 8 (every job failed)",
		"ulfm-tcp revoke_lat for N = 4, 8 (every job failed)",
	}
	if !reflect.DeepEqual(missing, wantMissing) {
		t.Errorf("missing:\n%s\nwant:\n%s", strings.Join(missing, "\n"), strings.Join(wantMissing, "\n"))
	}
	if len(m.notes) != 1 || !strings.Contains(m.notes[0], "ulfm-tcp agree/shrink/revoke N=8: 2 failed attempt(s)") || !strings.Contains(m.notes[0], "0 of 1 planned") {
		t.Errorf("notes = %q", m.notes)
	}
}

// An mpirun job whose handler has everything (errEnough) ends well even
// when the launcher lingers: after lingerGrace its whole process group is
// killed, the sleeper it left behind included. An error line of the ULFM
// program ends a job at once, as a failure that quotes it.
func TestRunJobMpirunEnds(t *testing.T) {
	defer func(d time.Duration) { lingerGrace = d }(lingerGrace)
	lingerGrace = 100 * time.Millisecond
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "sleeper")
	script := filepath.Join(dir, "fake-mpirun")
	body := "#!/bin/sh\nsleep 600 &\necho $! > " + pidFile + "\necho 'RESULT agree_lat 4 0.05 ms'\nwait\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the sleeper, should the group kill have missed it
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		done <- runJob(ctx, []string{script}, true, time.Minute, func(_ *exec.Cmd, ev event) error {
			if ev.kind == kResult {
				return errEnough
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a lingering mpirun that measured everything: %v, want success", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runJob still waits 30 s after the job measured everything: the lingering group was not killed")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	running := func() bool { // alive and not a zombie waiting for its reaper
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		i := strings.LastIndexByte(string(b), ')')
		return i < 0 || !strings.HasPrefix(string(b[i+1:]), " Z")
	}
	for i := 0; running(); i++ {
		if i == 100 {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the sleeper %d of the lingering mpirun's group still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'error 2 agree MPI_ERR_OTHER: boom'\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = runJob(ctx, []string{script}, true, time.Minute, func(*exec.Cmd, event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "error 2 agree MPI_ERR_OTHER: boom") {
		t.Fatalf("an error line: %v, want a failure quoting it", err)
	}
}
