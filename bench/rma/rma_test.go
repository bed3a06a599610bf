package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ftrma/ftrma/internal/result"
)

func TestQuickPlan(t *testing.T) {
	p := newPlan(true)
	var sizes []int
	for _, s := range p.lat {
		sizes = append(sizes, s.size)
		if s.iters <= 0 || s.warmup <= 0 {
			t.Errorf("size %d: iters %d warmup %d", s.size, s.iters, s.warmup)
		}
	}
	if !reflect.DeepEqual(sizes, []int{8, 64, 1024, 16384, 65536, 1048576}) {
		t.Errorf("quick sizes = %v", sizes)
	}
	if p.expected() != 16 {
		t.Errorf("quick plan expects %d results, want 16", p.expected())
	}
	want := []string{
		"-lat", "8:2000:200,64:2000:200,1024:2000:200,16384:1000:100,65536:500:50,1048576:100:10",
		"-atomic", "2000:200", "-lock", "1000:100", "-rate", "8:64:1000:100",
	}
	if got := p.args(); !reflect.DeepEqual(got, want) {
		t.Errorf("args = %q\nwant %q", got, want)
	}
	want = []string{
		"-lat", "8:200000:20000,64:200000:20000,1024:200000:20000,16384:100000:10000,65536:50000:5000,1048576:10000:1000",
		"-atomic", "200000:20000", "-lock", "100000:10000", "-rate", "8:64:100000:10000",
	}
	if got := p.scaled(100).args(); !reflect.DeepEqual(got, want) {
		t.Errorf("args scaled by 100 = %q\nwant %q", got, want)
	}
	for _, pair := range ratioPairs {
		if sharedMemory(pair[0]) != sharedMemory(pair[1]) {
			t.Errorf("ratio %s/%s compares a shared-memory system with one that is not: their plans differ", pair[0], pair[1])
		}
	}
}

func TestFullPlanEveryPowerOfTwo(t *testing.T) {
	p := newPlan(false)
	if len(p.lat) != 18 {
		t.Fatalf("full plan has %d sizes, want 18 (8 B .. 1 MiB)", len(p.lat))
	}
	for i, s := range p.lat {
		if s.size != 8<<i {
			t.Errorf("size %d = %d, want %d", i, s.size, 8<<i)
		}
	}
	// Iterations never grow with size.
	if !slices.IsSortedFunc(p.lat, func(a, b latStep) int { return b.iters - a.iters }) {
		t.Errorf("iterations grow with size: %v", p.lat)
	}
}

func TestParseOmpiInfo(t *testing.T) {
	out := `                 Package: Debian OpenMPI
                Open MPI: 4.1.4
                 MCA btl: tcp (MCA v2.1.0, API v3.1.0, Component v4.1.4)
                 MCA btl: vader (MCA v2.1.0, API v3.1.0, Component v4.1.4)
                 MCA btl: self (MCA v2.1.0, API v3.1.0, Component v4.1.4)
                 MCA osc: pt2pt (MCA v2.1.0, API v3.0.0, Component v4.1.4)
                 MCA osc: sm (MCA v2.1.0, API v3.0.0, Component v4.1.4)
                 MCA osc: rdma (MCA v2.1.0, API v3.0.0, Component v4.1.4)
                 MCA pml: ob1 (MCA v2.1.0, API v2.0.0, Component v4.1.4)
`
	info := parseOmpiInfo([]byte(out))
	if info.version != "4.1.4" {
		t.Errorf("version %q", info.version)
	}
	if got := keys(info.osc); !reflect.DeepEqual(got, []string{"pt2pt", "rdma", "sm"}) {
		t.Errorf("osc = %v", got)
	}
	if got := keys(info.btl); !reflect.DeepEqual(got, []string{"self", "tcp", "vader"}) {
		t.Errorf("btl = %v", got)
	}
	if b := info.shmBTL(); b != "vader" {
		t.Errorf("shmBTL = %q, want vader", b)
	}

	info = parseOmpiInfo([]byte(strings.ReplaceAll(out, "MCA osc: pt2pt", "MCA osc: ucx")))
	if info.osc["pt2pt"] || !info.osc["ucx"] {
		t.Errorf("osc without pt2pt = %v", keys(info.osc))
	}
	// Open MPI 5 renamed btl vader to sm.
	info = parseOmpiInfo([]byte(strings.ReplaceAll(out, "MCA btl: vader", "MCA btl: sm")))
	if b := info.shmBTL(); b != "sm" {
		t.Errorf("Open MPI 5 shmBTL = %q, want sm", b)
	}
	info = parseOmpiInfo([]byte(strings.ReplaceAll(out, "MCA btl: vader", "MCA btl: ofi")))
	if b := info.shmBTL(); b != "" {
		t.Errorf("shmBTL without vader or sm = %q, want none", b)
	}
	if v := parseOmpiInfo(nil).version; v != "(unknown version)" {
		t.Errorf("empty output: version %q", v)
	}
}

