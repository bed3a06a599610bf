package main

import (
	"reflect"
	"testing"
)

func TestParsePlan(t *testing.T) {
	// The flags the driver passes in -quick mode (bench/rma TestQuickPlan).
	args := []string{
		"-lat", "8:2000:200,1048576:100:10",
		"-atomic", "2000:200", "-lock", "1000:100", "-rate", "8:64:1000:100",
	}
	p, err := parsePlan(args)
	if err != nil {
		t.Fatal(err)
	}
	if want := []step{{8, 2000, 200}, {1048576, 100, 10}}; !reflect.DeepEqual(p.lat, want) {
		t.Errorf("lat = %v, want %v", p.lat, want)
	}
	if p.atomic == nil || *p.atomic != (step{8, 2000, 200}) {
		t.Errorf("atomic = %v", p.atomic)
	}
	if p.lock == nil || *p.lock != (step{8, 1000, 100}) {
		t.Errorf("lock = %v", p.lock)
	}
	if !p.rate || p.rateSize != 8 || p.rateWindow != 64 || p.rateBatches != 1000 || p.rateWarmup != 100 {
		t.Errorf("rate = %+v", p)
	}
	if got := p.windowBytes(); got != 1048576 {
		t.Errorf("windowBytes = %d, want 1048576", got)
	}

	p, err = parsePlan(nil)
	if err != nil || p.lat != nil || p.atomic != nil || p.lock != nil || p.rate {
		t.Errorf("empty plan = %+v, %v", p, err)
	}
	if p.windowBytes() != 8 {
		t.Errorf("empty plan windowBytes = %d, want 8", p.windowBytes())
	}

	for _, bad := range [][]string{
		{"-lat", "8:2000"},
		{"-lat", "0:10:1"},
		{"-lat", "8:x:1"},
		{"-atomic", "0:1"},
		{"-rate", "8:64:100"},
		{"-lock", "10:1", "extra"},
	} {
		if _, err := parsePlan(bad); err == nil {
			t.Errorf("parsePlan(%q) accepted", bad)
		}
	}
}
