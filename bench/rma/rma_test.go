package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"
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
                 MCA osc: pt2pt (MCA v2.1.0, API v3.0.0, Component v4.1.4)
                 MCA osc: sm (MCA v2.1.0, API v3.0.0, Component v4.1.4)
                 MCA osc: rdma (MCA v2.1.0, API v3.0.0, Component v4.1.4)
                 MCA pml: ob1 (MCA v2.1.0, API v2.0.0, Component v4.1.4)
`
	v, osc := parseOmpiInfo([]byte(out))
	if v != "4.1.4" {
		t.Errorf("version %q", v)
	}
	got := keys(osc)
	slices.Sort(got)
	if !reflect.DeepEqual(got, []string{"pt2pt", "rdma", "sm"}) {
		t.Errorf("osc = %v", got)
	}

	_, osc = parseOmpiInfo([]byte(strings.ReplaceAll(out, "MCA osc: pt2pt", "MCA osc: ucx")))
	if osc["pt2pt"] || !osc["ucx"] {
		t.Errorf("osc without pt2pt = %v", keys(osc))
	}
}