func TestParseMPICHVersion(t *testing.T) {
	// Debian 12's mpichversion, with its tabs.
	out := "MPICH Version:    \t4.0.2\n" +
		"MPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\n" +
		"MPICH Device:    \tch4:ucx\n" +
		"MPICH configure: \t--with-device=ch4:ucx --with-pm=hydra\n"
	v, d := parseMPICHVersion([]byte(out))
	if v != "4.0.2" || d != "ch4:ucx" {
		t.Errorf("got version %q device %q, want 4.0.2 ch4:ucx", v, d)
	}
	v, d = parseMPICHVersion([]byte("garbage\n"))
	if v != "(unknown version)" || d != "(unknown device)" {
		t.Errorf("garbage: version %q device %q", v, d)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.only, allSystems) || o.rounds != 7 {
		t.Errorf("-quick: only %v rounds %d, want every system and 7 rounds", o.only, o.rounds)
	}
	want := []string{"ftrma-tcp", "ftrma-tcp-sealed", "openmpi-tcp", "ftrma-shm", "ftrma-shm-slow", "openmpi-shm", "mpich"}
	if !reflect.DeepEqual(allSystems, want) {
		t.Errorf("systems %v, want %v", allSystems, want)
	}

	for _, tc := range []struct {
		only string
		want []string
	}{
		{"mpich", []string{"mpich"}},
		{"openmpi-shm", []string{"openmpi-shm"}},
		{"ftrma-tcp", []string{"ftrma-tcp"}},
		// Any order in, round order out; repeats once.
		{"mpich, ftrma-shm,ftrma-shm", []string{"ftrma-shm", "mpich"}},
	} {
		o, err := parseFlags([]string{"-only", tc.only})
		if err != nil {
			t.Errorf("-only %q: %v", tc.only, err)
			continue
		}
		if !reflect.DeepEqual(o.only, tc.want) {
			t.Errorf("-only %q = %v, want %v", tc.only, o.only, tc.want)
		}
	}

	o, err = parseFlags([]string{"-ftrun-args", "--hb-timeout 200ms --spin=-1"})
	if err != nil || !reflect.DeepEqual(o.ftrunArgs, []string{"--hb-timeout", "200ms", "--spin=-1"}) {
		t.Errorf("-ftrun-args: %q, %v", o.ftrunArgs, err)
	}

	for _, bad := range [][]string{
		{"-only", "ftrma"},   // the old name of ftrma-tcp
		{"-only", "openmpi"}, // no such system
		{"-only", "mpich,"},
		{"-ftrun-args", "--transport shm"},
		{"-ftrun-args", "-v -transport=tcp"},
		{"-rounds", "-1"},
		{"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestArgv(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []string
		want string
	}{
		{"ftrma-tcp", ftrmaArgv("ftrun", "rank", ftrmaTransports[sysFtrmaTCP], nil),
			"ftrun --transport tcp -n 2 rank"},
		{"ftrma-shm", ftrmaArgv("ftrun", "rank", ftrmaTransports[sysFtrmaSHM], []string{"--spin", "1ms"}),
			"ftrun --transport shm --spin 1ms -n 2 rank"},
		{"openmpi-tcp", openMPIArgv("mpirun.openmpi", "bin", "tcp", "pt2pt", ""),
			"mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,tcp --mca osc pt2pt " +
				"--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np 2 bin"},
		{"openmpi-tcp ucx", openMPIArgv("mpirun", "bin", "tcp", "ucx", ""),
			"mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,tcp --mca osc ucx " +
				"--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x UCX_TLS=self,tcp -x UCX_NET_DEVICES=lo -np 2 bin"},
		{"openmpi-shm", openMPIArgv("mpirun.openmpi", "bin", "shm", "", "vader"),
			"mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader --mca osc sm " +
				"--mca oob_tcp_if_include lo -np 2 bin"},
		{"mpich", mpichArgv("mpiexec.mpich", "bin"), "mpiexec.mpich -n 2 bin"},
	} {
		if got := strings.Join(tc.got, " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestTableRatios(t *testing.T) {
	medians := []result.Result{
		{Bench: "put_lat", Size: 8, System: sysFtrmaTCP, Value: 30, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: sysFtrmaTCPSealed, Value: 33, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: sysOpenMPITCP, Value: 20, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: sysFtrmaSHM, Value: 0.5, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: sysOpenMPISHM, Value: 0.25, Unit: "us"},
		{Bench: "put_lat", Size: 8, System: sysMPICH, Value: 2, Unit: "us"},
		{Bench: "put_rate", Size: 8, System: sysFtrmaSHM, Value: 2e6, Unit: "ops/s"},
		{Bench: "put_rate", Size: 8, System: sysOpenMPISHM, Value: 3e7, Unit: "ops/s"},
		// mpich has no put_rate: its ratio cell is "-".
	}
	var b strings.Builder
	if err := writeTable(&b, medians, allSystems); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want 3:\n%s", len(lines), b.String())
	}
	fields := func(i int) string { return strings.Join(strings.Fields(lines[i]), " ") }
	for i, want := range []string{
		"bench size unit ftrma-tcp ftrma-tcp-sealed openmpi-tcp ftrma-shm ftrma-shm-slow openmpi-shm mpich ftrma-tcp/openmpi-tcp ftrma-tcp-sealed/ftrma-tcp ftrma-tcp-sealed/openmpi-tcp ftrma-shm/openmpi-shm ftrma-shm/ftrma-shm-slow ftrma-shm/mpich",
		// ftrma-shm-slow has no results: its column and ratio are "-".
		"put_lat 8 us 30.00 33.00 20.00 0.50 - 0.25 2.00 1.50 1.10 1.65 2.00 - 0.25",
		"put_rate 8 ops/s - - - 2000000 - 30000000 - - - - 0.07 - -",
	} {
		if got := fields(i); got != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, got, want)
		}
	}

	// A ratio column needs both of its systems.
	b.Reset()
	if err := writeTable(&b, medians, []string{sysFtrmaSHM, sysMPICH}); err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(b.String(), "\n")
	if got := strings.Join(strings.Fields(head), " "); got != "bench size unit ftrma-shm mpich ftrma-shm/mpich" {
		t.Errorf("-only ftrma-shm,mpich header: %s", got)
	}
}
