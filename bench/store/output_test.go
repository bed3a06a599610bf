package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

func TestParseFtkvOutput(t *testing.T) {
	jsonOut := `[0] starting
[0] [{"bench":"put_p50","size":64,"copies":3,"value":12.5,"unit":"us"},{"bench":"put_p99","size":64,"copies":3,"value":0.04,"unit":"ms"},{"bench":"get_p50","size":64,"value":9000,"unit":"ns"},{"bench":"put_rate","size":64,"copies":3,"value":1e5,"unit":"ops/s"}]
[1] done
`
	rs, err := parseFtkvOutput([]byte(jsonOut), sysFtrma, 64, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []result.Result{
		{Bench: benchPutP50, Size: 64, Copies: 3, System: sysFtrma, Value: 12.5, Unit: "us"},
		{Bench: benchPutP99, Size: 64, Copies: 3, System: sysFtrma, Value: 40, Unit: "us"},
		{Bench: benchGetP50, Size: 64, Copies: 3, System: sysFtrma, Value: 9, Unit: "us"},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %+v", rs)
	}
	for i := range want {
		if rs[i].Bench != want[i].Bench || math.Abs(rs[i].Value-want[i].Value) > 1e-9 || rs[i].Size != 64 || rs[i].Copies != 3 || rs[i].System != sysFtrma || rs[i].Unit != "us" {
			t.Errorf("result %d = %+v, want %+v", i, rs[i], want[i])
		}
	}

	lines := "RESULT put_p50 4096 20 us copies=2\n[0] RESULT put_p99 4096 80 us copies=2\nRESULT get_p50 4096 7.5 us\nRESULT put_p999 4096 300 us copies=2\n"
	rs, err = parseFtkvOutput([]byte(lines), sysFtrmaSHM, 4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Value != 20 || rs[1].Value != 80 || rs[2].Value != 7.5 {
		t.Errorf("RESULT lines gave %+v", rs)
	}

	for name, bad := range map[string]string{
		"missing get_p50": "RESULT put_p50 64 1 us\nRESULT put_p99 64 2 us\n",
		"wrong size":      "RESULT put_p50 128 1 us\nRESULT put_p99 64 2 us\nRESULT get_p50 64 1 us\n",
		"wrong copies":    `[{"bench":"put_p50","copies":5,"value":1,"unit":"us"}]`,
		"bad unit":        "RESULT put_p50 64 1 furlongs\nRESULT put_p99 64 2 us\nRESULT get_p50 64 1 us\n",
		"bad JSON":        `[{"bench":"put_p50",`,
		"nothing":         "",
	} {
		if rs, err := parseFtkvOutput([]byte(bad), sysFtrma, 64, 3); err == nil {
			t.Errorf("%s: accepted, gave %+v", name, rs)
		}
	}
}

func TestFtrmaArgv(t *testing.T) {
	s := &ftrmaSystem{name: sysFtrmaSHM, ftrun: "/t/ftrun", ftkv: "/t/ftkv", ranks: 8, ftrunArgs: []string{"--spin", "0"}}
	wl := workload{Writers: 8, KeysPerWriter: 16, Warmup: 50, Gets: 100}
	got := strings.Join(s.argv(3, 64, 400, wl, time.Minute), " ")
	want := "/t/ftrun --timeout 1m0s --transport shm --oversubscribe --spin 0 -n 8 /t/ftkv bench --copies 3 --size 64 --ops 400 -json --writers 8 --keys 16 --warmup 50 --gets 100"
	if got != want {
		t.Errorf("argv = %q\nwant    %q", got, want)
	}
	if s.Supports(9) == "" || s.Supports(8) != "" {
		t.Error("Supports: 9 copies on 8 ranks should be refused, 8 accepted")
	}
}

// sampleMedians is what a run of three peers and ftrma could produce.
func sampleMedians() []result.Result {
	var rs []result.Result
	add := func(sys string, size, copies int, p50 float64) {
		rs = append(rs,
			result.Result{Bench: benchGetP50, Size: size, Copies: copies, System: sys, Value: p50 / 2, Unit: "us"},
			result.Result{Bench: benchPutP99, Size: size, Copies: copies, System: sys, Value: p50 * 3, Unit: "us"},
			result.Result{Bench: benchPutP50, Size: size, Copies: copies, System: sys, Value: p50, Unit: "us"})
	}
	for _, size := range []int{4096, 64} {
		for _, k := range []int{1, 2, 3, 6} {
			add(sysHazelcast, size, k, 400*float64(k)+float64(size)/100)
			add(sysRedis, size, k, 40*float64(k)+float64(size)/1000)
			add(sysFtrma, size, k, 10*float64(k))
		}
		add(sysEtcd, size, 3, 1500)
	}
	return rs
}

func TestTableAndJSONShape(t *testing.T) {
	rs := sampleMedians()
	sortResults(rs)
	// Rows: put_p50 first, then put_p99, get_p50; sizes and copies ascending.
	for i := 1; i < len(rs); i++ {
		a, b := rs[i-1], rs[i]
		ai, bi := slices.Index(benchOrder, a.Bench), slices.Index(benchOrder, b.Bench)
		if ai > bi || ai == bi && (a.Size > b.Size || a.Size == b.Size && a.Copies > b.Copies) {
			t.Fatalf("not sorted at %d: %+v before %+v", i, a, b)
		}
	}
	var buf bytes.Buffer
	peers := []string{sysFtrma, sysHazelcast, sysRedis, sysEtcd}
	if err := result.WriteTableRatios(&buf, rs, peers, sysFtrma); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	head := strings.Fields(lines[0])
	wantHead := []string{"bench", "size", "copies", "unit", sysFtrma, sysHazelcast, sysRedis, sysEtcd,
		"ftrma-tcp/hazelcast", "ftrma-tcp/redis", "ftrma-tcp/etcd"}
	if !slices.Equal(head, wantHead) {
		t.Errorf("header %q, want %q", head, wantHead)
	}
	// 3 benches x 2 sizes x 4 copy counts.
	if len(lines) != 1+3*2*4 {
		t.Errorf("%d table lines, want %d:\n%s", len(lines), 1+3*2*4, buf.String())
	}
	// The copies=3 row of put_p50 at 64 B has every column and ratio.
	var row []string
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == benchPutP50 && f[1] == "64" && f[2] == "3" {
			row = f
		}
	}
	wantRow := []string{benchPutP50, "64", "3", "us", "30.00", "1200.6", "120.1", "1500.0", "0.02", "0.25", "0.02"}
	if !slices.Equal(row, wantRow) {
		t.Errorf("row %q, want %q", row, wantRow)
	}

	buf.Reset()
	if err := result.WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, m := range raw {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"bench", "copies", "size", "system", "unit", "value"}) {
			t.Fatalf("JSON object has keys %q", keys)
		}
		if !slices.Contains(benchOrder, m["bench"].(string)) || !slices.Contains(allSystems, m["system"].(string)) || m["unit"] != "us" {
			t.Errorf("JSON object %v", m)
		}
	}
}

