package main

import (
	"strings"
	"testing"
)

const report = ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]
 8       2000          %s           %s        %s     	       %s        	0.47   		2.24    		12.20
---------------------------------------------------------------------------------------
`

func TestParsePerftest(t *testing.T) {
	ok := strings.NewReplacer("%%", "%", "%s", "1.97").Replace(report)
	if v, err := parsePerftest([]byte(ok)); err != nil || v != 1.97 {
		t.Errorf("a good report: %v, %v; want 1.97", v, err)
	}
	// perftest's clock calibration failed under load: every time is inf.
	inf := "Correlation coefficient r^2: 0.42 < 0.9.\n" + strings.NewReplacer("%%", "%", "%s", "inf").Replace(report)
	if v, err := parsePerftest([]byte(inf)); err == nil || !strings.Contains(err.Error(), "t_avg is inf") || !strings.Contains(err.Error(), "Correlation") {
		t.Errorf("an inf report: %v, %v; want an error quoting the output", v, err)
	}
	zero := strings.NewReplacer("%%", "%", "%s", "0.00").Replace(report)
	if _, err := parsePerftest([]byte(zero)); err == nil {
		t.Error("a zero t_avg was accepted")
	}
	if _, err := parsePerftest([]byte("Couldn't connect to 127.0.0.1\n")); err == nil {
		t.Error("a report without t_avg was accepted")
	}
}

func TestRoundRatios(t *testing.T) {
	// Round 2 ran on a loaded host: both of its times are high, its ratio is not.
	med, lo, hi, err := roundRatios([]float64{20, 200, 30}, []float64{10, 100, 10}, 1)
	if err != nil || med != 2 || lo != 2 || hi != 3 {
		t.Errorf("roundRatios = %v %v %v %v; want 2 2 3", med, lo, hi, err)
	}
	if med, _, _, _ := roundRatios([]float64{40}, []float64{10}, 2); med != 2 {
		t.Errorf("factor 2: %v, want 2", med)
	}
	if _, _, _, err := roundRatios([]float64{1, 2}, []float64{1}, 1); err == nil {
		t.Error("unpaired samples were accepted")
	}
}

func TestClockWarnings(t *testing.T) {
	out := "Warning: measured timestamp frequency 2190.5 differs from nominal 2400 MHz.\n" +
		strings.NewReplacer("%%", "%", "%s", "1.97").Replace(report)
	ws := clockWarnings([]byte(out))
	if len(ws) != 1 || !strings.HasPrefix(ws[0], "Warning: measured timestamp frequency") {
		t.Errorf("clockWarnings = %q", ws)
	}
	if ws := clockWarnings([]byte(strings.NewReplacer("%%", "%", "%s", "1.97").Replace(report))); len(ws) != 0 {
		t.Errorf("warnings in a clean report: %q", ws)
	}
}