func TestPlotSeries(t *testing.T) {
	ss := plotSeries(sampleMedians())
	var labels []string
	for _, s := range ss {
		labels = append(labels, s.label)
	}
	want := []string{"ftrma-tcp 64 B", "ftrma-tcp 4 KiB", "hazelcast 64 B", "hazelcast 4 KiB", "redis 64 B", "redis 4 KiB", "etcd 64 B", "etcd 4 KiB"}
	if !slices.Equal(labels, want) {
		t.Errorf("series %q, want %q", labels, want)
	}
	for _, s := range ss {
		n := 4
		if strings.HasPrefix(s.label, sysEtcd) {
			n = 1
		}
		if len(s.points) != n {
			t.Errorf("%s: %d points, want %d", s.label, len(s.points), n)
		}
		for i := 1; i < len(s.points); i++ {
			if s.points[i].x <= s.points[i-1].x {
				t.Errorf("%s: points not ordered by copies: %v", s.label, s.points)
			}
		}
	}
	if ss[2].points[3] != (point{6, 2400.64}) { // hazelcast 64 B at 6 copies: put_p50, not p99 or get
		t.Errorf("hazelcast 64 B last point %v", ss[2].points[3])
	}
}

func TestWritePlotSVG(t *testing.T) {
	ss := plotSeries(sampleMedians())
	var buf bytes.Buffer
	if err := writePlot(&buf, "put p50 <&> copies", "copies", "us", ss); err != nil {
		t.Fatal(err)
	}
	var (
		groups    []string
		polylines int
		circles   = make(map[string][]float64) // label -> cy of its points
		texts     []string
		cur       string
		inText    bool
	)
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, buf.String())
		}
		switch e := tok.(type) {
		case xml.StartElement:
			attr := func(n string) string {
				for _, a := range e.Attr {
					if a.Name.Local == n {
						return a.Value
					}
				}
				return ""
			}
			switch e.Name.Local {
			case "svg":
				if e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("svg namespace %q", e.Name.Space)
				}
			case "g":
				cur = attr("data-label")
				groups = append(groups, cur)
			case "polyline":
				polylines++
				if n := len(strings.Fields(attr("points"))); n < 2 {
					t.Errorf("polyline with %d points", n)
				}
			case "circle":
				if attr("class") != "pt" {
					break // a legend marker
				}
				y, err := strconv.ParseFloat(attr("cy"), 64)
				if err != nil {
					t.Fatalf("circle cy %q", attr("cy"))
				}
				circles[cur] = append(circles[cur], y)
			case "text":
				inText = true
			}
		case xml.EndElement:
			if e.Name.Local == "text" {
				inText = false
			}
		case xml.CharData:
			if inText {
				texts = append(texts, string(e))
			}
		}
	}
	var labels []string
	for _, s := range ss {
		labels = append(labels, s.label)
	}
	if !slices.Equal(groups, labels) {
		t.Errorf("groups %q, want one per series %q", groups, labels)
	}
	if polylines != len(ss)-2 { // etcd's two series have one point each: markers only
		t.Errorf("%d polylines, want %d", polylines, len(ss)-2)
	}
	for _, l := range labels {
		if !slices.Contains(texts, l) {
			t.Errorf("legend lacks %q", l)
		}
	}
	if !slices.Contains(texts, "put p50 <&> copies") {
		t.Errorf("title missing or badly escaped; texts %q", texts)
	}
	// Larger values lie higher (smaller y): hazelcast above redis above ftrma.
	hz, rd, ft := circles["hazelcast 64 B"], circles["redis 64 B"], circles["ftrma-tcp 64 B"]
	if len(hz) != 4 || len(rd) != 4 || len(ft) != 4 {
		t.Fatalf("markers: %d %d %d", len(hz), len(rd), len(ft))
	}
	for i := range hz {
		if !(hz[i] < rd[i] && rd[i] < ft[i]) {
			t.Errorf("copies index %d: y hazelcast %v, redis %v, ftrma %v", i, hz[i], rd[i], ft[i])
		}
		if i > 0 && !(hz[i] < hz[i-1]) {
			t.Errorf("hazelcast's rising latency does not rise on the plot: %v", hz)
		}
	}

	if err := writePlot(io.Discard, "t", "x", "y", []series{{label: "bad", points: []point{{1, 0}}}}); err == nil {
		t.Error("a zero value on the log scale was accepted")
	}
	buf.Reset()
	if err := writePlot(&buf, "empty", "x", "y", nil); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(buf.Bytes(), new(struct{})); err != nil {
		t.Errorf("empty plot is not XML: %v", err)
	}
}

func TestWritePlotFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.svg")
	if err := writePlotFile(path, sampleMedians(), newPlan(true)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("<svg")) || !bytes.Contains(b, []byte("redis 4 KiB")) {
		t.Errorf("plot file starts %q", b[:min(len(b), 40)])
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick", "-json", "/tmp/x/out.json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.plan.copies, []int{1, 2, 3, 6}) || !slices.Equal(o.plan.sizes, []int{64, 4096}) || o.plan.writers != 8 {
		t.Errorf("quick plan %+v", o.plan)
	}
	if o.svgPath != "/tmp/x/out.svg" {
		t.Errorf("svg path %q", o.svgPath)
	}
	if o.hzBackup != 5*time.Second {
		t.Errorf("default Hazelcast backup timeout %v, want Hazelcast's 5s", o.hzBackup)
	}
	if !o.wanted(sysEtcd) || !o.wanted(sysFtrma) {
		t.Error("without -only every system is wanted")
	}

	o, err = parseFlags([]string{"-only", "redis,etcd", "-copies", "3,1,3", "-sizes", "4K,64", "-rounds", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.wanted(sysRedis) || o.wanted(sysHazelcast) || !slices.Equal(o.plan.copies, []int{1, 3}) ||
		!slices.Equal(o.plan.sizes, []int{64, 4096}) || o.plan.rounds != 2 {
		t.Errorf("options %+v", o)
	}

	for _, bad := range [][]string{
		{"-only", "mongodb"},
		{"-only", "ftrma-tcp", "-ftkv", ""}, // nothing left to measure
		{"-copies", "0"},
		{"-sizes", "x"},
		{"-rounds", "-1"},
		{"-hz-backup-timeout", "0s"},
		{"extra"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h gave %v", err)
	}
}

func TestPlan(t *testing.T) {
	p := newPlan(true)
	if wl := p.workload(64); wl.Puts != 400 || wl.Warmup != 50 || wl.validate() != nil {
		t.Errorf("64 B workload %+v", wl)
	}
	if wl := p.workload(1 << 20); wl.Puts != 40 || wl.validate() != nil {
		t.Errorf("1 MiB workload %+v: want a tenth of the puts", wl)
	}
	if !strings.Contains(p.describe(), "copies 1,2,3,6") {
		t.Errorf("describe: %s", p.describe())
	}
	got, err := parseInts("1M, 64,4k,64")
	if err != nil || !slices.Equal(got, []int{64, 4096, 1 << 20}) {
		t.Errorf("parseInts = %v, %v", got, err)
	}
	for n, want := range map[int]string{64: "64 B", 4096: "4 KiB", 1 << 20: "1 MiB", 1500: "1500 B"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSortResultsStable(t *testing.T) {
	rs := []result.Result{
		{Bench: "other", Size: 1, System: sysRedis, Value: 1, Unit: "us"},
		{Bench: benchGetP50, Size: 64, Copies: 1, System: sysRedis, Value: 1, Unit: "us"},
		{Bench: benchPutP50, Size: 64, Copies: 2, System: sysRedis, Value: 1, Unit: "us"},
		{Bench: benchPutP50, Size: 64, Copies: 2, System: sysHazelcast, Value: 1, Unit: "us"},
	}
	sortResults(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.Bench+"/"+r.System)
	}
	want := []string{"put_p50/hazelcast", "put_p50/redis", "get_p50/redis", "other/redis"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}
